#!/usr/bin/env bash
# lab/h200/perf4.sh: the eighth session's performance call on the H200: the old engine (86fb7ac,
# build/old) against engine 2 (build), alternating, three rounds: %ceil at 64 and 256 MiB per rank
# (N=2/4/8, registered windows, eager), 8 B graph replays (N=4/8), hostcost; then the issue's
# -N 8 sweep, the in-place rooted cells under MPS, and the matrix's pairwise list.
# Budget-guarded (PERF_BUDGET, default 550 s). Output in $OUT/perf4.log and $OUT/p_*.txt.
# build/old's cecoll-perf predates nccl-tests' flags (issue 19): it gets the old ones (-N ranks,
# per-rank -b/-e, -R 1 windows, -G -K calls per graph), build's the new ones.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}
exec > >(tee "$O/perf4.log") 2>&1
export CECOLL_BACKEND=nvidia NCCL_NVLS_ENABLE=0
T0=$(date +%s)
BUDGET=${PERF_BUDGET:-550}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
ok() { [ "$(left)" -gt "${1:-30}" ] || { echo "SKIP (budget): $2"; return 1; }; }
gcc -O2 -Wall -o /tmp/hostcost lab/h200/hostcost.c -ldl -lpthread || echo "hostcost build failed"

echo "== 1. the issue's 8-rank eager sweep, new build"
s=$(date +%s)
timeout 100 build/cecoll-perf all -g 8 -b 512M -e 2G -f 4 -d uint8 -R 2 -n 20 -w 3 -c 0
echo "SWEEP rc=$? $(( $(date +%s)-s ))s"

for round in 1 2 3; do
  for b in old new; do
    dir=build; [ $b = old ] && dir=build/old
    for n in 2 4 8; do
      ok 60 "big $b N=$n round $round" || continue
      if [ $b = old ]; then args=(-N $n -b 64M -e 256M -f 4 -n 10 -w 2 -c 0 -o all -R 1)
      else args=(all -g $n -b $((64 * n))M -e $((256 * n))M -f 4 -d uint8 -R 2 -n 10 -w 2 -c 0); fi
      timeout 60 $dir/cecoll-perf "${args[@]}" > "$O/p_big_${b}_N${n}_r${round}.txt" 2>&1
      echo "big $b N=$n r$round rc=$?"
    done
    for n in 4 8; do
      ok 40 "graph $b N=$n round $round" || continue
      if [ $b = old ]; then args=(-N $n -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all)
      else args=(all -g $n -b $((8 * n)) -e $((8 * n)) -d uint8 -R 2 -n 20 -G 50 -w 5 -c 1); fi
      timeout 40 $dir/cecoll-perf "${args[@]}" > "$O/p_g8_${b}_N${n}_r${round}.txt" 2>&1
      echo "graph8 $b N=$n r$round rc=$?"
    done
    ok 40 "hostcost $b round $round" && timeout 40 /tmp/hostcost -l $dir/libcecoll.so -n 4 -s 8,65536 -r 20 -k 64 -t 30 2>&1 | grep -E "HOSTCOST|watchdog|rror" | sed "s/^/$b r$round /"
  done
done

echo "== 3. in-place Scatter/Gather between processes under MPS (with the logs of any unexpected cell)"
cells=()
for f in scatter gather; do for r in root0 rootlast; do for n in 2 4; do cells+=("$f.inplace.$r.sym.proc.eager.own.n$n"); done; done; done
list=$(IFS=,; echo "${cells[*]}")
if ok 100 "MPS cells"; then
  nvidia-cuda-mps-control -d && sleep 1
  LD_LIBRARY_PATH=$PWD/build build/ctests/matrix --run "$list" -j 2 -t 40 -o /tmp/mpslogs 2>&1 | grep -vE "^\s*$" | tail -12
  for f in /tmp/mpslogs/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done 2>/dev/null | tail -30
  echo quit | nvidia-cuda-mps-control; sleep 1
fi
echo "== 4. matrix pairwise at 2, 4, 8 ranks"
ok 100 "matrix pairwise" && LD_LIBRARY_PATH=$PWD/build build/ctests/matrix --run pairwise -r 2,4,8 -j 4 -t 60 > "$O/p_matrix_pairwise.txt" 2>&1; tail -6 "$O/p_matrix_pairwise.txt" 2>/dev/null
echo "== done after $(( $(date +%s)-T0 ))s"
