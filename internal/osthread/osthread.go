// Package osthread names the calling OS thread. The per-thread state of
// the layers above (the host device's current device, NCCL groups, graph
// captures) is keyed by it, on every call of the launch path.
package osthread

/*
#include <sys/syscall.h>
#include <unistd.h>

static __thread int cecoll_tid;

static int cecoll_gettid(void) {
	if (cecoll_tid == 0)
		cecoll_tid = (int)syscall(SYS_gettid);
	return cecoll_tid;
}
*/
import "C"

// ID returns the kernel id of the calling OS thread (gettid), cached in C
// thread-local storage: on the 2-core CI machine a cgo call to it costs 31
// ns against 150 for the syscall, which an 8-byte grouped collective of 4
// ranks made a dozen times. A new thread starts with an empty cache, so a
// reused id is never stale. As with gettid, the caller must not migrate
// between threads while it relies on the answer (a cgo callback, or a
// goroutine that locked its thread).
func ID() int { return int(C.cecoll_gettid()) }
