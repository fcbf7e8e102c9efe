package comm

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/hip/host"
	"cecoll/internal/testutil"
)

var (
	watchdog    = testutil.Watchdog
	requireCode = testutil.RequireCode
	freePort    = testutil.FreePort
)

// newRT is a host runtime with the given device count; CECOLL_HOST_CHAOS
// and CECOLL_HOST_CAPS apply, so the chaos runs of the Makefile reach here.
func newRT(t *testing.T, devices int) *host.Runtime {
	t.Helper()
	cfg, err := host.ConfigFromEnv()
	require.NoError(t, err)
	cfg.Devices = devices
	rt, err := host.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { reclaiming.Wait(); rt.Close() })
	return rt
}

// fakeEngine stands in for the CE engine so this package's logic (windows,
// groups, peer buffers) is tested on its own. Like the real engine it
// registers an internal window and barriers at init. Its AllGather copies
// synchronously on the host: through PeerRecv when given, else through the
// recv buffer's window, else it refuses.
type fakeEngine struct {
	c     ce.Comm
	buf   hip.DevicePtr
	win   ce.Window
	mu    sync.Mutex
	calls []ce.Args
	peer  int // launches that had PeerRecv
}

func newFakeEngine(c ce.Comm, _ ce.Config) (engine, error) {
	rt := c.Runtime()
	if err := rt.SetDevice(c.Device()); err != nil {
		return nil, err
	}
	p, err := rt.MemAlloc(4096)
	if err != nil {
		return nil, err
	}
	w, err := c.RegisterWindow(p, 4096)
	if err != nil {
		rt.MemFree(p)
		return nil, err
	}
	if err := c.Barrier(); err != nil {
		return nil, err
	}
	return &fakeEngine{c: c, buf: p, win: w}, nil
}

// Prepare records the call and makes its copies at once: it needs no
// steps.
func (e *fakeEngine) Prepare(a *ce.Args) (ce.Prepared, error) { return ce.Prepared{}, e.copyNow(a) }

func (e *fakeEngine) copyNow(a *ce.Args) error {
	e.mu.Lock()
	e.calls = append(e.calls, *a)
	if a.PeerRecv != nil {
		e.peer++
	}
	e.mu.Unlock()
	if a.Func != ce.FuncAllGather {
		return nil
	}
	n, me := e.c.Size(), e.c.Rank()
	chunk := a.Count * a.EltSize
	for r := 0; r < n; r++ {
		var dst hip.DevicePtr
		switch {
		case a.PeerRecv != nil:
			dst = a.PeerRecv[r]
		default:
			w, ok := e.c.FindWindow(a.Recv, chunk*uintptr(n))
			if !ok {
				return fmt.Errorf("fake engine: recv buffer in no window")
			}
			dst = w.PeerBase(r) + (a.Recv - w.Base())
		}
		if err := e.c.Runtime().Memcpy(uintptr(dst)+uintptr(me)*chunk, uintptr(a.Send), chunk); err != nil {
			return err
		}
	}
	return nil
}

func (e *fakeEngine) Close() <-chan struct{} {
	if e.win != nil {
		e.c.DeregisterWindow(e.win)
		e.win = nil
		e.c.Runtime().MemFree(e.buf)
	}
	return closedChan()
}

// Abort has nothing to release: the fake copies synchronously.
func (e *fakeEngine) Abort() {}

func (e *fakeEngine) Step(int) error               { return nil }
func (e *fakeEngine) Drained() bool                { return true }
func (e *fakeEngine) Pending() bool                { return false }
func (e *fakeEngine) Issued() uint64               { return 0 }
func (e *fakeEngine) Event() hip.Event             { return 0 }
func (e *fakeEngine) OrderBefore(hip.Stream) error { return nil }
func (e *fakeEngine) OrderAfter(hip.Stream) error  { return nil }

func closedChan() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (e *fakeEngine) launches() (all, withPeers int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.calls), e.peer
}

// useFakeEngine swaps the engine for the fake for one test.
func useFakeEngine(t *testing.T) {
	old := newEngine
	newEngine = newFakeEngine
	t.Cleanup(func() { newEngine = old })
}

// useNopEngine makes the communicators t creates run engines that do
// nothing (nopEngine): the launch path's own cost, without a device's.
func useNopEngine(t *testing.T) {
	old := newEngine
	newEngine = func(c ce.Comm, _ ce.Config) (engine, error) { return nopEngine{}, nil }
	t.Cleanup(func() { newEngine = old })
}

// nopComms is n ranks of one process on device 0 with engines that do
// nothing, destroyed when t ends.
func nopComms(t *testing.T, n int) []*Comm {
	useNopEngine(t)
	comms, err := InitAll(newRT(t, 1), n, make([]int, n), DefaultConfig())
	require.NoError(t, err)
	t.Cleanup(func() { destroyAll(t, comms) })
	return comms
}

func destroyAll(t *testing.T, comms []*Comm) {
	t.Helper()
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
}

// initThreads creates an n-rank communicator with one locked goroutine per
// rank calling InitRank, rank r on devs[r].
func initThreads(t *testing.T, rt hip.Runtime, devs []int) ([]*Comm, []error) {
	id, err := NewID()
	require.NoError(t, err)
	n := len(devs)
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if errs[r] = rt.SetDevice(devs[r]); errs[r] != nil {
				return
			}
			comms[r], errs[r] = InitRank(rt, id, n, r, DefaultConfig())
		}()
	}
	wg.Wait()
	return comms, errs
}

func unsafePointer(b *byte) unsafe.Pointer { return unsafe.Pointer(b) }
