"""lab/h200/cuda_smoke.py: a smoke test of python/cecoll on the backend's tensors (CUDA on a GPU
backend, CPU on the host device): every rank a spawned process (on GPU 0);
AllGather, AlltoAll, Scatter, Gather (7 and 1M floats), and an in-place
AlltoAll on a registered window."""
import os
import sys
import tempfile

import torch
import torch.multiprocessing as mp

import cecoll


def val(rank, n):
    return torch.arange(n, dtype=torch.float32) + rank * 100000


def worker(rank, ws, idpath):
    if os.environ.get("CECOLL_BACKEND", "") != "host":
        torch.cuda.set_device(0)
    pg = cecoll.ProcessGroup(rank, ws, cecoll.share_id_via_file(idpath, rank))
    dev = pg.device

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    bad = []
    for n in (7, 1 << 20):
        out = torch.empty(ws * n, device=dev)
        pg.all_gather_into_tensor(out, val(rank, n).to(dev))
        sync()
        if not torch.equal(out.cpu(), torch.cat([val(r, n) for r in range(ws)])):
            bad.append("all_gather/%d" % n)
        a2a = torch.cat([val(r, ws * n)[rank * n:(rank + 1) * n] for r in range(ws)])
        out = torch.empty(ws * n, device=dev)
        pg.all_to_all_single(out, val(rank, ws * n).to(dev))
        sync()
        if not torch.equal(out.cpu(), a2a):
            bad.append("all_to_all/%d" % n)
        full = torch.cat([val(r, n) for r in range(ws)]).to(dev) if rank == 0 else None
        out = torch.empty(n, device=dev)
        pg.scatter(out, full, src=0)
        sync()
        if not torch.equal(out.cpu(), val(rank, n)):
            bad.append("scatter/%d" % n)
        g = torch.empty(ws * n, device=dev) if rank == 0 else None
        pg.gather(val(rank, n).to(dev), g, dst=0)
        sync()
        if rank == 0 and not torch.equal(g.cpu(), torch.cat([val(r, n) for r in range(ws)])):
            bad.append("gather/%d" % n)
        buf = pg.alloc_tensor((ws * n,), torch.float32)
        buf.copy_(val(rank, ws * n).to(dev))
        win = pg.register(buf)
        pg.all_to_all_single(buf, buf)
        sync()
        if not torch.equal(buf.cpu(), a2a):
            bad.append("registered_all_to_all/%d" % n)
        pg.deregister(win)
    pg.barrier()
    pg.destroy()
    print("CUDA_SMOKE rank %d of %d on %s: %s" % (rank, ws, dev, "ok" if not bad else "FAIL " + ",".join(bad)), flush=True)
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    for ws in (2, 4):
        d = tempfile.mkdtemp()
        mp.spawn(worker, args=(ws, os.path.join(d, "id")), nprocs=ws, join=True)
        print("CUDA_SMOKE PASS world_size=%d" % ws, flush=True)
