"""ProcessGroup: cecoll collectives on torch tensors (see the package docstring)."""

import ctypes
import datetime
import functools
import os
import time

import torch

from . import _lib
from ._lib import check


def _build_dtype_map():
    m = {
        torch.int8: _lib.ncclInt8,
        torch.uint8: _lib.ncclUint8,
        torch.bool: _lib.ncclUint8,  # one byte; collectives only copy
        torch.int32: _lib.ncclInt32,
        torch.int64: _lib.ncclInt64,
        torch.float16: _lib.ncclFloat16,
        torch.float32: _lib.ncclFloat32,
        torch.float64: _lib.ncclFloat64,
        torch.bfloat16: _lib.ncclBfloat16,
    }
    # float8 exists from torch 2.1 on.
    for name, code in (("float8_e4m3fn", _lib.ncclFloat8e4m3), ("float8_e5m2", _lib.ncclFloat8e5m2)):
        dt = getattr(torch, name, None)
        if dt is not None:
            m[dt] = code
    return m


_DTYPES = _build_dtype_map()


def nccl_dtype(dtype):
    """The ncclDataType_t of a torch dtype; ValueError when NCCL has none."""
    try:
        return _DTYPES[dtype]
    except KeyError:
        supported = ", ".join(sorted(str(d) for d in _DTYPES))
        raise ValueError("dtype %s has no ncclDataType_t (supported: %s)" % (dtype, supported)) from None


def get_unique_id():
    """A new bootstrap id (128 bytes). The calling process must outlive the
    communicators made from it."""
    uid = _lib.ncclUniqueId()
    check("ncclGetUniqueId", ctypes.byref(uid))
    return ctypes.string_at(ctypes.addressof(uid), _lib.NCCL_UNIQUE_ID_BYTES)


def share_id_via_file(path, rank, timeout=60.0):
    """Rank 0 makes an id and writes it to path (atomically); the other ranks
    wait for the file and read it. Use a fresh path per job: a file left by
    an earlier job would be read as this job's id. The file is its owner's
    alone (mode 0600): the id lets whoever reads it join the communicator."""
    if rank == 0:
        uid = get_unique_id()
        tmp = "%s.tmp.%d" % (path, os.getpid())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(uid)
        os.replace(tmp, path)
        return uid
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path, "rb") as f:
                data = f.read()
            if len(data) == _lib.NCCL_UNIQUE_ID_BYTES:
                return data
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("no cecoll unique id in %s after %.0f s" % (path, timeout))
        time.sleep(0.01)


def share_id_via_store(store, rank, world_size, key="cecoll/unique_id", timeout=60.0):
    """Shares an id through a torch.distributed Store (TCPStore, FileStore):
    rank 0 sets it, the others get it; returns only when every rank has read
    it, so rank 0 may drop a store it hosts right after."""
    if rank == 0:
        uid = get_unique_id()
        store.set(key, uid)
    else:
        uid = bytes(store.get(key))
    store.add(key + "/read", 1)
    if rank == 0:
        deadline = time.monotonic() + timeout
        while store.add(key + "/read", 0) < world_size:
            if time.monotonic() > deadline:
                raise TimeoutError("not every rank read the cecoll unique id within %.0f s" % timeout)
            time.sleep(0.005)
    if len(uid) != _lib.NCCL_UNIQUE_ID_BYTES:
        raise ValueError("store key %r holds %d bytes, not a unique id" % (key, len(uid)))
    return uid


def share_id_via_tcp_store(host, port, rank, world_size, timeout=60.0, key="cecoll/unique_id"):
    """share_id_via_store over a torch.distributed.TCPStore that rank 0 hosts
    on host:port (torch 1.13 and 2.x)."""
    from torch.distributed import TCPStore

    store = TCPStore(host, port, world_size, rank == 0, datetime.timedelta(seconds=timeout))
    return share_id_via_store(store, rank, world_size, key=key, timeout=timeout)


def _default_device():
    if _lib.backend() == "host":
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def _cecoll_device_index(device):
    """The cecoll device number of a torch device, checked against the backend."""
    be = _lib.backend()
    if be == "host":
        if device.type != "cpu":
            raise ValueError("cecoll runs on the host device backend: tensors must be CPU tensors, got %s" % device)
        return 0
    if device.type != "cuda":
        raise ValueError("cecoll runs on the %s backend: tensors must be CUDA tensors, got %s" % (be, device))
    return device.index if device.index is not None else torch.cuda.current_device()


class _HostMemory:
    """Base of the ctypes array types that own an ncclMemAlloc allocation on
    the host device; torch.frombuffer keeps the array alive as long as any
    tensor views it, and the last release frees the memory."""

    _cecoll_ptr = None

    def __del__(self):
        ptr, self._cecoll_ptr = self._cecoll_ptr, None
        if ptr:
            try:
                _lib.lib().ncclMemFree(ptr)
            except Exception:  # interpreter shutdown: the process is ending anyway
                pass


class _CudaMemory:
    """Owner of an ncclMemAlloc allocation on a GPU, exposed to torch through
    __cuda_array_interface__ (torch keeps the object alive with the tensor)."""

    def __init__(self, ptr, nbytes):
        self._cecoll_ptr = ptr
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 2,
            "strides": None,
        }

    def __del__(self):
        ptr, self._cecoll_ptr = self._cecoll_ptr, None
        if ptr:
            try:
                _lib.lib().ncclMemFree(ptr)
            except Exception:
                pass


def alloc_tensor(shape, dtype, device=None):
    """A tensor in memory from ncclMemAlloc, which register() can make a
    window of. The memory is freed with ncclMemFree when the last tensor
    viewing it is released. Contents are undefined."""
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    nccl_dtype(dtype)
    device = torch.device(device) if device is not None else _default_device()
    index = _cecoll_device_index(device)
    numel = 1
    for s in shape:
        if s < 0:
            raise ValueError("negative dimension in shape %s" % (shape,))
        numel *= s
    elsize = torch.empty((), dtype=dtype).element_size()
    nbytes = numel * elsize
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    check("cecollSetDevice", index)
    ptr = ctypes.c_void_p()
    check("ncclMemAlloc", ctypes.byref(ptr), nbytes)
    try:
        if device.type == "cpu":
            owner_type = type("_CecollHostMemory", (_HostMemory, ctypes.c_uint8 * nbytes), {})
            owner = owner_type.from_address(ptr.value)
            owner._cecoll_ptr = ptr.value
            flat = torch.frombuffer(owner, dtype=dtype, count=numel)
        else:
            owner = _CudaMemory(ptr.value, nbytes)
            flat = torch.as_tensor(owner, device=device).view(dtype)
    except BaseException:
        _lib.lib().ncclMemFree(ptr)
        raise
    return flat.view(shape)


class Window:
    """A registered window (from ProcessGroup.register). Keeps its tensor
    alive until deregistered."""

    def __init__(self, group, handle, tensor):
        self.group = group
        self.handle = handle
        self.tensor = tensor

    @property
    def registered(self):
        return self.handle is not None


def _collective(method):
    """A collective call of ProcessGroup. Its arguments are checked here,
    before any C call, because they are torch objects (shapes, dtypes,
    devices, lists of tensors) that the C API never sees. A refusal here on
    one rank of several would leave its peers' parts of the call waiting
    for this rank's next call, as a refusal in the library would; the
    library then fails the communicator on every rank (its peers learn it
    at once), and so does this: the communicator is aborted, which tells
    the peers, and the group refuses every later call."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (ValueError, TypeError) as e:
            self._refused(e)
            raise

    return call


class P2POp:
    """One send or receive of ProcessGroup.batch_isend_irecv: op "send" or
    "recv", its tensor and its peer rank."""

    def __init__(self, op, tensor, peer):
        self.op, self.tensor, self.peer = op, tensor, peer


class ProcessGroup:
    """One rank of a cecoll communicator of world_size ranks.

    unique_id: the 128 bytes of get_unique_id() made by one process and
    shared with every rank (share_id_via_file, share_id_via_tcp_store).
    device: the torch device of the tensors: CPU on the host device backend
    (default), a CUDA device on a GPU backend (default: the current one).
    """

    def __init__(self, rank, world_size, unique_id, device=None):
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != _lib.NCCL_UNIQUE_ID_BYTES:
            raise ValueError("unique_id must be the %d bytes of get_unique_id()" % _lib.NCCL_UNIQUE_ID_BYTES)
        if not 0 <= rank < world_size:
            raise ValueError("rank %d out of range for world_size %d" % (rank, world_size))
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.device = torch.device(device) if device is not None else _default_device()
        self._dev_index = _cecoll_device_index(self.device)
        self.host = self.device.type == "cpu"
        self._windows = []
        self._barrier_buf = None
        self._failure = None  # why the group refuses every call (_refused)
        uid = _lib.ncclUniqueId()
        ctypes.memmove(ctypes.addressof(uid), bytes(unique_id), _lib.NCCL_UNIQUE_ID_BYTES)
        check("cecollSetDevice", self._dev_index)
        comm = ctypes.c_void_p()
        check("ncclCommInitRank", ctypes.byref(comm), self.world_size, uid, self.rank)
        self._comm = comm
        self._stream = None
        if self.host:
            stream = ctypes.c_void_p()
            try:
                check("cecollStreamCreate", ctypes.byref(stream))
            except BaseException:
                _lib.lib().ncclCommDestroy(comm)
                raise
            self._stream = stream

    # ---- plumbing ----

    def _live(self):
        if self._failure is not None:
            raise RuntimeError("ProcessGroup failed: %s" % self._failure)
        if self._comm is None:
            raise RuntimeError("ProcessGroup used after destroy()")
        return self._comm

    def _refused(self, exc):
        """An argument error of a collective (see _collective): on several
        ranks, abort the communicator so that the peers fail at once."""
        if self.world_size == 1 or self._comm is None or self._failure is not None:
            return
        self._failure = "rank %d refused a collective's arguments (%s); the communicator was aborted" % (self.rank, exc)
        comm, self._comm = self._comm, None
        self._windows = []  # the abort freed them
        _lib.lib().ncclCommAbort(comm)

    def _call(self, function, *args):
        check(function, *args, comm=self._comm)

    def _stream_handle(self):
        if self.host:
            return self._stream
        return ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)

    def _finish(self):
        # The host device's streams run on their own workers: wait so that the
        # call is synchronous, as documented, and raise if the communicator
        # failed meanwhile (its data is then undefined).
        if self.host:
            self._call("cecollStreamSynchronize", self._stream)
            st = ctypes.c_int()
            self._call("ncclCommGetAsyncError", self._comm, ctypes.byref(st))
            if st.value != 0:
                raise _lib.CecollError(st.value, "ncclCommGetAsyncError", _lib.last_error(self._comm))

    def _tensor(self, t, what):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, got %s" % (what, type(t).__name__))
        if t.device.type != self.device.type or (
            not self.host and t.device.index is not None and t.device.index != self._dev_index
        ):
            raise ValueError("%s is on %s, the group runs on %s" % (what, t.device, self.device))
        if not t.is_contiguous():
            raise ValueError("%s must be contiguous" % what)
        return nccl_dtype(t.dtype)

    @staticmethod
    def _same_dtype(a, b, what_a, what_b):
        if a.dtype != b.dtype:
            raise ValueError("%s has dtype %s but %s has dtype %s" % (what_a, a.dtype, what_b, b.dtype))

    def _root(self, root, what):
        if not isinstance(root, int) or not 0 <= root < self.world_size:
            raise ValueError("%s %r out of range for world_size %d" % (what, root, self.world_size))

    # ---- collectives ----

    @_collective
    def all_gather_into_tensor(self, output_tensor, input_tensor):
        """Rank i's input lands at output[i*n:(i+1)*n] on every rank (n =
        input.numel()). In place when input is that slice of output."""
        comm = self._live()
        dt = self._tensor(input_tensor, "input_tensor")
        self._tensor(output_tensor, "output_tensor")
        self._same_dtype(input_tensor, output_tensor, "input_tensor", "output_tensor")
        n = input_tensor.numel()
        if output_tensor.numel() != n * self.world_size:
            raise ValueError(
                "output_tensor has %d elements, expected world_size * input_tensor.numel() = %d * %d = %d"
                % (output_tensor.numel(), self.world_size, n, self.world_size * n)
            )
        if n == 0:
            return
        self._call("ncclAllGather", input_tensor.data_ptr(), output_tensor.data_ptr(), n, dt, comm, self._stream_handle())
        self._finish()

    @_collective
    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None):
        """Block j of input goes to rank j, where it lands at block i (i the
        sender). Without splits the blocks are equal (numel/world_size
        elements; input may be output); with them, input_split_sizes[j]
        elements (along dim 0's rows, as torch counts them) go to rank j
        and output_split_sizes[i] come from rank i, as sends and receives
        in one group."""
        if output_split_sizes is not None or input_split_sizes is not None:
            return self._all_to_all_splits(output, input, output_split_sizes, input_split_sizes)
        comm = self._live()
        dt = self._tensor(input, "input")
        self._tensor(output, "output")
        self._same_dtype(input, output, "input", "output")
        if output.numel() != input.numel():
            raise ValueError("output has %d elements but input has %d" % (output.numel(), input.numel()))
        if input.numel() % self.world_size:
            raise ValueError(
                "input.numel() = %d is not divisible by world_size %d (only equal splits are supported)"
                % (input.numel(), self.world_size)
            )
        n = input.numel() // self.world_size
        if n == 0:
            return
        self._call("ncclAlltoAll", input.data_ptr(), output.data_ptr(), n, dt, comm, self._stream_handle())
        self._finish()

    def _all_to_all_splits(self, output, input, output_split_sizes, input_split_sizes):
        self._tensor(input, "input")
        self._tensor(output, "output")
        self._same_dtype(input, output, "input", "output")
        w = self.world_size
        row_in = input[0].numel() if input.dim() > 0 and input.shape[0] else 1
        row_out = output[0].numel() if output.dim() > 0 and output.shape[0] else 1
        ins = self._splits(input_split_sizes, input, "input_split_sizes")
        outs = self._splits(output_split_sizes, output, "output_split_sizes")
        flat_in, flat_out = input.reshape(-1), output.reshape(-1)
        ops, off_in, off_out = [], 0, 0
        for p in range(w):
            n_in, n_out = ins[p] * row_in, outs[p] * row_out
            ops.append(("send", flat_in[off_in:off_in + n_in], p))
            ops.append(("recv", flat_out[off_out:off_out + n_out], p))
            off_in, off_out = off_in + n_in, off_out + n_out
        self._p2p_group(ops)

    def _splits(self, sizes, t, what):
        rows = t.shape[0] if t.dim() > 0 else 1
        if sizes is None:
            if rows % self.world_size:
                raise ValueError("%s not given and %d rows are not divisible by world_size %d" % (what, rows, self.world_size))
            return [rows // self.world_size] * self.world_size
        sizes = [int(x) for x in sizes]
        if len(sizes) != self.world_size or any(x < 0 for x in sizes):
            raise ValueError("%s must be %d sizes >= 0, got %r" % (what, self.world_size, sizes))
        if sum(sizes) != rows:
            raise ValueError("%s sum to %d rows, the tensor has %d" % (what, sum(sizes), rows))
        return sizes

    # ---- point-to-point ----

    @_collective
    def send(self, tensor, dst):
        """Sends tensor to rank dst, whose recv() of as many elements of the
        dtype receives it. Returns once its copies are queued (GPU; host:
        done), which, alone, waits for dst's matching recv()."""
        self._p2p_group([("send", tensor, dst)])

    @_collective
    def recv(self, tensor, src):
        """Receives from rank src what its matching send() sent."""
        self._p2p_group([("recv", tensor, src)])

    @_collective
    def batch_isend_irecv(self, p2p_op_list):
        """Sends and receives that progress together, in one group:
        p2p_op_list holds P2POp(op, tensor, peer) with op "send" or "recv"
        (torch's dist.batch_isend_irecv). The k-th send to a peer matches
        its k-th receive from this rank; a rank may send to itself."""
        ops = []
        for i, o in enumerate(p2p_op_list):
            if not isinstance(o, P2POp):
                raise TypeError("p2p_op_list[%d] must be a P2POp, got %s" % (i, type(o).__name__))
            ops.append((o.op, o.tensor, o.peer))
        self._p2p_group(ops)

    def _p2p_group(self, ops):
        """Checks every (op, tensor, peer), then issues them in one group."""
        comm = self._live()
        checked = []
        for i, (op, t, peer) in enumerate(ops):
            what = "the %s's tensor (op %d)" % (op, i)
            if op not in ("send", "recv"):
                raise ValueError("op %d is %r, not 'send' or 'recv'" % (i, op))
            self._root(peer, "peer of op %d" % i)
            checked.append((op, t, peer, self._tensor(t, what)))
        if not checked:
            return
        stream = self._stream_handle()
        self._call("ncclGroupStart")
        err = None
        try:
            for op, t, peer, dt in checked:
                fn = "ncclSend" if op == "send" else "ncclRecv"
                self._call(fn, t.data_ptr() if t.numel() else None, t.numel(), dt, peer, comm, stream)
        except BaseException as e:
            err = e
        finally:
            end = _lib.lib().ncclGroupEnd()
        if err is not None:
            raise err
        if end != 0:
            raise _lib.CecollError(end, "ncclGroupEnd", _lib.last_error(self._comm))
        self._finish()

    @_collective
    def broadcast(self, tensor, src=0):
        """src's tensor lands in tensor on every rank (in place, as
        torch.distributed.broadcast)."""
        comm = self._live()
        self._root(src, "src")
        dt = self._tensor(tensor, "tensor")
        if tensor.numel() == 0:
            return
        p = tensor.data_ptr()
        self._call("ncclBroadcast", p, p, tensor.numel(), dt, src, comm, self._stream_handle())
        self._finish()

    @_collective
    def scatter(self, output_tensor, scatter_list_or_tensor=None, src=0):
        """src's i-th chunk lands in rank i's output_tensor. On src, pass a
        list of world_size tensors shaped like output_tensor, or one tensor of
        world_size * output_tensor.numel() elements (in place when
        output_tensor is src's chunk of it). Ignored on other ranks."""
        comm = self._live()
        self._root(src, "src")
        dt = self._tensor(output_tensor, "output_tensor")
        n = output_tensor.numel()
        send_ptr = None
        if self.rank == src:
            send = self._root_buffer(scatter_list_or_tensor, output_tensor, "scatter_list_or_tensor", pack=True)
            send_ptr = send.data_ptr()
        if n == 0:
            return
        self._call("ncclScatter", send_ptr, output_tensor.data_ptr(), n, dt, src, comm, self._stream_handle())
        self._finish()

    @_collective
    def gather(self, input_tensor, gather_list_or_tensor=None, dst=0):
        """Rank i's input_tensor lands in dst's i-th chunk. On dst, pass a list
        of world_size tensors shaped like input_tensor, or one tensor of
        world_size * input_tensor.numel() elements (in place when input_tensor
        is dst's chunk of it). Ignored on other ranks."""
        comm = self._live()
        self._root(dst, "dst")
        dt = self._tensor(input_tensor, "input_tensor")
        n = input_tensor.numel()
        recv = None
        if self.rank == dst:
            recv = self._root_buffer(gather_list_or_tensor, input_tensor, "gather_list_or_tensor", pack=False)
        if n == 0:
            return
        self._call(
            "ncclGather", input_tensor.data_ptr(), None if recv is None else recv.data_ptr(), n, dt, dst, comm,
            self._stream_handle(),
        )
        # Host: wait before unpacking. GPU: the copies queue after the gather
        # on the same (current) stream.
        self._finish()
        if recv is not None and isinstance(gather_list_or_tensor, (list, tuple)):
            for i, t in enumerate(gather_list_or_tensor):
                t.copy_(recv[i * n:(i + 1) * n].view(t.shape))

    def _root_buffer(self, lst_or_t, like, what, pack):
        """The root's contiguous buffer of world_size chunks shaped like `like`:
        the tensor itself, or (for a list) a packed copy (pack) or a fresh
        buffer to unpack from afterwards."""
        n = like.numel()
        if isinstance(lst_or_t, (list, tuple)):
            if len(lst_or_t) != self.world_size:
                raise ValueError("%s has %d tensors, expected world_size = %d" % (what, len(lst_or_t), self.world_size))
            for i, t in enumerate(lst_or_t):
                name = "%s[%d]" % (what, i)
                if not isinstance(t, torch.Tensor):
                    raise TypeError("%s must be a torch.Tensor" % name)
                self._same_dtype(t, like, name, "the local tensor")
                if t.numel() != n:
                    raise ValueError("%s has %d elements, expected %d" % (name, t.numel(), n))
                if t.device != like.device:
                    raise ValueError("%s is on %s, expected %s" % (name, t.device, like.device))
            if pack:
                return torch.cat([t.reshape(-1) for t in lst_or_t])
            return torch.empty(self.world_size * n, dtype=like.dtype, device=like.device)
        if lst_or_t is None:
            raise ValueError("%s is required on the root rank" % what)
        self._tensor(lst_or_t, what)
        self._same_dtype(lst_or_t, like, what, "the local tensor")
        if lst_or_t.numel() != self.world_size * n:
            raise ValueError(
                "%s has %d elements, expected world_size * %d = %d"
                % (what, lst_or_t.numel(), n, self.world_size * n)
            )
        return lst_or_t

    @_collective
    def barrier(self):
        """Returns once every rank has called barrier() (a one-element-per-rank
        AllGather, waited for on the host on every backend)."""
        if self._barrier_buf is None:
            self._barrier_buf = torch.zeros(self.world_size, dtype=torch.int32, device=self.device)
        buf = self._barrier_buf
        self.all_gather_into_tensor(buf, buf[self.rank:self.rank + 1])
        if not self.host:
            torch.cuda.current_stream(self.device).synchronize()

    # ---- windows ----

    def alloc_tensor(self, shape, dtype):
        """alloc_tensor() on this group's device."""
        return alloc_tensor(shape, dtype, device=self.device)

    @_collective
    def register(self, tensor, symmetric=True):
        """Collective (every rank calls it): makes a window of tensor, which
        must come from alloc_tensor() and start 4096-byte aligned. With
        symmetric (NCCL_WIN_COLL_SYMMETRIC), every rank promises to pass
        buffers at the same offsets of its window in collectives, and those
        run zero-copy; without it they are staged."""
        comm = self._live()
        self._tensor(tensor, "tensor")
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes == 0:
            raise ValueError("cannot register an empty tensor")
        if tensor.data_ptr() % _lib.NCCL_WIN_REQUIRED_ALIGNMENT:
            raise ValueError(
                "tensor.data_ptr() is not %d-byte aligned (use alloc_tensor())" % _lib.NCCL_WIN_REQUIRED_ALIGNMENT
            )
        win = ctypes.c_void_p()
        flags = _lib.NCCL_WIN_COLL_SYMMETRIC if symmetric else _lib.NCCL_WIN_DEFAULT
        self._call("ncclCommWindowRegister", comm, tensor.data_ptr(), nbytes, ctypes.byref(win), flags)
        w = Window(self, win, tensor)
        self._windows.append(w)
        return w

    def deregister(self, win):
        """Local: drops the window (its tensor stays usable, unregistered)."""
        comm = self._live()
        if not isinstance(win, Window) or win.group is not self:
            raise ValueError("not a window of this group")
        if win.handle is None:
            return
        handle, win.handle = win.handle, None
        self._windows.remove(win)
        win.tensor = None
        self._call("ncclCommWindowDeregister", comm, handle)

    # ---- life cycle ----

    def destroy(self):
        """Deregisters remaining windows and frees the communicator (local:
        never waits for peers). Idempotent; after a failure (_refused) only
        the stream is left to free."""
        errors = []
        if self._comm is not None:
            for w in list(self._windows):
                try:
                    self.deregister(w)
                except _lib.CecollError as e:
                    errors.append(e)
            comm, self._comm = self._comm, None
            for fn, arg in (("ncclCommFinalize", comm), ("ncclCommDestroy", comm)):
                try:
                    check(fn, arg)
                except _lib.CecollError as e:
                    errors.append(e)
        if self._stream is not None:
            stream, self._stream = self._stream, None
            try:
                check("cecollStreamDestroy", stream)
            except _lib.CecollError as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    @property
    def comm(self):
        """The ncclComm_t as an int (for direct calls through cecoll._lib)."""
        return self._live().value
