#!/usr/bin/env bash
# test_header.sh: include/nccl.h and include/nccl_ce.h compile as C and C++,
# strictly, alone and with a CUDA runtime header (ctests/stub-cuda) included
# before or after them, and with that header defining CUDA's own include
# guard. Run from anywhere; exits non-zero on the first mode that fails.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# A translation unit for one include order. It uses every type and macro a
# program would, so a header that parses but declares the wrong thing fails.
write_tu() { # $1: order (nccl | ce | before | after | twice)
  local f="$tmp/tu_$1.$2"
  {
    case "$1" in
      before) echo '#include <cuda_runtime_api.h>'; echo '#include "nccl_ce.h"' ;;
      after) echo '#include "nccl_ce.h"'; echo '#include <cuda_runtime_api.h>' ;;
      twice) echo '#include "nccl.h"'; echo '#include "nccl_ce.h"'; echo '#include "nccl.h"'; echo '#include "nccl_ce.h"' ;;
      nccl) echo '#include "nccl.h"' ;;
      ce) echo '#include "nccl_ce.h"' ;;
    esac
    cat <<'TU'
#ifndef NCCL_CE_H_
typedef int no_ce_header_t;
#endif
int use_header(cudaStream_t s);
int use_header(cudaStream_t s) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
  ncclUniqueId id;
  ncclComm_t comm = NCCL_COMM_NULL;
  ncclWindow_t win = 0;
  ncclRedOp_t op = ncclMaxRedOp;
  ncclDataType_t t = ncclFloat8e5m2;
  ncclScalarResidence_t res = ncclScalarHostImmediate;
  ncclResult_t (*coll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = ncclAllGather;
  ncclResult_t (*rccl)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = ncclAllToAll;
  ncclResult_t (*grp)(void) = ncclGroupStart;
  int r = (int)sizeof(id) + (int)sizeof(c) + (int)si.size + (int)op + (int)t + (int)res + NCCL_VERSION_CODE;
  (void)comm; (void)win; (void)coll; (void)rccl; (void)grp; (void)s;
#ifdef NCCL_CE_H_
  {
    struct ncclCeCollArgs a = {ncclFuncAlltoAll, 0, ncclInt8, 1, 1, 0, 0, 0, 0};
    cecollEvent_t e = 0;
    cecollGraph_t g = 0;
    ncclResult_t (*launch)(ncclComm_t, const struct ncclCeCollArgs*, cudaStream_t) = ncclLaunchCeColl;
    (void)e; (void)g; (void)launch;
    r += (int)a.func + ncclNumFuncs;
  }
#endif
  return r + NCCL_SPLIT_NOCOLOR + NCCL_WIN_REQUIRED_ALIGNMENT + NCCL_CTA_POLICY_ZERO;
}
TU
  } >"$f"
  echo "$f"
}

try() { # $1: description, rest: command
  local what=$1
  shift
  if "$@" 2>"$tmp/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $what"
    echo "  $*"
    sed 's/^/  | /' "$tmp/err"
  fi
}

cflags="-Wall -Wextra -Werror -pedantic -Wstrict-prototypes -Wmissing-prototypes -I$root/include -I$here/stub-cuda"
cxxflags="-Wall -Wextra -Werror -pedantic -I$root/include -I$here/stub-cuda"
for order in nccl ce before after twice; do
  for std in c11 gnu11 c17 gnu17; do
    tu=$(write_tu "$order" c)
    try "gcc -std=$std $order" gcc -std=$std $cflags -c "$tu" -o "$tmp/o.o"
    try "gcc -std=$std $order (CUDA guard)" gcc -std=$std $cflags -DSTUB_CUDA_GUARD -c "$tu" -o "$tmp/o.o"
  done
  for std in c++11 c++14 c++17 c++20; do
    tu=$(write_tu "$order" cc)
    try "g++ -std=$std $order" g++ -std=$std $cxxflags -x c++ -c "$tu" -o "$tmp/o.o"
    try "g++ -std=$std $order (CUDA guard)" g++ -std=$std $cxxflags -DSTUB_CUDA_GUARD -x c++ -c "$tu" -o "$tmp/o.o"
  done
done
# C99 refuses a repeated typedef: it works alone and when CUDA came first with its guard.
for order in nccl ce twice; do
  tu=$(write_tu "$order" c)
  try "gcc -std=c99 $order" gcc -std=c99 $cflags -c "$tu" -o "$tmp/o.o"
done
tu=$(write_tu before c)
try "gcc -std=c99 before (CUDA guard)" gcc -std=c99 $cflags -DSTUB_CUDA_GUARD -c "$tu" -o "$tmp/o.o"

# The layout facts, checked by the compiler on this machine.
cat >"$tmp/layout.c" <<'TU'
#include <stddef.h>
#include "nccl.h"
_Static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t size");
_Static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) == 76, "ncclConfig_t tail");
_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId");
_Static_assert(sizeof(ncclRedOp_t) == 4, "ncclRedOp_t");
_Static_assert(NCCL_VERSION_CODE == 22809, "version");
int layout_ok;
TU
try "layout" gcc -std=c11 $cflags -c "$tmp/layout.c" -o "$tmp/o.o"

echo "test_header.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
