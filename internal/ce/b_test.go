package ce

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// The regression tests of the seed's defects (docs/protocol.md#defects-of-the-seed,
// B1..B19), each asserting the fixed invariant against the engine as
// shipped. Each has a mutant in mutants/ that undoes its fix; `make
// test-mutants` checks that the test then fails.

// recRT records what the engine asks of the runtime.
type recRT struct {
	hip.Runtime
	mu       sync.Mutex
	batches  [][]hip.MemOp
	copySrcs []hip.DevicePtr // sources of 1-, 4- and 8-byte copies (flag copies)
	copyDsts []hip.DevicePtr // their destinations
	copySize []uintptr       // sizes of every plain copy
	copies   []copyRec       // every copy: destination, source, bytes
	batchOn  []hip.Stream    // streams of batched copies
	attrs    int             // batched copies given attributes
	mcCreate int             // MulticastCreate calls
	allocs   int             // MemAlloc calls
	log      []string
}

// copyRec is one copy a rank issued (a batch's entries one by one).
type copyRec struct {
	dst, src hip.DevicePtr
	n        uintptr
}

func (r *recRT) note(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *recRT) StreamBatchMemOp(s hip.Stream, ops []hip.MemOp) error {
	r.mu.Lock()
	r.batches = append(r.batches, append([]hip.MemOp(nil), ops...))
	r.mu.Unlock()
	return r.Runtime.StreamBatchMemOp(s, ops)
}

func (r *recRT) MemcpyAsync(dst, src hip.DevicePtr, n uintptr, s hip.Stream) error {
	r.mu.Lock()
	if n == 1 || n == 4 || n == 8 {
		r.copySrcs = append(r.copySrcs, src)
		r.copyDsts = append(r.copyDsts, dst)
	}
	r.copySize = append(r.copySize, n)
	r.copies = append(r.copies, copyRec{dst, src, n})
	r.mu.Unlock()
	return r.Runtime.MemcpyAsync(dst, src, n, s)
}

func (r *recRT) MemcpyBatchAsync(dsts, srcs []hip.DevicePtr, sizes []uintptr, attrs []hip.CopyAttributes, idxs []uintptr, s hip.Stream) error {
	r.mu.Lock()
	r.batchOn = append(r.batchOn, s)
	for i := range dsts {
		r.copies = append(r.copies, copyRec{dsts[i], srcs[i], sizes[i]})
	}
	if len(attrs) > 0 {
		r.attrs++
	}
	r.mu.Unlock()
	return r.Runtime.MemcpyBatchAsync(dsts, srcs, sizes, attrs, idxs, s)
}

func (r *recRT) MulticastCreate(members []hip.DevicePtr, size uintptr) (hip.DevicePtr, error) {
	r.note("multicast")
	r.mu.Lock()
	r.mcCreate++
	r.mu.Unlock()
	return r.Runtime.MulticastCreate(members, size)
}

func (r *recRT) MemAlloc(size uintptr) (hip.DevicePtr, error) {
	r.mu.Lock()
	r.allocs++
	r.mu.Unlock()
	return r.Runtime.MemAlloc(size)
}

// recorded runs cases on n ranks with a recording runtime per rank.
func recorded(t *testing.T, n int, o worldOpts, cfg Config, cases []collCase) []*recRT {
	recs := make([]*recRT, n)
	o.wrap = func(rank int, rt hip.Runtime) hip.Runtime {
		recs[rank] = &recRT{Runtime: rt}
		return recs[rank]
	}
	runCases(t, n, o, cfg, cases)
	return recs
}

// TestB1_MemOpTypeSet: every stream memory operation the engine submits
// has its type set (the seed left waits at 0, an invalid operation).
func TestB1_MemOpTypeSet(t *testing.T) {
	for _, sy := range []string{SyncAllPairs, SyncStar} {
		cfg := testCfg()
		cfg.Sync = sy
		recs := recorded(t, 4, worldOpts{}, cfg, allCases(4, []uintptr{5}, []bufMode{bufPlain, bufWindow}))
		waits := 0
		for _, r := range recs {
			for _, b := range r.batches {
				for _, op := range b {
					require.Contains(t, []hip.MemOpType{hip.MemOpWaitValue32, hip.MemOpWriteValue32}, op.Op)
					if op.Op == hip.MemOpWaitValue32 {
						waits++
					}
				}
			}
		}
		require.Positive(t, waits)
	}
}

// TestB2_BytesMove: eager collectives with batched copies move the bytes
// (the seed compiled the batched copy out). The data checks of every
// collective test this; here with batches on and the batches counted.
func TestB2_BytesMove(t *testing.T) {
	recs := recorded(t, 3, worldOpts{}, testCfg(), allCases(3, []uintptr{300}, []bufMode{bufPlain, bufWindow}))
	n := 0
	for _, r := range recs {
		n += len(r.batchOn)
	}
	require.Positive(t, n, "no batched copy was issued")
}

// TestB3_NoCopyAttributesWhereRefused: where the batched copy refuses
// copy attributes (HIP before 7.12), none are passed, and the collectives
// work; where it takes them, they are passed.
func TestB3_NoCopyAttributesWhereRefused(t *testing.T) {
	caps := hip.Caps{BatchCopy: true, CopyAttributes: false, PeerWriteValue: true}
	recs := recorded(t, 3, worldOpts{caps: &caps}, testCfg(), allCases(3, []uintptr{300}, []bufMode{bufPlain, bufWindow}))
	for _, r := range recs {
		require.Zero(t, r.attrs)
	}
	caps.CopyAttributes = true
	recs = recorded(t, 3, worldOpts{caps: &caps}, testCfg(), allCases(3, []uintptr{300}, []bufMode{bufWindow}))
	require.Positive(t, recs[0].attrs)
}

// TestB4_DeviceResidentFlagWord: copied flags, unicast and multicast,
// eager and captured, come from device memory the engine owns (the seed
// copied the multicast flag from a host stack variable).
func TestB4_DeviceResidentFlagWord(t *testing.T) {
	mc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true, Multicast: true}
	for _, sy := range []string{SyncAllPairs, SyncStar} {
		cfg := testCfg()
		cfg.FlagWrite, cfg.Sync = FlagWriteCopy, sy
		var mu sync.Mutex
		owned := map[hip.DevicePtr]bool{}
		var words []hip.DevicePtr
		var windows [][2]hip.DevicePtr // every rank's sync window, and its multicast range
		recs := make([]*recRT, 4)
		w := newWorld(t, 4, worldOpts{caps: &mc, wrap: func(rank int, rt hip.Runtime) hip.Runtime {
			recs[rank] = &recRT{Runtime: rt}
			return recs[rank]
		}})
		w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
			mu.Lock()
			g := &r.e.sig
			words = append(words, g.local(localSrc), g.local(localOne), g.word(g.releasePattern()), g.word(g.signalPattern()))
			windows = append(windows, [2]hip.DevicePtr{g.base, g.base + hip.DevicePtr(g.size)})
			if g.mc != 0 {
				windows = append(windows, [2]hip.DevicePtr{g.mc, g.mc + hip.DevicePtr(g.size)})
			}
			mu.Unlock()
			for _, c := range allCases(4, []uintptr{5}, []bufMode{bufWindow}) {
				p := r.prepare(c)
				if err := r.e.Launch(&p.args); err != nil {
					return err
				}
				r.syncStream()
				if err := r.verify(c, p); err != nil {
					return err
				}
				g, err := r.captureGraph(&p.args)
				if err != nil {
					return err
				}
				if err := r.replay(g); err != nil {
					return err
				}
				r.w.bar.wait()
			}
			return nil
		})
		for _, p := range words {
			owned[p] = true
		}
		n := 0
		for _, r := range recs {
			for i, src := range r.copySrcs {
				flag := false // a copy into a sync window
				for _, w := range windows {
					flag = flag || r.copyDsts[i] >= w[0] && r.copyDsts[i] < w[1]
				}
				if flag {
					require.True(t, owned[src], "flag copied from %#x, not from a word of the engine", src)
					n++
				}
			}
		}
		require.Positive(t, n, "no flag copy")
	}
}

// TestB5_PeerWriteValueRefused: where write-value to a peer's memory is
// refused (CUDA 13.1; the host device's nopeerwrite), the default flag
// method copies, and every collective works.
func TestB5_PeerWriteValueRefused(t *testing.T) {
	caps := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: false}
	for _, sy := range []string{SyncAllPairs, SyncStar} {
		cfg := testCfg()
		cfg.Sync = sy
		runCases(t, 4, worldOpts{caps: &caps, chaos: 4}, cfg, allCases(4, []uintptr{5, 2000}, []bufMode{bufPlain, bufWindow, bufGroup}))
	}
}

// TestB6_MulticastSetUpEagerly: with multicast and more than two ranks the
// multicast address is made in Init, before its barrier; with two ranks
// it is never made (the seed made it lazily at the first sync, without a
// barrier, also for two ranks).
func TestB6_MulticastSetUpEagerly(t *testing.T) {
	mc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true, Multicast: true}
	for _, n := range []int{2, 3, 5} {
		recs := make([]*recRT, n)
		var created []int
		w := newWorld(t, n, worldOpts{caps: &mc, chaos: int64(n), wrap: func(rank int, rt hip.Runtime) hip.Runtime {
			recs[rank] = &recRT{Runtime: rt}
			return recs[rank]
		}})
		var mu sync.Mutex
		w.run(testCfg(), 60*time.Second, false, func(r *rankEnv) error {
			// Init returned, so its barrier passed.
			mu.Lock()
			created = append(created, recs[r.rank].mcCreate)
			mu.Unlock()
			c := collCase{fn: FuncAllGather, count: 5, dtype: 0, mode: bufWindow}
			p := r.prepare(c)
			if err := r.e.Launch(&p.args); err != nil {
				return err
			}
			r.syncStream()
			return r.verify(c, p)
		})
		for r, k := range created {
			want := 1
			if n == 2 {
				want = 0
			}
			require.Equal(t, want, k, "n=%d rank %d: multicast made before the first collective", n, r)
			require.Equal(t, want, recs[r].mcCreate, "n=%d rank %d: multicast made later", n, r)
		}
	}
}

// TestB7_MemOpBatchSplit: memop lists longer than 255 entries are split
// (the driver refuses 256 and more): 130 ranks in an eager all-pairs sync
// (its n-1 writes and n-1 waits make one list).
func TestB7_MemOpBatchSplit(t *testing.T) {
	const n = 130
	cfg := testCfg()
	cfg.Sync = SyncAllPairs
	recs := make([]*recRT, n)
	nomc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	w := newWorld(t, n, worldOpts{devices: 4, caps: &nomc, wrap: func(rank int, rt hip.Runtime) hip.Runtime {
		recs[rank] = &recRT{Runtime: rt}
		return recs[rank]
	}})
	w.run(cfg, 120*time.Second, false, func(r *rankEnv) error {
		c := collCase{fn: FuncAllGather, count: 1, dtype: 0, mode: bufWindow}
		p := r.prepare(c)
		if err := r.e.Launch(&p.args); err != nil {
			return err
		}
		r.syncStream()
		return r.verify(c, p)
	})
	long := 0
	for _, r := range recs {
		for _, b := range r.batches {
			require.LessOrEqual(t, len(b), hip.MaxMemOpsPerBatch)
			if len(b) == hip.MaxMemOpsPerBatch {
				long++
			}
		}
	}
	require.Positive(t, long, "no list was long enough to need a split")
}

// TestB8_EvenSyncsUnderCapture: a captured collective whose plan has an odd
// number of syncs (two sub-batches: three) gets one more, so that every
// replay starts on the same graph array; replays and eager calls between
// them stay right.
func TestB8_EvenSyncsUnderCapture(t *testing.T) {
	cfg := testCfg()
	cfg.IntraBatchSyncFreq, cfg.IntraBatchSyncThreshold = 2, 16
	c := collCase{fn: FuncAllGather, count: 64, dtype: 0, mode: bufWindow}
	w := newWorld(t, 4, worldOpts{chaos: 8})
	w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
		p := r.prepare(c)
		g, err := r.captureGraph(&p.args) // three syncs in the plan
		if err != nil {
			return err
		}
		// Replays back to back: a rank may run into the next replay while
		// a peer still finishes this one.
		for range 8 {
			if err := r.rt.GraphLaunch(g, r.s); err != nil {
				return err
			}
		}
		r.syncStream()
		return r.verify(c, p)
	})
}

// TestB9_IntraBatchDecisionRankInvariant: with sub-batches, ranks in place
// (no local copy) and out of place (one) run the same number of syncs.
func TestB9_IntraBatchDecisionRankInvariant(t *testing.T) {
	cfg := testCfg()
	cfg.IntraBatchSyncFreq, cfg.IntraBatchSyncThreshold = 2, 64
	for _, n := range []int{3, 5} {
		w := newWorld(t, n, worldOpts{chaos: 9})
		w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
			// Even ranks in place, odd ranks not.
			c := collCase{fn: FuncAllGather, count: 100, dtype: 0, mode: bufWindow, inPlace: r.rank%2 == 0}
			p := r.prepare(c)
			for range 3 {
				if err := r.e.Launch(&p.args); err != nil {
					return err
				}
			}
			r.syncStream()
			return r.verify(c, p)
		})
	}
}

// TestB10_GraphWaitsIgnoreEagerValues: after eager calls, a captured
// collective's waits hold until its peers' graph signals: a rank whose
// peer launches its replay late still gets the right data (the seed's
// graph constant 1 equalled a value eager calls leave behind).
func TestB10_GraphWaitsIgnoreEagerValues(t *testing.T) {
	c := collCase{fn: FuncAllGather, count: 300, dtype: 0, mode: bufWindow}
	w := newWorld(t, 3, worldOpts{})
	w.run(testCfg(), 60*time.Second, false, func(r *rankEnv) error {
		p := r.prepare(c)
		for range 5 {
			if err := r.e.Launch(&p.args); err != nil {
				return err
			}
		}
		r.syncStream()
		g, err := r.captureGraph(&p.args)
		if err != nil {
			return err
		}
		for rep := range 3 {
			p.refill()
			r.w.bar.wait()
			if r.rank == 1 {
				time.Sleep(30 * time.Millisecond)
			}
			if err := r.replay(g); err != nil {
				return err
			}
			if err := r.verify(c, p); err != nil {
				return fmt.Errorf("replay %d: %w", rep, err)
			}
			r.w.bar.wait()
		}
		return nil
	})
}

// TestB11_SamePathOnEveryRank: rooted calls whose non-roots pass NULL for
// the buffer they do not use take the root's path on every path.
func TestB11_SamePathOnEveryRank(t *testing.T) {
	var cs []collCase
	for _, m := range []bufMode{bufPlain, bufWindow, bufGroup} {
		for _, f := range []Func{FuncBroadcast, FuncScatter, FuncGather} {
			for _, root := range []int{0, 2} {
				cs = append(cs, collCase{fn: f, count: 700, dtype: 0, root: root, mode: m, nullBuf: true})
			}
		}
	}
	runCases(t, 3, worldOpts{chaos: 11}, testCfg(), cs)
}

// TestB12_InPlaceRootedEveryRoot: in-place Scatter and Gather on symmetric
// windows, every root, in NCCL's layout (every rank's buffer at one window
// offset; Scatter recv = buf + rank*count, Gather send = buf + rank*count):
// the root reaches peer r's block at buf + r*count of r's window (the seed
// used its own recv offset plus r*count; cecoll's first engine its own
// offset for every peer).
func TestB12_InPlaceRootedEveryRoot(t *testing.T) {
	var cs []collCase
	for root := range 4 {
		for _, f := range []Func{FuncScatter, FuncGather} {
			cs = append(cs, collCase{fn: f, count: 257, dtype: 0, root: root, mode: bufWindow, inPlace: true})
		}
	}
	runCases(t, 4, worldOpts{chaos: 12}, testCfg(), cs)
}

// TestB13_InPlaceAlltoAll: in-place AlltoAll, whose peers write into the
// very blocks a rank still sends, gives the right result on every path, in
// rounds of its scratch (NCCL has no in-place AlltoAll).
func TestB13_InPlaceAlltoAll(t *testing.T) {
	var cs []collCase
	for _, m := range []bufMode{bufPlain, bufWindow, bufGroup} {
		for _, cnt := range []uintptr{3, 1000} {
			cs = append(cs, collCase{fn: FuncAlltoAll, count: cnt, dtype: 7, mode: m, inPlace: true})
		}
	}
	for _, n := range []int{2, 3, 4, 5} {
		runCases(t, n, worldOpts{chaos: 13}, testCfg(), cs)
	}
}

// TestB14_LegacyNullStream: collectives on the legacy NULL stream work,
// and no batched copy is ever issued there (it refuses them): ungrouped,
// the engine copies on its own streams; grouped with every rank on one
// device, the calls sync by events and run on the caller's stream, here
// the NULL stream all ranks share, with one copy each.
func TestB14_LegacyNullStream(t *testing.T) {
	onNullStream(t, worldOpts{}, bufPlain, bufWindow)
}

func TestB14_LegacyNullStreamGrouped(t *testing.T) {
	onNullStream(t, worldOpts{devices: 1}, bufGroup)
}

func onNullStream(t *testing.T, o worldOpts, modes ...bufMode) {
	recs := make([]*recRT, 3)
	o.wrap = func(rank int, rt hip.Runtime) hip.Runtime {
		recs[rank] = &recRT{Runtime: rt}
		return recs[rank]
	}
	w := newWorld(t, 3, o)
	w.run(testCfg(), 60*time.Second, false, func(r *rankEnv) error {
		for _, c := range allCases(3, []uintptr{300}, modes) {
			p := r.prepare(c)
			p.args.Stream = hip.StreamNull
			launch := r.e.Launch
			if c.mode == bufGroup {
				r.withEvents(&p.args)
				launch = r.launchSteps
			}
			if err := launch(&p.args); err != nil {
				return err
			}
			if err := r.rt.StreamSynchronize(hip.StreamNull); err != nil {
				return err
			}
			if err := r.verify(c, p); err != nil {
				return err
			}
			r.w.bar.wait()
		}
		return nil
	})
	for _, r := range recs {
		if modes[0] != bufGroup {
			require.Positive(t, len(r.batchOn))
		}
		for _, s := range r.batchOn {
			require.False(t, s.IsLegacyNull(), "a batched copy on the legacy NULL stream")
		}
	}
}

// TestB15_InitOutsideCapture: everything the engine needs is made at Init,
// so a new engine's first collective may be captured: nothing is
// allocated or registered after Init, and the graph replays right.
func TestB15_InitOutsideCapture(t *testing.T) {
	recs := make([]*recRT, 3)
	w := newWorld(t, 3, worldOpts{wrap: func(rank int, rt hip.Runtime) hip.Runtime {
		recs[rank] = &recRT{Runtime: rt}
		return recs[rank]
	}})
	w.run(testCfg(), 60*time.Second, false, func(r *rankEnv) error {
		c := collCase{fn: FuncAlltoAll, count: 3000, dtype: 0, mode: bufPlain}
		p := r.prepare(c)
		rec := recs[r.rank]
		rec.mu.Lock()
		before := rec.allocs
		rec.mu.Unlock()
		g, err := r.captureGraph(&p.args)
		if err != nil {
			return err
		}
		rec.mu.Lock()
		after := rec.allocs
		rec.mu.Unlock()
		if after != before {
			return fmt.Errorf("%d allocations during the capture", after-before)
		}
		if err := r.replay(g); err != nil {
			return err
		}
		return r.verify(c, p)
	})
}

// heldUntilPeers runs c on every rank with rank 1 issuing its call late
// (by 50 ms), and fails when another rank's stream finished before that: a sync
// that passes without its peers (then data may still look right, by
// timing). late is the world's "rank 1 issued" mark.
func heldUntilPeers(r *rankEnv, c collCase, late *atomic.Bool) error {
	p := r.prepare(c)
	late.Store(false)
	r.w.bar.wait()
	if r.rank == 1 {
		time.Sleep(50 * time.Millisecond)
		late.Store(true)
	}
	if err := r.e.Launch(&p.args); err != nil {
		return err
	}
	if r.rank != 1 {
		time.Sleep(20 * time.Millisecond)
		if done := r.rt.StreamQuery(r.s) == nil; done && !late.Load() {
			return fmt.Errorf("%v: rank %d's collective completed before rank 1 issued its part", c, r.rank)
		}
	}
	r.syncStream()
	if err := r.verify(c, p); err != nil {
		return err
	}
	r.w.bar.wait()
	return nil
}

// TestB17_SyncArraysZeroed: whatever the memory held before, the flag
// words are zeroed before any use (garbage there would pass a wait).
func TestB17_SyncArraysZeroed(t *testing.T) {
	garbage := func(rt hip.Runtime, p hip.DevicePtr, size uintptr) {
		b := make([]byte, size)
		for i := range b {
			b[i] = 0x40 // 0x40404040 as a word: far past any early value
		}
		if err := hip.CopyToDevice(rt, p, b); err != nil {
			panic(err)
		}
	}
	w := newWorld(t, 3, worldOpts{memAlloc: garbage})
	var late atomic.Bool
	w.run(testCfg(), 60*time.Second, false, func(r *rankEnv) error {
		for _, c := range allCases(3, []uintptr{700}, []bufMode{bufPlain, bufWindow}) {
			if err := heldUntilPeers(r, c, &late); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestB18_SequenceWraps: the eager sequence runs through 2^31 and 2^32
// without a reset, and the cyclic waits hold across both (the seed's
// counter wrapped onto its reset and graph values; a counter reset lower
// would let a wait pass on a word a peer left higher).
func TestB18_SequenceWraps(t *testing.T) {
	for _, start := range []uint32{1<<31 - 7, ^uint32(0) - 7} {
		cases := allCases(3, []uintptr{100}, []bufMode{bufWindow, bufPlain})
		w := newWorld(t, 3, worldOpts{})
		var late atomic.Bool
		w.run(testCfg(), 60*time.Second, false, func(r *rankEnv) error {
			// The words hold the start value, as if that many syncs ran.
			r.e.sig.seq.Store(start)
			b := make([]byte, 4*r.w.n)
			for i := range r.w.n {
				b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(start), byte(start>>8), byte(start>>16), byte(start>>24)
			}
			r.put(r.e.sig.word(r.e.sig.eagerWord(0)), b)
			r.w.bar.wait()
			for _, c := range cases {
				if err := heldUntilPeers(r, c, &late); err != nil {
					return fmt.Errorf("from %#x: %w", start, err)
				}
			}
			return nil
		})
	}
}

// TestB19_OrderedAcrossStreams: one communicator's collectives run in the
// order they were issued, whatever streams they were issued on (they share
// the flags and the staging windows, and a later one may read what an
// earlier one wrote): an eager AllGather on a held-back stream, then an
// eager Gather on a second stream, then, on a third, a graph replay whose
// AlltoAll sends the AllGather's result.
func TestB19_OrderedAcrossStreams(t *testing.T) {
	const chunk = 600
	w := newWorld(t, 3, worldOpts{chaos: 19})
	w.run(testCfg(), 60*time.Second, false, func(r *rankEnv) error {
		n, me := r.w.n, r.rank
		s2, err := r.rt.StreamCreate()
		if err != nil {
			return err
		}
		defer r.rt.StreamDestroy(s2)
		s3, err := r.rt.StreamCreate()
		if err != nil {
			return err
		}
		defer r.rt.StreamDestroy(s3)
		send, mid, out := r.alloc(chunk), r.alloc(uintptr(n)*chunk), r.alloc(uintptr(n)*chunk)
		r.put(send, pattern(me, chunk))
		r.put(mid, bytes.Repeat([]byte{0xA5}, n*chunk))
		r.put(out, bytes.Repeat([]byte{0xA5}, n*chunk))
		ag := Args{Func: FuncAllGather, Datatype: 0, Count: chunk, EltSize: 1, Send: send, Recv: mid, Stream: r.s}
		a2a := Args{Func: FuncAlltoAll, Datatype: 0, Count: chunk, EltSize: 1, Send: mid, Recv: out, Stream: s3}
		other := collCase{fn: FuncGather, count: 300, dtype: 0, root: 2, mode: bufPlain}
		po := r.prepare(other)
		po.args.Stream = s2
		gs := r.s
		r.s = s3
		g, err := r.captureGraph(&a2a)
		r.s = gs
		if err != nil {
			return err
		}
		r.w.bar.wait()
		release := r.gate(r.s)
		if err := r.e.Launch(&ag); err != nil {
			return err
		}
		if err := r.e.Launch(&po.args); err != nil {
			return err
		}
		if err := r.e.OrderBefore(s3); err != nil {
			return err
		}
		if err := r.rt.GraphLaunch(g, s3); err != nil {
			return err
		}
		if err := r.e.OrderAfter(s3); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
		release()
		for _, s := range []hip.Stream{r.s, s2, s3} {
			if err := r.rt.StreamSynchronize(s); err != nil {
				return err
			}
		}
		if err := r.verify(other, po); err != nil {
			return err
		}
		// out's block q is rank q's AllGather result block me: my send.
		want := bytes.Repeat(pattern(me, chunk), n)
		if got := r.get(out, uintptr(n)*chunk); !bytes.Equal(got, want) {
			return fmt.Errorf("rank %d: the replay did not see the AllGather issued before it", me)
		}
		return nil
	})
}

// TestB19_EventArrival: grouped event calls of one communicator run in
// issue order whatever their streams: each runs on the engine's stream and
// signals its arrival from there, after the calls before it. A Gather
// (every rank copies its own block into the root's recv), eager or a
// graph's replay, with rank 1 held back on its stream, then an eager
// AllGather on a second stream whose recv's last block is each rank's
// Gather send: the root must still get rank 1's own block (a rank that
// signalled from the second stream would let its peers overwrite it).
func TestB19_EventArrival(t *testing.T) {
	const n, chunk = 3, 512
	for _, graph := range []bool{false, true} {
		t.Run(fmt.Sprint("graph=", graph), func(t *testing.T) {
			w := newWorld(t, n, worldOpts{devices: 1, chaos: 19})
			cfg := testCfg()
			cfg.HubBytes = -1 // every rank pushes its own block
			w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
				return eventArrival(r, n, chunk, graph)
			})
		})
	}
}

func eventArrival(r *rankEnv, n int, chunk uintptr, graph bool) error {
	me := r.rank
	s2, err := r.rt.StreamCreate()
	if err != nil {
		return err
	}
	defer r.rt.StreamDestroy(s2)
	buf, gout, agSend := r.alloc(uintptr(n)*chunk), r.alloc(uintptr(n)*chunk), r.alloc(chunk)
	gsend := buf + hip.DevicePtr(uintptr(n-1)*chunk)
	r.put(agSend, pattern(me+10, chunk))
	g := Args{Func: FuncGather, Count: chunk, EltSize: 1, Root: 0, Send: gsend, Recv: gout, Stream: r.s,
		PeerSend: r.exchange(gsend), PeerRecv: r.exchange(gout)}
	r.withEvents(&g)
	ag := Args{Func: FuncAllGather, Count: chunk, EltSize: 1, Send: agSend, Recv: buf, Stream: s2,
		PeerSend: r.exchange(agSend), PeerRecv: r.exchange(buf), PeerEvents: g.PeerEvents}
	var x hip.GraphExec
	if graph {
		if err := r.launchSteps(&ag); err != nil { // an eager call on s2 before the replay
			return err
		}
		if x, err = r.captureGraph(&g); err != nil {
			return err
		}
		r.syncStream()
		if err := r.rt.StreamSynchronize(s2); err != nil {
			return err
		}
	}
	r.put(buf, bytes.Repeat([]byte{0xA5}, n*int(chunk)))
	r.put(gsend, pattern(me, chunk))
	r.w.bar.wait()
	release := func() {}
	if me == 1 {
		release = r.gate(r.s)
	}
	if graph {
		err = r.e.OrderBefore(r.s)
		if err == nil {
			err = r.rt.GraphLaunch(x, r.s)
		}
		if err == nil {
			err = r.e.OrderAfter(r.s)
		}
	} else {
		err = r.launchSteps(&g)
	}
	if err != nil {
		return err
	}
	if err := r.launchSteps(&ag); err != nil {
		return err
	}
	time.Sleep(20 * time.Millisecond)
	release()
	for _, s := range []hip.Stream{r.s, s2} {
		if err := r.rt.StreamSynchronize(s); err != nil {
			return err
		}
	}
	if got := r.get(gout+hip.DevicePtr(chunk), chunk); me == 0 && !bytes.Equal(got, pattern(1, chunk)) {
		return fmt.Errorf("the root got another block for rank 1: its Gather send was overwritten by the AllGather issued after it")
	}
	for q := range n {
		if got := r.get(buf+hip.DevicePtr(uintptr(q)*chunk), chunk); !bytes.Equal(got, pattern(q+10, chunk)) {
			return fmt.Errorf("rank %d: AllGather block %d wrong", me, q)
		}
	}
	return nil
}
