package ce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// pattern is the content block id of count bytes; distinct per id.
func pattern(id int, n uintptr) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(id*37 + i*7 + 1 + i>>8)
	}
	return b
}

// bufMode says where a test's buffers live.
type bufMode int

const (
	bufPlain  bufMode = iota // unregistered: the staged path
	bufWindow                // registered windows: zero-copy
	bufGroup                 // Args.PeerSend/PeerRecv: the group path
)

func (m bufMode) String() string { return [...]string{"plain", "window", "group"}[m] }

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
	args      Args
	check     hip.DevicePtr // where the result is read
	want      []byte
	refill    func() // rewrites the inputs (before a replay)
	sendBytes []byte
}

// prepare allocates and fills this rank's buffers for c (collective when
// mode is bufWindow or bufGroup: every rank must call it in step).
func (r *rankEnv) prepare(c collCase) prepared {
	n, me := r.w.n, r.rank
	chunk := c.count * eltSizes[c.dtype]
	a := Args{Func: c.fn, Root: c.root, Datatype: c.dtype, Count: c.count, EltSize: eltSizes[c.dtype], Stream: r.s}
	var sendLen, recvLen uintptr
	switch c.fn {
	case FuncAllGather:
		sendLen, recvLen = chunk, uintptr(n)*chunk
	case FuncAlltoAll:
		sendLen, recvLen = uintptr(n)*chunk, uintptr(n)*chunk
	case FuncScatter:
		sendLen, recvLen = uintptr(n)*chunk, chunk
	case FuncGather:
		sendLen, recvLen = chunk, uintptr(n)*chunk
	}
	isRoot := me == c.root
	// One allocation holds both buffers so that a window covers both.
	total := sendLen + recvLen
	base := r.alloc(total + 64)
	if c.mode == bufWindow {
		if _, err := r.RegisterWindow(base, total+64); err != nil {
			panic(err)
		}
	}
	send, recv := base, base+hip.DevicePtr(sendLen)
	var in []byte // initial image of base
	in = make([]byte, total)
	var want []byte
	check := recv
	switch c.fn {
	case FuncAllGather:
		copy(in, pattern(me, chunk))
		if c.inPlace {
			send = recv + hip.DevicePtr(uintptr(me)*chunk)
			copy(in[sendLen+uintptr(me)*chunk:], pattern(me, chunk))
		}
		for p := range n {
			want = append(want, pattern(p, chunk)...)
		}
	case FuncAlltoAll:
		for d := range n {
			copy(in[uintptr(d)*chunk:], pattern(me*n+d, chunk))
		}
		if c.inPlace {
			send = recv
			copy(in[sendLen:], in[:sendLen])
		}
		for p := range n {
			want = append(want, pattern(p*n+me, chunk)...)
		}
	case FuncScatter:
		if isRoot {
			for d := range n {
				copy(in[uintptr(d)*chunk:], pattern(d, chunk))
			}
		}
		if c.inPlace {
			// Every rank's recv at the root's offset: registration is
			// symmetric.
			recv = send + hip.DevicePtr(uintptr(c.root)*chunk)
			check = recv
		}
		want = pattern(me, chunk)
	case FuncGather:
		copy(in, pattern(me, chunk))
		if c.inPlace {
			// Every rank's send at the root's offset.
			send = recv + hip.DevicePtr(uintptr(c.root)*chunk)
			copy(in[sendLen+uintptr(c.root)*chunk:], pattern(me, chunk))
		}
		if isRoot {
			for p := range n {
				want = append(want, pattern(p, chunk)...)
			}
		}
	}
	if c.nullBuf {
		if c.fn == FuncScatter && !isRoot {
			send = 0
		}
		if c.fn == FuncGather && !isRoot {
			recv = 0
		}
	}
	if c.count == 0 {
		want = nil
	}
	a.Send, a.Recv = send, recv
	if c.mode == bufGroup {
		a.PeerSend = r.exchange(send)
		a.PeerRecv = r.exchange(recv)
	}
	refill := func() { r.put(base, in) }
	refill()
	return prepared{args: a, check: check, want: want, refill: refill}
}

// verify reads the result of p after the stream is synchronised.
func (r *rankEnv) verify(c collCase, p prepared) error {
	if len(p.want) == 0 {
		return nil
	}
	got := r.get(p.check, uintptr(len(p.want)))
	if !bytes.Equal(got, p.want) {
		for i := range got {
			if got[i] != p.want[i] {
				return fmt.Errorf("%v: wrong result at byte %d of %d: got %#x want %#x", c, i, len(got), got[i], p.want[i])
			}
		}
	}
	return nil
}

// runCases runs every case on every rank, in order, with one engine.
func runCases(t *testing.T, n int, o worldOpts, cfg Config, cases []collCase) {
	w := newWorld(t, n, o)
	w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
		for _, c := range cases {
			p := r.prepare(c)
			if err := r.e.Launch(&p.args); err != nil {
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

func allCases(n int, counts []uintptr, modes []bufMode) []collCase {
	var cs []collCase
	for _, m := range modes {
		for _, cnt := range counts {
			for _, f := range []Func{FuncAllGather, FuncAlltoAll} {
				for _, ip := range []bool{false, true} {
					cs = append(cs, collCase{fn: f, count: cnt, dtype: 7, inPlace: ip, mode: m})
				}
			}
			for root := range n {
				for _, f := range []Func{FuncScatter, FuncGather} {
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
	ns := []int{1, 2, 3, 4, 8, 9}
	counts := []uintptr{0, 1, 7, 1000}
	if testing.Short() {
		ns, counts = []int{1, 2, 3}, []uintptr{0, 1, 1000}
	}
	for _, n := range ns {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			runCases(t, n, worldOpts{}, testCfg(), allCases(n, counts, []bufMode{bufPlain, bufWindow, bufGroup}))
		})
	}
}

// TestLarger moves a few MiB through both the staged path (many rounds)
// and zero-copy, with chaos.
func TestLarger(t *testing.T) {
	cnt := uintptr(256 << 10) // 1 MiB of float32 per block
	if testing.Short() {
		cnt = 16 << 10
	}
	cfg := testCfg()
	cfg.StagingBytes = 1 << 20
	var cs []collCase
	for _, m := range []bufMode{bufPlain, bufWindow} {
		cs = append(cs,
			collCase{fn: FuncAllGather, count: cnt, dtype: 7, mode: m},
			collCase{fn: FuncAlltoAll, count: cnt, dtype: 7, mode: m, inPlace: true},
			collCase{fn: FuncScatter, count: cnt, dtype: 7, root: 1, mode: m},
			collCase{fn: FuncGather, count: cnt, dtype: 7, root: 2, mode: m, inPlace: true})
	}
	runCases(t, 4, worldOpts{chaos: 7}, cfg, cs)
}

// TestChaos runs the mixed cases under several scheduler seeds.
func TestChaos(t *testing.T) {
	seeds := []int64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, sd := range seeds {
		t.Run(fmt.Sprintf("seed=%d", sd), func(t *testing.T) {
			runCases(t, 3, worldOpts{chaos: sd}, testCfg(), allCases(3, []uintptr{1, 333, 1 << 15}, []bufMode{bufPlain, bufWindow, bufGroup}))
		})
	}
}

// TestFlagWriteAndSync covers every flag-write method with unicast and
// multicast syncs, and HIP's split batches.
func TestFlagWriteAndSync(t *testing.T) {
	nomc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	mc := nomc
	mc.Multicast = true
	nopw := mc
	nopw.PeerWriteValue = false
	hipc := mc
	hipc.SplitWaitReset = true
	hipc.CopyAttributes = false
	for _, tc := range []struct {
		name string
		caps hip.Caps
		fw   string
	}{
		{"uc-value", nomc, FlagWriteValue},
		{"uc-copy", nomc, FlagWriteCopy},
		{"mc-value", mc, FlagWriteValue},
		{"mc-copy", mc, FlagWriteCopy},
		{"mc-auto-nopeerwrite", nopw, FlagWriteAuto},
		{"hip", hipc, FlagWriteAuto},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg()
			cfg.FlagWrite = tc.fw
			caps := tc.caps
			runCases(t, 4, worldOpts{caps: &caps, chaos: 5}, cfg, allCases(4, []uintptr{5}, []bufMode{bufPlain, bufWindow}))
		})
	}
}

// TestSyncAlgorithms runs every collective under each sync algorithm and
// flag-write method, on adversarial streams (chaos reorders the copies of
// a batch and delays streams), with rank counts around the auto rule's
// threshold and, for the star's byte lanes, one and two lane words.
func TestSyncAlgorithms(t *testing.T) {
	nomc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	hipc := nomc
	hipc.SplitWaitReset = true
	for _, sy := range []string{SyncAllPairs, SyncStar} {
		for _, fw := range []string{FlagWriteValue, FlagWriteCopy} {
			for _, n := range []int{2, 3, 5, 6} {
				t.Run(fmt.Sprintf("%s/%s/n=%d", sy, fw, n), func(t *testing.T) {
					cfg := testCfg()
					cfg.Sync, cfg.FlagWrite = sy, fw
					caps := nomc
					runCases(t, n, worldOpts{caps: &caps, chaos: int64(n)}, cfg, allCases(n, []uintptr{7}, []bufMode{bufPlain, bufWindow}))
				})
			}
		}
	}
	for _, sy := range []string{SyncAllPairs, SyncStar} {
		// Ranks 0 and 2 share device 0 and copy their flags; rank 1 has
		// device 1 to itself and writes values: the methods must agree.
		t.Run(sy+"/mixed-flags", func(t *testing.T) {
			cfg := testCfg()
			cfg.Sync = sy
			caps := nomc
			runCases(t, 3, worldOpts{caps: &caps, chaos: 13, devices: 2}, cfg, allCases(3, []uintptr{7}, []bufMode{bufPlain, bufWindow}))
		})
	}
	for _, fw := range []string{FlagWriteValue, FlagWriteCopy} {
		for _, n := range []int{2, 5, 6} {
			// Every rank on one device: the star's releases in rank 0's array.
			t.Run(fmt.Sprintf("star/%s/onedevice/n=%d", fw, n), func(t *testing.T) {
				cfg := testCfg()
				cfg.Sync, cfg.FlagWrite = SyncStar, fw
				caps := nomc
				runCases(t, n, worldOpts{caps: &caps, chaos: int64(20 + n), devices: 1}, cfg, allCases(n, []uintptr{7}, []bufMode{bufPlain, bufWindow}))
			})
		}
	}
	t.Run("star/hip", func(t *testing.T) {
		cfg := testCfg()
		cfg.Sync = SyncStar
		caps := hipc
		runCases(t, 4, worldOpts{caps: &caps, chaos: 9}, cfg, allCases(4, []uintptr{7}, []bufMode{bufPlain, bufWindow}))
	})
}

// TestBackToBack runs random sequences of collectives with random roots
// back to back, with no host barrier between them, on adversarial streams,
// in every sync layout, with rooted rounds (Scatter, Gather) and full
// syncs mixed: a flag word written again before its waiter reset it
// shows as a hang or a wrong result.
func TestBackToBack(t *testing.T) {
	nomc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	hipc, mc := nomc, nomc
	hipc.SplitWaitReset = true
	mc.Multicast = true
	for i, tc := range []struct {
		name    string
		n       int
		devices int
		sync    string
		fw      string
		caps    hip.Caps
	}{
		{"allpairs", 3, 0, SyncAllPairs, FlagWriteValue, nomc},
		{"auto/value", 3, 0, SyncAuto, FlagWriteValue, nomc},
		{"auto/copy", 2, 0, SyncAuto, FlagWriteCopy, nomc},
		{"auto/multicast", 4, 0, SyncAuto, FlagWriteValue, mc},
		{"star/value", 5, 0, SyncStar, FlagWriteValue, nomc},
		{"star/copy/devices=2", 6, 2, SyncStar, FlagWriteAuto, nomc},
		{"star/copy/onedevice", 5, 1, SyncStar, FlagWriteCopy, nomc},
		{"star/value/onedevice", 6, 1, SyncStar, FlagWriteValue, nomc},
		{"star/hip", 4, 0, SyncStar, FlagWriteAuto, hipc},
		// Grouped calls as event rounds (event.go), between flag rounds.
		{"auto/copy/onedevice/events", 2, 1, SyncAuto, FlagWriteCopy, nomc},
		{"star/copy/onedevice/events", 5, 1, SyncStar, FlagWriteCopy, nomc},
		{"auto/value/onedevice/events", 4, 1, SyncAuto, FlagWriteValue, nomc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			fns := []Func{FuncAllGather, FuncAlltoAll, FuncScatter, FuncGather}
			var cases []collCase
			for range 40 {
				c := collCase{fn: fns[rng.IntN(4)], count: []uintptr{1, 7, 300, 1500}[rng.IntN(4)],
					dtype: 0, root: rng.IntN(tc.n), inPlace: rng.IntN(3) == 0, mode: bufMode(rng.IntN(3))}
				c.nullBuf = !c.inPlace && (c.fn == FuncScatter || c.fn == FuncGather)
				cases = append(cases, c)
			}
			cfg := testCfg()
			cfg.Sync, cfg.FlagWrite = tc.sync, tc.fw
			caps := tc.caps
			w := newWorld(t, tc.n, worldOpts{caps: &caps, chaos: int64(30 + i), devices: tc.devices})
			w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
				ps := make([]prepared, len(cases))
				for k, c := range cases {
					ps[k] = r.prepare(c)
				}
				events := strings.HasSuffix(tc.name, "/events")
				for k, c := range cases {
					if events && c.mode == bufGroup {
						r.eventArgs(&ps[k].args)
					}
				}
				r.w.bar.wait()
				evented := 0
				for k, c := range cases {
					var err error
					if events && c.mode == bufGroup {
						var ev bool
						ev, err = r.launchGroup(&ps[k].args)
						if ev {
							evented++
						}
					} else {
						err = r.e.Launch(&ps[k].args)
					}
					if err != nil {
						return fmt.Errorf("%v: %w", c, err)
					}
				}
				r.syncStream()
				for k, c := range cases {
					if err := r.verify(c, ps[k]); err != nil {
						return fmt.Errorf("call %d: %w", k, err)
					}
				}
				if events && evented == 0 {
					return fmt.Errorf("no call ran as an event round")
				}
				return nil
			})
		})
	}
}

// TestSyncAuto pins the auto rule: star from 4 ranks up without multicast,
// all pairs otherwise.
func TestSyncAuto(t *testing.T) {
	nomc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	mc := nomc
	mc.Multicast = true
	for _, tc := range []struct {
		n    int
		caps hip.Caps
		star bool
	}{{2, nomc, false}, {3, nomc, false}, {4, nomc, true}, {8, nomc, true}, {5, mc, false}} {
		t.Run(fmt.Sprintf("n=%d/mc=%v", tc.n, tc.caps.Multicast), func(t *testing.T) {
			caps := tc.caps
			w := newWorld(t, tc.n, worldOpts{caps: &caps})
			w.run(testCfg(), 30*time.Second, false, func(r *rankEnv) error {
				if r.e.star != tc.star {
					return fmt.Errorf("star = %v, want %v", r.e.star, tc.star)
				}
				return nil
			})
		})
	}
}

// TestSideCopy sends every local copy to the side stream (ranks on their
// own devices) and runs the collectives eagerly under chaos and captured;
// ranks that share a device get no side stream.
func TestSideCopy(t *testing.T) {
	old := sideCopyMin
	sideCopyMin = 1
	t.Cleanup(func() { sideCopyMin = old })
	for _, sd := range []int64{0, 3, 4} {
		t.Run(fmt.Sprintf("chaos=%d", sd), func(t *testing.T) {
			runCases(t, 3, worldOpts{chaos: sd}, testCfg(), allCases(3, []uintptr{1, 333, 1 << 15}, []bufMode{bufPlain, bufWindow, bufGroup}))
		})
	}
	t.Run("shared-device", func(t *testing.T) {
		w := newWorld(t, 3, worldOpts{devices: 2})
		w.run(testCfg(), 30*time.Second, false, func(r *rankEnv) error {
			if shared := r.dev == 0; (r.e.side != 0) == shared {
				return fmt.Errorf("rank %d on device %d: side stream %v", r.rank, r.dev, r.e.side != 0)
			}
			return nil
		})
	})
}

// TestFlagWriteAuto pins the auto rule: write-value flags where the
// device takes them and no other rank of the process shares the device,
// copies otherwise.
func TestFlagWriteAuto(t *testing.T) {
	caps := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	w := newWorld(t, 3, worldOpts{caps: &caps, devices: 2}) // ranks 0 and 2 share device 0
	w.run(testCfg(), 30*time.Second, false, func(r *rankEnv) error {
		if want := r.dev == 0; r.e.flagCopy != want {
			return fmt.Errorf("rank %d on device %d: flagCopy %v, want %v", r.rank, r.dev, r.e.flagCopy, want)
		}
		return nil
	})
}

// TestCopyFallbacks covers the per-copy path (no batched copy) and the
// legacy NULL stream (B14 has its own test).
func TestCopyFallbacks(t *testing.T) {
	caps := hip.Caps{PeerWriteValue: true, Multicast: true}
	runCases(t, 3, worldOpts{caps: &caps}, testCfg(), allCases(3, []uintptr{9}, []bufMode{bufPlain, bufWindow}))
}

// TestIntraBatchSync makes the intra-batch sync kick in (frequency 2,
// threshold 1 byte) with in-place and out-of-place ranks mixed (B9 rule).
func TestIntraBatchSync(t *testing.T) {
	cfg := testCfg()
	cfg.IntraBatchSyncFreq = 2
	cfg.IntraBatchSyncThreshold = 1
	for _, n := range []int{3, 4, 5} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			runCases(t, n, worldOpts{chaos: 11}, cfg, allCases(n, []uintptr{3, 100}, []bufMode{bufPlain, bufWindow}))
		})
	}
}

func TestSharedDevice(t *testing.T) {
	runCases(t, 4, worldOpts{devices: 1}, testCfg(), allCases(4, []uintptr{17}, []bufMode{bufPlain, bufWindow}))
}

// capture records cases into one graph per rank and replays it.
func TestCaptureReplay(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		caps *hip.Caps
	}{
		{"plain", func(*Config) {}, nil},
		{"intra", func(c *Config) { c.IntraBatchSyncFreq, c.IntraBatchSyncThreshold = 2, 1 }, nil},
		{"copyflags", func(c *Config) { c.FlagWrite = FlagWriteCopy }, nil},
		{"star", func(c *Config) { c.Sync = SyncStar }, nil},
		{"star-copyflags", func(c *Config) { c.Sync, c.FlagWrite = SyncStar, FlagWriteCopy }, nil},
		{"star-onedevice", func(c *Config) { c.Sync = SyncStar }, nil},
		{"sidecopy", func(*Config) { sideCopyMin = 1 }, nil},
		{"hip", func(*Config) {}, &hip.Caps{BatchCopy: true, PeerWriteValue: true, Multicast: true, SplitWaitReset: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg()
			old := sideCopyMin
			t.Cleanup(func() { sideCopyMin = old })
			tc.cfg(&cfg)
			n := 4
			cases := []collCase{
				{fn: FuncAllGather, count: 33, dtype: 7, mode: bufWindow},
				{fn: FuncAlltoAll, count: 100, dtype: 2, mode: bufPlain, inPlace: true},
				{fn: FuncScatter, count: 70, dtype: 0, root: 2, mode: bufWindow, inPlace: true},
				{fn: FuncGather, count: 600, dtype: 0, root: 3, mode: bufPlain, nullBuf: true},
				{fn: FuncAllGather, count: 10, dtype: 7, mode: bufGroup, inPlace: true},
				{fn: FuncAlltoAll, count: 5, dtype: 2, mode: bufGroup}, // a hub round on one device
			}
			o := worldOpts{chaos: 3, caps: tc.caps}
			if strings.HasSuffix(tc.name, "onedevice") {
				o.devices = 1 // the star's releases in rank 0's array
			}
			w := newWorld(t, n, o)
			w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
				ps := make([]prepared, len(cases))
				for i, c := range cases {
					ps[i] = r.prepare(c)
				}
				// One eager round first: graphs and eager calls share the
				// sync window.
				for i := range cases {
					if err := r.e.Launch(&ps[i].args); err != nil {
						return err
					}
				}
				r.syncStream()
				r.w.bar.wait()
				if err := r.rt.StreamBeginCapture(r.s, hip.CaptureModeThreadLocal); err != nil {
					return err
				}
				for i := range cases {
					if err := r.e.Launch(&ps[i].args); err != nil {
						return fmt.Errorf("capture %v: %w", cases[i], err)
					}
				}
				g, err := r.rt.StreamEndCapture(r.s)
				if err != nil {
					return err
				}
				x, err := r.rt.GraphInstantiate(g)
				if err != nil {
					return err
				}
				for rep := range 4 {
					for i := range cases {
						ps[i].refill()
						if err := r.rt.Memset(ps[i].check, 0xEE, uintptr(len(ps[i].want))); err != nil && len(ps[i].want) > 0 {
							return err
						}
					}
					// Scatter in place and Gather in place read what the
					// memset clobbered on the root: refill again.
					for i := range cases {
						if cases[i].inPlace {
							ps[i].refill()
						}
					}
					r.w.bar.wait()
					if err := r.rt.GraphLaunch(x, r.s); err != nil {
						return err
					}
					if rep%2 == 1 {
						// An eager call between replays.
						if err := r.e.Launch(&ps[0].args); err != nil {
							return err
						}
					}
					r.syncStream()
					for i, c := range cases {
						if err := r.verify(c, ps[i]); err != nil {
							return fmt.Errorf("replay %d: %w", rep, err)
						}
					}
					r.w.bar.wait()
				}
				_ = r.rt.GraphExecDestroy(x)
				_ = r.rt.GraphDestroy(g)
				return nil
			})
		})
	}
}

// TestHubRound pins a hub round (Engine.hubRound): on one device a small
// grouped AllGather or AlltoAll is one rooted round at rank 0, which makes
// every copy (AllGather: a batch that gathers into its recv, less an
// in-place block of its own, then a batch that copies it to every peer;
// AlltoAll: a batch of every send buffer into its staging, then a 2D copy
// per rank) while a peer only arrives and waits for the release. It also
// pins when the engine does not take one: ranks on two devices, chunk*n
// above HubBytes or hub rounds off, an AlltoAll above hubAlltoAllBytes or
// whose n*n blocks do not fit in staging, a call outside a group. (With both
// AllGather stages in one batch, TestBackToBack failed under chaos.)
// The data of hub rounds under chaos, eager and replayed, is checked by
// TestBackToBack and TestCaptureReplay (their one-device cases).
func TestHubRound(t *testing.T) {
	nomc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	alltoall4 := append(append([]string{"wait r0+0=0x10101", "write r0+0=0x0", "batch of 4"},
		slices.Repeat([]string{"copy2d 5x4"}, 4)...), "copy12 r0+20")
	star4 := func(p int) string { // rank p of 4 under star, one device
		return fmt.Sprintf("copy1 r0+%d\nwait r0+%d=0x1\nwrite r0+%d=0x0", p-1, 16+4*p, 16+4*p)
	}
	for _, tc := range []struct {
		name    string
		c       collCase
		n, devs int
		sync    string
		fw      string
		hubMax  int64
		root    []string // rank 0's ops; nil: no hub round
		peer    func(p int) string
	}{
		{"allgather/star", collCase{fn: FuncAllGather, count: 5, mode: bufGroup}, 4, 1, SyncStar, FlagWriteCopy, 0,
			[]string{"wait r0+0=0x10101", "write r0+0=0x0", "batch of 4", "batch of 3", "copy12 r0+20"}, star4},
		{"allgather/inplace", collCase{fn: FuncAllGather, count: 5, mode: bufGroup, inPlace: true}, 4, 1, SyncStar, FlagWriteCopy, 0,
			[]string{"wait r0+0=0x10101", "write r0+0=0x0", "batch of 3", "batch of 3", "copy12 r0+20"}, star4},
		{"alltoall/allpairs-layout", collCase{fn: FuncAlltoAll, count: 5, mode: bufGroup}, 3, 1, SyncAuto, FlagWriteValue, 0,
			[]string{"wait r0+4=0x1", "wait r0+8=0x1", "write r0+4=0x0", "write r0+8=0x0", "batch of 3", "copy2d 5x3", "copy2d 5x3", "copy2d 5x3", "write r1+16=0x1", "write r2+16=0x1"},
			func(p int) string {
				return fmt.Sprintf("write r0+%d=0x1\nwait r%d+16=0x1\nwrite r%d+16=0x0", 4*p, p, p)
			}},
		{"alltoall/star", collCase{fn: FuncAlltoAll, count: 5, mode: bufGroup}, 4, 1, SyncStar, FlagWriteCopy, 0, alltoall4, star4},
		{"alltoall/inplace", collCase{fn: FuncAlltoAll, count: 5, mode: bufGroup, inPlace: true}, 4, 1, SyncStar, FlagWriteCopy, 0, alltoall4, star4},
		{"at-limit", collCase{fn: FuncAllGather, count: 16, mode: bufGroup}, 4, 1, SyncStar, FlagWriteCopy, 64,
			[]string{"wait r0+0=0x10101", "write r0+0=0x0", "batch of 4", "batch of 3", "copy12 r0+20"}, star4},
		{"allgather/8-ranks", collCase{fn: FuncAllGather, count: 5, mode: bufGroup}, 8, 1, SyncStar, FlagWriteCopy, 0,
			[]string{"wait r0+0=0x1010101", "wait r0+4=0x10101", "write r0+0=0x0", "write r0+4=0x0", "batch of 8", "batch of 7", "copy28 r0+56"},
			func(p int) string {
				return fmt.Sprintf("copy1 r0+%d\nwait r0+%d=0x1\nwrite r0+%d=0x0", p-1, 52+4*p, 52+4*p)
			}},
		{"alltoall/8-ranks", collCase{fn: FuncAlltoAll, count: 5, mode: bufGroup}, 8, 1, SyncStar, FlagWriteCopy, 0,
			append(append([]string{"wait r0+0=0x1010101", "wait r0+4=0x10101", "write r0+0=0x0", "write r0+4=0x0", "batch of 8"},
				slices.Repeat([]string{"copy2d 5x8"}, 8)...), "copy28 r0+56"),
			func(p int) string {
				return fmt.Sprintf("copy1 r0+%d\nwait r0+%d=0x1\nwrite r0+%d=0x0", p-1, 52+4*p, 52+4*p)
			}},
		{"alltoall/staging-too-small", collCase{fn: FuncAlltoAll, count: 300, mode: bufGroup}, 4, 1, SyncStar, FlagWriteCopy, 0, nil, nil},
		{"alltoall/at-its-limit", collCase{fn: FuncAlltoAll, count: hubAlltoAllBytes / 4, mode: bufGroup}, 4, 1, SyncStar, FlagWriteCopy, 0,
			append(append([]string{"wait r0+0=0x10101", "write r0+0=0x0", "batch of 4"},
				slices.Repeat([]string{fmt.Sprintf("copy2d %dx4", hubAlltoAllBytes/4)}, 4)...), "copy12 r0+20"), star4},
		{"alltoall/above-its-limit", collCase{fn: FuncAlltoAll, count: hubAlltoAllBytes/4 + 1, mode: bufGroup}, 4, 1, SyncStar, FlagWriteCopy, 0, nil, nil},
		{"allgather/default-limit", collCase{fn: FuncAllGather, count: DefaultHubBytes / 4, mode: bufGroup}, 4, 1, SyncStar, FlagWriteCopy, 0,
			[]string{"wait r0+0=0x10101", "write r0+0=0x0", "batch of 4", "batch of 3", "copy12 r0+20"}, star4},
		{"above-limit", collCase{fn: FuncAllGather, count: 17, mode: bufGroup}, 4, 1, SyncStar, FlagWriteCopy, 64, nil, nil},
		{"off", collCase{fn: FuncAllGather, count: 5, mode: bufGroup}, 4, 1, SyncStar, FlagWriteCopy, -1, nil, nil},
		{"two-devices", collCase{fn: FuncAllGather, count: 5, mode: bufGroup}, 4, 2, SyncStar, FlagWriteCopy, 0, nil, nil},
		{"allpairs", collCase{fn: FuncAllGather, count: 5, mode: bufGroup}, 4, 1, SyncAllPairs, FlagWriteCopy, 0, nil, nil},
		{"window", collCase{fn: FuncAlltoAll, count: 5, mode: bufWindow}, 4, 1, SyncStar, FlagWriteCopy, 0, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg()
			cfg.Sync, cfg.FlagWrite, cfg.HubBytes = tc.sync, tc.fw, tc.hubMax
			if strings.Contains(tc.name, "its-limit") {
				cfg.StagingBytes = 4 * hubAlltoAllBytes // the blocks fit: only the limit decides
			}
			caps := nomc
			ps := make([]prepared, tc.n)
			logs := opLogs(t, tc.n, worldOpts{devices: tc.devs, caps: &caps}, cfg, func(r *rankEnv) error {
				ps[r.rank] = r.prepare(tc.c)
				return nil
			}, func(r *rankEnv) error {
				if err := r.e.Launch(&ps[r.rank].args); err != nil {
					return err
				}
				r.syncStream()
				return r.verify(tc.c, ps[r.rank])
			})
			if tc.root == nil {
				for p := 1; p < tc.n; p++ {
					require.Contains(t, strings.Join(logs[p], "\n"), "batch of", "rank %d pushes its blocks itself", p)
				}
				return
			}
			require.Equal(t, strings.Join(tc.root, "\n"), strings.Join(logs[0], "\n"), "rank 0")
			for p := 1; p < tc.n; p++ {
				require.Equal(t, tc.peer(p), strings.Join(logs[p], "\n"), "rank %d", p)
			}
		})
	}
}

// TestStreamOrder checks that a grouped call on one device is ordered
// with each rank's own stream work, under chaos, for every round it may
// take (released, hub, push; by flags and as event rounds): every rank
// writes its send buffer and saves what its recv buffer held, on its
// stream right before the call, and copies out its recv buffer and
// overwrites its send buffer right after it. A copy made before the rank
// it reads from or writes to reached the call pulls stale data or
// clobbers the saved content; a call that ends on a rank's stream before
// the copies into that rank's recv, or out of its send, are done lets the
// copy-out miss a block or the overwrite reach a peer.
func TestStreamOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		sync   string
		fw     string
		hub    int64
		events bool
	}{
		{"flags/star/copy", 4, SyncStar, FlagWriteCopy, 0, false},
		{"flags/star/value", 5, SyncStar, FlagWriteValue, 0, false},
		{"flags/allpairs-layout/pushes", 3, SyncAuto, FlagWriteValue, -1, false},
		{"events/star/copy", 4, SyncStar, FlagWriteCopy, 0, true},
		{"events/allpairs-layout", 3, SyncAuto, FlagWriteValue, 0, true},
		{"events/pushes", 4, SyncStar, FlagWriteCopy, -1, true},
		{"events/n=2", 2, SyncAuto, FlagWriteCopy, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const chunk, rounds = 3000, 16
			n := tc.n
			cfg := testCfg()
			cfg.Sync, cfg.FlagWrite, cfg.HubBytes = tc.sync, tc.fw, tc.hub
			cfg.StagingBytes = 1 << 20 // room for a hub AlltoAll
			w := newWorld(t, n, worldOpts{chaos: 41, devices: 1})
			w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
				if !r.e.oneDev {
					return fmt.Errorf("not on one device")
				}
				row := uintptr(n) * chunk
				send, recv := r.alloc(row), r.alloc(row)
				fresh, junk, saved, out := r.alloc(row), r.alloc(row), r.alloc(row), r.alloc(row)
				peerSend, peerRecv := r.exchange(send), r.exchange(recv)
				var evArgs Args
				if tc.events {
					r.eventArgs(&evArgs)
				}
				evented := 0
				fns := []Func{FuncScatter, FuncGather, FuncAllGather, FuncAlltoAll}
				for k := range rounds {
					f, root := fns[k%4], (k/4)%n
					img := func(v int) []byte { return pattern(100*k+v, row) }
					r.put(send, img(r.rank))
					r.put(recv, img(50+r.rank))
					r.put(fresh, img(200+r.rank))
					r.put(junk, img(300))
					r.w.bar.wait()
					a := Args{Func: f, Root: root, Count: chunk, EltSize: 1, Send: send, Recv: recv,
						Stream: r.s, PeerSend: peerSend, PeerRecv: peerRecv, PeerReady: evArgs.PeerReady, PeerDone: evArgs.PeerDone}
					for _, c := range [][2]hip.DevicePtr{{send, fresh}, {saved, recv}} {
						if err := r.rt.MemcpyAsync(c[0], c[1], row, r.s); err != nil {
							return err
						}
					}
					ev, err := r.launchGroup(&a)
					if err != nil {
						return fmt.Errorf("round %d %v: %w", k, f, err)
					}
					if ev {
						evented++
					}
					for _, c := range [][2]hip.DevicePtr{{out, recv}, {send, junk}} {
						if err := r.rt.MemcpyAsync(c[0], c[1], row, r.s); err != nil {
							return err
						}
					}
					r.syncStream()
					if got := r.get(saved, row); !bytes.Equal(got, img(50+r.rank)) {
						return fmt.Errorf("round %d %v root %d: rank %d's recv was written before it reached the call", k, f, root, r.rank)
					}
					var want []byte
					me := uintptr(r.rank)
					switch {
					case f == FuncScatter:
						want = img(200 + root)[me*chunk : (me+1)*chunk]
					case f == FuncGather && r.rank != root:
					case f == FuncAlltoAll:
						for p := range n {
							want = append(want, img(200 + p)[me*chunk:(me+1)*chunk]...)
						}
					default: // AllGather, and Gather at the root
						for p := range n {
							want = append(want, img(200 + p)[:chunk]...)
						}
					}
					if got := r.get(out, uintptr(len(want))); !bytes.Equal(got, want) {
						return fmt.Errorf("round %d %v root %d: rank %d copied out stale, clobbered or missing blocks", k, f, root, r.rank)
					}
					r.w.bar.wait()
				}
				if tc.events != (evented == rounds) {
					return fmt.Errorf("%d of %d calls ran as event rounds", evented, rounds)
				}
				return nil
			})
		})
	}
}

// TestReleasedRoundOps pins a released round's ops (star, one device):
// the root releases everyone with one copy into the release words of its
// ready array and copies its own block; each peer waits for its word,
// resets it, copies its block and announces its arrival in a lane of the
// root's complete array, where the root waits and resets.
func TestReleasedRoundOps(t *testing.T) {
	for _, fn := range []Func{FuncScatter, FuncGather} {
		t.Run(fn.String(), func(t *testing.T) {
			cfg := testCfg()
			cfg.Sync, cfg.FlagWrite = SyncStar, FlagWriteCopy
			caps := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
			c := collCase{fn: fn, count: 5, mode: bufGroup}
			ps := make([]prepared, 4)
			logs := opLogs(t, 4, worldOpts{devices: 1, caps: &caps}, cfg, func(r *rankEnv) error {
				ps[r.rank] = r.prepare(c)
				return nil
			}, func(r *rankEnv) error {
				if err := r.e.Launch(&ps[r.rank].args); err != nil {
					return err
				}
				r.syncStream()
				return r.verify(c, ps[r.rank])
			})
			require.Equal(t, "copy12 r0+4\ncopy5 ?\nwait r0+16=0x10101\nwrite r0+16=0x0", strings.Join(logs[0], "\n"), "root")
			for p := 1; p < 4; p++ {
				want := fmt.Sprintf("wait r0+%d=0x1\nwrite r0+%d=0x0\ncopy5 ?\ncopy1 r0+%d", 4*p, 4*p, 16+p-1)
				require.Equal(t, want, strings.Join(logs[p], "\n"), "rank %d", p)
			}
		})
	}
}

// TestEventRoundChoice pins which grouped calls EventRound takes: every
// rank on one device, eager, one round on flags, event rounds on.
func TestEventRoundChoice(t *testing.T) {
	const chunk = 1000
	for _, tc := range []struct {
		name    string
		devices int
		cfg     func(*Config)
		fn      Func
		inPlace bool
		capture bool
		noEv    bool // no PeerReady/PeerDone
		want    evKind
	}{
		{name: "scatter", fn: FuncScatter, want: evReleased},
		{name: "gather", fn: FuncGather, want: evReleased},
		{name: "allgather hub", fn: FuncAllGather, want: evHub},
		{name: "alltoall hub in place", fn: FuncAlltoAll, inPlace: true, want: evHub},
		{name: "allgather push", fn: FuncAllGather, cfg: func(c *Config) { c.HubBytes = -1 }, want: evPush},
		{name: "alltoall push", fn: FuncAlltoAll, cfg: func(c *Config) { c.HubBytes = -1 }, want: evPush},
		{name: "alltoall in place, scratch rounds", fn: FuncAlltoAll, inPlace: true, cfg: func(c *Config) { c.HubBytes = -1 }},
		{name: "sub-batches", fn: FuncAllGather, cfg: func(c *Config) { c.HubBytes, c.IntraBatchSyncFreq, c.IntraBatchSyncThreshold = -1, 2, 1 }},
		{name: "captured", fn: FuncScatter, capture: true},
		{name: "no events given", fn: FuncScatter, noEv: true},
		{name: "event rounds off", fn: FuncScatter, cfg: func(c *Config) { c.NoEventRounds = true }},
		{name: "allpairs", fn: FuncScatter, cfg: func(c *Config) { c.Sync = SyncAllPairs }},
		{name: "two devices", fn: FuncScatter, devices: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4
			cfg := testCfg()
			cfg.StagingBytes = 1 << 20
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			devs := tc.devices
			if devs == 0 {
				devs = 1
			}
			w := newWorld(t, n, worldOpts{devices: devs})
			w.run(cfg, 30*time.Second, false, func(r *rankEnv) error {
				row := uintptr(n) * chunk
				send, recv := r.alloc(row), r.alloc(row)
				if tc.inPlace {
					send = recv
				}
				a := Args{Func: tc.fn, Count: chunk, EltSize: 1, Send: send, Recv: recv, Stream: r.s,
					PeerSend: r.exchange(send), PeerRecv: r.exchange(recv)}
				if !tc.noEv {
					r.eventArgs(&a)
				}
				if tc.capture {
					if err := r.rt.StreamBeginCapture(r.s, hip.CaptureModeThreadLocal); err != nil {
						return err
					}
				}
				ok := r.e.EventRound(&a)
				if tc.capture {
					if _, err := r.rt.StreamEndCapture(r.s); err != nil {
						return err
					}
				}
				if ok != (tc.want != evNone) || r.e.evr.kind != tc.want {
					return fmt.Errorf("EventRound = %v, kind %v; want kind %v", ok, r.e.evr.kind, tc.want)
				}
				r.e.evr = evRound{}
				return nil
			})
		})
	}
}
