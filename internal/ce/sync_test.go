package ce

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// TestLanePattern: a star's arrival word holds exactly when all its lanes
// are in (under the cyclic GEQ wait), and Abort's releaseValue satisfies it.
func TestLanePattern(t *testing.T) {
	geq := func(cur, v uint32) bool { return int32(cur-v) >= 0 }
	for _, n := range []int{2, 4, 5, 6, 9, 87} {
		words := laneWords(n)
		require.Equal(t, (n+2)/4, words, "n=%d", n)
		lanes := 0
		for k := range words {
			v := lanePattern(n, k)
			k0 := min(4, n-1-4*k)
			lanes += k0
			require.True(t, geq(v, v))
			require.True(t, geq(releaseValue, v), "Abort must release lane word %d of n=%d", k, n)
			require.False(t, geq(0, v))
			for sub := 0; sub < 1<<k0-1; sub++ { // every proper subset of the lanes
				cur := uint32(0)
				for b := range k0 {
					if sub&(1<<b) != 0 {
						cur |= laneByte << (8 * b)
					}
				}
				require.False(t, geq(cur, v), "n=%d word %d: lanes %b of %b must not pass", n, k, sub, 1<<k0-1)
			}
		}
		require.Equal(t, n-1, lanes)
	}
}

// recRT records the sync ops a rank issues, by the owner and offset of
// the slot they touch.
type recRT struct {
	testRT
	mu  *sync.Mutex
	log *[]string
	at  func(p hip.DevicePtr) string
}

func (r recRT) StreamBatchMemOp(s hip.Stream, ops []hip.MemOp) error {
	r.mu.Lock()
	for _, o := range ops {
		kind := "wait"
		if o.Op == hip.MemOpWriteValue32 {
			kind = "write"
		}
		*r.log = append(*r.log, fmt.Sprintf("%s %s=%#x", kind, r.at(o.Addr), o.Value))
	}
	r.mu.Unlock()
	return r.testRT.StreamBatchMemOp(s, ops)
}

func (r recRT) MemcpyAsync(dst, src hip.DevicePtr, n uintptr, s hip.Stream) error {
	r.mu.Lock()
	*r.log = append(*r.log, fmt.Sprintf("copy%d %s", n, r.at(dst)))
	r.mu.Unlock()
	return r.testRT.MemcpyAsync(dst, src, n, s)
}

func (r recRT) MemcpyBatchAsync(dsts, srcs []hip.DevicePtr, sizes []uintptr, attrs []hip.CopyAttributes, attrIdxs []uintptr, s hip.Stream) error {
	r.mu.Lock()
	*r.log = append(*r.log, fmt.Sprintf("batch of %d", len(dsts)))
	r.mu.Unlock()
	return r.testRT.MemcpyBatchAsync(dsts, srcs, sizes, attrs, attrIdxs, s)
}

func (r recRT) Memcpy2DAsync(dst hip.DevicePtr, dpitch uintptr, src hip.DevicePtr, spitch, width, height uintptr, s hip.Stream) error {
	r.mu.Lock()
	*r.log = append(*r.log, fmt.Sprintf("copy2d %dx%d", width, height))
	r.mu.Unlock()
	return r.testRT.Memcpy2DAsync(dst, dpitch, src, spitch, width, height, s)
}

// opLogs runs setup (if any) and then, after a barrier, body on every rank
// of a world with the given options, and returns the ops each rank issued
// in body, by the owner and offset of the sync word they touch ("?" for
// other memory; a batch of copies by its length).
func opLogs(t *testing.T, n int, o worldOpts, cfg Config, setup, body func(r *rankEnv) error) [][]string {
	w := newWorld(t, n, o)
	logs := make([][]string, n)
	var mu sync.Mutex
	bases := make([]hip.DevicePtr, n)
	at := func(p hip.DevicePtr) string {
		for r, b := range bases {
			if b != 0 && p >= b && p < b+128 { // both arrays, up to 8 ranks
				return fmt.Sprintf("r%d+%d", r, p-b)
			}
		}
		return "?"
	}
	for i, c := range w.comms {
		c.rt = recRT{c.rt.(testRT), &mu, &logs[i], at}
	}
	w.run(cfg, 30*time.Second, false, func(r *rankEnv) error {
		if setup != nil {
			if err := setup(r); err != nil {
				return err
			}
			w.bar.wait()
		}
		mu.Lock()
		bases[r.rank] = r.e.syncBase
		logs[r.rank] = nil
		mu.Unlock()
		w.bar.wait()
		if err := body(r); err != nil {
			return err
		}
		r.syncStream()
		return nil
	})
	return logs
}

// TestStarOpOrder pins the star sync with copied flags, op by op, on one
// device (rootRel) and on two: a peer copies one byte into its lane of
// rank 0's array and waits for its release; rank 0 waits once per lane
// word, releases (one local copy of ones under rootRel, else a copy into
// each peer's slot 0), and resets only after the release, off the path its
// peers wait on.
func TestStarOpOrder(t *testing.T) {
	const n = 6
	for _, tc := range []struct {
		devices int
		root    []string
		peer    func(r int) string
	}{
		{1, []string{"wait r0+0=0x1010101", "wait r0+4=0x1", "copy20 r0+8", "write r0+0=0x0", "write r0+4=0x0"},
			func(r int) string {
				w := 8 + 4*(r-1)
				return fmt.Sprintf("copy1 r0+%d\nwait r0+%d=0x1\nwrite r0+%d=0x0", r-1, w, w)
			}},
		{2, []string{"wait r0+0=0x1010101", "wait r0+4=0x1", "copy4 r1+0", "copy4 r2+0", "copy4 r3+0", "copy4 r4+0", "copy4 r5+0", "write r0+0=0x0", "write r0+4=0x0"},
			func(r int) string { return fmt.Sprintf("copy1 r0+%d\nwait r%d+0=0x1\nwrite r%d+0=0x0", r-1, r, r) }},
	} {
		t.Run(fmt.Sprintf("devices=%d", tc.devices), func(t *testing.T) {
			cfg := testCfg()
			cfg.Sync, cfg.FlagWrite = SyncStar, FlagWriteCopy
			logs := opLogs(t, n, worldOpts{devices: tc.devices}, cfg, nil, func(r *rankEnv) error {
				if !r.e.star || r.e.rootRel != (tc.devices == 1) {
					return fmt.Errorf("star %v rootRel %v", r.e.star, r.e.rootRel)
				}
				return r.e.sync(r.s, false)
			})
			require.Equal(t, strings.Join(tc.root, "\n"), strings.Join(logs[0], "\n"), "rank 0")
			for r := 1; r < n; r++ {
				require.Equal(t, tc.peer(r), strings.Join(logs[r], "\n"), "rank %d", r)
			}
		})
	}
}

// TestRootedOpOrder pins the two half syncs of a rooted round at root 2,
// op by op, in each layout: a peer announces its arrival to the root only
// (star: its byte lane, at its distance after the root; all pairs: its
// slot) and then waits for the root's release alone; the root waits for
// the arrivals and resets them before it releases (TestBackToBack shows
// why the order matters).
func TestRootedOpOrder(t *testing.T) {
	const root = 2
	for _, tc := range []struct {
		name    string
		n       int
		devices int
		sync    string
		fw      string
		root    []string
		peer    func(p, rel int) string
	}{
		// rootRel: the release words follow the 2 lane words in the
		// root's complete array (at 32).
		{"star/onedevice", 6, 1, SyncStar, FlagWriteCopy,
			[]string{"wait r2+0=0x1010101", "wait r2+4=0x1", "write r2+0=0x0", "write r2+4=0x0", "copy20 r2+40"},
			func(p, rel int) string {
				w := 32 + 4*(2+rel-1)
				return fmt.Sprintf("copy1 r2+%d\nwait r2+%d=0x1\nwrite r2+%d=0x0", rel-1, w, w)
			}},
		{"star/devices=2", 6, 2, SyncStar, FlagWriteCopy,
			[]string{"wait r2+0=0x1010101", "wait r2+4=0x1", "write r2+0=0x0", "write r2+4=0x0",
				"copy4 r0+32", "copy4 r1+32", "copy4 r3+32", "copy4 r4+32", "copy4 r5+32"},
			func(p, rel int) string {
				return fmt.Sprintf("copy1 r2+%d\nwait r%d+32=0x1\nwrite r%d+32=0x0", rel-1, p, p)
			}},
		{"allpairs-layout", 3, 0, SyncAuto, FlagWriteValue,
			[]string{"wait r2+0=0x1", "wait r2+4=0x1", "write r2+0=0x0", "write r2+4=0x0", "write r0+24=0x1", "write r1+24=0x1"},
			func(p, rel int) string {
				return fmt.Sprintf("write r2+%d=0x1\nwait r%d+24=0x1\nwrite r%d+24=0x0", 4*p, p, p)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg()
			cfg.Sync, cfg.FlagWrite = tc.sync, tc.fw
			caps := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true} // no multicast
			logs := opLogs(t, tc.n, worldOpts{devices: tc.devices, caps: &caps}, cfg, nil, func(r *rankEnv) error {
				if !r.e.rooted || r.e.star != (tc.sync == SyncStar) {
					return fmt.Errorf("rooted %v star %v", r.e.rooted, r.e.star)
				}
				if err := r.e.arriveAt(r.s, false, root); err != nil {
					return err
				}
				return r.e.releaseFrom(r.s, false, root)
			})
			require.Equal(t, strings.Join(tc.root, "\n"), strings.Join(logs[root], "\n"), "root")
			for p := range tc.n {
				if p != root {
					require.Equal(t, tc.peer(p, (p-root+tc.n)%tc.n), strings.Join(logs[p], "\n"), "rank %d", p)
				}
			}
		})
	}
}

// TestOwnBlockFirst: a rank copies its own (large) block where it would
// otherwise wait, inside the round's first sync (Engine.addOwn): the root of a
// rooted round before its wait for the arrivals, a star peer and an
// all-pairs rank after their own arrival; a small block stays in the
// batch. The peers' blocks go in batches, which are not logged.
func TestOwnBlockFirst(t *testing.T) {
	nomc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	for _, tc := range []struct {
		name    string
		fn      Func
		n, devs int
		sync    string
		fw      string
		who     int
		want    []string
	}{
		{"scatter/root", FuncScatter, 4, 1, SyncStar, FlagWriteCopy, 2,
			[]string{"copy5 ?", "wait r2+0=0x10101", "write r2+0=0x0", "batch of 3", "copy12 r2+20"}},
		{"gather/root", FuncGather, 4, 1, SyncStar, FlagWriteCopy, 2,
			[]string{"copy5 ?", "wait r2+0=0x10101", "write r2+0=0x0", "batch of 3", "copy12 r2+20"}},
		{"allgather/star/peer", FuncAllGather, 4, 1, SyncStar, FlagWriteCopy, 1,
			[]string{"copy1 r0+0", "copy5 ?", "wait r0+4=0x1", "write r0+4=0x0", "batch of 3", "copy1 r0+16", "wait r0+20=0x1", "write r0+20=0x0"}},
		{"allgather/star/rank0", FuncAllGather, 4, 1, SyncStar, FlagWriteCopy, 0,
			[]string{"copy5 ?", "wait r0+0=0x10101", "copy12 r0+4", "write r0+0=0x0", "batch of 3", "wait r0+16=0x10101", "copy12 r0+20", "write r0+16=0x0"}},
		{"allgather/allpairs", FuncAllGather, 2, 1, SyncAllPairs, FlagWriteValue, 1,
			[]string{"write r0+4=0x1", "copy5 ?", "wait r1+0=0x1", "write r1+0=0x0", "copy5 ?", "write r0+20=0x1", "wait r1+16=0x1", "write r1+16=0x0"}},
		{"small", FuncScatter, 4, 1, SyncStar, FlagWriteCopy, 2,
			[]string{"wait r2+0=0x10101", "write r2+0=0x0", "batch of 4", "copy12 r2+20"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := sideCopyMin
			if tc.name != "small" {
				sideCopyMin = 1 // every own block is large
			}
			t.Cleanup(func() { sideCopyMin = old })
			cfg := testCfg()
			cfg.Sync, cfg.FlagWrite = tc.sync, tc.fw
			caps := nomc
			ps := make([]prepared, tc.n)
			logs := opLogs(t, tc.n, worldOpts{devices: tc.devs, caps: &caps}, cfg, func(r *rankEnv) error {
				ps[r.rank] = r.prepare(collCase{fn: tc.fn, count: 5, dtype: 0, root: 2 % tc.n, mode: bufWindow})
				return nil
			}, func(r *rankEnv) error { return r.e.Launch(&ps[r.rank].args) })
			require.Equal(t, strings.Join(tc.want, "\n"), strings.Join(logs[tc.who], "\n"), "rank %d", tc.who)
		})
	}
}
