package host

import (
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/hiptest"
	"cecoll/internal/memfd"
)

// unmapped returns the address of a page that is not mapped (a copy of
// any length from or to it faults at its first byte).
func unmapped(t *testing.T) uintptr { return uintptr(hiptest.UnmappedPage(t)) }

// pastEOF returns an address inside a shared file mapping but past the
// end of its file: touching it raises SIGBUS, not SIGSEGV.
func pastEOF(t *testing.T) uintptr {
	t.Helper()
	fd, err := memfd.Create("cecoll-test", int64(pageSize))
	require.NoError(t, err)
	m, err := syscall.Mmap(fd, 0, int(2*pageSize), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	syscall.Close(fd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	return uintptr(unsafe.Pointer(&m[0])) + pageSize
}

// TestFaultPrimitives checks that the runtime really turns faults in
// runtime.memmove (copy), in the byte loop of a memset and in atomic
// loads and stores into recoverable panics, for an munmap'ed region,
// address 1 (first page: the runtime's nil-dereference path), and SIGBUS
// past the end of a file mapping; and that a caller's own SetPanicOnFault
// setting survives.
func TestFaultPrimitives(t *testing.T) {
	rt := newRT(t, Config{})
	good := uintptr(alloc(t, rt, 1<<20))
	bus := pastEOF(t)
	for _, c := range []struct {
		name string
		bad  func() uintptr
	}{
		{"munmapped", func() uintptr { return unmapped(t) }},
		{"address-1", func() uintptr { return 1 }},
		{"sigbus", func() uintptr { return bus }},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, n := range []uintptr{4, 7, 4096, 1 << 20} {
				if c.name == "sigbus" && n > pageSize {
					n = pageSize
				}
				require.False(t, rt.tryCopy(good, c.bad(), n), "copy %d bytes from it", n)
				require.False(t, rt.tryCopy(c.bad(), good, n), "copy %d bytes to it", n)
				require.False(t, rt.tryMemset(c.bad(), 1, n), "memset %d bytes", n)
			}
			w := c.bad() &^ 3
			if w == 0 {
				w = 4
			}
			_, ok := loadWord(w)
			require.False(t, ok, "load")
			if c.name == "munmapped" {
				w = unmapped(t)
			}
			require.False(t, rt.tryWrite(w, 1), "write-value")
		})
	}
	require.True(t, rt.tryCopy(good+8, good, 64))
	require.True(t, rt.tryWrite(good, 7))
	v, ok := loadWord(good)
	require.True(t, ok)
	require.Equal(t, uint32(7), v)

	// The goroutine's own setting is restored, on success and on a fault.
	require.False(t, debug.SetPanicOnFault(false), "the test goroutine starts with the default")
	require.False(t, rt.tryCopy(good, unmapped(t), 8))
	require.False(t, debug.SetPanicOnFault(true), "restored after a fault")
	require.False(t, rt.tryCopy(good, unmapped(t), 8))
	require.True(t, debug.SetPanicOnFault(false), "a caller's true is restored too")
}

// A panic that is not a memory fault is not swallowed.
func TestFaultOtherPanic(t *testing.T) {
	require.False(t, isFault("boom"))
	var s []int
	i := 3
	func() {
		defer func() {
			r := recover()
			require.NotNil(t, r)
			require.False(t, isFault(r), "index out of range is no fault")
		}()
		_ = s[i]
	}()
}

func TestWraps(t *testing.T) {
	const top = ^uintptr(0)
	require.False(t, wraps(0x1000, 0))
	require.False(t, wraps(top, 1))
	require.True(t, wraps(top, 2))
	require.True(t, wraps(0x1000, top))
	require.False(t, wraps2D(0x1000, 64, 8, 4))
	require.True(t, wraps2D(0x1000, top/2, 8, 4), "height*pitch overflows")
	require.True(t, wraps2D(top-50, 64, 8, 2))
	require.False(t, wraps2D(top-71, 64, 8, 2))
	require.True(t, wraps2D(top-70, 64, 8, 2))
}

// protNone returns n bytes of address space that stay mapped for the test
// but cannot be accessed: every access faults, deterministically, also
// from ops that run later (a hole left by munmap may be mapped again by
// the time a worker gets to it).
func protNone(t *testing.T, n uintptr) hip.DevicePtr {
	t.Helper()
	m, err := syscall.Mmap(-1, 0, int(roundPage(n)), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	return hip.DevicePtr(unsafe.Pointer(&m[0]))
}

// faultModes are the execution paths a faulting op can take: inline on the
// enqueuing thread (when it can), the stream workers only, and chaos
// (workers only, split and shuffled copies).
var faultModes = []struct {
	name string
	cfg  Config
}{
	{"inline", Config{}},
	{"worker-only", Config{NoInline: true}},
	{"chaos", Config{Chaos: 11}},
}

// faultKinds are the asynchronous ops that touch memory, each issued with
// one bad address; they use the first 4 MiB at good. small: the op
// completes at once, so with inline execution on it runs on the enqueuing
// thread.
var faultKinds = []struct {
	name  string
	small bool
	issue func(rt *Runtime, s hip.Stream, good, bad hip.DevicePtr) error
}{
	{"copy-from", true, func(rt *Runtime, s hip.Stream, good, bad hip.DevicePtr) error {
		return rt.MemcpyAsync(good, bad, 256, s)
	}},
	{"copy-to", true, func(rt *Runtime, s hip.Stream, good, bad hip.DevicePtr) error {
		return rt.MemcpyAsync(bad, good, 256, s)
	}},
	{"copy-large", false, func(rt *Runtime, s hip.Stream, good, bad hip.DevicePtr) error {
		return rt.MemcpyAsync(good, bad, 1<<20, s)
	}},
	{"batch", true, func(rt *Runtime, s hip.Stream, good, bad hip.DevicePtr) error {
		return rt.MemcpyBatchAsync([]hip.DevicePtr{good, bad, good + 4096}, []hip.DevicePtr{good + 8192, good + 8192, good + 8192},
			[]uintptr{64, 64, 64}, nil, nil, s)
	}},
	{"batch-large", false, func(rt *Runtime, s hip.Stream, good, bad hip.DevicePtr) error {
		// 2 MiB in four pieces: shared with the copy engines.
		const piece = 512 << 10
		return rt.MemcpyBatchAsync(
			[]hip.DevicePtr{good, good + piece, good + 2*piece, good + 3*piece},
			[]hip.DevicePtr{good + 4*piece, good + 5*piece, bad, good + 6*piece},
			[]uintptr{piece, piece, piece, piece}, nil, nil, s)
	}},
	{"copy-2d", true, func(rt *Runtime, s hip.Stream, good, bad hip.DevicePtr) error {
		return rt.Memcpy2DAsync(good, 128, bad, 256, 64, 8, s)
	}},
	{"write-value", true, func(rt *Runtime, s hip.Stream, good, bad hip.DevicePtr) error {
		return rt.StreamBatchMemOp(s, []hip.MemOp{write(bad&^3, 1)})
	}},
	{"wait-value", true, func(rt *Runtime, s hip.Stream, good, bad hip.DevicePtr) error {
		return rt.StreamBatchMemOp(s, []hip.MemOp{wait(bad&^3, 1, hip.WaitEQ)})
	}},
}

// enqueuedOrFailed accepts an enqueue on a stream that may already have
// failed (the faulting op may have run inline, or on the worker already):
// it reports whether the op was enqueued.
func enqueuedOrFailed(t *testing.T, err error, what string) bool {
	t.Helper()
	if err == nil {
		return true
	}
	require.ErrorIs(t, err, hip.ErrIllegalAddress, what)
	return false
}

// TestFaultAsync: every asynchronous op kind, with an address that is not
// accessible (a PROT_NONE mapping) and one in the first page, inline, on
// the workers and under chaos. The op fails its stream instead of killing
// the process: the work before it is done, the work queued after it is
// dropped (a flag write does not happen, a wait that never holds does not
// hang), and synchronize, query, later enqueues, events recorded after it
// and DeviceSynchronize report ErrIllegalAddress; events recorded before
// it and other streams are unaffected.
func TestFaultAsync(t *testing.T) {
	for _, mode := range faultModes {
		t.Run(mode.name, func(t *testing.T) {
			for _, badName := range []string{"prot-none", "first-page"} {
				for _, kind := range faultKinds {
					t.Run(badName+"/"+kind.name, func(t *testing.T) {
						rt := newRT(t, mode.cfg)
						good := alloc(t, rt, 8<<20)
						bad := hip.DevicePtr(8)
						if badName == "prot-none" {
							bad = protNone(t, 2<<20) + 4096
						}
						s, other := newStream(t, rt), newStream(t, rt)
						before, after := newEvent(t, rt, hip.EventDefault), newEvent(t, rt, hip.EventDefault)
						pre, out := good+5<<20, good+7<<20
						flag, never := out+8192, out+8196
						fill(mem(pre, 4096), 3)

						require.NoError(t, rt.MemcpyAsync(out, pre, 4096, s))
						require.NoError(t, rt.EventRecord(before, s))
						require.NoError(t, kind.issue(rt, s, good, bad))
						if rt.inline && kind.small {
							require.ErrorIs(t, rt.StreamQuery(s), hip.ErrIllegalAddress, "ran inline: failed before the call returned")
						}
						enqueuedOrFailed(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(flag, 7), wait(never, 1, hip.WaitEQ)}), "memops after the fault")
						recorded := enqueuedOrFailed(t, rt.EventRecord(after, s), "record after the fault")

						require.ErrorIs(t, rt.StreamSynchronize(s), hip.ErrIllegalAddress)
						require.ErrorIs(t, rt.StreamQuery(s), hip.ErrIllegalAddress)
						require.ErrorIs(t, rt.MemcpyAsync(good, good+4096, 64, s), hip.ErrIllegalAddress, "enqueue after the fault")
						require.ErrorIs(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(flag, 8)}), hip.ErrIllegalAddress)
						require.ErrorIs(t, rt.EventRecord(after, s), hip.ErrIllegalAddress)
						require.Equal(t, mem(pre, 4096), mem(out, 4096), "the copy before the fault ran")
						require.Zero(t, load(flag), "the write after the fault was dropped")

						require.NoError(t, rt.EventSynchronize(before))
						require.NoError(t, rt.EventQuery(before))
						if recorded {
							require.ErrorIs(t, rt.EventSynchronize(after), hip.ErrIllegalAddress)
							require.ErrorIs(t, rt.EventQuery(after), hip.ErrIllegalAddress)
							_, err := rt.EventElapsedTime(before, after)
							require.ErrorIs(t, err, hip.ErrIllegalAddress)
						}

						require.NoError(t, rt.MemcpyAsync(good+6<<20, pre, 4096, other))
						require.NoError(t, rt.StreamSynchronize(other), "other streams are unaffected")
						require.Equal(t, mem(pre, 4096), mem(good+6<<20, 4096))
						require.NoError(t, rt.Memcpy(uintptr(good+4<<20), uintptr(pre), 64), "synchronous copies are unaffected")
						require.ErrorIs(t, rt.DeviceSynchronize(), hip.ErrIllegalAddress, "the device reports the failed stream")
						require.NoError(t, rt.StreamDestroy(s))
						require.NoError(t, rt.DeviceSynchronize(), "until it is destroyed")
					})
				}
			}
		})
	}
}

// TestFaultReleasesWaiters: work that depends on a failed stream's
// dropped work fails too instead of hanging: EventSynchronize of a record
// behind the fault, and a stream that waits on that record (its own later
// work is dropped). A stream that only waits on a flag the failed stream
// would have written stays blocked, as behind a peer that never comes,
// until the flag is written by someone else.
func TestFaultReleasesWaiters(t *testing.T) {
	for _, mode := range faultModes {
		t.Run(mode.name, func(t *testing.T) {
			rt := newRT(t, mode.cfg)
			good := alloc(t, rt, 1<<20)
			bad := protNone(t, 4096)
			s, s2, s3 := newStream(t, rt), newStream(t, rt), newStream(t, rt)
			ev := newEvent(t, rt, hip.EventDefault)
			go1, g2, g3, h := good, good+4, good+8, good+12

			require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(go1, 1, hip.WaitEQ)}))
			require.NoError(t, rt.MemcpyAsync(good+4096, bad, 64, s))
			require.NoError(t, rt.EventRecord(ev, s))
			require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(h, 1)}))

			require.NoError(t, rt.StreamWaitEvent(s2, ev))
			require.NoError(t, rt.StreamBatchMemOp(s2, []hip.MemOp{write(g2, 5)}))
			require.NoError(t, rt.StreamBatchMemOp(s3, []hip.MemOp{wait(h, 1, hip.WaitEQ), write(g3, 6)}))

			evDone := make(chan error, 1)
			go func() { evDone <- rt.EventSynchronize(ev) }()
			s2Done := make(chan error, 1)
			go func() { s2Done <- rt.StreamSynchronize(s2) }()
			time.Sleep(20 * time.Millisecond)
			require.ErrorIs(t, rt.StreamQuery(s), hip.ErrNotReady)
			require.Len(t, evDone, 0)

			store(go1, 1) // s runs into the fault
			require.ErrorIs(t, <-evDone, hip.ErrIllegalAddress, "EventSynchronize of a record behind the fault")
			require.ErrorIs(t, <-s2Done, hip.ErrIllegalAddress, "a stream waiting on that record fails too")
			require.Zero(t, load(g2), "and its later work is dropped")
			require.ErrorIs(t, rt.StreamSynchronize(s), hip.ErrIllegalAddress)

			time.Sleep(20 * time.Millisecond)
			require.ErrorIs(t, rt.StreamQuery(s3), hip.ErrNotReady, "a flag waiter of another stream is not released")
			store(h, 1)
			require.NoError(t, rt.StreamSynchronize(s3))
			require.Equal(t, uint32(6), load(g3))
		})
	}
}

// TestFaultFlagGone: the memory of a flag that a parked or sleeping wait
// polls becomes inaccessible (as when a program frees a buffer with work
// still queued): the stream fails instead of killing the process or
// waiting forever.
func TestFaultFlagGone(t *testing.T) {
	for _, mode := range faultModes {
		t.Run(mode.name, func(t *testing.T) {
			rt := newRT(t, mode.cfg)
			good := alloc(t, rt, 4096)
			m, err := syscall.Mmap(-1, 0, int(pageSize), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
			require.NoError(t, err)
			t.Cleanup(func() { _ = syscall.Munmap(m) })
			flag := hip.DevicePtr(unsafe.Pointer(&m[0]))
			s := newStream(t, rt)
			require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(flag, 1, hip.WaitEQ), write(good, 9)}))
			time.Sleep(10 * time.Millisecond) // past the spins: asleep in the futex
			require.ErrorIs(t, rt.StreamQuery(s), hip.ErrNotReady)
			require.NoError(t, syscall.Mprotect(m, syscall.PROT_NONE))
			require.ErrorIs(t, rt.StreamSynchronize(s), hip.ErrIllegalAddress)
			require.Zero(t, load(good))
		})
	}
}

// TestFaultGraph: a replayed graph whose branch faults fails the branch's
// stream, and through the join the launch stream.
func TestFaultGraph(t *testing.T) {
	for _, mode := range faultModes {
		t.Run(mode.name, func(t *testing.T) {
			rt := newRT(t, mode.cfg)
			good := alloc(t, rt, 1<<20)
			bad := protNone(t, 4096)
			s, side, launch := newStream(t, rt), newStream(t, rt), newStream(t, rt)
			fork, join := newEvent(t, rt, hip.EventDefault), newEvent(t, rt, hip.EventDefault)
			require.NoError(t, rt.StreamBeginCapture(s, hip.CaptureModeGlobal))
			require.NoError(t, rt.MemcpyAsync(good+4096, good, 64, s))
			require.NoError(t, rt.EventRecord(fork, s))
			require.NoError(t, rt.StreamWaitEvent(side, fork))
			require.NoError(t, rt.MemcpyAsync(good+8192, bad, 64, side))
			require.NoError(t, rt.EventRecord(join, side))
			require.NoError(t, rt.StreamWaitEvent(s, join))
			require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(good+12288, 1)}))
			g, err := rt.StreamEndCapture(s)
			require.NoError(t, err)
			x, err := rt.GraphInstantiate(g)
			require.NoError(t, err)
			require.NoError(t, rt.GraphLaunch(x, launch))
			require.ErrorIs(t, rt.StreamSynchronize(launch), hip.ErrIllegalAddress)
			require.Zero(t, load(good+12288), "the work after the join was dropped")
			require.NoError(t, rt.GraphExecDestroy(x))
			require.NoError(t, rt.GraphDestroy(g))
		})
	}
}

// TestFaultSync: synchronous calls with a range that is not accessible
// return ErrInvalidValue, as the driver refuses a bad pointer of a
// synchronous call, and leave nothing sticky; NULL and wrapping ranges
// are refused before anything runs. A failed legacy NULL stream makes the
// synchronous calls ordered after it report its error.
func TestFaultSync(t *testing.T) {
	rt := newRT(t, Config{})
	good := alloc(t, rt, 1<<20)
	buf := make([]byte, 4096)
	for _, bad := range []struct {
		name string
		p    func() uintptr
	}{
		{"prot-none", func() uintptr { return uintptr(protNone(t, 1<<20)) }},
		{"munmapped", func() uintptr { return unmapped(t) }},
		{"first-page", func() uintptr { return 1 }},
	} {
		t.Run(bad.name, func(t *testing.T) {
			require.ErrorIs(t, rt.Memcpy(uintptr(good), bad.p(), 4096), hip.ErrInvalidValue)
			require.ErrorIs(t, rt.Memcpy(bad.p(), uintptr(good), 4096), hip.ErrInvalidValue)
			require.ErrorIs(t, rt.Memset(hip.DevicePtr(bad.p()), 1, 4096), hip.ErrInvalidValue)
			require.ErrorIs(t, hip.CopyToDevice(rt, hip.DevicePtr(bad.p()), buf), hip.ErrInvalidValue)
			require.ErrorIs(t, hip.CopyFromDevice(rt, buf, hip.DevicePtr(bad.p())), hip.ErrInvalidValue)
			require.NoError(t, rt.Memcpy(uintptr(good)+4096, uintptr(good), 4096), "nothing sticky")
		})
	}
	const top = ^uintptr(0)
	require.ErrorIs(t, rt.Memcpy(uintptr(good), 0, 8), hip.ErrInvalidValue)
	require.ErrorIs(t, rt.Memcpy(top-3, uintptr(good), 8), hip.ErrInvalidValue, "wraps")
	require.ErrorIs(t, rt.Memset(hip.DevicePtr(top-3), 0, 8), hip.ErrInvalidValue, "wraps")

	// The legacy NULL stream fails: the synchronous calls after it say so.
	require.NoError(t, rt.MemcpyAsync(good, hip.DevicePtr(protNone(t, 4096)), 64, hip.StreamNull))
	require.ErrorIs(t, rt.StreamSynchronize(hip.StreamNull), hip.ErrIllegalAddress)
	require.ErrorIs(t, rt.Memcpy(uintptr(good)+64, uintptr(good), 64), hip.ErrIllegalAddress)
	require.ErrorIs(t, rt.Memset(good, 0, 64), hip.ErrIllegalAddress)
}

// TestFaultAtCall: NULL and wrapping ranges are refused at the call, with
// ErrInvalidValue, and the stream stays usable.
func TestFaultAtCall(t *testing.T) {
	rt := newRT(t, Config{})
	good := alloc(t, rt, 1<<20)
	s := newStream(t, rt)
	const top = hip.DevicePtr(^uintptr(0))
	for _, c := range []struct {
		name string
		err  error
	}{
		{"copy from NULL", rt.MemcpyAsync(good, 0, 64, s)},
		{"copy wraps", rt.MemcpyAsync(good, top-10, 64, s)},
		{"copy to wrap", rt.MemcpyAsync(top-10, good, 64, s)},
		{"batch wraps", rt.MemcpyBatchAsync([]hip.DevicePtr{good, good + 64}, []hip.DevicePtr{good + 128, top - 10}, []uintptr{8, 64}, nil, nil, s)},
		{"2d rows wrap", rt.Memcpy2DAsync(good, 64, top-1000, 128, 64, 16, s)},
		{"2d pitch overflows", rt.Memcpy2DAsync(good, 64, good, ^uintptr(0)/2, 64, 4, s)},
	} {
		require.ErrorIs(t, c.err, hip.ErrInvalidValue, c.name)
	}
	require.NoError(t, rt.MemcpyAsync(good+4096, good, 64, s))
	require.NoError(t, rt.StreamSynchronize(s))
}

// BenchmarkFaultGuard: the cost of the fault guard on a 64-byte copy and a
// 32-bit load (guarded against bare).
func BenchmarkFaultGuard(b *testing.B) {
	rt, err := New(Config{})
	require.NoError(b, err)
	defer rt.Close()
	p, err := rt.MemAlloc(4096)
	require.NoError(b, err)
	defer rt.MemFree(p)
	a := uintptr(p)
	b.Run("copy64/bare", func(b *testing.B) {
		for b.Loop() {
			rt.copyBytes(a+1024, a, 64)
		}
	})
	b.Run("copy64/guarded", func(b *testing.B) {
		for b.Loop() {
			rt.tryCopy(a+1024, a, 64)
		}
	})
	b.Run("load/bare", func(b *testing.B) {
		for b.Loop() {
			_ = atomic.LoadUint32(word(a))
		}
	})
	b.Run("load/guarded", func(b *testing.B) {
		for b.Loop() {
			_, _ = loadWord(a)
		}
	})
}
