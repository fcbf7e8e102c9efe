package hiptest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// Options adapt Run to a backend and a machine.
type Options struct {
	// CrossProcess runs the tests that start a child process sharing memory
	// through MemExport/MemImport. The test binary's TestMain must call
	// RunChildIfRequested.
	CrossProcess bool
	// Timeout bounds each subtest: past it the watchdog dumps every
	// goroutine and stops the binary. Blocking calls inside a subtest fail
	// it after a quarter of it. Default 60 s.
	Timeout time.Duration
	// Settle is how long a test waits before it asserts that blocked work
	// is still blocked. Longer catches more early releases. Default 20 ms.
	Settle time.Duration
	// Device is the device every subtest runs on (default 0).
	Device int
	// Seed seeds the random data; 0 uses a fixed default, so runs repeat.
	Seed uint64
	// ChildEnv is added to the environment of cross-process children
	// ("NAME=value"), e.g. to give their runtime the parent's config.
	ChildEnv []string
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 20 * time.Millisecond
	}
	if o.Seed == 0 {
		o.Seed = 0x5eed
	}
	return o
}

// cases is the suite, in the order it runs.
var cases = []struct {
	name string
	fn   func(*env)
}{
	{"devices", testDevices},
	{"memory", testMemory},
	{"stream-fifo", testStreamFIFO},
	{"events", testEvents},
	{"wait-write", testWaitWrite},
	{"ping-pong", testPingPong},
	{"cross-process", testCrossProcess},
	{"batch-copy", testBatchCopy},
	{"copy-2d", testCopy2D},
	{"capture", testCapture},
	{"null-stream", testNullStream},
	{"bad-args", testBadArgs},
	{"pointers", testPointers},
	{"bad-address", testBadAddress},
}

// Run runs the conformance suite on rt as subtests of t. Run itself may be
// called from any goroutine; each subtest locks its own OS thread and sets
// opts.Device on it. Callers must not have set a device on a goroutine that
// was not locked to its thread (the runtime contract forbids it anyway), or
// the per-thread device test may see their setting.
//
// On a GPU, streams share a few hardware queues, and a wait-value at the
// head of one stalls everything queued behind it there: a stream that is
// to release a waiter must not share its queue. The suite keeps at most 5
// streams blocked or releasing at once, within NVIDIA's default of 8
// queues per device (docs/performance.md, "The conformance suite and
// hardware queues").
func Run(t *testing.T, rt hip.Runtime, opts Options) {
	t.Helper()
	opts = opts.withDefaults()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runtime.LockOSThread() // never unlocked: the thread ends with the subtest, and its device with it
			watchdog(t, opts.Timeout)
			c.fn(newEnv(t, rt, opts, rand.New(rand.NewPCG(opts.Seed, uint64(i))), new(atomic.Bool)))
		})
	}
}

// watchdog stops the test binary with a goroutine dump if t has not
// finished (cleanups included) within d. It writes to stderr itself, since
// buffered test output is lost when the binary dies.
func watchdog(t *testing.T, d time.Duration) {
	name := t.Name()
	timer := time.AfterFunc(d, func() {
		fmt.Fprintf(os.Stderr, "hiptest: %s did not finish within %v; goroutines:\n%s\n", name, d, goroutines())
		panic("hiptest: " + name + " hung (watchdog " + d.String() + ")")
	})
	t.Cleanup(func() { timer.Stop() })
}

// goroutines is a dump of every goroutine's stack, capped at 256 KiB.
func goroutines() []byte {
	buf := make([]byte, 256<<10)
	return buf[:runtime.Stack(buf, true)]
}

// env is one subtest's view of the runtime: resources it creates are
// released by t.Cleanup, unless a blocking call hung, in which case they are
// leaked so that the cleanup cannot block on the same stuck work.
type env struct {
	t    *testing.T
	rt   hip.Runtime
	opts Options
	rng  *rand.Rand
	hung *atomic.Bool // shared by nested subtests
	side hip.Stream   // lazily created stream used to release waits
	res  resources
}

// newEnv makes the env of a (sub)test whose goroutine is locked to its thread.
func newEnv(t *testing.T, rt hip.Runtime, opts Options, rng *rand.Rand, hung *atomic.Bool) *env {
	e := &env{t: t, rt: rt, opts: opts, rng: rng, hung: hung}
	t.Cleanup(e.cleanup) // registered first, so it runs after the test's own cleanups
	require.NoError(t, rt.SetDevice(opts.Device), "SetDevice(%d)", opts.Device)
	return e
}

// sub runs f as a nested subtest on its own locked thread.
func (e *env) sub(name string, f func(*env)) {
	e.t.Helper()
	e.t.Run(name, func(t *testing.T) {
		runtime.LockOSThread() // never unlocked, as in Run
		f(newEnv(t, e.rt, e.opts, rand.New(rand.NewPCG(e.rng.Uint64(), 1)), e.hung))
	})
}

// waitBudget is how long one blocking call may take before it counts as hung.
func (e *env) waitBudget() time.Duration { return e.opts.Timeout / 4 }

// start runs fn (a blocking call) on a helper thread with the subtest's
// device current; its result arrives on the channel. A call that never
// returns is left behind, its thread blocked.
func (e *env) start(fn func() error) <-chan error {
	done := make(chan error, 1)
	dev := e.opts.Device
	go func() {
		runtime.LockOSThread() // never unlocked: keep the device setting off other goroutines
		if err := e.rt.SetDevice(dev); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return done
}

// within runs fn like start and reports whether it returned within d.
func (e *env) within(d time.Duration, fn func() error) (err error, ok bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-e.start(fn):
		return err, true
	case <-timer.C:
		return nil, false
	}
}

// await runs a blocking call (a synchronize) and fails the test with a
// goroutine dump if it does not return within the wait budget: a lost
// wake-up is reported where it happened.
func (e *env) await(what string, fn func() error) {
	e.t.Helper()
	err, ok := e.within(e.waitBudget(), fn)
	if !ok {
		e.hung.Store(true)
		e.t.Fatalf("%s: did not complete within %v (lost wake-up, or a wait that never held)\n%s",
			what, e.waitBudget(), goroutines())
	}
	require.NoError(e.t, err, what)
}

// sync waits for every op enqueued on s so far.
func (e *env) sync(s hip.Stream, what string) {
	e.t.Helper()
	e.await(what, func() error { return e.rt.StreamSynchronize(s) })
}

// blocked asserts that s still has work pending after the settle time.
func (e *env) blocked(s hip.Stream, what string) {
	e.t.Helper()
	time.Sleep(e.opts.Settle)
	require.ErrorIs(e.t, e.rt.StreamQuery(s), hip.ErrNotReady, "%s: the stream ran ahead of a wait that does not hold", what)
}

// alloc allocates n bytes of device memory, freed at cleanup.
func (e *env) alloc(n uintptr) hip.DevicePtr {
	e.t.Helper()
	p, err := e.rt.MemAlloc(n)
	require.NoError(e.t, err, "MemAlloc(%d)", n)
	require.NotZero(e.t, p, "MemAlloc(%d)", n)
	e.res.mem = append(e.res.mem, p)
	return p
}

// zeroed allocates n bytes set to 0.
func (e *env) zeroed(n uintptr) hip.DevicePtr {
	e.t.Helper()
	p := e.alloc(n)
	require.NoError(e.t, e.rt.Memset(p, 0, n))
	return p
}

// stream creates a stream, drained and destroyed at cleanup.
func (e *env) stream() hip.Stream {
	e.t.Helper()
	s, err := e.rt.StreamCreate()
	require.NoError(e.t, err, "StreamCreate")
	e.res.streams = append(e.res.streams, s)
	return s
}

// event creates an event, destroyed at cleanup.
func (e *env) event(flags hip.EventFlags) hip.Event {
	e.t.Helper()
	ev, err := e.rt.EventCreate(flags)
	require.NoError(e.t, err, "EventCreate")
	e.res.events = append(e.res.events, ev)
	return ev
}

// resources are what one env created, released together at cleanup.
type resources struct {
	special []hip.Stream // NULL and per-thread streams used: drained, not destroyed
	streams []hip.Stream
	events  []hip.Event
	mem     []hip.DevicePtr
}

// cleanup drains every stream before anything is freed, so that no queued
// op touches freed memory. A stream still blocked (the test failed between
// a wait and its release) makes everything leak rather than wait or crash.
func (e *env) cleanup() {
	t := e.t
	if e.hung.Load() {
		return
	}
	for _, s := range e.res.special {
		// On this thread: stream 2 is the calling thread's own.
		assert.NoError(t, e.rt.StreamSynchronize(s), "cleanup: StreamSynchronize(%d)", s)
	}
	for _, s := range e.res.streams {
		err, ok := e.within(e.waitBudget()/4, func() error { return e.rt.StreamSynchronize(s) })
		if !ok {
			e.hung.Store(true)
			t.Errorf("cleanup: stream %#x still blocked; its resources are leaked", s)
			return
		}
		assert.NoError(t, err, "cleanup: StreamSynchronize")
	}
	// Work the test did not track (a backend that put it elsewhere) must not
	// outlive the memory either.
	err, ok := e.within(e.waitBudget()/4, e.rt.DeviceSynchronize)
	if !ok {
		e.hung.Store(true)
		t.Errorf("cleanup: DeviceSynchronize did not return; resources are leaked")
		return
	}
	assert.NoError(t, err, "cleanup: DeviceSynchronize")
	for _, s := range e.res.streams {
		assert.NoError(t, e.rt.StreamDestroy(s), "cleanup: StreamDestroy")
	}
	for _, ev := range e.res.events {
		assert.NoError(t, e.rt.EventDestroy(ev), "cleanup: EventDestroy")
	}
	for _, p := range e.res.mem {
		assert.NoError(t, e.rt.MemFree(p), "cleanup: MemFree")
	}
}

// memops enqueues ops on s, split into legal batches the way the engine
// splits them: at most MaxMemOpsPerBatch entries, and where
// Caps().SplitWaitReset (HIP: writes of a batch may overtake its waits) a
// new batch wherever a write follows a wait.
func (e *env) memops(s hip.Stream, ops ...hip.MemOp) {
	e.t.Helper()
	split := e.rt.Caps().SplitWaitReset
	for len(ops) > 0 {
		n := len(ops)
		if split {
			n = waitWriteCut(ops)
		}
		require.NoError(e.t, hip.BatchMemOps(e.rt, s, ops[:n]), "StreamBatchMemOp")
		ops = ops[n:]
	}
}

// waitWriteCut is the length of the longest prefix of ops in which no write
// follows a wait.
func waitWriteCut(ops []hip.MemOp) int {
	waited := false
	for i, o := range ops {
		switch o.Op {
		case hip.MemOpWaitValue32:
			waited = true
		case hip.MemOpWriteValue32:
			if waited {
				return i
			}
		}
	}
	return len(ops)
}

// signal makes addr, in memory this process imported, read value once the
// earlier work of s is done. Where a write-value may not target such memory
// (Caps().PeerWriteValue false, CUDA 13.1, B5) it copies 4 bytes from local
// instead, as the engine does: local is a word of this process's own memory
// that already holds value (see prepareSignal), used by this signal only.
func signal(rt hip.Runtime, s hip.Stream, addr hip.DevicePtr, value uint32, local hip.DevicePtr) error {
	if rt.Caps().PeerWriteValue {
		return rt.StreamBatchMemOp(s, []hip.MemOp{hip.WriteValue32(addr, value)})
	}
	return rt.MemcpyAsync(addr, local, 4, s)
}

// prepareSignal stores values into consecutive words at local, for the
// signals that copy them. It runs before any stream of the process blocks:
// the host writes no device memory while a wait is pending (see
// releaseWith).
func prepareSignal(rt hip.Runtime, local hip.DevicePtr, values ...uint32) error {
	var b []byte
	for _, v := range values {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return hip.CopyToDevice(rt, local, b)
}

// copyAsync enqueues one copy.
func (e *env) copyAsync(dst, src hip.DevicePtr, n uintptr, s hip.Stream) {
	e.t.Helper()
	require.NoError(e.t, e.rt.MemcpyAsync(dst, src, n, s), "MemcpyAsync(%d bytes)", n)
}

// releaser creates the stream releaseWith uses. Tests that block streams
// call it before they create those, so that it is not the newest stream
// (on a GPU, streams share hardware queues round-robin by creation).
func (e *env) releaser() {
	if e.side == 0 {
		e.side = e.stream()
	}
}

// releaseWith writes value to addr from a stream of its own, the way a peer
// releases a waiter. The host itself writes no device memory while a wait
// is pending: a synchronous host-to-device Memcpy may queue behind the
// wait and never return (docs/performance.md, "A synchronous copy behind
// a wait").
func (e *env) releaseWith(addr hip.DevicePtr, value uint32) {
	e.t.Helper()
	e.releaser()
	e.memops(e.side, hip.WriteValue32(addr, value))
}

// read copies n bytes of device memory at p into a new slice.
func (e *env) read(p hip.DevicePtr, n uintptr) []byte {
	e.t.Helper()
	b := make([]byte, n)
	require.NoError(e.t, hip.CopyFromDevice(e.rt, b, p), "Memcpy device to host")
	return b
}

// write copies b to device memory at p.
func (e *env) write(p hip.DevicePtr, b []byte) {
	e.t.Helper()
	require.NoError(e.t, hip.CopyToDevice(e.rt, p, b), "Memcpy host to device")
}

func (e *env) read32(p hip.DevicePtr) uint32 {
	e.t.Helper()
	return binary.LittleEndian.Uint32(e.read(p, 4))
}

func (e *env) set32(p hip.DevicePtr, v uint32) {
	e.t.Helper()
	e.write(p, binary.LittleEndian.AppendUint32(nil, v))
}

// random returns n random bytes.
func (e *env) random(n uintptr) []byte {
	b := make([]byte, n+7)
	for i := 0; i < len(b)-7; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], e.rng.Uint64())
	}
	return b[:n:n]
}

// requireBytes compares got with want and names the first difference.
func requireBytes(t *testing.T, want, got []byte, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	if i := firstDiff(want, got); i >= 0 {
		t.Fatalf("%s: byte %d is %#02x, want %#02x (%d bytes differ)", what, i, got[i], want[i], countDiff(want, got))
	}
}

// firstDiff is the index of the first byte where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func countDiff(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// is reports whether err is one of codes.
func is(err error, codes ...hip.Error) bool {
	for _, c := range codes {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// word is the address of the i-th 32-bit word at p.
func word(p hip.DevicePtr, i int) hip.DevicePtr { return p + hip.DevicePtr(4*i) }
