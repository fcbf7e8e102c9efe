#!/usr/bin/env bash
# shellcheck disable=SC2046 # the argument helpers' words are split on purpose
# lab/h200/large.sh: large messages with N ranks on one H200, by stage:
#   floors   the floor table: every collective at 64 and 256 MiB per rank, N = NS, eager, in
#            ROUNDS rounds alternating over BUILDS (lib.sh's builds; "old" runs at 2 and 4 ranks
#            only, its 8-rank sweep deadlocks in in-place AlltoAll); the build "native" is
#            lab/h200/bigcopy.cu's seed round (the seed protocol from C) and bare event round
#            (sync) at 256 MiB, out of and in place, in the same %ceil
#   copies   bigcopy.cu: a 256 MiB AllGather's copies alone (in pieces, one batch, two streams a
#            rank, inside the protocol's two-hop round trip) against the ceiling: N=2 in and out
#            of place, N=4 in and out, N=8 out
#   ovh      eager AllGather at N=2 and 4 from 4 MiB to 1 GiB per rank, events (the default) and
#            flags (CECOLL_EVENTS=0): what a call adds to its copies at each size
#   a2a      in-place AlltoAll at 256 MiB per rank: N=8 by CECOLL_STAGING_BYTES (STAGINGS), N=2
#            and 4 at the default, then checked runs (-c 1) at N=8 and N=2
#   var      256 MiB AllGather per rank at N=2 and 4, build/ against VARS (lab builds under
#            build/, e.g. one made with lab/h200/evtail.patch), ROUNDS rounds alternating
#   sweep    the 8-rank eager sweep (64 to 256 MiB per rank, every collective, no data check),
#            unregistered and in symmetric windows: it must finish, in seconds
#   copyseq  lab/h200/copyseq.cu: one 256 MiB copy against 4 x 64 MiB chained on one stream
#            (eager, as a graph) and over two streams
# build/ comes carried (make all; build/cecoll-perf), and build/old or other builds where BUILDS
# or VARS name them:
#
#   run(command="bash lab/h200/large.sh floors", carry=["build"])
#
# Knobs: ROUNDS (3), NS ("2 4 8"), BUILDS ("new native"), VARS, STAGINGS ("32M 64M 128M 512M"),
# BUDGET (seconds, 560). Results in $OUT/large.tar.gz, the log in $OUT/large.log.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin large
NS=${NS:-2 4 8}
case " $* " in *" floors "* | *" copies "*) nvcc -O2 -o /tmp/bigcopy lab/h200/bigcopy.cu -lcuda || echo "bigcopy: build failed" ;; esac
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  floors)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in ${BUILDS:-new native}; do
        for n in $NS; do
          [ "$(left)" -lt 40 ] && break 3
          case $b in
          old) [ "$n" = 8 ] || perf old "$R/fl-$b-n$n-r$round.txt" $(floorargs old "$n") ;;
          native)
            for ip in 0 1; do
              timeout 60 /tmp/bigcopy "$n" 256 $ip 1 seed,sync > "$R/bc-n$n-i$ip-r$round.txt" 2>&1
              echo "bc-n$n-i$ip-r$round: rc=$?"
            done ;;
          *) perf "$b" "$R/fl-$b-n$n-r$round.txt" $(floorargs "$b" "$n") ;;
          esac
        done
      done
    done
    python3 lab/h200/perfrows.py "$R"/fl-*.txt 2>/dev/null
    grep -h "round" "$R"/bc-*.txt 2>/dev/null
    ;;
  copies)
    for a in "2 256 1" "4 256 0" "4 256 1" "8 256 0" "2 256 0"; do
      timeout 90 /tmp/bigcopy $a 3 > "$R/bigcopy-${a// /-}.txt" 2>&1
      echo "bigcopy $a: rc=$?"; grep median "$R/bigcopy-${a// /-}.txt"
    done
    ;;
  ovh)
    for n in 2 4; do
      a="allgather -g $n -b $((4 * n))M -e $((1024 * n))M -f 4 -d uint8 -R 2 -n 10 -w 2 -c 0"
      perf new "$R/ovh-n$n-new.txt" $a
      CECOLL_EVENTS=0 perf new "$R/ovh-n$n-flags.txt" $a
      perf new "$R/ovh-n$n-new2.txt" $a
    done
    python3 lab/h200/perfrows.py "$R"/ovh-*.txt 2>/dev/null
    ;;
  a2a)
    for st in ${STAGINGS:-32M 64M 128M 512M}; do
      CECOLL_STAGING_BYTES=$st perf new "$R/a2a-n8-s$st.txt" alltoall -g 8 -b 2G -e 2G -d uint8 -R 2 -n 5 -w 1 -c 0
    done
    perf new "$R/a2a-n4.txt" alltoall -g 4 -b 1G -e 1G -d uint8 -R 2 -n 5 -w 1 -c 0
    perf new "$R/a2a-n2.txt" alltoall -g 2 -b 512M -e 512M -d uint8 -R 2 -n 5 -w 1 -c 0
    perf new "$R/a2a-check8.txt" alltoall -g 8 -b 128M -e 512M -f 4 -d uint8 -R 2 -n 2 -w 1 -c 1
    perf new "$R/a2a-check2.txt" alltoall -g 2 -b 32M -e 128M -f 4 -d uint8 -R 2 -n 2 -w 1 -c 1
    python3 lab/h200/perfrows.py "$R"/a2a-*.txt 2>/dev/null
    ;;
  var)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in new ${VARS:-}; do
        for n in 2 4; do
          [ "$(left)" -lt 30 ] && break 3
          perf "$b" "$R/var-$b-n$n-r$round.txt" allgather -g "$n" -b $((256 * n))M -e $((256 * n))M -d uint8 -R 2 -n 20 -w 3 -c 0
        done
      done
    done
    python3 lab/h200/perfrows.py "$R"/var-*.txt 2>/dev/null | sort -k2,2 -k1,1
    ;;
  sweep)
    for reg in 0 2; do
      s=$(date +%s)
      PERF_TIMEOUT=110 perf new "$R/sweep-R$reg.txt" all -g 8 -b 512M -e 2G -f 4 -d uint8 -R $reg -n 20 -w 3 -c 0
      echo "SWEEP -R $reg $(($(date +%s) - s))s"
    done
    ;;
  copyseq)
    nvcc -O2 -o /tmp/copyseq lab/h200/copyseq.cu || continue
    timeout 60 /tmp/copyseq | tee "$R/copyseq.txt"
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish large
