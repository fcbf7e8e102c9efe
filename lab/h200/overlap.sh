#!/usr/bin/env bash
# lab/h200/overlap.sh: a bf16 8192^3 cuBLAS GEMM on its own stream beside a looping collective of
# N ranks on one H200, and beside SM copies (cublasScopy) of the same bytes (lab/gpu/ncclcmp.c
# overlap: GEMM time alone, with the collective, with the SM copies; the collective's busbw
# meanwhile), by stage:
#   ag     a 256 MiB AllGather per rank on symmetric windows (--ce: cecoll's zero-copy path),
#          N = NS
#   ring   a 256 MiB ring exchange per rank (ncclSend to rank+1, ncclRecv from rank-1; -X), a
#          thread per rank: the staged path, N = 2, 4
# ncclcmp is built from lab/gpu/ncclcmp.c where build/ncclcmp is missing; cuBLAS comes from
# CUBLAS_LIB, else the first libcublas.so.1x found (the torch venv's).
#
#   run(command="bash lab/h200/overlap.sh ag ring", carry=["build"])
#
# Knobs: NS ("2 4 8"), BUDGET (seconds, 560). Results in $OUT/overlap.tar.gz, the log in
# $OUT/overlap.log.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin overlap
[ -x build/ncclcmp ] || gcc -O2 -Wall -I include -o build/ncclcmp lab/gpu/ncclcmp.c -ldl -lpthread || exit 1
[ -n "${CUBLAS_LIB:-}" ] || CUBLAS_LIB=$(find / -xdev -name 'libcublas.so.1[0-9]*' -not -name '*Lt*' 2>/dev/null | head -1)
export CUBLAS_LIB
echo "cuBLAS: $CUBLAS_LIB"
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  ag)
    for n in ${NS:-2 4 8}; do
      [ "$(left)" -lt 60 ] && break
      timeout 120 build/ncclcmp overlap -L "$PWD/build/libcecoll.so" -l cecoll --ce -N "$n" -W 60 > "$R/overlap-ag-n$n.txt" 2>&1
      echo "overlap AllGather N=$n: rc=$?"; grep -E "^OVERLAP " "$R/overlap-ag-n$n.txt"
    done
    ;;
  ring)
    for n in 2 4; do
      [ "$(left)" -lt 60 ] && break
      timeout 120 build/ncclcmp overlap -L "$PWD/build/libcecoll.so" -l cecoll --ce -N $n -X -W 60 > "$R/overlap-ring-n$n.txt" 2>&1
      echo "overlap ring N=$n: rc=$?"; grep -E "^OVERLAP " "$R/overlap-ring-n$n.txt"
    done
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish overlap
