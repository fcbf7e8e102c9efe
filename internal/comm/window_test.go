package comm

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// onRanks runs f for every comm at once (registration is collective).
func onRanks(comms []*Comm, f func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errs
}

func TestWindows(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 2)
	comms, err := InitAll(rt, 2, nil, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, comms)
	bufs := make([]hip.DevicePtr, 2)
	for r := range bufs {
		bufs[r], err = rt.MemAlloc(64 << 10)
		require.NoError(t, err)
		defer rt.MemFree(bufs[r])
	}

	register := func(off, size uintptr) ([]*Window, []error) {
		wins := make([]*Window, 2)
		errs := onRanks(comms, func(c *Comm) error {
			w, err := c.WindowRegister(bufs[c.Rank()]+hip.DevicePtr(off), size, WinCollSymmetric)
			wins[c.Rank()] = w
			return err
		})
		return wins, errs
	}

	// Misaligned within the allocation: refused on every rank.
	_, errs := register(64, 4096)
	for _, err := range errs {
		requireCode(t, result.InvalidArgument, err)
	}
	// Past the end of the allocation.
	_, errs = register(0, 65<<10)
	for _, err := range errs {
		requireCode(t, result.InvalidArgument, err)
	}

	// Aligned, odd size: fine; peers' bases exchanged.
	wins, errs := register(4096, 1000)
	for _, err := range errs {
		require.NoError(t, err)
	}
	for r, w := range wins {
		require.True(t, w.Live())
		require.Equal(t, bufs[r]+4096, w.Base())
		for p := range 2 {
			require.Equal(t, bufs[p]+4096, w.PeerBase(p))
		}
		got, ok := comms[r].FindWindow(bufs[r]+4096+10, 990)
		require.True(t, ok)
		require.Same(t, w, got.(*Window))
		_, ok = comms[r].FindWindow(bufs[r]+4096+10, 991) // runs past the end
		require.False(t, ok)
		_, ok = comms[r].FindWindow(bufs[r], 16) // before it
		require.False(t, ok)
	}

	// Overlapping the registered one, on one rank only: all ranks fail.
	errs = onRanks(comms, func(c *Comm) error {
		off := uintptr(8192)
		if c.Rank() == 1 {
			off = 0 // [0, 8192) overlaps [4096, 5096)
		}
		_, err := c.WindowRegister(bufs[c.Rank()]+hip.DevicePtr(off), 8192, 0)
		return err
	})
	for _, err := range errs {
		requireCode(t, result.InvalidArgument, err)
	}

	// Local deregistration; twice is refused; lookups stop.
	for r, w := range wins {
		require.NoError(t, comms[r].WindowDeregister(w))
		requireCode(t, result.InvalidArgument, comms[r].WindowDeregister(w))
		_, ok := comms[r].FindWindow(bufs[r]+4096, 1)
		require.False(t, ok)
	}
	requireCode(t, result.InvalidArgument, comms[0].WindowDeregister(nil))

	// ncclCommRegister bookkeeping.
	h, err := comms[0].Register(bufs[0], 100)
	require.NoError(t, err)
	require.NotZero(t, h)
	require.NoError(t, comms[0].Deregister(h))
	requireCode(t, result.InvalidArgument, comms[0].Deregister(h))
}

// Plain host memory on the host device: the address itself must align.
func TestWindowHostPointer(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 1)
	comms, err := InitAll(rt, 1, nil, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, comms)
	mem := make([]byte, 3*WindowAlign)
	p := hip.DevicePtr(uintptr(unsafePointer(&mem[0])))
	aligned := (p + WindowAlign - 1) &^ (WindowAlign - 1)
	_, err = comms[0].WindowRegister(aligned+8, 100, 0)
	requireCode(t, result.InvalidArgument, err)
	w, err := comms[0].WindowRegister(aligned, 100, 0)
	require.NoError(t, err)
	require.NoError(t, comms[0].WindowDeregister(w))
	runtime.KeepAlive(mem)
}

// One thread, all ranks: init, window registration and AllGather in one
// group. The engine gets every rank's buffers (PeerRecv) and the data lands.
func TestGroupDeferredCollectives(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := newRT(t, 3)
	const n = 3
	const chunk = 16
	id, err := NewID()
	require.NoError(t, err)
	send := make([]hip.DevicePtr, n)
	recv := make([]hip.DevicePtr, n)
	for r := range n {
		require.NoError(t, rt.SetDevice(r))
		send[r], err = rt.MemAlloc(4096)
		require.NoError(t, err)
		recv[r], err = rt.MemAlloc(4096)
		require.NoError(t, err)
		b := make([]byte, chunk)
		for i := range b {
			b[i] = byte(r*chunk + i)
		}
		require.NoError(t, hip.CopyToDevice(rt, send[r], b))
	}
	require.NoError(t, rt.SetDevice(0))

	comms := make([]*Comm, n)
	wins := make([]*Window, n)
	require.NoError(t, GroupStart())
	for r := range n {
		require.NoError(t, rt.SetDevice(r))
		comms[r], err = InitRank(rt, id, n, r, DefaultConfig())
		require.NoError(t, err)
	}
	for r := range n {
		wins[r], err = comms[r].WindowRegister(recv[r], 4096, WinCollSymmetric)
		require.NoError(t, err)
		require.False(t, wins[r].Live())
	}
	for r := range n {
		require.NoError(t, comms[r].Collective(ce.FuncAllGather, send[r], recv[r], chunk, 0, 0, 0))
	}
	require.NoError(t, rt.SetDevice(2))
	require.NoError(t, GroupEnd())
	cur, err := rt.GetDevice()
	require.NoError(t, err)
	require.Equal(t, 2, cur, "GroupEnd restores the caller's device")

	want := make([]byte, n*chunk)
	for i := range want {
		want[i] = byte(i)
	}
	for r := range n {
		require.True(t, wins[r].Live())
		got := make([]byte, n*chunk)
		require.NoError(t, hip.CopyFromDevice(rt, got, recv[r]))
		require.Equal(t, want, got, "rank %d", r)
		all, peers := comms[r].eng.(*fakeEngine).launches()
		require.Equal(t, 1, all)
		require.Equal(t, 1, peers, "rank %d: all ranks were in the group", r)
	}

	// Eager calls from several threads: no peer buffers, the windows
	// serve. Each rank has its own stream (sharing one outside a group is
	// refused: coll.go, claimStream).
	errs := onRanks(comms, func(c *Comm) error {
		if err := rt.SetDevice(c.Device()); err != nil {
			return err
		}
		s, err := rt.StreamCreate()
		if err != nil {
			return err
		}
		defer rt.StreamDestroy(s)
		return c.Collective(ce.FuncAllGather, send[c.Rank()], recv[c.Rank()], chunk, 0, 0, s)
	})
	for r, err := range errs {
		require.NoError(t, err)
		all, peers := comms[r].eng.(*fakeEngine).launches()
		require.Equal(t, 2, all)
		require.Equal(t, 1, peers)
	}

	// A group holding only some ranks' calls gets no peer buffers.
	require.NoError(t, GroupStart())
	require.NoError(t, comms[0].Collective(ce.FuncAlltoAll, send[0], recv[0], 1, 0, 0, 0))
	require.NoError(t, GroupEnd())
	all, peers := comms[0].eng.(*fakeEngine).launches()
	require.Equal(t, 3, all)
	require.Equal(t, 1, peers)
	for _, c := range comms[1:] { // the other ranks' matching calls, eager, each on its stream
		require.NoError(t, rt.SetDevice(c.Device()))
		s, err := rt.StreamCreate()
		require.NoError(t, err)
		require.NoError(t, c.Collective(ce.FuncAlltoAll, send[c.Rank()], recv[c.Rank()], 1, 0, 0, s))
		require.NoError(t, rt.StreamDestroy(s))
	}

	// Ranks that disagree inside one group are refused.
	require.NoError(t, GroupStart())
	for r := range n {
		cnt := uintptr(4)
		if r == 1 {
			cnt = 8
		}
		require.NoError(t, comms[r].Collective(ce.FuncAlltoAll, send[r], recv[r], cnt, 0, 0, 0))
	}
	requireCode(t, result.InvalidUsage, GroupEnd())

	for r := range n {
		require.NoError(t, comms[r].WindowDeregister(wins[r]))
		require.NoError(t, comms[r].Destroy())
		require.NoError(t, rt.MemFree(send[r]))
		require.NoError(t, rt.MemFree(recv[r]))
	}
}
