// Package host is the host backend of the device runtime: a virtual GPU
// node in pure Go that implements hip.Runtime faithfully enough that the
// copy-engine protocol runs on it unchanged, and its bugs show. It is the
// embedded default backend and the base of every CI test of the engine.
//
// # Devices
//
// CECOLL_HOST_DEVICES virtual devices (default 8) share the process's
// memory; several ranks may use one device. Device numbers are
// process-local and DeviceCanAccessPeer is always true. The current device
// is per OS thread (keyed by the thread id, default 0), as in CUDA.
//
// # Memory
//
// MemAlloc creates a memfd, sizes it to whole pages, seals its size
// (internal/memfd) and maps it shared; the allocation remembers the
// current device. MemExport returns a dup of the memfd; MemImport maps
// such an fd (another process's allocation, marked imported; MemFree
// unmaps it) once it has checked that it is a memfd sealed against
// shrinking and long enough. MemGetAddressRange knows these two kinds
// (ErrNotFound for other addresses). Inside a process every host address is
// device memory: copies and memops accept malloc'd or Go buffers (pinned by
// the caller), but only MemAlloc'd memory crosses processes. Memset and
// Memcpy are synchronous, any direction, ordered after the current
// device's legacy NULL stream. PointerInfo reports the allocations (and
// multicast ranges) as PtrDevice with their base and size, any other
// readable address as PtrDevice with Base and Size 0, and an address that
// cannot be read as PtrUnmapped (a fault-guarded read of its word: cheaper
// than mincore(2), which passes PROT_NONE pages; docs/performance.md,
// "Pointer checks").
//
// # Streams
//
// A stream is a FIFO of fixed-size ops in a ring that grows by doubling
// (enqueueing allocates nothing in steady state), run by its own worker
// goroutine; different streams run concurrently. The queue is bounded like
// a GPU's: an enqueue that would leave more than 4096 ops pending blocks
// until the worker has taken enough for it to fit (a single larger call
// waits for an empty queue), so memory stays flat when the issuing thread
// runs ahead. As on a GPU, a host thread that enqueues
// thousands of ops behind a wait-value that only its own later calls
// would satisfy deadlocks. Handles start at 0x1000
// and are checked against a registry (ErrInvalidHandle for garbage or
// destroyed ones). Handles 0 and 1 are the current device's legacy NULL
// stream, 2 the per-thread default stream of (calling thread, current
// device); both are ordinary streams created on first use, with no
// implicit synchronization. StreamDestroy returns at once; queued work
// still completes.
//
// # Hardware queues (CECOLL_HOST_QUEUES; default 0: no limit)
//
// With Config.Queues > 0 each device has that many hardware queues: a
// stream's worker holds one from the first op it runs until its queue of
// ops is empty, a wait in progress included, and waits while none is
// free. So once every queue holds a parked stream nothing else of the
// device runs, the releasing writes included, as on a GPU
// (CUDA_DEVICE_MAX_CONNECTIONS; queues.go). Graph branches are streams
// too. Inline execution is off then.
//
// # Inline execution (CECOLL_HOST_INLINE; default on, 0: off)
//
// A thread that enqueues on a stream no executor owns runs the ops itself,
// in order, while each completes at once: write-values, event markers,
// flag waits that already hold (checked once), stream waits already done,
// copies and batches below 64 KiB. At the first other op it stops, the
// worker takes the rest, and the thread then runs other streams left
// blocked whose next op now completes, so a grouped collective of a few
// ranks can finish on the issuing thread without a goroutine hand-over. A
// stream with a larger copy pending stays with its worker.
// StreamSynchronize and EventSynchronize do the same before they sleep.
// One executor at a time per stream; a worker waiting on a flag does not
// own its stream, so whoever sees the flag first goes on. Nothing inline
// ever blocks, and a stream left with ops pending always has its worker
// awake. Off under chaos (Config.Chaos) and with Config.NoInline.
//
// # Memory operations
//
// StreamBatchMemOp takes 1..255 entries (more: ErrInvalidValue, as the
// driver), each with an explicit op type (0 or unknown: ErrInvalidValue)
// and a 4-byte aligned address. A write-value is a sequentially consistent
// 32-bit store made after all earlier work of the stream, followed by a
// futex wake of the word when someone may sleep on it: always for words of
// exported or imported allocations (sleepers of other processes, or of
// another mapping, are invisible), else only when this process counts a
// sleeper in the word's hash bucket (waiters count themselves before the
// load FUTEX_WAIT compares, so the wake is not lost). A wait-value blocks the stream until EQ, GEQ
// (cyclic: int32(*addr-value) >= 0), AND or NOR holds: it spins a few
// hundred loads with runtime.Gosched, then sleeps in FUTEX_WAIT (not
// private, so it also works on memory shared with another process) with a
// timeout that doubles from 50us to 2ms, so a lost wake costs only
// latency. Copies of at most 8 bytes also wake the words they write
// (engines publish flags by 4-byte copies; an aligned 4-byte copy is one
// atomic store). Flush and barrier entries are accepted and do nothing;
// 64-bit entries are ErrNotSupported.
//
// # Copies
//
// MemcpyAsync is one copy in stream order. MemcpyBatchAsync is validated
// like the driver (count 0 or length mismatch, attrIdxs[0] != 0, an index
// out of range, a SrcAccessOrder outside 1..3: ErrInvalidValue; the legacy
// NULL stream: ErrInvalidValue; a capturing stream:
// ErrStreamCaptureUnsupported, and the capture stays valid). Its copies
// have no order among them; the batch as a whole is in stream order. A
// batch of 1 MiB or more is shared with a pool of four copy goroutines.
//
// # Bad addresses (fault.go)
//
// Memory that is not accessible never kills the process. A NULL or
// wrapping range is refused at the call (ErrInvalidValue), as are the
// driver's other argument errors. Anything else is found only when an op
// touches it: every copy, memset, write-value and flag load runs with
// runtime/debug.SetPanicOnFault on and recovers the fault (SIGSEGV on an
// unmapped or PROT_NONE page, SIGBUS past the end of a file mapping), on
// the stream workers, the copy engines and threads running ops inline
// alike. Memcpy and Memset then return ErrInvalidValue (bytes before the
// fault may have moved) and leave nothing behind. An asynchronous op fails
// its stream, like CUDA's sticky CUDA_ERROR_ILLEGAL_ADDRESS but for that
// stream only: the ops queued behind it are dropped (they complete without
// running, so nobody waits on them: a flag wait behind the fault does not
// hang), and StreamSynchronize, StreamQuery, every later enqueue on it
// and a synchronize or query of an event recorded at or after the fault
// return ErrIllegalAddress, as does DeviceSynchronize while the stream is
// not destroyed; the legacy NULL stream's error also reaches Memcpy and
// Memset, which run after it. A stream that waits on such an event (or a
// graph's join on a failed branch) fails in turn. Other streams run on:
// one that waits on a flag the failed stream would have written stays
// blocked, as behind a peer that never comes, until someone writes the
// flag (a communicator abort).
//
// # Events and capture
//
// EventRecord enqueues a marker; StreamWaitEvent waits for the latest
// record made before the call (an event never recorded is complete);
// EventElapsedTime uses the times the markers ran. StreamBeginCapture
// (not on the legacy NULL stream: ErrStreamCaptureUnsupported) makes the
// stream record its ops into a graph. A stream that waits on an event
// recorded in a capturing stream joins the capture as a branch; every
// branch's work must be joined back into the origin before
// StreamEndCapture (else ErrStreamCaptureUnjoined). A capturing stream that
// waits on an event recorded outside the capture records nothing: that
// work was issued before the graph can launch. During a capture StreamSynchronize and
// StreamQuery of a capturing stream, and MemAlloc, MemFree, Memcpy and
// Memset from a thread the capture mode restricts, fail with
// ErrStreamCaptureUnsupported and invalidate the capture, as in CUDA; an
// event recorded in a running capture gives ErrCapturedEvent to
// EventQuery/EventSynchronize. GraphLaunch replays the recorded ops:
// branch 0 on the launch stream, the other branches on streams of the
// exec, with the recorded dependencies; launches of one exec are ordered.
// Launching into a capturing stream is not emulated.
//
// # Multicast
//
// MulticastCreate reserves a fresh PROT_NONE range of the given size; a
// write-value or copy whose destination lies in it writes the same offset
// of every member instead, then wakes waiters. Lookups read an immutable
// sorted table through an atomic pointer.
//
// # Capabilities (CECOLL_HOST_CAPS, a comma list; default: all on)
//
// Config.Caps nil means DefaultCaps; ConfigFromEnv and ParseCaps apply the
// switches below to it.
//
//   - nobatchcopy: Caps.BatchCopy=false; MemcpyBatchAsync returns ErrNotSupported.
//   - noattrs: Caps.CopyAttributes=false; a batched copy with attributes returns ErrInvalidValue (ROCm 7.2).
//   - nopeerwrite: Caps.PeerWriteValue=false; a write-value into another device's or an imported allocation returns ErrNotSupported at submission (CUDA 13.1).
//   - nomulticast: Caps.Multicast=false; MulticastCreate returns ErrNotSupported.
//   - hipbatches: Caps.SplitWaitReset=true; within one memop batch the writes run before the waits (HIP's hazard).
//
// An unknown switch is an error that names it.
//
// # Adversarial scheduler (CECOLL_HOST_CHAOS=<int64 seed>; unset or 0: off)
//
// Only the stream workers run ops (no inline execution). Each stream draws from its own math/rand source, seeded from the seed
// and the stream's creation index, so a run is reproducible op for op:
//   - the copies of a batch run one by one in a shuffled order;
//   - a copy of 64 bytes or more is, with probability 1/2, cut into 2..4
//     pieces (8-byte aligned cuts) that join that shuffle;
//   - before an op the stream sleeps 0..200us with probability 1/8 (1/4
//     before a write-value, 1/16 between two pieces).
package host
