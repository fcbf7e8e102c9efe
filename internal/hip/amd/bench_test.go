package amd

import (
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"cecoll/internal/hip"
)

// BenchmarkCallPath compares the launch path's call mechanism (fixed-arity
// uintptrescapes helpers feeding SyscallN from a pooled array) with a
// direct purego.SyscallN call, on the fake's hipStreamBatchMemOp.
func BenchmarkCallPath(b *testing.B) {
	if fakeSkipMsg != "" {
		b.Skip(fakeSkipMsg)
	}
	rt, err := OpenLibrary(fakePaths[fakeFull])
	if err != nil {
		b.Fatal(err)
	}
	s, err := rt.StreamCreate()
	if err != nil {
		b.Fatal(err)
	}
	buf, err := rt.MemAlloc(64)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rt.MemFree(buf) }()
	ops := []hip.MemOp{hip.WriteValue32(buf, 1), hip.WaitValue32(buf, 1, hip.WaitEQ)}

	b.Run("callN", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := rt.StreamBatchMemOp(s, ops); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SyscallN", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r, _, _ := purego.SyscallN(rt.sym.hipStreamBatchMemOp,
				uintptr(s), uintptr(len(ops)), uintptr(unsafe.Pointer(&ops[0])), 0)
			if r != 0 {
				b.Fatal(toError(r))
			}
		}
	})
}
