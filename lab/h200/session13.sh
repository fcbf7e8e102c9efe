#!/usr/bin/env bash
# lab/h200/session13.sh: the thirteenth session's H200 calls (issue 16's last floors). Stages:
#   bis      where between 86fb7ac (old) and abe79e7 (lanes) the 8 B graph replays at 4 ranks
#            lost 2.5-3 us: the old cecoll-perf (-N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all)
#            against each library under build/bis/COMMIT (stripped builds of those commits,
#            carried as build/bis.tar.xz), ROUNDS rounds alternating
#   bigcopy  lab/h200/bigcopy.cu: a large AllGather's copies alone, in pieces, batched, over
#            two streams a rank and inside the protocol's two-hop round trip, against the
#            ceiling: N=2 in place, N=4 in and out of place, N=8 out, 256 MiB per rank
#   g8       8 B graph replays: the old cecoll-perf at 4 ranks against old, head (13edc08) and
#            cand (captured waits zeroed by one copy after their batch), and the new one at 4
#            and 8 ranks against head and cand, ROUNDS rounds alternating
#   ag       256 MiB AllGather per rank at N=2 and 4, head against e03 (13edc08 with mutant
#            E03: event calls on the caller's stream, no joins), ROUNDS rounds alternating
#   matrix   the in-process matrix cells (build/lists/inproc10.txt, then every group and
#            thread cell at 8 ranks) with the library in build/ (event calls on the caller's
#            stream), batched as session11.sh's inprocb and inproc8
#   ag2      256 MiB AllGather per rank at N=2 and 4, new (build/new) against head,
#            ROUNDS rounds alternating; then every collective at 256 MiB, N=2/4/8, new
#   g8b      8 B graph replays at 4 ranks, new against head, ROUNDS rounds alternating
#   zero     lab/h200/zerocopy.cu: a wait's word reset in its batch or zeroed by a copy after it,
#            eager and in graphs (why the zero-copy candidate hung)
# Results: $OUT/s13.tar.gz, log $OUT/s13.log.
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin s13
# big256 COLL N: cecoll-perf's arguments for COLL at 256 MiB per rank, N ranks, eager.
big256() { echo "$1" -g "$2" -b $((256 * $2))M -e $((256 * $2))M -d uint8 -R 2 -n 10 -w 2 -c 0; }
# big_rounds TAG BUILD...: 256 MiB AllGather at N=2 and 4, the builds alternating, ROUNDS rounds.
big_rounds() {
  local tag=$1 round b n; shift
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for b in "$@"; do
      for n in 2 4; do
        perf "$b" "$R/$tag-$b-n$n-r$round.txt" $(big256 allgather $n)
      done
    done
  done
}
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  bis)
    [ -f build/bis.tar.xz ] && tar -xJf build/bis.tar.xz -C build
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for d in build/bis/*/; do
        b=$(basename "$d")
        LD_LIBRARY_PATH=$PWD/$d timeout 60 build/old/cecoll-perf -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all \
          > "$R/bis-$b-r$round.txt" 2>&1
        echo "bis $b r$round: rc=$? $(grep -c . "$R/bis-$b-r$round.txt") lines"
      done
    done
    ;;
  bigcopy)
    nvcc -O2 -o /tmp/bigcopy lab/h200/bigcopy.cu -lcuda || continue
    for a in "2 256 1" "4 256 0" "4 256 1" "8 256 0" "2 256 0"; do
      /tmp/bigcopy $a 3 > "$R/bigcopy-${a// /-}.txt" 2>&1
      echo "bigcopy $a: rc=$?"; grep median "$R/bigcopy-${a// /-}.txt"
    done
    ;;
  g8)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in old head cand; do
        LD_LIBRARY_PATH=$PWD/build/$b timeout 60 build/old/cecoll-perf -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all \
          > "$R/g8-old-$b-r$round.txt" 2>&1
        echo "g8 old perf $b r$round: rc=$?"
      done
      for b in head cand; do
        perf $b "$R/g8-$b-n4-r$round.txt" $(g8args 4)
        perf $b "$R/g8-$b-n8-r$round.txt" $(g8args 8)
      done
    done
    ;;
  ag) big_rounds ag head e03 ;;
  matrix)
    mrun inprocb "$(cat build/lists/inproc10.txt)" 200 -j 4 -b 64 -t 60
    mrun inproc8 "$(cells '\.(group|threads)\.' -r 8)" 120 -r 8 -j 4 -b 64 -t 30
    ;;
  ag2)
    big_rounds ag2 new head
    for n in 2 4 8; do
      perf new "$R/all-new-n$n.txt" $(big256 all $n)
    done
    ;;
  g8b)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in new head; do
        perf $b "$R/g8b-$b-n4-r$round.txt" $(g8args 4)
      done
    done
    ;;
  zero)
    nvcc -O2 -o /tmp/zerocopy lab/h200/zerocopy.cu -lcuda || continue
    for how in eager graph; do
      for m in reset zero zeroA zeroB flush; do
        timeout -k 2 20 /tmp/zerocopy $m $how; echo "rc=$?"
      done
    done 2>&1 | tee "$R/zero.txt"
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish s13
