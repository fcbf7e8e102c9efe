#!/usr/bin/env python3
"""summary.py OUT: the several-GPU tables from the logs lab/multigpu/run.sh left in OUT.

Reads the CEIL lines of ceil.log, the ROW lines of perf_*.log (ncclcmp), the
JSON of cecoll-perf (cperf_*.json) and the OVERLAP lines of overlap_*.log,
and prints: the ceilings; busbw at 64 MiB, 256 MiB and 1 GiB per rank for each
collective with the ratios the targets name; wrong bytes; the overlap
slowdowns. Standard library only.
"""
import glob
import json
import os
import re
import sys

MIB = 1 << 20
SIZES = [64 * MIB, 256 * MIB, 1024 * MIB]
COLLS = ["allgather", "alltoall", "scatter", "gather"]


def kv(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def main(out):
    ceil = {}
    for path in glob.glob(os.path.join(out, "ceil.log")):
        for line in open(path, errors="replace"):
            if line.startswith("CEIL "):
                d = kv(line)
                ceil[d.get("kind")] = d

    # (series, coll, chunk) -> dict; series = lib/path/mode
    rows = {}
    wrong = []
    for path in sorted(glob.glob(os.path.join(out, "perf_*.log"))):
        for line in open(path, errors="replace"):
            if not line.startswith("ROW "):
                continue
            d = kv(line)
            series = "%s/%s/%s" % (d["lib"], d["path"], d["mode"])
            rows[(series, d["coll"], int(d["bytes"]))] = d
            if d.get("wrong") not in ("0", "-"):
                wrong.append("%s %s %s B: %s wrong bytes (%s)" % (series, d["coll"], d["bytes"], d["wrong"],
                                                                  os.path.basename(path)))
    for path in sorted(glob.glob(os.path.join(out, "cperf_*.json"))):
        try:
            j = json.load(open(path))
        except (OSError, ValueError) as e:
            print("  (cannot read %s: %s)" % (path, e))
            continue
        series = "cecoll-perf/%s/%s" % ("win" if j.get("register") == 2 else "plain", "graph" if j.get("graph") else "eager")
        for r in j.get("rows", []):
            if r.get("in_place"):
                continue
            rows[(series, r["collective"], int(r["count"]))] = {"busbw": r.get("busbw"), "us": r.get("time_us"),
                                                                 "wrong": r.get("wrong")}
            if r.get("wrong") not in (0, None):
                wrong.append("%s %s %s B: %s wrong bytes" % (series, r["collective"], r["count"], r["wrong"]))

    print()
    print("-- copy ceilings (cuMemcpyDtoDAsync, GB/s = 1e9 B/s)")
    for k in ("local", "push", "pull", "bidir", "allpairs"):
        if k in ceil:
            d = ceil[k]
            print("  %-9s %s" % (k, " ".join("%s=%s" % (a, b) for a, b in d.items() if a != "kind")))
    ceiling = None
    if "allpairs" in ceil:
        ceiling = num(ceil["allpairs"].get("per_gpu_GBps"))
        label = "all pairs at once, per GPU"
    elif "push" in ceil:
        ceiling = num(ceil["push"].get("GBps"))
        label = "0->1 push"
    if ceiling:
        print("  ceiling used below: %.1f GB/s (%s; AllGather busbw = bytes each rank receives per second)" %
              (ceiling, label))

    series_order = ["cecoll/ce/eager", "cecoll/ce/graph", "cecoll/default/eager", "cecoll-perf/win/eager",
                    "cecoll-perf/win/graph", "nccl/default/eager", "nccl/default/graph", "nccl/ce/eager",
                    "nccl/ce/graph"]
    present = [s for s in series_order if any(k[0] == s for k in rows)]
    present += sorted({k[0] for k in rows} - set(present))
    short = {"cecoll/ce/eager": "cec-ce", "cecoll/ce/graph": "cec-ce-G", "cecoll/default/eager": "cec-def",
             "cecoll-perf/win/eager": "cperf", "cecoll-perf/win/graph": "cperf-G", "nccl/default/eager": "ncl-def",
             "nccl/default/graph": "ncl-def-G", "nccl/ce/eager": "ncl-ce", "nccl/ce/graph": "ncl-ce-G"}

    def bw(series, coll, size):
        d = rows.get((series, coll, size))
        return num(d.get("busbw")) if d else None

    def ratio(a, b):
        return "%6.2f" % (a / b) if a and b else "     -"

    print()
    print("-- busbw GB/s per collective (chunk = bytes per rank); ratios: cecoll ce-path vs NCCL, same harness & mode")
    for s in present:
        print("   %-10s = %s" % (short.get(s, s), s))
    hdr = "  %-9s %6s " % ("coll", "chunk") + " ".join("%9s" % short.get(s, s)[:9] for s in present)
    hdr += "  %6s %6s %6s %6s %6s" % ("/nDef", "/nCE", "G/nDefG", "G/nCEG", "/ceil")
    print(hdr)
    verdicts = []
    for coll in COLLS:
        for size in SIZES:
            vals = [bw(s, coll, size) for s in present]
            if all(v is None for v in vals):
                continue
            line = "  %-9s %5dM " % (coll, size // MIB) + " ".join("%9s" % ("%.1f" % v if v else "-") for v in vals)
            ce, ceg = bw("cecoll/ce/eager", coll, size), bw("cecoll/ce/graph", coll, size)
            nd, nce = bw("nccl/default/eager", coll, size), bw("nccl/ce/eager", coll, size)
            ndg, nceg = bw("nccl/default/graph", coll, size), bw("nccl/ce/graph", coll, size)
            line += "  %s %s %s %s %s" % (ratio(ce, nd), ratio(ce, nce), ratio(ceg, ndg), ratio(ceg, nceg),
                                          ratio(ce, ceiling))
            print(line)
            best = max([v for v in (ce, ceg) if v] or [0])
            checks = []
            for name, ref, fac in (("NCCL CE", max([v for v in (nce, nceg) if v] or [0]), 1.0),
                                   ("NCCL default", max([v for v in (nd, ndg) if v] or [0]), 1.0),
                                   ("90% ceiling", ceiling or 0, 0.9)):
                if not ref or not best:
                    checks.append("%s: n/a" % name)
                else:
                    checks.append("%s: %s" % (name, "PASS" if best >= fac * ref else "FAIL"))
            verdicts.append("  %-9s %5dM  cecoll best %s  %s" % (coll, size // MIB, "%.1f" % best if best else "-",
                                                               "; ".join(checks)))
    print()
    print("-- targets at >= 64 MiB (cecoll = best of its eager/graph ce-path rows vs the best NCCL row of each path)")
    for v in verdicts:
        print(v)

    print()
    if wrong:
        print("-- WRONG DATA (%d rows)" % len(wrong))
        for w in wrong[:30]:
            print("  " + w)
    else:
        print("-- data checks: no wrong bytes in any checked row (%d rows)" % len(rows))

    ovs = []
    for path in sorted(glob.glob(os.path.join(out, "overlap_*.log"))):
        for line in open(path, errors="replace"):
            if line.startswith("OVERLAP "):
                ovs.append(kv(line))
    print()
    print("-- GEMM under load (ms per GEMM averaged over devices; slowdown = with/alone; busbw GB/s)")
    if ovs:
        print("  %-7s %-8s %9s %9s %9s %9s %9s %9s %9s %9s" % ("lib", "path", "alone", "w/coll", "w/smcopy", "coll_x",
                                                            "smcopy_x", "coll_bw", "coll_bw0", "smcopy_bw"))
        for d in ovs:
            print("  %-7s %-8s %9s %9s %9s %9s %9s %9s %9s %9s" % (
                d.get("lib"), d.get("path"), d.get("alone_ms"), d.get("with_coll_ms"), d.get("with_smcopy_ms"),
                d.get("coll_slowdown"), d.get("smcopy_slowdown"), d.get("coll_busbw"), d.get("coll_alone_busbw"),
                d.get("smcopy_busbw")))
        cec = [num(d["coll_slowdown"]) for d in ovs if d.get("lib") == "cecoll"]
        nd = [num(d["coll_slowdown"]) for d in ovs if d.get("lib") == "nccl" and d.get("path") == "default"]
        if cec and nd:
            print("  target: GEMM slows less under cecoll (x%.3f) than under NCCL default (x%.3f): %s" %
                  (cec[0], nd[0], "PASS" if cec[0] < nd[0] else "FAIL"))
    else:
        print("  (no OVERLAP lines)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/out")
