# lab/h200/lib.sh: what the session scripts from session11.sh on share (sourced from the
# repository root): library links, the budget, MPS on/off, one cecoll-perf run per build, the
# results folder and log (begin, finish), the 8 B graph arguments and the real driver for cushim.
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
  local rc=$? # before the basename below, whose status $? would be
  echo "$(basename "$f"): rc=$rc"
}
# begin NAME: results go to $O/NAME (R), the log to $O/NAME.log; finish NAME tars them.
begin() {
  mkdir -p "$O/$1"
  exec > >(tee "$O/$1.log") 2>&1
  R=$O/$1
  echo "# $1 $(date -u +%FT%TZ) $(nvidia-smi -L 2>/dev/null | head -1)"
}
finish() {
  echo "== done after $(($(date +%s) - T0)) s"
  tar -czf "$O/$1.tar.gz" -C "$O" "$1" && rm -rf "${O:?}/$1"
}
# g8args N: the new cecoll-perf's 8 B graph run at N ranks.
g8args() { echo all -g "$1" -b $((8 * $1)) -e $((8 * $1)) -d uint8 -R 2 -n 20 -G 50 -w 5 -c 1; }
# cushim_real: CUSHIM_REAL, the driver that matches the kernel module, not CUDA's compat copy
# (which fails with error 803).
cushim_real() {
  local real
  real=$(ldconfig -p | awk '$1 == "libcuda.so.1" { print $NF }' | grep -v compat | head -1)
  [ -n "$real" ] || real=$(find / -xdev -name 'libcuda.so.1' -not -path '*compat*' -not -path "$PWD/*" 2>/dev/null | head -1)
  echo "the real driver: ${real:-none found}"
  export CUSHIM_REAL=$real
}
