#!/usr/bin/env python3
"""summary.py OUT: the several-GPU tables from the logs lab/multigpu/run.sh left in OUT.

Reads the CEIL lines of ceil.log, the ROW lines of perf_*.log (ncclcmp), the
JSON of cecoll-perf (cperf_*.json) and the OVERLAP lines of overlap_*.log,
and prints: the ceilings; busbw at 64 MiB, 256 MiB and 1 GiB per rank for each
operation (the four collectives, sendrecv, broadcast) with the ratios the
targets name; wrong bytes; the overlap slowdowns per looping operation.
Standard library only.
"""
import glob
import json
import os
import re
import sys

MIB = 1 << 20
SIZES = [64 * MIB, 256 * MIB, 1024 * MIB]
COLLS = ["allgather", "alltoall", "scatter", "gather", "sendrecv", "broadcast"]
# NCCL 2.28's copy-engine path covers these; for the others NCCL's --ce rows
# are its usual kernels under the CE recipe's config.
NCCL_CE_COLLS = ("allgather", "alltoall", "scatter", "gather")


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
    def ceil_of(kind, key):
        return num(ceil[kind].get(key)) if kind in ceil else None

    # The ceiling each operation's busbw is held against: the four collectives
    # (busbw = bytes each rank receives per second, from every peer at once):
    # all pairs at once per GPU; sendrecv (each GPU sends to one peer while it
    # receives from another): one direction of 0<->1; broadcast (busbw = algbw:
    # each rank takes the chunk in once): the 0->1 push.
    push = ceil_of("push", "GBps")
    cands = {"all": [(ceil_of("allpairs", "per_gpu_GBps"), "all pairs at once, per GPU"), (push, "0->1 push")],
             "sendrecv": [(ceil_of("bidir", "per_direction_GBps"), "0<->1, per direction"), (push, "0->1 push")],
             "broadcast": [(push, "0->1 push")]}
    ceilings = {}
    for coll in COLLS:
        for v, label in cands.get(coll, cands["all"]):
            if v:
                ceilings[coll] = (v, label)
                break
    shown = set()
    for coll in COLLS:
        if coll in ceilings and ceilings[coll] not in shown:
            shown.add(ceilings[coll])
            names = [c for c in COLLS if ceilings.get(c) == ceilings[coll]]
            print("  ceiling used below for %s: %.1f GB/s (%s)" % (",".join(names), ceilings[coll][0],
                                                                ceilings[coll][1]))

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
    print("-- busbw GB/s per operation (chunk = bytes per rank; busbw = algbw*(n-1)/n for the four collectives,")
    print("   = algbw for sendrecv and broadcast, as nccl-tests); ratios: cecoll ce-path vs NCCL, same harness & mode.")
    print("   NCCL's copy-engine path covers %s only: its ce rows of sendrecv and broadcast are NCCL's" %
          "/".join(NCCL_CE_COLLS))
    print("   kernels under the ce config (ncclMemAlloc + symmetric windows + CTAPolicy ZERO).")
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
            ceiling = ceilings.get(coll, (None, ""))[0]
            line += "  %s %s %s %s %s" % (ratio(ce, nd), ratio(ce, nce), ratio(ceg, ndg), ratio(ceg, nceg),
                                          ratio(ce, ceiling))
            print(line)
            best = max([v for v in (ce, ceg) if v] or [0])
            checks = []
            for name, ref, fac in (("NCCL CE" if coll in NCCL_CE_COLLS else "NCCL ce-config",
                                    max([v for v in (nce, nceg) if v] or [0]), 1.0),
                                   ("NCCL default", max([v for v in (nd, ndg) if v] or [0]), 1.0),
                                   ("90% ceiling", ceiling or 0, 0.9)):
                if not ref or not best:
                    checks.append("%s: n/a" % name)
                else:
                    checks.append("%s: %s" % (name, "PASS" if best >= fac * ref else "FAIL"))
            verdicts.append("  %-9s %5dM  cecoll best %s  %s" % (coll, size // MIB, "%.1f" % best if best else "-",
                                                               "; ".join(checks)))
    print()
    print("-- targets at >= 64 MiB (cecoll = best of its eager/graph ce-path rows vs the best NCCL row of each path;")
    print("   sendrecv and broadcast: the same comparison, no target named)")
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
                d = kv(line)
                d.setdefault("coll", "allgather")  # lines from before the operation was selectable
                ovs.append(d)
    order = {c: i for i, c in enumerate(COLLS)}
    ovs.sort(key=lambda d: (order.get(d["coll"], len(COLLS)), d.get("coll"), d.get("lib") != "cecoll",
                            d.get("lib"), d.get("path") != "default", d.get("path")))
    print()
    print("-- GEMM under load (ms per GEMM averaged over devices; slowdown = with/alone; busbw GB/s; coll = the")
    print("   operation looping beside the GEMM, smcopy = an SM copy of the same bytes along the same pairs)")
    if ovs:
        print("  %-9s %-7s %-8s %9s %9s %9s %9s %9s %9s %9s %9s" % (
            "coll", "lib", "path", "alone", "w/coll", "w/smcopy", "coll_x", "smcopy_x", "coll_bw", "coll_bw0",
            "smcopy_bw"))
        for d in ovs:
            print("  %-9s %-7s %-8s %9s %9s %9s %9s %9s %9s %9s %9s" % (
                d.get("coll"), d.get("lib"), d.get("path"), d.get("alone_ms"), d.get("with_coll_ms"),
                d.get("with_smcopy_ms"), d.get("coll_slowdown"), d.get("smcopy_slowdown"), d.get("coll_busbw"),
                d.get("coll_alone_busbw"), d.get("smcopy_busbw")))
        print()
        print("  GEMM slowdown per looping operation (x = with/alone)")
        series = [("cecoll", "ce"), ("nccl", "default"), ("nccl", "ce")]
        print("  %-9s %10s %10s %10s   %s" % ("coll", "cecoll/ce", "nccl/def", "nccl/ce", "target: cecoll < NCCL default"))
        for coll in sorted({d["coll"] for d in ovs}, key=lambda c: (order.get(c, len(COLLS)), c)):
            x = {}
            for d in ovs:
                if d["coll"] == coll:
                    x.setdefault((d.get("lib"), d.get("path")), num(d.get("coll_slowdown")))
            cec, nd = x.get(("cecoll", "ce")), x.get(("nccl", "default"))
            verdict = ("PASS" if cec < nd else "FAIL") if cec and nd else "n/a"
            print("  %-9s %10s %10s %10s   %s" % (coll, *["x%.3f" % x[k] if x.get(k) else "-" for k in series],
                                                verdict))
    else:
        print("  (no OVERLAP lines)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/out")
