#!/usr/bin/env bash
# lab/h200/session15.sh: the fifteenth session's H200 calls (issue 16's 8 B graph floor). Stages:
#   hub    lab/h200/hubpar.cu at 4 and 8 ranks, ROUNDS (3) rounds: the root's copies chained (as
#          shipped), pull (the root gathers into its staging, every rank copies it out after the
#          release) or rel; the waits w32 (as shipped) or fold (no write-value: resets ride on
#          the signal and release copies, as 2D copies)
#   fork   hubpar chain and pull, w32 and fold, 4 ranks, each call captured directly or forked
#          into a stream of the rank's own (HUBPAR_FORK=1, as the engine captures), ROUNDS rounds
#   procab the matrix's mixedsym process cells under MPS, head's library (build/head) then new
#          (build/); then two of them, one batch, new, without MPS, with CECOLL_DEBUG=INFO
#   mixdbg the mixedsym process cells (proc) one cell a batch, without MPS, then under MPS:
#          which cells fail, with what first error
#   procc  the matrix's process cells under MPS with build/: the mixedsym ones, then all
#   e8     eager 8 B at 4 ranks, new and head alternating, ROUNDS rounds
# The thread-per-rank C tests and the process cells are session14.sh's stages threads, procb.
# Results: $OUT/s15.tar.gz, log $OUT/s15.log.
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin s15
case " $* " in *" hub "*|*" fork "*) nvcc -O2 -o /tmp/hubpar lab/h200/hubpar.cu -lcuda -ldl || { finish s15; exit 1; } ;; esac
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  hub)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for n in 4 8; do
        for c in chain pull rel; do
          for w in w32 fold; do timeout -k 2 20 /tmp/hubpar $c $w $n; done
        done
      done
    done 2>&1 | tee "$R/hub.txt"
    ;;
  fork)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for f in "" 1; do
        for c in chain pull; do
          for w in w32 fold; do HUBPAR_FORK=$f timeout -k 2 20 /tmp/hubpar $c $w 4; done
        done
      done
    done 2>&1 | tee "$R/fork.txt"
    ;;
  procab)
    ids=$(cells '\.mixedsym\.(proc|2proc)\.')
    mps_on
    LD_LIBRARY_PATH=$PWD/build/head:$LD_LIBRARY_PATH mrun mixhead "$ids" 150 -j 2 -b 64 -t 60
    mrun mixnew "$ids" 150 -j 2 -b 64 -t 60
    mps_off
    two=$(cells '^gather\.inplace\.root0\.mixedsym\.2proc\.(eager\.shared|graph\.own)\.n4$')
    CECOLL_DEBUG=INFO mrun two "$two" 60 -j 1 -b 2 -t 30
    grep -rh -i "error\|warn" "$R/logs-two" | cut -c1-300 | head -40
    ;;
  mixdbg)
    ids=$(cells '\.mixedsym\.proc\.')
    mrun nomps "$ids" 150 -j 2 -b 1 -t 30
    mps_on
    mrun mps "$ids" 150 -j 2 -b 1 -t 30
    mps_off
    for m in nomps mps; do
      echo "-- $m: first errors"
      grep -rh "runtime error\|illegal\|fault" "$R/logs-$m" 2>/dev/null | sed 's/^[a-z]*:[0-9]*:[0-9]* //' | cut -c1-200 | sort | uniq -c | sort -rn | head -8
    done
    ;;
  procc)
    mps_on
    mrun mixc "$(cells '\.mixedsym\.(proc|2proc)\.')" 100 -j 2 -b 64 -t 60
    t=$(($(left) - 20)); [ "$t" -gt 240 ] && t=240
    mrun procc "$(cells '\.(proc|2proc)\.')" "$t" -j 2 -b 64 -t 60
    mps_off
    ;;
  e8)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in new head; do perf $b "$R/e8-$b-r$round.txt" all -g 4 -b 32 -e 32 -d uint8 -R 2 -n 200 -w 20 -c 1; done
    done
    python3 lab/h200/perfrows.py "$R"/e8-*.txt 2>/dev/null | awk '{print $1, $2, $4, $5}'
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish s15
