#!/usr/bin/env bash
# install_check.sh: the library as a package, outside CMake (cmake_check.sh
# does CMake's side):
#  - build/: libcecoll.so -> libcecoll.so.N -> libcecoll.so.VERSION (SONAME
#    libcecoll.so.N), the headers in build/include/cecoll/ only;
#  - make install and make install-dropin, staged with DESTDIR: the same
#    links and headers, nothing at include/ that would shadow a real NCCL's
#    nccl.h, the drop-in copies with the SONAMEs of what they stand in for;
#  - pkg-config from that prefix: the version, and a program built with
#    `pkg-config --cflags --libs cecoll` and #include <cecoll/nccl.h> runs.
# Exits 77 (skip) after the layout checks when pkg-config is absent.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
version=$(cat "$root/VERSION")
major=${version%%.*}
CC=${CC:-gcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
fail() { echo "install_check.sh: FAIL: $*"; exit 1; }
soname() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }
command -v readelf >/dev/null || fail "readelf not found (binutils)"

libdir_ok() { # $1 a lib/ folder
  [ -f "$1/libcecoll.so.$version" ] || fail "$1/libcecoll.so.$version missing"
  [ "$(readlink "$1/libcecoll.so.$major")" = "libcecoll.so.$version" ] || fail "$1/libcecoll.so.$major is not a link to libcecoll.so.$version"
  [ "$(readlink "$1/libcecoll.so")" = "libcecoll.so.$major" ] || fail "$1/libcecoll.so is not a link to libcecoll.so.$major"
  [ "$(soname "$1/libcecoll.so.$version")" = "libcecoll.so.$major" ] || fail "$1/libcecoll.so.$version: SONAME '$(soname "$1/libcecoll.so.$version")', want libcecoll.so.$major"
}
headers_ok() { # $1 an include/ folder
  for h in nccl.h nccl_ce.h; do
    [ -f "$1/cecoll/$h" ] || fail "$1/cecoll/$h missing"
    [ ! -e "$1/$h" ] || fail "$1/$h exists: it would shadow a real NCCL's"
  done
}

echo "== build/"
libdir_ok "$root/build"
headers_ok "$root/build/include"
passed=$((passed + 1))

echo "== make install, make install-dropin (DESTDIR=$tmp/stage PREFIX=/opt/cecoll)"
make -s -C "$root" install install-dropin DESTDIR="$tmp/stage" PREFIX=/opt/cecoll >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "make install"; }
p=$tmp/stage/opt/cecoll
libdir_ok "$p/lib"
headers_ok "$p/include"
for f in lib/cmake/cecoll/cecollConfig.cmake lib/cmake/cecoll/cecollConfigVersion.cmake lib/pkgconfig/cecoll.pc; do
  [ -f "$p/$f" ] || fail "$p/$f missing"
done
for d in libnccl.so.2 librccl.so.1; do
  [ "$(soname "$p/lib/cecoll-dropin/$d")" = "$d" ] || fail "drop-in $d: SONAME '$(soname "$p/lib/cecoll-dropin/$d")'"
done
passed=$((passed + 1))

if ! command -v pkg-config >/dev/null; then
  echo "!!!! install_check.sh: pkg-config not found: the pkg-config check is SKIPPED (apt-get install pkgconf) !!!!" >&2
  echo "install_check.sh: $passed passed, 0 failed, pkg-config SKIPPED"
  exit 77
fi
echo "== pkg-config cecoll from $p/lib/pkgconfig"
export PKG_CONFIG_PATH=$p/lib/pkgconfig
got=$(pkg-config --modversion cecoll) || fail "pkg-config does not find cecoll"
[ "$got" = "$version" ] || fail "pkg-config --modversion cecoll: $got, want $version"
pkg-config --exists "cecoll >= $version" || fail "pkg-config: cecoll >= $version not satisfied"
flags=$(pkg-config --cflags --libs cecoll)
echo "pkg-config --cflags --libs cecoll: $flags"
# shellcheck disable=SC2086 # the flags are words
$CC -Wall -Werror -o "$tmp/consumer" "$here/cmake-consumer/main.c" $flags || fail "building with pkg-config's flags"
[ "$(readelf -d "$tmp/consumer" | sed -n 's/.*(NEEDED).*\[\(libcecoll[^]]*\)\]/\1/p')" = "libcecoll.so.$major" ] ||
  fail "the program does not need libcecoll.so.$major"
LD_LIBRARY_PATH="$p/lib" CECOLL_BACKEND=host "$tmp/consumer" || fail "the program built with pkg-config's flags"
passed=$((passed + 1))
echo "install_check.sh: $passed passed, 0 failed"
