package nvidia

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// burst is how many calls run between untimed stream syncs in the host-cost
// benchmarks, so that the driver's queue never fills and the figure is the
// host's cost, not the GPU's. The C reference of docs/performance.md ("The Go
// binding against C") uses the same.
const burst = 64

// hostCost times f per call, syncing s untimed every burst calls.
func hostCost(b *testing.B, r *Runtime, s hip.Stream, f func() error) {
	b.Helper()
	b.ReportAllocs()
	// Sub-benchmarks run on goroutines of their own: pin this one to its
	// thread and give the thread the device, as the engine's callers do.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(b, r.SetDevice(0))
	require.NoError(b, f())
	require.NoError(b, r.StreamSynchronize(s))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := f(); err != nil {
			b.Fatal(err)
		}
		if i%burst == burst-1 {
			b.StopTimer()
			if err := r.StreamSynchronize(s); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	require.NoError(b, r.StreamSynchronize(s))
}

type benchEnv struct {
	r                *Runtime
	s                hip.Stream
	p                hip.DevicePtr
	ops              []hip.MemOp
	dsts, srcs       []hip.DevicePtr
	sizes            []uintptr
	attrs            []hip.CopyAttributes
	idx              []uintptr
	e                hip.Event
	typedBatchMemOp  func(s uintptr, n uint32, ops *hip.MemOp, flags uint32) uint32
	typedMemcpyBatch func(d, s *hip.DevicePtr, sz *uintptr, n uintptr, a *hip.CopyAttributes, idx *uintptr, na uintptr, st uintptr) uint32
	typedMemcpy      func(d, s hip.DevicePtr, n uintptr, st uintptr) uint32
}

func newBenchEnv(b *testing.B) *benchEnv {
	r := openGPU(b)
	e := &benchEnv{r: r, s: stream(b, r), p: alloc(b, r, 1<<20)}
	require.NoError(b, r.Memset(e.p, 0, 1<<20))
	e.ops = benchOps(e.p)
	e.dsts, e.srcs, e.sizes = batchArgs(e.p, 4096)
	e.attrs = []hip.CopyAttributes{{SrcAccessOrder: hip.SrcAccessOrderStream, Flags: hip.CopyFlagPreferOverlapWithCompute}}
	e.idx = []uintptr{0}
	ev, err := r.EventCreate(hip.EventDisableTiming)
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.EventDestroy(ev) })
	e.e = ev
	// Typed purego variants of the same entry points, for the mechanism
	// comparison.
	purego.RegisterFunc(&e.typedBatchMemOp, r.fn.streamBatchMemOp)
	purego.RegisterFunc(&e.typedMemcpy, r.fn.memcpyAsync)
	if r.batchV2 {
		purego.RegisterFunc(&e.typedMemcpyBatch, r.fn.memcpyBatchAsyncV2)
	}
	return e
}

func BenchmarkStreamBatchMemOp8(b *testing.B) {
	e := newBenchEnv(b)
	b.Run("runtime", func(b *testing.B) {
		hostCost(b, e.r, e.s, func() error { return e.r.StreamBatchMemOp(e.s, e.ops) })
	})
	b.Run("syscallN", func(b *testing.B) {
		fn := e.r.fn.streamBatchMemOp
		hostCost(b, e.r, e.s, func() error {
			res, _, _ := purego.SyscallN(fn, uintptr(e.s), uintptr(len(e.ops)), uintptr(unsafe.Pointer(&e.ops[0])), 0)
			runtime.KeepAlive(e.ops)
			return rc(res)
		})
	})
	b.Run("typed", func(b *testing.B) {
		hostCost(b, e.r, e.s, func() error {
			return rc(uintptr(e.typedBatchMemOp(uintptr(e.s), uint32(len(e.ops)), &e.ops[0], 0)))
		})
	})
	b.Run("cgo", func(b *testing.B) {
		fn := e.r.fn.streamBatchMemOp
		hostCost(b, e.r, e.s, func() error {
			a := [9]uintptr{uintptr(e.s), uintptr(len(e.ops)), uintptr(unsafe.Pointer(&e.ops[0]))}
			res := ccall(fn, &a)
			runtime.KeepAlive(e.ops)
			return rc(res)
		})
	})
}

func BenchmarkMemcpyBatchAsync8x4K(b *testing.B) {
	e := newBenchEnv(b)
	if !e.r.Caps().BatchCopy {
		b.Skip("no batched copy")
	}
	b.Run("runtime", func(b *testing.B) {
		hostCost(b, e.r, e.s, func() error {
			return e.r.MemcpyBatchAsync(e.dsts, e.srcs, e.sizes, e.attrs, e.idx, e.s)
		})
	})
	if e.typedMemcpyBatch != nil {
		b.Run("typed", func(b *testing.B) {
			hostCost(b, e.r, e.s, func() error {
				return rc(uintptr(e.typedMemcpyBatch(&e.dsts[0], &e.srcs[0], &e.sizes[0], 8, &e.attrs[0], &e.idx[0], 1, uintptr(e.s))))
			})
		})
	}
}

func BenchmarkMemcpyAsync4K(b *testing.B) {
	e := newBenchEnv(b)
	b.Run("runtime", func(b *testing.B) {
		hostCost(b, e.r, e.s, func() error { return e.r.MemcpyAsync(e.dsts[0], e.srcs[0], 4096, e.s) })
	})
	b.Run("typed", func(b *testing.B) {
		hostCost(b, e.r, e.s, func() error { return rc(uintptr(e.typedMemcpy(e.dsts[0], e.srcs[0], 4096, uintptr(e.s)))) })
	})
}

func BenchmarkEventRecord(b *testing.B) {
	e := newBenchEnv(b)
	b.Run("runtime", func(b *testing.B) {
		hostCost(b, e.r, e.s, func() error { return e.r.EventRecord(e.e, e.s) })
	})
	b.Run("syscallN", func(b *testing.B) {
		fn := e.r.fn.eventRecord
		hostCost(b, e.r, e.s, func() error { res, _, _ := purego.SyscallN(fn, uintptr(e.e), uintptr(e.s)); return rc(res) })
	})
	b.Run("cgo", func(b *testing.B) {
		fn := e.r.fn.eventRecord
		hostCost(b, e.r, e.s, func() error {
			a := [9]uintptr{uintptr(e.e), uintptr(e.s)}
			return rc(ccall(fn, &a))
		})
	})
}

func BenchmarkStreamGetCaptureStatus(b *testing.B) {
	e := newBenchEnv(b)
	hostCost(b, e.r, e.s, func() error { _, err := e.r.StreamGetCaptureStatus(e.s); return err })
}

// BenchmarkCopy1GiB compares 8 batched copies totalling 1 GiB with one
// single copy of the same bytes (device to device, one device). The GB/s
// figure counts the bytes copied once (not read+write).
func BenchmarkCopy1GiB(b *testing.B) {
	r := openGPU(b)
	const total = 1 << 30
	s := stream(b, r)
	src, dst := alloc(b, r, total), alloc(b, r, total)
	require.NoError(b, r.Memset(src, 1, total))
	var dsts, srcs []hip.DevicePtr
	var sizes []uintptr
	for i := range 8 {
		off := hip.DevicePtr(i * total / 8)
		dsts, srcs, sizes = append(dsts, dst+off), append(srcs, src+off), append(sizes, total/8)
	}
	attrs := []hip.CopyAttributes{{SrcAccessOrder: hip.SrcAccessOrderStream, Flags: hip.CopyFlagPreferOverlapWithCompute}}
	run := func(b *testing.B, f func() error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(b, r.SetDevice(0))
		b.SetBytes(total)
		require.NoError(b, f())
		require.NoError(b, r.StreamSynchronize(s))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		}
		require.NoError(b, r.StreamSynchronize(s))
	}
	if r.Caps().BatchCopy {
		b.Run("batch8", func(b *testing.B) {
			run(b, func() error { return r.MemcpyBatchAsync(dsts, srcs, sizes, attrs, []uintptr{0}, s) })
		})
	}
	b.Run("single", func(b *testing.B) {
		run(b, func() error { return r.MemcpyAsync(dst, src, total, s) })
	})
	b.Run("async8", func(b *testing.B) {
		run(b, func() error {
			for i := range 8 {
				if err := r.MemcpyAsync(dsts[i], srcs[i], sizes[i], s); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
