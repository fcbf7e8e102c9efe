package ce

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/host"
)

// world is an in-process communicator of n ranks for the engine's tests:
// ranks are goroutines on locked OS threads, each on its own virtual
// device (or a shared one), with a host barrier and a window registry.
type world struct {
	t     testing.TB
	rt    *host.Runtime
	n     int
	comms []*testComm
	bar   barrier

	regMu sync.Mutex
	regs  [][]hip.DevicePtr // registration index -> every rank's base
	sizes []uintptr

	shared  []hip.DevicePtr // scratch for exchanging pointers between ranks
	closed  atomic.Bool     // the runtime was closed to end a hang
	failed  atomic.Bool     // a rank failed: the barrier is open, nothing is freed
	started sync.WaitGroup  // ranks not yet past Init and StreamCreate

	// SharedMem, as internal/comm: internal window memory is freed once
	// no rank holds it (a released stream may still write into a peer's).
	shMu      sync.Mutex
	shHolders int
	shPending []hip.DevicePtr
}

type worldOpts struct {
	chaos    int64
	caps     *hip.Caps
	devices  int // 0: one per rank
	memAlloc func(rt hip.Runtime, p hip.DevicePtr, size uintptr)
	wrap     func(rank int, rt hip.Runtime) hip.Runtime // a recording runtime (b_test.go)
}

func newWorld(t testing.TB, n int, o worldOpts) *world {
	devs := o.devices
	if devs == 0 {
		devs = n
	}
	rt, err := host.New(host.Config{Devices: devs, Chaos: o.chaos, Caps: o.caps})
	require.NoError(t, err)
	w := &world{t: t, rt: rt, n: n, shared: make([]hip.DevicePtr, n)}
	w.bar.n = n
	for r := range n {
		var crt hip.Runtime = testRT{rt, o.memAlloc}
		if o.wrap != nil {
			crt = o.wrap(r, crt)
		}
		w.comms = append(w.comms, &testComm{w: w, rank: r, dev: r % devs, rt: crt})
	}
	t.Cleanup(rt.Close)
	return w
}

// testRT lets a test see every allocation the engine makes.
type testRT struct {
	*host.Runtime
	memAlloc func(rt hip.Runtime, p hip.DevicePtr, size uintptr)
}

func (r testRT) MemAlloc(size uintptr) (hip.DevicePtr, error) {
	p, err := r.Runtime.MemAlloc(size)
	if err == nil && r.memAlloc != nil {
		r.memAlloc(r.Runtime, p, size)
	}
	return p, err
}

// barrier is a reusable host barrier.
type barrier struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
	in   int
	gen  int
	open bool // released after a hang: waits return at once
}

func (b *barrier) wait() {
	b.mu.Lock()
	if b.cond == nil {
		b.cond = sync.NewCond(&b.mu)
	}
	if b.open {
		b.mu.Unlock()
		return
	}
	g := b.gen
	b.in++
	if b.in == b.n {
		b.in = 0
		b.gen++
		b.cond.Broadcast()
	} else {
		for g == b.gen {
			b.cond.Wait()
		}
	}
	b.mu.Unlock()
}

type testComm struct {
	w    *world
	rank int
	dev  int
	rt   hip.Runtime
	nreg int
	wins []*testWin
}

type testWin struct {
	bases []hip.DevicePtr
	rank  int
	size  uintptr
}

func (w *testWin) Base() hip.DevicePtr             { return w.bases[w.rank] }
func (w *testWin) Size() uintptr                   { return w.size }
func (w *testWin) PeerBase(peer int) hip.DevicePtr { return w.bases[peer] }

func (c *testComm) Rank() int            { return c.rank }
func (c *testComm) Size() int            { return c.w.n }
func (c *testComm) Device() int          { return c.dev }
func (c *testComm) Runtime() hip.Runtime { return c.rt }
func (c *testComm) Barrier() error       { c.w.bar.wait(); return nil }

// DeviceShared: the harness's ranks all live in the test process.
func (c *testComm) DeviceShared() bool {
	for _, o := range c.w.comms {
		if o != c && o.dev == c.dev {
			return true
		}
	}
	return false
}

// HoldShared implements SharedMem.
func (c *testComm) HoldShared() {
	c.w.shMu.Lock()
	c.w.shHolders++
	c.w.shMu.Unlock()
}

// ReleaseShared implements SharedMem: the last holder frees everything.
func (c *testComm) ReleaseShared(ps ...hip.DevicePtr) error {
	w := c.w
	w.shMu.Lock()
	defer w.shMu.Unlock()
	w.shPending = append(w.shPending, ps...)
	w.shHolders--
	if w.shHolders > 0 {
		return nil
	}
	var first error
	for _, p := range w.shPending {
		if err := c.rt.MemFree(p); err != nil && first == nil {
			first = err
		}
	}
	w.shPending = nil
	return first
}

// OneDevice: every rank of the world on this rank's device.
func (c *testComm) OneDevice() bool {
	for _, o := range c.w.comms {
		if o.dev != c.dev {
			return false
		}
	}
	return true
}

func (c *testComm) RegisterWindow(p hip.DevicePtr, size uintptr) (Window, error) {
	w := c.w
	idx := c.nreg
	c.nreg++
	w.regMu.Lock()
	for len(w.regs) <= idx {
		w.regs = append(w.regs, make([]hip.DevicePtr, w.n))
		w.sizes = append(w.sizes, size)
	}
	w.regs[idx][c.rank] = p
	w.regMu.Unlock()
	w.bar.wait()
	w.regMu.Lock()
	win := &testWin{bases: append([]hip.DevicePtr(nil), w.regs[idx]...), rank: c.rank, size: size}
	w.regMu.Unlock()
	w.bar.wait()
	c.wins = append(c.wins, win)
	return win, nil
}

func (c *testComm) DeregisterWindow(win Window) error {
	for i, x := range c.wins {
		if x == win {
			c.wins = append(c.wins[:i], c.wins[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("window not registered")
}

func (c *testComm) FindWindow(p hip.DevicePtr, n uintptr) (Window, bool) {
	for _, x := range c.wins {
		if p >= x.Base() && uintptr(p-x.Base())+n <= x.size {
			return x, true
		}
	}
	return nil, false
}

// exchange publishes p as this rank's value and returns every rank's.
func (c *testComm) exchange(p hip.DevicePtr) []hip.DevicePtr {
	w := c.w
	w.bar.wait()
	w.regMu.Lock()
	w.shared[c.rank] = p
	w.regMu.Unlock()
	w.bar.wait()
	w.regMu.Lock()
	out := append([]hip.DevicePtr(nil), w.shared...)
	w.regMu.Unlock()
	w.bar.wait()
	return out
}

// rankEnv is what a rank's test body gets.
type rankEnv struct {
	*testComm
	t   testing.TB
	rt  hip.Runtime
	e   *Engine
	s   hip.Stream
	mem []hip.DevicePtr
}

func (r *rankEnv) alloc(n uintptr) hip.DevicePtr {
	p, err := r.rt.MemAlloc(max(n, 1))
	if err != nil {
		panic(err)
	}
	r.mem = append(r.mem, p)
	return p
}

func (r *rankEnv) put(p hip.DevicePtr, b []byte) {
	if err := hip.CopyToDevice(r.rt, p, b); err != nil {
		panic(err)
	}
}

func (r *rankEnv) get(p hip.DevicePtr, n uintptr) []byte {
	b := make([]byte, n)
	if err := hip.CopyFromDevice(r.rt, b, p); err != nil {
		panic(err)
	}
	return b
}

// captureGraph captures calls on r.s (thread-local mode) and instantiates
// the graph. The capture is ended even when a launch fails, whose error
// then comes first, so the stream never stays capturing.
func (r *rankEnv) captureGraph(calls ...*Args) (hip.GraphExec, error) {
	if err := r.rt.StreamBeginCapture(r.s, hip.CaptureModeThreadLocal); err != nil {
		return 0, err
	}
	var lerr error
	for _, a := range calls {
		if lerr = r.e.Launch(a); lerr != nil {
			break
		}
	}
	g, err := r.rt.StreamEndCapture(r.s)
	if lerr != nil {
		return 0, lerr
	}
	if err != nil {
		return 0, err
	}
	return r.rt.GraphInstantiate(g)
}

// replay launches the graph g on the rank's stream and waits for it.
func (r *rankEnv) replay(g hip.GraphExec) error {
	if err := r.rt.GraphLaunch(g, r.s); err != nil {
		return err
	}
	r.syncStream()
	return nil
}

func (r *rankEnv) syncStream() {
	if err := r.rt.StreamSynchronize(r.s); err != nil {
		panic(err)
	}
}

// run runs body on every rank (locked OS thread, device set, an engine
// from Init with cfg and a stream) and fails the test if a rank fails or
// the whole does not finish within limit (dumping goroutines). It returns
// false on a timeout when hangOK, after closing the runtime so that stuck
// waits end.
func (w *world) run(cfg Config, limit time.Duration, hangOK bool, body func(r *rankEnv) error) ([]error, bool) {
	t := w.t
	errs := make([]error, w.n)
	var wg sync.WaitGroup
	w.started.Add(w.n)
	for i := range w.n {
		wg.Add(1)
		go func(c *testComm) {
			defer wg.Done()
			var once sync.Once
			started := func() { once.Do(w.started.Done) }
			defer started()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer func() {
				if p := recover(); p != nil {
					errs[c.rank] = fmt.Errorf("rank %d panic: %v", c.rank, p)
					w.abort()
				}
			}()
			if err := c.rt.SetDevice(c.dev); err != nil {
				errs[c.rank] = err
				return
			}
			e, err := Init(c, cfg)
			if err != nil {
				errs[c.rank] = fmt.Errorf("rank %d init: %w", c.rank, err)
				w.abort()
				return
			}
			s, err := c.rt.StreamCreate()
			started()
			if err != nil {
				errs[c.rank] = err
				return
			}
			r := &rankEnv{testComm: c, t: t, rt: c.rt, e: e, s: s}
			if err := body(r); err != nil {
				errs[c.rank] = fmt.Errorf("rank %d: %w", c.rank, err)
				w.abort()
			}
			if !w.failed.Load() {
				_ = c.rt.StreamSynchronize(s)
			}
			// Nobody frees a window a peer's stream may still write to.
			w.bar.wait()
			if w.failed.Load() {
				return
			}
			<-e.Close()
			_ = c.rt.StreamDestroy(s)
			for _, p := range r.mem {
				_ = c.rt.MemFree(p)
			}
		}(w.comms[i])
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		if hangOK {
			w.closeRT()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				dumpGoroutines(t)
				t.Fatalf("ranks still stuck after the runtime was closed")
			}
			return errs, false
		}
		dumpGoroutines(t)
		t.Fatalf("collective test hung for %v", limit)
	}
	if !hangOK {
		require.NoError(t, errors.Join(errs...))
	}
	return errs, true
}

// abort ends a failed run: the peers of a failed rank would wait for it
// forever on the barrier. Device waits end at the run's time limit, when
// the runtime is closed (closeRT); closing at once would race with peers
// still making runtime calls, which the host runtime does not support.
func (w *world) abort() {
	w.failed.Store(true)
	w.bar.release()
}

// closeRT closes the runtime to end stuck device waits, once every rank is
// past its set-up calls.
func (w *world) closeRT() {
	if w.closed.Swap(true) {
		return
	}
	w.abort()
	go func() { w.started.Wait(); w.rt.Close() }()
}

// release lets every waiter of the barrier go (after a hang).
func (b *barrier) release() {
	b.mu.Lock()
	b.open = true
	b.gen++
	if b.cond != nil {
		b.cond.Broadcast()
	}
	b.mu.Unlock()
}

func dumpGoroutines(t testing.TB) {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	t.Logf("goroutines:\n%s", buf.String())
	_ = os.Stderr.Sync()
}

// launchSteps issues a as internal/comm's group does: Prepare, then every
// step, with a host barrier after each (the order the group's one thread
// gives). Every rank calls it for the same call. With events, a must hold
// every rank's event (withEvents).
func (r *rankEnv) launchSteps(a *Args) error {
	pr, err := r.e.Prepare(a)
	if err != nil {
		return err
	}
	for k := range pr.Steps {
		if err := r.e.Step(k); err != nil {
			return err
		}
		r.w.bar.wait()
	}
	return nil
}

// withEvents sets a.PeerEvents to every rank's event, as the group does.
func (r *rankEnv) withEvents(a *Args) {
	evs := r.exchange(hip.DevicePtr(r.e.Event()))
	a.PeerEvents = make([]hip.Event, r.w.n)
	for p := range r.w.n {
		a.PeerEvents[p] = hip.Event(evs[p])
	}
}
