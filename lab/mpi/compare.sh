#!/usr/bin/env bash
# lab/mpi/compare.sh: cecoll-perf against OpenMPI over shared memory (and gloo), in one run.
#
#   bash lab/mpi/compare.sh [OUTDIR]      (default build/compare-mpi; needs make bench-mpi)
#
# For N = 2 and 4 ranks: cecoll-perf -g N (ranks in one process), cecoll-perf
# -P N (one process per rank) and mpirun -np N mpi-coll-bench, at 8 B, 16 MiB
# and 64 MiB per rank (total sizes N times that: -b/-e are nccl-tests' total
# sizes), out of place and in place; uint8, symmetric windows (-R 2), the
# slowest process's time (-a 3, as mpi-coll-bench). The raw
# tables go to OUTDIR/*.txt; the summary prints busbw ratios cecoll/MPI at
# 16 and 64 MiB and time ratios at 8 B, with the targets: busbw >=
# MPI's at 16/64 MiB; 8 B time <= 2x MPI's with ranks in one process.
# Then, where /usr/bin/python3 has torch, gloo through python -m cecoll.bench
# at the same sizes (OUTDIR/gloo.txt, printed after the MPI summary).
# About 5 minutes on 2 cores. Timings on a shared machine are noisy: the
# three programs run back to back for each N so that their ratios share the
# conditions.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-build/compare-mpi}
PERF=build/cecoll-perf
MPIB=build/mpi-coll-bench
RANKS=${RANKS:-"2 4"}
SMALL_ITERS=${SMALL_ITERS:-2000}   # 8 B: many back-to-back calls
BIG_ITERS=${BIG_ITERS:-3}          # 16/64 MiB: few (each is tens of ms on 2 cores)
for f in "$PERF" "$MPIB"; do
  [ -x "$f" ] || { echo "compare.sh: $f missing: run make bench-mpi (needs mpicc)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "compare.sh: mpirun missing" >&2; exit 2; }
MPIRUN=(mpirun --oversubscribe -np)
[ "$(id -u)" = 0 ] && MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np)
export CECOLL_BACKEND=${CECOLL_BACKEND:-host}
mkdir -p "$OUT"

run() { # name, command...: the table into OUT/name.txt, echoed
  local name=$1; shift
  echo "+ $*" | tee "$OUT/$name.txt"
  "$@" 2>&1 | tee -a "$OUT/$name.txt" | grep -E '^# (cecoll-perf|mpi_coll_bench|Collective test starting)' || true
}

for n in $RANKS; do
  small=(-b $((8 * n)) -e $((8 * n)) -n "$SMALL_ITERS" -w 200 -c 1)
  big=(-b $((16 * n))M -e $((64 * n))M -f 4 -n "$BIG_ITERS" -w 1 -c 1)
  for s in small big; do
    if [ $s = small ]; then args=("${small[@]}"); else args=("${big[@]}"); fi
    run "cecoll-g$n-$s" "$PERF" -g "$n" -d uint8 -R 2 "${args[@]}"
    run "cecoll-P$n-$s" "$PERF" -P "$n" -d uint8 -R 2 -a 3 "${args[@]}"
    run "mpi-$n-$s" "${MPIRUN[@]}" "$n" "$MPIB" "${args[@]}"
  done
done

# gloo (torch.distributed) in the same run, where Debian's torch is installed.
if /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
  : >"$OUT/gloo.txt"
  for n in $RANKS; do
    sizes=$((8 * n)),$((16 * n))M,$((64 * n))M
    echo "+ python3 -m cecoll.bench --ranks $n --sizes $sizes" | tee -a "$OUT/gloo.txt"
    PYTHONPATH=python CECOLL_LIBRARY=build/libcecoll.so /usr/bin/python3 -m cecoll.bench \
      --ranks "$n" --sizes "$sizes" --big-iters "$BIG_ITERS" >>"$OUT/gloo.txt" 2>&1 ||
      echo "compare.sh: cecoll.bench failed (see $OUT/gloo.txt)" >&2
  done
else
  echo "## SKIPPED: gloo (no torch for /usr/bin/python3)" | tee "$OUT/gloo.txt"
fi

/usr/bin/python3 - "$OUT" $RANKS <<'PY'
import os, sys
out, ranks = sys.argv[1], [int(x) for x in sys.argv[2:]]
COLLS = ("allgather", "alltoall", "scatter", "gather")
TESTS = {"all_gather_perf": "allgather", "alltoall_perf": "alltoall", "scatter_perf": "scatter", "gather_perf": "gather"}

def parse(path):
    """{(coll, size, inplace): (time_us, busbw, ceil% or None, wrong)} from nccl-tests' format
    with cecoll-perf's two %ceil columns at the end."""
    rows, coll = {}, None
    for line in open(path):
        f = line.split()
        if line.startswith("# Collective test starting:"):
            coll = TESTS.get(f[-1])
        elif f and f[0].isdigit() and coll and len(f) >= 15:
            size = int(f[0])
            for ip, base in ((0, 5), (1, 9)):
                pc = f[13 + ip].rstrip("~")
                wrong = 0 if f[base + 3] == "N/A" else int(float(f[base + 3]))
                rows[(coll, size, ip)] = (float(f[base]), float(f[base + 2]), None if pc == "-" else float(pc), wrong)
    return rows

def fmt_size(b):
    return "%d B" % b if b < 1 << 20 else "%d MiB" % (b >> 20)

fails = []
for n in ranks:
    t = {}
    for prog in ("cecoll-g", "cecoll-P", "mpi-"):
        rows = {}
        for s in ("small", "big"):
            rows.update(parse(os.path.join(out, "%s%d-%s.txt" % (prog, n, s))))
        t[prog] = rows
    print("\n== %d ranks: cecoll -g %d (one process), -P %d (processes) vs OpenMPI (-np %d)" % (n, n, n, n))
    print("%-9s %7s %4s | %10s %8s | %10s %8s %5s | %10s %8s | %12s %12s"
          % ("coll", "chunk", "ip", "MPI us", "busbw", "-g us", "busbw", "%ceil", "-P us", "busbw", "-g/MPI", "-P/MPI"))
    for coll in COLLS:
        for (c2, size, ip) in sorted(k for k in t["mpi-"] if k[0] == coll):
            chunk = size // n
            m, a, p = t["mpi-"][(coll, size, ip)], t["cecoll-g"].get((coll, size, ip)), t["cecoll-P"].get((coll, size, ip))
            if a is None or p is None:
                continue
            if chunk < 1 << 20:  # latency: time ratio (lower is better)
                ra, rp = a[0] / m[0], p[0] / m[0]
                cell = ("time %.1fx" % ra, "time %.1fx" % rp)
                if ra > 2.0:
                    fails.append("%d ranks %s %s %s: -g time %.1fx MPI's (target <= 2x)" % (n, coll, fmt_size(chunk), "in place" if ip else "out of place", ra))
            else:  # bandwidth: busbw ratio (higher is better)
                ra, rp = a[1] / m[1], p[1] / m[1]
                cell = ("busbw %.2fx" % ra, "busbw %.2fx" % rp)
                for who, r in (("-g", ra), ("-P", rp)):
                    if r < 1.0:
                        fails.append("%d ranks %s %s %s: %s busbw %.2fx MPI's (target >= 1x)" % (n, coll, fmt_size(chunk), "in place" if ip else "out of place", who, r))
            wrong = sum(x[3] for x in (m, a, p) if x[3] > 0)
            print("%-9s %7s %4s | %10.2f %8.2f | %10.2f %8.2f %5s | %10.2f %8.2f | %12s %12s%s"
                  % (coll, fmt_size(chunk), "in" if ip else "out", m[0], m[1], a[0], a[1],
                     "-" if a[2] is None else "%.0f" % a[2], p[0], p[1], cell[0], cell[1],
                     "  WRONG BYTES %d" % wrong if wrong else ""))
print("\n== gloo (python -m cecoll.bench, same run)")
sys.stdout.write("".join(l for l in open(os.path.join(out, "gloo.txt")) if not l.startswith("+")))
print("\n== targets: busbw >= OpenMPI's at 16/64 MiB per rank (-g and -P); 8 B time <= 2x OpenMPI's with -g")
if fails:
    print("missed (%d):" % len(fails))
    for f in fails:
        print("  " + f)
else:
    print("all met")
PY
