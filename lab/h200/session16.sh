#!/usr/bin/env bash
# lab/h200/session16.sh: the sixteenth session's H200 calls (issue 16's correctness items with
# the final build: pairs, Close waiting for graph launches, OrderAfter after a failure). Stages:
#   procb    the matrix's process cells (proc, 2proc; 2 to 4 ranks, the in-place rooted ones
#            among them) under MPS, at most PROCB (300) s
#   rooted   the in-place rooted process cells (Scatter, Gather on symmetric windows, plain and
#            mixed) without MPS, at most ROOTED (150) s
#   sweep    the issue's 8-rank eager sweep (64 MiB to 256 MiB, no data check), unregistered and
#            in symmetric windows: must finish, quickly
#   hostcost lab/h200/hostcost.c against build/ and build/old (86fb7ac)
#   threads  the C tests with a thread per rank, 4 and 8 ranks, RUNS (12) runs each
#   matrix   the in-process matrix cells (2 to 4 ranks, then 8 ranks)
#   floors   256 MiB and 64 MiB per rank, every collective, N=2/4/8, eager, new against old,
#            ROUNDS (3) rounds alternating (old at N=2 and 4: its 8-rank sweep hangs)
#   oldtool  256 MiB AllGather per rank through the old cecoll-perf (86fb7ac: %ceil is bytes over
#            one copy's rate), against build/ and build/old, ROUNDS (3) rounds alternating
#   var      256 MiB AllGather per rank at N=2 and 4, build/ against VARS (builds under build/),
#            ROUNDS (3) rounds alternating
#   g8       8 B graph replays at 4 and 8 ranks, build/ alone, ROUNDS (3) rounds
# Results: $OUT/s16.tar.gz, log $OUT/s16.log.
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin s16
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  procb)
    mps_on
    t=$(($(left) - 20)); [ "$t" -gt "${PROCB:-300}" ] && t=${PROCB:-300}
    mrun procb "$(cells '\.(proc|2proc)\.')" "$t" -j 2 -b 64 -t 60
    mps_off
    ;;
  rooted)
    t=$(($(left) - 10)); [ "$t" -gt "${ROOTED:-150}" ] && t=${ROOTED:-150}
    mrun rooted "$(cells '^(scatter|gather)\.inplace\..*\.(sym|mixedsym)\.(proc|2proc)\.')" "$t" -j 2 -b 16 -t 60
    ;;
  sweep)
    for reg in 0 2; do
      s=$(date +%s)
      perf new "$R/sweep-R$reg.txt" all -g 8 -b 64M -e 256M -f 4 -d uint8 -R $reg -n 20 -w 3 -c 0
      echo "SWEEP -R $reg $(( $(date +%s)-s ))s"
    done
    ;;
  hostcost)
    hostcosts new old
    ;;
  threads)
    ctests_threads build/ctests
    ;;
  matrix)
    mrun inproc "$(cells '\.(group|threads)\.')" 200 -j 4 -b 64 -t 60
    mrun inproc8 "$(cells '\.(group|threads)\.' -r 8)" 120 -r 8 -j 4 -b 64 -t 30
    ;;
  floors)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in new old; do
        for n in 2 4 8; do
          [ "$(left)" -lt 40 ] && break 3
          # old's -b is per rank, new's the size column (all ranks' chunks); old's 8-rank
          # sweep is the issue's hang, so old runs at 2 and 4 ranks only.
          if [ $b = old ]; then
            [ $n = 8 ] || perf old "$R/fl-$b-n$n-r$round.txt" -N $n -b 64M -e 256M -f 4 -n 10 -w 2 -c 0 -o all
          else
            perf new "$R/fl-$b-n$n-r$round.txt" all -g $n -b $((64 * n))M -e $((256 * n))M -f 4 -d uint8 -R 2 -n 10 -w 2 -c 0
          fi
        done
      done
    done
    python3 lab/h200/perfrows.py "$R"/fl-*.txt 2>/dev/null
    ;;
  oldtool)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in new old; do
        for n in 2 4 8; do
          [ $b = old ] && [ $n = 8 ] && continue
          lp=$PWD/build; [ $b = old ] && lp=$PWD/build/old
          LD_LIBRARY_PATH=$lp timeout 60 build/old/cecoll-perf -N $n -b 256M -e 256M -o allgather -R 1 -n 10 -w 2 -c 0 \
            > "$R/ot-$b-n$n-r$round.txt" 2>&1
          echo "ot-$b-n$n-r$round: rc=$?"
        done
      done
    done
    python3 lab/h200/perfrows.py "$R"/ot-*.txt 2>/dev/null
    ;;
  var)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in new ${VARS:-}; do
        for n in 2 4; do
          perf $b "$R/var-$b-n$n-r$round.txt" allgather -g $n -b $((256 * n))M -e $((256 * n))M -d uint8 -R 2 -n 20 -w 3 -c 0
        done
      done
    done
    python3 lab/h200/perfrows.py "$R"/var-*.txt 2>/dev/null | sort -k2,2 -k1,1
    ;;
  g8)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for n in 4 8; do perf new "$R/g8-n$n-r$round.txt" $(g8args $n); done
    done
    python3 lab/h200/perfrows.py "$R"/g8-*.txt 2>/dev/null | awk '{print $1, $2, $4, $5}'
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish s16
