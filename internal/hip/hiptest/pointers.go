package hiptest

import (
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// testPointers: PointerInfo on memory of MemAlloc (device memory of the
// current device, with the allocation's base and size, from any address
// inside it), on Go memory (pageable host memory; device memory on the
// host backend, whose simplification that is) and on a page that was
// just unmapped (PtrUnmapped on every backend); and a PointerCache over
// the same.
func testPointers(e *env) {
	const n = 3 << 20
	p := e.alloc(n)
	for _, q := range []hip.DevicePtr{p, p + n/2, p + n - 1} {
		info, err := e.rt.PointerInfo(q)
		require.NoError(e.t, err, "PointerInfo(MemAlloc+%d)", q-p)
		require.Equal(e.t, hip.PtrDevice, info.Kind, "MemAlloc memory")
		require.Equal(e.t, e.opts.Device, info.Device, "MemAlloc memory's device")
		require.Equal(e.t, p, info.Base, "MemAlloc memory's base")
		require.GreaterOrEqual(e.t, info.Size, uintptr(n), "MemAlloc memory's size")
	}
	_, err := e.rt.PointerInfo(0)
	require.ErrorIs(e.t, err, hip.ErrInvalidValue, "PointerInfo(0)")

	goMem := make([]byte, 4096)
	info, err := e.rt.PointerInfo(hip.DevicePtr(unsafe.Pointer(&goMem[0])))
	require.NoError(e.t, err, "PointerInfo(Go memory)")
	want := hip.PtrHostPageable
	if e.rt.Name() == "host" {
		want = hip.PtrDevice
	}
	require.Equal(e.t, want, info.Kind, "Go memory")
	runtime.KeepAlive(goMem)

	gone := unmappedPage(e)
	info, err = e.rt.PointerInfo(gone)
	require.NoError(e.t, err, "PointerInfo(unmapped)")
	require.Equal(e.t, hip.PtrUnmapped, info.Kind, "an unmapped page")

	var c hip.PointerCache
	for range 2 {
		k, err := c.Check(e.rt, p+4096, n-4096)
		require.NoError(e.t, err, "PointerCache.Check(MemAlloc memory)")
		require.Equal(e.t, hip.PtrDevice, k)
	}
	k, err := c.Check(e.rt, unmappedPage(e), 64)
	require.NoError(e.t, err, "PointerCache.Check(unmapped)")
	require.Equal(e.t, hip.PtrUnmapped, k)
}

// unmappedPage is UnmappedPage for the env's test.
func unmappedPage(e *env) hip.DevicePtr { return UnmappedPage(e.t) }

// UnmappedPage returns the address of a page that is not mapped, and
// stays so until tb ends: a hole unmapped from the middle of three
// PROT_NONE pages, whose neighbours stay reserved. A page merely mapped
// and unmapped again is where the next mapping of the process (the Go
// runtime's own included) tends to land, which made such tests flaky; a
// one-page hole takes only a one-page mapping, which nothing here makes.
func UnmappedPage(tb testing.TB) hip.DevicePtr {
	tb.Helper()
	page := syscall.Getpagesize()
	m, err := syscall.Mmap(-1, 0, 3*page, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(tb, err)
	hole := uintptr(unsafe.Pointer(&m[page]))
	// syscall.Munmap unmaps only whole mappings it made.
	_, _, e := syscall.Syscall(syscall.SYS_MUNMAP, hole, uintptr(page), 0)
	require.Zero(tb, e, "munmap")
	tb.Cleanup(func() { _ = syscall.Munmap(m) })
	return hip.DevicePtr(hole)
}

// testBadAddress: memory that is not accessible fails the call or the
// stream, never the process. Host backend only: on a GPU an illegal
// address during an asynchronous copy leaves the whole context unusable
// (CUDA_ERROR_ILLEGAL_ADDRESS is sticky for every later call), and a
// synchronous copy from unmapped host memory faults inside the driver.
// A synchronous copy or memset reports ErrInvalidValue and leaves nothing
// behind; an asynchronous copy or write-value fails its stream with a
// sticky ErrIllegalAddress (synchronize, query and later enqueues say so)
// and leaves other streams alone; NULL and wrapping ranges are refused at
// the call.
func testBadAddress(e *env) {
	if e.rt.Name() != "host" {
		e.t.Skip("an illegal address would leave a GPU context unusable for the rest of the suite")
	}
	m, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = syscall.Munmap(m) })
	bad := hip.DevicePtr(unsafe.Pointer(&m[0]))
	good := e.zeroed(1 << 20)
	buf := make([]byte, 4096)

	require.ErrorIs(e.t, hip.CopyToDevice(e.rt, bad, buf), hip.ErrInvalidValue, "Memcpy to an inaccessible page")
	require.ErrorIs(e.t, hip.CopyFromDevice(e.rt, buf, bad+100), hip.ErrInvalidValue, "Memcpy from one")
	require.ErrorIs(e.t, hip.CopyFromDevice(e.rt, buf, unmappedPage(e)), hip.ErrInvalidValue, "Memcpy from an unmapped page")
	require.ErrorIs(e.t, e.rt.Memset(bad, 1, 64), hip.ErrInvalidValue, "Memset of an inaccessible page")
	e.write(good, buf) // nothing sticky

	other := e.stream()
	for _, c := range []struct {
		name  string
		issue func(s hip.Stream) error
	}{
		{"copy from", func(s hip.Stream) error { return e.rt.MemcpyAsync(good, bad, 4096, s) }},
		{"copy to", func(s hip.Stream) error { return e.rt.MemcpyAsync(bad, good, 64, s) }},
		{"copy from the first page", func(s hip.Stream) error { return e.rt.MemcpyAsync(good, 8, 64, s) }},
		{"write-value", func(s hip.Stream) error {
			return e.rt.StreamBatchMemOp(s, []hip.MemOp{hip.WriteValue32(bad, 1)})
		}},
	} {
		// Not e.stream(): the env's cleanup synchronizes its streams and
		// expects no error.
		s, err := e.rt.StreamCreate()
		require.NoError(e.t, err)
		require.NoError(e.t, c.issue(s), "%s: the enqueue itself succeeds", c.name)
		e.await(c.name, func() error {
			if err := e.rt.StreamSynchronize(s); !is(err, hip.ErrIllegalAddress) {
				return err
			}
			return nil
		})
		require.ErrorIs(e.t, e.rt.StreamQuery(s), hip.ErrIllegalAddress, "%s: sticky", c.name)
		require.ErrorIs(e.t, e.rt.MemcpyAsync(good+4096, good, 64, s), hip.ErrIllegalAddress, "%s: a later enqueue", c.name)
		require.NoError(e.t, e.rt.StreamDestroy(s))
		e.copyAsync(good+8192, good, 64, other)
		e.sync(other, c.name+": another stream")
	}

	const top = hip.DevicePtr(^uintptr(0))
	require.ErrorIs(e.t, e.rt.MemcpyAsync(good, 0, 64, other), hip.ErrInvalidValue, "copy from NULL")
	require.ErrorIs(e.t, e.rt.MemcpyAsync(good, top-10, 64, other), hip.ErrInvalidValue, "a wrapping copy")
	e.sync(other, "after the refusals")
}
