#!/usr/bin/env bash
# shellcheck disable=SC2046 # the argument helpers' words are split on purpose
# lab/h200/small.sh: small messages and host cost with N ranks on one H200, by stage:
#   g8        8 B graph replays (lib.sh's g8args: every collective, a graph of 20 calls replayed
#             50 times; build/old: g8old), N = NS, ROUNDS rounds alternating over BUILDS
#   e8        eager 8 B at 4 ranks (one thread grouping every rank), ROUNDS rounds alternating
#             over BUILDS
#   sync      8 B graph replays (and eager, defaults) by CECOLL_SYNC x CECOLL_FLAG_WRITE (COMBOS
#             of sync/flag; "default" leaves one unset), N = NS; SYNC_ENV adds variables to every
#             run (CECOLL_HUB_BYTES=0: no hub plans, so the sync choice shows)
#   hubsizes  where hub plans stop paying: AllGather (8 B to 16 MiB per rank) and AlltoAll (8 B
#             to 4 MiB) with hub plans forced on (CECOLL_HUB_BYTES=1G) and off (0), graphs of 10
#             calls and eager, N = NS (the shipped build caps hub AlltoAll at 256 KiB whatever
#             the variable says)
#   hostcost  lab/h200/hostcost.c: a 4-rank AllGather's host time through cecoll against the
#             same driver calls from C, 8 B and 64 KiB, for each of BUILDS
#   hostsplit hostcost at 8 B under lab/h200/cushim.c (a counting libcuda.so.1): driver calls,
#             time in the driver and outside it per collective and side, cecoll's defaults and
#             allpairs/value (the C reference's own calls)
#   hubpar    lab/h200/hubpar.cu: the 4- and 8-rank 8 B hub AllGather's graphs with no library
#             around them: the root's copies chained (as shipped), pulled through its staging,
#             or rel (unsafe in a graph); waits w32 (a wait and a reset a word) or fold (no
#             write-value: resets ride on the signal and release copies); then chain and pull
#             captured through a fork into a stream of each rank's own (HUBPAR_FORK=1), 4 ranks
#   graphpar  lab/h200/graphpar.cu: tiny copies per rank in a graph, chained or as branches
#   relround  lab/h200/relround.cu: the released round's chain alone (copies only, write-value
#             flags, copied flags, events), eager and as graphs, 2/4/8 ranks at 64 MiB and 4/8
#             ranks at 4 KiB a block, 3 runs each
# build/ comes carried (make all; build/cecoll-perf), and build/BUILD for other BUILDS:
#
#   run(command="bash lab/h200/small.sh g8 e8 hostcost", carry=["build"])
#
# Knobs: ROUNDS (3), NS ("4 8"), BUILDS ("new"), COMBOS ("default/default allpairs/copy
# star/copy allpairs/value star/value"), SYNC_ENV, BUDGET (seconds, 560). Results in
# $OUT/small.tar.gz, the log in $OUT/small.log.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin small
NS=${NS:-4 8}
BUILDS=${BUILDS:-new}
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  g8)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in $BUILDS; do
        for n in $NS; do
          [ "$(left)" -lt 30 ] && break 3
          if [ "$b" = old ]; then perf old "$R/g8-$b-n$n-r$round.txt" $(g8old "$n")
          else perf "$b" "$R/g8-$b-n$n-r$round.txt" $(g8args "$n"); fi
        done
      done
    done
    python3 lab/h200/perfrows.py "$R"/g8-*.txt 2>/dev/null | awk '{print $1, $2, $4, $5}'
    ;;
  e8)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for b in $BUILDS; do
        [ "$(left)" -lt 30 ] && break 2
        perf "$b" "$R/e8-$b-r$round.txt" all -g 4 -b 32 -e 32 -d uint8 -R 2 -n 200 -w 20 -c 1
      done
    done
    python3 lab/h200/perfrows.py "$R"/e8-*.txt 2>/dev/null | awk '{print $1, $2, $4, $5}'
    ;;
  sync)
    for combo in ${COMBOS:-default/default allpairs/copy star/copy allpairs/value star/value}; do
      s=${combo%/*} f=${combo#*/}
      read -r -a envs <<< "${SYNC_ENV:-}"
      [ "$s" != default ] && envs+=("CECOLL_SYNC=$s")
      [ "$f" != default ] && envs+=("CECOLL_FLAG_WRITE=$f")
      for n in $NS; do
        [ "$(left)" -lt 30 ] && break 2
        (for e in "${envs[@]}"; do export "${e?}"; done; perf new "$R/sync-${s}_$f-n$n.txt" $(g8args "$n"))
      done
    done
    for n in $NS; do
      (for e in ${SYNC_ENV:-}; do export "${e?}"; done
        perf new "$R/sync-eager-n$n.txt" all -g "$n" -b $((8 * n)) -e $((8 * n)) -d uint8 -R 2 -n 500 -w 20 -c 1)
    done
    python3 lab/h200/perfrows.py "$R"/sync-*.txt 2>/dev/null | awk '{print $1, $2, $4, $5}'
    ;;
  hubsizes)
    for n in $NS; do
      for hub in 1073741824 0; do
        for g in 0 20; do
          [ "$(left)" -lt 30 ] && break 3
          CECOLL_HUB_BYTES=$hub perf new "$R/hub-ag-h$hub-G$g-n$n.txt" allgather -g "$n" -b $((8 * n)) -e $((16 * n))M -f 4 -d uint8 -R 2 -n 10 -G $g -w 3 -c 1
          CECOLL_HUB_BYTES=$hub perf new "$R/hub-a2a-h$hub-G$g-n$n.txt" alltoall -g "$n" -b $((8 * n)) -e $((4 * n))M -f 4 -d uint8 -R 2 -n 10 -G $g -w 3 -c 1
        done
      done
    done
    python3 lab/h200/perfrows.py "$R"/hub-*.txt 2>/dev/null
    ;;
  hostcost)
    hostcosts $BUILDS
    ;;
  hostsplit)
    gcc -O2 -Wall -o /tmp/hostcost lab/h200/hostcost.c -ldl -lpthread || continue
    mkdir -p /tmp/cushim
    gcc -O2 -Wall -Wextra -shared -fPIC -Wl,-soname,libcuda.so.1 -o /tmp/cushim/libcuda.so.1 lab/h200/cushim.c -ldl -lpthread || continue
    gcc -O2 -Wall -Wextra -DCUSHIM_BENCH -o /tmp/cushim_bench lab/h200/cushim.c -ldl || continue
    cushim_real
    # Every name the backend resolves must be a shim export, or it would miss the driver.
    miss=$(grep -oE 'name: +"cu[A-Za-z0-9_]+"' internal/hip/nvidia/symbols.go | cut -d'"' -f2 | sort -u |
      comm -23 - <(nm -D --defined-only /tmp/cushim/libcuda.so.1 | awk '{ print $3 }' | sort -u))
    echo "symbols.go names the shim lacks: ${miss:-none}"
    LD_LIBRARY_PATH=/tmp/cushim:$LD_LIBRARY_PATH timeout 10 /tmp/cushim_bench 200000 | tee "$R/cushim-overhead.txt"
    for combo in default/default allpairs/value; do
      envs=()
      [ "$combo" != default/default ] && envs=(CECOLL_SYNC="${combo%/*}" CECOLL_FLAG_WRITE="${combo#*/}")
      LD_LIBRARY_PATH=/tmp/cushim:$LD_LIBRARY_PATH timeout 25 env "${envs[@]}" /tmp/hostcost -l "$PWD/build/libcecoll.so" \
        -n 4 -s 8 -r 30 -k 64 -t 20 > "$R/hostsplit-${combo//\//_}.txt" 2>&1
      echo "hostsplit $combo: rc=$?"
      grep -E '^(HOSTCOST|HOSTSPLIT)|watchdog' "$R/hostsplit-${combo//\//_}.txt"
    done
    ;;
  hubpar)
    nvcc -O2 -o /tmp/hubpar lab/h200/hubpar.cu -lcuda -ldl || continue
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for n in 4 8; do
        for c in chain pull rel; do
          for w in w32 fold; do timeout -k 2 20 /tmp/hubpar $c $w $n; done
        done
      done
      for f in "" 1; do
        for c in chain pull; do
          for w in w32 fold; do HUBPAR_FORK=$f timeout -k 2 20 /tmp/hubpar $c $w 4; done
        done
      done
    done 2>&1 | tee "$R/hubpar.txt"
    ;;
  graphpar)
    nvcc -O2 -o /tmp/graphpar lab/h200/graphpar.cu || continue
    timeout -k 2 60 /tmp/graphpar 2>&1 | tee "$R/graphpar.txt"
    ;;
  relround)
    nvcc -O2 -o /tmp/relround lab/h200/relround.cu -lcuda || continue
    for a in "2 65536" "4 65536" "8 65536" "4 4" "8 4"; do
      for _ in 1 2 3; do timeout 60 /tmp/relround $a 40; done
    done 2>&1 | tee "$R/relround.txt"
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish small
