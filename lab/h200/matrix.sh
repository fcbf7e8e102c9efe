#!/usr/bin/env bash
# lab/h200/matrix.sh: the correctness matrix (ctests/matrix.c) on the H200, by stage:
#   inproc   every in-process cell (layouts group and threads) at 2, 3 and 4 ranks
#   inproc8  the same at 8 ranks
#   proc     the process cells (proc, 2proc) at 2 to 4 ranks, under MPS
# Each stage prints its FAIL and HANG lines and its summary; logs of unexpected cells and the
# outputs are in $OUT/matrix.tar.gz. build/ctests/matrix and build/libcecoll.so come carried:
#
#   run(command="bash lab/h200/matrix.sh inproc", carry=["build"])
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin matrix
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  inproc) mrun inproc "$(cells '\.(group|threads)\.')" $(($(left) - 20)) -j 4 -b 64 -t 60 ;;
  inproc8) mrun inproc8 "$(cells '\.(group|threads)\.' -r 8)" $(($(left) - 20)) -r 8 -j 4 -b 64 -t 30 ;;
  proc)
    mps_on
    mrun proc "$(cells '\.(proc|2proc)\.')" $(($(left) - 20)) -j 2 -b 64 -t 60
    mps_off
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish matrix
