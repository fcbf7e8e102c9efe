package hip

import "unsafe"

// DevicePtr is an address in the unified (device) address space.
type DevicePtr uintptr

// Stream, Event, Graph and GraphExec are opaque runtime handles. On the GPU
// backends they are the driver's own handles (CUstream, CUevent, ...), so a
// stream created by the application can be passed straight through.
type (
	Stream    uintptr
	Event     uintptr
	Graph     uintptr
	GraphExec uintptr
)

// Special stream handles, with CUDA's values.
const (
	StreamNull      Stream = 0 // the legacy NULL stream
	StreamLegacy    Stream = 1 // CU_STREAM_LEGACY: the legacy NULL stream, named explicitly
	StreamPerThread Stream = 2 // CU_STREAM_PER_THREAD: the calling thread's default stream
)

// IsLegacyNull reports whether s names the legacy NULL stream, where batched
// copies are refused (B14).
func (s Stream) IsLegacyNull() bool { return s == StreamNull || s == StreamLegacy }

// EventFlags are cuEventCreate's flags.
type EventFlags uint32

const (
	EventDefault       EventFlags = 0
	EventBlockingSync  EventFlags = 1
	EventDisableTiming EventFlags = 2
)

// CaptureStatus is cuStreamIsCapturing's answer.
type CaptureStatus uint32

const (
	CaptureNone        CaptureStatus = 0
	CaptureActive      CaptureStatus = 1
	CaptureInvalidated CaptureStatus = 2
)

// CaptureMode is cuStreamBeginCapture's mode.
type CaptureMode uint32

const (
	CaptureModeGlobal      CaptureMode = 0
	CaptureModeThreadLocal CaptureMode = 1
	CaptureModeRelaxed     CaptureMode = 2
)

// MemOpType is CUstreamBatchMemOpType (hipStreamBatchMemOpType has the same values).
type MemOpType uint32

const (
	MemOpInvalid      MemOpType = 0 // never valid: every entry sets its type explicitly (B1)
	MemOpWaitValue32  MemOpType = 1
	MemOpWriteValue32 MemOpType = 2
)

// Wait conditions (CU_STREAM_WAIT_VALUE_*). GEQ is cyclic:
// it holds when int32(*addr - value) >= 0, so it survives wrap-around.
const (
	WaitGEQ uint32 = 0
	WaitEQ  uint32 = 1
	WaitAND uint32 = 2
	WaitNOR uint32 = 3
)

// WriteDefault fences earlier work of the stream before the write
// (CU_STREAM_WRITE_VALUE_DEFAULT): keep it for "data has landed" flags.
const WriteDefault uint32 = 0

// MaxMemOpsPerBatch is the most entries one StreamBatchMemOp call accepts:
// the driver refuses 256 and more (B7). BatchMemOps splits longer lists.
const MaxMemOpsPerBatch = 255

// MemOp is one entry of a stream memory-operation batch, laid out exactly
// as CUstreamBatchMemOpParams (and hipStreamBatchMemOpParams): 48 bytes,
// so a []MemOp is handed to the driver without conversion. For the 32-bit
// operations Value holds the value in its low 32 bits.
type MemOp struct {
	Op    MemOpType
	_     uint32
	Addr  DevicePtr
	Value uint64
	Flags uint32
	_     uint32
	Alias uint64 // driver-internal; leave zero
	_     uint64
}

// WaitValue32 returns a wait entry: the stream blocks until *addr meets
// cond (WaitEQ, WaitGEQ, ...) against value.
func WaitValue32(addr DevicePtr, value uint32, cond uint32) MemOp {
	return MemOp{Op: MemOpWaitValue32, Addr: addr, Value: uint64(value), Flags: cond}
}

// WriteValue32 returns a write entry: *addr = value once earlier work of
// the stream is done.
func WriteValue32(addr DevicePtr, value uint32) MemOp {
	return MemOp{Op: MemOpWriteValue32, Addr: addr, Value: uint64(value), Flags: WriteDefault}
}

// MemLocation is CUmemLocation / cudaMemLocation.
type MemLocation struct {
	Type int32
	ID   int32
}

// CopyAttributes is CUmemcpyAttributes / cudaMemcpyAttributes (24 bytes).
type CopyAttributes struct {
	SrcAccessOrder uint32
	SrcLocHint     MemLocation
	DstLocHint     MemLocation
	Flags          uint32
}

// Values for CopyAttributes.
const (
	SrcAccessOrderStream        uint32 = 1
	SrcAccessOrderDuringAPICall uint32 = 2
	SrcAccessOrderAny           uint32 = 3

	CopyFlagPreferOverlapWithCompute uint32 = 1
)

// Caps are the capabilities the engine branches on, for the current device.
type Caps struct {
	// BatchCopy: MemcpyBatchAsync is available (CUDA >= 12.8, ROCm >= 7.1).
	BatchCopy bool
	// CopyAttributes: the batched copy accepts attributes (not HIP < 7.12, B3).
	CopyAttributes bool
	// PeerWriteValue: a write-value entry may target a peer's memory
	// (refused from CUDA 13.1, B5).
	PeerWriteValue bool
	// Multicast: MulticastCreate works.
	Multicast bool
	// SplitWaitReset: within one memop batch writes may overtake waits
	// (HIP), so waits and the writes after them go in separate batches.
	SplitWaitReset bool
	// StreamMemOps: the stream memory operations the flags need
	// (write-value, wait-value, batches) are available: CUDA driver >=
	// 12.5 as NCCL requires, HIP >= 7.0 (hipStreamBatchMemOp), the host
	// device always.
	StreamMemOps bool
	// PageableBlocks: a copy from or to pageable host memory (memory the
	// driver does not know) blocks the calling thread until it is done
	// (CUDA, HIP), so the engine refuses such buffers: inside a collective
	// that waits for peers it would deadlock a group. Not on the host
	// device, where any mapped memory is device memory.
	PageableBlocks bool
	// StreamQueues: once this many streams of the process wait on one
	// device at once, no other work of the process runs there (CUDA: the
	// context's hardware queues, CUDA_DEVICE_MAX_CONNECTIONS:
	// docs/performance.md, "Hardware queues: which waiting streams stall
	// the GPU"). 0: no such limit is known.
	StreamQueues int
}

// MaxStreamQueues is the most hardware queues a CUDA context can have
// (CUDA_DEVICE_MAX_CONNECTIONS is capped there).
const MaxStreamQueues = 32

// Runtime is the device runtime. Every method is safe for concurrent use.
// Methods that act on "the current device" use the calling OS thread's.
type Runtime interface {
	// Name is "host", "nvidia" or "amd".
	Name() string
	// DriverVersion is the driver's version (CUDA: 13000 for 13.0;
	// HIP: MAJOR*10000000 + MINOR*100000 + PATCH*1000 + BUILD).
	DriverVersion() (int, error)
	// Caps reports the capabilities of the current device.
	Caps() Caps

	DeviceCount() (int, error)
	// SetDevice makes dev current on the calling OS thread.
	SetDevice(dev int) error
	// GetDevice is the calling OS thread's current device (0 if never set).
	GetDevice() (int, error)
	DeviceName(dev int) (string, error)
	DeviceCanAccessPeer(dev, peer int) (bool, error)
	DeviceSynchronize() error

	// MemAlloc allocates size bytes on the current device, page aligned,
	// exportable with MemExport and accessible from every peer device.
	MemAlloc(size uintptr) (DevicePtr, error)
	// MemFree frees an allocation from MemAlloc or MemImport.
	MemFree(p DevicePtr) error
	// MemExport returns a new file descriptor for the allocation based at
	// p, for another process's MemImport. The caller closes it.
	MemExport(p DevicePtr) (fd int, err error)
	// MemImport maps an exported allocation of size bytes into this process.
	// The fd stays the caller's to close.
	MemImport(fd int, size uintptr) (DevicePtr, error)
	// MemGetAddressRange returns the base and size of the allocation holding p.
	MemGetAddressRange(p DevicePtr) (base DevicePtr, size uintptr, err error)
	// PointerInfo describes the allocation holding p: its kind (device,
	// pinned or pageable host, managed memory, or nothing mapped), the
	// device of device memory, and its base and size where the runtime
	// knows them. Memory the driver does not know is PtrHostPageable if
	// its page is mapped, else PtrUnmapped (the host backend counts every
	// mapped address as device memory). p 0 is ErrInvalidValue. It is
	// not for the hot path: PointerCache is.
	PointerInfo(p DevicePtr) (PointerInfo, error)
	// Memset sets n bytes at p to value and returns when they are visible
	// to every stream.
	Memset(p DevicePtr, value byte, n uintptr) error
	// Memcpy copies n bytes in any direction (host or device pointers) and
	// returns when they are in place.
	Memcpy(dst, src uintptr, n uintptr) error

	// StreamCreate creates a non-blocking stream on the current device.
	StreamCreate() (Stream, error)
	StreamDestroy(s Stream) error
	StreamSynchronize(s Stream) error
	// StreamQuery returns nil when all work of s is done, ErrNotReady if not.
	StreamQuery(s Stream) error
	StreamWaitEvent(s Stream, e Event) error

	EventCreate(flags EventFlags) (Event, error)
	EventDestroy(e Event) error
	EventRecord(e Event, s Stream) error
	EventSynchronize(e Event) error
	// EventQuery returns nil when the recorded work is done, ErrNotReady if not.
	EventQuery(e Event) error
	// EventElapsedTime is the time in ms between two completed records.
	EventElapsedTime(start, end Event) (float32, error)

	// MemcpyAsync enqueues one device-to-device copy.
	MemcpyAsync(dst, src DevicePtr, n uintptr, s Stream) error
	// MemcpyBatchAsync enqueues len(dsts) copies that have no order among
	// themselves. attrs[k] applies from copy attrIdxs[k] on (attrIdxs[0]
	// must be 0); attrs may be empty. Refused on the legacy NULL stream
	// (ErrInvalidValue) and under capture (ErrStreamCaptureUnsupported).
	MemcpyBatchAsync(dsts, srcs []DevicePtr, sizes []uintptr, attrs []CopyAttributes, attrIdxs []uintptr, s Stream) error
	// Memcpy2DAsync enqueues one copy of height rows of width bytes: row i
	// from src+i*spitch to dst+i*dpitch, device memory on both sides. The
	// rows have no order among themselves; the copy as a whole is in
	// stream order, and may be captured. width must not exceed either
	// pitch, the two areas must not overlap; width or height 0 is a no-op.
	Memcpy2DAsync(dst DevicePtr, dpitch uintptr, src DevicePtr, spitch, width, height uintptr, s Stream) error
	// StreamBatchMemOp enqueues ops, run in order, as one submission of at
	// most MaxMemOpsPerBatch entries (use BatchMemOps for longer lists).
	StreamBatchMemOp(s Stream, ops []MemOp) error

	StreamGetCaptureStatus(s Stream) (CaptureStatus, error)
	StreamBeginCapture(s Stream, mode CaptureMode) error
	StreamEndCapture(s Stream) (Graph, error)
	GraphInstantiate(g Graph) (GraphExec, error)
	GraphLaunch(g GraphExec, s Stream) error
	GraphDestroy(g Graph) error
	GraphExecDestroy(g GraphExec) error

	// MulticastCreate returns an address range of size bytes such that a
	// write (write-value or copy) to mc+off reaches members[i]+off for every
	// member. ErrNotSupported where Caps().Multicast is false.
	MulticastCreate(members []DevicePtr, size uintptr) (mc DevicePtr, err error)
	MulticastDestroy(mc DevicePtr) error
}

// BatchMemOps submits ops on s in submissions of at most MaxMemOpsPerBatch
// entries (B7). Submissions keep the list's order.
func BatchMemOps(rt Runtime, s Stream, ops []MemOp) error {
	for len(ops) > 0 {
		n := min(len(ops), MaxMemOpsPerBatch)
		if err := rt.StreamBatchMemOp(s, ops[:n]); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// Compile-time layout checks: these structs cross into the driver as is.
var (
	_ [48 - unsafe.Sizeof(MemOp{})]byte
	_ [unsafe.Sizeof(MemOp{}) - 48]byte
	_ [24 - unsafe.Sizeof(CopyAttributes{})]byte
	_ [unsafe.Sizeof(CopyAttributes{}) - 24]byte
)
