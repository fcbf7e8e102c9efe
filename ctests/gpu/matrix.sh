#!/bin/bash
# matrix.sh: the correctness matrix (ctests/matrix.c) on one NVIDIA GPU, run
# from anywhere in a copy of the repository that holds the prebuilt binaries
# (the machine needs neither Go nor make):
#   build/ctests/matrix   (make build/ctests/matrix; finds ../libcecoll.so itself)
#   build/libcecoll.so
# CECOLL_BACKEND=nvidia, every rank on device 0, ranks 2, 4 and 8, every cell
# one GPU can hold (all of them: 8 ranks with two streams each stay under the
# 32 hardware queues cecoll asks for). Prints one line per cell and a
# summary; with $OUT set, writes matrix-summary.txt there and packs the logs
# of the cells with an unexpected outcome into matrix-logs.tar.gz.
#
# Settings (environment):
#   MATRIX_LIST      all | pairwise | cell names or ids, comma-separated   (all)
#   MATRIX_RANKS     rank counts                                           (2,4,8)
#   MATRIX_SHARD     K/N: every N-th cell from the K-th, to split the list
#                    between commands of limited length                   (none)
#   MATRIX_JOBS      cells at a time (each runs its own processes)          (4)
#   MATRIX_WATCHDOG  seconds a cell may take before it is a HANG           (60)
# The whole list (about 6300 cells) takes far longer than one 10-minute
# command: split it with MATRIX_SHARD, or run MATRIX_LIST=pairwise.
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
ranks=${MATRIX_RANKS:-2,4,8}
jobs=${MATRIX_JOBS:-4}
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
"$bin" --run "$list" "${shard[@]}" -r "$ranks" -j "$jobs" -t "$wd" -o "$logs" | tee "$summary"
rc=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ] && [ -d "$logs" ] && [ -n "$(ls -A "$logs")" ]; then
  tar -C "$(dirname "$logs")" -czf "$OUT/matrix-logs.tar.gz" "$(basename "$logs")"
fi
exit "$rc"
