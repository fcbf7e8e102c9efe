package host

import (
	"math/bits"
	"runtime"
	"runtime/debug"
	"sync/atomic"
)

// Fault containment. The host device's ops are Go code on raw addresses
// (copy, atomic loads and stores), so an address that is not mapped, or a
// file mapping past its end, raises SIGSEGV or SIGBUS, and by default the
// Go runtime dies of it. A GPU reports such a fault as an error instead
// (CUDA_ERROR_ILLEGAL_ADDRESS for an asynchronous op, CUDA_ERROR_INVALID_VALUE
// for a synchronous copy), and so must the host device. Every access to
// caller-supplied memory therefore goes through one of the try* primitives
// below: they turn runtime/debug.SetPanicOnFault on for the calling
// goroutine (workers, copy engines and threads running ops inline alike),
// recover the resulting panic and report false. The runtime raises that
// panic for faults in runtime.memmove and in atomic instructions alike, and
// for addresses in the first page too (there as a nil dereference), as
// TestFaultPrimitives checks. Each primitive restores the goroutine's
// previous setting: a caller's own goroutine keeps its behaviour.
//
// Cost: a few ns per guarded copy or load, mostly the two SetPanicOnFault
// calls, against 70 to 100 ns for an op run inline (BenchmarkFaultGuard;
// docs/performance.md, "Fault guards of the host device").

// isFault reports whether a recovered panic value is a memory fault: a
// runtime error for an invalid address. Any other panic is a bug and is
// raised again.
func isFault(r any) bool {
	err, ok := r.(runtime.Error)
	if !ok {
		return false
	}
	if _, ok := r.(interface{ Addr() uintptr }); ok {
		return true // SetPanicOnFault's panic carries the faulting address
	}
	// Faults in the first page (address < 4096) panic as a nil
	// dereference, without the address.
	return err.Error() == "runtime error: invalid memory address or nil pointer dereference"
}

// endGuard, deferred by the try functions below with the guard's previous
// setting, restores it and turns a fault into *ok = false; any other panic
// goes on. (It must be the deferred function itself for recover to work.)
func endGuard(old bool, ok *bool) {
	debug.SetPanicOnFault(old)
	if r := recover(); r != nil {
		if !isFault(r) {
			panic(r)
		}
		*ok = false
	}
}

// tryCopy is copyBytes that reports a fault (false) instead of dying. A
// copy that faults may have moved some of its bytes.
func (rt *Runtime) tryCopy(dst, src, n uintptr) (ok bool) {
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	rt.copyBytes(dst, src, n)
	return true
}

// tryWrite is writeValue that reports a fault.
func (rt *Runtime) tryWrite(a uintptr, v uint32) (ok bool) {
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	rt.writeValue(a, v)
	return true
}

// tryMemset sets n bytes at p (fanned out for a multicast address) and
// reports a fault.
func (rt *Runtime) tryMemset(p uintptr, value byte, n uintptr) (ok bool) {
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	rt.fanOut(p, n, func(dst, n uintptr) {
		b := bytesAt(dst, n)
		for i := range b {
			b[i] = value
		}
		if n <= 8 {
			rt.wakeRange(dst, n)
		}
	})
	return true
}

// loadWord is an atomic load of the 32-bit word at a that reports a fault.
func loadWord(a uintptr) (v uint32, ok bool) {
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	return atomic.LoadUint32(word(a)), true
}

// wraps reports whether [p, p+n) runs past the end of the address space:
// obviously invalid, so refused at the call.
func wraps(p, n uintptr) bool { return n != 0 && p+(n-1) < p }

// wraps2D reports whether a 2D area of height rows of width bytes, pitch
// apart, starting at p, runs past the end of the address space (height
// and width non-zero).
func wraps2D(p, pitch, width, height uintptr) bool {
	hi, span := bits.Mul64(uint64(height-1), uint64(pitch))
	if hi != 0 {
		return true
	}
	end, carry := bits.Add64(span, uint64(width), 0)
	return carry != 0 || wraps(p, uintptr(end))
}
