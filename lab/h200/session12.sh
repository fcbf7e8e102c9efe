#!/usr/bin/env bash
# lab/h200/session12.sh: the twelfth session's H200 calls (issue 16's last floors). Stages:
#   x8    8 B graph replays, N=4: new, old and build/xvar (new plus lab-only knobs:
#         CECOLL_XNOJOIN=1 captured calls run on the caller's stream, no fork into the
#         engine's stream; CECOLL_XNOOUT=1 no outbox release), 3 rounds alternating
#   big   256 MiB AllGather per rank at N=2 and N=4: new, CECOLL_EVENTS=0 (flags), and
#         build/xvar with CECOLL_XNOSIDE=1 (own block in the batch) and CECOLL_XNOBATCH=1
#         (one copy each), 3 rounds alternating
#   x8b   8 B graph replays, N=4, second call: build/lanes (abe79e7, byte lanes) beside new
#         and old; xvar with CECOLL_XSPREAD=1 (every flag word on its own 128-byte line,
#         with XNOOUT=1) against XNOOUT=1 alone; new, lanes and old under
#         CUDA_DEVICE_MAX_CONNECTIONS=8 and 16; new with 40 collectives a graph (-n 40)
#   ovh   eager AllGather at N=2 and 4, 4 MiB to 1 GiB per rank: the fixed cost a call
#         adds to its copies (time less the ceiling's), new and flags
#   x8c   are 8 B graph replays host-bound? new, lanes and xvar with CECOLL_XNOORDER=1
#         (graph launches without OrderBefore/After) with -C 1 (the host's launch time) and
#         without; graphs of 10, 20 and 40 collectives
#   x8d   does the graph's first launch (its upload) weigh in? cecoll-perf as shipped against
#         build/xvar/cecoll-perf (the same with XWARM=1: one untimed replay before the timed
#         ones), graphs of 10, 20 and 40 collectives; lanes warm; old
#   big2  the event joins' saved hops: 256 MiB AllGather per rank, N=2/4/8, new against
#         build/xvar with no knob (the tree before them), 3 rounds alternating
#   floors2  the floor table, new only (session11.sh's floors stage without old), ROUNDS
#   x8e   the harness or the library? the old cecoll-perf (warm-up replays before timing)
#         against the new library, the lanes library and the old one; the new cecoll-perf
#   dot   the captured graphs of a 4-rank 8 B AllGather (2 calls a graph), new, lanes and old,
#         as DOT files (lab/h200/cushim.c with CUSHIM_DOT, built into build/cushim), to compare
#         node by node what the replays run
#   qmap  does the number of streams made before the process's own matter? the old cecoll-perf
#         against the old and the new library under cushim's CUSHIM_STREAMS=0/4/8, 2 rounds
# build/xvar: lab/h200/xvar.patch (the CECOLL_X* knobs, and XWARM in cecoll-perf) applied to a
# scratch checkout of 2291cf9: its libcecoll.so.0.1.0 and cecoll-perf go to build/xvar/; build/lanes
# is abe79e7's library. None of it is product code.
# The matrix, C tests and floors: session11.sh's stages. Results: $OUT/s12.tar.gz, log $OUT/s12.log.
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin s12
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  x8)
    for round in 1 2 3; do
      perf old "$R/x8-old-r$round.txt" -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all
      perf new "$R/x8-new-r$round.txt" $(g8args 4)
      for v in XNOJOIN=1 XNOOUT=1 "XNOJOIN=1 XNOOUT=1"; do
        tag=$(echo "$v" | tr ' =' '_-')
        (for x in $v; do export "CECOLL_$x"; done; perf xvar "$R/x8-$tag-r$round.txt" $(g8args 4))
      done
    done
    CECOLL_XNOJOIN=1 perf xvar "$R/x8n8-nojoin.txt" $(g8args 8)
    perf new "$R/x8n8-new.txt" $(g8args 8)
    ;;
  big)
    for round in 1 2 3; do
      for n in 2 4; do
        a="allgather -g $n -b $((256 * n))M -e $((256 * n))M -d uint8 -R 2 -n 10 -w 2 -c 0"
        perf new "$R/big-n$n-new-r$round.txt" $a
        CECOLL_EVENTS=0 perf new "$R/big-n$n-flags-r$round.txt" $a
        CECOLL_XNOSIDE=1 perf xvar "$R/big-n$n-noside-r$round.txt" $a
        CECOLL_XNOBATCH=1 perf xvar "$R/big-n$n-nobatch-r$round.txt" $a
      done
    done
    ;;
  x8b)
    for round in 1 2; do
      perf old "$R/x8b-old-r$round.txt" -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all
      perf new "$R/x8b-new-r$round.txt" $(g8args 4)
      perf lanes "$R/x8b-lanes-r$round.txt" $(g8args 4)
      CECOLL_XNOOUT=1 perf xvar "$R/x8b-noout-r$round.txt" $(g8args 4)
      CECOLL_XNOOUT=1 CECOLL_XSPREAD=1 perf xvar "$R/x8b-spread-r$round.txt" $(g8args 4)
      for q in 8 16; do
        CUDA_DEVICE_MAX_CONNECTIONS=$q perf old "$R/x8b-old-q$q-r$round.txt" -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all
        CUDA_DEVICE_MAX_CONNECTIONS=$q perf new "$R/x8b-new-q$q-r$round.txt" $(g8args 4)
        CUDA_DEVICE_MAX_CONNECTIONS=$q perf lanes "$R/x8b-lanes-q$q-r$round.txt" $(g8args 4)
      done
      perf new "$R/x8b-new-n40-r$round.txt" all -g 4 -b 32 -e 32 -d uint8 -R 2 -n 40 -G 25 -w 5 -c 1
    done
    ;;
  x8c)
    for round in 1 2; do
      perf old "$R/x8c-old-r$round.txt" -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all
      for b in new lanes; do
        perf $b "$R/x8c-$b-r$round.txt" $(g8args 4)
        perf $b "$R/x8c-$b-cpu-r$round.txt" $(g8args 4) -C 1
      done
      CECOLL_XNOORDER=1 perf xvar "$R/x8c-noorder-r$round.txt" $(g8args 4)
      CECOLL_XNOORDER=1 perf xvar "$R/x8c-noorder-cpu-r$round.txt" $(g8args 4) -C 1
      for k in 10 40; do
        perf new "$R/x8c-new-k$k-r$round.txt" all -g 4 -b 32 -e 32 -d uint8 -R 2 -n $k -G $((1000 / k)) -w 5 -c 1
        perf new "$R/x8c-new-k$k-cpu-r$round.txt" all -g 4 -b 32 -e 32 -d uint8 -R 2 -n $k -G $((1000 / k)) -w 5 -c 1 -C 1
        CECOLL_XNOORDER=1 perf xvar "$R/x8c-noorder-k$k-r$round.txt" all -g 4 -b 32 -e 32 -d uint8 -R 2 -n $k -G $((1000 / k)) -w 5 -c 1
      done
    done
    ;;
  x8d)
    warm() { # FILE ARGS...: the warm cecoll-perf against build/ (new) or $LIB
      local f=$1; shift
      XWARM=1 LD_LIBRARY_PATH=${LIB:-$PWD/build} timeout 60 build/xvar/cecoll-perf "$@" > "$f" 2>&1; echo "$(basename "$f"): rc=$?"
    }
    for round in 1 2; do
      perf old "$R/x8d-old-r$round.txt" -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all
      for k in 10 20 40; do
        a="all -g 4 -b 32 -e 32 -d uint8 -R 2 -n $k -G $((1000 / k)) -w 5 -c 1"
        perf new "$R/x8d-new-k$k-r$round.txt" $a
        warm "$R/x8d-warm-k$k-r$round.txt" $a
      done
      LIB=$PWD/build/lanes:$PWD/build warm "$R/x8d-lanes-warm-k20-r$round.txt" $(g8args 4)
      warm "$R/x8d-warm-n8-r$round.txt" $(g8args 8)
    done
    ;;
  big2)
    for round in 1 2 3; do
      for n in 2 4 8; do
        a="allgather -g $n -b $((256 * n))M -e $((256 * n))M -d uint8 -R 2 -n 10 -w 2 -c 0"
        perf xvar "$R/big2-n$n-prev-r$round.txt" $a
        perf new "$R/big2-n$n-new-r$round.txt" $a
      done
    done
    ;;
  floors2)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for n in 2 4 8; do
        perf new "$R/fl2-new-n$n-r$round.txt" all -g $n -b $((64 * n))M -e $((256 * n))M -f 4 -d uint8 -R 2 -n 10 -w 2 -c 0
      done
    done
    ;;
  x8e)
    oldperf() { # FILE LIBDIR: the old cecoll-perf's 8 B graph rows against LIBDIR's library
      LD_LIBRARY_PATH=$2:$PWD/build timeout 60 build/old/cecoll-perf -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all > "$1" 2>&1
      echo "$(basename "$1"): rc=$?"
    }
    for round in 1 2 3; do
      perf old "$R/x8e-old-r$round.txt" -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all
      oldperf "$R/x8e-oldperf-new-r$round.txt" "$PWD/build"
      oldperf "$R/x8e-oldperf-lanes-r$round.txt" "$PWD/build/lanes"
      perf new "$R/x8e-new-r$round.txt" $(g8args 4)
    done
    ;;
  dot)
    cushim_real
    for b in new lanes old; do
      lib=$PWD/build; [ $b != new ] && lib=$PWD/build/$b
      mkdir -p "$R/dot-$b"
      CUSHIM_DOT=$R/dot-$b LD_LIBRARY_PATH=$PWD/build/cushim:$lib:$PWD/build timeout 60 build/old/cecoll-perf \
        -N 4 -b 8 -e 8 -n 1 -w 1 -c 0 -G -K 2 -o allgather > "$R/dot-$b.txt" 2>&1
      echo "dot $b: rc=$? $(ls "$R/dot-$b" | wc -l) graphs"
    done
    ;;
  qmap)
    cushim_real
    for round in 1 2; do
      for b in old new; do
        lib=$PWD/build; [ $b != new ] && lib=$PWD/build/$b
        for k in 0 4 8; do
          CUSHIM_STREAMS=$k LD_LIBRARY_PATH=$PWD/build/cushim:$lib:$PWD/build timeout 60 build/old/cecoll-perf \
            -N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all > "$R/qmap-$b-s$k-r$round.txt" 2>&1
          echo "qmap $b s$k r$round: rc=$?"
        done
      done
    done
    ;;
  ovh)
    for n in 2 4; do
      a="allgather -g $n -b $((4 * n))M -e $((1024 * n))M -f 4 -d uint8 -R 2 -n 10 -w 2 -c 0"
      perf new "$R/ovh-n$n-new.txt" $a
      CECOLL_EVENTS=0 perf new "$R/ovh-n$n-flags.txt" $a
      perf new "$R/ovh-n$n-new2.txt" $a
    done
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish s12
