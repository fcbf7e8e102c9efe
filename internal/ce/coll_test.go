package ce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// pattern is the content of block id, n bytes; distinct per id.
func pattern(id int, n uintptr) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(id*37 + i*7 + 1 + i>>8)
	}
	return b
}

// bufMode says where a test's buffers live and how the call is issued.
type bufMode int

const (
	bufPlain  bufMode = iota // unregistered: the staged path
	bufWindow                // a symmetric window: the window path
	bufGroup                 // every rank's buffers known: the group path, flags
	bufEvents                // the group path issued in group steps with events
)

func (m bufMode) String() string { return [...]string{"plain", "window", "group", "events"}[m] }

// collCase is one call on every rank.
type collCase struct {
	fn      Func
	count   uintptr // elements of dtype
	dtype   int32
	root    int
	inPlace bool
	mode    bufMode
	nullBuf bool // NULL non-root buffers where allowed (Scatter send, Gather recv)
}

func (c collCase) String() string {
	return fmt.Sprintf("%s/count=%d/dt=%d/root=%d/inplace=%v/%s/null=%v", c.fn, c.count, c.dtype, c.root, c.inPlace, c.mode, c.nullBuf)
}

// prepared holds one rank's buffers of a case and the expected result.
type prepared struct {
	args   Args
	base   hip.DevicePtr
	image  []byte // the whole allocation before the call
	want   []byte // the whole allocation after it
	refill func()
}

// prepare allocates and fills this rank's buffers for c (collective:
// every rank calls it in step). In-place forms use NCCL's layouts, the
// rooted ones that of docs/protocol.md#the-in-place-rooted-layout (one
// buffer buf per rank; Scatter: send = buf, recv = buf + rank*chunk;
// Gather: recv = buf, send = buf + rank*chunk, on every rank). The whole
// allocation is checked afterwards, so a copy that lands anywhere else
// shows.
func (r *rankEnv) prepare(c collCase) prepared {
	n, me := r.w.n, r.rank
	chunk := c.count * eltSizes[c.dtype]
	N := uintptr(n)
	a := Args{Func: c.fn, Root: c.root, Datatype: c.dtype, Count: c.count, EltSize: eltSizes[c.dtype], Stream: r.s}
	// One allocation: [send region][recv region][guard]; in place, buf is
	// the region the form names.
	var sendLen, recvLen uintptr
	switch c.fn {
	case FuncAllGather:
		sendLen, recvLen = chunk, N*chunk
	case FuncAlltoAll:
		sendLen, recvLen = N*chunk, N*chunk
	case FuncScatter:
		sendLen, recvLen = N*chunk, chunk
	case FuncGather:
		sendLen, recvLen = chunk, N*chunk
	case FuncBroadcast:
		sendLen, recvLen = chunk, chunk
	}
	total := sendLen + recvLen + 64
	base := r.alloc(total)
	if c.mode == bufWindow {
		if _, err := r.RegisterWindow(base, total); err != nil {
			panic(err)
		}
	}
	img := bytes.Repeat([]byte{0xA5}, int(total))
	sOff, rOff := uintptr(0), sendLen // offsets in the image
	isRoot := me == c.root
	switch c.fn {
	case FuncAllGather:
		if c.inPlace {
			sOff = rOff + uintptr(me)*chunk
		}
		copy(img[sOff:], pattern(me, chunk))
	case FuncAlltoAll:
		if c.inPlace {
			sOff = rOff
		}
		for d := range n {
			copy(img[sOff+uintptr(d)*chunk:], pattern(me*n+d, chunk))
		}
	case FuncScatter:
		if c.inPlace {
			rOff = uintptr(me) * chunk // buf = the send region
		}
		if isRoot {
			for d := range n {
				copy(img[uintptr(d)*chunk:], pattern(d, chunk))
			}
		}
	case FuncGather:
		if c.inPlace {
			sOff = rOff + uintptr(me)*chunk // buf = the recv region
		}
		copy(img[sOff:], pattern(me, chunk))
	case FuncBroadcast:
		if c.inPlace {
			rOff = 0 // ncclBcast: one buffer on every rank
		}
		if isRoot {
			copy(img[sOff:], pattern(100+c.root, chunk))
		}
	}
	send, recv := base+hip.DevicePtr(sOff), base+hip.DevicePtr(rOff)
	want := append([]byte(nil), img...)
	if c.count > 0 {
		switch c.fn {
		case FuncAllGather:
			for p := range n {
				copy(want[rOff+uintptr(p)*chunk:], pattern(p, chunk))
			}
		case FuncAlltoAll:
			for p := range n {
				copy(want[rOff+uintptr(p)*chunk:], pattern(p*n+me, chunk))
			}
		case FuncScatter:
			copy(want[rOff:], pattern(me, chunk))
		case FuncBroadcast:
			copy(want[rOff:], pattern(100+c.root, chunk))
		case FuncGather:
			if isRoot {
				for p := range n {
					copy(want[rOff+uintptr(p)*chunk:], pattern(p, chunk))
				}
			}
		}
	}
	if c.nullBuf && !c.inPlace {
		if (c.fn == FuncScatter || c.fn == FuncBroadcast) && !isRoot {
			send = 0
		}
		if c.fn == FuncGather && !isRoot {
			recv = 0
		}
	}
	a.Send, a.Recv = send, recv
	if c.mode == bufGroup || c.mode == bufEvents {
		a.PeerSend = r.exchange(send)
		a.PeerRecv = r.exchange(recv)
	}
	if c.mode == bufEvents {
		r.withEvents(&a)
	}
	refill := func() { r.put(base, img) }
	refill()
	return prepared{args: a, base: base, image: img, want: want, refill: refill}
}

// launch issues p's call as its mode says.
func (r *rankEnv) launch(c collCase, p *prepared) error {
	if c.mode == bufEvents {
		return r.launchSteps(&p.args)
	}
	return r.e.Launch(&p.args)
}

// verify reads the whole allocation of p after the stream is synchronised.
func (r *rankEnv) verify(c collCase, p prepared) error {
	got := r.get(p.base, uintptr(len(p.want)))
	for i := range got {
		if got[i] != p.want[i] {
			return fmt.Errorf("%v: rank %d: wrong byte %d of %d: got %#x want %#x", c, r.rank, i, len(got), got[i], p.want[i])
		}
	}
	return nil
}

// runCases runs every case on every rank, in order, with one engine.
func runCases(t *testing.T, n int, o worldOpts, cfg Config, cases []collCase) {
	w := newWorld(t, n, o)
	w.run(cfg, 90*time.Second, false, func(r *rankEnv) error {
		for _, c := range cases {
			p := r.prepare(c)
			if err := r.launch(c, &p); err != nil {
				return fmt.Errorf("%v: %w", c, err)
			}
			r.syncStream()
			if err := r.verify(c, p); err != nil {
				return err
			}
			r.w.bar.wait() // nobody frees or refills while a peer still reads
		}
		return nil
	})
}

// testCfg uses a small staging window so that staged calls run in rounds.
func testCfg() Config {
	return Config{StagingBytes: 4096, IntraBatchSyncFreq: 8, IntraBatchSyncThreshold: 512 << 20}
}

// allCases is every collective, form and root (0 and the last) of counts
// in modes.
func allCases(n int, counts []uintptr, modes []bufMode) []collCase {
	var cs []collCase
	roots := []int{0}
	if n > 1 {
		roots = append(roots, n-1)
	}
	for _, m := range modes {
		for _, cnt := range counts {
			for _, f := range []Func{FuncAllGather, FuncAlltoAll} {
				for _, ip := range []bool{false, true} {
					cs = append(cs, collCase{fn: f, count: cnt, dtype: 7, inPlace: ip, mode: m})
				}
			}
			for _, root := range roots {
				for _, f := range []Func{FuncBroadcast, FuncScatter, FuncGather} {
					for _, ip := range []bool{false, true} {
						cs = append(cs, collCase{fn: f, count: cnt, dtype: 0, root: root, inPlace: ip, mode: m, nullBuf: !ip})
					}
				}
			}
		}
	}
	return cs
}

func TestCollectives(t *testing.T) {
	ns := []int{1, 2, 3, 4, 5, 8, 9}
	counts := []uintptr{0, 1, 7, 1000}
	if testing.Short() {
		ns, counts = []int{1, 2, 3, 4}, []uintptr{1, 1000}
	}
	for _, n := range ns {
		for _, dev := range []int{0, 1} { // one device per rank, or one for all
			modes := []bufMode{bufPlain, bufWindow, bufGroup}
			if dev == 1 {
				modes = append(modes, bufEvents)
			}
			t.Run(fmt.Sprintf("n=%d/devices=%d", n, max(dev, n*(1-dev))), func(t *testing.T) {
				runCases(t, n, worldOpts{devices: dev}, testCfg(), allCases(n, counts, modes))
			})
		}
	}
}

// TestLarger moves a few MiB through every path in many rounds, with
// chaos.
func TestLarger(t *testing.T) {
	cnt := uintptr(64 << 10) // 256 KiB of float32 per block
	if testing.Short() {
		cnt = 8 << 10
	}
	cfg := testCfg()
	cfg.StagingBytes = 64 << 10
	var cs []collCase
	for _, m := range []bufMode{bufPlain, bufWindow, bufGroup} {
		for _, ip := range []bool{false, true} {
			cs = append(cs,
				collCase{fn: FuncAllGather, count: cnt, dtype: 7, mode: m, inPlace: ip},
				collCase{fn: FuncAlltoAll, count: cnt, dtype: 7, mode: m, inPlace: ip},
				collCase{fn: FuncScatter, count: cnt, dtype: 7, root: 1, mode: m, inPlace: ip},
				collCase{fn: FuncBroadcast, count: cnt, dtype: 7, root: 3, mode: m, inPlace: ip},
				collCase{fn: FuncGather, count: cnt, dtype: 7, root: 2, mode: m, inPlace: ip})
		}
	}
	runCases(t, 4, worldOpts{chaos: 7}, cfg, cs)
}

// TestChaos runs every case under several scheduler seeds, on separate
// devices and on one.
func TestChaos(t *testing.T) {
	seeds := []int64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, sd := range seeds {
		t.Run(fmt.Sprintf("seed=%d", sd), func(t *testing.T) {
			runCases(t, 3, worldOpts{chaos: sd}, testCfg(), allCases(3, []uintptr{1, 333, 1 << 12}, []bufMode{bufPlain, bufWindow, bufGroup}))
			runCases(t, 4, worldOpts{chaos: sd, devices: 1}, testCfg(), allCases(4, []uintptr{5, 1 << 11}, []bufMode{bufGroup, bufEvents}))
		})
	}
}

// TestFlagWriteAndSync covers every flag-write method with each sync
// algorithm, multicast, and HIP's split batches, under chaos.
func TestFlagWriteAndSync(t *testing.T) {
	nomc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	mc := nomc
	mc.Multicast = true
	nopw := nomc
	nopw.PeerWriteValue = false
	hipc := nomc
	hipc.SplitWaitReset, hipc.CopyAttributes = true, false
	for _, tc := range []struct {
		name string
		caps hip.Caps
		fw   string
		sync string
	}{
		{"allpairs-value", nomc, FlagWriteValue, SyncAllPairs},
		{"allpairs-copy", nomc, FlagWriteCopy, SyncAllPairs},
		{"star-value", nomc, FlagWriteValue, SyncStar},
		{"star-copy", nomc, FlagWriteCopy, SyncStar},
		{"mc-value", mc, FlagWriteValue, SyncAllPairs},
		{"mc-copy", mc, FlagWriteCopy, SyncAllPairs},
		{"nopeerwrite", nopw, FlagWriteAuto, SyncAuto},
		{"hip-star", hipc, FlagWriteAuto, SyncStar},
		{"hip-allpairs", hipc, FlagWriteAuto, SyncAllPairs},
	} {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/n=%d", tc.name, n), func(t *testing.T) {
				cfg := testCfg()
				cfg.FlagWrite, cfg.Sync = tc.fw, tc.sync
				caps := tc.caps
				runCases(t, n, worldOpts{caps: &caps, chaos: int64(n)}, cfg, allCases(n, []uintptr{5}, []bufMode{bufPlain, bufWindow, bufGroup}))
			})
		}
	}
}

// TestBackToBack runs random sequences of collectives, forms, roots and
// paths without any host barrier between them, eager and captured, under
// chaos: consecutive syncs of every kind share the flag words, and no
// rank may overtake a peer's reset or a buffer a peer still uses.
func TestBackToBack(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	if testing.Short() {
		seeds = seeds[:2]
	}
	for _, sd := range seeds {
		for _, capture := range []bool{false, true} {
			for _, dev := range []int{0, 1} {
				t.Run(fmt.Sprintf("seed=%d/capture=%v/devices=%d", sd, capture, dev), func(t *testing.T) {
					backToBack(t, sd, capture, dev)
				})
			}
		}
	}
}

func backToBack(t *testing.T, sd uint64, capture bool, dev int) {
	const n, calls = 4, 12
	rng := rand.New(rand.NewPCG(sd, 99))
	var cs []collCase
	modes := []bufMode{bufPlain, bufWindow, bufGroup}
	if dev == 1 && !capture {
		modes = append(modes, bufEvents)
	}
	for range calls {
		c := collCase{fn: []Func{FuncAllGather, FuncAlltoAll, FuncScatter, FuncGather, FuncBroadcast}[rng.IntN(5)],
			count: uintptr(1 + rng.IntN(700)), dtype: 1, root: rng.IntN(n), inPlace: rng.IntN(2) == 0, mode: modes[rng.IntN(len(modes))]}
		cs = append(cs, c)
	}
	w := newWorld(t, n, worldOpts{chaos: int64(sd), devices: dev})
	w.run(testCfg(), 90*time.Second, false, func(r *rankEnv) error {
		ps := make([]prepared, len(cs))
		for i, c := range cs {
			ps[i] = r.prepare(c)
		}
		if capture {
			args := make([]*Args, len(cs))
			for i := range cs {
				args[i] = &ps[i].args
			}
			g, err := r.captureGraph(args...)
			if err != nil {
				return err
			}
			for rep := range 3 {
				if rep > 0 {
					for i := range ps {
						ps[i].refill()
					}
					r.w.bar.wait()
				}
				if err := r.replay(g); err != nil {
					return err
				}
				for i, c := range cs {
					if err := r.verify(c, ps[i]); err != nil {
						return fmt.Errorf("replay %d, call %d: %w", rep, i, err)
					}
				}
				r.w.bar.wait()
			}
			return r.rt.GraphExecDestroy(g)
		}
		for i, c := range cs {
			if err := r.launch(c, &ps[i]); err != nil {
				return err
			}
		}
		r.syncStream()
		for i, c := range cs {
			if err := r.verify(c, ps[i]); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		return nil
	})
}

// TestCaptureReplay captures every case and replays it with new inputs,
// between eager calls of the same communicator.
func TestCaptureReplay(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, dev := range []int{0, 1} {
			t.Run(fmt.Sprintf("n=%d/devices=%d", n, dev), func(t *testing.T) {
				cases := allCases(n, []uintptr{1, 600}, []bufMode{bufPlain, bufWindow, bufGroup})
				w := newWorld(t, n, worldOpts{chaos: 3, devices: dev})
				w.run(testCfg(), 90*time.Second, false, func(r *rankEnv) error {
					for _, c := range cases {
						p := r.prepare(c)
						g, err := r.captureGraph(&p.args)
						if err != nil {
							return fmt.Errorf("%v: %w", c, err)
						}
						for rep := range 2 {
							p.refill()
							r.w.bar.wait()
							if err := r.replay(g); err != nil {
								return err
							}
							if err := r.verify(c, p); err != nil {
								return fmt.Errorf("replay %d: %w", rep, err)
							}
							r.w.bar.wait()
							// An eager call of the same case between replays.
							p.refill()
							r.w.bar.wait()
							if err := r.e.Launch(&p.args); err != nil {
								return err
							}
							r.syncStream()
							if err := r.verify(c, p); err != nil {
								return fmt.Errorf("eager after replay %d: %w", rep, err)
							}
							r.w.bar.wait()
						}
						if err := r.rt.GraphExecDestroy(g); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}

// TestHandler: every pair of an in-place AlltoAll is swapped by exactly
// one of its two ranks, except a pair at exactly half the ring, whose
// ranks swap half each; so every rank moves (n-1)/2 pairs' worth (half
// pairs counted as halves) and at most n/2 pairs use its scratch.
func TestHandler(t *testing.T) {
	for n := 2; n <= 17; n++ {
		halves := make([]int, n) // pairs' worth, in halves
		slots := make([]int, n)
		for a := range n {
			for b := range n {
				if a == b {
					continue
				}
				h := handler(a, b, n)
				require.Equal(t, h, handler(b, a, n), "n=%d pair %d,%d", n, a, b)
				require.True(t, h == a || h == b)
				switch {
				case 2*((b-a+n)%n) == n:
					halves[a]++
					slots[a]++
				case h == a:
					halves[a] += 2
					slots[a]++
				}
			}
		}
		for r := range n {
			require.Equal(t, n-1, halves[r], "n=%d rank %d: pairs' worth in halves", n, r)
			require.LessOrEqual(t, slots[r], n/2, "n=%d rank %d", n, r)
		}
	}
}

// TestSwapPlan: an in-place AlltoAll in many swap rounds syncs before its
// first round and after its last, not between rounds (only a pair's
// handler touches its blocks), and every rank copies as many bytes (the
// halfway pairs split: see handler); eager and captured, data checked
// (docs/performance.md, "In-place AlltoAll").
func TestSwapPlan(t *testing.T) {
	c := collCase{fn: FuncAlltoAll, count: 1 << 13, inPlace: true, mode: bufWindow}
	w := newWorld(t, 4, worldOpts{chaos: 3})
	w.run(testCfg(), 30*time.Second, false, func(r *rankEnv) error {
		for _, captured := range []bool{false, true} {
			p := r.prepare(c)
			var g hip.GraphExec
			var err error
			if captured {
				if g, err = r.captureGraph(&p.args); err == nil {
					err = r.replay(g)
				}
			} else {
				err = r.e.Launch(&p.args)
			}
			if err != nil {
				return err
			}
			plan, syncs, moved := r.e.cur.plan, 0, uintptr(0)
			for i := range plan.steps {
				if k, _ := r.e.fill(i); k != syncNone {
					syncs++
				}
				for _, op := range r.e.cp.ops {
					moved += op.n
				}
			}
			if plan.kind != kindSwap || plan.rounds < 4 || syncs != 2 {
				return fmt.Errorf("captured %v: plan %v in %d rounds with %d syncs, want swap in at least 4 with 2", captured, plan.kind, plan.rounds, syncs)
			}
			// Three copies for each of the (n-1)/2 pairs' worth it handles.
			if want := 3 * plan.chunk * uintptr(r.w.n-1) / 2; moved != want {
				return fmt.Errorf("captured %v: rank %d copies %d bytes, want %d", captured, r.rank, moved, want)
			}
			r.syncStream()
			if err := r.verify(c, p); err != nil {
				return err
			}
			if g != 0 {
				if err := r.rt.GraphExecDestroy(g); err != nil {
					return err
				}
			}
			r.w.bar.wait()
		}
		return nil
	})
}

// TestIntraBatchSync runs AllGather and AlltoAll with sub-batches (a low
// threshold), with ranks in place and out of place in one call (B9: the
// number of syncs must not depend on it), eager and captured.
func TestIntraBatchSync(t *testing.T) {
	cfg := testCfg()
	cfg.IntraBatchSyncFreq, cfg.IntraBatchSyncThreshold = 2, 64
	for _, n := range []int{3, 5, 6} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			runCases(t, n, worldOpts{chaos: 2}, cfg, allCases(n, []uintptr{16, 100}, []bufMode{bufPlain, bufWindow, bufGroup}))
		})
	}
}

// pageableRT is a runtime whose copies block on pageable host memory (as
// CUDA's do) and which calls one buffer pageable.
type pageableRT struct {
	hip.Runtime
	pageable hip.DevicePtr
}

func (r pageableRT) Caps() hip.Caps {
	c := r.Runtime.Caps()
	c.PageableBlocks = true
	return c
}

func (r pageableRT) PointerInfo(p hip.DevicePtr) (hip.PointerInfo, error) {
	if p == r.pageable {
		return hip.PointerInfo{Kind: hip.PtrHostPageable, Device: -1}, nil
	}
	return r.Runtime.PointerInfo(p)
}

// TestPointerKinds: where copies on pageable host memory block the host,
// such a buffer is refused at the call (ncclInvalidArgument), with nothing
// enqueued; device memory passes.
func TestPointerKinds(t *testing.T) {
	w := newWorld(t, 2, worldOpts{wrap: func(rank int, rt hip.Runtime) hip.Runtime {
		return &pageableRT{Runtime: rt}
	}})
	w.run(testCfg(), 30*time.Second, false, func(r *rankEnv) error {
		c := collCase{fn: FuncAllGather, count: 64, dtype: 0, mode: bufPlain}
		p := r.prepare(c)
		if err := r.e.Launch(&p.args); err != nil {
			return err
		}
		r.syncStream()
		if err := r.verify(c, p); err != nil {
			return err
		}
		r.w.bar.wait()
		if r.rank != 0 {
			return nil
		}
		// A buffer the pointer cache has not seen.
		bad := r.alloc(4096)
		r.rt.(*pageableRT).pageable = bad
		a := p.args
		a.Send = bad
		_, err := r.e.Prepare(&a)
		if err == nil || result.Of(err) != result.InvalidArgument {
			return fmt.Errorf("pageable sendbuff: got %v, want ncclInvalidArgument", err)
		}
		if !strings.Contains(err.Error(), "pageable host memory") {
			return fmt.Errorf("pageable sendbuff: %v", err)
		}
		return nil
	})
}

// A Broadcast among ranks on devices of their own runs as a chain: every
// rank forwards the pieces to the next, so the root's memory is read once
// (by its own copies to its successor), not once per receiver. Out of and
// in place, on the group and window paths, eagerly and captured, under
// chaos, every byte checked; the bytes that copies into other ranks'
// memory read from the root's allocation are counted over every rank.
func TestBroadcastChain(t *testing.T) {
	defer func(v uintptr) { chainMin = v }(chainMin)
	chainMin = 1
	for _, n := range []int{3, 4, 5} {
		for _, capture := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/capture=%v", n, capture), func(t *testing.T) {
				recs := make([]*recRT, n)
				w := newWorld(t, n, worldOpts{chaos: int64(70 + n), wrap: func(rank int, rt hip.Runtime) hip.Runtime {
					recs[rank] = &recRT{Runtime: rt}
					return recs[rank]
				}})
				var cs []collCase
				for _, m := range []bufMode{bufGroup, bufWindow} {
					for _, ip := range []bool{false, true} {
						for _, cnt := range []uintptr{1, 1000, 3 << 10} { // one piece; pieces of 256 B; of 1 KiB
							cs = append(cs, collCase{fn: FuncBroadcast, count: cnt, dtype: 7, root: (n - 1) * int(cnt%2), mode: m, inPlace: ip})
						}
					}
				}
				w.run(testCfg(), 90*time.Second, false, func(r *rankEnv) error {
					for _, c := range cs {
						p := r.prepare(c)
						chunk := c.count * eltSizes[c.dtype]
						bases := r.exchange(p.base)
						root := bases[c.root]
						inRoot := func(x hip.DevicePtr) bool { return x >= root && x < root+hip.DevicePtr(2*chunk+64) }
						r.w.bar.wait()
						from := len(recs[r.rank].copies)
						if capture {
							g, err := r.captureGraph(&p.args)
							if err != nil {
								return fmt.Errorf("%v: %w", c, err)
							}
							if err := r.replay(g); err != nil {
								return fmt.Errorf("%v: %w", c, err)
							}
						} else {
							if err := r.launch(c, &p); err != nil {
								return fmt.Errorf("%v: %w", c, err)
							}
							r.syncStream()
						}
						if err := r.verify(c, p); err != nil {
							return err
						}
						var read uintptr
						for _, cp := range recs[r.rank].copies[from:] {
							if inRoot(cp.src) && !inRoot(cp.dst) {
								read += cp.n
							}
						}
						total := r.exchange(hip.DevicePtr(read))
						var sum uintptr
						for _, v := range total {
							sum += uintptr(v)
						}
						if sum != chunk {
							return fmt.Errorf("%v: copies into other ranks' memory read %d bytes of the root's, want %d (the message once)", c, sum, chunk)
						}
						r.w.bar.wait()
					}
					return nil
				})
			})
		}
	}
}
