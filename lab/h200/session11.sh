#!/usr/bin/env bash
# lab/h200/session11.sh: the eleventh session's H200 calls (issue 16's open floors). Stages:
#   wv      wvcost.cu: a flag operation's cost in a graph (write-value with and without
#           barrier, waits with resets, 4-byte copies) and the latency of one hop
#   g8      8 B graph replays, N=4 (and N=8): build/var (the tree before the captured-signal
#           change plus a lab-only knob, CECOLL_XNB, that dropped the write-values' memory
#           barrier: 1 resets, 2 a batch's later signals, 4 all; the driver refused it, so only
#           XNB=0 ran), CECOLL_FLAG_WRITE=copy, CECOLL_SYNC=allpairs, hub off, build/old; 2 rounds
#   a2a     in-place AlltoAll at 256 MiB per rank: build/base (HEAD before this session)
#           against new (no syncs between swap rounds), N=8 twice, N=4 and N=2 once, and a
#           checked run at N=8
#   g8f     the 8 B floor, new (lanes, outbox) and old alternating, 3 rounds, N=4 and 8
#   a2ab    in-place AlltoAll, build/base against new (halfway pairs split), with checks
#   floors  the issue's floor table, old and new alternating, ROUNDS (3) rounds
#   hostcost  lab/h200/hostcost.c, old and new
#   inprocb, procb, inproc8   the matrix's in-process cells, process cells (MPS), 8 ranks
#   threads the C tests with a thread per rank, 4 and 8 ranks (RUNS, 12, runs each)
#   sweep   cecoll-perf's 8-rank eager sweep
# Everything lands in $OUT/s11.tar.gz, the log in $OUT/s11.log.
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin s11
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  wv)
    nvcc -O2 -o /tmp/wvcost lab/h200/wvcost.cu -lcuda || continue
    for k in wv wvnb wv3 wv3nb wr wrnb w3r3 cp4; do timeout 20 /tmp/wvcost chain $k; done
    for k in wv wvnb cp4; do timeout 20 /tmp/wvcost hop $k; done
    ;;
  g8)
    for round in 1 2; do
      perf old "$R/g8-old-r$round.txt" -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all
      for v in XNB=0 XNB=1 XNB=3 XNB=7 FLAG_WRITE=copy SYNC=allpairs HUB_BYTES=0 "FLAG_WRITE=copy XNB=1"; do
        tag=$(echo "$v" | tr ' =' '_-')
        (for x in $v; do export "CECOLL_$x"; done; perf var "$R/g8-$tag-r$round.txt" $(g8args 4))
      done
    done
    perf old "$R/g8n8-old.txt" -N 8 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all
    for v in 0 3; do CECOLL_XNB=$v perf var "$R/g8n8-xnb$v.txt" $(g8args 8); done
    ;;
  a2a)
    for round in 1 2; do
      for b in base new; do perf $b "$R/a2a8-$b-r$round.txt" alltoall -g 8 -b 2G -e 2G -d uint8 -R 2 -n 5 -w 1 -c 0; done
    done
    for b in base new; do
      perf $b "$R/a2a4-$b.txt" alltoall -g 4 -b 1G -e 1G -d uint8 -R 2 -n 5 -w 1 -c 0
      perf $b "$R/a2a2-$b.txt" alltoall -g 2 -b 512M -e 512M -d uint8 -R 2 -n 5 -w 1 -c 0
    done
    perf new "$R/a2a8-check.txt" alltoall -g 8 -b 128M -e 512M -f 4 -d uint8 -R 2 -n 2 -w 1 -c 1
    perf new "$R/a2a8-check-unreg.txt" alltoall -g 8 -b 128M -e 128M -d uint8 -R 0 -n 2 -w 1 -c 1
    ;;
  g8f) # the 8 B floor: new and old alternating, 3 rounds, N=4 and N=8 (and all pairs, N=4)
    for round in 1 2 3; do
      for n in 4 8; do
        perf old "$R/g8f-old-n$n-r$round.txt" -N $n -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all
        perf new "$R/g8f-new-n$n-r$round.txt" $(g8args $n)
      done
    done
    CECOLL_SYNC=allpairs perf new "$R/g8f-new-allpairs-n4.txt" $(g8args 4)
    ;;
  a2ab) # in-place AlltoAll, build/base against new (halfway pairs split, no syncs between rounds)
    for round in 1 2 3; do
      for b in base new; do perf $b "$R/a2ab8-$b-r$round.txt" alltoall -g 8 -b 2G -e 2G -d uint8 -R 2 -n 5 -w 1 -c 0; done
    done
    for b in base new; do
      perf $b "$R/a2ab4-$b.txt" alltoall -g 4 -b 1G -e 1G -d uint8 -R 2 -n 5 -w 1 -c 0
      perf $b "$R/a2ab2-$b.txt" alltoall -g 2 -b 512M -e 512M -d uint8 -R 2 -n 5 -w 1 -c 0
    done
    perf new "$R/a2ab-check.txt" alltoall -g 8 -b 128M -e 512M -f 4 -d uint8 -R 2 -n 2 -w 1 -c 1
    perf new "$R/a2ab-check2.txt" alltoall -g 2 -b 32M -e 128M -f 4 -d uint8 -R 2 -n 2 -w 1 -c 1
    ;;
  floors) # 64 and 256 MiB per rank, every collective, N=2/4/8, old and new alternating
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for n in 2 4 8; do
        perf old "$R/fl-old-n$n-r$round.txt" -N $n -b 64M -e 256M -f 4 -n 10 -w 2 -c 0 -o all -R 1
        perf new "$R/fl-new-n$n-r$round.txt" all -g $n -b $((64 * n))M -e $((256 * n))M -f 4 -d uint8 -R 2 -n 10 -w 2 -c 0
      done
    done
    ;;
  hostcost)
    hostcosts old new
    ;;
  inprocb) # the in-process cells, batched
    t=$(($(left) - 15)); [ "$t" -gt "${INPROCB:-200}" ] && t=${INPROCB:-200}
    mrun inprocb "$(cat build/lists/inproc10.txt)" "$t" -j 4 -b 64 -t 60
    ;;
  procb) # the process cells, batched, under MPS (cecoll sets 8 queues a client; -j 2)
    mps_on
    t=$(($(left) - 20)); [ "$t" -gt "${PROCB:-200}" ] && t=${PROCB:-200}
    mrun procb "$(cat build/lists/proc10.txt)" "$t" -j 2 -b 64 -t 60
    mps_off
    ;;
  inproc8) # the in-process cells at 8 ranks, batched
    mrun inproc8 "$(cells '\.(group|threads)\.' -r 8)" $(($(left) - 15)) -r 8 -j 4 -b 64 -t 30
    ;;
  threads) # the C tests with a thread per rank, 4 and 8 ranks, ${RUNS:-12} runs each, 4 at a time
    ctests_threads build/gpu
    ;;
  sweep)
    s=$(date +%s)
    timeout 110 build/cecoll-perf all -g 8 -b 512M -e 2G -f 4 -d uint8 -R 2 -n 20 -w 3 -c 0 > "$R/sweep.txt" 2>&1
    echo "SWEEP rc=$? $(( $(date +%s)-s ))s"
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish s11
