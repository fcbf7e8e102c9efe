#!/usr/bin/env bash
# lab/h200/threads.sh: a thread per rank on one H200, by stage:
#   ctests   the C tests with a thread per rank (test_{allgather,alltoall,scatter,gather} -r 4|8
#            -m threads), RUNS (12) runs each, 4 at a time: every run must end with rc 0
#   loop     lab/h200/threadloop.c (a new thread per rank every iteration, every result
#            checked, a watchdog telling a hang inside the call from one in the GPU): AllGather
#            at 4 ranks 15 times, Scatter, Gather and AlltoAll 3 times each, AllGather at 8 ranks
#            3 times, AllGather with CECOLL_FLAG_WRITE=copy and with CECOLL_SYNC=allpairs twice
#            each; then persistent threads and group mode once
#   warmup   the first collective of a thread per rank: threadloop's AllGather at 4 ranks, 12
#            runs plain, 10 with a grouped warm-up collective first (-W), 10 with
#            CUDA_MODULE_LOADING=EAGER, against the library in TL_BUILD (build/old: the first
#            engine, which had no warm-up of its own); cuda-gdb attaches to the first hang
# build/ comes carried (make all; build/ctests), and build/threadloop (threadloop.c's header
# says how to build it; TL_BUILD/threadloop for warmup):
#
#   run(command="bash lab/h200/threads.sh ctests loop", carry=["build"])
#
# Knobs: RUNS (12), TL_BUILD (build/old), BUDGET (seconds, 560). Results in $OUT/threads.tar.gz,
# the log in $OUT/threads.log.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin threads
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  ctests)
    ctests_threads build/ctests
    ;;
  loop)
    pass=0 other=0
    tl() { # [ENV...] -- threadloop args: one run, counted
      local envs=()
      while [ "$1" != -- ]; do envs+=("$1"); shift; done
      shift
      r=$(env "${envs[@]}" timeout 60 build/threadloop "$@" | tail -1)
      echo "${envs[*]} $* : $r"
      case $r in OK*) pass=$((pass + 1)) ;; *) other=$((other + 1)) ;; esac
    }
    for _ in $(seq 1 15); do tl -- -f allgather -r 4 -i 200 -m threads -t 6 -c 4096; done
    for f in scatter gather alltoall; do for _ in 1 2 3; do tl -- -f $f -r 4 -i 200 -m threads -t 6 -c 4096; done; done
    for _ in 1 2 3; do tl -- -f allgather -r 8 -i 200 -m threads -t 6 -c 65536; done
    for v in CECOLL_FLAG_WRITE=copy CECOLL_SYNC=allpairs; do
      for _ in 1 2; do tl "$v" -- -f allgather -r 4 -i 200 -m threads -t 6 -c 4096; done
    done
    tl -- -f alltoall -r 4 -i 500 -m persist -t 6 -c 65536
    tl -- -f scatter -r 4 -i 500 -m group -t 6 -c 65536
    echo "THREADLOOP pass=$pass other=$other"
    ;;
  warmup)
    B=${TL_BUILD:-build/old}
    command -v cuda-gdb || echo "no cuda-gdb"
    attached=0
    one() {
      local log=/tmp/tl.$$.log
      LD_LIBRARY_PATH=$PWD/$B:$LD_LIBRARY_PATH "$@" -H > $log 2>&1 &
      local pid=$! t=0
      while kill -0 $pid 2>/dev/null; do
        if grep -q HANG $log; then
          grep HANG $log
          if [ $attached = 0 ] && command -v cuda-gdb > /dev/null; then
            attached=1
            timeout 60 cuda-gdb -p $pid -batch -ex "info threads" -ex "thread apply all bt 14" 2>&1 | grep -v "^\[New LWP\|^$" | head -150
          fi
          kill -9 $pid; wait $pid 2>/dev/null; return
        fi
        sleep 0.2; t=$((t + 1)); [ $t -gt 200 ] && { echo "TIMEOUT $*"; kill -9 $pid; return; }
      done
      wait $pid; tail -1 $log
    }
    echo "-- allgather -r 4 threads, plain"
    for _ in $(seq 1 12); do one "$B/threadloop" -f allgather -r 4 -i 600 -m threads -t 5 -c 4096; done
    echo "-- with a grouped warm-up collective first"
    for _ in $(seq 1 10); do one "$B/threadloop" -f allgather -r 4 -i 600 -m threads -t 5 -c 4096 -W; done
    echo "-- CUDA_MODULE_LOADING=EAGER"
    for _ in $(seq 1 10); do one env CUDA_MODULE_LOADING=EAGER "$B/threadloop" -f allgather -r 4 -i 600 -m threads -t 5 -c 4096; done
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish threads
