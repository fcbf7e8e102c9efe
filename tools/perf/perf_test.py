"""cecoll-perf's options and output, on the host device.

    python3 tools/perf/perf_test.py build/cecoll-perf [-k alltoallv]

The output is read as scripts written for nccl-tests read nccl-tests': the
column header by position, rows as whitespace-separated fields, the
'# Out of bounds values' and '# Avg bus bandwidth' lines. Bad values must
fail with exit status 2 and a message naming the value, -h must list every
option on stdout.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PERF = os.path.join(ROOT, "build", "cecoll-perf")  # the command line's, when given
ENV = dict(os.environ, CECOLL_BACKEND="host")

# The three header lines of nccl-tests 2.19.6 (all_gather_perf, no options),
# character for character; cecoll-perf may only append after them.
NCCL_TESTS_HEADER = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
]


def run(*args, env=None):
    p = subprocess.run([PERF, *args], capture_output=True, text=True, env=env or ENV, timeout=300)
    return p.returncode, p.stdout, p.stderr


def parse(out):
    """What a typical nccl-tests script extracts: per block, the rows and
    the footer values. A row: size count type redop root, then time algbw
    busbw #wrong out of place and in place."""
    blocks, cur = [], None
    for line in out.splitlines():
        if line.startswith("# Collective test starting:"):
            cur = {"name": line.split(":", 1)[1].strip(), "header": [], "rows": []}
            blocks.append(cur)
        elif cur is None:
            continue
        elif line.startswith("#") and ("out-of-place" in line or "size" in line.split() or "(B)" in line):
            cur["header"].append(line)
        elif line.startswith("# Out of bounds values"):
            f = line.split(":", 1)[1].split()
            cur["oob"] = (int(f[0]), f[1])
        elif line.startswith("# Avg bus bandwidth"):
            cur["avgbw"] = float(line.split(":", 1)[1].split()[0])
        elif line and not line.startswith("#"):
            f = line.split()
            row = {"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3], "root": int(f[4])}
            for name, base in (("oop", 5), ("ip", 9)):
                c = [None if v == "N/A" else float(v) for v in f[base:base + 4]]
                row[name] = {"time": c[0], "algbw": c[1], "busbw": c[2], "wrong": None if c[3] is None else int(c[3])}
            row["extra"] = f[13:]
            cur["rows"].append(row)
    return blocks


class Errors(unittest.TestCase):
    def test_bad_values_name_themselves(self):
        for args, named in (
            (["-o", "allgathr"], "-o allgathr"),
            (["-o", "allgather"], "-o allgather"),
            (["-e", "12X"], "-e 12X"),
            (["-b", "1.5Q"], "-b 1.5Q"),
            (["-b", "64M", "-e", "1M"], "-b 64M is above -e 1M"),
            (["-g", "4", "-P", "2"], "-P 2"),
            (["allgathr"], "allgathr"),
            (["-d", "float33"], "-d float33"),
            (["-n", "0"], "-n 0"),
            (["-R", "3"], "-R 3"),
            (["-g", "2", "-r", "5"], "-r 5"),
            (["-y", "1", "-t", "2"], "-t 2"),
            (["-G", "3", "-z", "1"], "-G 3"),
            (["-q"], "-q"),
        ):
            with self.subTest(args=args):
                rc, out, err = run(*args)
                self.assertEqual(rc, 2, err)
                self.assertEqual(out, "")
                self.assertIn(named, err)

    def test_help_lists_every_option(self):
        rc, out, err = run("-h")
        self.assertEqual((rc, err), (0, ""))
        for opt in ("-t,--nthreads", "-g,--ngpus", "-b,--minbytes", "-e,--maxbytes", "-i,--stepbytes",
                    "-f,--stepfactor", "-n,--iters", "-m,--agg_iters", "-w,--warmup_iters", "-N,--run_cycles",
                    "-p,--parallel_init", "-c,--check", "-o,--op", "-d,--datatype", "-r,--root", "-z,--blocking",
                    "-y,--stream_null", "-T,--timeout", "-G,--cudagraph", "-C,--report_cputime", "-a,--average",
                    "-R,--local_register", "-h,--help", "-P,--procs", "-B,--bootstrap", "--json", "--plot",
                    "--ceil-tol", "%ceil"):
            self.assertIn(opt, out)
        self.assertEqual(run("--help")[:2], (0, out))


class Format(unittest.TestCase):
    def check_block(self, b, nranks, rooted):
        for have, want in zip(b["header"], NCCL_TESTS_HEADER):
            self.assertTrue(have.startswith(want), "\n%r\n%r" % (have, want))
        self.assertEqual(len(b["header"]), 3)
        self.assertEqual(b["oob"], (0, "OK"))
        bws = []
        # nccl-tests' sendrecv and broadcast: size is the message, busbw its algbw.
        one = b["name"] in ("sendrecv_perf", "broadcast_perf")
        per, factor = (1, 1.0) if one else (nranks, (nranks - 1) / nranks)
        # alltoallv has no in-place form: its in-place cells are N/A.
        placements = ("oop",) if b["name"] == "alltoallv_perf" else ("oop", "ip")
        for r in b["rows"]:
            self.assertEqual(r["count"], r["size"] // 4 // per)  # float, per rank
            self.assertEqual(r["size"], r["count"] * 4 * per)
            self.assertEqual((r["type"], r["redop"], r["root"]), ("float", "none", 0 if rooted else -1))
            if "ip" not in placements:
                self.assertEqual(r["ip"], {"time": None, "algbw": None, "busbw": None, "wrong": None})
                self.assertEqual(r["extra"][1], "-")
            for p in placements:
                c = r[p]
                self.assertEqual(c["wrong"], 0)
                if r["size"] and c["time"] >= 1:
                    self.assertAlmostEqual(c["algbw"], r["size"] / c["time"] / 1e3,
                                           delta=0.01 + 0.01 * c["algbw"])
                self.assertAlmostEqual(c["busbw"], c["algbw"] * factor, delta=0.011)
                bws.append(c["busbw"])
            self.assertEqual(len(r["extra"]), 2)  # %ceil out of place, in place
            for cell in r["extra"][:len(placements)]:
                if r["size"] < 1 << 20:
                    self.assertEqual(cell, "-")
                else:
                    self.assertGreater(float(cell.rstrip("~")), 0)
        self.assertAlmostEqual(b["avgbw"], sum(bws) / len(bws), delta=0.01)

    def test_one_process(self):
        rc, out, err = run("-g", "4", "-b", "0", "-e", "4M", "-f", "16", "-i", "0", "-n", "2", "-w", "1")
        self.assertEqual(rc, 0, err)
        blocks = parse(out)
        self.assertEqual([b["name"] for b in blocks],
                         ["all_gather_perf", "alltoall_perf", "scatter_perf", "gather_perf", "sendrecv_perf",
                          "broadcast_perf", "alltoallv_perf"])
        for b in blocks:
            self.assertEqual([r["size"] for r in b["rows"]], [0])  # -f on 0 stays at 0
        rc, out, err = run("-g", "4", "-b", "64", "-e", "4M", "-f", "16", "-n", "2", "-w", "1")
        self.assertEqual(rc, 0, err)
        for b in parse(out):
            self.assertEqual([r["size"] for r in b["rows"]], [64, 1024, 16384, 262144, 4194304])
            self.check_block(b, 4, b["name"] in ("scatter_perf", "gather_perf", "broadcast_perf"))
        self.assertIn("# nThread 1 nGpus 4 minBytes 64 maxBytes 4194304 step: 16(factor) warmup iters: 1 "
                      "iters: 2 agg iters: 1 validation: 1 graph: 0 unalign: 0", out)

    def test_threads_processes_graphs(self):
        for args, nranks in ((["alltoall", "-t", "2", "-g", "2", "-R", "2", "-f", "2"], 4),
                             (["scatter", "-P", "3", "-R", "2", "-f", "2"], 3),
                             (["gather", "-g", "3", "-G", "2", "-m", "2", "-f", "2"], 3),
                             (["allgather", "-g", "2", "-i", "768K", "-z", "1", "-a", "3", "-N", "2"], 2),
                             (["sendrecv", "-t", "2", "-g", "2", "-f", "2"], 4),
                             (["sendrecv", "-P", "3", "-G", "2", "-f", "2"], 3),
                             (["broadcast", "-t", "3", "-f", "2"], 3),
                             (["broadcast", "-P", "2", "-G", "2", "-R", "2", "-f", "2"], 2)):
            with self.subTest(args=args):
                rc, out, err = run(*args, "-b", "768K", "-e", "1536K", "-n", "2", "-w", "1")
                self.assertEqual(rc, 0, err)
                (b,) = parse(out)
                self.check_block(b, nranks, args[0] in ("scatter", "gather", "broadcast"))
                self.assertEqual(len(b["rows"]), 2 * (1 + ("-N" in args)))

    def test_no_check_is_na(self):
        rc, out, err = run("allgather", "-g", "2", "-b", "8K", "-e", "8K", "-c", "0", "-n", "1")
        self.assertEqual(rc, 0, err)
        (b,) = parse(out)
        self.assertEqual([r["oop"]["wrong"] for r in b["rows"]], [None])
        self.assertEqual([r["ip"]["wrong"] for r in b["rows"]], [None])

    def test_json_and_plot(self):
        with tempfile.TemporaryDirectory() as d:
            js, png = os.path.join(d, "p.json"), os.path.join(d, "p.png")
            rc, out, err = run("gather", "-g", "2", "-b", "1K", "-e", "2M", "-f", "2048", "-n", "2", "-w", "1",
                               "-R", "2", "--json", js, "--plot", png)
            self.assertEqual(rc, 0, err)
            with open(js) as f:
                j = json.load(f)
            self.assertEqual((j["nranks"], j["register"], j["graph"]), (2, 2, False))
            self.assertEqual([(r["size"], r["in_place"]) for r in j["rows"]],
                             [(1024, False), (1024, True), (2097152, False), (2097152, True)])
            self.assertIsNone(j["rows"][0]["ceil_fraction"])
            self.assertGreater(j["rows"][2]["ceil_fraction"], 0)
            self.assertIn(j["rows"][2]["ceil_moved"], (True, False))
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


def split(count, n):
    """alltoallv's documented split, written out again: pair (s, d) moves
    F(k) - F(k-1) elements, k = 1 + (d - s) mod n, F(k) = floor(count k(k+1) / (n+1))."""
    f = lambda k: count * k * (k + 1) // (n + 1)
    return [[f(1 + (d - s) % n) - f((d - s) % n) for d in range(n)] for s in range(n)]


# Wraps ncclAllToAllv (LD_PRELOAD) to break it as CECOLL_TEST_A2AV says, so
# that cecoll-perf's check must catch it.
BREAK_A2AV = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "nccl.h"

typedef ncclResult_t (*a2av_t)(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*,
                               ncclDataType_t, ncclComm_t, cudaStream_t);

ncclResult_t ncclAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[], void* recvbuff,
                           const size_t recvcounts[], const size_t rdispls[], ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  a2av_t real = (a2av_t)dlsym(RTLD_NEXT, "ncclAllToAllv");
  const char* how = getenv("CECOLL_TEST_A2AV");
  size_t sc[64], sd[64], rc[64], rd[64], total = 0;
  int n, r;
  if (!real || ncclCommCount(comm, &n) != ncclSuccess || ncclCommUserRank(comm, &r) != ncclSuccess || n > 64)
    return ncclInternalError;
  memcpy(sc, sendcounts, n * sizeof *sc);
  memcpy(sd, sdispls, n * sizeof *sd);
  memcpy(rc, recvcounts, n * sizeof *rc);
  memcpy(rd, rdispls, n * sizeof *rd);
  for (int p = 0; p < n; p++) total += sc[p];
  if (how && !strcmp(how, "even")) { /* the split ignored: an even AlltoAll of the same bytes */
    for (int p = 0; p < n; p++) {
      sc[p] = rc[p] = total / n;
      sd[p] = rd[p] = p * (total / n);
    }
  } else if (how && !strcmp(how, "short")) { /* rank 0's last element (from rank n-1) not moved */
    if (r == n - 1 && sc[0]) sc[0]--;
    if (r == 0 && rc[n - 1]) rc[n - 1]--;
  } else if (how && !strcmp(how, "reversed")) { /* the receives in the reverse order of senders */
    for (int p = n - 1, at = 0; p >= 0; at += rc[p--]) rd[p] = at;
  }
  return real(sendbuff, sc, sd, recvbuff, rc, rd, datatype, comm, stream);
}
"""


class AlltoAllv(unittest.TestCase):
    def run_json(self, *args, env=None):
        with tempfile.TemporaryDirectory() as d:
            js = os.path.join(d, "a.json")
            rc, out, err = run("alltoallv", *args, "--json", js, env=env)
            j = None
            if os.path.exists(js):
                with open(js) as f:
                    j = json.load(f)
        return rc, out, err, j

    def check_split(self, j):
        """Each row's split is the documented rule's; out of place only."""
        n = j["nranks"]
        for r in j["rows"]:
            self.assertEqual(r["collective"], "alltoallv")
            self.assertFalse(r["in_place"])
            self.assertEqual(r["count"], r["size"] // 4 // n)
            m = split(r["count"], n)
            self.assertEqual(r["sendcounts"], m)
            for k in range(n):  # every rank sends and receives exactly size bytes
                self.assertEqual(sum(m[k]), n * r["count"])
                self.assertEqual(sum(row[k] for row in m), n * r["count"])

    def test_alltoallv_split_rule(self):
        for args, n in ((["-g", "4", "-b", "16", "-e", "16K", "-f", "4"], 4),
                        (["-g", "2", "-b", "0", "-e", "0"], 2),
                        (["-g", "3", "-b", "12", "-e", "12K", "-f", "32"], 3),
                        (["-t", "2", "-b", "8", "-e", "8"], 2)):
            with self.subTest(args=args):
                rc, out, err, j = self.run_json(*args, "-n", "1", "-w", "1")
                self.assertEqual(rc, 0, err)
                (b,) = parse(out)
                self.check_block(b, n)
                self.check_split(j)
                self.assertEqual([r["size"] for r in j["rows"]], [r["size"] for r in b["rows"]])
        # Fixed points of the rule: 4 ranks, 1 float per pair on average: own pair empty,
        # the pair to rank s-1 two floats; 3 ranks, 1024 floats.
        self.assertEqual(split(1, 4)[0], [0, 1, 1, 2])
        self.assertEqual(split(1024, 3)[1], [1536, 512, 1024])
        self.assertEqual(j["rows"][0]["sendcounts"], [[0, 2], [2, 0]])  # -t 2, 8 B: one float on average

    def check_block(self, b, nranks):
        self.assertEqual(b["name"], "alltoallv_perf")
        Format.check_block(self, b, nranks, False)

    def test_alltoallv_layouts(self):
        """One thread grouped, threads, processes; eager and graph; registered buffers; -m."""
        for args, nranks in ((["-g", "4"], 4),
                             (["-t", "3"], 3),
                             (["-t", "2", "-g", "2", "-R", "2"], 4),
                             (["-g", "3", "-G", "2", "-m", "2"], 3),
                             (["-t", "2", "-G", "2", "-R", "1"], 2),
                             (["-P", "3"], 3),
                             (["-P", "2", "-G", "2", "-R", "2"], 2)):
            with self.subTest(args=args):
                rc, out, err, j = self.run_json(*args, "-b", "768K", "-e", "1536K", "-f", "2", "-n", "2", "-w", "1")
                self.assertEqual(rc, 0, err)
                (b,) = parse(out)
                self.check_block(b, nranks)
                self.assertEqual(len(b["rows"]), 2)
                self.assertIn("# alltoallv: no in-place form (ncclAllToAllv has none): in-place columns N/A", out)
                self.check_split(j)
                self.assertEqual([r["wrong"] for r in j["rows"]], [0, 0])
                self.assertGreater(j["rows"][1]["ceil_fraction"], 0)  # 1536K: the ceiling measured
                # The ceiling copies the bytes each rank sends: size per rank.
                self.assertGreater(j["rows"][1]["ceil_gbps"], 0)

    def test_alltoallv_check_catches_a_broken_collective(self):
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler")
        with tempfile.TemporaryDirectory() as d:
            src, so = os.path.join(d, "break.c"), os.path.join(d, "break.so")
            with open(src, "w") as f:
                f.write(BREAK_A2AV)
            subprocess.run([cc, "-shared", "-fPIC", "-Wall", "-Werror", "-I", os.path.join(ROOT, "include"),
                            "-o", so, src, "-ldl"], check=True)
            for how, args, exact in (("short", ["-g", "3"], 1),
                                     ("short", ["-P", "2", "-G", "2"], 1),
                                     ("short", ["-t", "2", "-g", "2", "-c", "2"], 1),
                                     ("even", ["-g", "3"], None),
                                     ("reversed", ["-t", "3", "-G", "2"], None)):
                with self.subTest(how=how, args=args):
                    env = dict(ENV, LD_PRELOAD=so, CECOLL_TEST_A2AV=how)
                    rc, out, err, j = self.run_json(*args, "-b", "96K", "-e", "192K", "-f", "2", "-n", "1",
                                                    "-w", "1", env=env)
                    self.assertEqual(rc, 1, err)  # wrong elements
                    (b,) = parse(out)
                    self.assertEqual(b["oob"], (2, "FAILED"))
                    for r in b["rows"]:
                        if exact is not None:
                            self.assertEqual(r["oop"]["wrong"], exact)
                        else:
                            self.assertGreater(r["oop"]["wrong"], 0)
                    self.assertEqual([r["wrong"] for r in j["rows"]], [r["oop"]["wrong"] for r in b["rows"]])
            # The wrapper itself, passing everything through, breaks nothing.
            rc, out, err, _ = self.run_json("-g", "3", "-b", "96K", "-e", "96K", "-n", "1", "-w", "1",
                                            env=dict(ENV, LD_PRELOAD=so))
            self.assertEqual(rc, 0, err)
            self.assertEqual(parse(out)[0]["oob"], (0, "OK"))

    def test_alltoallv_named(self):
        rc, out, err = run("-h")
        self.assertEqual(rc, 0, err)
        self.assertIn("alltoallv", out)
        self.assertIn("F(k) = floor(count x k(k+1) / (N+1))", out)
        rc, out, err = run("alltoallvv")
        self.assertEqual(rc, 2)
        self.assertIn("alltoallv, all", err)
        with tempfile.TemporaryDirectory() as d:  # run as rccl-tests' binary name
            link = os.path.join(d, "alltoallv_perf")
            os.symlink(PERF, link)
            p = subprocess.run([link, "-g", "2", "-b", "1K", "-e", "1K", "-n", "1", "-w", "1"], capture_output=True,
                               text=True, env=ENV, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual([b["name"] for b in parse(p.stdout)], ["alltoallv_perf"])


if __name__ == "__main__":
    PERF = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
