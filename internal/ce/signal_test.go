package ce

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"cecoll/internal/hip"
)

// TestCapturedSyncShape pins the captured signals (docs/performance.md,
// "Flag operations in a graph" and "Pairs"): at 8 ranks on one device in
// star syncs, a graph holds no write-value; each peer signals with one
// 8-byte copy over its pair at rank 0 and waits there, and rank 0 releases
// them all with one copy over its pairs per release.
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
		waits, writes := 0, 0
		for _, b := range rec.batches {
			for _, op := range b {
				if op.Op == hip.MemOpWaitValue32 {
					waits++
				} else {
					writes++
				}
			}
		}
		flags := map[uintptr]int{}
		for _, sz := range rec.copySize {
			if sz == 8 || sz == 8*n {
				flags[sz]++
			}
		}
		rec.mu.Unlock()
		want := map[uintptr]int{8: 2} // a peer: its pair at rank 0, twice
		wantWaits := 2                // a peer: its release word there, twice
		if r.rank == 0 {
			want, wantWaits = map[uintptr]int{8 * n: 2}, 2*(n-1)
		}
		if waits != wantWaits || writes != 0 || fmt.Sprint(flags) != fmt.Sprint(want) {
			return fmt.Errorf("rank %d: %d waits, %d write-values, flag copies by size %v; want %d, 0, %v", r.rank, waits, writes, flags, wantWaits, want)
		}
		if err := r.replay(g); err != nil {
			return err
		}
		return r.verify(c, p)
	})
}

// TestPairSetsApart pins the two sets of pairs (signal.go): a round trip
// the root opens (a released Scatter: its release, then the peers'
// signals) must not share a pair with those the peers open (a hub
// AllGather: their signals, then the release), whose last write leaves the
// release word set. One graph a rank: a hub AllGather, then, at rank 0
// only, held back until the peers had time to run ahead, a copy of new
// data into its send buffer, then a released Scatter of it. Every peer
// must receive the new data.
func TestPairSetsApart(t *testing.T) {
	const n, chunk = 3, 256
	w := newWorld(t, n, worldOpts{devices: 1})
	w.run(testCfg(), 30*time.Second, false, func(r *rankEnv) error {
		me := r.rank
		agSend, agRecv := r.alloc(chunk), r.alloc(n*chunk)
		scSend, scRecv, fresh := r.alloc(n*chunk), r.alloc(chunk), r.alloc(n*chunk)
		r.put(agSend, pattern(me, chunk))
		r.put(scSend, pattern(10, n*chunk))
		r.put(fresh, pattern(20, n*chunk))
		ag := Args{Func: FuncAllGather, Count: chunk, EltSize: 1, Send: agSend, Recv: agRecv, Stream: r.s,
			PeerSend: r.exchange(agSend), PeerRecv: r.exchange(agRecv)}
		sc := Args{Func: FuncScatter, Count: chunk, EltSize: 1, Send: scSend, Recv: scRecv, Stream: r.s,
			PeerSend: r.exchange(scSend), PeerRecv: r.exchange(scRecv)}
		hold := r.alloc(64) // rank 0's stream waits on it before its new data
		r.put(hold, make([]byte, 64))
		if err := r.rt.StreamBeginCapture(r.s, hip.CaptureModeThreadLocal); err != nil {
			return err
		}
		err := r.e.Launch(&ag)
		if err == nil && r.e.cur.kind != kindHub {
			err = fmt.Errorf("the AllGather is a %s plan, not hub", r.e.cur.kind)
		}
		if err == nil && me == 0 {
			err = r.rt.StreamBatchMemOp(r.s, []hip.MemOp{hip.WaitValue32(hold, 1, hip.WaitGEQ)})
			if err == nil {
				err = r.rt.MemcpyAsync(scSend, fresh, n*chunk, r.s)
			}
		}
		if err == nil {
			err = r.e.Launch(&sc)
		}
		if err == nil && r.e.cur.kind != kindReleased {
			err = fmt.Errorf("the Scatter is a %s plan, not released", r.e.cur.kind)
		}
		g, cerr := r.rt.StreamEndCapture(r.s)
		if err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		x, err := r.rt.GraphInstantiate(g)
		if err != nil {
			return err
		}
		r.w.bar.wait()
		if err := r.rt.GraphLaunch(x, r.s); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond) // a peer that passed its wait early has copied by now
		r.put(hold, []byte{1, 0, 0, 0})
		r.syncStream()
		for q := range n {
			if got := r.get(agRecv+hip.DevicePtr(q*chunk), chunk); !bytes.Equal(got, pattern(q, chunk)) {
				return fmt.Errorf("AllGather: block %d wrong", q)
			}
		}
		if got := r.get(scRecv, chunk); !bytes.Equal(got, pattern(20, n*chunk)[me*chunk:(me+1)*chunk]) {
			return fmt.Errorf("Scatter: rank %d received the old data or none", me)
		}
		return nil
	})
}
