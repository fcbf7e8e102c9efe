#!/usr/bin/env bash
# test_dropin_link.sh: a library linked against cecoll's drop-in
# libnccl.so.2 that uses NCCL's device API loads, the way torch 2.11's
# libtorch_cuda.so does (it links ncclDevCommCreate/Destroy from
# libnccl.so.2; without them `import torch` fails with "undefined symbol:
# ncclDevCommDestroy").
#   1. the drop-in's SONAME is libnccl.so.2;
#   2. libuser.so, referring to every function of section device of
#      export/forward/nccl-2.31.api, links with -Wl,--no-undefined against
#      it, and records libnccl.so.2 as needed;
#   3. a program that is not linked to NCCL dlopens libuser.so with
#      RTLD_NOW, the drop-in first on LD_LIBRARY_PATH and the fake NCCL
#      (ctests/fake-nccl) after it, and its ncclDevCommDestroy(NULL, NULL)
#      reaches the fake through cecoll's stub (the fake refuses NULL).
# Usage: test_dropin_link.sh DROPIN_LIBNCCL FAKE_DIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
dropin=${1:-$root/build/dropin/libnccl.so.2}
fake=${2:-$root/build/ctests/fake-nccl}
CC=${CC:-gcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { # $1 ok (0/1), $2 what
  if [ "$1" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; fi
}
if [ ! -f "$dropin" ] || [ ! -f "$fake/libnccl.so.2" ]; then
  echo "FAIL: need $dropin (make dropin) and $fake/libnccl.so.2 (ctests/run.sh builds it)"
  exit 1
fi
mkdir -p "$tmp/dropin"
cp "$dropin" "$tmp/dropin/libnccl.so.2"

readelf -d "$tmp/dropin/libnccl.so.2" | grep -q 'SONAME.*\[libnccl\.so\.2\]'
check $? "$dropin: SONAME is not libnccl.so.2"

names=$(awk '/^section /{s=$2; next} s=="device" && /\(/' "$root/export/forward/nccl-2.31.api" |
  grep -oE '\bnccl[A-Za-z0-9_]*\(' | tr -d '(')
[ -n "$names" ]
check $? "export/forward/nccl-2.31.api has no section device"
{
  echo '#include <stddef.h>'
  echo '#include "nccl.h"'
  echo 'ncclResult_t ncclDevCommDestroy(ncclComm_t, const void*);'
  for n in $names; do [ "$n" = ncclDevCommDestroy ] || echo "extern char $n[];"; done
  echo 'void* user_uses[] = {'
  for n in $names; do echo "  (void*)$n,"; done
  echo '  NULL};'
  echo 'int user_destroy(void) { return (int)ncclDevCommDestroy(NULL, NULL); }'
} >"$tmp/user.c"
$CC -std=gnu17 -Wall -Werror -I"$root/include" -fPIC -shared -Wl,--no-undefined -o "$tmp/libuser.so" "$tmp/user.c" \
  -L"$tmp/dropin" -l:libnccl.so.2 >"$tmp/link.log" 2>&1
check $? "libuser.so does not link against the drop-in: $(cat "$tmp/link.log")"
readelf -d "$tmp/libuser.so" 2>/dev/null | grep -q 'NEEDED.*\[libnccl\.so\.2\]'
check $? "libuser.so does not need libnccl.so.2"

cat >"$tmp/main.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char** argv) {
  (void)argc;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL) {
    printf("dlopen: %s\n", dlerror());
    return 1;
  }
  int (*destroy)(void) = (int (*)(void))dlsym(h, "user_destroy");
  int r = destroy ? destroy() : -1;
  printf("ncclDevCommDestroy(NULL, NULL) -> %d\n", r);
  return r == 4 ? 0 : 2; /* ncclInvalidArgument, from the fake */
}
C
$CC -std=gnu17 -Wall -Werror -o "$tmp/main" "$tmp/main.c" -ldl >"$tmp/main.log" 2>&1
check $? "the loader does not build: $(cat "$tmp/main.log")"
env LD_LIBRARY_PATH="$tmp/dropin:$fake" FAKE_NCCL_LOG="$tmp/fake.log" LD_BIND_NOW=1 CECOLL_BACKEND=host \
  timeout 60 "$tmp/main" "$tmp/libuser.so" >"$tmp/run.log" 2>&1
check $? "loading libuser.so or its ncclDevCommDestroy failed: $(cat "$tmp/run.log")"
grep -q 'ncclDevCommDestroy' "$tmp/fake.log" 2>/dev/null
check $? "ncclDevCommDestroy did not reach the fake through the drop-in"

echo "test_dropin_link.sh: $pass passed, $fail failed ($(echo $names | wc -w) device functions)"
[ "$fail" -eq 0 ]
