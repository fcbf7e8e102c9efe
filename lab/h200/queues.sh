#!/usr/bin/env bash
# lab/h200/queues.sh: the GPU's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) and streams
# parked on waits, by stage (probes only, no cecoll but in preinit):
#   park     lab/h200/chanpark.cu: P streams parked on a flag wait, then a write-value on one
#            more: the least P that stalls it, by CUDA_DEVICE_MAX_CONNECTIONS (unset, 4, 32,
#            64, 0, abc), with 1 or 3 waits a stream and copies or write-values between them,
#            the probe stream created last or first; and set after cuInit (CHANPARK_LATE=1)
#   block    lab/h200/chanblock.cu: does one stream parked on a flag wait (then a 64 MiB copy,
#            a 4-byte copy, a write-value or nothing) hold up another stream's flag write (by
#            write-value or 4-byte copy, after a copy of its own or nothing), for each of 35
#            streams
#   events   lab/h200/evpark.cu: do streams waiting on an event hold queues as flag waits do
#            (default queues and 32), and do concurrent 1-byte copies into one word lose bytes
#   preinit  lab/h200/preinit.c: cecoll's queue check where the process made its context
#            first (7 and 8 ranks) and where cecoll came first (8, 31 and 32 ranks; 8 with
#            CUDA_DEVICE_MAX_CONNECTIONS=8); needs build/libcecoll.so
# Each probe runs under timeout: a stalled probe exits 3 without releasing its streams.
#
#   run(command="bash lab/h200/queues.sh park events preinit", carry=["build"])
#
# Knobs: BUDGET (seconds, 560). Results in $OUT/queues.tar.gz, the log in $OUT/queues.log.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin queues
# parkmin LABEL ARGS...: chanpark at growing P (with ARGS after P) until a run stalls.
parkmin() {
  local l=$1 P r; shift
  for P in 1 2 3 4 5 6 7 8 9 12 16 24 31 32 33 40; do
    r=$(timeout 10 /tmp/chanpark "$P" "$@" 2>&1 | grep -oE 'stalled=[01]')
    echo "PARKMIN $l P=$P ${r:-no result}"
    [ "$r" = stalled=1 ] && break
  done
}
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  park)
    nvcc -O2 -o /tmp/chanpark lab/h200/chanpark.cu -lcuda || continue
    for v in unset 4 32 64 0 abc; do
      for qw in "1 none" "3 copy" "3 value"; do
        [ "$(left)" -lt 20 ] && break 2
        if [ $v = unset ]; then (unset CUDA_DEVICE_MAX_CONNECTIONS; parkmin "conn=$v q,w=$qw" $qw)
        else (export CUDA_DEVICE_MAX_CONNECTIONS=$v; parkmin "conn=$v q,w=$qw" $qw); fi
      done
    done
    (unset CUDA_DEVICE_MAX_CONNECTIONS; parkmin "conn=unset probe=first" 1 none 0)
    (unset CUDA_DEVICE_MAX_CONNECTIONS; export CHANPARK_LATE=1; parkmin "conn=32-after-cuInit" 1 none)
    ;;
  block)
    nvcc -O2 -o /tmp/chanblock lab/h200/chanblock.cu -lcuda || continue
    for x in copy small value none; do
      for y in copy none; do
        for w in value copy; do
          [ "$(left)" -lt 20 ] && break 3
          timeout 120 /tmp/chanblock $x $y $w 36 | grep -c 'blocked=1' | sed "s/^/CHANBLOCK X=$x Y=$y W=$w blocked runs: /"
        done
      done
    done
    ;;
  events)
    nvcc -O2 -o /tmp/evpark lab/h200/evpark.cu -lcuda || continue
    for P in 4 6 7 8 12 20; do timeout 10 /tmp/evpark park $P event; done
    for P in 6 7; do timeout 10 /tmp/evpark park $P flag; done
    for P in 16 30 31 32 40 64; do CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 10 /tmp/evpark park $P event; done
    timeout 60 /tmp/evpark lanes 8 4000 10
    timeout 60 /tmp/evpark lanes 4 4000 10
    ;;
  preinit)
    gcc -O2 -I include -o /tmp/preinit lab/h200/preinit.c -Lbuild -lcecoll -ldl || continue
    (unset CUDA_DEVICE_MAX_CONNECTIONS
      for a in "7" "8" "8 early" "31 early" "32 early"; do timeout 60 /tmp/preinit $a; done)
    CUDA_DEVICE_MAX_CONNECTIONS=8 timeout 60 /tmp/preinit 8 early
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish queues
