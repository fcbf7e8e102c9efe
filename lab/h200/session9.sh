#!/usr/bin/env bash
# lab/h200/session9.sh: the ninth session's H200 calls. Stages (arguments, in order):
#   dropin   lab/h200/dropin.sh (issue 18's torch checks), its tar kept
#   mps      CUDA start-up time of 4 processes without and with MPS (lab/h200/mpsinit.c),
#            then the in-place rooted cells between processes under MPS, with the matrix's
#            10 s bootstrap timeout and with 60 s and CECOLL_DEBUG=INFO logs
#   inproc   the matrix's in-process cells (group, threads; 2/4/8 ranks) in a fixed shuffled
#            order (build/lists/inproc.txt), -j 8, until the budget is spent
#   procmps  the process cells (build/lists/proc.txt) under MPS, -j 8, until the budget is spent
# Budget: S9_BUDGET seconds for the whole call (default 560). Everything lands in one
# tar, $OUT/s9.tar.gz, and the log in $OUT/s9.log.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/s9out}
mkdir -p "$O/s9"
exec > >(tee "$O/s9.log") 2>&1
export CECOLL_BACKEND=nvidia NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/build:${LD_LIBRARY_PATH:-}
# The device tool carries files, not links: remake build/'s library links.
for f in build/libcecoll.so.*.*.*; do
  [ -f "$f" ] || continue
  ln -sf "$(basename "$f")" build/libcecoll.so.0 && ln -sf libcecoll.so.0 build/libcecoll.so
done
T0=$(date +%s)
BUDGET=${S9_BUDGET:-560}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
mps_on() { nvidia-cuda-mps-control -d && sleep 1; }
mps_off() { echo quit | nvidia-cuda-mps-control; sleep 2; }
matrix_for() { # list-file, seconds, jobs, tag
  local secs=$2
  [ "$secs" -gt 20 ] || { echo "SKIP $4 (budget)"; return; }
  timeout -k 5 "$secs" build/ctests/matrix --run "$(cat "$1")" -r 2,4,8 -j "$3" -t 60 -o "$O/s9/logs-$4" > "$O/s9/matrix-$4.txt" 2>&1
  echo "$4: rc=$? cells reported: $(grep -cE '^(PASS|EXPECTED|FAIL|HANG)' "$O/s9/matrix-$4.txt")"
  grep -E '^(FAIL|HANG)' "$O/s9/matrix-$4.txt" | head -20
  tail -4 "$O/s9/matrix-$4.txt"
}
echo "# session9 $(date -u +%FT%TZ) $(nvidia-smi -L | head -1)"
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  dropin)
    OUT="$O/s9" STEP_TO=80 bash lab/h200/dropin.sh > "$O/s9/dropin.out" 2>&1
    grep -vE '^\s*$' "$O/s9/dropin.out" | head -120
    ;;
  mps)
    gcc -O2 -o /tmp/mpsinit lab/h200/mpsinit.c -ldl
    echo "-- without MPS"; /tmp/mpsinit 4
    mps_on
    echo "-- MPS, first clients"; /tmp/mpsinit 4
    echo "-- MPS, again"; /tmp/mpsinit 4
    echo "-- cells, bootstrap 10 s"
    timeout 120 build/ctests/matrix --run "$(cat build/lists/mps.txt)" -j 2 -t 60 -o "$O/s9/mps10" 2>&1 | grep -vE '^\s*$' | tail -14
    echo "-- cells, bootstrap 60 s, INFO logs"
    mkdir -p "$O/s9/mpsdbg"
    CECOLL_BOOTSTRAP_TIMEOUT=60 CECOLL_DEBUG=INFO CECOLL_DEBUG_FILE="$O/s9/mpsdbg/%p.log" \
      timeout 200 build/ctests/matrix --run "$(cat build/lists/mps.txt)" -j 2 -t 90 -o "$O/s9/mps60" 2>&1 | grep -vE '^\s*$' | tail -14
    mps_off
    ;;
  sym) # what a drop-in libnccl.so.2 must export: the wheel's NCCL and what torch takes from it
    w=$(python3 -c 'import os, nvidia; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)/nvidia/nccl/lib/libnccl.so.2
    t=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')/lib/libtorch_cuda.so
    nm -D --defined-only "$w" | awk '$2 ~ /[TW]/ {print $3}' | sort > "$O/s9/nccl-exports.txt"
    nm -D --undefined-only "$t" | awk '{print $2}' | grep -E '^p?nccl' | sort > "$O/s9/torch-needs.txt"
    echo "$w: $(wc -l < "$O/s9/nccl-exports.txt") exports; torch needs $(wc -l < "$O/s9/torch-needs.txt")"
    nm -D --defined-only build/libcecoll.so | awk '{print $3}' | sort > /tmp/ce.txt
    echo "torch needs, cecoll lacks:"; comm -23 "$O/s9/torch-needs.txt" /tmp/ce.txt
    echo "nccl exports, cecoll lacks:"; comm -23 "$O/s9/nccl-exports.txt" /tmp/ce.txt | tr '\n' ' '; echo
    ;;
  hang) # the mixed-symmetric cells that hung after ncclCommAbort under MPS, without and with it
    cells=gather.oop.root0.mixedsym.2proc.eager.own.n4,scatter.inplace.root0.mixedsym.2proc.eager.own.n4,alltoall.oop.mixedsym.proc.graph.two.n8
    for m in plain mps; do
      [ $m = mps ] && mps_on
      [ -n "${S9_HANG_ONLY:-}" ] && [ $m != "$S9_HANG_ONLY" ] && continue
      CECOLL_DEBUG=INFO timeout 100 build/ctests/matrix --run "$cells" -r 2,4,8 -j 3 -t 40 -o "$O/s9/hang-$m" 2>&1 | grep -E '^(PASS|EXPECTED|FAIL|HANG)' | cut -c1-200
      [ $m = mps ] && mps_off
    done
    ;;
  inproc) # at most S9_INPROC seconds (default: the rest of the budget)
    t=$(($(left) - 10)); [ -n "${S9_INPROC:-}" ] && [ "$S9_INPROC" -lt "$t" ] && t=$S9_INPROC
    matrix_for build/lists/inproc.txt "$t" 8 inproc ;;
  procmps)
    mps_on
    matrix_for build/lists/proc.txt "$(($(left) - 15))" 4 procmps
    mps_off
    ;;
  esac
done
echo "== done after $(($(date +%s) - T0)) s"
tar -czf "$O/s9.tar.gz" -C "$O" s9 && rm -rf "$O/s9"
