#!/usr/bin/env bash
# test_symbols.sh: build/libcecoll.so exports exactly the allowlist
# ctests/exported-symbols.txt, and the allowlist is exactly the set of
# functions the headers declare together with those of the API list
# export/forward/nccl-2.31.api (NCCL 2.31 and RCCL's extras, each also as
# p<name>), which cecoll implements or forwards through its stubs.
# Usage: test_symbols.sh [path/to/libcecoll.so]
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
lib=${1:-$root/build/libcecoll.so}
allow="$here/exported-symbols.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

grep -v '^#' "$allow" | sed '/^$/d' | sort -u >"$tmp/allow"

# Functions declared by the headers, read from the preprocessed text so
# comments do not count.
echo '#include "nccl_ce.h"' | gcc -E -P -I"$root/include" -x c - | tr '\n' ' ' |
  grep -oE '\b(p?nccl[A-Za-z0-9_]*|cecoll[A-Za-z0-9_]*)[[:space:]]*\(' |
  sed 's/[[:space:]]*($//' >"$tmp/declared"
grep -v '^#' "$root/export/forward/nccl-2.31.api" | grep -oE '\bnccl[A-Za-z0-9_]*\(' | tr -d '(' |
  sed 'p; s/^/p/' >>"$tmp/declared"
sort -u "$tmp/declared" >"$tmp/headers"
if ! diff -u "$tmp/allow" "$tmp/headers" >"$tmp/d1"; then
  echo "FAIL: the allowlist and the headers with the API list disagree (- allowlist, + headers/API list):"
  sed -n '3,$p' "$tmp/d1" | grep '^[-+]'
  fail=1
fi

if [ ! -f "$lib" ]; then
  echo "FAIL: $lib does not exist (build it with make)"
  exit 1
fi
if ! command -v nm >/dev/null; then
  echo "FAIL: nm not found"
  exit 1
fi
# Defined dynamic symbols, less the version nodes (type A).
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' | sed 's/@.*//' | sort -u >"$tmp/exported"
if ! diff -u "$tmp/allow" "$tmp/exported" >"$tmp/d2"; then
  echo "FAIL: $lib exports differ from the allowlist (- missing, + unexpected):"
  sed -n '3,$p' "$tmp/d2" | grep '^[-+]'
  fail=1
fi
n=$(wc -l <"$tmp/allow")
if [ "$fail" -eq 0 ]; then
  echo "test_symbols.sh: 2 passed, 0 failed ($n symbols)"
else
  echo "test_symbols.sh: failed"
fi
exit "$fail"
