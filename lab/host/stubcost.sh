#!/usr/bin/env bash
# stubcost.sh: the cost of a forwarded call's stub, and of its per-call
# counter (the INFO summary's), on this machine's CPU.
#   bash lab/host/stubcost.sh [iterations]
# Builds cecoll twice (as is, and with the stubs' counting instructions
# deleted, through go build -overlay), the fake NCCL, and stubcost.c; runs
# each build 3 times and prints the ns per call of each.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
iters=${1:-2000000}
cd "$root"
sed -e '/lock incq/d' -e '/^\tcbz x12, 4f$/,/^4:$/d' export/fwd_stubs.S >"$out/nocount.S"
printf '{"Replace":{"%s":"%s"}}\n' "$root/export/fwd_stubs.S" "$out/nocount.S" >"$out/overlay.json"
go build -buildmode=c-shared -o "$out/count/libcecoll.so" ./export
go build -buildmode=c-shared -overlay "$out/overlay.json" -o "$out/nocount/libcecoll.so" ./export
gcc -O2 -Iinclude -fPIC -shared -Wl,-soname,libnccl.so.2 -o "$out/libnccl.so.2" ctests/fake-nccl/fakenccl.c -lpthread -lrt -ldl
for v in count nocount; do
  gcc -O2 -Iinclude -o "$out/$v/stubcost" lab/host/stubcost.c -L"$out/$v" -lcecoll -Wl,-rpath,"$out/$v"
  for _ in 1 2 3; do
    printf '%-8s ' "$v"
    CECOLL_BACKEND=host CECOLL_NCCL_LIB="$out/libnccl.so.2" "$out/$v/stubcost" "$iters"
  done
done
