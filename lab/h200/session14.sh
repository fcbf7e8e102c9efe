#!/usr/bin/env bash
# lab/h200/session14.sh: the fourteenth session's H200 calls (issue 16's 8 B graph floor). Stages:
#   hub      lab/h200/hubpar.cu: the 8 B hub AllGather's graphs alone, its root's copies chained
#            or as parallel nodes (PAR=1; they never finished), or every rank's two copies
#            through the root's staging (rel), or the peers' blocks pushed into the root's one staging
#            and the root's copies from there (bcast), its root's waits per word, per two words (64-bit)
#            or on byte lanes, at 4 and 8 ranks, ROUNDS rounds; lab/h200/graphpar.cu (GP=1)
#   vmm      hubpar's chain, bcast and rel (w32, 4 ranks) with its buffers in one cuMemAlloc or,
#            as cecoll has them, each in a VMM allocation of its own (HUBPAR_VMM=1; 2: the flags too), and
#            chain and bcast captured through a fork into a stream of each rank's own, as the
#            engine captures (HUBPAR_FORK=1; not yet run)
#   nv       8 B graph replays at 4 ranks, head and new against the same builds with every
#            allocation a plain cuMemAlloc (lab/h200/novmm.patch, CECOLL_XNOVMM=1: headnv, newnv)
#   g8       8 B graph replays at 4 and 8 ranks, new (build/) against head (build/head),
#            ROUNDS rounds alternating; then eager 8 B at 4 ranks, one round
#   mid      AllGather and AlltoAll from 256 KiB to 4 MiB per rank at 4 ranks, eager and graph,
#            new against head (where hub plans stop)
#   threads  the C tests with a thread per rank (build/ctests), 4 and 8 ranks, RUNS (12) runs each
#   procb    the matrix's process cells (proc, 2proc) under MPS, as far as the budget goes
#   matrix   the in-process matrix cells (ranks 2, 3, 4, then every group and thread cell at 8
#            ranks) with the library in build/
# Results: $OUT/s14.tar.gz, log $OUT/s14.log.
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin s14
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  hub)
    nvcc -O2 -o /tmp/hubpar lab/h200/hubpar.cu -lcuda -ldl || continue
    HUBPAR_SYMS=1 timeout -k 2 20 /tmp/hubpar chain w32 4
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for c in chain rel bcast ${PAR:+par}; do
        for w in w32 w64 lane; do timeout -k 2 20 /tmp/hubpar $c $w 4; done
        for w in w32 w64; do timeout -k 2 20 /tmp/hubpar $c $w 8; done
      done
    done 2>&1 | tee "$R/hub.txt"
    [ -n "${GP:-}" ] && nvcc -O2 -o /tmp/graphpar lab/h200/graphpar.cu && timeout -k 2 60 /tmp/graphpar 2>&1 | tee "$R/graphpar.txt"
    ;;
  vmm)
    nvcc -O2 -o /tmp/hubpar lab/h200/hubpar.cu -lcuda -ldl || continue
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for v in "" 1 2; do
        for c in chain bcast rel; do HUBPAR_VMM=$v timeout -k 2 20 /tmp/hubpar $c w32 4; done
      done
      for c in chain bcast; do HUBPAR_VMM=2 HUBPAR_FORK=1 timeout -k 2 20 /tmp/hubpar $c w32 4; done
    done 2>&1 | tee "$R/vmm.txt"
    ;;
  nv)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in head new headnv newnv; do
        case $b in *nv) export CECOLL_XNOVMM=1 ;; *) unset CECOLL_XNOVMM ;; esac
        perf $b "$R/nv-$b-n4-r$round.txt" $(g8args 4)
      done
    done
    unset CECOLL_XNOVMM
    python3 lab/h200/perfrows.py "$R"/nv-*.txt 2>/dev/null | awk '{print $1, $2, $4, $5}'
    ;;
  g8)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in new head; do
        for n in 4 8; do perf $b "$R/g8-$b-n$n-r$round.txt" $(g8args $n); done
      done
    done
    for b in new head; do perf $b "$R/e8-$b-n4.txt" all -g 4 -b 32 -e 32 -d uint8 -R 2 -n 200 -w 20 -c 1; done
    python3 lab/h200/perfrows.py "$R"/g8-*.txt "$R"/e8-*.txt 2>/dev/null | awk '{print $1, $2, $4, $5}'
    ;;
  mid)
    for b in new head; do
      for g in 0 20; do
        perf $b "$R/mid-$b-G$g.txt" allgather -g 4 -b 1M -e 16M -f 4 -d uint8 -R 2 -n 20 -w 3 -c 1 -G $g
        perf $b "$R/mida-$b-G$g.txt" alltoall -g 4 -b 64K -e 1M -f 4 -d uint8 -R 2 -n 20 -w 3 -c 1 -G $g
      done
    done
    python3 lab/h200/perfrows.py "$R"/mid*.txt 2>/dev/null
    ;;
  threads) # the C tests with a thread per rank, 4 and 8 ranks, ${RUNS:-12} runs each, 4 at a time
    ctests_threads build/ctests
    ;;
  procb) # the process cells (proc, 2proc), batched, under MPS, as far as the budget goes
    mps_on
    t=$(($(left) - 20)); [ "$t" -gt 200 ] && t=200
    mrun procb "$(cells '\.(proc|2proc)\.')" "$t" -j 2 -b 64 -t 60
    mps_off
    ;;
  matrix)
    mrun inproc "$(cells '\.(group|threads)\.')" 200 -j 4 -b 64 -t 60
    mrun inproc8 "$(cells '\.(group|threads)\.' -r 8)" 120 -r 8 -j 4 -b 64 -t 30
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish s14
