#!/usr/bin/env bash
# cmake_check.sh: the CMake side works end to end: configure and build the
# tests with CMakeLists.txt, install into a scratch prefix, then configure,
# build and run ctests/cmake-consumer against that prefix with
# find_package(cecoll). Also checks a `make install`-style prefix (the config
# file is relocatable). Exits 77 (skip) when cmake is absent.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
if ! command -v cmake >/dev/null; then
  echo "cmake_check.sh: SKIPPED: cmake not found" >&2
  exit 77
fi
lib=${CECOLL_LIB:-$root/build/libcecoll.so}
[ -f "$lib" ] || { echo "cmake_check.sh: $lib missing: run make first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-2}

echo "== configure and build the C tests"
cmake -S "$root" -B "$tmp/build" -DCECOLL_LIBRARY="$lib" >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" -j "$jobs"
echo "== ctest (header, symbols, allgather: the packaging, not the whole suite)"
(cd "$tmp/build" && ctest --output-on-failure -R 'c_(header|symbols|allgather)')

echo "== install into $tmp/prefix"
cmake --install "$tmp/build" --prefix "$tmp/prefix"
for f in include/nccl.h include/nccl_ce.h lib/libcecoll.so lib/cmake/cecoll/cecollConfig.cmake; do
  [ -e "$tmp/prefix/$f" ] || { echo "missing $f in the installed prefix"; exit 1; }
done

consumer() { # $1 prefix
  rm -rf "$tmp/consumer"
  cmake -S "$here/cmake-consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$1" >"$tmp/consumer.log" ||
    { cat "$tmp/consumer.log"; exit 1; }
  cmake --build "$tmp/consumer"
  LD_LIBRARY_PATH="$1/lib" CECOLL_BACKEND=host "$tmp/consumer/consumer"
}
echo "== find_package(cecoll) from the cmake --install prefix"
consumer "$tmp/prefix"

echo "== find_package(cecoll) from a make-install layout (relocated copy)"
mkdir -p "$tmp/moved/lib/cmake/cecoll" "$tmp/moved/include"
cp "$tmp/prefix/lib/libcecoll.so" "$tmp/moved/lib/"
cp "$tmp/prefix/include/"*.h "$tmp/moved/include/"
sed 's|@PREFIX@|/nonexistent|g' "$root/cmake/cecollConfig.cmake.in" >"$tmp/moved/lib/cmake/cecoll/cecollConfig.cmake"
consumer "$tmp/moved"
echo "cmake_check.sh: 3 passed, 0 failed"
