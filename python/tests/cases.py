"""The collective cases one spawned session runs on every rank.

Inputs are random and seeded per (case, rank), so each rank regenerates every
other rank's input and computes the expected result with torch alone, on CPU.
The tensors the collectives see are on the group's device (pg.device): CPU on
the host backend, the rank's CUDA device on a GPU backend.
Every rank runs the cases in the same order (collectives must match).
"""

import os
import traceback
import zlib

import torch

from harness import Recorder

OPS = ("all_gather", "all_to_all", "scatter", "gather")
DTYPES = {
    "float32": torch.float32,
    "int64": torch.int64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "uint8": torch.uint8,
}
# Shapes of one rank's part (AllGather input, Scatter output, Gather input,
# and AlltoAll's per-peer block). The last one is larger than a small
# staging window, so the staged path runs in rounds.
SHAPES = ((7,), (3, 5), (96, 130))
# out: out of place; inplace: NCCL's in-place form; list: a list of tensors
# at the root (scatter/gather); registered: ncclMemAlloc tensors registered
# as windows (zero-copy).
MODES = {
    "all_gather": ("out", "inplace", "registered"),
    "all_to_all": ("out", "inplace", "registered"),
    "scatter": ("out", "inplace", "list", "registered"),
    "gather": ("out", "inplace", "list", "registered"),
}
# Point-to-point cases (run_p2p): a ring of send/recv, batch_isend_irecv of
# every pair (self included), uneven all_to_all_single whose splits change.
P2P_CASES = (
    "p2p/send_recv_ring",
    "p2p/batch_all_pairs",
    "p2p/all_to_all_uneven",
    "bcast/every_root",
)
# The library's versions, read by a rank that loaded it (run_versions).
INFO_CASES = ("api/versions", "api/id_file_private")
ERROR_CASES = (
    "error/nccl_bad_datatype",
    "error/size_mismatch",
    "error/unsupported_dtype",
    "error/not_contiguous",
    "error/root_out_of_range",
    "error/scatter_root_needs_buffer",
    "error/register_unaligned",
    "error/group_still_works",
    "alloc/freed_on_release",
    "error/refusal_fails_every_rank",
)


def shape_name(shape):
    return "x".join(str(s) for s in shape)


def collective_cases():
    """[(name, op, dtype_name, shape, mode)] in run order."""
    cases = []
    for op in OPS:
        for dname in DTYPES:
            for shape in SHAPES:
                for mode in MODES[op]:
                    cases.append(("%s/%s/%s/%s" % (op, dname, shape_name(shape), mode), op, dname, shape, mode))
    return cases


def case_names():
    return [c[0] for c in collective_cases()] + list(P2P_CASES) + list(INFO_CASES) + list(ERROR_CASES)


def rand(name, rank, shape, dtype):
    """Rank `rank`'s input of case `name` (any rank can make it)."""
    g = torch.Generator().manual_seed(zlib.crc32(("%s#%d" % (name, rank)).encode()))
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    hi = 256 if dtype == torch.uint8 else 1 << 40
    return torch.randint(0, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def same(a, b):
    """Bitwise equality (copies must be exact), compared on CPU copies."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.cpu(), b.cpu()
    if a.element_size() == 2:
        return torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))
    return torch.equal(a, b)


def _buf(pg, mode, shape, dtype):
    if mode == "registered":
        return pg.alloc_tensor(shape, dtype)
    return torch.empty(shape, dtype=dtype, device=pg.device)


def sync(pg):
    """Waits for the work queued on torch's current stream: GPU collectives
    are asynchronous (on the host backend they return finished)."""
    if pg.device.type == "cuda":
        torch.cuda.synchronize(pg.device)


def run_collective(pg, name, op, dtype, shape, mode, case_index):
    """Runs one case; returns None or a failure text."""
    r, w = pg.rank, pg.world_size
    root = case_index % w
    n = 1
    for s in shape:
        n *= s
    big = (w * shape[0],) + tuple(shape[1:])  # world_size parts along dim 0
    wins = []

    def reg(t):
        if mode == "registered":
            wins.append(pg.register(t))
        return t

    try:
        if op == "all_gather":
            mine = rand(name, r, shape, dtype)
            expect = torch.cat([rand(name, j, shape, dtype) for j in range(w)])
            out = reg(_buf(pg, mode, big, dtype))
            if mode == "inplace":
                inp = out[r * shape[0]:(r + 1) * shape[0]]
                inp.copy_(mine)
            else:
                inp = reg(_buf(pg, mode, shape, dtype))
                inp.copy_(mine)
            pg.all_gather_into_tensor(out, inp)
            sync(pg)
            if not same(out, expect):
                return "output differs from torch.cat of every rank's input"
        elif op == "all_to_all":
            mine = rand(name, r, big, dtype)
            expect = torch.cat([rand(name, j, big, dtype)[r * shape[0]:(r + 1) * shape[0]] for j in range(w)])
            inp = reg(_buf(pg, mode, big, dtype))
            inp.copy_(mine)
            out = inp if mode == "inplace" else reg(_buf(pg, mode, big, dtype))
            pg.all_to_all_single(out, inp)
            sync(pg)
            if not same(out, expect):
                return "output differs from the expected block transpose"
        elif op == "scatter":
            full = rand(name, root, big, dtype)
            expect = full[r * shape[0]:(r + 1) * shape[0]]
            # Every rank allocates and registers the same buffers (registration
            # is collective); only the root's send buffer carries data.
            send = reg(_buf(pg, mode, big, dtype))
            if r == root:
                send.copy_(full)
            if mode == "inplace" and r == root:
                out = send[r * shape[0]:(r + 1) * shape[0]]
            else:
                out = reg(_buf(pg, mode, shape, dtype))
                out.fill_(0)
            if mode == "list":
                arg = list(full.to(pg.device).chunk(w)) if r == root else None
            else:
                arg = send if r == root else None
            pg.scatter(out, arg, src=root)
            sync(pg)
            if not same(out, expect):
                return "rank %d's chunk differs from the root's (root %d)" % (r, root)
            if r == root and mode != "list" and not same(send, full):
                return "the root's send tensor changed"
        elif op == "gather":
            mine = rand(name, r, shape, dtype)
            expect = torch.cat([rand(name, j, shape, dtype) for j in range(w)])
            recv = reg(_buf(pg, mode, big, dtype))
            if mode == "inplace" and r == root:
                inp = recv[r * shape[0]:(r + 1) * shape[0]]
            else:
                inp = reg(_buf(pg, mode, shape, dtype))
            inp.copy_(mine)
            if mode == "list":
                arg = [torch.zeros(shape, dtype=dtype, device=pg.device) for _ in range(w)] if r == root else None
            else:
                arg = recv if r == root else None
            pg.gather(inp, arg, dst=root)
            sync(pg)
            if r == root:
                got = torch.cat(arg) if mode == "list" else recv
                if not same(got, expect):
                    return "the root's gathered tensor differs from torch.cat of every rank's input (root %d)" % root
            if not same(inp, mine):
                return "the input tensor changed"
        return None
    finally:
        for win in wins:
            pg.deregister(win)


def run_p2p(pg, name):
    """One point-to-point case; returns None or a failure text."""
    import cecoll

    r, w = pg.rank, pg.world_size
    dev = pg.device

    def data(src, dst, n, k=0):
        return rand("%s/%d/%d/%d" % (name, src, dst, k), 0, (n,), torch.float32)

    if name == "p2p/send_recv_ring":
        nxt, prv = (r + 1) % w, (r - 1) % w
        for n in (5, 40000):
            y = torch.empty(n, device=dev)
            if r % 2 == 0:  # blocking calls: even ranks send first
                pg.send(data(r, nxt, n).to(dev), nxt)
                pg.recv(y, prv)
            else:
                pg.recv(y, prv)
                pg.send(data(r, nxt, n).to(dev), nxt)
            sync(pg)
            if not same(y, data(prv, r, n)):
                return "ring of %d floats: wrong data from rank %d" % (n, prv)
        return None
    if name == "p2p/batch_all_pairs":
        ys, ops = {}, []
        for p in range(w):
            ops.append(cecoll.P2POp("send", data(r, p, 1000 + 37 * p).to(dev), p))
        for p in range(w):
            ys[p] = torch.empty(1000 + 37 * r, device=dev)
            ops.append(cecoll.P2POp("recv", ys[p], p))
        pg.batch_isend_irecv(ops)
        sync(pg)
        for p in range(w):
            if not same(ys[p], data(p, r, 1000 + 37 * r)):
                return "batch: wrong data from rank %d" % p
        return None
    if name == "p2p/all_to_all_uneven":
        for k in range(3):
            cnt = lambda s, d: (s + 2 * d + k) % 4 * 300  # zero for some pairs
            ins = [cnt(r, d) for d in range(w)]
            outs = [cnt(s, r) for s in range(w)]
            x = torch.cat([data(r, d, ins[d], k) for d in range(w)]).to(dev)
            y = torch.empty(sum(outs), device=dev)
            pg.all_to_all_single(y, x, output_split_sizes=outs, input_split_sizes=ins)
            sync(pg)
            want = torch.cat([data(s, r, outs[s], k) for s in range(w)])
            if not same(y, want):
                return "call %d: wrong data" % k
        return None
    if name == "bcast/every_root":
        for src in range(w):
            for n in (3, 50000):
                y = data(src, 0, n).to(dev) if r == src else torch.full((n,), -1.0, device=dev)
                pg.broadcast(y, src=src)
                sync(pg)
                if not same(y, data(src, 0, n)):
                    return "broadcast of %d floats from rank %d: wrong data" % (n, src)
        return None
    return "unknown case %s" % name


def run_errors(pg, rec):
    """The refusals, on pg, a group of one rank (on several, every refusal
    fails the group: run_refusal)."""
    import ctypes

    import cecoll
    from cecoll import _lib

    r, w, dev = pg.rank, pg.world_size, pg.device

    def expect_raise(case, exc_type, fn, check=None):
        try:
            fn()
        except exc_type as e:
            msg = check(e) if check else None
            rec.record(case, msg)
            return
        except Exception as e:
            rec.record(case, "raised %s: %s, expected %s" % (type(e).__name__, e, exc_type.__name__))
            return
        rec.record(case, "no exception, expected %s" % exc_type.__name__)

    send = torch.zeros(4, dtype=torch.float32, device=dev)
    recv = torch.zeros(4 * w, dtype=torch.float32, device=dev)

    def bad_datatype():
        # Past the Python checks: the library itself must refuse the datatype.
        _lib.check(
            "ncclAllGather", send.data_ptr(), recv.data_ptr(), 4, 99, ctypes.c_void_p(pg.comm),
            pg._stream_handle(), comm=ctypes.c_void_p(pg.comm),
        )

    def check_nccl_error(e):
        if e.name != "ncclInvalidArgument" or e.result != 4:
            return "got %s (%d), expected ncclInvalidArgument (4)" % (e.name, e.result)
        if not e.last_error:
            return "empty ncclGetLastError text"
        if "ncclInvalidArgument" not in str(e):
            return "the message lacks the NCCL name: %s" % e
        return None

    expect_raise("error/nccl_bad_datatype", cecoll.CecollError, bad_datatype, check_nccl_error)
    expect_raise(
        "error/size_mismatch", ValueError, lambda: pg.all_gather_into_tensor(torch.zeros(4 * w + 1, device=dev), send),
        lambda e: None if "expected world_size" in str(e) else "unclear message: %s" % e,
    )
    expect_raise(
        "error/unsupported_dtype", ValueError,
        lambda: pg.all_to_all_single(
            torch.zeros(w, dtype=torch.complex64, device=dev), torch.zeros(w, dtype=torch.complex64, device=dev)
        ),
        lambda e: None if "complex64" in str(e) else "unclear message: %s" % e,
    )
    expect_raise(
        "error/not_contiguous", ValueError,
        lambda: pg.all_gather_into_tensor(recv, torch.zeros(4, 2, device=dev)[:, 0]),
        lambda e: None if "contiguous" in str(e) else "unclear message: %s" % e,
    )
    expect_raise("error/root_out_of_range", ValueError, lambda: pg.gather(send, recv, dst=w))
    expect_raise("error/scatter_root_needs_buffer", ValueError, lambda: pg.scatter(send, None, src=r))
    t = pg.alloc_tensor((2048,), torch.uint8)
    expect_raise("error/register_unaligned", ValueError, lambda: pg.register(t[1:]))

    # On one rank nothing above misleads a peer: the group still works.
    try:
        mine = torch.full((3,), r, dtype=torch.int64, device=dev)
        out = torch.empty(3 * w, dtype=torch.int64, device=dev)
        pg.all_gather_into_tensor(out, mine)
        sync(pg)
        ok = same(out, torch.arange(w, dtype=torch.int64).repeat_interleave(3))
        rec.record("error/group_still_works", None if ok else "wrong AllGather result after the errors")
    except Exception:
        rec.record("error/group_still_works", traceback.format_exc())

    rec.record("alloc/freed_on_release", check_alloc_release(pg))


def run_refusal(pg, rec):
    """Rank 0's all_gather_into_tensor is refused (a wrong output size)
    while the other ranks issue theirs: every rank fails at once, and every
    later call is refused (no rank pairs it with another's)."""
    import ctypes
    import time

    import cecoll
    from cecoll import _lib

    r, w, dev = pg.rank, pg.world_size, pg.device
    mine = torch.full((3,), r, dtype=torch.int64, device=dev)
    out = torch.empty(3 * w + (1 if r == 0 else 0), dtype=torch.int64, device=dev)
    comm = pg.comm
    try:
        pg.all_gather_into_tensor(out, mine)
        if r == 0:
            return "rank 0's wrong output size was accepted"
    except ValueError:
        if r != 0:
            return "rank %d's call raised ValueError" % r
    except cecoll.CecollError:
        pass  # a peer: its call saw the failure (host device: synchronous)
    if r != 0:
        st = ctypes.c_int()
        deadline = time.monotonic() + 10  # promptly: CECOLL_TIMEOUT is 600 s
        while time.monotonic() < deadline:
            _lib.check("ncclCommGetAsyncError", ctypes.c_void_p(comm), ctypes.byref(st))
            if st.value != 0:
                break
            time.sleep(0.01)
        if st.value == 0:
            return "rank %d has no asynchronous error 10 s after rank 0's refusal" % r
    try:
        pg.all_gather_into_tensor(torch.empty(3 * w, dtype=torch.int64, device=dev), mine)
    except (cecoll.CecollError, RuntimeError):
        return None
    return "rank %d's call after the refusal was accepted" % r


def _live_allocs(pg):
    """ncclMemAlloc allocations alive in this process: memfd mappings on the
    host device; on a GPU, where this process cannot see the mappings, the
    binding's owner objects (their release calls ncclMemFree)."""
    import gc

    if pg.device.type == "cpu":
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if "memfd:" in line)
    from cecoll import group

    return sum(1 for o in gc.get_objects() if isinstance(o, group._CudaMemory))


def check_alloc_release(pg):
    """ncclMemAlloc memory lives while any view of the tensor does and is
    freed by ncclMemFree after."""
    import gc

    base = _live_allocs(pg)
    t = pg.alloc_tensor((3, 1000), torch.float32)
    if _live_allocs(pg) != base + 1:
        return "alloc_tensor made %d allocations, expected 1" % (_live_allocs(pg) - base)
    view = t[1]
    view.fill_(7)
    del t
    gc.collect()
    if _live_allocs(pg) != base + 1:
        return "the memory was freed while a view of it was alive"
    if not bool((view == 7).all()):
        return "the view's contents changed"
    del view
    gc.collect()
    if _live_allocs(pg) != base:
        return "the memory was not freed after the last view went away"
    return None


def repo_version():
    """The VERSION file of the repository these tests are part of."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "VERSION")) as f:
        return f.read().strip()


def run_versions():
    """cecoll.version() is cecoll's own version, the VERSION file's, and
    cecoll.nccl_version() the NCCL API's (nccl.h: 2.28.x), apart."""
    import cecoll

    v, api = cecoll.version(), cecoll.nccl_version()
    if v != repo_version():
        return "cecoll.version() = %r, VERSION holds %r" % (v, repo_version())
    if v != cecoll.__version__:
        return "cecoll.version() = %r, the package's __version__ = %r" % (v, cecoll.__version__)
    if not isinstance(api, int) or not 22800 <= api < 22900:
        return "cecoll.nccl_version() = %r, expected NCCL 2.28's code (22800..22899)" % (api,)
    return None


def host_barrier(outdir, name, rank, world_size, timeout=120):
    """Waits until every rank has reached this point, through files in outdir
    (no communicator involved)."""
    import time

    open(os.path.join(outdir, "%s.%d" % (name, rank)), "w").close()
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(os.path.join(outdir, "%s.%d" % (name, r))) for r in range(world_size)):
        if time.monotonic() > deadline:
            raise RuntimeError("host barrier %s: not every rank arrived in %d s" % (name, timeout))
        time.sleep(0.005)


def session(rank, world_size, outdir, share):
    """One rank of a test session: makes the group, runs every case."""
    import cecoll

    if share[0] == "file":
        uid = cecoll.share_id_via_file(share[1], rank)
    else:
        uid = cecoll.share_id_via_tcp_store("127.0.0.1", share[1], rank, world_size)
    rec = Recorder(outdir, rank)
    pg = cecoll.ProcessGroup(rank, world_size, uid)
    try:
        for i, (name, op, dname, shape, mode) in enumerate(collective_cases()):
            try:
                err = run_collective(pg, name, op, DTYPES[dname], shape, mode, i)
            except Exception:
                err = traceback.format_exc()
            rec.record(name, err)
        for name in P2P_CASES:
            try:
                err = run_p2p(pg, name)
            except Exception:
                err = traceback.format_exc()
            rec.record(name, err)
        try:
            err = run_versions()
        except Exception:
            err = traceback.format_exc()
        rec.record("api/versions", err)
        err = None
        if share[0] == "file" and os.stat(share[1]).st_mode & 0o777 != 0o600:
            err = "share_id_via_file left the id readable by others: mode %o" % (os.stat(share[1]).st_mode & 0o777)
        rec.record("api/id_file_private", err)
        with cecoll.ProcessGroup(0, 1, cecoll.get_unique_id()) as solo:
            run_errors(solo, rec)
        # Every rank is past its collectives, error checks included, before
        # rank 0's refusal: the host barrier waits for the device one's checks,
        # which would otherwise see rank 0's abort.
        pg.barrier()
        host_barrier(outdir, "before-refusal", rank, world_size)
        try:
            err = run_refusal(pg, rec)
        except Exception:
            err = traceback.format_exc()
        rec.record("error/refusal_fails_every_rank", err)
    finally:
        # Rank 0 made the id; the group failed on every rank (run_refusal),
        # so nothing waits for its bootstrap any more.
        pg.destroy()
        rec.close()


def hanging(rank, world_size):
    import time

    if rank == 0:
        time.sleep(600)


def failing(rank, world_size):
    if rank == world_size - 1:
        raise RuntimeError("deliberate failure of rank %d" % rank)
