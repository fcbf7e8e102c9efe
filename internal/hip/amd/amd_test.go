package amd

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

func TestOpenWithoutLibrary(t *testing.T) {
	// No AMD runtime is installed on CI machines; where one is, Open must work.
	rt, err := Open()
	if err == nil {
		require.Equal(t, "amd", rt.Name())
		return
	}
	require.Contains(t, err.Error(), "libamdhip64.so.7")
	require.Contains(t, err.Error(), "libamdhip64.so.6")
	rt2, err2 := Open()
	require.Nil(t, rt2)
	require.Equal(t, err, err2, "Open loads once and caches its answer")
}

func TestOpenLibraryMissingFile(t *testing.T) {
	_, err := OpenLibrary("/nonexistent/libamdhip64.so.7")
	require.Error(t, err)
	require.Contains(t, err.Error(), "/nonexistent/libamdhip64.so.7")
}

func TestRequiredSymbolsResolve(t *testing.T) {
	f := newFake(t, fakeFull)
	rt := f.open()
	for _, e := range rt.sym.symbolTable() {
		// The fake exports every symbol, optional ones included.
		require.NotZero(t, *e.addr, "%s not resolved", e.name)
	}
	require.True(t, rt.sym.hasVMM())
	require.Equal(t, "amd", rt.Name())
}

func TestMissingRequiredSymbolNamesIt(t *testing.T) {
	f := newFake(t, fakeNoWrite32)
	_, err := OpenLibrary(f.path)
	require.Error(t, err)
	require.Contains(t, err.Error(), "hipStreamWriteValue32")
	require.Contains(t, err.Error(), f.path)
}

func TestMissingOptionalBatchCopy(t *testing.T) {
	f := newFake(t, fakeNoBatchCopy)
	f.version(71200000)
	rt := f.open()
	require.False(t, rt.Caps().BatchCopy)
	require.False(t, rt.Caps().CopyAttributes)
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	err = rt.MemcpyBatchAsync([]hip.DevicePtr{1}, []hip.DevicePtr{2}, []uintptr{4}, nil, nil, s)
	require.ErrorIs(t, err, hip.ErrNotSupported)
}

func TestNoDevice(t *testing.T) {
	f := newFake(t, fakeFull)
	f.devices(0)
	_, err := OpenLibrary(f.path)
	require.ErrorIs(t, err, hip.ErrNoDevice)
}

func TestCapsAndCopyKindByVersion(t *testing.T) {
	for _, tc := range []struct {
		version   int
		copyAttrs bool
		kind      int
	}{
		{50700000, false, hipMemcpyDeviceToDevice},
		{60000000, false, hipMemcpyDeviceToDeviceNoCU},
		{70100000, false, hipMemcpyDeviceToDeviceNoCU},
		{70200000, false, hipMemcpyDeviceToDeviceNoCU},
		{71200000, true, hipMemcpyDeviceToDeviceNoCU},
	} {
		t.Run(fmt.Sprint(tc.version), func(t *testing.T) {
			f := newFake(t, fakeFull)
			f.version(tc.version)
			rt := f.open()
			v, err := rt.DriverVersion()
			require.NoError(t, err)
			require.Equal(t, tc.version, v)
			require.Equal(t, hip.Caps{
				BatchCopy:      true,
				CopyAttributes: tc.copyAttrs,
				PeerWriteValue: true,
				Multicast:      false,
				SplitWaitReset: true,
				StreamMemOps:   tc.version >= 70000000,
				PageableBlocks: true,
			}, rt.Caps())

			s, err := rt.StreamCreate()
			require.NoError(t, err)
			src, dst := devBuf(t, rt, 64), devBuf(t, rt, 64)
			require.NoError(t, hip.CopyToDevice(rt, src, []byte("0123456789abcdef")))
			require.Equal(t, "n=16 kind=4", f.last("hipMemcpy"), "synchronous copies use hipMemcpyDefault")
			require.NoError(t, rt.MemcpyAsync(dst, src, 16, s))
			require.Equal(t, fmt.Sprintf("dst=%#x src=%#x n=16 kind=%d stream=%#x", dst, src, tc.kind, s),
				f.last("hipMemcpyAsync"))
			got := make([]byte, 16)
			require.NoError(t, hip.CopyFromDevice(rt, got, dst))
			require.Equal(t, "0123456789abcdef", string(got))
			// Column 1 of a 4x4 byte matrix into 4 contiguous bytes.
			require.NoError(t, rt.Memcpy2DAsync(dst+32, 1, src+1, 4, 1, 4, s))
			require.Equal(t, fmt.Sprintf("dst=%#x dpitch=1 src=%#x spitch=4 width=1 height=4 kind=%d stream=%#x", dst+32, src+1, tc.kind, s),
				f.last("hipMemcpy2DAsync"))
			require.NoError(t, hip.CopyFromDevice(rt, got[:4], dst+32))
			require.Equal(t, "159d", string(got[:4]))
		})
	}
}

// devBuf allocates device memory on the fake and frees it at the end.
func devBuf(t *testing.T, rt *Runtime, n uintptr) hip.DevicePtr {
	t.Helper()
	p, err := rt.MemAlloc(n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.MemFree(p)) })
	return p
}

func TestBatchMemOpLayout(t *testing.T) {
	for _, n := range []int{1, 2, 7, hip.MaxMemOpsPerBatch} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFake(t, fakeFull)
			rt := f.open()
			s, err := rt.StreamCreate()
			require.NoError(t, err)
			buf := devBuf(t, rt, uintptr(4*n))
			ops := make([]hip.MemOp, n)
			want := fmt.Sprintf("stream=%#x count=%d flags=0", s, n)
			for i := range ops {
				addr := buf + hip.DevicePtr(4*i)
				if i%2 == 0 {
					ops[i] = hip.WriteValue32(addr, uint32(1000+i))
					want += fmt.Sprintf(" [2 %#x %d 0 0]", addr, 1000+i)
				} else {
					ops[i] = hip.WaitValue32(addr, uint32(i), hip.WaitEQ)
					want += fmt.Sprintf(" [1 %#x %d 1 0]", addr, i)
				}
			}
			require.NoError(t, rt.StreamBatchMemOp(s, ops))
			require.Equal(t, want, f.last("hipStreamBatchMemOp"))

			// The fake performed the writes at the addresses it decoded.
			got := make([]byte, 4*n)
			require.NoError(t, hip.CopyFromDevice(rt, got, buf))
			for i := 0; i < n; i += 2 {
				require.Equal(t, uint32(1000+i), *(*uint32)(unsafe.Pointer(&got[4*i])))
			}
		})
	}
}

func TestBatchMemOpLimits(t *testing.T) {
	f := newFake(t, fakeFull)
	rt := f.open()
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	buf := devBuf(t, rt, 4)
	require.NoError(t, rt.StreamBatchMemOp(s, nil))
	require.Empty(t, f.last("hipStreamBatchMemOp"), "an empty batch reaches no runtime call")

	ops := make([]hip.MemOp, 300)
	for i := range ops {
		ops[i] = hip.WriteValue32(buf, uint32(i))
	}
	require.ErrorIs(t, rt.StreamBatchMemOp(s, ops), hip.ErrInvalidValue)
	require.NoError(t, hip.BatchMemOps(rt, s, ops))
	require.True(t, strings.HasPrefix(f.last("hipStreamBatchMemOp"), fmt.Sprintf("stream=%#x count=45 ", s)))
}

func TestWaitValue32PassesFullMask(t *testing.T) {
	f := newFake(t, fakeNoBatchMemOp)
	rt := f.open()
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	buf := devBuf(t, rt, 8)
	ops := []hip.MemOp{
		hip.WaitValue32(buf, 7, hip.WaitGEQ),
		hip.WriteValue32(buf+4, 9),
		hip.WaitValue32(buf+4, 9, hip.WaitEQ),
	}
	require.NoError(t, rt.StreamBatchMemOp(s, ops))
	require.Equal(t, fmt.Sprintf("stream=%#x ptr=%#x value=7 flags=0 mask=0xffffffff;stream=%#x ptr=%#x value=9 flags=1 mask=0xffffffff;",
		s, buf, s, buf+4), f.last("hipStreamWaitValue32"))
	require.Equal(t, fmt.Sprintf("stream=%#x ptr=%#x value=9 flags=0;", s, buf+4), f.last("hipStreamWriteValue32"))

	require.ErrorIs(t, rt.StreamBatchMemOp(s, []hip.MemOp{{Op: hip.MemOpInvalid}}), hip.ErrInvalidValue)
}

func TestMemcpyBatchAsync(t *testing.T) {
	attrs := []hip.CopyAttributes{{
		SrcAccessOrder: hip.SrcAccessOrderStream,
		Flags:          hip.CopyFlagPreferOverlapWithCompute,
	}}
	for _, tc := range []struct {
		name    string
		version int
		attrs   []hip.CopyAttributes
		want    string // the record's attribute part
	}{
		{"7.2 drops attrs", 70200000, attrs, "numAttrs=0 attrs=null attrsIdxs=null attr0.order=0 attr0.flags=0"},
		{"7.12 passes attrs", 71200000, attrs, "numAttrs=1 attrs=set attrsIdxs=set attr0.order=1 attr0.flags=1"},
		{"7.12 without attrs", 71200000, nil, "numAttrs=0 attrs=null attrsIdxs=null attr0.order=0 attr0.flags=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, fakeFull)
			f.version(tc.version)
			rt := f.open()
			s, err := rt.StreamCreate()
			require.NoError(t, err)
			a, b := devBuf(t, rt, 64), devBuf(t, rt, 64)
			require.NoError(t, hip.CopyToDevice(rt, a, []byte("abcdefgh")))
			dsts := []hip.DevicePtr{b, b + 8}
			srcs := []hip.DevicePtr{a, a + 4}
			sizes := []uintptr{4, 4}
			var idx []uintptr
			if tc.attrs != nil {
				idx = []uintptr{0}
			}
			require.NoError(t, rt.MemcpyBatchAsync(dsts, srcs, sizes, tc.attrs, idx, s))
			// failIdx in 8th place and the stream in 9th: the 9-argument ABI.
			require.Equal(t, fmt.Sprintf("count=2 %s failIdx=set stream=%#x", tc.want, s),
				f.last("hipMemcpyBatchAsync"))
			got := make([]byte, 12)
			require.NoError(t, hip.CopyFromDevice(rt, got, b))
			require.Equal(t, "abcd\x00\x00\x00\x00efgh", string(got))
		})
	}
}

func TestMemcpyBatchAsyncRefusals(t *testing.T) {
	f := newFake(t, fakeFull)
	rt := f.open()
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	a, b := devBuf(t, rt, 16), devBuf(t, rt, 16)
	one := func(s hip.Stream) error {
		return rt.MemcpyBatchAsync([]hip.DevicePtr{b}, []hip.DevicePtr{a}, []uintptr{8}, nil, nil, s)
	}
	require.ErrorIs(t, one(hip.StreamNull), hip.ErrInvalidValue)
	require.ErrorIs(t, one(hip.StreamLegacy), hip.ErrInvalidValue)
	require.NoError(t, one(hip.StreamPerThread))
	require.ErrorIs(t, rt.MemcpyBatchAsync([]hip.DevicePtr{b}, nil, []uintptr{8}, nil, nil, s), hip.ErrInvalidValue)
	require.NoError(t, rt.MemcpyBatchAsync(nil, nil, nil, nil, nil, s))

	require.NoError(t, rt.StreamBeginCapture(s, hip.CaptureModeRelaxed))
	require.ErrorIs(t, one(s), hip.ErrStreamCaptureUnsupported)
	_, err = rt.StreamEndCapture(s)
	require.NoError(t, err)
	require.NoError(t, one(s))
}

func TestErrorsMapToHipError(t *testing.T) {
	f := newFake(t, fakeFull)
	rt := f.open()
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	e, err := rt.EventCreate(hip.EventDisableTiming)
	require.NoError(t, err)
	for _, tc := range []struct {
		fn   string
		code int
		call func() error
		want hip.Error
	}{
		{"hipStreamQuery", 600, func() error { return rt.StreamQuery(s) }, hip.ErrNotReady},
		{"hipEventQuery", 600, func() error { return rt.EventQuery(e) }, hip.ErrNotReady},
		{"hipStreamCreateWithFlags", 2, func() error { _, err := rt.StreamCreate(); return err }, hip.ErrOutOfMemory},
		{"hipSetDevice", 101, func() error { return rt.SetDevice(0) }, hip.ErrInvalidDevice},
		{"hipStreamBeginCapture", 900, func() error { return rt.StreamBeginCapture(s, hip.CaptureModeGlobal) }, hip.ErrStreamCaptureUnsupported},
		{"hipMemcpyAsync", 1, func() error { return rt.MemcpyAsync(1, 2, 3, s) }, hip.ErrInvalidValue},
		{"hipStreamDestroy", 400, func() error { return rt.StreamDestroy(s) }, hip.ErrInvalidHandle},
		{"hipDeviceSynchronize", 3, rt.DeviceSynchronize, hip.ErrNotInitialized},
		{"hipGraphLaunch", 801, func() error { return rt.GraphLaunch(1, s) }, hip.ErrNotSupported},
		{"hipStreamSynchronize", 1052, func() error { return rt.StreamSynchronize(s) }, hip.Error(1052)},
		{"hipStreamBatchMemOp", 999, func() error {
			return rt.StreamBatchMemOp(s, []hip.MemOp{hip.WaitValue32(8, 1, hip.WaitEQ)})
		}, hip.ErrUnknown},
	} {
		t.Run(fmt.Sprintf("%s=%d", tc.fn, tc.code), func(t *testing.T) {
			f.failNextCall(tc.fn, tc.code)
			err := tc.call()
			require.ErrorIs(t, err, tc.want)
			var he hip.Error
			require.True(t, errors.As(err, &he))
			require.Equal(t, tc.want, he)
		})
	}
	require.Equal(t, "runtime error 1052", hip.Error(1052).Error())
}

func TestDevicesStreamsEventsGraphs(t *testing.T) {
	f := newFake(t, fakeFull)
	rt := f.open()

	n, err := rt.DeviceCount()
	require.NoError(t, err)
	require.Equal(t, 2, n)
	name, err := rt.DeviceName(1)
	require.NoError(t, err)
	require.Equal(t, "Fake AMD GPU 1", name)
	can, err := rt.DeviceCanAccessPeer(0, 1)
	require.NoError(t, err)
	require.True(t, can)
	can, err = rt.DeviceCanAccessPeer(1, 1)
	require.NoError(t, err)
	require.False(t, can)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, rt.SetDevice(1))
	d, err := rt.GetDevice()
	require.NoError(t, err)
	require.Equal(t, 1, d)
	require.ErrorIs(t, rt.SetDevice(5), hip.ErrInvalidDevice)
	require.NoError(t, rt.SetDevice(0))
	require.NoError(t, rt.DeviceSynchronize())

	s, err := rt.StreamCreate()
	require.NoError(t, err)
	require.Equal(t, "flags=1", f.last("hipStreamCreateWithFlags"), "streams are non-blocking")
	e0, err := rt.EventCreate(hip.EventDefault)
	require.NoError(t, err)
	e1, err := rt.EventCreate(hip.EventBlockingSync | hip.EventDisableTiming)
	require.NoError(t, err)
	require.Equal(t, "flags=3", f.last("hipEventCreateWithFlags"))
	require.NoError(t, rt.EventRecord(e0, s))
	require.Equal(t, fmt.Sprintf("event=%#x stream=%#x", e0, s), f.last("hipEventRecord"))
	require.NoError(t, rt.StreamWaitEvent(s, e0))
	require.Equal(t, fmt.Sprintf("stream=%#x event=%#x flags=0", s, e0), f.last("hipStreamWaitEvent"))
	require.NoError(t, rt.EventSynchronize(e0))
	require.NoError(t, rt.EventQuery(e0))
	ms, err := rt.EventElapsedTime(e0, e1)
	require.NoError(t, err)
	require.Equal(t, float32(1.5), ms)
	require.NoError(t, rt.StreamQuery(s))
	require.NoError(t, rt.StreamSynchronize(s))

	st, err := rt.StreamGetCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, hip.CaptureNone, st)
	require.NoError(t, rt.StreamBeginCapture(s, hip.CaptureModeThreadLocal))
	require.Equal(t, fmt.Sprintf("stream=%#x mode=1", s), f.last("hipStreamBeginCapture"))
	st, err = rt.StreamGetCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, hip.CaptureActive, st)
	g, err := rt.StreamEndCapture(s)
	require.NoError(t, err)
	require.NotZero(t, g)
	x, err := rt.GraphInstantiate(g)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("graph=%#x errNode=(nil) log=(nil) logSize=0", g), f.last("hipGraphInstantiate"))
	require.NoError(t, rt.GraphLaunch(x, s))
	require.Equal(t, fmt.Sprintf("exec=%#x stream=%#x", x, s), f.last("hipGraphLaunch"))
	require.NoError(t, rt.GraphExecDestroy(x))
	require.NoError(t, rt.GraphDestroy(g))

	require.NoError(t, rt.EventDestroy(e0))
	require.NoError(t, rt.EventDestroy(e1))
	require.NoError(t, rt.StreamDestroy(s))

	_, err = rt.MulticastCreate([]hip.DevicePtr{1}, 4096)
	require.ErrorIs(t, err, hip.ErrNotSupported)
	require.ErrorIs(t, rt.MulticastDestroy(1), hip.ErrNotSupported)
}

func TestMemoryVMM(t *testing.T) {
	f := newFake(t, fakeFull)
	rt := f.open()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, rt.SetDevice(1))
	defer func() { require.NoError(t, rt.SetDevice(0)) }()

	p, err := rt.MemAlloc(1000)
	require.NoError(t, err)
	// hipMemAllocationProp: pinned, POSIX fd, device 1; RECOMMENDED granularity.
	require.Equal(t, "type=1 handleTypes=1 loc=1:1 option=1", f.last("hipMemGetAllocationGranularity"))
	require.Equal(t, "size=65536 type=1 handleTypes=1 loc=1:1 flags=0", f.last("hipMemCreate"))
	require.Equal(t, "size=65536 align=65536 addr=(nil) flags=0", f.last("hipMemAddressReserve"))
	// hipMemAccessDesc entries (12 bytes): read-write for device 0 (a peer) and 1 (own).
	require.Equal(t, "size=65536 count=2 [1:0 3] [1:1 3]", f.last("hipMemSetAccess"))

	require.NoError(t, rt.Memset(p, 0xab, 16))
	require.Equal(t, "stream=(nil)", f.last("hipStreamSynchronize"), "Memset waits for the NULL stream")
	require.NoError(t, hip.CopyToDevice(rt, p+16, []byte("vmm!")))
	base, size, err := rt.MemGetAddressRange(p + 100)
	require.NoError(t, err)
	require.Equal(t, p, base)
	require.Equal(t, uintptr(65536), size)

	fd, err := rt.MemExport(p)
	require.NoError(t, err)
	require.Equal(t, "type=1 flags=0", f.last("hipMemExportToShareableHandle"))
	q, err := rt.MemImport(fd, 1000)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("fd=%d type=1", fd), f.last("hipMemImportFromShareableHandle"))
	require.NoError(t, syscall.Close(fd))
	require.NotEqual(t, p, q)
	got := make([]byte, 20)
	require.NoError(t, hip.CopyFromDevice(rt, got, q))
	require.Equal(t, append(bytesOf(0xab, 16), "vmm!"...), got, "the import maps the same memory")

	require.NoError(t, rt.MemFree(q))
	require.NoError(t, rt.MemFree(p))
	require.ErrorIs(t, rt.MemFree(p), hip.ErrInvalidValue)
	_, err = rt.MemExport(p)
	require.ErrorIs(t, err, hip.ErrInvalidValue)
	_, err = rt.MemAlloc(0)
	require.ErrorIs(t, err, hip.ErrInvalidValue)
}

func bytesOf(b byte, n int) []byte {
	s := make([]byte, n)
	for i := range s {
		s[i] = b
	}
	return s
}

func TestMemoryVMMUnwindsOnFailure(t *testing.T) {
	f := newFake(t, fakeFull)
	rt := f.open()
	f.failNextCall("hipMemMap", 2)
	_, err := rt.MemAlloc(4096)
	require.ErrorIs(t, err, hip.ErrOutOfMemory)
	require.Contains(t, err.Error(), "hipMemMap")
	require.Empty(t, rt.allocs)
}

func TestMemoryFallbackWithoutVMM(t *testing.T) {
	f := newFake(t, fakeFull)
	f.vmm(false)
	rt := f.open()
	require.Contains(t, f.last("hipDeviceGetAttribute"), "attr=89")

	p, err := rt.MemAlloc(5000)
	require.NoError(t, err)
	require.Equal(t, "size=5000 flags=0x1 dev=0", f.last("hipExtMallocWithFlags"))
	// Device 1 may access device 0's memory; the current device is restored.
	require.Equal(t, "1->0 flags=0;", f.last("hipDeviceEnablePeerAccess"))
	d, err := rt.GetDevice()
	require.NoError(t, err)
	require.Equal(t, 0, d)

	p2, err := rt.MemAlloc(64)
	require.NoError(t, err)
	require.Equal(t, "1->0 flags=0;", f.last("hipDeviceEnablePeerAccess"), "a pair is enabled once")

	_, err = rt.MemExport(p)
	require.ErrorIs(t, err, hip.ErrNotSupported)
	_, err = rt.MemImport(3, 4096)
	require.ErrorIs(t, err, hip.ErrNotSupported)
	base, size, err := rt.MemGetAddressRange(p + 4999)
	require.NoError(t, err)
	require.Equal(t, p, base)
	require.Equal(t, uintptr(5000), size)
	require.NoError(t, rt.MemFree(p))
	require.NoError(t, rt.MemFree(p2))
}

func TestLaunchPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	f := newFake(t, fakeFull)
	rt := f.open()
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	a, b := devBuf(t, rt, 64), devBuf(t, rt, 64)
	ops := []hip.MemOp{hip.WriteValue32(a, 1), hip.WaitValue32(a, 1, hip.WaitEQ)}
	dsts, srcs, sizes := []hip.DevicePtr{b}, []hip.DevicePtr{a}, []uintptr{8}
	for name, fn := range map[string]func(){
		"StreamBatchMemOp": func() { _ = rt.StreamBatchMemOp(s, ops) },
		"MemcpyAsync":      func() { _ = rt.MemcpyAsync(b, a, 8, s) },
		"MemcpyBatchAsync": func() { _ = rt.MemcpyBatchAsync(dsts, srcs, sizes, nil, nil, s) },
		"StreamQuery":      func() { _ = rt.StreamQuery(s) },
		"ErrNotReady":      func() { _ = toError(600) },
	} {
		require.Zero(t, testing.AllocsPerRun(100, fn), name)
	}
}

func TestConcurrentUse(t *testing.T) {
	f := newFake(t, fakeFull)
	rt := f.open()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := rt.StreamCreate()
			if err != nil {
				errs <- err
				return
			}
			for range 50 {
				p, err := rt.MemAlloc(128)
				if err != nil {
					errs <- err
					return
				}
				ops := []hip.MemOp{hip.WriteValue32(p, 1), hip.WaitValue32(p, 1, hip.WaitEQ)}
				if err := rt.StreamBatchMemOp(s, ops); err != nil {
					errs <- err
				}
				if _, _, err := rt.MemGetAddressRange(p + 8); err != nil {
					errs <- err
				}
				if err := rt.MemFree(p); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
