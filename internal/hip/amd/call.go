package amd

import (
	"sync"

	"github.com/ebitengine/purego"
)

// Fixed-arity call helpers, so that a runtime call allocates nothing.
//
// Each is marked uintptrescapes: a caller writes
// callN(fn, uintptr(unsafe.Pointer(p))) (unsafe.Pointer rule 4) and the
// compiler keeps *p on the heap and alive until callN returns. Inside, the
// arguments go to purego.SyscallN through a pooled array: calling SyscallN
// with a literal argument list allocates its variadic slice on every call
// (SyscallN is itself uintptrescapes, so that slice escapes).

type argBuf [9]uintptr

var argPool = sync.Pool{New: func() any { return new(argBuf) }}

func invoke(fn uintptr, b *argBuf, n int) error {
	r, _, _ := purego.SyscallN(fn, b[:n]...)
	argPool.Put(b)
	return toError(r)
}

func call0(fn uintptr) error {
	r, _, _ := purego.SyscallN(fn)
	return toError(r)
}

//go:uintptrescapes
func call1(fn, a1 uintptr) error {
	b := argPool.Get().(*argBuf)
	b[0] = a1
	return invoke(fn, b, 1)
}

//go:uintptrescapes
func call2(fn, a1, a2 uintptr) error {
	b := argPool.Get().(*argBuf)
	b[0], b[1] = a1, a2
	return invoke(fn, b, 2)
}

//go:uintptrescapes
func call3(fn, a1, a2, a3 uintptr) error {
	b := argPool.Get().(*argBuf)
	b[0], b[1], b[2] = a1, a2, a3
	return invoke(fn, b, 3)
}

//go:uintptrescapes
func call4(fn, a1, a2, a3, a4 uintptr) error {
	b := argPool.Get().(*argBuf)
	b[0], b[1], b[2], b[3] = a1, a2, a3, a4
	return invoke(fn, b, 4)
}

//go:uintptrescapes
func call5(fn, a1, a2, a3, a4, a5 uintptr) error {
	b := argPool.Get().(*argBuf)
	b[0], b[1], b[2], b[3], b[4] = a1, a2, a3, a4, a5
	return invoke(fn, b, 5)
}

//go:uintptrescapes
func call8(fn, a1, a2, a3, a4, a5, a6, a7, a8 uintptr) error {
	b := argPool.Get().(*argBuf)
	b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7] = a1, a2, a3, a4, a5, a6, a7, a8
	return invoke(fn, b, 8)
}

//go:uintptrescapes
func call9(fn, a1, a2, a3, a4, a5, a6, a7, a8, a9 uintptr) error {
	b := argPool.Get().(*argBuf)
	b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8] = a1, a2, a3, a4, a5, a6, a7, a8, a9
	return invoke(fn, b, 9)
}
