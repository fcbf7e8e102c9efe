#!/usr/bin/env bash
# lab/h200/diag2.sh: where the thread-per-rank AllGather of the old engine hangs (iteration 0):
# host-side (inside the call) or GPU-side (in stream synchronize); with a warm-up collective
# first, and with eager module loading. The first hang is attached with cuda-gdb.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}/diag2.log
exec > >(tee "$O") 2>&1
B=${B:-build/old}
export LD_LIBRARY_PATH=$PWD/$B:${LD_LIBRARY_PATH:-}
command -v cuda-gdb || ls /usr/local/cuda/bin | head -30
attached=0
one() {
  local log=/tmp/tl.$$.log
  "$@" -H > $log 2>&1 &
  local pid=$! t=0
  while kill -0 $pid 2>/dev/null; do
    if grep -q HANG $log; then
      grep HANG $log
      if [ $attached = 0 ] && command -v cuda-gdb >/dev/null; then
        attached=1
        timeout 60 cuda-gdb -p $pid -batch -ex "info threads" -ex "thread apply all bt 14" 2>&1 | grep -v "^\[New LWP\|^$" | head -150
      fi
      kill -9 $pid; wait $pid 2>/dev/null; return
    fi
    sleep 0.2; t=$((t+1)); [ $t -gt 200 ] && { echo "TIMEOUT $*"; kill -9 $pid; return; }
  done
  wait $pid; tail -1 $log
}
echo "== allgather -r 4 threads, plain"
for k in $(seq 1 12); do one $B/threadloop -f allgather -r 4 -i 600 -m threads -t 5 -c 4096; done
echo "== with a grouped warm-up collective first"
for k in $(seq 1 10); do one $B/threadloop -f allgather -r 4 -i 600 -m threads -t 5 -c 4096 -W; done
echo "== CUDA_MODULE_LOADING=EAGER"
for k in $(seq 1 10); do one env CUDA_MODULE_LOADING=EAGER $B/threadloop -f allgather -r 4 -i 600 -m threads -t 5 -c 4096; done
echo "== done"
