#!/bin/sh
# build.sh: builds build/libcecoll.so with the version script (the same
# command as the top-level Makefile). Run from anywhere.
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p build
${GO:-go} build -buildmode=c-shared \
  -ldflags "-extldflags -Wl,--version-script=$root/export/exports.map" \
  -o build/libcecoll.so ./export
rm -f build/libcecoll.h
