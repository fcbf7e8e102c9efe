"""cecoll against torch.distributed's gloo backend, in one run.

    PYTHONPATH=python CECOLL_LIBRARY=build/libcecoll.so /usr/bin/python3 -m cecoll.bench \
        [--ranks 2,4] [--sizes 32,4M,64M] [--json FILE]

For each world size, that many processes are spawned (torch.multiprocessing,
spawn: the library carries a Go runtime). Each process joins a gloo process
group and a cecoll ProcessGroup, then for every collective and message size
(the total of all ranks' chunks, as cecoll-perf's and nccl-tests' -b/-e:
each rank's chunk is size / world size bytes) times cecoll and gloo back to
back on CPU tensors (uint8):

- all_gather: cecoll all_gather_into_tensor(out, inp); gloo all_gather into a
  list of views of one output tensor (torch 1.13's gloo has no
  all_gather_into_tensor).
- all_to_all: cecoll all_to_all_single; gloo's all_to_all_single is tried
  once and, where it raises (gloo on CPU in some torch versions), reported as
  unsupported and skipped.
- scatter / gather: root 0; the root passes one tensor to cecoll and a list of
  views of it to gloo.

cecoll runs twice: on plain torch tensors ("cecoll", staged through the
library's internal windows) and on alloc_tensor() memory registered as
windows ("cecoll-reg", zero-copy). On the host device every cecoll call is
synchronous, as gloo's are.

Columns as cecoll-perf: size = the larger of one rank's send and recv bytes
(world_size * chunk); time = mean per call over back-to-back iterations, the
slowest rank's; algbw = size / time; busbw = algbw * (n-1)/n. Before timing,
each collective's output is checked once against the expected bytes for both
libraries. Ratios are cecoll/gloo: time (lower is better) and busbw (higher
is better).
"""

import argparse
import json
import os
import socket
import sys
import tempfile
import time
import traceback

COLLS = ("all_gather", "all_to_all", "scatter", "gather")


def _parse_size(s):
    s = s.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def _fmt_size(b):
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return "%d MiB" % (b >> 20)
    if b >= 1 << 10 and b % (1 << 10) == 0:
        return "%d KiB" % (b >> 10)
    return "%d B" % b


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iters_for(chunk, args):
    if chunk <= 64 << 10:
        return args.small_iters, args.small_iters // 10
    if chunk <= 4 << 20:
        return args.mid_iters, 2
    return args.big_iters, 1


def _worker(rank, world_size, gloo_port, id_port, args, result_path):
    import torch
    import torch.distributed as dist

    import cecoll

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % gloo_port, rank=rank, world_size=world_size)
    uid = cecoll.share_id_via_tcp_store("127.0.0.1", id_port, rank, world_size)
    pg = cecoll.ProcessGroup(rank, world_size, uid)
    n = world_size
    rows = []
    notes = []

    def slowest(t):
        x = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return x.item()

    def pattern(r, nbytes):
        # rank r's input bytes: distinct per rank and position
        return ((torch.arange(nbytes, dtype=torch.int64) * 7 + r * 131 + 1) % 256).to(torch.uint8)

    def expected(coll, chunk):
        """The bytes this rank should hold after coll (None: nothing to check)."""
        if coll == "all_gather":
            return torch.cat([pattern(b, n * chunk)[:chunk] for b in range(n)])
        if coll == "all_to_all":
            return torch.cat([pattern(b, n * chunk)[rank * chunk:(rank + 1) * chunk] for b in range(n)])
        if coll == "scatter":
            return pattern(0, n * chunk)[rank * chunk:(rank + 1) * chunk]
        if rank == 0:
            return torch.cat([pattern(b, n * chunk)[:chunk] for b in range(n)])
        return None

    def make_ops(coll, chunk, impl):
        """(call, output tensor to check) for one implementation on fresh buffers."""
        total = n * chunk
        if impl == "cecoll-reg":
            send = pg.alloc_tensor((total,), torch.uint8)
            recv = pg.alloc_tensor((total,), torch.uint8)
            wins = [pg.register(send), pg.register(recv)]
        else:
            send = torch.empty(total, dtype=torch.uint8)
            recv = torch.empty(total, dtype=torch.uint8)
            wins = []
        send.copy_(pattern(rank, total))
        recv.fill_(0xA5)
        inp = send[:chunk]  # one chunk: all_gather / gather input
        out_chunk = recv[:chunk]
        if impl == "gloo":
            views = list(recv.chunk(n))
            if coll == "all_gather":
                return (lambda: dist.all_gather(views, inp)), recv, wins
            if coll == "all_to_all":
                return (lambda: dist.all_to_all_single(recv, send)), recv, wins
            if coll == "scatter":
                lst = list(send.chunk(n)) if rank == 0 else None
                return (lambda: dist.scatter(out_chunk, lst, src=0)), out_chunk, wins
            lst = views if rank == 0 else None
            return (lambda: dist.gather(inp, lst, dst=0)), recv, wins
        if coll == "all_gather":
            return (lambda: pg.all_gather_into_tensor(recv, inp)), recv, wins
        if coll == "all_to_all":
            return (lambda: pg.all_to_all_single(recv, send)), recv, wins
        if coll == "scatter":
            return (lambda: pg.scatter(out_chunk, send if rank == 0 else None, src=0)), out_chunk, wins
        return (lambda: pg.gather(inp, recv if rank == 0 else None, dst=0)), recv, wins

    impls = ("cecoll", "cecoll-reg", "gloo")
    unsupported = set()
    for coll in args.colls:
        for size in args.sizes:
            chunk = size // n
            iters, warm = _iters_for(chunk, args)
            want = expected(coll, chunk)
            for impl in impls:
                if (coll, impl) in unsupported:
                    continue
                call, out, wins = make_ops(coll, chunk, impl)
                err = None
                try:
                    call()
                except RuntimeError as e:  # gloo: collective not implemented
                    err = str(e).splitlines()[0]
                # every rank must agree before going on (a rank-local failure
                # would leave the others waiting in the next collective)
                flag = torch.tensor([1 if err else 0], dtype=torch.int32)
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                if flag.item():
                    unsupported.add((coll, impl))
                    if rank == 0:
                        notes.append("%s %s: not run: %s" % (impl, coll, err or "failed on another rank"))
                    continue
                wrong = 0
                if want is not None:
                    wrong = int((out != want).sum().item())
                wrong_t = torch.tensor([wrong], dtype=torch.int64)
                dist.all_reduce(wrong_t)
                for _ in range(warm):
                    call()
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    call()
                t = slowest((time.perf_counter() - t0) / iters)
                for w in wins:
                    pg.deregister(w)
                size = n * chunk
                algbw = size / t / 1e9
                rows.append({
                    "collective": coll, "impl": impl, "nranks": n, "chunk": chunk, "size": size,
                    "iters": iters, "time_us": t * 1e6, "algbw": algbw, "busbw": algbw * (n - 1) / n,
                    "wrong": int(wrong_t.item()),
                })
    pg.barrier()
    pg.destroy()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"rows": rows, "notes": notes, "torch": torch.__version__}, f)


def _run_world(world_size, args):
    import torch.multiprocessing as mp

    fd, path = tempfile.mkstemp(prefix="cecoll-bench-", suffix=".json")
    os.close(fd)
    try:
        mp.spawn(_worker, args=(world_size, _free_port(), _free_port(), args, path), nprocs=world_size, join=True)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def _print_table(world_size, res):
    rows = {(r["collective"], r["size"], r["impl"]): r for r in res["rows"]}
    print("\n== %d processes (torch %s): time (us) and busbw (GB/s); ratios cecoll/gloo" % (world_size, res["torch"]))
    print("%-10s %7s | %10s %7s | %10s %7s | %10s %7s | %11s %11s | %11s %11s"
          % ("coll", "size", "gloo us", "busbw", "cecoll us", "busbw", "c-reg us", "busbw",
             "time c/g", "busbw c/g", "time reg/g", "busbw reg/g"))
    sizes = sorted({k[1] for k in rows})
    for coll in COLLS:
        for size in sizes:
            g, c, r = (rows.get((coll, size, i)) for i in ("gloo", "cecoll", "cecoll-reg"))
            if c is None and g is None:
                continue

            def cell(x):
                return ("%10.2f %7.3f" % (x["time_us"], x["busbw"])) if x else ("%10s %7s" % ("-", "-"))

            def ratio(x):
                if not x or not g:
                    return "%11s %11s" % ("-", "-")
                return "%10.2fx %10.2fx" % (x["time_us"] / g["time_us"], x["busbw"] / g["busbw"])

            wrong = sum(x["wrong"] for x in (g, c, r) if x)
            print("%-10s %7s | %s | %s | %s | %s | %s%s" % (coll, _fmt_size(size), cell(g), cell(c), cell(r),
                                                           ratio(c), ratio(r), "  WRONG %d" % wrong if wrong else ""))
    for note in res["notes"]:
        print("note: " + note)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m cecoll.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="2,4", help="world sizes, comma separated (default 2,4)")
    p.add_argument("--sizes", default="32,4M,64M",
                   help="message sizes, all ranks' chunks together, as cecoll-perf -b/-e (default 32,4M,64M)")
    p.add_argument("--colls", default=",".join(COLLS), help="collectives (default all four)")
    p.add_argument("--small-iters", type=int, default=1000, help="iterations for chunks up to 64 KiB (default 1000)")
    p.add_argument("--mid-iters", type=int, default=40, help="iterations for chunks up to 4 MiB (default 40)")
    p.add_argument("--big-iters", type=int, default=5, help="iterations for larger chunks (default 5)")
    p.add_argument("--json", help="write every row as JSON here")
    args = p.parse_args(argv)
    args.ranks_list = [int(x) for x in args.ranks.split(",") if x]
    args.sizes = [_parse_size(x) for x in args.sizes.split(",") if x]
    args.colls = [c for c in args.colls.split(",") if c]
    for c in args.colls:
        if c not in COLLS:
            p.error("unknown collective %r (choose from %s)" % (c, ", ".join(COLLS)))
    # Read by the library at its first call in each spawned rank: set before spawning.
    os.environ.setdefault("CECOLL_BACKEND", "host")
    print("# cecoll.bench: cecoll (%s) vs torch.distributed gloo, CPU tensors, uint8, root 0; "
          "iters: <=64 KiB %d, <=4 MiB %d, else %d"
          % (os.environ.get("CECOLL_LIBRARY", "default library path"), args.small_iters, args.mid_iters,
             args.big_iters))
    out = {}
    failed = False
    for ws in args.ranks_list:
        try:
            res = _run_world(ws, args)
        except Exception:
            traceback.print_exc()
            failed = True
            continue
        out[ws] = res
        _print_table(ws, res)
        sys.stdout.flush()
        if any(r["wrong"] for r in res["rows"]):
            failed = True
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(k): v for k, v in out.items()}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
