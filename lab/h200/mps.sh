#!/usr/bin/env bash
# lab/h200/mps.sh: several processes on one H200, with and without MPS, by stage:
#   start    how long 4 processes started at once take to a usable CUDA context
#            (lab/h200/mpsinit.c: cuInit, primary context, first alloc and stream), without MPS,
#            then twice under MPS (first clients, later ones)
#   queues   lab/h200/chanpark.cu under MPS (one client): at how many parked streams a client
#            stalls, CUDA_DEVICE_MAX_CONNECTIONS unset, 4, 8 and 16
#   pool     how many MPS clients hold a context at once with 8 and with 4 queues each
#            (mpsinit with MPSINIT_HOLD=3, 8 to 48 clients, until one fails)
#   cells    the matrix's in-place rooted cells between processes on symmetric windows
#            ({scatter,gather}.inplace.{root0,rootlast}.sym.proc.eager.own, 2 and 4 ranks)
#            under MPS, with the matrix's bootstrap timeout and with 60 s and INFO logs
#   nomps    processes sharing the GPU without MPS: test_multiproc (data at 2 and 4
#            processes and 2x2, a rank killed mid-run, kills and aborts while parked) and
#            cecoll-perf -P 2 and 4 from 8 B to 64 MiB per rank, windows and unregistered;
#            /dev/shm and cecoll's abstract sockets before and after
# build/ comes carried (make all; build/ctests/matrix, build/ctests/test_multiproc,
# build/cecoll-perf):
#
#   run(command="bash lab/h200/mps.sh start queues pool cells", carry=["build"])
#
# Knobs: BUDGET (seconds, 560). Results in $OUT/mps.tar.gz, the log in $OUT/mps.log.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin mps
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  start)
    gcc -O2 -o /tmp/mpsinit lab/h200/mpsinit.c -ldl || continue
    echo "-- without MPS"; /tmp/mpsinit 4
    mps_on
    echo "-- MPS, first clients"; /tmp/mpsinit 4
    echo "-- MPS, again"; /tmp/mpsinit 4
    mps_off
    ;;
  queues)
    nvcc -O2 -o /tmp/chanpark lab/h200/chanpark.cu -lcuda || continue
    mps_on
    for v in unset 4 8 16; do
      for P in 1 2 3 4 5 6 7 8 9 16; do
        if [ $v = unset ]; then timeout 10 /tmp/chanpark $P 1 none > /tmp/cp.out 2>&1; else CUDA_DEVICE_MAX_CONNECTIONS=$v timeout 10 /tmp/chanpark $P 1 none > /tmp/cp.out 2>&1; fi
        r=$(grep -oE 'stalled=[01]' /tmp/cp.out || head -c 120 /tmp/cp.out)
        echo "MPS CUDA_DEVICE_MAX_CONNECTIONS=$v P=$P $r"
        [ "$r" = stalled=1 ] && break
      done
    done
    mps_off
    ;;
  pool)
    gcc -O2 -o /tmp/mpsinit lab/h200/mpsinit.c -ldl || continue
    mps_on
    for v in 8 4; do
      for N in 8 12 16 24 32 48; do
        r=$(CUDA_DEVICE_MAX_CONNECTIONS=$v MPSINIT_HOLD=3 timeout 60 /tmp/mpsinit $N 2>&1 | tail -1)
        echo "MPS CUDA_DEVICE_MAX_CONNECTIONS=$v N=$N: $r"
        ok=$(echo "$r" | grep -oE '[0-9]+ ok' | cut -d' ' -f1)
        [ "${ok:-0}" = "$N" ] || break
      done
    done
    mps_off
    ;;
  cells)
    ids=$(cells '^(scatter|gather)\.inplace\.(root0|rootlast)\.sym\.proc\.eager\.own\.n[24]$' --devices dev0)
    mps_on
    echo "-- the matrix's bootstrap timeout"
    mrun mps-cells "$ids" 120 --devices dev0 -j 2 -t 60
    echo "-- bootstrap 60 s, INFO logs"
    mkdir -p "$R/mpsdbg"
    CECOLL_BOOTSTRAP_TIMEOUT=60 CECOLL_DEBUG=INFO CECOLL_DEBUG_FILE="$R/mpsdbg/%p.log" \
      mrun mps-cells60 "$ids" 200 --devices dev0 -j 2 -t 90
    mps_off
    ;;
  nomps)
    ls -A /dev/shm > "$R/shm-before.txt" 2>&1; grep -o '@cecoll[^ ]*' /proc/net/unix > "$R/sock-before.txt" 2>/dev/null
    CECOLL_TEST_WATCHDOG=115 timeout 120 build/ctests/test_multiproc -n 2,4 -c 0,7,1M -X data_n2,data_n4,data_2x2 -t 60 > "$R/multiproc-data.txt" 2>&1
    echo "test_multiproc data: rc=$?"
    CECOLL_TEST_WATCHDOG=95 timeout 100 build/ctests/test_multiproc -n 2,4 -X kill_rank2,kill_parked,abort_parked -t 40 > "$R/multiproc-kill.txt" 2>&1
    echo "test_multiproc kills: rc=$?"
    grep -hE '^== .*: (PASS|FAIL)' "$R"/multiproc-*.txt
    for p in 2 4; do
      for reg in 2 0; do
        perf new "$R/perf-P$p-R$reg.txt" -P $p -b $((8 * p)) -e $((64 * p))M -f 8388608 -d uint8 -n 10 -w 2 -c 0 -R $reg
      done
    done
    python3 lab/h200/perfrows.py "$R"/perf-P*.txt 2>/dev/null
    sleep 1
    ls -A /dev/shm > "$R/shm-after.txt" 2>&1; grep -o '@cecoll[^ ]*' /proc/net/unix > "$R/sock-after.txt" 2>/dev/null
    echo "/dev/shm entries before $(grep -c . "$R/shm-before.txt"), after $(grep -c . "$R/shm-after.txt");" \
      "@cecoll sockets before $(grep -c . "$R/sock-before.txt"), after $(grep -c . "$R/sock-after.txt")"
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish mps
