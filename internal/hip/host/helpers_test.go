package host

import (
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/testutil"
)

var watchdog = testutil.Watchdog

func newRT(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	// Captures check the calling thread, as CUDA's do: a goroutine that
	// moved between its begin and end capture failed with "wrong thread"
	// (seen under -race). Never unlocked: the thread ends with the test.
	runtime.LockOSThread()
	watchdog(t, 20*time.Second)
	if os.Getenv("CECOLL_HOST_INLINE") == "0" {
		cfg.NoInline = true // TestWorkerOnlyPath's rerun
	}
	rt, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Close first: a test that ends with work queued must not have
		// its memory unmapped under a running worker.
		rt.Close()
		for _, p := range testAllocs[rt] {
			_ = rt.MemFree(p)
		}
		delete(testAllocs, rt)
	})
	return rt
}

// testAllocs are the allocations newRT's cleanup frees (tests of this
// package do not run in parallel).
var testAllocs = map[*Runtime][]hip.DevicePtr{}

func capsWith(f func(*hip.Caps)) *hip.Caps {
	c := DefaultCaps()
	f(&c)
	return &c
}

func alloc(t *testing.T, rt *Runtime, n uintptr) hip.DevicePtr {
	t.Helper()
	p, err := rt.MemAlloc(n)
	require.NoError(t, err)
	testAllocs[rt] = append(testAllocs[rt], p)
	return p
}

func newStream(t *testing.T, rt *Runtime) hip.Stream {
	t.Helper()
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.StreamDestroy(s) })
	return s
}

func load(p hip.DevicePtr) uint32 { return atomic.LoadUint32(word(uintptr(p))) }

// store sets a flag from the host the way a peer would: atomically, then
// waking the word's waiters.
func store(p hip.DevicePtr, v uint32) {
	atomic.StoreUint32(word(uintptr(p)), v)
	futexWake(uintptr(p))
}

func mem(p hip.DevicePtr, n uintptr) []byte { return bytesAt(uintptr(p), n) }

// fill writes a recognisable pattern for seed.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// eventually polls cond for up to d.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func write(p hip.DevicePtr, v uint32) hip.MemOp { return hip.WriteValue32(p, v) }
func wait(p hip.DevicePtr, v, cond uint32) hip.MemOp {
	return hip.WaitValue32(p, v, cond)
}

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }

func closeFD(t *testing.T, fd int) {
	t.Helper()
	require.NoError(t, syscall.Close(fd))
}
