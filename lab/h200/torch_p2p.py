"""torch.distributed's point-to-point traffic through cecoll, checked op by op.

Run by lab/h200/p2p.sh (torch stage): WORLD processes on GPU 0 (under MPS),
cecoll preloaded in front of torch's NCCL. NCCL refuses that layout
("Duplicate GPU"), so the communicators are cecoll's alone (CE-only): what
runs, runs on copy engines; reductions (barrier among them) are refused,
so this probe calls none. Each op's result is checked against the values
it must hold and recorded (ok, error text, seconds) as JSON, one file per
rank: python3 torch_p2p.py WORLD OUT%d.json
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def run(results, name, fn):
    t = time.time()
    try:
        ok = fn()
        torch.cuda.synchronize()
        results.append({"op": name, "ok": bool(ok), "s": round(time.time() - t, 4)})
    except Exception as e:
        results.append({"op": name, "ok": False, "error": str(e)[-2000:], "s": round(time.time() - t, 4)})


def ops(rank, world, dev, results):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    big = 16 << 20  # floats: 64 MiB, several staged pieces

    def val(src, dst, n, k=0):
        return torch.arange(n, device=dev, dtype=torch.float32) + (src * 1000 + dst * 10 + k)

    def send_recv():  # even ranks send first: the one safe order of blocking calls
        ok = True
        for n in (1024, big):
            x, y = val(rank, nxt, n), torch.empty(n, device=dev)
            if rank % 2 == 0:
                dist.send(x, nxt)
                dist.recv(y, prv)
            else:
                dist.recv(y, prv)
                dist.send(x, nxt)
            ok &= bool(torch.equal(y, val(prv, rank, n)))
        return ok

    def batch_isend_irecv():
        ok = True
        for n in (1024, big):
            x, y = val(rank, nxt, n), torch.empty(n, device=dev)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.irecv, y, prv)])
            for r in reqs:
                r.wait()
            ok &= bool(torch.equal(y, val(prv, rank, n)))
        return ok

    def scatter():
        n = 4096
        y = torch.empty(n, device=dev)
        xs = [val(0, r, n) for r in range(world)] if rank == 0 else None
        dist.scatter(y, xs, src=0)
        return bool(torch.equal(y, val(0, rank, n)))

    def gather():
        n = 4096
        x = val(rank, 0, n)
        ys = [torch.empty(n, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(x, ys, dst=0)
        return rank != 0 or all(bool(torch.equal(ys[r], val(r, 0, n))) for r in range(world))

    def all_to_all_list():
        n = 2048
        xs = [val(rank, p, n) for p in range(world)]
        ys = [torch.empty(n, device=dev) for _ in range(world)]
        dist.all_to_all(ys, xs)
        return all(bool(torch.equal(ys[p], val(p, rank, n))) for p in range(world))

    def all_to_all_uneven():
        # Rank s sends (s + d + 1) * 1000 floats to rank d; the splits change every call.
        ok = True
        for k in range(3):
            cnt = lambda s, d: (s + d + 1 + k) * 1000
            ins = [cnt(rank, d) for d in range(world)]
            outs = [cnt(s, rank) for s in range(world)]
            x = torch.cat([val(rank, d, ins[d], k) for d in range(world)])
            y = torch.empty(sum(outs), device=dev)
            dist.all_to_all_single(y, x, output_split_sizes=outs, input_split_sizes=ins)
            off = 0
            for s in range(world):
                ok &= bool(torch.equal(y[off:off + outs[s]], val(s, rank, outs[s], k)))
                off += outs[s]
        return ok

    def broadcast():
        x = val(0, 0, 4096) if rank == 0 else torch.empty(4096, device=dev)
        dist.broadcast(x, src=0)
        return bool(torch.equal(x, val(0, 0, 4096)))

    def pipeline():
        # Megatron-LM's 1F1B over `world` stages, 8 micro-batches: each stage
        # adds its rank + 1 forward and doubles the gradient backward; the
        # steady state sends and receives in one batch_isend_irecv
        # (send_forward_recv_backward, send_backward_recv_forward), as it
        # must: a lone blocking send each way would wait for the other.
        mbs, n, ok = 8, 1 << 16, True
        first, last = rank == 0, rank == world - 1

        def p2p(*pairs):
            ops = [dist.P2POp(f, t, p) for f, t, p in pairs]
            if ops:
                for r in dist.batch_isend_irecv(ops):
                    r.wait()

        def recv_forward(i):
            if first:
                return torch.full((n,), float(i), device=dev)
            x = torch.empty(n, device=dev)
            p2p((dist.irecv, x, prv))
            return x

        def forward(x, i):
            nonlocal ok
            y = x + (rank + 1)
            if last:
                ok &= bool((y == i + world * (world + 1) / 2).all())
            return y

        def backward(g):
            nonlocal ok
            g2 = g * 2
            if first:
                ok &= bool((g2 == 2.0 ** world).all())
            return g2

        warm = min(world - rank - 1, mbs)
        steady = mbs - warm
        for i in range(warm):
            y = forward(recv_forward(i), i)
            p2p((dist.isend, y, nxt))
        x = recv_forward(warm) if steady else None
        for j in range(steady):
            i = warm + j
            y = forward(x, i)
            if last:
                g = torch.ones(n, device=dev)
            else:
                g = torch.empty(n, device=dev)
                p2p((dist.isend, y, nxt), (dist.irecv, g, nxt))
            g2 = backward(g)
            if j == steady - 1:
                if not first:
                    p2p((dist.isend, g2, prv))
            elif first:
                x = torch.full((n,), float(i + 1), device=dev)
            else:
                x = torch.empty(n, device=dev)
                p2p((dist.isend, g2, prv), (dist.irecv, x, prv))
        for _ in range(warm):
            g = torch.empty(n, device=dev)
            p2p((dist.irecv, g, nxt))
            g2 = backward(g)
            if not first:
                p2p((dist.isend, g2, prv))
        return ok

    run(results, "send_recv", send_recv)
    run(results, "batch_isend_irecv", batch_isend_irecv)
    run(results, "scatter", scatter)
    run(results, "gather", gather)
    run(results, "all_to_all_list", all_to_all_list)
    run(results, "all_to_all_single_uneven", all_to_all_uneven)
    if world >= 2:
        run(results, "pipeline_1f1b", pipeline)
    run(results, "broadcast", broadcast)


def worker(rank, world, outfile):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29571 + world))
    info = {"rank": rank, "world": world, "torch": torch.__version__}
    results = []
    try:
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
        info["nccl_version"] = list(torch.cuda.nccl.version())
        ops(rank, world, dev, results)
        dist.destroy_process_group()
    except Exception as e:
        info["fatal"] = str(e)[-3000:]
    info["results"] = results
    with open(outfile % rank, "w") as f:
        json.dump(info, f, indent=1)


if __name__ == "__main__":
    import torch.multiprocessing as mp

    world, out = int(sys.argv[1]), sys.argv[2]
    mp.spawn(worker, args=(world, out), nprocs=world, join=True)
