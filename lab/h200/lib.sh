# lab/h200/lib.sh: what the session scripts from session11.sh on share (sourced from the
# repository root): library links, the budget, MPS on/off, and one cecoll-perf run per build.
# Every script writes under $O (default /tmp/out) and the caller tars what returns.
O=${OUT:-/tmp/out}
export CECOLL_BACKEND=${CECOLL_BACKEND:-nvidia} NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/build:${LD_LIBRARY_PATH:-}
# The device tool carries files, not links: remake each build folder's library links.
for d in build build/*/; do
  for f in "$d"/libcecoll.so.*.*.*; do
    [ -f "$f" ] || continue
    (cd "$d" && ln -sf "$(basename "$f")" libcecoll.so.0 && ln -sf libcecoll.so.0 libcecoll.so)
  done
done
T0=$(date +%s)
BUDGET=${BUDGET:-560}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
mps_on() { nvidia-cuda-mps-control -d && sleep 1; }
mps_off() { echo quit | nvidia-cuda-mps-control; sleep 2; }
# perf BUILD OUTFILE ARGS...: cecoll-perf of build/ (new) or build/BUILD's library.
# "old" (86fb7ac) has its own cecoll-perf with the old flags; every other build
# runs build/cecoll-perf against its library.
perf() {
  local b=$1 f=$2; shift 2
  local lp=$PWD/build exe=build/cecoll-perf
  [ "$b" != new ] && lp=$PWD/build/$b:$PWD/build
  [ "$b" = old ] && exe=build/old/cecoll-perf
  LD_LIBRARY_PATH=$lp timeout "${PERF_TIMEOUT:-60}" $exe "$@" > "$f" 2>&1
  echo "$(basename "$f"): rc=$?"
}
