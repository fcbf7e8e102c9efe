"""cecoll-perf's options and output, on the host device.

    python3 tools/perf/perf_test.py build/cecoll-perf

The output is read as scripts written for nccl-tests read nccl-tests': the
column header by position, rows as whitespace-separated fields, the
'# Out of bounds values' and '# Avg bus bandwidth' lines. Bad values must
fail with exit status 2 and a message naming the value, -h must list every
option on stdout.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

PERF = None
ENV = dict(os.environ, CECOLL_BACKEND="host")

# The three header lines of nccl-tests 2.19.6 (all_gather_perf, no options),
# character for character; cecoll-perf may only append after them.
NCCL_TESTS_HEADER = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
]


def run(*args):
    p = subprocess.run([PERF, *args], capture_output=True, text=True, env=ENV, timeout=300)
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
                wrong = f[base + 3]
                row[name] = {"time": float(f[base]), "algbw": float(f[base + 1]), "busbw": float(f[base + 2]),
                             "wrong": None if wrong == "N/A" else int(float(wrong))}
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
        for r in b["rows"]:
            self.assertEqual(r["count"], r["size"] // 4 // per)  # float, per rank
            self.assertEqual(r["size"], r["count"] * 4 * per)
            self.assertEqual((r["type"], r["redop"], r["root"]), ("float", "none", 0 if rooted else -1))
            for p in ("oop", "ip"):
                c = r[p]
                self.assertEqual(c["wrong"], 0)
                if r["size"] and c["time"] >= 1:
                    self.assertAlmostEqual(c["algbw"], r["size"] / c["time"] / 1e3,
                                           delta=0.01 + 0.01 * c["algbw"])
                self.assertAlmostEqual(c["busbw"], c["algbw"] * factor, delta=0.011)
                bws.append(c["busbw"])
            self.assertEqual(len(r["extra"]), 2)  # %ceil out of place, in place
            for cell in r["extra"]:
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
                          "broadcast_perf"])
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


if __name__ == "__main__":
    PERF = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
