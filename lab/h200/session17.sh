#!/usr/bin/env bash
# lab/h200/session17.sh: the seventeenth session's H200 calls: issue 16's 256 MiB floors against
# the native reference they name (issue 6's: the seed's protocol in C), in both quantities.
# Stages:
#   floors   ROUNDS (3) rounds alternating: cecoll-perf (new, today's %ceil) at N=2/4/8, 64 and
#            256 MiB per rank, every collective; the old build (86fb7ac) at N=2 and 4 (its 8-rank
#            sweep is the issue's hang); bigcopy's seed round (the native reference) and bare
#            event round (sync) at 256 MiB, N=2/4/8, out of and in place, in the same %ceil
#   oldq     ROUNDS (3) rounds alternating: the old cecoll-perf (its %ceil: bytes over one copy's
#            rate, the quantity of the reference's figures) on build/ (N=2/4/8) and build/old
#            (N=2/4), every collective, 64 and 256 MiB per rank
# Results: $OUT/s17.tar.gz, log $OUT/s17.log.
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin s17
nvcc -O2 -o /tmp/bigcopy lab/h200/bigcopy.cu -lcuda || echo "bigcopy: build failed"
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  floors)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in new old native; do
        for n in 2 4 8; do
          [ "$(left)" -lt 40 ] && break 3
          case $b in
          new) perf new "$R/fl-$b-n$n-r$round.txt" all -g $n -b $((64 * n))M -e $((256 * n))M -f 4 -d uint8 -R 2 -n 10 -w 2 -c 0 ;;
          old) [ $n = 8 ] || perf old "$R/fl-$b-n$n-r$round.txt" -N $n -b 64M -e 256M -f 4 -n 10 -w 2 -c 0 -o all ;;
          native)
            for ip in 0 1; do
              timeout 60 /tmp/bigcopy $n 256 $ip 1 seed,sync > "$R/bc-n$n-i$ip-r$round.txt" 2>&1
              echo "bc-n$n-i$ip-r$round: rc=$?"
            done ;;
          esac
        done
      done
    done
    python3 lab/h200/perfrows.py "$R"/fl-*.txt 2>/dev/null
    grep -h "round" "$R"/bc-*.txt
    ;;
  oldq)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in new old; do
        for n in 2 4 8; do
          [ "$(left)" -lt 30 ] && break 3
          [ $b = old ] && [ $n = 8 ] && continue
          lp=$PWD/build; [ $b = old ] && lp=$PWD/build/old
          LD_LIBRARY_PATH=$lp timeout 90 build/old/cecoll-perf -N $n -b 64M -e 256M -f 4 -o all -R 1 -n 10 -w 2 -c 0 \
            > "$R/oq-$b-n$n-r$round.txt" 2>&1
          echo "oq-$b-n$n-r$round: rc=$?"
        done
      done
    done
    python3 lab/h200/perfrows.py "$R"/oq-*.txt 2>/dev/null
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish s17
