#!/usr/bin/env bash
# lab/h200/graphs.sh: CUDA graphs beside streams and graphs parked on waits, and what a flag
# operation costs inside a graph, on one H200, by stage:
#   instantiate  lab/h200/chanpark.cu with CHANPARK_GRAPH=1 (each parked stream's waits captured
#            into a graph of its own and launched), the driver's default queues (its own stall
#            from 8 parked streams aside, stalled=1 is expected): how many graphs launch of P
#            when each is instantiated just before its launch, when every graph is instantiated
#            (and uploaded) before the first launch, with idle streams beside, with a copy
#            after the wait, and with 32 queues
#   n8       the matrix's group.graph.two.n8 cells (8 ranks in one process, two streams a rank,
#            graphs; each must PASS, not hang in cecollGraphLaunch) with each of BUILDS; with
#            STACKS=1 a cell still running after 25 s gets its threads' stacks (cuda-gdb)
#   wv       lab/h200/wvcost.cu: a flag operation's cost as a node of a replayed graph
#            (write-value batches with and without barrier, waits with resets, 4-byte copies)
#            and one hop between two streams' graphs
# Graphs of many captured calls (the open hang) are lab/h200/p2p.sh's stages graphs, graphdiag,
# graphwv, graphst, upload and ringgraph.
#
#   run(command="bash lab/h200/graphs.sh instantiate n8 wv", carry=["build"])
#
# Knobs: BUILDS ("new"), STACKS, BUDGET (seconds, 560). Results in $OUT/graphs.tar.gz, the log in
# $OUT/graphs.log.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin graphs
stacks() { # PATTERN TAG: cuda-gdb stacks of every process whose command line matches
  local p
  for p in $(pgrep -f -- "$1"); do
    timeout 60 cuda-gdb -p "$p" -batch -ex "info threads" -ex "thread apply all bt 14" > "$R/gdb-$2-$p.txt" 2>&1
    echo "stacks of $p: $(grep -c '^Thread' "$R/gdb-$2-$p.txt") threads; cu frames:"
    grep -oE ' in (cu|cuda)[A-Za-z_0-9]+' "$R/gdb-$2-$p.txt" | sort | uniq -c | head -12
  done
}
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  instantiate)
    nvcc -O2 -o /tmp/chanpark lab/h200/chanpark.cu -lcuda || continue
    cp_run() { # label, env..., args
      local l=$1; shift
      env CHANPARK_GRAPH=1 CHANPARK_TRACE=1 "$@" > /tmp/cp.out 2>&1
      echo "$l: rc=$? launched=$(grep -c '^launched' /tmp/cp.out) $(grep -E '^PARK' /tmp/cp.out | head -2 | tr '\n' ' ')"
    }
    cp_run "P=12 plain     " timeout 15 /tmp/chanpark 12 1 none
    cp_run "P=18 plain     " timeout 15 /tmp/chanpark 18 1 none
    cp_run "P=24 plain     " timeout 15 /tmp/chanpark 24 1 none
    cp_run "P=18 preinst   " CHANPARK_PREINST=1 timeout 15 /tmp/chanpark 18 1 none
    cp_run "P=18 upload    " CHANPARK_UPLOAD=1 timeout 15 /tmp/chanpark 18 1 none
    cp_run "P=24 upload    " CHANPARK_UPLOAD=1 timeout 15 /tmp/chanpark 24 1 none
    cp_run "P=12 idle=12   " CHANPARK_IDLE=12 timeout 15 /tmp/chanpark 12 1 none
    cp_run "P=12 idle=24   " CHANPARK_IDLE=24 timeout 15 /tmp/chanpark 12 1 none
    cp_run "P=18 copy      " timeout 15 /tmp/chanpark 18 1 copy
    cp_run "P=18 q32       " CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 15 /tmp/chanpark 18 1 none
    cp_run "P=9x3 replays  " CHANPARK_REPLAYS=3 timeout 15 /tmp/chanpark 9 1 none
    ;;
  n8)
    ids=allgather.oop.unreg.group.graph.two.n8,alltoall.inplace.sym.group.graph.two.n8,scatter.inplace.root0.reg.group.graph.two.n8
    for b in ${BUILDS:-new}; do
      lp=$PWD/build; [ "$b" != new ] && lp=$PWD/build/$b:$PWD/build
      LD_LIBRARY_PATH=$lp timeout -k 5 100 build/ctests/matrix --run "$ids" -r 8 -j 3 -t 30 -o "$R/n8-$b" > "$R/n8-$b.txt" 2>&1 &
      bg=$!
      if [ -n "${STACKS:-}" ]; then sleep 25; stacks "cell allgather.oop.unreg.group.graph.two.n8" "$b"; fi
      wait $bg
      echo "-- $b:"; grep -E '^(PASS|EXPECTED|FAIL|HANG)' "$R/n8-$b.txt" | cut -c1-200
    done
    ;;
  wv)
    nvcc -O2 -o /tmp/wvcost lab/h200/wvcost.cu -lcuda || continue
    for k in wv wvnb wv3 wv3nb wr wrnb w3r3 cp4; do timeout 20 /tmp/wvcost chain $k; done 2>&1 | tee "$R/wv-chain.txt"
    for k in wv wvnb cp4; do timeout 20 /tmp/wvcost hop $k; done 2>&1 | tee "$R/wv-hop.txt"
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish graphs
