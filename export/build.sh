#!/bin/sh
# build.sh: builds build/libcecoll.so.VERSION (SONAME libcecoll.so.MAJOR)
# with the version script, and the links libcecoll.so.MAJOR and
# libcecoll.so: the same as the top-level Makefile. Run from anywhere.
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
v=$(cat VERSION)
so=libcecoll.so.${v%%.*}
mkdir -p build
${GO:-go} build -buildmode=c-shared \
  -ldflags "-extldflags '-Wl,--version-script=$root/export/exports.map -Wl,-soname,$so'" \
  -o "build/libcecoll.so.$v" ./export
rm -f "build/libcecoll.so.${v%.*}.h" # cgo's header: include/ is the contract
ln -sf "libcecoll.so.$v" "build/$so"
ln -sf "$so" build/libcecoll.so
