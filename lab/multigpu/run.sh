#!/usr/bin/env bash
# lab/multigpu/run.sh: cecoll against NCCL on several GPUs in one run, on a host with 1, 2, 4 or
# 8 GPUs. Run from the repository root with the prebuilt files carried along
# (that machine has no Go): build/libcecoll.so, build/cecoll-perf,
# build/ctests/test_*, and the sources under lab/ and include/.
#
#   bash lab/multigpu/run.sh                 everything, logs in $OUT (default /tmp/out)
#   QUICK=1 bash lab/multigpu/run.sh         fewer sizes and iterations
#   SKIP=ctests,multiproc,cperf,graph,overlap,extra bash lab/multigpu/run.sh   (any of these)
#
# Steps (each under `timeout`, its seconds printed; the whole run stays
# inside BUDGET seconds: a step that would not fit is skipped and says so):
#   machine: nvidia-smi -L and topo -m; libnccl.so.2 and libcublas found in the
#      torch venv and NCCL's version printed; ncclcmp compiled (gcc/cc/clang/
#      nvcc, else the carried build/gpu/ncclcmp).
#   ceil: ncclcmp ceil (local copy, 0->1 push/pull, 0<->1, all pairs at once).
#   perf: ncclcmp perf over SIZES, eager, of PERF_COLLS (default all six:
#      allgather, alltoall, scatter, gather, sendrecv, broadcast) for cecoll
#      (ce path), NCCL default and NCCL's ce path (ncclMemAlloc + symmetric
#      windows + CTAPolicy ZERO; NCCL's own copy-engine path covers the four
#      collectives only: sendrecv and broadcast run NCCL's kernels under that
#      config). cecoll is the library ncclcmp loads (CE-only: no real NCCL
#      named), with CECOLL_ROUTE=ce so nothing could be forwarded.
#   overlap: GEMM slowdown under cecoll and NCCL default while each operation
#      of OV_OPS (default allgather sendrecv broadcast) loops.
#   ctests: test_allgather/alltoall/scatter/gather/errors -r 2,<ndev> (one rank
#      per GPU at <ndev>) in -m group and -m threads; test_multiproc (one
#      process per GPU) -n 2,<ndev>.
#   graph: the ncclcmp sweeps again with -G.
#   cperf: build/cecoll-perf -g <ndev> eager and -G (8 B..16 MiB per rank
#      checked, 64 MiB..1 GiB per rank unchecked).
#   extra: overlap for NCCL's ce path (each of OV_OPS); cecoll's default path (cuMemAlloc
#      buffers, staged); a short NCCL --ce run with NCCL_DEBUG=INFO.
#   SUMMARY: pass/fail per step, busbw at 64 MiB, 256 MiB and 1 GiB per rank
#      per collective with ratios and the ceiling, overlap slowdowns.
#
# Knobs (environment): OUT, BUDGET (seconds, default 450), QUICK=1, SKIP,
# NDEV, SIZES (ncclcmp -s list), PERF_COLLS (ncclcmp perf -o list, default all), ITERS, WARMUP, CAP (ncclcmp -S),
# CPERF_SMALL / CPERF_LARGE (cecoll-perf size arguments, total sizes as nccl-tests' -b/-e; default per
# rank 8 B..1 or 16 MiB and 64 MiB..1 GiB times NDEV; -c 1 / -c 0), CTEST_ARGS, OV_BYTES, OV_M, OV_R,
# OV_OPS (the looping operations of the overlap steps, ncclcmp overlap -o, space-separated),
# NCCL_LIB, CUBLAS_LIB, CECOLL_LIB (the library ncclcmp loads as cecoll), CC.
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"

# NVLink multicast is forbidden on these machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CECOLL_BACKEND=nvidia
# One node, every rank in reach of loopback: the most robust bootstrap here.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
export LD_LIBRARY_PATH=$ROOT/build:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}

CECOLL_LIB=${CECOLL_LIB:-$ROOT/build/libcecoll.so}
QUICK=${QUICK:-0}
BUDGET=${BUDGET:-450}
SKIP=${SKIP:-}
if [ "$QUICK" = 1 ]; then
  SIZES=${SIZES:-8,1M,64M,256M,1G}
  ITERS=${ITERS:-10}
  WARMUP=${WARMUP:-3}
  CPERF_SMALL_RANK=(8 1M 128)
  CTEST_ARGS=${CTEST_ARGS:--c 0,7,1001 -l 64 -g 2 -q}
else
  SIZES=${SIZES:-8,64,512,4K,32K,256K,1M,4M,16M,64M,256M,1G}
  ITERS=${ITERS:-20}
  WARMUP=${WARMUP:-5}
  CPERF_SMALL_RANK=(8 16M 8)
  CTEST_ARGS=${CTEST_ARGS:--c 0,1,7,1001 -l 64 -g 2}
fi
CAP=${CAP:-4G}
OV_BYTES=${OV_BYTES:-256M}
OV_M=${OV_M:-8192}
OV_R=${OV_R:-200}
OV_OPS=${OV_OPS:-allgather sendrecv broadcast}
PERF_COLLS=${PERF_COLLS:-all}

T0=$(date +%s)
RESULTS=()
skipped() { case ",$SKIP," in *",$1,"*) return 0 ;; esac; return 1; }

# step NAME TIMEOUT LOG CMD...: runs CMD under timeout into $OUT/LOG, records
# rc and seconds. A step that would overrun BUDGET is shortened, or skipped
# when less than 15 s are left.
step() {
  local name=$1 to=$2 log=$3
  shift 3
  local left=$((BUDGET - ($(date +%s) - T0)))
  if [ "$left" -lt 15 ]; then
    echo "== $name: SKIPPED (budget: ${left}s left of ${BUDGET}s)"
    RESULTS+=("$name|skip|0|$log")
    echo "SKIPPED: budget" >"$OUT/$log"
    return 0
  fi
  [ "$to" -gt "$left" ] && to=$left
  echo "== $name   (timeout ${to}s)   $*"
  local s rc e
  s=$(date +%s)
  timeout -k 5 "$to" "$@" >"$OUT/$log" 2>&1
  rc=$?
  e=$(($(date +%s) - s))
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "TIMED OUT after ${to}s" >>"$OUT/$log"
  echo "EXIT rc=$rc elapsed=${e}s" >>"$OUT/$log"
  printf '   rc=%d  %ds  (at %ds)  log %s\n' "$rc" "$e" "$(($(date +%s) - T0))" "$log"
  if [ "$rc" -ne 0 ]; then
    echo "   ---- last lines of $log:"
    tail -8 "$OUT/$log" | sed 's/^/   | /'
  fi
  RESULTS+=("$name|$rc|$e|$log")
  return 0
}

# ---- 0. Machine, libraries, build ---------------------------------------------------
echo "== machine"
nvidia-smi -L 2>&1 | tee "$OUT/gpus.txt"
nvidia-smi topo -m >"$OUT/topo.txt" 2>&1
cat "$OUT/topo.txt"
NDEV=${NDEV:-$(grep -c '^GPU ' "$OUT/gpus.txt")}
[ "$NDEV" -ge 1 ] 2>/dev/null || NDEV=1
if [ "$NDEV" -le 2 ]; then RLIST=2; else RLIST=2,$NDEV; fi
e=${CPERF_SMALL_RANK[1]%M}
CPERF_SMALL=${CPERF_SMALL:--b $((CPERF_SMALL_RANK[0] * NDEV)) -e $((e * NDEV))M -f ${CPERF_SMALL_RANK[2]}}
CPERF_LARGE=${CPERF_LARGE:--b $((64 * NDEV))M -e $((NDEV))G -f 4}
echo "devices: $NDEV; rank lists: $RLIST"

PY=python3
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
VENV_SITE=$("$PY" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
if [ -z "${NCCL_LIB:-}" ]; then
  d=$("$PY" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  [ -n "$d" ] && [ -f "$d/lib/libnccl.so.2" ] && NCCL_LIB=$d/lib/libnccl.so.2
fi
if [ -z "${NCCL_LIB:-}" ]; then
  NCCL_LIB=$(find /opt/torch/.venv ${VENV_SITE:+"$VENV_SITE"} /usr/local/lib /usr/lib -name 'libnccl.so.2*' \
    -not -name '*.py' 2>/dev/null | head -1)
fi
if [ -z "${CUBLAS_LIB:-}" ]; then
  # The CUDA 13 build first (torch cu13 wheels: nvidia/cu13/lib), then 12.
  for v in 13 12; do
    CUBLAS_LIB=$(find /opt/torch/.venv ${VENV_SITE:+"$VENV_SITE"} /usr/local/cuda/lib64/ -name "libcublas.so.$v*" \
      2>/dev/null | head -1)
    [ -n "$CUBLAS_LIB" ] && break
  done
fi
export CUBLAS_LIB
# cuBLAS loads cuBLASLt from its own directory or the loader's path.
if [ -n "$CUBLAS_LIB" ]; then
  LD_LIBRARY_PATH=$(dirname "$CUBLAS_LIB"):$LD_LIBRARY_PATH
  export LD_LIBRARY_PATH
fi
echo "NCCL: ${NCCL_LIB:-NOT FOUND}"
echo "cuBLAS: ${CUBLAS_LIB:-NOT FOUND}"
echo "python: $PY"

NCMP=$ROOT/build/gpu/ncclcmp
mkdir -p "$ROOT/build/gpu"
built=0
for cc in ${CC:-} gcc cc clang; do
  command -v "$cc" >/dev/null 2>&1 || continue
  if "$cc" -O2 -Wall -Wextra -I "$ROOT/include" -o "$NCMP.new" "$ROOT/lab/gpu/ncclcmp.c" -ldl -lpthread \
    >"$OUT/ncclcmp.build.log" 2>&1; then
    mv "$NCMP.new" "$NCMP"
    built=1
    echo "ncclcmp: built with $cc"
    break
  fi
done
if [ "$built" = 0 ] && command -v nvcc >/dev/null 2>&1; then
  nvcc -x c -O2 -I "$ROOT/include" -o "$NCMP.new" "$ROOT/lab/gpu/ncclcmp.c" -ldl -lpthread \
    >>"$OUT/ncclcmp.build.log" 2>&1 && mv "$NCMP.new" "$NCMP" && built=1 && echo "ncclcmp: built with nvcc"
fi
[ "$built" = 0 ] && echo "ncclcmp: no compiler worked (see ncclcmp.build.log); using the carried $NCMP"
[ -x "$NCMP" ] || echo "!!!! no ncclcmp binary: the ncclcmp steps will fail"

"$NCMP" info -L "$CECOLL_LIB" 2>&1 | tee "$OUT/info_cecoll.txt"
if [ -n "${NCCL_LIB:-}" ]; then
  "$NCMP" info -L "$NCCL_LIB" 2>&1 | tee "$OUT/info_nccl.txt"
else
  echo "!!!! libnccl.so.2 not found: the NCCL steps are skipped" | tee "$OUT/info_nccl.txt"
fi
export CECOLL_TEST_WATCHDOG=55

# Order: what the targets (SUMMARY) need most comes first, so that if BUDGET
# runs short only the later, lower-value steps are skipped: ceilings, the
# eager sweeps, the overlap runs, then the C tests, the graph sweeps,
# cecoll-perf and the extras.

# ---- Ceilings ---------------------------------------------------------------------------------
step ceil 60 ceil.log "$NCMP" ceil -N "$NDEV" -b 1G -n 5

# ---- Collective sweeps (ncclcmp, eager) ----------------------------------------------------------
# route LIB: the environment ncclcmp runs in: CECOLL_ROUTE=ce for cecoll (every call it implements on
# the copy engines, even if CECOLL_NCCL_LIB named a real library to forward to), nothing for NCCL.
route() {
  ROUTE=(env)
  [ "$1" = "$CECOLL_LIB" ] && ROUTE=(env CECOLL_ROUTE=ce)
  return 0
}
perf() { # NAME LIB extra args...
  local name=$1 lib=$2
  shift 2
  route "$lib"
  step "perf_$name" 150 "perf_$name.log" "${ROUTE[@]}" "$NCMP" perf -L "$lib" -N "$NDEV" -s "$SIZES" \
    -o "$PERF_COLLS" -n "$ITERS" -w "$WARMUP" -c 1 -S "$CAP" "$@"
}
have_nccl() { [ -n "${NCCL_LIB:-}" ]; }
perf cecoll_ce_eager "$CECOLL_LIB" -l cecoll --ce
have_nccl && perf nccl_default_eager "$NCCL_LIB" -l nccl
have_nccl && perf nccl_ce_eager "$NCCL_LIB" -l nccl --ce

# ---- Overlap with a GEMM --------------------------------------------------------------------------
ov() { # NAME LIB OP extra args...: the log of OP allgather keeps the plain name, others get _OP
  local name=$1 lib=$2 op=$3
  shift 3
  [ "$op" = allgather ] || name=${name}_$op
  route "$lib"
  step "overlap_$name" 90 "overlap_$name.log" "${ROUTE[@]}" "$NCMP" overlap -L "$lib" -N "$NDEV" -b "$OV_BYTES" \
    -M "$OV_M" -R "$OV_R" -o "$op" "$@"
}
if ! skipped overlap; then
  for op in $OV_OPS; do
    ov cecoll_ce "$CECOLL_LIB" "$op" -l cecoll --ce
    have_nccl && ov nccl_default "$NCCL_LIB" "$op" -l nccl
  done
fi

# ---- Correctness: the C tests, one rank per GPU -------------------------------------------------------
if ! skipped ctests; then
  for mode in group threads; do
    for t in allgather alltoall scatter gather errors; do
      # shellcheck disable=SC2086 # CTEST_ARGS is a list of options
      step "ctest_${t}_$mode" 50 "ctest_${t}_$mode.log" build/ctests/test_$t -r "$RLIST" -m "$mode" $CTEST_ARGS
    done
  done
fi
if ! skipped multiproc; then
  if [ "$NDEV" -le 2 ]; then NLIST=2; SC=data_n2; else NLIST=2,$NDEV; SC=data_n2,data_n$NDEV; fi
  step multiproc 120 multiproc.log env CECOLL_TEST_WATCHDOG=110 build/ctests/test_multiproc -n "$NLIST" \
    -c 0,7,1M -t 50 -X "$SC,data_2x2,id_from_rank0,garbage_id"
fi

# ---- Graph sweeps (ncclcmp -G) ----------------------------------------------------------------------
if ! skipped graph; then
  perf cecoll_ce_graph "$CECOLL_LIB" -l cecoll --ce -G
  have_nccl && perf nccl_default_graph "$NCCL_LIB" -l nccl -G
  have_nccl && perf nccl_ce_graph "$NCCL_LIB" -l nccl --ce -G
fi

# ---- cecoll's own benchmark -------------------------------------------------------------------------
if ! skipped cperf; then
  # cecoll-perf checks every byte on the host (slow at GiB sizes): it checks
  # the small sizes only; ncclcmp above checked cecoll at every size.
  # Symmetric windows, uint8 (count = bytes per rank, which summary.py reads); graph: one call
  # captured, replayed ITERS times.
  # shellcheck disable=SC2086 # CPERF_* are lists of options
  for m in eager graph; do
    g=(-n "$ITERS")
    [ "$m" = graph ] && { skipped graph && continue; g=(-n 1 -G "$ITERS"); }
    step "cperf_${m}_small" 90 "cperf_${m}_small.log" build/cecoll-perf -g "$NDEV" $CPERF_SMALL "${g[@]}" \
      -w "$WARMUP" -c 1 -d uint8 -R 2 --json "$OUT/cperf_${m}_small.json"
    step "cperf_${m}_large" 120 "cperf_${m}_large.log" build/cecoll-perf -g "$NDEV" $CPERF_LARGE "${g[@]}" \
      -w "$WARMUP" -c 0 -d uint8 -R 2 --json "$OUT/cperf_${m}_large.json"
  done
fi

# ---- Extras: NCCL's CE path under a GEMM, cecoll's default path, NCCL's log -----------------------------
if ! skipped extra; then
  if ! skipped overlap && have_nccl; then
    for op in $OV_OPS; do ov nccl_ce "$NCCL_LIB" "$op" -l nccl --ce; done
  fi
  perf cecoll_default_eager "$CECOLL_LIB" -l cecoll
  if have_nccl; then
    step nccl_ce_debug 60 nccl_ce_debug.log env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALL "$NCMP" perf \
      -L "$NCCL_LIB" -l nccl --ce -N "$NDEV" -s 64M -o allgather -n 3 -w 1 -c 1
  fi
fi

# ---- 5. Summary ---------------------------------------------------------------------------------------------
{
  echo
  echo "================================ SUMMARY ================================"
  echo "devices: $NDEV   total: $(($(date +%s) - T0))s of budget ${BUDGET}s   NCCL: $(grep -o 'ncclGetVersion [0-9]*' "$OUT/info_nccl.txt" 2>/dev/null)"
  echo
  echo "-- steps (PASS = exit 0)"
  for r in "${RESULTS[@]}"; do
    IFS='|' read -r name rc secs log <<<"$r"
    if [ "$rc" = skip ]; then st=SKIP; elif [ "$rc" = 0 ]; then st=PASS; else st=FAIL; fi
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && st="FAIL(timeout)"
    printf '%-14s %-30s %4ss  %s\n' "$st" "$name" "$secs" \
      "$(grep -E '[0-9]+ passed, [0-9]+ failed|wrong bytes|WATCHDOG|out of bounds' "$OUT/$log" 2>/dev/null | tail -1)"
  done
} | tee "$OUT/summary.txt"
if [ -f "$ROOT/lab/multigpu/summary.py" ] && "$PY" -c 'import sys' 2>/dev/null; then
  "$PY" "$ROOT/lab/multigpu/summary.py" "$OUT" 2>&1 | tee -a "$OUT/summary.txt"
else
  echo "(no python: raw rows follow)" | tee -a "$OUT/summary.txt"
  grep -h -E '^(ROW|CEIL|OVERLAP)' "$OUT"/*.log | tee -a "$OUT/summary.txt"
fi
if [ -f "$OUT/nccl_ce_debug.log" ]; then
  echo "-- NCCL --ce debug lines (is the CE path taken?)" | tee -a "$OUT/summary.txt"
  grep 'NCCL INFO' "$OUT/nccl_ce_debug.log" | grep -i -E 'symmetric|copy ?engine|[^a-z]ce[^a-z]|cta|window|zero' |
    head -15 | tee -a "$OUT/summary.txt"
fi
echo "logs: $OUT"
