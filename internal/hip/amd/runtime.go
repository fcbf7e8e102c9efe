package amd

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"cecoll/internal/hip"
)

// HIP constants (hip_runtime_api.h, driver_types.h).
const (
	hipStreamNonBlocking = 1

	hipMemcpyDeviceToDevice     = 3
	hipMemcpyDefault            = 4
	hipMemcpyDeviceToDeviceNoCU = 1024 // "device to device without compute units": SDMA

	hipDeviceAttributeVirtualMemoryManagementSupported = 89

	// hipDriverGetVersion is MAJOR*10000000 + MINOR*100000 + PATCH*1000 + BUILD.
	versionNoCU           = 60000000 // ROCm 6.0: hipMemcpyDeviceToDeviceNoCU accepted
	versionCopyAttributes = 71200000 // ROCm 7.12: hipMemcpyBatchAsync accepts numAttrs > 0

	waitMaskAll = 0xFFFFFFFF
)

// Runtime is hip.Runtime over libamdhip64. It is safe for concurrent use.
type Runtime struct {
	path    string
	sym     *symbols
	version int
	ndev    int
	caps    hip.Caps
	d2dKind uintptr
	vmm     []bool // per device: VMM symbols present and the attribute set

	mu     sync.Mutex
	allocs map[hip.DevicePtr]*allocation // MemAlloc/MemImport results by base
	peerOn map[[2]int]bool               // (accessor, owner) pairs given peer access
}

var _ hip.Runtime = (*Runtime)(nil)

var (
	openOnce sync.Once
	openRT   *Runtime
	openErr  error
)

// Open loads libamdhip64.so.7, or else libamdhip64.so.6, once per process,
// and fails when neither loads or no device is visible. The error names
// every library tried with the loader's reason.
func Open() (*Runtime, error) {
	openOnce.Do(func() {
		var reasons []string
		for _, name := range sonames {
			rt, err := OpenLibrary(name)
			if err == nil {
				openRT = rt
				return
			}
			reasons = append(reasons, err.Error())
		}
		openErr = errors.New(strings.Join(reasons, "; "))
	})
	return openRT, openErr
}

// OpenLibrary loads the HIP runtime from path (tests pass a fake). Each call
// builds a new Runtime; the library itself is loaded once by the dynamic
// loader and never closed.
func OpenLibrary(path string) (*Runtime, error) {
	sym, err := load(path)
	if err != nil {
		return nil, err
	}
	rt := &Runtime{
		path:   path,
		sym:    sym,
		allocs: make(map[hip.DevicePtr]*allocation),
		peerOn: make(map[[2]int]bool),
	}
	var v, n int32
	if err := call1(sym.hipDriverGetVersion, uintptr(unsafe.Pointer(&v))); err != nil {
		return nil, fmt.Errorf("%s: hipDriverGetVersion: %w", path, err)
	}
	if err := call1(sym.hipGetDeviceCount, uintptr(unsafe.Pointer(&n))); err != nil {
		return nil, fmt.Errorf("%s: hipGetDeviceCount: %w", path, err)
	}
	if n <= 0 {
		return nil, fmt.Errorf("%s: %w", path, hip.ErrNoDevice)
	}
	rt.version, rt.ndev = int(v), int(n)

	rt.d2dKind = hipMemcpyDeviceToDevice
	if rt.version >= versionNoCU {
		rt.d2dKind = hipMemcpyDeviceToDeviceNoCU
	}
	rt.caps = hip.Caps{
		BatchCopy:      sym.hipMemcpyBatchAsync != 0,
		CopyAttributes: sym.hipMemcpyBatchAsync != 0 && rt.version >= versionCopyAttributes,
		PeerWriteValue: true,
		Multicast:      false,
		SplitWaitReset: true,
		StreamMemOps:   rt.version >= 70000000,
		PageableBlocks: true,
	}

	rt.vmm = make([]bool, rt.ndev)
	if sym.hasVMM() {
		for d := range rt.ndev {
			var on int32
			err := call3(sym.hipDeviceGetAttribute, uintptr(unsafe.Pointer(&on)),
				hipDeviceAttributeVirtualMemoryManagementSupported, uintptr(d))
			rt.vmm[d] = err == nil && on != 0
		}
	}
	return rt, nil
}

// Name implements hip.Runtime.
func (r *Runtime) Name() string { return "amd" }

// DriverVersion is hipDriverGetVersion's value, read at load.
func (r *Runtime) DriverVersion() (int, error) { return r.version, nil }

// Caps implements hip.Runtime. They are the same for every device of the
// process: they depend on the library, not on the GPU.
func (r *Runtime) Caps() hip.Caps { return r.caps }

// DeviceCount implements hip.Runtime.
func (r *Runtime) DeviceCount() (int, error) { return r.ndev, nil }

// SetDevice implements hip.Runtime. HIP's current device is per thread.
func (r *Runtime) SetDevice(dev int) error {
	return call1(r.sym.hipSetDevice, uintptr(dev))
}

// GetDevice implements hip.Runtime.
func (r *Runtime) GetDevice() (int, error) {
	var d int32
	if err := call1(r.sym.hipGetDevice, uintptr(unsafe.Pointer(&d))); err != nil {
		return 0, err
	}
	return int(d), nil
}

// DeviceName implements hip.Runtime.
func (r *Runtime) DeviceName(dev int) (string, error) {
	var buf [256]byte
	if err := call3(r.sym.hipDeviceGetName,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev)); err != nil {
		return "", err
	}
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return string(buf[:n]), nil
}

// DeviceCanAccessPeer implements hip.Runtime.
func (r *Runtime) DeviceCanAccessPeer(dev, peer int) (bool, error) {
	var can int32
	if err := call3(r.sym.hipDeviceCanAccessPeer,
		uintptr(unsafe.Pointer(&can)), uintptr(dev), uintptr(peer)); err != nil {
		return false, err
	}
	return can != 0, nil
}

// DeviceSynchronize implements hip.Runtime.
func (r *Runtime) DeviceSynchronize() error {
	return call0(r.sym.hipDeviceSynchronize)
}

// Memset implements hip.Runtime: hipMemset runs on the NULL stream, so
// waiting for that stream (not the whole device, where other streams may
// be parked on flags) makes the bytes visible to every later operation.
func (r *Runtime) Memset(p hip.DevicePtr, value byte, n uintptr) error {
	if err := call3(r.sym.hipMemset, uintptr(p), uintptr(value), n); err != nil {
		return err
	}
	return call1(r.sym.hipStreamSynchronize, 0)
}

// Memcpy implements hip.Runtime with hipMemcpyDefault, which infers the
// direction from the pointers (unified addressing).
func (r *Runtime) Memcpy(dst, src uintptr, n uintptr) error {
	if n == 0 {
		return nil
	}
	return call4(r.sym.hipMemcpy, dst, src, n, hipMemcpyDefault)
}

// StreamCreate implements hip.Runtime.
func (r *Runtime) StreamCreate() (hip.Stream, error) {
	var s uintptr
	if err := call2(r.sym.hipStreamCreateWithFlags,
		uintptr(unsafe.Pointer(&s)), hipStreamNonBlocking); err != nil {
		return 0, err
	}
	return hip.Stream(s), nil
}

// StreamDestroy implements hip.Runtime.
func (r *Runtime) StreamDestroy(s hip.Stream) error {
	return call1(r.sym.hipStreamDestroy, uintptr(s))
}

// StreamSynchronize implements hip.Runtime.
func (r *Runtime) StreamSynchronize(s hip.Stream) error {
	return call1(r.sym.hipStreamSynchronize, uintptr(s))
}

// StreamQuery implements hip.Runtime (hipErrorNotReady is 600, as in CUDA).
func (r *Runtime) StreamQuery(s hip.Stream) error {
	return call1(r.sym.hipStreamQuery, uintptr(s))
}

// StreamWaitEvent implements hip.Runtime.
func (r *Runtime) StreamWaitEvent(s hip.Stream, e hip.Event) error {
	return call3(r.sym.hipStreamWaitEvent, uintptr(s), uintptr(e), 0)
}

// EventCreate implements hip.Runtime; HIP's event flags have CUDA's values.
func (r *Runtime) EventCreate(flags hip.EventFlags) (hip.Event, error) {
	var e uintptr
	if err := call2(r.sym.hipEventCreateWithFlags,
		uintptr(unsafe.Pointer(&e)), uintptr(flags)); err != nil {
		return 0, err
	}
	return hip.Event(e), nil
}

// EventDestroy implements hip.Runtime.
func (r *Runtime) EventDestroy(e hip.Event) error {
	return call1(r.sym.hipEventDestroy, uintptr(e))
}

// EventRecord implements hip.Runtime.
func (r *Runtime) EventRecord(e hip.Event, s hip.Stream) error {
	return call2(r.sym.hipEventRecord, uintptr(e), uintptr(s))
}

// EventSynchronize implements hip.Runtime.
func (r *Runtime) EventSynchronize(e hip.Event) error {
	return call1(r.sym.hipEventSynchronize, uintptr(e))
}

// EventQuery implements hip.Runtime.
func (r *Runtime) EventQuery(e hip.Event) error {
	return call1(r.sym.hipEventQuery, uintptr(e))
}

// EventElapsedTime implements hip.Runtime.
func (r *Runtime) EventElapsedTime(start, end hip.Event) (float32, error) {
	var ms float32
	if err := call3(r.sym.hipEventElapsedTime,
		uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end)); err != nil {
		return 0, err
	}
	return ms, nil
}

// MemcpyAsync implements hip.Runtime. From ROCm 6.0 it asks for
// hipMemcpyDeviceToDeviceNoCU, which keeps the copy on the SDMA engines
// (the copy engines this library is about) instead of a blit kernel;
// older runtimes get plain hipMemcpyDeviceToDevice.
func (r *Runtime) MemcpyAsync(dst, src hip.DevicePtr, n uintptr, s hip.Stream) error {
	if n == 0 {
		return nil
	}
	return call5(r.sym.hipMemcpyAsync, uintptr(dst), uintptr(src), n, r.d2dKind, uintptr(s))
}

// Memcpy2DAsync implements hip.Runtime (hipMemcpy2DAsync, with the copy
// kind of MemcpyAsync).
func (r *Runtime) Memcpy2DAsync(dst hip.DevicePtr, dpitch uintptr, src hip.DevicePtr, spitch, width, height uintptr, s hip.Stream) error {
	if width == 0 || height == 0 {
		return nil
	}
	return call8(r.sym.hipMemcpy2DAsync, uintptr(dst), dpitch, uintptr(src), spitch, width, height, r.d2dKind, uintptr(s))
}

// scratch holds the out-parameters of hot-path calls, pooled so that the
// launch path does not allocate (a pointer passed to SyscallN escapes).
type scratch struct {
	failIdx uintptr
	status  uint32
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// MemcpyBatchAsync implements hip.Runtime over hipMemcpyBatchAsync (ROCm >=
// 7.1, CUDA 12.8 signature with failIdx). Before ROCm 7.12 the runtime
// refuses numAttrs > 0 (B3), so where Caps().CopyAttributes is false attrs
// and attrIdxs are dropped and the call passes NULL, NULL, 0: the copies
// then run with the runtime's default ordering. The legacy NULL stream and
// a capturing stream are refused here, as CUDA's driver refuses them, so
// the engine sees the same answers on every backend.
func (r *Runtime) MemcpyBatchAsync(dsts, srcs []hip.DevicePtr, sizes []uintptr, attrs []hip.CopyAttributes, attrIdxs []uintptr, s hip.Stream) error {
	if r.sym.hipMemcpyBatchAsync == 0 {
		return hip.ErrNotSupported
	}
	if len(srcs) != len(dsts) || len(sizes) != len(dsts) || len(attrIdxs) != len(attrs) {
		return hip.ErrInvalidValue
	}
	if len(dsts) == 0 {
		return nil
	}
	if s.IsLegacyNull() {
		return hip.ErrInvalidValue
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.status = 0
	if err := call2(r.sym.hipStreamIsCapturing, uintptr(s), uintptr(unsafe.Pointer(&sc.status))); err != nil {
		return err
	}
	if hip.CaptureStatus(sc.status) != hip.CaptureNone {
		return hip.ErrStreamCaptureUnsupported
	}
	sc.failIdx = 0
	if r.caps.CopyAttributes && len(attrs) > 0 {
		return call9(r.sym.hipMemcpyBatchAsync,
			uintptr(unsafe.Pointer(&dsts[0])), uintptr(unsafe.Pointer(&srcs[0])),
			uintptr(unsafe.Pointer(&sizes[0])), uintptr(len(dsts)),
			uintptr(unsafe.Pointer(&attrs[0])), uintptr(unsafe.Pointer(&attrIdxs[0])), uintptr(len(attrs)),
			uintptr(unsafe.Pointer(&sc.failIdx)), uintptr(s))
	}
	return call9(r.sym.hipMemcpyBatchAsync,
		uintptr(unsafe.Pointer(&dsts[0])), uintptr(unsafe.Pointer(&srcs[0])),
		uintptr(unsafe.Pointer(&sizes[0])), uintptr(len(dsts)),
		0, 0, 0,
		uintptr(unsafe.Pointer(&sc.failIdx)), uintptr(s))
}

// StreamBatchMemOp implements hip.Runtime. hipStreamBatchMemOpParams has
// CUDA's 48-byte layout, so ops go to the runtime as they are. Without
// hipStreamBatchMemOp (ROCm < 6.4) each entry becomes one
// hipStreamWaitValue32 (mask 0xFFFFFFFF) or hipStreamWriteValue32 call, in
// order. HIP's wait conditions use CUDA's values (Gte 0, Eq 1, And 2,
// Nor 3); whether HIP's Gte is cyclic like CUDA's is not documented.
func (r *Runtime) StreamBatchMemOp(s hip.Stream, ops []hip.MemOp) error {
	if len(ops) == 0 {
		return nil
	}
	if len(ops) > hip.MaxMemOpsPerBatch {
		return hip.ErrInvalidValue
	}
	if r.sym.hipStreamBatchMemOp != 0 {
		return call4(r.sym.hipStreamBatchMemOp,
			uintptr(s), uintptr(len(ops)), uintptr(unsafe.Pointer(&ops[0])), 0)
	}
	for i := range ops {
		op := &ops[i]
		var err error
		switch op.Op {
		case hip.MemOpWaitValue32:
			err = call5(r.sym.hipStreamWaitValue32,
				uintptr(s), uintptr(op.Addr), uintptr(uint32(op.Value)), uintptr(op.Flags), waitMaskAll)
		case hip.MemOpWriteValue32:
			err = call4(r.sym.hipStreamWriteValue32,
				uintptr(s), uintptr(op.Addr), uintptr(uint32(op.Value)), uintptr(op.Flags))
		default:
			err = hip.ErrInvalidValue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// StreamGetCaptureStatus implements hip.Runtime (same status values as CUDA).
func (r *Runtime) StreamGetCaptureStatus(s hip.Stream) (hip.CaptureStatus, error) {
	var st uint32
	if err := call2(r.sym.hipStreamIsCapturing, uintptr(s), uintptr(unsafe.Pointer(&st))); err != nil {
		return hip.CaptureNone, err
	}
	return hip.CaptureStatus(st), nil
}

// StreamBeginCapture implements hip.Runtime (same mode values as CUDA).
func (r *Runtime) StreamBeginCapture(s hip.Stream, mode hip.CaptureMode) error {
	return call2(r.sym.hipStreamBeginCapture, uintptr(s), uintptr(mode))
}

// StreamEndCapture implements hip.Runtime.
func (r *Runtime) StreamEndCapture(s hip.Stream) (hip.Graph, error) {
	var g uintptr
	if err := call2(r.sym.hipStreamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g))); err != nil {
		return 0, err
	}
	return hip.Graph(g), nil
}

// GraphInstantiate implements hip.Runtime.
func (r *Runtime) GraphInstantiate(g hip.Graph) (hip.GraphExec, error) {
	var x uintptr
	if err := call5(r.sym.hipGraphInstantiate,
		uintptr(unsafe.Pointer(&x)), uintptr(g), 0, 0, 0); err != nil {
		return 0, err
	}
	return hip.GraphExec(x), nil
}

// GraphLaunch implements hip.Runtime.
func (r *Runtime) GraphLaunch(g hip.GraphExec, s hip.Stream) error {
	return call2(r.sym.hipGraphLaunch, uintptr(g), uintptr(s))
}

// GraphDestroy implements hip.Runtime.
func (r *Runtime) GraphDestroy(g hip.Graph) error {
	return call1(r.sym.hipGraphDestroy, uintptr(g))
}

// GraphExecDestroy implements hip.Runtime.
func (r *Runtime) GraphExecDestroy(g hip.GraphExec) error {
	return call1(r.sym.hipGraphExecDestroy, uintptr(g))
}

// MulticastCreate is not supported on AMD (Caps().Multicast is false).
func (r *Runtime) MulticastCreate(members []hip.DevicePtr, size uintptr) (hip.DevicePtr, error) {
	return 0, hip.ErrNotSupported
}

// MulticastDestroy is not supported on AMD.
func (r *Runtime) MulticastDestroy(mc hip.DevicePtr) error { return hip.ErrNotSupported }
