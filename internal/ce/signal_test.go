package ce

import (
	"fmt"
	"testing"
	"time"

	"cecoll/internal/hip"
)

// TestCapturedSyncShape pins the captured signals (docs/measurements.md,
// "Flag operations in a graph"): at 8 ranks on one device in star syncs,
// signals are 4-byte copies, never write-values of 1; rank 0 releases the
// others with one copy into its outbox per release, where each peer waits.
func TestCapturedSyncShape(t *testing.T) {
	const n = 8
	nomc := hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true}
	cfg := testCfg()
	cfg.Sync = SyncStar
	recs := make([]*recRT, n)
	w := newWorld(t, n, worldOpts{devices: 1, caps: &nomc, chaos: 5, wrap: func(rank int, rt hip.Runtime) hip.Runtime {
		recs[rank] = &recRT{Runtime: rt}
		return recs[rank]
	}})
	w.run(cfg, 30*time.Second, false, func(r *rankEnv) error {
		c := collCase{fn: FuncAllGather, count: 3, mode: bufWindow, inPlace: true}
		p := r.prepare(c)
		rec := recs[r.rank]
		rec.mu.Lock()
		rec.batches, rec.copySize = nil, nil
		rec.mu.Unlock()
		g, err := r.captureGraph(&p.args) // two star syncs, no copy of its own
		if err != nil {
			return err
		}
		rec.mu.Lock()
		waits, ones := 0, 0
		for _, b := range rec.batches {
			for _, op := range b {
				switch {
				case op.Op == hip.MemOpWaitValue32:
					waits++
				case op.Value != 0:
					ones++
				}
			}
		}
		flags := map[uintptr]int{}
		for _, sz := range rec.copySize {
			if sz == 4 || sz == 4*n {
				flags[sz]++
			}
		}
		rec.mu.Unlock()
		want := map[uintptr]int{4: 2} // a peer: its word at rank 0, twice
		wantWaits := 2                // a peer: rank 0's outbox, twice
		if r.rank == 0 {
			want, wantWaits = map[uintptr]int{4 * n: 2}, 2*(n-1)
		}
		if waits != wantWaits || ones != 0 || fmt.Sprint(flags) != fmt.Sprint(want) {
			return fmt.Errorf("rank %d: %d waits, %d write-values of 1, flag copies by size %v; want %d, 0, %v", r.rank, waits, ones, flags, wantWaits, want)
		}
		if err := r.replay(g); err != nil {
			return err
		}
		return r.verify(c, p)
	})
}
