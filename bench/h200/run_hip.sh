#!/bin/bash
# run_hip.sh: runs on the H200 device machine, from the repository root.
# Compiles cecoll_cbench.c, runs the carried Go test binary of
# internal/hip/nvidia (bench/h200/bin/nvidia.test, built on the dev host with
#   go test -c -o bench/h200/bin/nvidia.test ./internal/hip/nvidia),
# its tests and benchmarks, and prints a summary table last: Go vs C host
# cost per call, and batched vs single-copy bandwidth. Everything is tee'd
# to $OUT. Multicast is never used (no cuMulticast* call anywhere).
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/cecoll_out}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$HERE/bin/nvidia.test
CUDA=${CUDA_HOME:-/usr/local/cuda}
BURSTS=${BURSTS:-500}
exec > >(tee "$OUT/run_hip.log") 2>&1

echo "== device"
nvidia-smi -L 2>&1 | head -4
echo "== cuda.h mappings of the names the backend binds"
grep -E '^\s*#\s*define\s+cu(StreamBatchMemOp|MemcpyBatchAsync|MemGetAddressRange|MemAlloc|MemFree|StreamDestroy|EventDestroy|StreamBeginCapture|GraphInstantiate|EventElapsedTime|CtxGetDevice|MemsetD8Async|MemcpyAsync|EventRecord|StreamWaitEvent|StreamIsCapturing|StreamEndCapture|GraphLaunch|StreamCreate|EventCreate|CtxGetCurrent|CtxSetCurrent|DevicePrimaryCtxRetain|MemCreate|MemMap|MemSetAccess|MemImportFromShareableHandle|MemExportToShareableHandle|MemRetainAllocationHandle|MemAddressReserve|DeviceGetName|DeviceCanAccessPeer)\b' \
  "$CUDA/include/cuda.h" | head -60

echo "== build C bench"
CB=/tmp/cecoll_cbench
gcc -O2 -Wall -I"$CUDA/include" "$HERE/cecoll_cbench.c" -o $CB -L"$CUDA/lib64/stubs" -lcuda 2>&1 ||
  gcc -O2 -Wall -I"$CUDA/include" "$HERE/cecoll_cbench.c" -o $CB -L/usr/local/nvidia/lib64 -l:libcuda.so.1 2>&1 ||
  nvcc -O2 -x c "$HERE/cecoll_cbench.c" -o $CB -lcuda 2>&1
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}

echo "== C bench"
timeout 120 $CB "$BURSTS" | tee "$OUT/cbench.txt"

echo "== probe: which streams stop while others are parked on a wait-value"
timeout 30 $CB probe | tee "$OUT/probe.txt"
CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 30 $CB probe | tee -a "$OUT/probe.txt"

# Each group runs in its own process, so that a watchdog stopping one (a
# hung wait) does not hide the results of the others.
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

echo "== Go benchmarks"
N=$((BURSTS * 64))
timeout 150 "$BIN" -test.run '^$' -test.benchmem -test.benchtime ${N}x \
  -test.bench 'StreamBatchMemOp8|MemcpyBatchAsync8x4K|MemcpyAsync4K|EventRecord|StreamGetCaptureStatus|MechanismNoGPU' 2>&1 | tee "$OUT/gobench.txt"
timeout 120 "$BIN" -test.run '^$' -test.benchtime 30x -test.bench 'Copy1GiB' 2>&1 | tee -a "$OUT/gobench.txt"

echo
echo "== SUMMARY"
pass=$(grep -c -- '^\s*--- PASS' "$OUT/gotest.txt")
fail=$(grep -c -- '^\s*--- FAIL' "$OUT/gotest.txt")
skip=$(grep -c -- '^\s*--- SKIP' "$OUT/gotest.txt")
echo "go tests (incl. subtests): pass=$pass fail=$fail skip=$skip"
grep -E -- '^\s*--- (FAIL|SKIP)|^EXIT |watchdog|did not finish' "$OUT/gotest.txt"
grep '^PROBE' "$OUT/probe.txt"
awk '
  FNR==NR && $1=="CBENCH" { c[$2]=$3; next }
  FNR==NR && $1=="CBENCH_BW" { cbw[$2]=$3; next }
  FNR!=NR && $1 ~ /^Benchmark/ {
    name=$1; sub(/^Benchmark/,"",name); sub(/-[0-9]+$/,"",name)
    for (i=1;i<=NF;i++) { if ($(i+1)=="ns/op") ns[name]=$i; if ($(i+1)=="MB/s") bw[name]=$i/1000; if ($(i+1)=="allocs/op") al[name]=$i }
    order[++n]=name
  }
  END {
    printf "%-42s %12s %12s %8s %8s\n", "host cost per call", "Go ns", "C ns", "Go/C", "allocs"
    for (k=1;k<=n;k++) { m=order[k]; if (!(m in ns) || (m in bw)) continue
      base=m; sub(/\/.*/,"",base)
      cc=(base in c)? c[base] : ""
      printf "%-42s %12.1f %12s %8s %8s\n", m, ns[m], cc, (cc!="")? sprintf("%.2f", ns[m]/cc) : "-", al[m] }
    printf "\n%-42s %12s %12s %14s\n", "copy 1 GiB (GB/s, bytes once)", "Go", "C", "vs single(Go)"
    for (k=1;k<=n;k++) { m=order[k]; if (!(m in bw)) continue
      single=bw["Copy1GiB/single"]
      printf "%-42s %12.1f %12s %14s\n", m, bw[m], (m in cbw)? cbw[m] : "-", (single>0)? sprintf("%.2f", bw[m]/single) : "-" }
  }' "$OUT/cbench.txt" "$OUT/gobench.txt" | tee "$OUT/summary.txt"
