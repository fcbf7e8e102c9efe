package ce

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// Regression tests of the seed's defects (shared/design/ce-protocol.md).
// Each runs the scenario with the fix (it must pass) and with the seed's
// behaviour restored through the seed knob (the defect must show: a
// refusal, wrong bytes, or a hang caught by a timeout, after which the
// test's runtime is closed to end the stuck waits).
//
// B6 is only partly reproducible here: the host device's multicast
// emulation delivers a write to every member as soon as the object exists
// (there is no per-member binding phase), so the seed's lost flag cannot
// happen; TestB6 pins what can be seen, that the seed set multicast up on
// the launch path (and for two ranks) while cecoll does it in Init.

// withSeed turns a knob on for the rest of the test.
func withSeed(t *testing.T, knob *bool) {
	*knob = true
	t.Cleanup(func() { *knob = false })
}

// gate blocks s until the returned release runs.
func (r *rankEnv) gate(s hip.Stream) func() {
	word := r.alloc(64)
	r.put(word, make([]byte, 4))
	if err := r.rt.StreamBatchMemOp(s, []hip.MemOp{hip.WaitValue32(word, 1, hip.WaitEQ)}); err != nil {
		panic(err)
	}
	return func() { r.put(word, []byte{1, 0, 0, 0}) }
}

// graphOnce captures c's call, launches the graph once and checks it.
func (r *rankEnv) graphOnce(c collCase) error {
	p := r.prepare(c)
	x, err := r.captureGraph(&p.args)
	if err != nil {
		return err
	}
	if err := r.rt.GraphLaunch(x, r.s); err != nil {
		return err
	}
	r.syncStream()
	return r.verify(c, p)
}

// gatesB19 blocks rank 0's stream A (r.s) or rank 1's stream B until the
// matching release runs; the other release is nil.
func (r *rankEnv) gatesB19(sB hip.Stream) (relA, relB func()) {
	if r.rank == 0 {
		return r.gate(r.s), nil
	}
	return nil, r.gate(sB)
}

// finishB19 ends a B19 scenario once both calls are issued: it opens the
// gate on stream B, then the one on stream A (each after a barrier and a
// pause, so the ungated streams run ahead), waits for both streams and
// checks both calls.
func (r *rankEnv) finishB19(relA, relB func(), sB hip.Stream, p1, p2 prepared) error {
	for _, rel := range [...]func(){relB, relA} {
		r.w.bar.wait()
		time.Sleep(50 * time.Millisecond)
		if rel != nil {
			rel()
		}
	}
	r.syncStream()
	if err := r.rt.StreamSynchronize(sB); err != nil {
		return err
	}
	if err := r.verify(agWin, p1); err != nil {
		return err
	}
	return r.verify(agWin, p2)
}

// oneCall runs c once on every rank and returns each rank's error and
// whether all finished within limit.
func oneCall(t *testing.T, n int, o worldOpts, cfg Config, c collCase, limit time.Duration) ([]error, bool) {
	w := newWorld(t, n, o)
	return w.run(cfg, limit, true, func(r *rankEnv) error {
		p := r.prepare(c)
		if err := r.e.Launch(&p.args); err != nil {
			return err
		}
		r.syncStream()
		return r.verify(c, p)
	})
}

func requireAllOK(t *testing.T) func([]error, bool) {
	return func(errs []error, ok bool) {
		t.Helper()
		require.True(t, ok, "hung")
		require.NoError(t, errors.Join(errs...))
	}
}

func requireSomeErr(t *testing.T, text string) func([]error, bool) {
	return func(errs []error, ok bool) {
		t.Helper()
		require.True(t, ok, "hung where a refusal was expected")
		err := errors.Join(errs...)
		require.Error(t, err)
		require.Contains(t, err.Error(), text)
	}
}

var agWin = collCase{fn: FuncAllGather, count: 64, dtype: 7, mode: bufWindow}

func TestB1_MemOpTypeSet(t *testing.T) {
	requireAllOK(t)(oneCall(t, 2, worldOpts{}, testCfg(), agWin, 20*time.Second))
	withSeed(t, &seed.b1)
	requireSomeErr(t, "invalid value")(oneCall(t, 2, worldOpts{}, testCfg(), agWin, 20*time.Second))
}

func TestB2_BytesMove(t *testing.T) {
	requireAllOK(t)(oneCall(t, 3, worldOpts{}, testCfg(), agWin, 20*time.Second))
	withSeed(t, &seed.b2)
	requireSomeErr(t, "wrong result")(oneCall(t, 3, worldOpts{}, testCfg(), agWin, 20*time.Second))
}

func TestB3_NoCopyAttributesWhereRefused(t *testing.T) {
	caps := hip.Caps{BatchCopy: true, PeerWriteValue: true}
	requireAllOK(t)(oneCall(t, 2, worldOpts{caps: &caps}, testCfg(), agWin, 20*time.Second))
	withSeed(t, &seed.b3)
	requireSomeErr(t, "invalid value")(oneCall(t, 2, worldOpts{caps: &caps}, testCfg(), agWin, 20*time.Second))
}

// TestB4_DeviceResidentFlagWord: multicast flags by copy. The stream is
// gated so that the whole call is enqueued before any of it runs: a copy
// from a host variable then carries the value of the last sync, not its
// own, and the peers wait forever.
func TestB4_DeviceResidentFlagWord(t *testing.T) {
	caps := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true, Multicast: true}
	cfg := testCfg()
	cfg.FlagWrite = FlagWriteCopy
	scenario := func() ([]error, bool) {
		w := newWorld(t, 3, worldOpts{caps: &caps})
		return w.run(cfg, 3*time.Second, true, func(r *rankEnv) error {
			if r.e.mc == 0 {
				return fmt.Errorf("multicast not set up")
			}
			p := r.prepare(agWin)
			release := r.gate(r.s)
			if err := r.e.Launch(&p.args); err != nil {
				return err
			}
			release()
			r.syncStream()
			return r.verify(agWin, p)
		})
	}
	requireAllOK(t)(scenario())
	withSeed(t, &seed.b4)
	_, ok := scenario()
	require.False(t, ok, "expected the seed's host-memory flag source to hang")
}

func TestB5_PeerWriteValueRefused(t *testing.T) {
	caps := hip.Caps{BatchCopy: true, CopyAttributes: true}
	requireAllOK(t)(oneCall(t, 2, worldOpts{caps: &caps}, testCfg(), agWin, 20*time.Second))
	withSeed(t, &seed.b5)
	requireSomeErr(t, "not supported")(oneCall(t, 2, worldOpts{caps: &caps}, testCfg(), agWin, 20*time.Second))
}

// countingRT counts MulticastCreate calls made while inLaunch is set.
type countingRT struct {
	testRT
	calls *int
}

func (c countingRT) MulticastCreate(m []hip.DevicePtr, size uintptr) (hip.DevicePtr, error) {
	*c.calls++
	return c.testRT.MulticastCreate(m, size)
}

func TestB6_MulticastSetUpEagerly(t *testing.T) {
	for _, tc := range []struct {
		n      int
		seed   bool
		wantMC bool
	}{{2, false, false}, {3, false, true}, {2, true, true}, {3, true, true}} {
		t.Run(fmt.Sprintf("n=%d/seed=%v", tc.n, tc.seed), func(t *testing.T) {
			if tc.seed {
				withSeed(t, &seed.b6)
			}
			w := newWorld(t, tc.n, worldOpts{})
			calls := make([]int, tc.n)
			for i, c := range w.comms {
				c.rt = countingRT{c.rt.(testRT), &calls[i]}
			}
			inLaunch := make([]int, tc.n)
			w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
				atInit := calls[r.rank]
				p := r.prepare(agWin)
				if err := r.e.Launch(&p.args); err != nil {
					return err
				}
				inLaunch[r.rank] = calls[r.rank] - atInit
				r.syncStream()
				if (r.e.mc != 0) != tc.wantMC {
					return fmt.Errorf("multicast in use: %v, want %v", r.e.mc != 0, tc.wantMC)
				}
				return r.verify(agWin, p)
			})
			for _, k := range inLaunch {
				if tc.seed {
					require.Equal(t, 1, k, "the seed creates the multicast object inside the first collective")
				} else {
					require.Zero(t, k, "multicast set-up must not run on the launch path")
				}
			}
		})
	}
}

// TestB7_MemOpBatchSplit: a captured all-pairs UC sync of 87 ranks has
// 2*86 flag entries and 86 resets, more than one batch may hold.
func TestB7_MemOpBatchSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("87 ranks")
	}
	n := 87
	caps := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	scenario := func() ([]error, bool) {
		w := newWorld(t, n, worldOpts{caps: &caps, devices: 4})
		c := collCase{fn: FuncAllGather, count: 4, dtype: 0, mode: bufWindow}
		cfg := testCfg()
		// The seed's sync with write-value flags: 3(n-1) ops per batch.
		cfg.Sync, cfg.FlagWrite = SyncAllPairs, FlagWriteValue
		return w.run(cfg, 30*time.Second, true, func(r *rankEnv) error { return r.graphOnce(c) })
	}
	requireAllOK(t)(scenario())
	withSeed(t, &seed.b7)
	requireSomeErr(t, "invalid value")(scenario())
}

// TestB8_EvenSyncsUnderCapture: a captured AllGather with one intra-batch
// sync has three syncs; replayed back to back, consecutive replays use the
// same array twice in a row and a fast peer's flag is erased by the slow
// rank's reset.
func TestB8_EvenSyncsUnderCapture(t *testing.T) {
	cfg := testCfg()
	cfg.IntraBatchSyncFreq, cfg.IntraBatchSyncThreshold = 1, 1
	c := collCase{fn: FuncAllGather, count: 16, dtype: 0, mode: bufWindow}
	scenario := func(seedv int64, replays int) ([]error, bool) {
		w := newWorld(t, 2, worldOpts{chaos: seedv})
		return w.run(cfg, 5*time.Second, true, func(r *rankEnv) error {
			p := r.prepare(c)
			x, err := r.captureGraph(&p.args)
			if err != nil {
				return err
			}
			for range replays {
				if err := r.rt.GraphLaunch(x, r.s); err != nil {
					return err
				}
			}
			r.syncStream()
			return r.verify(c, p)
		})
	}
	requireAllOK(t)(scenario(1, 200))
	withSeed(t, &seed.b8)
	hung := false
	for sd := int64(1); sd <= 5 && !hung; sd++ {
		_, ok := scenario(sd, 400)
		hung = !ok
	}
	require.True(t, hung, "expected odd captured sync counts to put replays out of phase")
}

// TestB9_IntraBatchDecisionRankInvariant: 9 ranks, frequency 8, rank 0 in
// place (8 copies), the others out of place (9 copies).
func TestB9_IntraBatchDecisionRankInvariant(t *testing.T) {
	cfg := testCfg()
	cfg.IntraBatchSyncThreshold = 1
	scenario := func() ([]error, bool) {
		w := newWorld(t, 9, worldOpts{devices: 3})
		return w.run(cfg, 3*time.Second, true, func(r *rankEnv) error {
			c := collCase{fn: FuncAllGather, count: 8, dtype: 0, mode: bufWindow, inPlace: r.rank == 0}
			p := r.prepare(c)
			if err := r.e.Launch(&p.args); err != nil {
				return err
			}
			r.syncStream()
			return r.verify(c, p)
		})
	}
	requireAllOK(t)(scenario())
	withSeed(t, &seed.b9)
	errs, ok := scenario()
	require.True(t, !ok || errors.Join(errs...) != nil, "expected ranks with different sync counts to hang or finish early")
}

// premature runs an AllGather of 2 ranks with rank 0's stream gated and
// reports whether a sync passed early: rank 1's data reached rank 0's
// buffer while rank 0 was not yet ready (its ready flag not written), or a
// rank finished with a wrong result, or the call hung. Without the defect
// it requires a clean, correct run. before runs on every rank first
// (engine set up, buffers prepared).
func premature(t *testing.T, o worldOpts, before func(r *rankEnv, p *prepared) error) bool {
	w := newWorld(t, 2, o)
	early := false
	c := agWin
	errs, ok := w.run(testCfg(), 20*time.Second, true, func(r *rankEnv) error {
		p := r.prepare(c)
		if err := before(r, &p); err != nil {
			return err
		}
		chunk := c.count * 4
		block1 := p.args.Recv + hip.DevicePtr(chunk)
		if r.rank == 0 {
			if err := r.rt.Memset(block1, 0, chunk); err != nil {
				return err
			}
		}
		r.w.bar.wait()
		var release func()
		if r.rank == 0 {
			release = r.gate(r.s)
		}
		if r.graph != 0 {
			if err := r.rt.GraphLaunch(r.graph, r.s); err != nil {
				return err
			}
		} else if err := r.e.Launch(&p.args); err != nil {
			return err
		}
		if r.rank == 0 {
			zero := make([]byte, chunk)
			deadline := time.Now().Add(400 * time.Millisecond)
			for time.Now().Before(deadline) && !early {
				early = !bytes.Equal(r.get(block1, chunk), zero)
				time.Sleep(5 * time.Millisecond)
			}
			release()
		}
		r.syncStream()
		return r.verify(c, p)
	})
	err := errors.Join(errs...)
	t.Logf("early push %v, finished %v, errors: %v", early, ok, err)
	return early || !ok || err != nil
}

func TestB10_EagerSequenceStartsAt2(t *testing.T) {
	// An eager call leaves its values in the arrays; a graph's first sync
	// waits for the constant 1, which the seed's first eager value was.
	capture := func(r *rankEnv, p *prepared) error {
		if err := r.e.Launch(&p.args); err != nil {
			return err
		}
		r.syncStream()
		r.w.bar.wait()
		x, err := r.captureGraph(&p.args)
		if err != nil {
			return err
		}
		r.graph = x // premature launches the graph instead of an eager call
		return nil
	}
	require.False(t, premature(t, worldOpts{}, capture), "a sync passed before the peer was ready")
	withSeed(t, &seed.b10)
	require.True(t, premature(t, worldOpts{}, capture), "expected the seed's first eager value to satisfy a graph's wait")
}

func TestB17_SyncArraysZeroed(t *testing.T) {
	// Stale memory that holds the first collective's values.
	poison := func(rt hip.Runtime, p hip.DevicePtr, size uintptr) {
		if size != 32 { // the sync window of 2 ranks
			return
		}
		w := []uint32{2, 2, 0, 0, 3, 3, 0, 0}
		_ = rt.Memcpy(uintptr(p), uintptr(unsafe.Pointer(&w[0])), 32)
	}
	nop := func(*rankEnv, *prepared) error { return nil }
	require.False(t, premature(t, worldOpts{memAlloc: poison}, nop), "a sync passed before the peer was ready")
	withSeed(t, &seed.b17)
	require.True(t, premature(t, worldOpts{memAlloc: poison}, nop), "expected stale flags to release a sync early")
}

func TestB18_SequenceSkipsResetAndGraphValues(t *testing.T) {
	wrap := func(r *rankEnv, p *prepared) error { r.e.seq = ^uint32(0); return nil }
	require.False(t, premature(t, worldOpts{}, wrap), "a sync passed before the peer was ready")
	withSeed(t, &seed.b18)
	require.True(t, premature(t, worldOpts{}, wrap), "expected a wrapped sequence value 0 to match zeroed flags")
}

func TestB11_SamePathOnEveryRank(t *testing.T) {
	c := collCase{fn: FuncGather, count: 32, dtype: 0, root: 0, mode: bufWindow, nullBuf: true}
	requireAllOK(t)(oneCall(t, 2, worldOpts{}, testCfg(), c, 20*time.Second))
	c.mode = bufPlain
	requireAllOK(t)(oneCall(t, 2, worldOpts{}, testCfg(), c, 20*time.Second))
	withSeed(t, &seed.b11)
	var left error
	w := newWorld(t, 2, worldOpts{})
	_, ok := w.run(testCfg(), 2*time.Second, true, func(r *rankEnv) error {
		p := r.prepare(c)
		if err := r.e.Launch(&p.args); err != nil {
			left = err // this rank leaves; the root goes on
			return nil
		}
		r.syncStream()
		return nil
	})
	require.Error(t, left)
	require.False(t, ok, "expected the root to hang when a non-root leaves the CE path")
}

func TestB12_InPlaceScatterEveryRoot(t *testing.T) {
	for root := range 3 {
		c := collCase{fn: FuncScatter, count: 16, dtype: 0, root: root, mode: bufWindow, inPlace: true}
		requireAllOK(t)(oneCall(t, 3, worldOpts{}, testCfg(), c, 20*time.Second))
	}
	withSeed(t, &seed.b12)
	c := collCase{fn: FuncScatter, count: 16, dtype: 0, root: 1, mode: bufWindow, inPlace: true}
	requireSomeErr(t, "wrong result")(oneCall(t, 3, worldOpts{}, testCfg(), c, 20*time.Second))
}

func TestB13_InPlaceAlltoAll(t *testing.T) {
	cfg := testCfg()
	cfg.StagingBytes = 1 << 20
	c := collCase{fn: FuncAlltoAll, count: 16 << 10, dtype: 0, mode: bufWindow, inPlace: true}
	for sd := int64(1); sd <= 3; sd++ {
		requireAllOK(t)(oneCall(t, 4, worldOpts{chaos: sd}, cfg, c, 20*time.Second))
	}
	withSeed(t, &seed.b13)
	wrong := false
	for sd := int64(1); sd <= 10 && !wrong; sd++ {
		errs, ok := oneCall(t, 4, worldOpts{chaos: sd}, cfg, c, 20*time.Second)
		require.True(t, ok)
		wrong = errors.Join(errs...) != nil
	}
	require.True(t, wrong, "expected in-place AlltoAll without scratch to read overwritten blocks")
}

func TestB14_LegacyNullStream(t *testing.T) {
	scenario := func() ([]error, bool) {
		w := newWorld(t, 2, worldOpts{})
		return w.run(testCfg(), 20*time.Second, true, func(r *rankEnv) error {
			r.s = hip.StreamNull
			p := r.prepare(agWin)
			if err := r.e.Launch(&p.args); err != nil {
				return err
			}
			r.syncStream()
			return r.verify(agWin, p)
		})
	}
	requireAllOK(t)(scenario())
	withSeed(t, &seed.b14)
	requireSomeErr(t, "invalid value")(scenario())
}

func TestB15_InitOutsideCapture(t *testing.T) {
	scenario := func() ([]error, bool) {
		w := newWorld(t, 2, worldOpts{})
		c := collCase{fn: FuncAllGather, count: 8, dtype: 0, mode: bufPlain}
		return w.run(testCfg(), 20*time.Second, true, func(r *rankEnv) error { return r.graphOnce(c) })
	}
	requireAllOK(t)(scenario())
	withSeed(t, &seed.b15)
	requireSomeErr(t, "capturing")(scenario())
}

// TestB19_OrderedAcrossStreams: rank 0 issues call 1 on stream A (gated)
// and call 2 on stream B; rank 1 issues call 1 on A and call 2 on B
// (gated until rank 0's B has announced). Unordered, rank 1's call 2
// overwrites the flag of its call 1 before rank 0 saw it.
func TestB19_OrderedAcrossStreams(t *testing.T) {
	scenario := func() ([]error, bool) {
		w := newWorld(t, 2, worldOpts{})
		return w.run(testCfg(), 3*time.Second, true, func(r *rankEnv) error {
			sB, err := r.rt.StreamCreate()
			if err != nil {
				return err
			}
			p1 := r.prepare(agWin)
			p2 := r.prepare(agWin)
			p1.args.Stream, p2.args.Stream = r.s, sB
			relA, relB := r.gatesB19(sB)
			if err := r.e.Launch(&p1.args); err != nil {
				return err
			}
			if err := r.e.Launch(&p2.args); err != nil {
				return err
			}
			return r.finishB19(relA, relB, sB, p1, p2)
		})
	}
	requireAllOK(t)(scenario())
	withSeed(t, &seed.b19)
	_, ok := scenario()
	require.False(t, ok, "expected unordered collectives on two streams to hang")
}

func TestValidation(t *testing.T) {
	w := newWorld(t, 2, worldOpts{})
	w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
		buf := r.alloc(4096)
		good := Args{Func: FuncAllGather, Datatype: 7, EltSize: 4, Count: 4, Send: buf, Recv: buf + 1024, Stream: r.s}
		for _, tc := range []struct {
			name string
			mod  func(a *Args)
			code result.Code
		}{
			{"reduce", func(a *Args) { a.Func = FuncAllReduce }, result.InvalidUsage},
			{"unknown", func(a *Args) { a.Func = 99 }, result.InvalidUsage},
			{"datatype", func(a *Args) { a.Datatype = 12 }, result.InvalidArgument},
			{"eltsize", func(a *Args) { a.EltSize = 8 }, result.InvalidArgument},
			{"root", func(a *Args) { a.Func, a.Root = FuncScatter, 2 }, result.InvalidArgument},
			{"negroot", func(a *Args) { a.Func, a.Root = FuncGather, -1 }, result.InvalidArgument},
			{"overflow", func(a *Args) { a.Count = ^uintptr(0) / 4 }, result.InvalidArgument},
			{"nullsend", func(a *Args) { a.Send = 0 }, result.InvalidArgument},
			{"nullrecv", func(a *Args) { a.Recv = 0 }, result.InvalidArgument},
			{"peers", func(a *Args) { a.PeerRecv = []hip.DevicePtr{1} }, result.InvalidArgument},
		} {
			a := good
			tc.mod(&a)
			err := r.e.Launch(&a)
			if result.Of(err) != tc.code {
				return fmt.Errorf("%s: got %v (%v), want code %d", tc.name, result.Of(err), err, tc.code)
			}
		}
		if result.Of(r.e.Launch(nil)) != result.InvalidUsage {
			return fmt.Errorf("nil args accepted")
		}
		// Count 0 needs no buffers and is a valid no-op.
		z := Args{Func: FuncGather, Datatype: 0, EltSize: 1, Stream: r.s}
		if err := r.e.Launch(&z); err != nil {
			return err
		}
		r.syncStream()
		if err := r.e.Finalize(); err != nil {
			return err
		}
		if err := r.e.Finalize(); err != nil {
			return err
		}
		if result.Of(r.e.Launch(&good)) != result.InvalidUsage {
			return fmt.Errorf("launch after finalize not refused")
		}
		return nil
	})
}

func TestImplemented(t *testing.T) {
	w := newWorld(t, 1, worldOpts{})
	rt := w.rt
	for f := Func(0); f < NumFuncs; f++ {
		want := f == FuncAllGather || f == FuncAlltoAll || f == FuncScatter || f == FuncGather
		require.Equal(t, want, Implemented(rt, f, 0, 7), f.String())
	}
	require.False(t, Implemented(rt, FuncAllGather, 0, 12))
	require.False(t, Implemented(rt, FuncAllGather, 0, -1))
	require.False(t, Implemented(nil, FuncAllGather, 0, 0))
}

// TestB19_GraphThenEager: a graph launched on stream A with the
// communicator's knowledge (OrderBefore/OrderAfter), then an eager call on
// stream B. Rank 0's A is gated, rank 1's B is gated until rank 0's eager
// call has announced. Unordered, the eager values overwrite the graph's
// flag before rank 0's graph saw it.
func TestB19_GraphThenEager(t *testing.T) {
	scenario := func() ([]error, bool) {
		w := newWorld(t, 2, worldOpts{})
		return w.run(testCfg(), 3*time.Second, true, func(r *rankEnv) error {
			sB, err := r.rt.StreamCreate()
			if err != nil {
				return err
			}
			p1 := r.prepare(agWin)
			p2 := r.prepare(agWin)
			p2.args.Stream = sB
			x, err := r.captureGraph(&p1.args)
			if err != nil {
				return err
			}
			r.w.bar.wait()
			relA, relB := r.gatesB19(sB)
			if err := r.e.OrderBefore(r.s); err != nil {
				return err
			}
			if err := r.rt.GraphLaunch(x, r.s); err != nil {
				return err
			}
			if err := r.e.OrderAfter(r.s); err != nil {
				return err
			}
			if err := r.e.Launch(&p2.args); err != nil {
				return err
			}
			return r.finishB19(relA, relB, sB, p1, p2)
		})
	}
	requireAllOK(t)(scenario())
	withSeed(t, &seed.b19)
	_, ok := scenario()
	require.False(t, ok, "expected an eager call beside an unordered graph replay to hang")
}

// TestCaptureTwoStreams: two collectives of one capture on two streams
// are ordered inside the graph (the second stream joins the capture).
func TestCaptureTwoStreams(t *testing.T) {
	w := newWorld(t, 3, worldOpts{chaos: 9})
	w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
		sB, err := r.rt.StreamCreate()
		if err != nil {
			return err
		}
		join, err := r.rt.EventCreate(hip.EventDisableTiming)
		if err != nil {
			return err
		}
		p1 := r.prepare(agWin)
		c2 := collCase{fn: FuncAlltoAll, count: 40, dtype: 0, mode: bufPlain}
		p2 := r.prepare(c2)
		p2.args.Stream = sB
		fork, err := r.rt.EventCreate(hip.EventDisableTiming)
		if err != nil {
			return err
		}
		if err := r.rt.StreamBeginCapture(r.s, hip.CaptureModeThreadLocal); err != nil {
			return err
		}
		// Fork sB into the capture (a stream joins a capture only by
		// waiting on an event recorded in it), as an application would.
		if err := r.rt.EventRecord(fork, r.s); err != nil {
			return err
		}
		if err := r.rt.StreamWaitEvent(sB, fork); err != nil {
			return err
		}
		if err := r.e.Launch(&p1.args); err != nil {
			return err
		}
		if err := r.e.Launch(&p2.args); err != nil {
			return err
		}
		// Join sB back into the origin, as CUDA requires.
		if err := r.rt.EventRecord(join, sB); err != nil {
			return err
		}
		if err := r.rt.StreamWaitEvent(r.s, join); err != nil {
			return err
		}
		g, err := r.rt.StreamEndCapture(r.s)
		if err != nil {
			return err
		}
		x, err := r.rt.GraphInstantiate(g)
		if err != nil {
			return err
		}
		for range 3 {
			if err := r.rt.GraphLaunch(x, r.s); err != nil {
				return err
			}
		}
		r.syncStream()
		if err := r.verify(agWin, p1); err != nil {
			return err
		}
		return r.verify(c2, p2)
	})
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("CECOLL_INTRA_BATCH_SYNC_FREQ", "4")
	t.Setenv("CECOLL_INTRA_BATCH_SYNC_THRESHOLD", "64M")
	t.Setenv("CECOLL_STAGING_BYTES", "1048576")
	t.Setenv("CECOLL_FLAG_WRITE", "copy")
	t.Setenv("CECOLL_SYNC", "Star")
	t.Setenv("CECOLL_HUB_BYTES", "16K")
	t.Setenv("CECOLL_EVENT_ROUNDS", "0")
	require.Equal(t, Config{IntraBatchSyncFreq: 4, IntraBatchSyncThreshold: 64 << 20, StagingBytes: 1 << 20, FlagWrite: FlagWriteCopy, Sync: SyncStar, HubBytes: 16 << 10, NoEventRounds: true}, ConfigFromEnv())
	t.Setenv("CECOLL_INTRA_BATCH_SYNC_FREQ", "zero")
	t.Setenv("CECOLL_STAGING_BYTES", "")
	t.Setenv("CECOLL_FLAG_WRITE", "fast")
	t.Setenv("CECOLL_SYNC", "ring")
	t.Setenv("CECOLL_HUB_BYTES", "0")
	t.Setenv("CECOLL_EVENT_ROUNDS", "off")
	cfg := ConfigFromEnv()
	require.False(t, cfg.NoEventRounds, "CECOLL_EVENT_ROUNDS: only 0 turns event rounds off")
	require.Equal(t, int64(-1), cfg.HubBytes, "CECOLL_HUB_BYTES=0 turns hub rounds off")
	require.Equal(t, SyncAuto, cfg.Sync)
	require.Equal(t, DefaultIntraBatchSyncFreq, cfg.IntraBatchSyncFreq)
	require.Equal(t, uintptr(DefaultStagingBytes), cfg.StagingBytes)
	require.Equal(t, FlagWriteAuto, cfg.FlagWrite)
}

// TestInitUnwinds: an Init that fails part way (the staging window cannot
// be allocated) leaves no window registered and nothing allocated.
func TestInitUnwinds(t *testing.T) {
	w := newWorld(t, 1, worldOpts{})
	c := w.comms[0]
	var live []hip.DevicePtr
	c.rt = freeTracker{testRT: c.rt.(testRT), live: &live}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, c.rt.SetDevice(0))
	cfg := testCfg()
	cfg.StagingBytes = 1 << 50
	_, err := Init(c, cfg)
	require.Error(t, err)
	require.Empty(t, c.wins)
	require.Empty(t, live)
	e, err := Init(c, testCfg())
	require.NoError(t, err)
	require.Len(t, c.wins, 2)
	require.NoError(t, e.Finalize())
	require.NoError(t, e.Finalize())
	require.Empty(t, c.wins)
	require.Empty(t, live)
}

// freeTracker keeps the set of live allocations.
type freeTracker struct {
	testRT
	live *[]hip.DevicePtr
}

func (f freeTracker) MemAlloc(n uintptr) (hip.DevicePtr, error) {
	p, err := f.testRT.MemAlloc(n)
	if err == nil {
		*f.live = append(*f.live, p)
	}
	return p, err
}

func (f freeTracker) MemFree(p hip.DevicePtr) error {
	for i, q := range *f.live {
		if q == p {
			*f.live = append((*f.live)[:i], (*f.live)[i+1:]...)
		}
	}
	return f.testRT.MemFree(p)
}
