package nvidia

import (
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// TestLaunchPathAllocsNoGPU checks the call mechanism itself without a GPU:
// every launch-path entry point is pointed at libc's sched_yield (ignores
// its arguments, returns 0), and the Runtime methods must allocate nothing.
func TestLaunchPathAllocsNoGPU(t *testing.T) {
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	yield, err := purego.Dlsym(libc, "sched_yield")
	require.NoError(t, err)
	r := &Runtime{caps: hip.Caps{BatchCopy: true}, batchV2: true}
	for _, e := range r.fn.table() {
		*e.fn = yield
	}
	ops := make([]hip.MemOp, 8)
	dsts, srcs := make([]hip.DevicePtr, 8), make([]hip.DevicePtr, 8)
	sizes := make([]uintptr, 8)
	attrs := []hip.CopyAttributes{{SrcAccessOrder: hip.SrcAccessOrderStream}}
	idx := []uintptr{0}
	cases := []struct {
		name string
		f    func() error
	}{
		{"StreamBatchMemOp", func() error { return r.StreamBatchMemOp(5, ops) }},
		{"MemcpyBatchAsync/v2", func() error { return r.MemcpyBatchAsync(dsts, srcs, sizes, attrs, idx, 5) }},
		{"MemcpyBatchAsync/noattrs", func() error { return r.MemcpyBatchAsync(dsts, srcs, sizes, nil, nil, 5) }},
		{"MemcpyAsync", func() error { return r.MemcpyAsync(1, 2, 3, 5) }},
		{"Memcpy2DAsync", func() error { return r.Memcpy2DAsync(1, 8, 2, 32, 8, 4, 5) }},
		{"EventRecord", func() error { return r.EventRecord(4, 5) }},
		{"StreamWaitEvent", func() error { return r.StreamWaitEvent(5, 4) }},
		{"StreamGetCaptureStatus", func() error { _, err := r.StreamGetCaptureStatus(5); return err }},
		{"GraphLaunch", func() error { return r.GraphLaunch(4, 5) }},
	}
	for _, c := range cases {
		require.NoError(t, c.f(), c.name)
		require.Zero(t, testing.AllocsPerRun(100, func() { _ = c.f() }), c.name)
	}
	r.batchV2 = false // the 12.8 ABI path
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = r.MemcpyBatchAsync(dsts, srcs, sizes, attrs, idx, 5) }))

	r.caps.BatchCopy = false
	require.ErrorIs(t, r.MemcpyBatchAsync(dsts, srcs, sizes, attrs, idx, 5), hip.ErrNotSupported)
}

// BenchmarkMechanismNoGPU compares the call mechanisms on a C function that
// does almost nothing (labs), so the figures are the binding's own cost:
// runtime (pooled frame + the cgo trampoline, what the launch path uses),
// a SyscallN with a fresh variadic slice, a typed purego function, and the
// bare trampoline.
func BenchmarkMechanismNoGPU(b *testing.B) {
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		b.Skipf("no libc.so.6: %v", err)
	}
	yield, err := purego.Dlsym(libc, "labs")
	require.NoError(b, err)
	r := &Runtime{}
	r.fn.streamBatchMemOp = yield
	ops := make([]hip.MemOp, 8)
	var typed func(s uintptr, n uint32, ops *hip.MemOp, flags uint32) uint32
	purego.RegisterFunc(&typed, yield)
	b.Run("runtime", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = r.StreamBatchMemOp(5, ops)
		}
	})
	b.Run("syscallN", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _, _ = purego.SyscallN(yield, 5, 8, uintptr(unsafe.Pointer(&ops[0])), 0)
		}
	})
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = typed(5, 8, &ops[0], 0)
		}
	})
	b.Run("cgo", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a := [9]uintptr{5, 8, uintptr(unsafe.Pointer(&ops[0]))}
			_ = ccall(yield, &a)
		}
	})
}

// TestMemcpy2DLayout pins memcpy2D to CUDA_MEMCPY2D's layout (cuda.h,
// x86-64 and arm64): 128 bytes, the two memory types 4-byte enums at 16
// and 72, each followed by 4 bytes of padding.
func TestMemcpy2DLayout(t *testing.T) {
	var m memcpy2D
	require.Equal(t, uintptr(128), unsafe.Sizeof(m))
	for name, off := range map[string][2]uintptr{
		"srcMemoryType": {unsafe.Offsetof(m.srcMemoryType), 16},
		"srcHost":       {unsafe.Offsetof(m.srcHost), 24},
		"srcDevice":     {unsafe.Offsetof(m.srcDevice), 32},
		"srcPitch":      {unsafe.Offsetof(m.srcPitch), 48},
		"dstXInBytes":   {unsafe.Offsetof(m.dstXInBytes), 56},
		"dstMemoryType": {unsafe.Offsetof(m.dstMemoryType), 72},
		"dstDevice":     {unsafe.Offsetof(m.dstDevice), 88},
		"dstPitch":      {unsafe.Offsetof(m.dstPitch), 104},
		"WidthInBytes":  {unsafe.Offsetof(m.widthInBytes), 112},
		"Height":        {unsafe.Offsetof(m.height), 120},
	} {
		require.Equal(t, off[1], off[0], name)
	}
}
