# shellcheck shell=bash
# lab/h200/lib.sh: what the topic scripts of lab/h200 share (sourced from the repository root):
# library links, the budget, MPS on/off, one cecoll-perf run per build, the results folder and log
# (begin, finish), the 8 B graph arguments, the real driver for cushim, a batched matrix run
# (mrun), the thread-per-rank C tests (ctests_threads) and hostcost (hostcosts).
# Builds: "new" is build/ (libcecoll.so, cecoll-perf, ctests); any other name is build/NAME's
# library run by build/cecoll-perf, except "old": 86fb7ac (the last commit of the first engine,
# 2026-11-30), carried as build/old with its own cecoll-perf, which takes the flags it had then
# (-N ranks, per-rank -b/-e, -R 1 windows, -G -K calls a graph, -o collective).
# Every script writes under $O (default /tmp/out) and the caller tars what returns.
O=${OUT:-/tmp/out}
export CECOLL_BACKEND=${CECOLL_BACKEND:-nvidia} NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/build:${LD_LIBRARY_PATH:-}
# The device tool carries files, not links: remake each build folder's library links.
for d in build build/*/; do
  for f in "$d"/libcecoll.so.*.*.*; do
    [ -f "$f" ] || continue
    (cd "$d" && ln -sf "$(basename "$f")" libcecoll.so.0 && ln -sf libcecoll.so.0 libcecoll.so)
  done
done
T0=$(date +%s)
BUDGET=${BUDGET:-560}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
mps_on() { nvidia-cuda-mps-control -d && sleep 1; }
mps_off() { echo quit | nvidia-cuda-mps-control; sleep 2; }
# perf BUILD OUTFILE ARGS...: cecoll-perf of build/ (new) or build/BUILD's library.
# "old" (86fb7ac) has its own cecoll-perf with the old flags; every other build
# runs build/cecoll-perf against its library.
perf() {
  local b=$1 f=$2; shift 2
  local lp=$PWD/build exe=build/cecoll-perf
  [ "$b" != new ] && lp=$PWD/build/$b:$PWD/build
  [ "$b" = old ] && exe=build/old/cecoll-perf
  LD_LIBRARY_PATH=$lp timeout "${PERF_TIMEOUT:-60}" $exe "$@" > "$f" 2>&1
  local rc=$? # before the basename below, whose status $? would be
  echo "$(basename "$f"): rc=$rc"
}
# begin NAME: results go to $O/NAME (R), the log to $O/NAME.log; finish NAME tars them.
begin() {
  mkdir -p "$O/$1"
  exec > >(tee "$O/$1.log") 2>&1
  R=$O/$1
  echo "# $1 $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | head -1)"
}
finish() {
  echo "== done after $(($(date +%s) - T0)) s"
  tar -czf "$O/$1.tar.gz" -C "$O" "$1" && rm -rf "${O:?}/$1"
}
# g8args N: the new cecoll-perf's 8 B graph run at N ranks (every collective, a graph of 20
# calls replayed 50 times); g8old N: the same run in build/old's cecoll-perf flags.
g8args() { echo all -g "$1" -b $((8 * $1)) -e $((8 * $1)) -d uint8 -R 2 -n 20 -G 50 -w 5 -c 1; }
g8old() { echo -N "$1" -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all; }
# floorargs BUILD N: the floor table's sweep (every collective at 64 and 256 MiB per rank, N
# ranks in one process, symmetric windows, eager, no data check) in BUILD's cecoll-perf flags.
floorargs() {
  if [ "$1" = old ]; then
    echo -N "$2" -b 64M -e 256M -f 4 -n 10 -w 2 -c 0 -o all -R 1
  else
    echo all -g "$2" -b $((64 * $2))M -e $((256 * $2))M -f 4 -d uint8 -R 2 -n 10 -w 2 -c 0
  fi
}
# cushim_real: CUSHIM_REAL, the driver that matches the kernel module, not CUDA's compat copy
# (which fails with error 803).
cushim_real() {
  local real
  real=$(ldconfig -p | awk '$1 == "libcuda.so.1" { print $NF }' | grep -v compat | head -1)
  [ -n "$real" ] || real=$(find / -xdev -name 'libcuda.so.1' -not -path '*compat*' -not -path "$PWD/*" 2>/dev/null | head -1)
  echo "the real driver: ${real:-none found}"
  export CUSHIM_REAL=$real
}
# mrun NAME IDS SECONDS MATRIX-ARGS...: one batched run of build/ctests/matrix over the cells IDS
# (comma-separated), at most SECONDS; prints its FAIL and HANG lines and its summary.
mrun() {
  local name=$1 ids=$2 t=$3; shift 3
  timeout -k 5 "$t" build/ctests/matrix --run "$ids" "$@" -o "$R/logs-$name" > "$R/matrix-$name.txt" 2>&1
  echo "$name: rc=$? cells reported: $(grep -cE '^(PASS|EXPECTED|FAIL|HANG)' "$R/matrix-$name.txt")"
  grep -E '^(FAIL|HANG)' "$R/matrix-$name.txt" | cut -c1-240 | head -20; tail -2 "$R/matrix-$name.txt"
}
# cells REGEX [MATRIX-ARGS...]: the matrix's cell ids whose name matches REGEX, comma-separated.
cells() {
  local re=$1; shift
  build/ctests/matrix --list all "$@" 2>/dev/null | awk -v re="$re" '$2 ~ re {print $1}' | paste -sd,
}
# ctests_threads DIR: DIR/test_{allgather,alltoall,scatter,gather} with a thread per rank at 4 and
# 8 ranks, RUNS (12) runs each, 4 at a time, within the budget; one CTEST line a run in
# $R/ctests.txt, and a total.
ctests_threads() {
  CT_DIR=$1
  export CT_DIR
  run_c() {
    set -- $1
    local s rc
    s=$(date +%s)
    timeout 90 "$CT_DIR/test_$1" -r "$2" -m threads -q > "/tmp/ct_$1_$2_$3.log" 2>&1; rc=$?
    echo "CTEST $1 n=$2 run=$3 rc=$rc $(( $(date +%s)-s ))s"
  }
  export -f run_c
  for t in allgather alltoall scatter gather; do for n in 4 8; do for k in $(seq 1 "${RUNS:-12}"); do echo "$t $n $k"; done; done; done |
    timeout $(($(left) - 30)) xargs -P 4 -I{} bash -c 'run_c "{}"' | sort > "$R/ctests.txt"
  echo "CTESTS total=$(wc -l < "$R/ctests.txt") rc0=$(grep -c 'rc=0 ' "$R/ctests.txt")"; grep -v 'rc=0 ' "$R/ctests.txt" | head
}
# hostcosts BUILD...: lab/h200/hostcost.c (4-rank AllGather, 8 B and 64 KiB) against build/ (new)
# or build/BUILD's library, one after another; its HOSTCOST and VERIFY lines.
hostcosts() {
  gcc -O2 -Wall -o /tmp/hostcost lab/h200/hostcost.c -ldl -lpthread || return
  local b lib
  for b in "$@"; do
    lib=$PWD/build/libcecoll.so; [ "$b" != new ] && lib=$PWD/build/$b/libcecoll.so
    timeout 90 /tmp/hostcost -l "$lib" -n 4 -s 8,65536 -r 20 -k 64 -t 80 > "$R/hostcost-$b.txt" 2>&1
    echo "hostcost $b rc=$?"; grep -E '^(HOSTCOST|VERIFY)' "$R/hostcost-$b.txt"
  done
}
