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
				return fmt.Sprintf("copy1 r0+%d\nwait r0+%d=0x1\ncopy4 r0+%d", r-1, w, w)
			}},
		{2, []string{"wait r0+0=0x1010101", "wait r0+4=0x1", "copy4 r1+0", "copy4 r2+0", "copy4 r3+0", "copy4 r4+0", "copy4 r5+0", "write r0+0=0x0", "write r0+4=0x0"},
			func(r int) string { return fmt.Sprintf("copy1 r0+%d\nwait r%d+0=0x1\nwrite r%d+0=0x0", r-1, r, r) }},
	} {
		t.Run(fmt.Sprintf("devices=%d", tc.devices), func(t *testing.T) {
			w := newWorld(t, n, worldOpts{devices: tc.devices})
			logs := make([][]string, n)
			var mu sync.Mutex
			bases := make([]hip.DevicePtr, n)
			at := func(p hip.DevicePtr) string {
				for r, b := range bases {
					if b != 0 && p >= b && p < b+64 {
						return fmt.Sprintf("r%d+%d", r, p-b)
					}
				}
				return "?"
			}
			for i, c := range w.comms {
				c.rt = recRT{c.rt.(testRT), &mu, &logs[i], at}
			}
			cfg := testCfg()
			cfg.Sync, cfg.FlagWrite = SyncStar, FlagWriteCopy
			w.run(cfg, 30*time.Second, false, func(r *rankEnv) error {
				mu.Lock()
				bases[r.rank] = r.e.syncBase
				logs[r.rank] = nil
				mu.Unlock()
				w.bar.wait()
				if !r.e.star || r.e.rootRel != (tc.devices == 1) {
					return fmt.Errorf("star %v rootRel %v", r.e.star, r.e.rootRel)
				}
				if err := r.e.sync(r.s, false); err != nil {
					return err
				}
				r.syncStream()
				return nil
			})
			require.Equal(t, strings.Join(tc.root, "\n"), strings.Join(logs[0], "\n"), "rank 0")
			for r := 1; r < n; r++ {
				require.Equal(t, tc.peer(r), strings.Join(logs[r], "\n"), "rank %d", r)
			}
		})
	}
}
