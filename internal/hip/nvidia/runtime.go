package nvidia

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/param"
)

// Driver constants used here (cuda.h, docs/protocol.md#runtime-facts-the-backends-rely-on).
const (
	streamNonBlocking      = 1     // CU_STREAM_NON_BLOCKING
	attrVMMSupported       = 102   // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
	attrPosixFDSupported   = 103   // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
	batchCopyMinVersion    = 12080 // cuMemcpyBatchAsync appeared in CUDA 12.8
	batchCopyV2MinVersion  = 13000 // the 8-argument _v2 ABI (no failIdx)
	peerWriteValueMaxBelow = 13010 // CUDA 13.1 refuses write-value entries on peer memory (B5)
)

// Runtime is hip.Runtime over libcuda.so.1. It is safe for concurrent use;
// the current device is the calling OS thread's, as in CUDA.
type Runtime struct {
	fn      syms
	version int
	ndev    int
	caps    hip.Caps
	batchV2 bool // call cuMemcpyBatchAsync_v2 (13.0 ABI), else the 12.8 ABI

	mu     sync.Mutex
	ctx    []uintptr                     // primary context per device, retained on first use, never released
	vmm    []int8                        // per device: 0 unknown, 1 VMM with POSIX fds, -1 not
	gran   []uintptr                     // per device: recommended VMM granularity, 0 until asked
	allocs map[hip.DevicePtr]*allocation // allocations made by MemAlloc/MemImport
}

var _ hip.Runtime = (*Runtime)(nil)

var openOnce = sync.OnceValues(func() (*Runtime, error) { return openPath(libName) })

// Open loads libcuda.so.1 (once per process; it is never closed), runs
// cuInit(0) and checks that a device exists. Errors name the library, so
// the backend selector can report "CECOLL_BACKEND=nvidia: libcuda.so.1: ...".
func Open() (*Runtime, error) { return openOnce() }

// openPath is Open for an explicit library path (tests load fakes with it).
func openPath(path string) (rt *Runtime, err error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		if strings.HasPrefix(err.Error(), path) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := &Runtime{
		allocs: map[hip.DevicePtr]*allocation{},
	}
	if err := r.fn.load(h); err != nil {
		return nil, err
	}
	// Only once the driver loaded, so that a process that ends up on
	// another backend keeps its environment (and its log) as it was.
	userConns, userSet, raisedTo, mps := raiseConnections()
	defer func() {
		if err != nil && raisedTo > 0 {
			os.Unsetenv(param.CUDADeviceMaxConnections.Name())
		}
	}()
	// Before cuInit: has the process initialised the driver already? Then
	// it may have created contexts before CUDA_DEVICE_MAX_CONNECTIONS was set.
	var n0 int32
	preInit := r.call(r.fn.deviceGetCount, uintptr(unsafe.Pointer(&n0))) == nil
	if err := r.call(r.fn.init, 0); err != nil {
		return nil, fmt.Errorf("%s: cuInit: %w", path, err)
	}
	var v, n int32
	if err := r.call(r.fn.driverGetVersion, uintptr(unsafe.Pointer(&v))); err != nil {
		return nil, fmt.Errorf("%s: cuDriverGetVersion: %w", path, err)
	}
	if err := r.call(r.fn.deviceGetCount, uintptr(unsafe.Pointer(&n))); err != nil {
		return nil, fmt.Errorf("%s: cuDeviceGetCount: %w", path, err)
	}
	if n <= 0 {
		return nil, fmt.Errorf("%s: no CUDA device: %w", path, hip.ErrNoDevice)
	}
	r.version, r.ndev = int(v), int(n)
	r.ctx = make([]uintptr, n)
	r.vmm = make([]int8, n)
	r.gran = make([]uintptr, n)
	r.caps = hip.Caps{
		CopyAttributes: true,
		// CUDA 13.1 refuses write-value entries that target a peer's memory
		// (B5); older drivers accept them. The engine then writes peer
		// flags by copy instead.
		PeerWriteValue: r.version < peerWriteValueMaxBelow,
		// Never: see MulticastCreate.
		Multicast:      false,
		SplitWaitReset: false,
		StreamMemOps:   r.version >= 12050,
		PageableBlocks: true,
		StreamQueues:   streamQueues(userConns, userSet, raisedTo, mps, preInit),
	}
	how := fmt.Sprintf("%s=%q from the user", param.CUDADeviceMaxConnections.Name(), userConns)
	if raisedTo > 0 {
		how = fmt.Sprintf("%s=%d set by cecoll", param.CUDADeviceMaxConnections.Name(), raisedTo)
	}
	if mps {
		how += fmt.Sprintf("; an MPS client of %s", mpsDaemon())
	}
	log.Infof(log.Init, "nvidia: %d hardware queues per context assumed (%s; driver initialised before cecoll: %v)",
		r.caps.StreamQueues, how, preInit)
	switch {
	case r.version >= batchCopyV2MinVersion && r.fn.memcpyBatchAsyncV2 != 0:
		r.caps.BatchCopy, r.batchV2 = true, true
	case r.version >= batchCopyMinVersion && r.version < batchCopyV2MinVersion && r.fn.memcpyBatchAsyncV1 != 0:
		r.caps.BatchCopy = true
	}
	return r, nil
}

// rc turns a CUresult into an error: the same numbering as hip.Error.
func rc(r uintptr) error {
	if uint32(r) == 0 {
		return nil
	}
	return hip.Error(int32(uint32(r)))
}

// call runs fn on the calling OS thread. A thread that has no context gets
// CUDA_ERROR_INVALID_CONTEXT: it then adopts device 0's primary context (the
// default current device) and calls once more. Pointer arguments converted
// to uintptr in the call expression stay alive for the call (uintptrescapes);
// the driver reads them during the call only. The variadic slice escapes
// (it costs one small allocation), so the launch path uses launch instead.
//
//go:uintptrescapes
func (r *Runtime) call(fn uintptr, args ...uintptr) error {
	res, _, _ := purego.SyscallN(fn, args...)
	if uint32(res) == uint32(hip.ErrInvalidContext) && r.ctx != nil {
		res = r.retry(fn, args)
	}
	return rc(res)
}

// retry makes sure the thread has a context and calls fn again on it.
func (r *Runtime) retry(fn uintptr, args []uintptr) uintptr {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := r.ensureCtx(); err != nil {
		return uintptr(uint32(hip.ErrInvalidContext))
	}
	res, _, _ := purego.SyscallN(fn, args...)
	return res
}

// frame carries one launch-path call's arguments in pooled heap memory, so
// that the call allocates nothing: a fresh variadic slice for SyscallN
// would escape. keep holds the Go pointers the driver reads during the
// call; storing them in a heap object makes the caller's slices heap
// objects (which the GC never moves) and keeps them alive until the call
// returns. out is an output cell for calls that return a value.
type frame struct {
	args [9]uintptr
	keep [5]unsafe.Pointer
	out  uint64
	m2d  memcpy2D // Memcpy2DAsync's parameters
}

var framePool = sync.Pool{New: func() any { return new(frame) }}

func getFrame() *frame { return framePool.Get().(*frame) }

// invoke calls fn with f.args[:n] (through the cgo trampoline: the
// launch path's calls), with call's context retry.
func (r *Runtime) invoke(fn uintptr, f *frame, n int) uintptr {
	clear(f.args[n:])
	res := ccall(fn, &f.args)
	if uint32(res) == uint32(hip.ErrInvalidContext) && r.ctx != nil {
		res = r.retry(fn, f.args[:n])
	}
	return res
}

// putFrame clears f's pointers and returns it to the pool.
func putFrame(f *frame) {
	f.keep = [len(f.keep)]unsafe.Pointer{}
	framePool.Put(f)
}

// launch is invoke followed by putFrame.
func (r *Runtime) launch(fn uintptr, f *frame, n int) error {
	res := r.invoke(fn, f, n)
	putFrame(f)
	return rc(res)
}

// primary returns dev's primary context, retaining it on first use.
func (r *Runtime) primary(dev int) (uintptr, error) {
	if dev < 0 || dev >= r.ndev {
		return 0, hip.ErrInvalidDevice
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.ctx[dev]; c != 0 {
		return c, nil
	}
	var c uintptr
	res, _, _ := purego.SyscallN(r.fn.primaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(dev))
	if err := rc(res); err != nil {
		if d := mpsDaemon(); d != "" {
			if errors.Is(err, hip.Error(mpsMaxClientsReached)) {
				return 0, fmt.Errorf("device %d's context: the MPS server of %s serves as many clients as it can: %w", dev, d, err)
			}
			return 0, fmt.Errorf("device %d's context (an MPS client of %s; its clients share one pool of hardware queues, and %s=%q asks for that many each: a lower value admits more clients; a process with one rank per device needs at least 3): %w",
				dev, d, param.CUDADeviceMaxConnections.Name(), param.CUDADeviceMaxConnections.Get(), err)
		}
		return 0, err
	}
	r.ctx[dev] = c
	return c, nil
}

// currentCtx is the calling thread's context (0 if none).
func (r *Runtime) currentCtx() (uintptr, error) {
	var c uintptr
	res, _, _ := purego.SyscallN(r.fn.ctxGetCurrent, uintptr(unsafe.Pointer(&c)))
	return c, rc(res)
}

// ensureCtx gives the calling thread device 0's primary context when it has
// none. The caller keeps its OS thread locked while it relies on the result.
func (r *Runtime) ensureCtx() error {
	c, err := r.currentCtx()
	if err != nil || c != 0 {
		return err
	}
	p, err := r.primary(0)
	if err != nil {
		return err
	}
	res, _, _ := purego.SyscallN(r.fn.ctxSetCurrent, p)
	return rc(res)
}

// lockCtx locks the calling goroutine to its OS thread and makes sure the
// thread has a context. On success the caller defers runtime.UnlockOSThread;
// on failure the thread is already unlocked.
func (r *Runtime) lockCtx() error {
	runtime.LockOSThread()
	if err := r.ensureCtx(); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

// Name implements hip.Runtime.
func (r *Runtime) Name() string { return "nvidia" }

// DriverVersion implements hip.Runtime (cuDriverGetVersion, e.g. 13000).
func (r *Runtime) DriverVersion() (int, error) { return r.version, nil }

// Caps implements hip.Runtime. Every device shares the driver's answer.
func (r *Runtime) Caps() hip.Caps { return r.caps }

// DeviceCount implements hip.Runtime.
func (r *Runtime) DeviceCount() (int, error) { return r.ndev, nil }

// SetDevice makes dev's primary context current on the calling OS thread.
func (r *Runtime) SetDevice(dev int) error {
	c, err := r.primary(dev)
	if err != nil {
		return err
	}
	f := getFrame()
	f.args[0] = c
	return r.launch(r.fn.ctxSetCurrent, f, 1)
}

// GetDevice is the device of the calling thread's context, 0 if it has none.
func (r *Runtime) GetDevice() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := r.currentCtx()
	if err != nil || c == 0 {
		return 0, err
	}
	return r.ctxDevice()
}

// ctxDevice is the device of the current context; the thread must have one.
func (r *Runtime) ctxDevice() (int, error) {
	var d int32
	res, _, _ := purego.SyscallN(r.fn.ctxGetDevice, uintptr(unsafe.Pointer(&d)))
	return int(d), rc(res)
}

// cuDevice maps an ordinal to a CUdevice (they coincide today; the driver
// is asked anyway so nothing relies on it).
func (r *Runtime) cuDevice(dev int) (uintptr, error) {
	if dev < 0 || dev >= r.ndev {
		return 0, hip.ErrInvalidDevice
	}
	var d int32
	if err := r.call(r.fn.deviceGet, uintptr(unsafe.Pointer(&d)), uintptr(dev)); err != nil {
		return 0, err
	}
	return uintptr(d), nil
}

// DeviceName implements hip.Runtime.
func (r *Runtime) DeviceName(dev int) (string, error) {
	d, err := r.cuDevice(dev)
	if err != nil {
		return "", err
	}
	var buf [256]byte
	if err := r.call(r.fn.deviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), d); err != nil {
		return "", err
	}
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return string(buf[:n]), nil
}

// DeviceCanAccessPeer reports whether dev can access memory on peer. A
// device can always access its own memory (the driver is not asked then).
func (r *Runtime) DeviceCanAccessPeer(dev, peer int) (bool, error) {
	d, err := r.cuDevice(dev)
	if err != nil {
		return false, err
	}
	p, err := r.cuDevice(peer)
	if err != nil {
		return false, err
	}
	if d == p {
		return true, nil
	}
	var can int32
	if err := r.call(r.fn.deviceCanAccessPeer, uintptr(unsafe.Pointer(&can)), d, p); err != nil {
		return false, err
	}
	return can != 0, nil
}

// attribute reads a device attribute.
func (r *Runtime) attribute(attr int, dev int) (int, error) {
	d, err := r.cuDevice(dev)
	if err != nil {
		return 0, err
	}
	var v int32
	err = r.call(r.fn.deviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), d)
	return int(v), err
}

// DeviceSynchronize waits for all work of the current device's context.
func (r *Runtime) DeviceSynchronize() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := r.ensureCtx(); err != nil {
		return err
	}
	return r.call(r.fn.ctxSynchronize)
}

// Memset sets n bytes at p and returns when they are visible to every
// stream: cuMemsetD8_v2 on the legacy NULL stream (asynchronous for device
// memory), then cuStreamSynchronize of that stream. The streams cecoll
// creates are non-blocking, so the legacy stream does not wait for them; an
// application's blocking streams are waited for, as CUDA's own synchronous
// memset does.
//
// Once about as many streams as the context has hardware queues
// (CUDA_DEVICE_MAX_CONNECTIONS, default 8) are parked on wait-values, other
// work of the process stalls, this call included, whichever stream it uses
// (docs/performance.md, "Memset behind parked streams").
func (r *Runtime) Memset(p hip.DevicePtr, value byte, n uintptr) error {
	if n == 0 {
		return nil
	}
	if err := r.lockCtx(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if err := r.call(r.fn.memsetD8, uintptr(p), uintptr(value), n); err != nil {
		return err
	}
	return r.call(r.fn.streamSynchronize, uintptr(hip.StreamNull))
}

// Memcpy copies n bytes between any two UVA addresses (device memory,
// pinned or pageable host memory) with cuMemcpy, and returns when they are
// in place: cuMemcpy is synchronous for host memory, and a device-to-device
// copy is followed by a sync of the legacy stream it ran on.
func (r *Runtime) Memcpy(dst, src uintptr, n uintptr) error {
	if n == 0 {
		return nil
	}
	if err := r.lockCtx(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if err := r.call(r.fn.memcpy, dst, src, n); err != nil {
		return err
	}
	return r.call(r.fn.streamSynchronize, uintptr(hip.StreamNull))
}

// StreamCreate creates a CU_STREAM_NON_BLOCKING stream on the current device.
func (r *Runtime) StreamCreate() (hip.Stream, error) {
	var s uintptr
	err := r.call(r.fn.streamCreate, uintptr(unsafe.Pointer(&s)), streamNonBlocking)
	return hip.Stream(s), err
}

// StreamDestroy implements hip.Runtime (cuStreamDestroy_v2).
func (r *Runtime) StreamDestroy(s hip.Stream) error { return r.call(r.fn.streamDestroy, uintptr(s)) }

// StreamSynchronize implements hip.Runtime.
func (r *Runtime) StreamSynchronize(s hip.Stream) error {
	return r.call(r.fn.streamSynchronize, uintptr(s))
}

// StreamQuery implements hip.Runtime: nil when done, hip.ErrNotReady if not.
func (r *Runtime) StreamQuery(s hip.Stream) error { return r.call(r.fn.streamQuery, uintptr(s)) }

// StreamWaitEvent implements hip.Runtime (launch path: allocates nothing).
func (r *Runtime) StreamWaitEvent(s hip.Stream, e hip.Event) error {
	f := getFrame()
	f.args[0], f.args[1], f.args[2] = uintptr(s), uintptr(e), 0
	return r.launch(r.fn.streamWaitEvent, f, 3)
}

// EventCreate implements hip.Runtime; flags pass straight to cuEventCreate.
func (r *Runtime) EventCreate(flags hip.EventFlags) (hip.Event, error) {
	var e uintptr
	err := r.call(r.fn.eventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags))
	return hip.Event(e), err
}

// EventDestroy implements hip.Runtime (cuEventDestroy_v2).
func (r *Runtime) EventDestroy(e hip.Event) error { return r.call(r.fn.eventDestroy, uintptr(e)) }

// EventRecord implements hip.Runtime (launch path: allocates nothing).
func (r *Runtime) EventRecord(e hip.Event, s hip.Stream) error {
	f := getFrame()
	f.args[0], f.args[1] = uintptr(e), uintptr(s)
	return r.launch(r.fn.eventRecord, f, 2)
}

// EventSynchronize implements hip.Runtime.
func (r *Runtime) EventSynchronize(e hip.Event) error {
	return r.call(r.fn.eventSynchronize, uintptr(e))
}

// EventQuery implements hip.Runtime: nil when done, hip.ErrNotReady if not.
func (r *Runtime) EventQuery(e hip.Event) error { return r.call(r.fn.eventQuery, uintptr(e)) }

// EventElapsedTime implements hip.Runtime (cuEventElapsedTime_v2 where
// exported; the plain name has the same prototype).
func (r *Runtime) EventElapsedTime(start, end hip.Event) (float32, error) {
	var ms float32
	err := r.call(r.fn.eventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))
	return ms, err
}

// MemcpyAsync implements hip.Runtime (launch path: allocates nothing).
func (r *Runtime) MemcpyAsync(dst, src hip.DevicePtr, n uintptr, s hip.Stream) error {
	f := getFrame()
	f.args[0], f.args[1], f.args[2], f.args[3] = uintptr(dst), uintptr(src), n, uintptr(s)
	return r.launch(r.fn.memcpyAsync, f, 4)
}

// memcpy2D is CUDA_MEMCPY2D (cuda.h, the layout of cuMemcpy2DAsync_v2:
// 128 bytes on 64-bit hosts, the memory types 4-byte enums followed by
// padding).
type memcpy2D struct {
	srcXInBytes, srcY uintptr
	srcMemoryType     uint32
	_                 uint32
	srcHost           uintptr
	srcDevice         uintptr
	srcArray          uintptr
	srcPitch          uintptr
	dstXInBytes, dstY uintptr
	dstMemoryType     uint32
	_                 uint32
	dstHost           uintptr
	dstDevice         uintptr
	dstArray          uintptr
	dstPitch          uintptr
	widthInBytes      uintptr
	height            uintptr
}

// memoryTypeDevice is CU_MEMORYTYPE_DEVICE.
const memoryTypeDevice = 2

// Memcpy2DAsync implements hip.Runtime with cuMemcpy2DAsync_v2, device to
// device. Launch path: the parameters live in the pooled frame, nothing
// is allocated.
func (r *Runtime) Memcpy2DAsync(dst hip.DevicePtr, dpitch uintptr, src hip.DevicePtr, spitch, width, height uintptr, s hip.Stream) error {
	if width == 0 || height == 0 {
		return nil
	}
	f := getFrame()
	f.m2d = memcpy2D{
		srcMemoryType: memoryTypeDevice, srcDevice: uintptr(src), srcPitch: spitch,
		dstMemoryType: memoryTypeDevice, dstDevice: uintptr(dst), dstPitch: dpitch,
		widthInBytes: width, height: height,
	}
	f.keep[0] = unsafe.Pointer(&f.m2d)
	f.args[0], f.args[1] = uintptr(f.keep[0]), uintptr(s)
	return r.launch(r.fn.memcpy2DAsync, f, 2)
}

// defaultAttrs is used when the caller passes no attributes: stream order,
// as a plain cuMemcpyAsync would have. Package-level, so the driver reads
// memory the GC never moves or frees.
var (
	defaultAttrs   = [1]hip.CopyAttributes{{SrcAccessOrder: hip.SrcAccessOrderStream}}
	defaultAttrIdx = [1]uintptr{0}
)

// MemcpyBatchAsync implements hip.Runtime with cuMemcpyBatchAsync_v2 (CUDA
// 13.0 ABI) or, on 12.8/12.9 drivers, cuMemcpyBatchAsync with a NULL
// failIdx. The driver's refusals pass through unchanged: 1 on the legacy
// NULL stream, 900 under capture; the engine falls back on them.
// Launch path: the slices go to the driver as they are and nothing is
// allocated; they are kept alive until the call returns.
func (r *Runtime) MemcpyBatchAsync(dsts, srcs []hip.DevicePtr, sizes []uintptr, attrs []hip.CopyAttributes, attrIdxs []uintptr, s hip.Stream) error {
	if !r.caps.BatchCopy {
		return hip.ErrNotSupported
	}
	n := len(dsts)
	if len(srcs) != n || len(sizes) != n || len(attrs) != len(attrIdxs) {
		return hip.ErrInvalidValue
	}
	if n == 0 {
		return nil
	}
	if len(attrs) == 0 {
		attrs, attrIdxs = defaultAttrs[:], defaultAttrIdx[:]
	} else if attrIdxs[0] != 0 {
		return hip.ErrInvalidValue // the first attribute must apply from copy 0
	}
	f := getFrame()
	f.keep[0] = unsafe.Pointer(unsafe.SliceData(dsts))
	f.keep[1] = unsafe.Pointer(unsafe.SliceData(srcs))
	f.keep[2] = unsafe.Pointer(unsafe.SliceData(sizes))
	f.keep[3] = unsafe.Pointer(unsafe.SliceData(attrs))
	f.keep[4] = unsafe.Pointer(unsafe.SliceData(attrIdxs))
	f.args[0], f.args[1], f.args[2] = uintptr(f.keep[0]), uintptr(f.keep[1]), uintptr(f.keep[2])
	f.args[3] = uintptr(n)
	f.args[4], f.args[5], f.args[6] = uintptr(f.keep[3]), uintptr(f.keep[4]), uintptr(len(attrs))
	if r.batchV2 {
		f.args[7] = uintptr(s)
		return r.launch(r.fn.memcpyBatchAsyncV2, f, 8)
	}
	f.args[7], f.args[8] = 0, uintptr(s) // failIdx: NULL, as NCCL passes
	return r.launch(r.fn.memcpyBatchAsyncV1, f, 9)
}

// StreamBatchMemOp implements hip.Runtime with cuStreamBatchMemOp_v2; ops
// already have CUstreamBatchMemOpParams' layout. The driver refuses 256
// and more entries with 1 (use hip.BatchMemOps). Launch path: allocates
// nothing.
func (r *Runtime) StreamBatchMemOp(s hip.Stream, ops []hip.MemOp) error {
	if len(ops) == 0 {
		return nil
	}
	f := getFrame()
	f.keep[0] = unsafe.Pointer(unsafe.SliceData(ops))
	f.args[0], f.args[1], f.args[2], f.args[3] = uintptr(s), uintptr(len(ops)), uintptr(f.keep[0]), 0
	return r.launch(r.fn.streamBatchMemOp, f, 4)
}

// StreamGetCaptureStatus implements hip.Runtime (cuStreamIsCapturing). The
// engine asks once per collective, so it allocates nothing either.
func (r *Runtime) StreamGetCaptureStatus(s hip.Stream) (hip.CaptureStatus, error) {
	f := getFrame()
	f.out = 0
	f.keep[0] = unsafe.Pointer(&f.out)
	f.args[0], f.args[1] = uintptr(s), uintptr(f.keep[0])
	res := r.invoke(r.fn.streamIsCapturing, f, 2)
	st := hip.CaptureStatus(uint32(f.out))
	putFrame(f)
	return st, rc(res)
}

// StreamBeginCapture implements hip.Runtime (cuStreamBeginCapture_v2).
func (r *Runtime) StreamBeginCapture(s hip.Stream, mode hip.CaptureMode) error {
	return r.call(r.fn.streamBeginCapture, uintptr(s), uintptr(mode))
}

// StreamEndCapture implements hip.Runtime.
func (r *Runtime) StreamEndCapture(s hip.Stream) (hip.Graph, error) {
	var g uintptr
	err := r.call(r.fn.streamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g)))
	return hip.Graph(g), err
}

// GraphInstantiate implements hip.Runtime (cuGraphInstantiateWithFlags,
// which cuda.h maps cuGraphInstantiate to since CUDA 12).
func (r *Runtime) GraphInstantiate(g hip.Graph) (hip.GraphExec, error) {
	var e uintptr
	err := r.call(r.fn.graphInstantiate, uintptr(unsafe.Pointer(&e)), uintptr(g), 0)
	return hip.GraphExec(e), err
}

// GraphLaunch implements hip.Runtime.
func (r *Runtime) GraphLaunch(g hip.GraphExec, s hip.Stream) error {
	f := getFrame()
	f.args[0], f.args[1] = uintptr(g), uintptr(s)
	return r.launch(r.fn.graphLaunch, f, 2)
}

// GraphDestroy implements hip.Runtime.
func (r *Runtime) GraphDestroy(g hip.Graph) error { return r.call(r.fn.graphDestroy, uintptr(g)) }

// GraphExecDestroy implements hip.Runtime.
func (r *Runtime) GraphExecDestroy(g hip.GraphExec) error {
	return r.call(r.fn.graphExecDestroy, uintptr(g))
}

// MulticastCreate always returns hip.ErrNotSupported: multicast objects are
// forbidden on the GPU machines cecoll is tested on (they can take a shared
// host's GPUs out of service), so no cuMulticast* symbol is even bound.
func (r *Runtime) MulticastCreate(members []hip.DevicePtr, size uintptr) (hip.DevicePtr, error) {
	return 0, hip.ErrNotSupported
}

// MulticastDestroy always returns hip.ErrNotSupported (see MulticastCreate).
func (r *Runtime) MulticastDestroy(mc hip.DevicePtr) error { return hip.ErrNotSupported }

// Hardware queues per context (CUDA_DEVICE_MAX_CONNECTIONS): the driver's
// default and its maximum; mpsConnections is what cecoll asks for an MPS
// client, and mpsDefaultConnections what such a client has unasked.
const (
	defaultConnections    = 8
	maxConnections        = hip.MaxStreamQueues
	mpsConnections        = 8
	mpsDefaultConnections = 2
)

// raiseConnections sets CUDA_DEVICE_MAX_CONNECTIONS, the hardware queues
// per context, unless the user chose a number: 32 (the driver's default
// is 8), or 8 for an MPS client. Several ranks share one GPU in cecoll,
// each parking its streams on waits during a sync; once the parked
// streams fill the context's queues, every other stream of the process
// stalls, a peer's releasing write and Abort's release included, and the
// GPU deadlocks (docs/performance.md, "Hardware queues: which waiting
// streams stall the GPU"). An MPS client left to the default has 2 queues,
// which one rank's pending collective fills; but a server's clients share
// one pool, and 32 each exhausts it after a few clients (their contexts
// fail with out of memory): docs/performance.md, "MPS clients and hardware
// queues". The variable
// only counts if set before the driver's cuInit; streamQueues says what
// holds. It returns the variable as the user left it (blank counts as
// unset), the number cecoll set (0: none), and whether an MPS control
// daemon listens.
func raiseConnections() (v string, set bool, raisedTo int, mps bool) {
	p := param.CUDADeviceMaxConnections
	v, set = p.Get(), p.IsSet()
	mps = mpsDaemon() != ""
	if !set {
		raisedTo = maxConnections
		if mps {
			raisedTo = mpsConnections
		}
		// With cgo in the process os.Setenv also sets the C environment,
		// which is what the driver reads.
		os.Setenv(p.Name(), strconv.Itoa(raisedTo))
	}
	return v, set, raisedTo, mps
}

// mpsDaemon is the path of the MPS control daemon's socket, the one the
// driver connects to at cuInit, or "" when none listens there (a daemon
// that quit leaves its socket file behind).
func mpsDaemon() string {
	dir := param.CUDAMPSPipeDirectory.Get()
	if !param.CUDAMPSPipeDirectory.IsSet() {
		dir = defaultMPSPipeDirectory
	}
	path := filepath.Join(dir, "control")
	c, err := net.DialTimeout("unix", path, 100*time.Millisecond)
	if err == nil {
		c.Close()
		return path
	}
	// Only a missing file or a refused connection means no daemon: its
	// socket may be of another type than the stream this dial asks for.
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return ""
	}
	return path
}

// CUDA_ERROR_MPS_MAX_CLIENTS_REACHED.
const mpsMaxClientsReached = 808

// defaultMPSPipeDirectory is MPS's CUDA_MPS_PIPE_DIRECTORY when unset.
const defaultMPSPipeDirectory = "/tmp/nvidia-mps"

// streamQueues is Caps.StreamQueues: the hardware queues the process's
// contexts have. v, set: the variable as the process started (before
// raiseConnections); raisedTo: what cecoll set; mps: an MPS client;
// preInit: the driver's cuInit came before cecoll's. The driver reads the
// variable at cuInit, not when it makes a context, caps it at 32 and keeps
// its default for 0 or a word (the same section of docs/performance.md);
// an MPS client stalls at exactly the number asked for, and at 2 without
// one ("MPS clients and hardware queues"). So a value the user set counts; else cecoll's where it set
// it in time; else the default.
func streamQueues(v string, set bool, raisedTo int, mps, preInit bool) int {
	def := defaultConnections
	if mps {
		def = mpsDefaultConnections
	}
	if set {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return def
		}
		return min(n, maxConnections)
	}
	if raisedTo > 0 && !preInit {
		return raisedTo
	}
	return def
}
