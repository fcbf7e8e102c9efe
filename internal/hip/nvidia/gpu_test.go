package nvidia

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/testutil"
)

// openGPU returns the process's runtime, or skips where libcuda.so.1 or a
// device is missing (this machine and CI).
func openGPU(tb testing.TB) *Runtime {
	tb.Helper()
	r, err := Open()
	if err != nil {
		tb.Skipf("no NVIDIA GPU here: %v", err)
	}
	runtime.LockOSThread()
	tb.Cleanup(runtime.UnlockOSThread)
	require.NoError(tb, r.SetDevice(0))
	return r
}

var watchdog = testutil.Watchdog

func alloc(tb testing.TB, r *Runtime, n uintptr) hip.DevicePtr {
	tb.Helper()
	p, err := r.MemAlloc(n)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, r.MemFree(p)) })
	return p
}

func stream(tb testing.TB, r *Runtime) hip.Stream {
	tb.Helper()
	s, err := r.StreamCreate()
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, r.StreamDestroy(s)) })
	return s
}

func readU32(tb testing.TB, r *Runtime, p hip.DevicePtr) uint32 {
	tb.Helper()
	b := make([]byte, 4)
	require.NoError(tb, hip.CopyFromDevice(r, b, p))
	return *(*uint32)(unsafe.Pointer(&b[0]))
}

func TestGPUOpen(t *testing.T) {
	r := openGPU(t)
	v, err := r.DriverVersion()
	require.NoError(t, err)
	n, err := r.DeviceCount()
	require.NoError(t, err)
	name, err := r.DeviceName(0)
	require.NoError(t, err)
	dev, err := r.GetDevice()
	require.NoError(t, err)
	require.Equal(t, 0, dev)
	ok, err := r.DeviceCanAccessPeer(0, 0)
	require.NoError(t, err)
	require.True(t, ok)
	c := r.Caps()
	t.Logf("driver %d, %d device(s), %q, caps %+v", v, n, name, c)
	require.Equal(t, v >= 12080, c.BatchCopy)
	require.Equal(t, v < 13010, c.PeerWriteValue)
	require.False(t, c.Multicast)
	r2, err := Open()
	require.NoError(t, err)
	require.Same(t, r, r2, "the library is loaded once")
}

func TestGPUMemory(t *testing.T) {
	r := openGPU(t)
	watchdog(t, 60*time.Second)
	p := alloc(t, r, 3<<20)
	base, size, err := r.MemGetAddressRange(p + 12345)
	require.NoError(t, err)
	require.Equal(t, p, base)
	require.GreaterOrEqual(t, size, uintptr(3<<20))
	require.Zero(t, size%(2<<20), "granularity multiple")

	// Pageable Go memory both ways, and Memset visible at once.
	src := make([]byte, 3<<20)
	_, _ = rand.Read(src)
	require.NoError(t, hip.CopyToDevice(r, p, src))
	got := make([]byte, len(src))
	require.NoError(t, hip.CopyFromDevice(r, got, p))
	require.Equal(t, src, got)
	require.NoError(t, r.Memset(p+1, 0x5a, 100))
	require.NoError(t, hip.CopyFromDevice(r, got[:200], p))
	require.Equal(t, src[0], got[0])
	for i := 1; i <= 100; i++ {
		require.Equal(t, byte(0x5a), got[i])
	}
	require.Equal(t, src[101:200], got[101:200])
	require.ErrorIs(t, r.MemFree(p+1), hip.ErrInvalidValue)
}

// TestGPUWriteWaitAcrossStreams: stream a waits for a flag that stream b
// writes, then raises a second flag; the host sees the second flag.
func TestGPUWriteWaitAcrossStreams(t *testing.T) {
	r := openGPU(t)
	watchdog(t, 60*time.Second)
	p := alloc(t, r, 4096)
	require.NoError(t, r.Memset(p, 0, 4096))
	a, b := stream(t, r), stream(t, r)
	require.NoError(t, r.StreamBatchMemOp(a, []hip.MemOp{
		hip.WaitValue32(p, 41, hip.WaitEQ),
		hip.WriteValue32(p+64, 42),
	}))
	time.Sleep(10 * time.Millisecond)
	parked := r.StreamQuery(a)
	// Release before asserting, so that a failure leaves no stream parked.
	require.NoError(t, r.StreamBatchMemOp(b, []hip.MemOp{hip.WriteValue32(p, 41)}))
	require.ErrorIs(t, parked, hip.ErrNotReady, "a must be parked on the flag")
	require.NoError(t, r.StreamSynchronize(a))
	require.NoError(t, r.StreamQuery(a))
	require.Equal(t, uint32(42), readU32(t, r, p+64))

	// Events order streams too.
	e, err := r.EventCreate(hip.EventDisableTiming)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.EventDestroy(e)) }()
	require.NoError(t, r.StreamBatchMemOp(b, []hip.MemOp{hip.WriteValue32(p+128, 7)}))
	require.NoError(t, r.EventRecord(e, b))
	require.NoError(t, r.StreamWaitEvent(a, e))
	require.NoError(t, r.StreamBatchMemOp(a, []hip.MemOp{hip.WaitValue32(p+128, 7, hip.WaitEQ)}))
	require.NoError(t, r.StreamSynchronize(a))
	require.NoError(t, r.EventSynchronize(e))
	require.NoError(t, r.EventQuery(e))
}

func TestGPUBatchCopy(t *testing.T) {
	r := openGPU(t)
	if !r.Caps().BatchCopy {
		t.Skip("driver has no batched copy")
	}
	watchdog(t, 60*time.Second)
	const n = 8
	sizes := []uintptr{1, 7, 4096, 65536 + 3, 1 << 20, 333, 2 << 20, 12}
	var total uintptr
	for _, s := range sizes {
		total += s
	}
	src, dst := alloc(t, r, total), alloc(t, r, total)
	data := make([]byte, total)
	_, _ = rand.Read(data)
	require.NoError(t, hip.CopyToDevice(r, src, data))
	s := stream(t, r)
	for _, attrs := range [][]hip.CopyAttributes{nil, {{SrcAccessOrder: hip.SrcAccessOrderStream, Flags: hip.CopyFlagPreferOverlapWithCompute}}} {
		require.NoError(t, r.Memset(dst, 0xab, total))
		dsts, srcs := make([]hip.DevicePtr, n), make([]hip.DevicePtr, n)
		var off uintptr
		for i := range n {
			// Copy i goes to the mirrored slot so that a wrong pairing shows.
			dsts[i], srcs[i] = dst+hip.DevicePtr(off), src+hip.DevicePtr(off)
			off += sizes[i]
		}
		var idx []uintptr
		if attrs != nil {
			idx = []uintptr{0}
		}
		require.NoError(t, r.MemcpyBatchAsync(dsts, srcs, sizes, attrs, idx, s))
		require.NoError(t, r.StreamSynchronize(s))
		got := make([]byte, total)
		require.NoError(t, hip.CopyFromDevice(r, got, dst))
		require.Equal(t, data, got)
	}
	require.ErrorIs(t, r.MemcpyBatchAsync([]hip.DevicePtr{dst}, nil, nil, nil, nil, s), hip.ErrInvalidValue)
}

func TestGPUErrorCodes(t *testing.T) {
	r := openGPU(t)
	watchdog(t, 60*time.Second)
	p := alloc(t, r, 4096)
	s := stream(t, r)
	one := []hip.DevicePtr{p}
	if r.Caps().BatchCopy {
		err := r.MemcpyBatchAsync([]hip.DevicePtr{p + 2048}, one, []uintptr{64}, nil, nil, hip.StreamNull)
		require.Equal(t, hip.ErrInvalidValue, err, "legacy NULL stream")
		require.NoError(t, r.MemcpyBatchAsync([]hip.DevicePtr{p + 2048}, one, []uintptr{64}, nil, nil, hip.StreamPerThread))
		require.NoError(t, r.StreamSynchronize(hip.StreamPerThread))

		require.NoError(t, r.StreamBeginCapture(s, hip.CaptureModeThreadLocal))
		st, err := r.StreamGetCaptureStatus(s)
		require.NoError(t, err)
		require.Equal(t, hip.CaptureActive, st)
		err = r.MemcpyBatchAsync([]hip.DevicePtr{p + 2048}, one, []uintptr{64}, nil, nil, s)
		require.Equal(t, hip.ErrStreamCaptureUnsupported, err)
		g, err := r.StreamEndCapture(s)
		t.Logf("EndCapture after a refused batch: %v", err)
		if err == nil && g != 0 {
			require.NoError(t, r.GraphDestroy(g))
		}
	}
	ops := make([]hip.MemOp, 256)
	for i := range ops {
		ops[i] = hip.WriteValue32(p+hip.DevicePtr(4*(i%16)), 1)
	}
	require.Equal(t, hip.ErrInvalidValue, r.StreamBatchMemOp(s, ops), "256 entries")
	require.NoError(t, r.StreamBatchMemOp(s, ops[:255]))
	require.NoError(t, hip.BatchMemOps(r, s, ops))
	require.NoError(t, r.StreamSynchronize(s))
}

func TestGPUCaptureReplay(t *testing.T) {
	r := openGPU(t)
	watchdog(t, 60*time.Second)
	p := alloc(t, r, 1<<20)
	s := stream(t, r)
	data := make([]byte, 4096)
	_, _ = rand.Read(data)
	require.NoError(t, hip.CopyToDevice(r, p, data))
	require.NoError(t, r.StreamBeginCapture(s, hip.CaptureModeThreadLocal))
	require.NoError(t, r.MemcpyAsync(p+8192, p, 4096, s))
	require.NoError(t, r.StreamBatchMemOp(s, []hip.MemOp{hip.WriteValue32(p+65536, 7)}))
	g, err := r.StreamEndCapture(s)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.GraphDestroy(g)) }()
	st, err := r.StreamGetCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, hip.CaptureNone, st)
	x, err := r.GraphInstantiate(g)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.GraphExecDestroy(x)) }()
	for range 3 {
		require.NoError(t, r.Memset(p+8192, 0, 4096))
		require.NoError(t, r.Memset(p+65536, 0, 4))
		require.NoError(t, r.GraphLaunch(x, s))
		require.NoError(t, r.StreamSynchronize(s))
		require.Equal(t, uint32(7), readU32(t, r, p+65536))
		got := make([]byte, 4096)
		require.NoError(t, hip.CopyFromDevice(r, got, p+8192))
		require.Equal(t, data, got)
	}
}

func TestGPUEventTiming(t *testing.T) {
	r := openGPU(t)
	watchdog(t, 60*time.Second)
	s := stream(t, r)
	p := alloc(t, r, 64<<20)
	a, err := r.EventCreate(hip.EventDefault)
	require.NoError(t, err)
	b, err := r.EventCreate(hip.EventDefault)
	require.NoError(t, err)
	require.NoError(t, r.EventRecord(a, s))
	require.NoError(t, r.MemcpyAsync(p+32<<20, p, 32<<20, s))
	require.NoError(t, r.EventRecord(b, s))
	require.NoError(t, r.EventSynchronize(b))
	ms, err := r.EventElapsedTime(a, b)
	require.NoError(t, err)
	require.Greater(t, ms, float32(0))
	require.NoError(t, r.EventDestroy(a))
	require.NoError(t, r.EventDestroy(b))
}

// TestGPULaunchPathAllocs: the calls the engine makes per collective
// allocate nothing.
func TestGPULaunchPathAllocs(t *testing.T) {
	r := openGPU(t)
	watchdog(t, 60*time.Second)
	p := alloc(t, r, 1<<20)
	require.NoError(t, r.Memset(p, 0, 1<<20))
	s := stream(t, r)
	e, err := r.EventCreate(hip.EventDisableTiming)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.EventDestroy(e)) }()
	ops := benchOps(p)
	dsts, srcs, sizes := batchArgs(p, 4096)
	attrs := []hip.CopyAttributes{{SrcAccessOrder: hip.SrcAccessOrderStream, Flags: hip.CopyFlagPreferOverlapWithCompute}}
	idx := []uintptr{0}
	cases := map[string]func(){
		"StreamBatchMemOp": func() { _ = r.StreamBatchMemOp(s, ops) },
		"MemcpyAsync":      func() { _ = r.MemcpyAsync(dsts[0], srcs[0], 4096, s) },
		"Memcpy2DAsync":    func() { _ = r.Memcpy2DAsync(dsts[0], 64, srcs[0], 256, 64, 4, s) },
		"EventRecord":      func() { _ = r.EventRecord(e, s) },
		"StreamWaitEvent":  func() { _ = r.StreamWaitEvent(s, e) },
		"StreamGetCaptureStatus": func() {
			_, _ = r.StreamGetCaptureStatus(s)
		},
	}
	if r.Caps().BatchCopy {
		cases["MemcpyBatchAsync"] = func() { _ = r.MemcpyBatchAsync(dsts, srcs, sizes, attrs, idx, s) }
	}
	for name, f := range cases {
		f()
		require.Zero(t, testing.AllocsPerRun(200, f), name)
		require.NoError(t, r.StreamSynchronize(s))
	}
}

// benchOps is 4 writes of values already in place and 4 waits that hold.
func benchOps(p hip.DevicePtr) []hip.MemOp {
	ops := make([]hip.MemOp, 0, 8)
	for i := range 4 {
		ops = append(ops, hip.WriteValue32(p+hip.DevicePtr(4*i), 0))
	}
	for i := range 4 {
		ops = append(ops, hip.WaitValue32(p+hip.DevicePtr(4*i), 0, hip.WaitEQ))
	}
	return ops
}

// batchArgs is 8 copies of n bytes from p+64K.. to p+64K+8n...
func batchArgs(p hip.DevicePtr, n uintptr) (dsts, srcs []hip.DevicePtr, sizes []uintptr) {
	for i := range 8 {
		srcs = append(srcs, p+65536+hip.DevicePtr(uintptr(i)*n))
		dsts = append(dsts, p+65536+hip.DevicePtr(uintptr(8+i)*n))
		sizes = append(sizes, n)
	}
	return dsts, srcs, sizes
}

const childEnv = "CECOLL_NVIDIA_IMPORT_CHILD"

// TestGPUExportImport: a child process imports the parent's allocation
// through a POSIX fd, checks the data and releases the parent's wait with
// a write-value into the shared mapping.
func TestGPUExportImport(t *testing.T) {
	if v := os.Getenv(childEnv); v != "" {
		importChild(t, v)
		return
	}
	r := openGPU(t)
	watchdog(t, 90*time.Second)
	const size = 2 << 20
	p := alloc(t, r, size)
	data := make([]byte, 4096)
	_, _ = rand.Read(data)
	require.NoError(t, hip.CopyToDevice(r, p, data))
	require.NoError(t, r.Memset(p+8192, 0, 4))
	fd, err := r.MemExport(p)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "vmm")
	defer f.Close()

	s := stream(t, r)
	require.NoError(t, r.StreamBatchMemOp(s, []hip.MemOp{hip.WaitValue32(p+8192, 99, hip.WaitEQ)}))

	want := fmt.Sprintf("%d:%x", size, data[:64])
	cmd := exec.Command(os.Args[0], "-test.run=^TestGPUExportImport$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+want)
	cmd.ExtraFiles = []*os.File{f} // fd 3 in the child
	out, err := cmd.CombinedOutput()
	if err != nil {
		// Release our wait ourselves so that no stream stays parked.
		_ = r.StreamBatchMemOp(stream(t, r), []hip.MemOp{hip.WriteValue32(p+8192, 99)})
		_ = r.StreamSynchronize(s)
	}
	require.NoError(t, err, "child:\n%s", out)
	require.NoError(t, r.StreamSynchronize(s), "the child's write released the wait")
	require.Equal(t, uint32(99), readU32(t, r, p+8192))
}

func importChild(t *testing.T, want string) {
	r := openGPU(t)
	watchdog(t, 60*time.Second)
	var size uintptr
	var head string
	_, err := fmt.Sscanf(want, "%d:%s", &size, &head)
	require.NoError(t, err)
	p, err := r.MemImport(3, size)
	require.NoError(t, err)
	got := make([]byte, 64)
	require.NoError(t, hip.CopyFromDevice(r, got, p))
	require.Equal(t, head, fmt.Sprintf("%x", got))
	s := stream(t, r)
	require.NoError(t, r.StreamBatchMemOp(s, []hip.MemOp{hip.WriteValue32(p+8192, 99)}))
	require.NoError(t, r.StreamSynchronize(s))
	require.NoError(t, r.MemFree(p))
	t.Log("child imported " + strconv.Itoa(int(size)) + " bytes")
}
