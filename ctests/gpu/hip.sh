#!/bin/bash
# hip.sh: the device runtime's own tests (internal/hip/nvidia) on one NVIDIA
# GPU, from a copy of the repository with a carried test binary (the GPU
# machine has no Go). Build it where Go is:
#   go test -c -o build/gpu/nvidia.test ./internal/hip/nvidia
# Runs the backend tests and the conformance suite (each group in its own
# process, so a watchdog stopping one hides nothing of the others), writes
# $OUT/gotest.txt and prints pass/fail/skip counts last. Multicast is never
# used. Exit status: 1 when a test failed, 2 when the binary is missing.
set -u
cd "$(dirname "$0")/../.." || exit 2
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/cecoll_out}
BIN=${HIP_TEST_BIN:-build/gpu/nvidia.test}
mkdir -p "$OUT"
if [ ! -x "$BIN" ]; then
  echo "hip.sh: $BIN is missing: go test -c -o $BIN ./internal/hip/nvidia where Go is" >&2
  exit 2
fi

gotest() { # name, env..., -- args...
  local name=$1; shift
  echo "== Go tests: $name"
  env "$@" -test.v -test.count=1 -test.timeout 170s 2>&1 | tee -a "$OUT/gotest.txt"
  echo "EXIT $name ${PIPESTATUS[0]}" | tee -a "$OUT/gotest.txt"
}
: > "$OUT/gotest.txt"
gotest backend timeout 150 "$BIN" -test.run '^(TestSymbol|TestOpen|TestMulticast|TestLaunchPath|TestGPU)'
gotest conformance timeout 180 "$BIN" -test.run '^TestConformance$/^(devices|memory|stream-fifo|events|ping-pong|cross-process|batch-copy|capture|null-stream|bad-args)$'
gotest conformance-wait-write timeout 60 "$BIN" -test.run '^TestConformance$/^wait-write$'
gotest conformance-wait-write-32conn CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 60 "$BIN" -test.run '^TestConformance$/^wait-write$'

pass=$(grep -c -- '^\s*--- PASS' "$OUT/gotest.txt")
fail=$(grep -c -- '^\s*--- FAIL' "$OUT/gotest.txt")
skip=$(grep -c -- '^\s*--- SKIP' "$OUT/gotest.txt")
echo "go tests (incl. subtests): pass=$pass fail=$fail skip=$skip"
grep -E -- '^\s*--- (FAIL|SKIP)|^EXIT |watchdog|did not finish' "$OUT/gotest.txt"
bad=$(grep -c -E '^EXIT .* [1-9][0-9]*$' "$OUT/gotest.txt")
[ "$fail" = 0 ] && [ "$bad" = 0 ]
