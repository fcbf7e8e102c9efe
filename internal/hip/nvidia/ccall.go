package nvidia

/*
#include <stdint.h>
typedef uintptr_t (*cecoll_fn9)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t,
                                uintptr_t, uintptr_t, uintptr_t, uintptr_t);
static uintptr_t cecoll_call9(uintptr_t f, uintptr_t a0, uintptr_t a1, uintptr_t a2,
                              uintptr_t a3, uintptr_t a4, uintptr_t a5, uintptr_t a6,
                              uintptr_t a7, uintptr_t a8) {
	return ((cecoll_fn9)f)(a0, a1, a2, a3, a4, a5, a6, a7, a8);
}
*/
import "C"

// ccall calls the driver function fn with a's words through a cgo
// trampoline, the cheapest call mechanism (BenchmarkMechanismNoGPU;
// docs/performance.md, "Driver call mechanisms"). Every
// driver entry point takes at most 9 word-sized integer or pointer
// arguments and none is variadic, and the x86-64 and arm64 C ABIs let a
// caller pass more such arguments than the callee reads, so one 9-word
// trampoline serves all. Unlike SyscallN it does not keep Go pointers
// alive: the launch path's frames (runtime.go) hold them.
func ccall(fn uintptr, a *[9]uintptr) uintptr {
	return uintptr(C.cecoll_call9(C.uintptr_t(fn), C.uintptr_t(a[0]), C.uintptr_t(a[1]), C.uintptr_t(a[2]),
		C.uintptr_t(a[3]), C.uintptr_t(a[4]), C.uintptr_t(a[5]), C.uintptr_t(a[6]), C.uintptr_t(a[7]), C.uintptr_t(a[8])))
}
