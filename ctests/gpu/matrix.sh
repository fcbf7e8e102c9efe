#!/bin/bash
# matrix.sh: the correctness matrix (ctests/matrix.c) on one NVIDIA GPU, run
# from anywhere in a copy of the repository that holds the prebuilt binaries
# (the machine needs neither Go nor make):
#   build/ctests/matrix   (make build/ctests/matrix; finds ../libcecoll.so itself)
#   build/libcecoll.so
# CECOLL_BACKEND=nvidia, every rank on device 0, ranks 2, 3 and 4 (the
# default matrix), 64 cells per process (a cell's own CUDA context would cost
# about 0.5 s, and contexts made at once serialise). Prints one line per
# cell and a summary; with $OUT set, writes matrix-summary.txt there and
# packs the logs of the cells with an unexpected outcome into
# matrix-logs.tar.gz. On the H200 (2026-12-01) the in-process cells took
# 100 s and the process cells 84 s under MPS (MATRIX_MPS=1: processes on one
# GPU are otherwise time-sliced, about 10 s a cell).
#
# Settings (environment):
#   MATRIX_LIST      all | pairwise | cell names or ids, comma-separated   (all)
#   MATRIX_RANKS     rank counts                                           (2,3,4)
#   MATRIX_SHARD     K/N: every N-th cell from the K-th, to split the list
#                    between commands of limited length                   (none)
#   MATRIX_JOBS      processes (batches) at a time                         (4)
#   MATRIX_BATCH     cells per process                                     (64)
#   MATRIX_WATCHDOG  seconds a cell may take before it is a HANG           (60)
#   MATRIX_MPS       1: start an MPS control daemon for the run, quit it after
#                    (at most MATRIX_JOBS=2 then: 8 queues per client, about
#                    15 clients per server)                                 (0)
# Exit status: the matrix's (non-zero on any FAIL or HANG), 2 when the
# binaries are missing.
set -u
cd "$(dirname "$0")/../.." || exit 2
bin=build/ctests/matrix
if [ ! -x "$bin" ] || [ ! -f build/libcecoll.so ]; then
  echo "matrix.sh: $bin or build/libcecoll.so is missing: run 'make build/ctests/matrix' where Go is" >&2
  exit 2
fi
export CECOLL_BACKEND=nvidia NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$PWD/build:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
list=${MATRIX_LIST:-all}
ranks=${MATRIX_RANKS:-2,3,4}
jobs=${MATRIX_JOBS:-4}
batch=${MATRIX_BATCH:-64}
wd=${MATRIX_WATCHDOG:-60}
shard=()
[ -n "${MATRIX_SHARD:-}" ] && shard=(--shard "$MATRIX_SHARD")
logs=${TMPDIR:-/tmp}/cecoll-matrix-logs
rm -rf "$logs"
summary=/dev/null
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  summary=$OUT/matrix-summary.txt
fi
nvidia-smi -L 2>&1 | head -2
[ "${MATRIX_MPS:-0}" = 1 ] && nvidia-cuda-mps-control -d && sleep 1
"$bin" --run "$list" "${shard[@]}" -r "$ranks" -j "$jobs" -b "$batch" -t "$wd" -o "$logs" | tee "$summary"
rc=${PIPESTATUS[0]}
[ "${MATRIX_MPS:-0}" = 1 ] && { echo quit | nvidia-cuda-mps-control; sleep 1; }
if [ -n "${OUT:-}" ] && [ -d "$logs" ] && [ -n "$(ls -A "$logs")" ]; then
  tar -C "$(dirname "$logs")" -czf "$OUT/matrix-logs.tar.gz" "$(basename "$logs")"
fi
exit "$rc"
