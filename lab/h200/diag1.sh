#!/usr/bin/env bash
# lab/h200/diag1.sh: the first diagnostic call of the eighth session, on the old engine (86fb7ac,
# carried as build/old): event-wait parking, lost byte lanes, the thread-per-rank hang by
# sync/flag variant, and the -N 8 eager sweep that stalled. Output in $OUT/diag1.log.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}/diag1.log
exec > >(tee "$O") 2>&1
B=build/old
export LD_LIBRARY_PATH=$PWD/$B:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O2 -o /tmp/evpark lab/h200/evpark.cu -lcuda || echo "nvcc failed"
echo "== event waits vs flag waits: does the probe stall? (default queues)"
for P in 4 6 7 8 12 20; do timeout 10 /tmp/evpark park $P event; done
for P in 6 7; do timeout 10 /tmp/evpark park $P flag; done
echo "== same with CUDA_DEVICE_MAX_CONNECTIONS=32"
for P in 16 30 31 32 40 64; do CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 10 /tmp/evpark park $P event; done
echo "== lanes"
timeout 60 /tmp/evpark lanes 8 4000 10
timeout 60 /tmp/evpark lanes 4 4000 10
echo "== thread-per-rank loops (old engine)"
run() { local t0=$(date +%s%N); timeout 60 "$@" | tail -1; echo "   [$(( ($(date +%s%N)-t0)/1000000 )) ms] $*"; }
for f in scatter allgather; do
  for v in "" "CECOLL_SYNC=allpairs" "CECOLL_FLAG_WRITE=value" "CECOLL_SYNC=star CECOLL_FLAG_WRITE=value"; do
    for k in 1 2; do run env $v $B/threadloop -f $f -r 4 -i 1500 -m threads -t 6 -c 4096; done
  done
done
for v in "" "CECOLL_SYNC=allpairs"; do
  run env $v $B/threadloop -f scatter -r 8 -i 800 -m threads -t 6 -c 4096
  run env $v $B/threadloop -f scatter -r 4 -i 2000 -m persist -t 6 -c 4096
  run env $v $B/threadloop -f alltoall -r 4 -i 1500 -m persist -t 6 -c 65536
done
run $B/threadloop -f scatter -r 4 -i 1500 -m threads -t 6 -c 4096 -w
run $B/threadloop -f scatter -r 4 -i 1500 -m group -t 6 -c 4096
echo "== ctests scatter -r 4 -m threads (old)"
for k in 1 2 3; do t0=$(date +%s); timeout 40 $B/ctests/test_scatter -r 4 -m threads -q > /tmp/ts.log 2>&1; echo "rc=$? $(( $(date +%s)-t0 ))s $(tail -1 /tmp/ts.log)"; done
echo "== the -N 8 eager sweep (issue 16), GPU utilisation every second"
(for i in $(seq 1 70); do nvidia-smi --query-gpu=utilization.gpu,power.draw --format=csv,noheader; sleep 1; done) > /tmp/smi.log 2>&1 &
SMI=$!
t0=$(date +%s)
# build/old's cecoll-perf predates nccl-tests' flags (issue 19): the old ones (-N 8 ranks, 64..256 MiB per rank).
CECOLL_DEBUG=INFO CECOLL_DEBUG_FILE=/tmp/perf_info.log timeout 60 $B/cecoll-perf -N 8 -b 64M -e 256M -f 4 -n 20 -w 3 -c 0 -o all
echo "sweep rc=$? after $(( $(date +%s)-t0 ))s"
kill $SMI 2>/dev/null
paste -sd' ' /tmp/smi.log | cut -c1-2000
grep -c . /tmp/perf_info.log; tail -5 /tmp/perf_info.log
echo "== done"
