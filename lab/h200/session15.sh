#!/usr/bin/env bash
# lab/h200/session15.sh: the fifteenth session's H200 calls (issue 16's 8 B graph floor). Stages:
#   hub    lab/h200/hubpar.cu at 4 and 8 ranks, ROUNDS (3) rounds: the root's copies chained (as
#          shipped), pull (the root gathers into its staging, every rank copies it out after the
#          release) or rel; the waits w32 (as shipped) or fold (no write-value: resets ride on
#          the signal and release copies, as 2D copies)
#   fork   hubpar chain and pull, w32 and fold, 4 ranks, each call captured directly or forked
#          into a stream of the rank's own (HUBPAR_FORK=1, as the engine captures), ROUNDS rounds
# The thread-per-rank C tests and the process cells are session14.sh's stages threads, procb.
# Results: $OUT/s15.tar.gz, log $OUT/s15.log.
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin s15
nvcc -O2 -o /tmp/hubpar lab/h200/hubpar.cu -lcuda -ldl || { finish s15; exit 1; }
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
  *) echo "unknown stage $stage" ;;
  esac
done
finish s15
