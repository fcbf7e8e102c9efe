#!/usr/bin/env bash
# cmake_check.sh: the CMake side works end to end: configure and build the
# tests with CMakeLists.txt, install into a scratch prefix, then configure,
# build and run ctests/cmake-consumer against that prefix with
# find_package(cecoll 2.28) (the NCCL API) and find_package(cecoll <VERSION>)
# (cecoll's own), and check that a version it does not provide is refused.
# Also from a `make install` prefix staged with DESTDIR (the config files are
# relocatable). Exits 77 (skip) when cmake is absent.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
if ! command -v cmake >/dev/null; then
  echo "cmake_check.sh: SKIPPED: cmake not found" >&2
  exit 77
fi
lib=${CECOLL_LIB:-$root/build/libcecoll.so}
[ -f "$lib" ] || { echo "cmake_check.sh: $lib missing: run make first" >&2; exit 1; }
version=$(cat "$root/VERSION")
major=${version%%.*}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
passed=0

echo "== configure and build the C tests"
cmake -S "$root" -B "$tmp/build" -DCECOLL_LIBRARY="$lib" >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" -j "$jobs"
echo "== ctest (header, symbols, allgather: the packaging, not the whole suite)"
(cd "$tmp/build" && ctest --output-on-failure -R 'c_(header|symbols|allgather)')
passed=$((passed + 1))

# layout PREFIX: what both installs must hold; nothing at include/ that a
# real NCCL's nccl.h could be shadowed by.
layout() {
  local p=$1 f
  for f in include/cecoll/nccl.h include/cecoll/nccl_ce.h "lib/libcecoll.so.$version" \
    lib/cmake/cecoll/cecollConfig.cmake lib/cmake/cecoll/cecollConfigVersion.cmake lib/pkgconfig/cecoll.pc; do
    [ -f "$p/$f" ] || { echo "missing $f in $p"; exit 1; }
  done
  [ "$(readlink "$p/lib/libcecoll.so.$major")" = "libcecoll.so.$version" ] || { echo "$p/lib/libcecoll.so.$major is not a link to libcecoll.so.$version"; exit 1; }
  [ "$(readlink "$p/lib/libcecoll.so")" = "libcecoll.so.$major" ] || { echo "$p/lib/libcecoll.so is not a link to libcecoll.so.$major"; exit 1; }
  [ ! -e "$p/include/nccl.h" ] || { echo "$p/include/nccl.h exists: it would shadow a real NCCL's"; exit 1; }
}

echo "== install into $tmp/prefix"
cmake --install "$tmp/build" --prefix "$tmp/prefix"
layout "$tmp/prefix"

consumer() { # $1 prefix, $2 the version asked
  rm -rf "$tmp/consumer"
  cmake -S "$here/cmake-consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$1" -DCECOLL_WANT="$2" >"$tmp/consumer.log" 2>&1 ||
    { cat "$tmp/consumer.log"; exit 1; }
  cmake --build "$tmp/consumer"
  LD_LIBRARY_PATH="$1/lib" CECOLL_BACKEND=host "$tmp/consumer/consumer"
  passed=$((passed + 1))
}
refused() { # $1 prefix, $2 a version the install does not provide
  rm -rf "$tmp/consumer"
  if cmake -S "$here/cmake-consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$1" -DCECOLL_WANT="$2" >"$tmp/consumer.log" 2>&1; then
    echo "find_package(cecoll $2) was satisfied by cecoll $version (NCCL API $(grep -o '_cecoll_nccl "[0-9.]*"' "$1/lib/cmake/cecoll/cecollConfigVersion.cmake"))"
    exit 1
  fi
  grep -q "requested version \"$2\"" "$tmp/consumer.log" || { cat "$tmp/consumer.log"; exit 1; }
  echo "find_package(cecoll $2): refused, as it should be"
  passed=$((passed + 1))
}
echo "== find_package(cecoll 2.28), (cecoll $version), refusals, from the cmake --install prefix"
consumer "$tmp/prefix" 2.28
consumer "$tmp/prefix" "$version"
refused "$tmp/prefix" 2.29
refused "$tmp/prefix" "$((major + 1)).0"

echo "== find_package(cecoll 2.28) from make install, staged with DESTDIR (so relocated)"
make -s -C "$root" install DESTDIR="$tmp/stage" PREFIX=/opt/cecoll >"$tmp/make-install.log" 2>&1 ||
  { cat "$tmp/make-install.log"; exit 1; }
layout "$tmp/stage/opt/cecoll"
consumer "$tmp/stage/opt/cecoll" 2.28
echo "cmake_check.sh: $passed passed, 0 failed"
