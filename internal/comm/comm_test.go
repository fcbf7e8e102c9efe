package comm

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

func TestInitAllRepeatedDevices(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 2)
	for _, tc := range []struct {
		name string
		devs []int
		want []int
		// what the engine learns: another rank shares my device in this
		// process (per rank), every rank does (the same on all)
		shared, one bool
	}{
		{"nil devlist", nil, []int{0, 1}, false, false},
		{"repeated", []int{0, 0, 1, 1}, []int{0, 0, 1, 1}, true, false},
		{"all on one", []int{1, 1, 1}, []int{1, 1, 1}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms, err := InitAll(rt, len(tc.want), tc.devs, DefaultConfig())
			require.NoError(t, err)
			for r, c := range comms {
				require.Equal(t, r, c.Rank())
				require.Equal(t, len(tc.want), c.Size())
				require.Equal(t, tc.want[r], c.Device())
				require.Equal(t, tc.shared, c.DeviceShared())
				require.Equal(t, tc.one, c.OneDevice())
				require.NoError(t, c.AsyncError())
			}
			destroyAll(t, comms)
		})
	}
	_, err := InitAll(rt, 2, []int{0, 2}, DefaultConfig())
	requireCode(t, result.InvalidArgument, err)
	_, err = InitAll(rt, 0, nil, DefaultConfig())
	requireCode(t, result.InvalidArgument, err)
}

func TestInitRankThreads(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 2)
	comms, errs := initThreads(t, rt, []int{0, 1, 0, 1})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		require.Equal(t, r%2, comms[r].Device())
		require.Equal(t, r, comms[r].Rank())
	}
	destroyAll(t, comms)
}

// queuesRT reports a hardware-queue limit (hip.Caps.StreamQueues), as the
// nvidia backend does, over the host device.
type queuesRT struct {
	hip.Runtime
	queues int
}

func (r queuesRT) Caps() hip.Caps {
	c := r.Runtime.Caps()
	c.StreamQueues = r.queues
	return c
}

// TestQueueLimit: ranks of one process on one device whose pending
// collectives could park as many streams as the context has hardware
// queues (two per rank: the engine's and the caller's) would deadlock the
// GPU (checkQueues); creation refuses them with an error that says what to
// set, in both creation paths, and counts only the ranks of one device.
func TestQueueLimit(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := queuesRT{newRT(t, 2), 8}

	comms, err := InitAll(rt, 3, []int{0, 0, 0}, DefaultConfig())
	require.NoError(t, err, "3 ranks on a device of 8 queues")
	destroyAll(t, comms)
	comms, err = InitAll(rt, 6, []int{0, 1, 0, 1, 0, 1}, DefaultConfig())
	require.NoError(t, err, "3 ranks on each of two devices of 8 queues")
	destroyAll(t, comms)

	_, err = InitAll(rt, 5, []int{0, 0, 1, 0, 0}, DefaultConfig())
	requireCode(t, result.InvalidUsage, err)
	require.ErrorContains(t, err, "4 ranks of this communicator share device 0 in its process")
	require.ErrorContains(t, err, "set CUDA_DEVICE_MAX_CONNECTIONS to at least 9")
	require.ErrorContains(t, err, "or run at most 3 ranks per device per process")

	_, errs := initThreads(t, rt, []int{1, 1, 1, 1})
	for r, err := range errs {
		// A rank may learn of a peer's refusal first (ncclRemoteError):
		// either way the message names the cause.
		require.Error(t, err)
		require.ErrorContains(t, err, "share device 1", "rank %d", r)
	}

	_, err = InitAll(queuesRT{rt.Runtime, 32}, 16, make([]int, 16), DefaultConfig())
	requireCode(t, result.InvalidUsage, err)
	require.ErrorContains(t, err, "run at most 15 ranks per device per process")
	require.NotContains(t, err.Error(), "set CUDA_DEVICE_MAX_CONNECTIONS")

	// Too few queues for even one rank (CUDA_DEVICE_MAX_CONNECTIONS=1, as
	// Megatron-LM sets, up to 3: a rank alone on its device holds its side
	// stream too): the advice is the variable, never "0 ranks".
	for _, q := range []int{1, 2, 3} {
		_, err = InitAll(queuesRT{rt.Runtime, q}, 2, []int{0, 1}, DefaultConfig())
		requireCode(t, result.InvalidUsage, err)
		require.ErrorContains(t, err, "holds 3 of the context's")
		require.ErrorContains(t, err, "set CUDA_DEVICE_MAX_CONNECTIONS to at least 4")
		require.NotContains(t, err.Error(), "at most 0 ranks")
	}
	comms, err = InitAll(queuesRT{rt.Runtime, 4}, 2, []int{0, 1}, DefaultConfig())
	require.NoError(t, err, "one rank on each of two devices of 4 queues")
	destroyAll(t, comms)
}

// callStreams: what a rank's group of transfers may join once its
// engine's streams are counted, for every rank of the process on the
// device pending at once.
func TestCallStreams(t *testing.T) {
	for _, tc := range []struct {
		q           uint64
		local, want int
	}{
		{0, 1, 0}, {0, 8, 0}, // no limit
		{8, 1, 5},            // 7 left after the engine's and side streams
		{8, 2, 2}, {8, 3, 1}, // 3 of 8 each (7/2), 2 each (7/3)
		{32, 1, 29}, {32, 8, 2}, {32, 15, 1},
		{9, 4, 1},
	} {
		require.Equal(t, tc.want, callStreams(tc.q, tc.local), "%d queues, %d local ranks", tc.q, tc.local)
	}
}

func TestInitRankGroupOneThread(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := newRT(t, 4)
	id, err := NewID()
	require.NoError(t, err)
	const n = 4
	require.NoError(t, GroupStart())
	require.NoError(t, GroupStart()) // nested groups count
	comms := make([]*Comm, n)
	for r := range n {
		require.NoError(t, rt.SetDevice(r))
		comms[r], err = InitRank(rt, id, n, r, DefaultConfig())
		require.NoError(t, err)
		requireCode(t, result.InvalidUsage, comms[r].usable("probe"))
	}
	require.NoError(t, GroupEnd())
	requireCode(t, result.InvalidUsage, comms[0].usable("probe")) // still inside the outer group
	require.NoError(t, GroupEnd())
	for r, c := range comms {
		require.NoError(t, c.usable("probe"))
		require.Equal(t, r, c.Device())
	}
	requireCode(t, result.InvalidUsage, GroupEnd())
	destroyAll(t, comms)
}

func TestInitRankErrors(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 2)
	id, err := NewID()
	require.NoError(t, err)
	var bad ID
	_, err = InitRank(rt, bad, 2, 0, DefaultConfig())
	requireCode(t, result.InvalidArgument, err)
	_, err = InitRank(rt, id, 2, 2, DefaultConfig())
	requireCode(t, result.InvalidArgument, err)
	_, err = InitRank(rt, id, 0, 0, DefaultConfig())
	requireCode(t, result.InvalidArgument, err)

	// Inside a group the join is checked at once: duplicate rank, nranks mismatch.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, GroupStart())
	c0, err := InitRank(rt, id, 2, 0, DefaultConfig())
	require.NoError(t, err)
	_, err = InitRank(rt, id, 2, 0, DefaultConfig())
	requireCode(t, result.InvalidArgument, err)
	_, err = InitRank(rt, id, 3, 1, DefaultConfig())
	requireCode(t, result.InvalidArgument, err)
	c1, err := InitRank(rt, id, 2, 1, DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, GroupEnd())
	destroyAll(t, []*Comm{c0, c1})
}

func TestMissingRankTimesOut(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	t.Setenv("CECOLL_BOOTSTRAP_TIMEOUT", "0.2")
	rt := newRT(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	id, err := NewID()
	require.NoError(t, err)
	require.NoError(t, GroupStart())
	c, err := InitRank(rt, id, 2, 0, DefaultConfig()) // rank 1 never comes
	require.NoError(t, err)
	err = GroupEnd()
	requireCode(t, result.RemoteError, err)
	requireCode(t, result.RemoteError, c.AsyncError())
	require.NoError(t, c.Finalize()) // nothing to finalize
	require.NoError(t, c.Destroy())
}

func TestFinalizeDestroyAbort(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 2)
	comms, err := InitAll(rt, 3, []int{0, 1, 1}, DefaultConfig())
	require.NoError(t, err)
	buf, err := rt.MemAlloc(4096)
	require.NoError(t, err)
	defer rt.MemFree(buf)
	coll := func(c *Comm) error {
		return c.Collective(ce.FuncAllGather, buf, buf, 1, 0, 0, 0)
	}

	// Finalize twice, then destroy (twice: idempotent here).
	require.NoError(t, comms[0].Finalize())
	require.NoError(t, comms[0].Finalize())
	requireCode(t, result.InvalidUsage, coll(comms[0]))
	require.NoError(t, comms[0].Destroy())
	require.NoError(t, comms[0].Destroy())

	// Abort, then destroy works; collectives are refused, on the aborted
	// rank and on its peer, which learns of the abort.
	require.NoError(t, comms[1].Abort())
	requireCode(t, result.InvalidUsage, coll(comms[1]))
	requireCode(t, result.RemoteError, comms[2].AsyncError())
	requireCode(t, result.RemoteError, coll(comms[2]))
	require.NoError(t, comms[1].Destroy())

	// Destroy without finalize finalizes; no internal window survives.
	require.NoError(t, comms[2].Destroy())
	require.Empty(t, comms[2].wins)
}

func TestCollectiveValidation(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 2)
	// Each case on a communicator of its own: a refusal of one rank's
	// arguments fails the communicator (Refuse), except those every rank
	// makes alike (reductions, collectives cecoll does not provide).
	run := func(t *testing.T, f func(c *Comm) error) error {
		comms, err := InitAll(rt, 2, nil, DefaultConfig())
		require.NoError(t, err)
		defer destroyAll(t, comms)
		err = f(comms[1])
		alike := result.Of(err) == result.InvalidUsage
		if err == nil || alike {
			require.NoError(t, comms[0].AsyncError(), "a peer failed after %v", err)
		} else {
			require.Error(t, comms[0].AsyncError(), "the peer did not fail after %v", err)
		}
		return err
	}
	const p = hip.DevicePtr(0x10000)
	for _, tc := range []struct {
		name string
		fn   ce.Func
		send hip.DevicePtr
		recv hip.DevicePtr
		cnt  uintptr
		dt   int32
		root int
		code result.Code
	}{
		{"unknown datatype", ce.FuncAllGather, p, p, 1, 12, 0, result.InvalidArgument},
		{"negative datatype", ce.FuncAllGather, p, p, 1, -1, 0, result.InvalidArgument},
		{"root too big", ce.FuncScatter, p, p, 1, 0, 2, result.InvalidArgument},
		{"root negative", ce.FuncGather, p, p, 1, 0, -1, result.InvalidArgument},
		{"overflow", ce.FuncAllGather, p, p, ^uintptr(0) / 4, 4, 0, result.InvalidArgument},
		{"null send", ce.FuncAllGather, 0, p, 1, 0, 0, result.InvalidArgument},
		{"null recv", ce.FuncAlltoAll, p, 0, 1, 0, 0, result.InvalidArgument},
		{"scatter non-root null recv", ce.FuncScatter, 0, 0, 1, 0, 0, result.InvalidArgument},
		{"scatter non-root null send ok", ce.FuncScatter, 0, p, 1, 0, 0, result.Success},
		{"gather non-root null recv ok", ce.FuncGather, p, 0, 1, 0, 0, result.Success},
		{"gather root null recv", ce.FuncGather, p, 0, 1, 0, 1, result.InvalidArgument},
		{"reduction", ce.FuncAllReduce, p, p, 1, 0, 0, result.InvalidUsage},
		{"broadcast", ce.FuncBroadcast, p, p, 1, 0, 0, result.Success},
		{"broadcast non-root null send ok", ce.FuncBroadcast, 0, p, 1, 0, 0, result.Success},
		{"broadcast root null send", ce.FuncBroadcast, 0, p, 1, 0, 1, result.InvalidArgument},
		{"reduce", ce.FuncReduce, p, p, 1, 0, 0, result.InvalidUsage},
		{"unknown func", ce.Func(42), p, p, 1, 0, 0, result.InvalidArgument},
		{"zero count is a no-op", ce.FuncAllGather, 0, 0, 0, 0, 0, result.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(t, func(c *Comm) error { return c.Collective(tc.fn, tc.send, tc.recv, tc.cnt, tc.dt, tc.root, 0) })
			require.Equal(t, tc.code, result.Of(err), "%v", err)
		})
	}
	a := LaunchArgs{Func: FuncAllGather, Datatype: 7, EltSize: 8, Count: 1, Send: p, Recv: p}
	requireCode(t, result.InvalidArgument, run(t, func(c *Comm) error { return c.Launch(&a, nil, nil) }))
}

// The eager launch path allocates nothing.
func TestLaunchAllocs(t *testing.T) {
	watchdog(t, 30*time.Second)
	comms := nopComms(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	allocs := testing.AllocsPerRun(100, func() {
		if err := comms[0].Collective(ce.FuncAlltoAll, 0x1000, 0x2000, 4, 7, 0, 0x1234); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs)
}

// The INFO summary counts each routed call (RouteCE: without a real
// library, the copy engines) and each call of the seed's entry point
// (Launch), with their blocks' bytes.
func TestSummaryCounts(t *testing.T) {
	watchdog(t, 30*time.Second)
	comms := nopComms(t, 2)
	c := comms[0]
	require.True(t, c.RouteCE(ce.FuncAllGather, 0x1000, 0x2000, 8, 7, -1))
	a := LaunchArgs{Func: FuncAlltoAll, Datatype: 7, EltSize: 4, Count: 8, Send: 0x1000, Recv: 0x2000, Stream: 0x1234}
	require.NoError(t, c.Launch(&a, nil, nil))
	a.EltSize = 8 // refused: not counted
	require.Error(t, c.Launch(&a, nil, nil))
	require.Contains(t, c.Summary(nil), " rank 0/2: copy engines 2 calls, 64 B (100% of the bytes cecoll routed) [AllGather 1, 32 B; AlltoAll 1, 32 B]; real library 0 calls")
}

// A grouped collective of every rank (ncclGroupStart, one call per rank,
// ncclGroupEnd) allocates nothing either, once the thread has run a group.
func TestGroupLaunchAllocs(t *testing.T) {
	watchdog(t, 30*time.Second)
	comms := nopComms(t, 4)
	runtime.LockOSThread() // groups belong to the calling thread
	defer runtime.UnlockOSThread()
	group := func() {
		if err := GroupStart(); err != nil {
			panic(err)
		}
		for r, c := range comms {
			base := hip.DevicePtr(0x10000 * (r + 1))
			if err := c.Collective(ce.FuncAllGather, base, base+0x100, 4, 7, 0, 0x1234); err != nil {
				panic(err)
			}
		}
		if err := GroupEnd(); err != nil {
			panic(err)
		}
	}
	group()
	allocs := testing.AllocsPerRun(100, group)
	if raceEnabled {
		t.Skipf("race detector: sync.Pool drops objects on purpose (%v allocations per group)", allocs)
	}
	require.Zero(t, allocs)
}

type nopEngine struct{}

func (nopEngine) Prepare(*ce.Args) (ce.Prepared, error) { return ce.Prepared{}, nil }
func (nopEngine) Step(int) error                        { return nil }
func (nopEngine) Close() <-chan struct{}                { return closedChan() }
func (nopEngine) Drained() bool                         { return true }
func (nopEngine) Abort()                                {}
func (nopEngine) Pending() bool                         { return false }
func (nopEngine) Issued() uint64                        { return 0 }
func (nopEngine) Event() hip.Event                      { return 0 }
func (nopEngine) OrderBefore(hip.Stream) error          { return nil }
func (nopEngine) OrderAfter(hip.Stream) error           { return nil }

// abortEngine records that comm asked it to release its waits.
type abortEngine struct {
	nopEngine
	aborted *atomic.Int32
}

func (e abortEngine) Abort() { e.aborted.Add(1) }

func TestAbortCallsEngine(t *testing.T) {
	watchdog(t, 30*time.Second)
	var aborted [2]atomic.Int32
	old := newEngine
	newEngine = func(c ce.Comm, _ ce.Config) (engine, error) { return abortEngine{aborted: &aborted[c.Rank()]}, nil }
	defer func() { newEngine = old }()
	rt := newRT(t, 1)
	comms, err := InitAll(rt, 2, []int{0, 0}, DefaultConfig())
	require.NoError(t, err)
	for _, c := range comms {
		require.NoError(t, c.Abort())
		require.NoError(t, c.Abort())
		require.NoError(t, c.Destroy())
	}
	// Each engine was asked to release its waits (more than once is
	// fine: the engine's Abort is idempotent).
	for r := range aborted {
		require.Positive(t, aborted[r].Load(), "rank %d", r)
	}
}

// Abort with a collective in flight whose peer never issues its part: the
// stream must drain. The engine must release its waits (ce.Engine.Abort).
func TestAbortInFlight(t *testing.T) {
	watchdog(t, 60*time.Second)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := newRT(t, 2)
	comms, err := InitAll(rt, 2, nil, DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, rt.SetDevice(0))
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	buf, err := MemAlloc(rt, 8192)
	require.NoError(t, err)
	require.NoError(t, comms[0].Collective(ce.FuncAllGather, buf, buf, 64, 0, 0, s))
	for _, c := range comms {
		require.NoError(t, c.Abort())
	}
	require.NoError(t, rt.SetDevice(0))
	done := make(chan error, 1)
	go func() { done <- rt.StreamSynchronize(s) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream of an aborted collective did not drain")
	}
	require.NoError(t, rt.StreamDestroy(s))
	require.NoError(t, MemFree(rt, buf))
}

func TestGroupSimulateEnd(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := newRT(t, 1)
	requireCode(t, result.InvalidUsage, GroupSimulateEnd(nil))
	id, err := NewID()
	require.NoError(t, err)
	require.NoError(t, GroupStart())
	c, err := InitRank(rt, id, 2, 0, DefaultConfig())
	require.NoError(t, err)
	requireCode(t, result.InvalidUsage, GroupSimulateEnd(nil))
	require.Nil(t, currentGroup(), "the group is closed")
	requireCode(t, result.InvalidUsage, c.AsyncError())
	require.NoError(t, c.Destroy())
}

// Finalize returns at once, never waiting for a collective still queued
// (nor for its peers), and the collective completes all the same: the
// engine frees its state only once its streams drained.
func TestFinalizeWaitsForQueuedCollective(t *testing.T) {
	watchdog(t, 60*time.Second)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := newRT(t, 2)
	comms, err := InitAll(rt, 2, nil, DefaultConfig())
	require.NoError(t, err)
	var s [2]hip.Stream
	var buf [2]hip.DevicePtr
	for r := range 2 {
		require.NoError(t, rt.SetDevice(r))
		s[r], err = rt.StreamCreate()
		require.NoError(t, err)
		buf[r], err = MemAlloc(rt, 8192)
		require.NoError(t, err)
		img := make([]byte, 64)
		for i := range img {
			img[i] = byte(r + 1)
		}
		require.NoError(t, hip.CopyToDevice(rt, buf[r], img))
	}
	// Gate rank 0's stream on a word the test writes later.
	require.NoError(t, rt.SetDevice(0))
	gate, err := MemAlloc(rt, 64)
	require.NoError(t, err)
	require.NoError(t, rt.Memset(gate, 0, 64))
	require.NoError(t, rt.StreamBatchMemOp(s[0], []hip.MemOp{hip.WaitValue32(gate, 1, hip.WaitEQ)}))
	for r := range 2 {
		require.NoError(t, comms[r].Collective(ce.FuncAllGather, buf[r], buf[r]+4096, 64, 0, 0, s[r]))
	}
	done := make(chan error, 1)
	go func() { done <- comms[1].Finalize() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Finalize waited for a queued collective")
	}
	one := []byte{1, 0, 0, 0}
	require.NoError(t, hip.CopyToDevice(rt, gate, one))
	require.NoError(t, comms[0].Finalize())
	for r := range 2 {
		require.NoError(t, rt.SetDevice(r))
		require.NoError(t, rt.StreamSynchronize(s[r]))
		got := make([]byte, 128)
		require.NoError(t, hip.CopyFromDevice(rt, got, buf[r]+4096))
		for i := range got {
			require.Equal(t, byte(i/64+1), got[i], "rank %d byte %d: the collective completed after Finalize", r, i)
		}
		require.NoError(t, rt.StreamDestroy(s[r]))
		require.NoError(t, MemFree(rt, buf[r]))
		require.NoError(t, comms[r].Destroy())
	}
	require.NoError(t, MemFree(rt, gate))
}

// TestGroupOneDevice runs grouped calls of every rank on one device with
// real engines (event syncs: internal/ce chooseEvents): they move the
// right bytes and allocate nothing.
func TestGroupOneDevice(t *testing.T) {
	watchdog(t, 60*time.Second)
	const n, chunk = 4, 256
	rt := newRT(t, 1)
	comms, err := InitAll(rt, n, []int{0, 0, 0, 0}, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, comms)
	runtime.LockOSThread() // groups belong to the calling thread
	defer runtime.UnlockOSThread()
	var send, recv [n]hip.DevicePtr
	var streams [n]hip.Stream
	for r := range n {
		send[r], err = rt.MemAlloc(n * chunk)
		require.NoError(t, err)
		recv[r], err = rt.MemAlloc(n * chunk)
		require.NoError(t, err)
		streams[r], err = rt.StreamCreate()
		require.NoError(t, err)
		img := make([]byte, n*chunk)
		for i := range img {
			img[i] = byte(r*31 + i)
		}
		require.NoError(t, hip.CopyToDevice(rt, send[r], img))
	}
	defer func() {
		for r := range n {
			require.NoError(t, rt.StreamDestroy(streams[r]))
			require.NoError(t, rt.MemFree(send[r]))
			require.NoError(t, rt.MemFree(recv[r]))
		}
	}()
	group := func(fn ce.Func) func() {
		return func() {
			if err := GroupStart(); err != nil {
				panic(err)
			}
			for r, c := range comms {
				if err := c.Collective(fn, send[r], recv[r], chunk, 0, 1, streams[r]); err != nil {
					panic(err)
				}
			}
			if err := GroupEnd(); err != nil {
				panic(err)
			}
		}
	}
	for _, fn := range []ce.Func{ce.FuncAllGather, ce.FuncAlltoAll, ce.FuncScatter, ce.FuncGather} {
		t.Run(fn.String(), func(t *testing.T) {
			group(fn)()
			for r := range n {
				require.NoError(t, rt.StreamSynchronize(streams[r]))
			}
			// Rank 1's recv: AllGather block p is rank p's send; AlltoAll
			// block p is rank p's block 1; Scatter (root 1) its block 1;
			// Gather (root 1) block p is rank p's send.
			got := make([]byte, n*chunk)
			require.NoError(t, hip.CopyFromDevice(rt, got, recv[1]))
			for p := range n {
				if fn == ce.FuncScatter && p > 0 {
					break
				}
				for i := range chunk {
					src, off := p, i
					switch fn {
					case ce.FuncAlltoAll:
						off = chunk + i
					case ce.FuncScatter:
						src, off = 1, chunk+i
					}
					require.Equal(t, byte(src*31+off), got[p*chunk+i], "block %d byte %d", p, i)
				}
			}
			if raceEnabled || testing.Short() {
				return
			}
			require.Zero(t, testing.AllocsPerRun(50, group(fn)))
			for r := range n {
				require.NoError(t, rt.StreamSynchronize(streams[r]))
			}
		})
	}
}

// racedEngine fails its communicator from inside OrderBefore, as a peer's
// failure landing while a graph launch reaches the engine does, and then
// refuses as the aborted engine does.
type racedEngine struct {
	nopEngine
	fail func()
}

func (e racedEngine) OrderBefore(hip.Stream) error {
	e.fail()
	return errors.New("ce AllGather: communicator aborted")
}

// TestGraphLaunchNamesTheFailure: a graph launch the engine refuses because
// the communicator failed meanwhile reports that failure, not the abort it
// caused (a CI run once saw "communicator aborted" in place of the
// CECOLL_CHECK mismatch that aborted it).
func TestGraphLaunchNamesTheFailure(t *testing.T) {
	watchdog(t, 30*time.Second)
	var comms []*Comm
	cause := errors.New("CECOLL_CHECK: collective #1 breaks NCCL's symmetric-registration contract")
	old := newEngine
	newEngine = func(c ce.Comm, _ ce.Config) (engine, error) {
		return racedEngine{fail: func() { comms[0].fail(cause) }}, nil
	}
	defer func() { newEngine = old }()
	comms, err := InitAll(newRT(t, 1), 2, []int{0, 0}, DefaultConfig())
	require.NoError(t, err)
	err = comms[0].OrderBefore(0)
	require.ErrorContains(t, err, "cecollGraphLaunch: the communicator failed: CECOLL_CHECK")
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
}

// afterEngine counts the launches OrderAfter records.
type afterEngine struct {
	nopEngine
	after *atomic.Int32
}

func (e afterEngine) OrderAfter(hip.Stream) error {
	e.after.Add(1)
	return nil
}

// TestOrderAfterFailedComm: a graph launch whose communicator failed
// between OrderBefore and OrderAfter is enqueued all the same, so
// OrderAfter still hands it to the engine (whose Close waits for it before
// it frees what the replay writes); it returns no error.
func TestOrderAfterFailedComm(t *testing.T) {
	watchdog(t, 30*time.Second)
	var n atomic.Int32
	old := newEngine
	newEngine = func(c ce.Comm, _ ce.Config) (engine, error) { return afterEngine{after: &n}, nil }
	defer func() { newEngine = old }()
	comms, err := InitAll(newRT(t, 1), 2, []int{0, 0}, DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, comms[0].OrderBefore(0))
	comms[0].fail(errors.New("a peer failed"))
	require.NoError(t, comms[0].OrderAfter(0))
	require.Equal(t, int32(1), n.Load(), "the launch was not handed to the engine")
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
}

// The engine's settings decide plans and syncs, so every rank must run
// with the same: a rank whose process sets another value fails the init of
// every rank, with an error naming the variable and both values, before
// any engine exists (here the ranks of one process, through engineConfig;
// TestMPEngineSettings has processes with different environments).
func TestEngineSettingsAgreed(t *testing.T) {
	watchdog(t, 60*time.Second)
	rt := newRT(t, 2)
	for _, tc := range []struct {
		name string
		set  func(*ce.Config)
	}{
		{"CECOLL_INTRA_BATCH_SYNC_FREQ", func(c *ce.Config) { c.IntraBatchSyncFreq = 1 }},
		{"CECOLL_INTRA_BATCH_SYNC_THRESHOLD", func(c *ce.Config) { c.IntraBatchSyncThreshold = 4096 }},
		{"CECOLL_STAGING_BYTES", func(c *ce.Config) { c.StagingBytes = 1 << 20 }},
		{"CECOLL_FLAG_WRITE", func(c *ce.Config) { c.FlagWrite = ce.FlagWriteCopy }},
		{"CECOLL_SYNC", func(c *ce.Config) { c.Sync = ce.SyncStar }},
		{"CECOLL_HUB_BYTES", func(c *ce.Config) { c.HubBytes = -1 }},
		{"CECOLL_EVENTS", func(c *ce.Config) { c.NoEvents = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := engineConfig
			engineConfig = func(c *Comm) ce.Config {
				cfg := ce.ConfigFromEnv()
				if c.Rank() == 1 {
					tc.set(&cfg)
				}
				return cfg
			}
			defer func() { engineConfig = old }()
			_, errs := initThreads(t, rt, []int{0, 1, 0})
			for r, err := range errs {
				// A rank may learn of a peer's refusal first (ncclRemoteError):
				// either way the message names the variable.
				require.Error(t, err)
				require.ErrorContains(t, err, "ranks disagree on "+tc.name+": rank 0 has", "rank %d", r)
			}
		})
	}
	// Alike, a communicator is made; its engine runs with those settings.
	old := engineConfig
	engineConfig = func(c *Comm) ce.Config {
		cfg := ce.ConfigFromEnv()
		cfg.IntraBatchSyncFreq = 1
		return cfg
	}
	defer func() { engineConfig = old }()
	comms, errs := initThreads(t, rt, []int{0, 1})
	require.NoError(t, firstError(errs))
	for _, c := range comms {
		require.Equal(t, 1, c.engCfg.IntraBatchSyncFreq)
	}
	destroyAll(t, comms)
}
