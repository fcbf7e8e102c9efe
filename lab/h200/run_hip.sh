#!/bin/bash
# run_hip.sh: runs on the H200 device machine, from the repository root.
# Compiles cecoll_cbench.c, runs the device runtime's tests
# (ctests/gpu/hip.sh, with the carried test binary build/gpu/nvidia.test,
# built on the dev host with go test -c -o build/gpu/nvidia.test
# ./internal/hip/nvidia) and its benchmarks, and prints a summary table
# last: Go vs C host cost per call, and batched vs single-copy bandwidth.
# Everything is tee'd to $OUT. Multicast is never used (no cuMulticast* call
# anywhere).
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/cecoll_out}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$ROOT/build/gpu/nvidia.test
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

OUT=$OUT bash "$ROOT/ctests/gpu/hip.sh" | tee "$OUT/hip.txt"

echo "== Go benchmarks"
N=$((BURSTS * 64))
timeout 150 "$BIN" -test.run '^$' -test.benchmem -test.benchtime ${N}x \
  -test.bench 'StreamBatchMemOp8|MemcpyBatchAsync8x4K|MemcpyAsync4K|EventRecord|StreamGetCaptureStatus|MechanismNoGPU' 2>&1 | tee "$OUT/gobench.txt"
timeout 120 "$BIN" -test.run '^$' -test.benchtime 30x -test.bench 'Copy1GiB' 2>&1 | tee -a "$OUT/gobench.txt"

echo
echo "== SUMMARY"
grep -E -- '^go tests|^\s*--- FAIL|^EXIT .* [1-9]' "$OUT/hip.txt"
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
