#!/bin/bash
# run_ce.sh: the engine's check on one NVIDIA GPU, run from anywhere in a
# copy of the repository with carried prebuilt binaries (that machine has
# no Go):
#   build/libcecoll.so, build/cecoll-perf, build/ctests/test_*
# Runs the C tests on the nvidia backend with 2, 4 and 8 ranks on the one GPU
# (group mode, one process, one collective at a time),
# then cecoll-perf at 8 B and 64 MiB per rank for N = 2, 4, 8, and prints a
# summary last. Sized for about 3 minutes; every step has a timeout.
set -u
cd "$(dirname "$0")/../.." || exit 2
export NCCL_NVLS_ENABLE=0 CECOLL_BACKEND=nvidia
export LD_LIBRARY_PATH=$PWD/build:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/cecoll_out}
mkdir -p "$OUT"
T=build/ctests
nvidia-smi -L 2>&1 | head -2

echo "== C tests, nvidia backend, ranks 2,4,8 (group mode), one collective at a time"
for t in allgather alltoall scatter gather errors; do
  CECOLL_TEST_WATCHDOG=27 timeout -k 3 30 $T/test_$t -r 2,4,8 -m group -c 0,1,7,1001 -l 64 -g 2 \
    >"$OUT/ctest_$t.log" 2>&1
  echo "EXIT $t $?" >>"$OUT/ctest_$t.log"
  tail -1 "$OUT/ctest_$t.log"
done

echo "== cecoll-perf, 8 B and 64 MiB per rank"
: >"$OUT/perf.txt"
for n in 2 4 8; do
  timeout -k 3 20 build/cecoll-perf -g $n -b $((8 * n)) -e $((64 * n))M -f 8388608 -d uint8 -R 2 -n 20 -w 3 -c 1 \
    >>"$OUT/perf.txt" 2>&1
  echo "EXIT perf N=$n $?" >>"$OUT/perf.txt"
done

echo
echo "== SUMMARY"
for t in allgather alltoall scatter gather errors; do
  printf '%-10s %s | %s\n' "$t" "$(grep -E '[0-9]+ passed, [0-9]+ failed' "$OUT/ctest_$t.log" | tail -1)" "$(grep EXIT "$OUT/ctest_$t.log")"
  grep -E 'FAIL|watchdog|hung' "$OUT/ctest_$t.log" | head -5
done
grep -E '^#|^ +[0-9]|EXIT' "$OUT/perf.txt"
