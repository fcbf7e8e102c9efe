package comm

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/forward"
	"cecoll/internal/hip"
	"cecoll/internal/hip/host"
	"cecoll/internal/result"
)

// goLib is a real library in Go for forward-mode tests: it makes handles,
// records what it receives, and can refuse, delay (InProgress) or fail.
type goLib struct {
	mu       sync.Mutex
	calls    []string
	next     forward.Handle
	live     map[forward.Handle]string // handle -> what made it
	cfgs     [][]byte
	refuse   func(rank int) error     // InitRank's answer per rank
	polls    int                      // AsyncError answers InProgress this many times per handle
	polled   map[forward.Handle]int   //
	async    map[forward.Handle]error // AsyncError's answer once ready
	hook     func(call string, h forward.Handle)
	winRefus func(h forward.Handle) error
}

func newGoLib() *goLib {
	return &goLib{next: 0x1000, live: map[forward.Handle]string{}, polled: map[forward.Handle]int{}, async: map[forward.Handle]error{}}
}

// install makes l the process's real library for one test.
func (l *goLib) install(t *testing.T) {
	prev, prevErr := forward.Install(l, nil)
	t.Cleanup(func() { forward.Install(prev, prevErr) })
}

func (l *goLib) record(call string, h forward.Handle) {
	l.mu.Lock()
	l.calls = append(l.calls, fmt.Sprintf("%s %#x", call, uintptr(h)))
	hook := l.hook
	l.mu.Unlock()
	if hook != nil {
		hook(call, h)
	}
}

func (l *goLib) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func (l *goLib) make(what string) forward.Handle {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next += 0x10
	l.live[l.next] = what
	return l.next
}

func (l *goLib) Name() string { return "libfake.so" }
func (l *goLib) Version() int { return 23100 }
func (l *goLib) GetUniqueID(id *[forward.IDBytes]byte) error {
	copy(id[:], "goLib id")
	l.record("GetUniqueID", 0)
	return nil
}

func (l *goLib) InitRank(n int, id *[forward.IDBytes]byte, rank int, cfg []byte) (forward.Handle, error) {
	if !bytes.HasPrefix(id[:], []byte("goLib id")) {
		return 0, result.Errorf(result.InvalidArgument, "not my id")
	}
	l.mu.Lock()
	l.cfgs = append(l.cfgs, cfg)
	refuse := l.refuse
	l.mu.Unlock()
	if refuse != nil {
		if err := refuse(rank); err != nil {
			l.record("InitRank refused", 0)
			return 0, err
		}
	}
	h := l.make(fmt.Sprintf("rank %d of %d", rank, n))
	l.record("InitRank", h)
	return h, nil
}

func (l *goLib) InitAll(n int, devs []int) ([]forward.Handle, error) {
	hs := make([]forward.Handle, n)
	for r := range hs {
		hs[r] = l.make(fmt.Sprintf("InitAll rank %d", r))
	}
	l.record("InitAll", 0)
	return hs, nil
}

func (l *goLib) Split(h forward.Handle, color, key int, cfg []byte) (forward.Handle, error) {
	l.record("Split", h)
	if color == SplitNoColor {
		return 0, nil
	}
	return l.make("split"), nil
}

func (l *goLib) Shrink(h forward.Handle, exclude []int32, cfg []byte, flags int) (forward.Handle, error) {
	l.record("Shrink", h)
	return l.make("shrink"), nil
}

func (l *goLib) end(call string, h forward.Handle) error {
	l.record(call, h)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.live[h]; !ok {
		return result.Errorf(result.InvalidArgument, "%s: unknown handle %#x", call, uintptr(h))
	}
	if call != "Finalize" {
		delete(l.live, h)
	}
	return nil
}

func (l *goLib) Finalize(h forward.Handle) error { return l.end("Finalize", h) }
func (l *goLib) Destroy(h forward.Handle) error  { return l.end("Destroy", h) }
func (l *goLib) Abort(h forward.Handle) error    { return l.end("Abort", h) }

func (l *goLib) AsyncError(h forward.Handle) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.polled[h] < l.polls {
		l.polled[h]++
		return result.Errorf(result.InProgress, "in progress")
	}
	return l.async[h]
}

func (l *goLib) Register(h forward.Handle, p, size uintptr) (forward.Handle, error) {
	l.record("Register", h)
	return l.make("reg"), nil
}

func (l *goLib) Deregister(h, reg forward.Handle) error { return l.end("Deregister", reg) }

func (l *goLib) WindowRegister(h forward.Handle, p, size uintptr, flags int) (forward.Handle, error) {
	l.record("WindowRegister", h)
	if l.winRefus != nil {
		if err := l.winRefus(h); err != nil {
			return 0, err
		}
	}
	return l.make("window"), nil
}

func (l *goLib) WindowDeregister(h, w forward.Handle) error { return l.end("WindowDeregister", w) }
func (l *goLib) GroupStart() error                          { l.record("GroupStart", 0); return nil }
func (l *goLib) GroupEnd() error                            { l.record("GroupEnd", 0); return nil }
func (l *goLib) GroupSimulateEnd(unsafe.Pointer) error      { l.record("GroupSimulateEnd", 0); return nil }
func (l *goLib) Send(_, _ uintptr, _ int32, _ int, h forward.Handle, _ uintptr) error {
	l.record("Send", h)
	return nil
}
func (l *goLib) Recv(_, _ uintptr, _ int32, _ int, h forward.Handle, _ uintptr) error {
	l.record("Recv", h)
	return nil
}

// pairedAll is an n-rank ncclCommInitAll communicator paired with a fresh
// goLib, on the fake engine.
func pairedAll(t *testing.T, n int) (*goLib, *host.Runtime, []*Comm) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	lib := newGoLib()
	lib.install(t)
	rt := newRT(t, n)
	comms, err := InitAll(rt, n, nil, DefaultConfig())
	require.NoError(t, err)
	return lib, rt, comms
}

// onThreadsInit creates n ranks, one locked goroutine each, with cfgs[r].
func onThreadsInit(t *testing.T, rt hip.Runtime, cfgs []Config) ([]*Comm, []error) {
	id, err := NewID()
	require.NoError(t, err)
	n := len(cfgs)
	comms, errs := make([]*Comm, n), make([]error, n)
	each(n, func(r int) { comms[r], errs[r] = InitRank(rt, id, n, r, cfgs[r]) })
	return comms, errs
}

// each runs f(r) for r < n at once, each on its own locked thread.
func each(n int, f func(r int)) {
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f(r)
		}()
	}
	wg.Wait()
}

func configs(n int, cfg Config) []Config {
	out := make([]Config, n)
	for i := range out {
		out[i] = cfg
	}
	return out
}

// Rank 0 makes the real id, every rank inits with it and with the caller's
// config bytes, unchanged; a non-blocking real init is waited for.
func TestPairInitRank(t *testing.T) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	lib := newGoLib()
	lib.polls = 3
	lib.install(t)
	rt := newRT(t, 2)
	cfg := DefaultConfig()
	cfg.Raw = []byte("the caller's config, as it was")
	comms, errs := onThreadsInit(t, rt, configs(2, cfg))
	require.NoError(t, firstError(errs))
	defer destroyAll(t, comms)
	require.Equal(t, 1, lib.count("GetUniqueID"), "rank 0 alone makes the real id")
	require.Equal(t, 2, lib.count("InitRank "))
	for _, c := range comms {
		require.NotZero(t, c.Real())
		require.Equal(t, lib.polls, lib.polled[forward.Handle(c.Real())], "the non-blocking real init was waited for")
	}
	require.NotEqual(t, comms[0].Real(), comms[1].Real())
	for _, b := range lib.cfgs {
		require.Equal(t, cfg.Raw, b, "the config reaches the real library unchanged")
	}
}

// Where the real library refuses on any rank, every rank stays CE-only
// with that reason, and the real communicators that were made are aborted.
func TestPairRefusedLayout(t *testing.T) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	lib := newGoLib()
	lib.refuse = func(rank int) error {
		if rank == 1 {
			return result.Errorf(result.InvalidUsage, "Duplicate GPU detected")
		}
		return nil
	}
	lib.install(t)
	rt := newRT(t, 1)
	comms, errs := onThreadsInit(t, rt, configs(2, DefaultConfig()))
	require.NoError(t, firstError(errs))
	defer destroyAll(t, comms)
	for _, c := range comms {
		require.Zero(t, c.Real(), "rank %d paired although rank 1 was refused", c.Rank())
		err := c.ForwardRefusal("ncclAllReduce", "reductions need compute")
		requireCode(t, result.InvalidUsage, err)
		require.Contains(t, err.Error(), "on rank 1: Duplicate GPU detected")
		require.True(t, c.RouteCE(ce.FuncAllGather, 0, 0, 1, 7, -1), "a CE-only communicator runs its collectives")
	}
	require.Equal(t, 1, lib.count("Abort"), "rank 0's real communicator is aborted")
	require.Empty(t, lib.live)
}

// Every rank must agree on what routes a call: a rank whose config asks
// for zero SMs beside one that does not fails init on both, rather than
// routing the same call two ways later.
func TestPairRoutingAgreement(t *testing.T) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	lib := newGoLib()
	lib.install(t)
	rt := newRT(t, 2)
	zero := DefaultConfig()
	zero.CTAPolicy, zero.CTASet = forward.CTAPolicyZero, true
	_, errs := onThreadsInit(t, rt, []Config{zero, DefaultConfig()})
	for r, err := range errs {
		requireCode(t, result.InvalidUsage, err)
		require.Contains(t, err.Error(), "disagree on routing", "rank %d", r)
	}
	require.Zero(t, lib.count("InitRank"), "no real communicator is made")
}

// The real communicator goes first: when the real library finalizes,
// destroys or aborts its side, cecoll's is still whole.
func TestPairOrder(t *testing.T) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	lib := newGoLib()
	lib.install(t)
	rt := newRT(t, 2)
	for _, end := range []string{"Finalize", "Destroy", "Abort"} {
		t.Run(end, func(t *testing.T) {
			comms, err := InitAll(rt, 2, nil, DefaultConfig())
			require.NoError(t, err)
			byReal := map[forward.Handle]*Comm{}
			for _, c := range comms {
				byReal[forward.Handle(c.Real())] = c
			}
			var seen []state
			lib.hook = func(call string, h forward.Handle) {
				if call == end {
					seen = append(seen, byReal[h].state())
				}
			}
			defer func() { lib.hook = nil }()
			for _, c := range comms {
				switch end {
				case "Finalize":
					require.NoError(t, c.Finalize())
					require.Equal(t, stFinalized, c.state())
				case "Destroy":
					require.NoError(t, c.Destroy())
				case "Abort":
					require.NoError(t, c.Abort())
				}
			}
			require.Equal(t, []state{stReady, stReady}, seen, "cecoll's side when the real one ended")
			if end == "Finalize" {
				destroyAll(t, comms)
			}
			require.Empty(t, lib.live, "every real communicator is gone")
		})
	}
}

// The routing rule on a paired communicator.
func TestPairRoute(t *testing.T) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	lib := newGoLib()
	lib.install(t)
	rt := newRT(t, 2)
	t.Setenv("CECOLL_ROUTE_BYTES", "4K")
	const small, large = 256, 1024 // floats: 1 KiB, 4 KiB
	comms, err := InitAll(rt, 2, nil, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, comms)
	c := comms[0]
	require.False(t, c.RouteCE(ce.FuncAllGather, 0x1000, 0x2000, small, 7, -1), "small: the real library")
	require.True(t, c.RouteCE(ce.FuncAllGather, 0x1000, 0x2000, large, 7, -1), "at CECOLL_ROUTE_BYTES: copy engines")
	require.False(t, c.RouteCE(ce.FuncGather, 0x1000, 0x2000, large-1, 7, -1), "just below")
	require.True(t, c.RouteCE(ce.FuncScatter, 0x1000, 0x2000, small, 7, forward.CTAPolicyZero), "a zero-SM call config")
	require.False(t, c.RouteCE(ce.FuncScatter, 0x1000, 0x2000, small, 7, 1), "an efficiency call config")

	// A symmetric window: its AllGather goes to the copy engines at any size.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mem := make([]hip.DevicePtr, 2)
	wins := make([]*Window, 2)
	require.NoError(t, GroupStart())
	for r, cc := range comms {
		require.NoError(t, rt.SetDevice(cc.Device()))
		mem[r], err = rt.MemAlloc(1 << 16)
		require.NoError(t, err)
		wins[r], err = cc.WindowRegister(mem[r], 1<<16, WinCollSymmetric)
		require.NoError(t, err)
	}
	require.NoError(t, GroupEnd())
	require.Equal(t, 2, lib.count("WindowRegister"), "registered with both")
	require.True(t, c.RouteCE(ce.FuncAllGather, mem[0], mem[0]+4096, small, 7, -1), "window: copy engines")
	require.False(t, c.RouteCE(ce.FuncGather, 0x1000, mem[0]+4096, small, 7, -1), "Gather decides by its send buffer")
	require.True(t, c.RouteCE(ce.FuncGather, mem[0], 0x1000, small, 7, -1))
	require.NotZero(t, wins[0].Real())
	for r, cc := range comms {
		require.NoError(t, cc.WindowDeregister(wins[r]))
		require.NoError(t, rt.MemFree(mem[r]))
	}
	require.Equal(t, 2, lib.count("WindowDeregister"))

	allocs := testing.AllocsPerRun(100, func() { c.RouteCE(ce.FuncAllGather, 0x1000, 0x2000, small, 7, -1) })
	require.Zero(t, allocs, "the launch path's routing allocates")

	for _, tc := range []struct {
		route string
		ce    bool
	}{{"ce", true}, {"nccl", false}} {
		t.Setenv("CECOLL_ROUTE", tc.route)
		cs, err := InitAll(rt, 2, nil, DefaultConfig())
		require.NoError(t, err)
		require.Equal(t, tc.ce, cs[0].RouteCE(ce.FuncAllGather, 0x1000, 0x2000, small, 7, -1), "CECOLL_ROUTE=%s small", tc.route)
		require.Equal(t, tc.ce, cs[0].RouteCE(ce.FuncAlltoAll, 0x1000, 0x2000, 1<<20, 7, forward.CTAPolicyZero), "CECOLL_ROUTE=%s large, zero SMs", tc.route)
		destroyAll(t, cs)
	}
}

// A communicator whose ranks are on several hosts forwards everything and
// has no engine; without a real library it is refused.
func TestPairSpansHosts(t *testing.T) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 2)
	a, b := DefaultConfig(), DefaultConfig()
	a.Host, b.Host = "node-a", "node-b"
	_, errs := onThreadsInit(t, rt, []Config{a, b})
	for _, err := range errs {
		requireCode(t, result.InvalidUsage, err)
		require.Contains(t, err.Error(), "several hosts")
	}
	lib := newGoLib()
	lib.install(t)
	comms, errs := onThreadsInit(t, rt, []Config{a, b})
	require.NoError(t, firstError(errs))
	defer destroyAll(t, comms)
	for _, c := range comms {
		require.True(t, c.Spans())
		require.Nil(t, c.engine(), "no copy engines across nodes")
		require.NotZero(t, c.Real())
		require.False(t, c.RouteCE(ce.FuncAllGather, 0x1000, 0x2000, 1<<30, 7, forward.CTAPolicyZero))
	}
}

// Split makes both sides; NCCL_SPLIT_NOCOLOR none; a CE-only parent gives
// CE-only children, with its reason.
func TestPairSplit(t *testing.T) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	lib := newGoLib()
	lib.install(t)
	rt := newRT(t, 4)
	comms, errs := onThreadsInit(t, rt, configs(4, DefaultConfig()))
	require.NoError(t, firstError(errs))
	defer destroyAll(t, comms)
	kids := make([]*Comm, 4)
	kidErrs := make([]error, 4)
	each(4, func(r int) {
		color := r % 2
		if r == 3 {
			color = SplitNoColor
		}
		kids[r], kidErrs[r] = comms[r].Split(color, -r, nil)
	})
	require.NoError(t, firstError(kidErrs))
	require.Equal(t, 4, lib.count("Split"), "the real communicator is split on every rank")
	require.Nil(t, kids[3], "NCCL_SPLIT_NOCOLOR")
	require.Equal(t, 2, kids[0].Size())
	require.Equal(t, 1, kids[0].Rank(), "keys reversed: rank 2 comes first")
	require.Equal(t, 0, kids[2].Rank())
	require.Equal(t, 1, kids[1].Size())
	for _, k := range kids[:3] {
		require.NotZero(t, k.Real(), "rank %d's child has its real side", k.Rank())
	}
	destroyAll(t, kids[:3])

	lib.refuse = func(int) error { return result.Errorf(result.InvalidUsage, "Duplicate GPU detected") }
	ceOnly, errs := onThreadsInit(t, rt, configs(2, DefaultConfig()))
	require.NoError(t, firstError(errs))
	defer destroyAll(t, ceOnly)
	each(2, func(r int) { kids[r], kidErrs[r] = ceOnly[r].Split(0, r, nil) })
	require.NoError(t, firstError(kidErrs[:2]))
	for _, k := range kids[:2] {
		require.Zero(t, k.Real())
		require.Contains(t, k.ForwardRefusal("ncclAllReduce", "x").Error(), "Duplicate GPU detected")
	}
	destroyAll(t, kids[:2])
}

// Shrink makes both sides among the ranks that call it, in process and
// through derived ids at a TCP root.
func TestPairShrink(t *testing.T) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	lib := newGoLib()
	lib.install(t)
	rt := newRT(t, 3)
	tcp, errs := onThreadsInit(t, rt, configs(3, DefaultConfig()))
	require.NoError(t, firstError(errs))
	defer destroyAll(t, tcp)
	local, err := InitAll(rt, 3, nil, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, local)
	for _, parents := range [][]*Comm{tcp, local} {
		kids := make([]*Comm, 3)
		kidErrs := make([]error, 3)
		each(3, func(r int) {
			if r != 1 {
				kids[r], kidErrs[r] = parents[r].Shrink([]int32{1}, nil, 0)
			}
		})
		require.NoError(t, firstError(kidErrs))
		require.Equal(t, 2, kids[0].Size())
		require.Equal(t, []int{0, 1}, []int{kids[0].Rank(), kids[2].Rank()})
		require.NotZero(t, kids[0].Real())
		// A shrink of a shrink: its id derives from a derived one.
		pair := []*Comm{kids[0], kids[2]}
		grand := make([]*Comm, 2)
		each(2, func(r int) { grand[r], kidErrs[r] = pair[r].Shrink([]int32{}, nil, 0) })
		require.NoError(t, firstError(kidErrs))
		require.Equal(t, 2, grand[1].Size())
		destroyAll(t, grand)
		destroyAll(t, pair)
	}
	require.Equal(t, 8, lib.count("Shrink"))
}

// A group holding both: the real group opens and closes with cecoll's, on
// this thread, and closes before cecoll launches its collectives; the
// inner levels close the real group's inner levels.
func TestPairMixedGroup(t *testing.T) {
	lib, rt, comms := pairedAll(t, 2)
	defer destroyAll(t, comms)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	engs := []*fakeEngine{comms[0].engine().(*fakeEngine), comms[1].engine().(*fakeEngine)}
	var atEnd []int
	lib.hook = func(call string, _ forward.Handle) {
		if call == "GroupEnd" {
			n, _ := engs[0].launches()
			atEnd = append(atEnd, n)
		}
	}
	defer func() { lib.hook = nil }()
	mem := make([]hip.DevicePtr, 2)
	for r := range mem {
		var err error
		mem[r], err = rt.MemAlloc(8192)
		require.NoError(t, err)
		defer rt.MemFree(mem[r])
	}
	require.NoError(t, GroupStart())
	require.NoError(t, GroupStart())
	require.NoError(t, GroupEnd())
	require.Equal(t, []int{0}, atEnd, "an inner level closes the real group's inner level")
	for r, c := range comms {
		require.NoError(t, c.Collective(ce.FuncAllGather, mem[r], mem[r]+4096, 16, 7, 0, 0))
	}
	require.NoError(t, GroupEnd())
	require.Equal(t, []int{0, 0}, atEnd, "the real group closed before cecoll launched")
	n, _ := engs[0].launches()
	require.Equal(t, 1, n)
	require.Equal(t, 2, lib.count("GroupStart"))
	require.NoError(t, GroupStart())
	require.NoError(t, GroupSimulateEnd(nil), "the real library's answer")
	require.Equal(t, 1, lib.count("GroupSimulateEnd"))
	require.Nil(t, currentGroup())
}

// ncclCommGetAsyncError reports whichever side failed, the real one first.
func TestPairAsyncError(t *testing.T) {
	lib, _, comms := pairedAll(t, 2)
	defer destroyAll(t, comms)
	require.NoError(t, comms[0].AsyncError())
	lib.mu.Lock()
	lib.async[forward.Handle(comms[0].Real())] = result.Errorf(result.RemoteError, "the real peer died")
	lib.mu.Unlock()
	err := comms[0].AsyncError()
	requireCode(t, result.RemoteError, err)
	require.Contains(t, err.Error(), "the real peer died")
	comms[1].fail(result.Errorf(result.InvalidUsage, "cecoll's own failure"))
	err = comms[1].AsyncError()
	requireCode(t, result.InvalidUsage, err)
	require.Contains(t, err.Error(), "cecoll's own failure")
}

// A window the real library refuses on any rank is cecoll's alone on
// every rank, with the reason; the real windows made are dropped.
func TestPairWindowRefused(t *testing.T) {
	lib, rt, comms := pairedAll(t, 2)
	defer destroyAll(t, comms)
	lib.winRefus = func(h forward.Handle) error {
		if h == forward.Handle(comms[1].Real()) {
			return result.Errorf(result.InvalidUsage, "not ncclMemAlloc memory")
		}
		return nil
	}
	mem := make([]hip.DevicePtr, 2)
	wins := make([]*Window, 2)
	errs := make([]error, 2)
	each(2, func(r int) {
		rt.SetDevice(comms[r].Device())
		mem[r], _ = rt.MemAlloc(1 << 16)
		wins[r], errs[r] = comms[r].WindowRegister(mem[r], 1<<16, WinCollSymmetric)
	})
	require.NoError(t, firstError(errs), "cecoll's registration stands")
	for r, w := range wins {
		require.NotNil(t, w)
		require.Zero(t, w.Real(), "rank %d", r)
		require.Contains(t, w.RealWhy(), "on rank 1: not ncclMemAlloc memory")
		require.True(t, w.Live(), "cecoll's window stands")
	}
	require.Equal(t, 1, lib.count("WindowDeregister"), "rank 0's real window is dropped")
	for r, c := range comms {
		require.NoError(t, c.WindowDeregister(wins[r]))
		require.NoError(t, rt.MemFree(mem[r]))
	}
}

// ncclCommRegister registers with both, and deregisters the real one.
func TestPairRegister(t *testing.T) {
	lib, _, comms := pairedAll(t, 2)
	defer destroyAll(t, comms)
	h, err := comms[0].Register(0x10000, 4096)
	require.NoError(t, err)
	require.Equal(t, 1, lib.count("Register"))
	require.NoError(t, comms[0].Deregister(h))
	require.Equal(t, 1, lib.count("Deregister"))
}

// In forward mode a communicator whose copy engines cannot run safely on
// some rank (too few hardware queues: CUDA_DEVICE_MAX_CONNECTIONS=1, as
// Megatron-LM sets) does not fail: every rank forwards every call, agreed
// at init, CECOLL_ROUTE=ce included. Only where the real library refused
// the communicator too does its init fail, on every rank, saying both.
func TestPairQueuesForwardOnly(t *testing.T) {
	watchdog(t, 60*time.Second)
	useFakeEngine(t)
	lib := newGoLib()
	lib.install(t)
	t.Setenv("CECOLL_ROUTE", "ce")
	initOn := func(rt hip.Runtime, devs []int) ([]*Comm, []error) {
		id, err := NewID()
		require.NoError(t, err)
		n := len(devs)
		comms, errs := make([]*Comm, n), make([]error, n)
		each(n, func(r int) {
			if errs[r] = rt.SetDevice(devs[r]); errs[r] == nil {
				comms[r], errs[r] = InitRank(rt, id, n, r, DefaultConfig())
			}
		})
		return comms, errs
	}
	for _, tc := range []struct {
		queues int
		devs   []int
		ce     bool
	}{
		{1, []int{0, 1}, false}, // one rank per device, 1 queue
		{3, []int{0, 1}, false}, // its engine's two streams and the caller's
		{4, []int{0, 1}, true},
		{4, []int{0, 0}, false}, // two ranks on one device need 5
		{5, []int{0, 0}, true},
		{3, []int{0, 1, 1}, false}, // the ranks decide alike, rank 0 too
	} {
		t.Setenv("CECOLL_HOST_QUEUES", fmt.Sprint(tc.queues))
		rt := newRT(t, 2)
		comms, errs := initOn(rt, tc.devs)
		require.NoError(t, firstError(errs), "%d queues, devices %v", tc.queues, tc.devs)
		for _, c := range comms {
			require.NotZero(t, c.Real())
			require.Equal(t, tc.ce, c.engine() != nil, "%d queues, devices %v: rank %d's engine", tc.queues, tc.devs, c.Rank())
			require.Equal(t, tc.ce, c.RouteCE(ce.FuncAllGather, 0x1000, 0x2000, 1<<20, 7, forward.CTAPolicyZero),
				"%d queues, devices %v: rank %d routes a CECOLL_ROUTE=ce call to copy engines", tc.queues, tc.devs, c.Rank())
			if !tc.ce {
				err := c.Collective(FuncAllGather, 0x1000, 0x2000, 4, 7, 0, 0)
				requireCode(t, result.InvalidUsage, err)
				require.ErrorContains(t, err, "hardware queues")
				require.NoError(t, c.AsyncError(), "a refusal every rank makes alike fails nothing")
			}
		}
		destroyAll(t, comms)
	}

	// The real library refuses too: nothing can run it.
	t.Setenv("CECOLL_HOST_QUEUES", "1")
	lib.refuse = func(rank int) error { return result.Errorf(result.InvalidUsage, "Duplicate GPU detected") }
	_, errs := initOn(newRT(t, 2), []int{0, 1})
	for r, err := range errs {
		requireCode(t, result.InvalidUsage, err)
		require.ErrorContains(t, err, "hardware queues", "rank %d", r)
		require.ErrorContains(t, err, "Duplicate GPU detected", "rank %d", r)
	}
}
