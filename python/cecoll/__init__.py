"""cecoll from Python: copy-engine collectives on torch tensors.

A ctypes binding of libcecoll.so (NCCL 2.28's nccl.h plus nccl_ce.h) and a
small torch.distributed-like API on top of it:

    import cecoll
    uid = cecoll.share_id_via_file("/tmp/job-42.id", rank)   # or share_id_via_tcp_store
    pg = cecoll.ProcessGroup(rank, world_size, uid)
    pg.all_gather_into_tensor(out, inp)
    pg.all_to_all_single(out, inp)
    pg.scatter(out, scatter_list_or_tensor, src=0)
    pg.gather(inp, gather_list_or_tensor, dst=0)
    pg.barrier()
    pg.destroy()

Finding the library: $CECOLL_LIBRARY when set (and only it: the file, or
libcecoll.so in it when it is a folder such as build/), else
libcecoll.so next to the package, else the repository's build/ folder.

Versions: cecoll.version() is cecoll's own ("0.1.0"), read from the loaded
library; cecoll.nccl_version() the NCCL API version the library reports
(ncclGetVersion: 22809 for NCCL 2.28.9; in forward mode the real library's);
cecoll.__version__ this package's, which needs no library.

Errors: every ncclResult_t other than ncclSuccess raises CecollError, with
.result (int), .name (e.g. "ncclInvalidArgument") and .last_error (the
ncclGetLastError text). Bad arguments caught in Python (wrong dtype, size,
device, non-contiguous tensor, root out of range) raise ValueError or
TypeError before any C call.

Devices:
- On the host device backend (CECOLL_BACKEND=host, or auto on a machine
  without a GPU), CPU memory is device memory: tensors are CPU tensors and
  their data_ptr() is the device pointer. Each ProcessGroup owns a cecoll
  stream and synchronizes it before a call returns: on the host device every
  collective is synchronous.
- On a GPU backend, tensors are CUDA tensors of the group's device and the
  collectives are queued on torch.cuda.current_stream() (asynchronous, as
  with torch.distributed's NCCL backend).
- Windows: alloc_tensor() allocates through ncclMemAlloc; register() makes a
  window of such a tensor (collective: every rank calls it), so collectives
  on it run zero-copy between processes. Other tensors work too, staged
  through cecoll's internal windows.

Environment: the library's CECOLL_* variables (CECOLL_BACKEND, CECOLL_DEBUG,
CECOLL_TIMEOUT, ...) are read once, at the first call into the library: set
them (os.environ, or in the parent before spawning workers) before that call.
Changes made after it are not seen.

Process rules (the library carries a Go runtime):
- never fork() a process after it loaded the library (importing this package
  does not load it; the first call that needs it does). Start workers with
  torch.multiprocessing / multiprocessing using the 'spawn' start method
  (torch.multiprocessing.spawn does), never 'fork' (Linux's default for
  multiprocessing.Process) or 'forkserver' started after loading;
- one Go runtime per process: do not load another Go shared library;
- the process that called get_unique_id() relays the communicator's host-side
  exchanges, so it must outlive the communicators made from its id (call
  barrier() before destroy() and let that process exit last).
"""

from ._lib import PACKAGE_VERSION as __version__
from ._lib import CecollError, NCCL_UNIQUE_ID_BYTES, backend, library_path, nccl_version, version
from .group import (
    P2POp,
    ProcessGroup,
    Window,
    alloc_tensor,
    get_unique_id,
    nccl_dtype,
    share_id_via_file,
    share_id_via_store,
    share_id_via_tcp_store,
)

__all__ = [
    "CecollError",
    "NCCL_UNIQUE_ID_BYTES",
    "P2POp",
    "ProcessGroup",
    "Window",
    "alloc_tensor",
    "backend",
    "get_unique_id",
    "library_path",
    "nccl_dtype",
    "nccl_version",
    "share_id_via_file",
    "share_id_via_store",
    "share_id_via_tcp_store",
    "version",
]
