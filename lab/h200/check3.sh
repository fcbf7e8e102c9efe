#!/usr/bin/env bash
# lab/h200/check3.sh: the eighth session's correctness call on the H200 with engine 2
# (build/ carried: libcecoll.so, threadloop, cecoll-perf, gpu/test_*, ctests/matrix).
# Steps in priority order, each skipped once the call's budget (CHECK_BUDGET, default 540 s)
# is spent. Output: $OUT/check3.log and $OUT/matrix-*.txt.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}
exec > >(tee "$O/check3.log") 2>&1
export LD_LIBRARY_PATH=$PWD/build:${LD_LIBRARY_PATH:-} CECOLL_BACKEND=nvidia NCCL_NVLS_ENABLE=0
T0=$(date +%s)
BUDGET=${CHECK_BUDGET:-540}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
ok() { [ "$(left)" -gt "${1:-30}" ] || { echo "SKIP (budget): $2"; return 1; }; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

echo "== 1. thread per rank loops (iteration 0 is where the old engine hung)"
pass=0; hang=0
for k in $(seq 1 15); do
  r=$(timeout 60 build/threadloop -f allgather -r 4 -i 200 -m threads -t 6 -c 4096 | tail -1); echo "$r"
  case $r in OK*) pass=$((pass+1));; *) hang=$((hang+1));; esac
done
for f in scatter gather alltoall; do for k in 1 2 3; do
  r=$(timeout 60 build/threadloop -f $f -r 4 -i 200 -m threads -t 6 -c 4096 | tail -1); echo "$r"
  case $r in OK*) pass=$((pass+1));; *) hang=$((hang+1));; esac
done; done
for k in 1 2 3; do
  r=$(timeout 60 build/threadloop -f allgather -r 8 -i 200 -m threads -t 6 -c 65536 | tail -1); echo "$r"
  case $r in OK*) pass=$((pass+1));; *) hang=$((hang+1));; esac
done
for v in "CECOLL_FLAG_WRITE=copy" "CECOLL_SYNC=allpairs"; do for k in 1 2; do
  r=$(env $v timeout 60 build/threadloop -f allgather -r 4 -i 200 -m threads -t 6 -c 4096 | tail -1); echo "$v $r"
  case $r in OK*) pass=$((pass+1));; *) hang=$((hang+1));; esac
done; done
r=$(timeout 60 build/threadloop -f alltoall -r 4 -i 500 -m persist -t 6 -c 65536 | tail -1); echo "$r"
r=$(timeout 60 build/threadloop -f scatter -r 4 -i 500 -m group -t 6 -c 65536 | tail -1); echo "$r"
echo "THREADLOOP pass=$pass other=$hang"

echo "== 2. the C tests with a thread per rank, 4 and 8 ranks, 12 runs each (4 at a time)"
jobs=()
for t in allgather alltoall scatter gather; do for n in 4 8; do for k in $(seq 1 12); do jobs+=("$t $n $k"); done; done; done
run_c() {
  set -- $1
  local s=$(date +%s) rc
  timeout 90 build/gpu/test_$1 -r $2 -m threads -q > /tmp/ct_$1_$2_$3.log 2>&1; rc=$?
  echo "CTEST $1 n=$2 run=$3 rc=$rc $(( $(date +%s)-s ))s $(grep -E '[0-9]+ passed' /tmp/ct_$1_$2_$3.log | tail -1)"
}
export -f run_c
if ok 200 "C tests"; then
  printf '%s\n' "${jobs[@]}" | xargs -P 4 -I{} bash -c 'run_c "{}"' | sort > /tmp/ctests.txt
  cat /tmp/ctests.txt
  echo "CTESTS total=$(wc -l < /tmp/ctests.txt) rc0=$(grep -c 'rc=0 ' /tmp/ctests.txt)"
fi

echo "== 3. in-place Scatter/Gather on symmetric windows between processes (the issue's wrong-data case)"
cells=()
for f in scatter gather; do for r in root0 rootlast; do for n in 2 3 4; do cells+=("$f.inplace.$r.sym.proc.eager.own.n$n"); done; done; done
list=$(IFS=,; echo "${cells[*]}")
ok 60 "in-place cells" && build/ctests/matrix --run "$list" -j 2 -t 60 2>&1 | tail -3
if ok 60 "in-place cells under MPS"; then
  nvidia-cuda-mps-control -d && sleep 1 && build/ctests/matrix --run "$list" -j 2 -t 60 2>&1 | tail -2
  echo quit | nvidia-cuda-mps-control; sleep 1
fi

echo "== 4. the 8-rank eager sweep of the issue (must finish, quickly)"
if ok 120 "8-rank sweep"; then
  s=$(date +%s)
  timeout 110 build/cecoll-perf all -g 8 -b 512M -e 2G -f 4 -d uint8 -R 2 -n 20 -w 3 -c 0
  echo "SWEEP rc=$? $(( $(date +%s)-s ))s"
fi

echo "== 5. the matrix, pairwise list at ranks 2, 4, 8"
ok 90 "matrix pairwise" && build/ctests/matrix --run pairwise -r 2,4,8 -j 4 -t 60 > "$O/matrix-pairwise.txt" 2>&1; tail -12 "$O/matrix-pairwise.txt"
echo "== 6. a shard of the whole matrix"
if ok 90 "matrix shard"; then
  timeout $(( $(left) - 20 )) build/ctests/matrix --run all --shard 1/12 -r 2,4,8 -j 4 -t 60 > "$O/matrix-shard.txt" 2>&1
  echo "shard rc=$?"; tail -8 "$O/matrix-shard.txt"
fi
echo "== done after $(( $(date +%s)-T0 ))s"
