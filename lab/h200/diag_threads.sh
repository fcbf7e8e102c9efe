#!/bin/bash
# diag_threads.sh: issue 3's thread-per-rank hang on one H200, from the
# repository root with the carried build/ (libcecoll.so, ctests). Runs
# test_allgather -r 4 -m threads with CUDA_DEVICE_MAX_CONNECTIONS unset
# (the library sets 32) and 8 (the driver's default), then the B9 child's
# cases (9 ranks, threads, intra-batch syncs forced) three times per sync
# algorithm, each in the background; if one is still running after HANG_S
# seconds, cuda-gdb attaches and prints every thread's C stack, then the
# process is killed. First run (2026-11-29): 4 ranks hang with 8 queues
# and pass with 32; the B9 child (spawned by test_alltoall -r 8) hung once
# in two runs with 32.
set -u
export NCCL_NVLS_ENABLE=0 CECOLL_BACKEND=nvidia
export LD_LIBRARY_PATH=$PWD/build:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/cecoll_out}/diag
HANG_S=${HANG_S:-20}
mkdir -p "$OUT"
GDB=$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)

one() { # name, connections ('' = unset), test, ranks ('B9' = the B9 child's cases), [env...]
  local name=$1 conn=$2 t=$3 r=$4 log="$OUT/$1.log"
  shift 4
  local args=(-r "$r" -m threads -c 1,1001 -l 0 -g 0)
  if [ "$r" = B9 ]; then
    # What test_* spawns as its B9 child (3 and 9 ranks, intra-batch syncs
    # forced), in threads mode only, run directly so cuda-gdb sees it.
    args=(-B -m threads)
    set -- CECOLL_INTRA_BATCH_SYNC_THRESHOLD=1 CECOLL_INTRA_BATCH_SYNC_FREQ=2 "$@"
  fi
  (
    if [ -n "$conn" ]; then export CUDA_DEVICE_MAX_CONNECTIONS=$conn; else unset CUDA_DEVICE_MAX_CONNECTIONS; fi
    exec env CECOLL_DEBUG=INFO CECOLL_TEST_WATCHDOG=0 CECOLL_TEST_NO_SPAWN=1 "$@" build/ctests/test_$t "${args[@]}"
  ) >"$log" 2>&1 &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$HANG_S" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    echo "DIAG $name: HUNG after ${HANG_S}s; stacks in $OUT/$name.gdb"
    timeout 60 "$GDB" -p "$pid" -batch -ex "info threads" -ex "thread apply all bt 25" >"$OUT/$name.gdb" 2>&1
    grep -E "^Thread|^#[0-9]+ .* in (cu|cecoll|goexp|_cgo|runtime\.|cecoll/)" "$OUT/$name.gdb" | head -80
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  else
    wait "$pid"
    echo "DIAG $name: rc=$? $(grep -E 'passed, [0-9]+ failed' "$log" | tail -1)"
  fi
  grep -m3 -E "CUDA_DEVICE_MAX_CONNECTIONS|connections" "$log"
}

if [ "${DIAG_B9_ONLY:-0}" != 1 ]; then
  one allgather4-conn-unset "" allgather 4
  one allgather4-conn-8 8 allgather 4
fi
# The B9 child hung once in two runs (9 ranks, threads): repeat it per
# sync algorithm.
for i in 1 2 3; do
  for sy in allpairs star; do
    one "alltoall-b9-$sy-$i" "" alltoall B9 CECOLL_SYNC=$sy
  done
done
one allgather-b9-star "" allgather B9 CECOLL_SYNC=star
