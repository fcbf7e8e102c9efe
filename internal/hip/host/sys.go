package host

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Linux amd64 system call numbers that package syscall does not
// name (golang.org/x/sys is not a dependency).
const (
	sysFutex    = 202
	futexWaitOp = 0 // FUTEX_WAIT without FUTEX_PRIVATE_FLAG: works across processes
	futexWakeOp = 1
)

// ptr turns a device address into a pointer. The double indirection keeps
// go vet's unsafeptr check quiet: device memory is outside the Go heap (or
// a caller-pinned Go buffer), so the conversion is sound.
func ptr(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

func bytesAt(a, n uintptr) []byte { return unsafe.Slice((*byte)(ptr(a)), n) }

func word(a uintptr) *uint32 { return (*uint32)(ptr(a)) }

// futexWait sleeps while *addr == val, at most d. Spurious returns are fine:
// callers re-check their condition.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Syscall6(sysFutex, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every waiter on the word at a (any process).
func futexWake(a uintptr) {
	syscall.Syscall6(sysFutex, a, futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

// Sleeper counts: FUTEX_WAKE is a system call (and on shared memfd memory
// a costly key lookup), paid on every flag write although a waiter is
// rarely asleep. Each waiter of this process counts itself in the bucket
// of its word before it loads the word for FUTEX_WAIT, and a writer wakes
// only when that bucket is non-zero. Both sides use sequentially
// consistent atomics (store the value, then load the count; add to the
// count, then load the value), so either the writer sees the sleeper or
// the sleeper sees the new value. Sleepers of other processes are
// invisible here: words of exported or imported allocations are always
// woken (Runtime.wake).
const sleeperBuckets = 256

var sleepers [sleeperBuckets]struct {
	n atomic.Int32
	_ [60]byte // one cache line per bucket: sleepers on different words do not share one
}

func sleeperBucket(a uintptr) *atomic.Int32 {
	return &sleepers[(a>>2)%sleeperBuckets].n
}

// fence is a full memory barrier: a locked read-modify-write, which on
// x86 orders every earlier store before every later load.
func fence() {
	var x atomic.Uint32
	x.Swap(0)
}

// wakeLocal wakes the word at a if a sleeper of this process may be on
// it; for words no other process can see.
func wakeLocal(a uintptr) {
	if sleeperBucket(a).Load() != 0 {
		futexWake(a)
	}
}

// condHolds evaluates a wait-value condition with CUDA's semantics.
func condHolds(cur, val, cond uint32) bool {
	switch cond {
	case 0: // GEQ, cyclic
		return int32(cur-val) >= 0
	case 1: // EQ
		return cur == val
	case 2: // AND
		return cur&val != 0
	default: // NOR
		return ^(cur | val) != 0
	}
}

// Waiting: a short spin (the flag is often about to flip) that yields the
// processor on each load, then futex sleeps whose timeout doubles from
// waitMinSleep to waitMaxSleep, so a wake lost between the check and the
// sleep only costs latency. 20 spins, not 300: with more goroutines than
// processors a longer spin keeps yielding among them, and small
// collectives got slower (docs/performance.md, "The flag-wait spin").
const (
	waitSpins    = 20
	waitMinSleep = 50 * time.Microsecond
	waitMaxSleep = 2 * time.Millisecond
)

// waitResult is how a wait-value ended.
type waitResult uint8

const (
	waitHeld   waitResult = iota // the condition holds
	waitGaveUp                   // stop became true, or (guarded) another executor went past the wait
	waitFault                    // the word is not readable (fault.go)
)

// waitValue blocks until the condition holds on the word at a, or stop
// becomes true (checked between sleeps), or reading the word faults.
func waitValue(a uintptr, val, cond uint32, stop *atomic.Bool) waitResult {
	return waitValueGuarded(a, val, cond, stop, nil, 0)
}

// parkGuard lets a parked worker wait on a flag that another executor may
// consume (and the program then free) at any time: the worker reads the
// word only inside a reading section that first checks moved, and an
// executor that goes past the wait bumps moved and then waits for any
// section in progress to end. Both sides use sequentially consistent
// atomics (set reading, then load moved; bump moved, then load reading),
// so either the worker sees the bump or the executor sees the section.
type parkGuard struct {
	moved   atomic.Uint64
	reading atomic.Int32
}

// load reads the word at a unless moved differs from gen (moved true); a
// nil guard always reads. ok is false when the read faulted.
func (g *parkGuard) load(a uintptr, gen uint64) (v uint32, moved, ok bool) {
	if g == nil {
		v, ok = loadWord(a)
		return v, false, ok
	}
	g.reading.Store(1)
	if g.moved.Load() != gen {
		g.reading.Store(0)
		return 0, true, true
	}
	v, ok = loadWord(a)
	g.reading.Store(0)
	return v, false, ok
}

// pass bumps moved and returns once no reading section that missed the
// bump is in progress: from then on the parked worker leaves the word
// alone.
func (g *parkGuard) pass() {
	g.moved.Add(1)
	for g.reading.Load() != 0 {
		yield()
	}
}

// waitValueGuarded is waitValue for a parked worker: it gives up once
// g.moved differs from gen, i.e. another executor went past the wait, and
// then touches the word no more (a futex call on a word that was freed
// meanwhile fails harmlessly). With a nil g it is waitValue.
func waitValueGuarded(a uintptr, val, cond uint32, stop *atomic.Bool, g *parkGuard, gen uint64) waitResult {
	for i := 0; i < waitSpins; i++ {
		cur, moved, ok := g.load(a, gen)
		switch {
		case moved:
			return waitGaveUp
		case !ok:
			return waitFault
		case condHolds(cur, val, cond):
			return waitHeld
		}
		yield()
	}
	d := waitMinSleep
	b := sleeperBucket(a)
	for {
		b.Add(1) // before the load that FUTEX_WAIT compares: see sleepers
		cur, moved, ok := g.load(a, gen)
		switch {
		case moved:
			b.Add(-1)
			return waitGaveUp
		case !ok:
			b.Add(-1)
			return waitFault
		case condHolds(cur, val, cond):
			b.Add(-1)
			return waitHeld
		case stop.Load():
			b.Add(-1)
			return waitGaveUp
		}
		futexWait(word(a), cur, d)
		b.Add(-1)
		d = min(2*d, waitMaxSleep)
	}
}

func yield() { runtime.Gosched() }
