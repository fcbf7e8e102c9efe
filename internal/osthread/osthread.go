// Package osthread names the calling OS thread. The per-thread state of
// the layers above (the host device's current device, NCCL groups, graph
// captures) is keyed by it, on every call of the launch path.
package osthread

import (
	"sync/atomic"
	"syscall"
)

var cache atomic.Pointer[func() int]

// ID returns the kernel id of the calling OS thread (gettid). As with
// gettid, the caller must not migrate between threads while it relies on
// the answer (a cgo callback, or a goroutine that locked its thread).
func ID() int {
	if f := cache.Load(); f != nil {
		return (*f)()
	}
	return syscall.Gettid()
}

// UseCache makes ID answer with f, which must return gettid's value for
// the calling thread (nil: the syscall again). The C library installs one
// that caches it in C thread-local storage, a fifth of the syscall's cost
// (docs/performance.md, "Thread ids from C thread-local storage").
func UseCache(f func() int) {
	if f == nil {
		cache.Store(nil)
		return
	}
	cache.Store(&f)
}
