package ce

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// streamDoneWithin reports whether everything queued on s completes within
// d (a blocked StreamSynchronize would hang the test, so it polls).
func streamDoneWithin(rt hip.Runtime, s hip.Stream, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := rt.StreamQuery(s)
		if err == nil {
			return nil
		}
		if !errors.Is(err, hip.ErrNotReady) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream still blocked after %v", d)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAbortReleasesWaits: rank 2 never calls; ranks 0 and 1 queue
// collectives (eager, staged in several rounds, and a captured graph's
// replays), abort, and their streams must drain within a second. Launch is
// then refused, Abort is idempotent, and Finalize stops the release loop
// and frees the state.
func TestAbortReleasesWaits(t *testing.T) {
	c := collCase{fn: FuncAllGather, count: 3000, dtype: 0, mode: bufPlain} // 3 ranks x 3000 B: 3 staged rounds
	for _, tc := range []struct {
		sync    string
		devices int
		graph   bool
	}{
		{SyncAllPairs, 0, false}, {SyncAllPairs, 0, true},
		{SyncStar, 0, false}, {SyncStar, 0, true},
		{SyncStar, 1, false}, {SyncStar, 1, true}, // releases in rank 0's array
	} {
		graph := tc.graph
		t.Run(fmt.Sprintf("%s/devices=%d/graph=%v", tc.sync, tc.devices, graph), func(t *testing.T) {
			w := newWorld(t, 3, worldOpts{devices: tc.devices})
			cfg := testCfg()
			cfg.Sync = tc.sync
			w.run(cfg, 20*time.Second, false, func(r *rankEnv) error {
				if r.rank == 2 {
					r.w.bar.wait() // never joins the collective
					return nil
				}
				p := r.prepare(c)
				if graph {
					x, err := r.captureGraph(&p.args)
					if err != nil {
						return err
					}
					for range 3 {
						if err := r.rt.GraphLaunch(x, r.s); err != nil {
							return err
						}
					}
					// Ordered after the replays, so Finalize waits for them.
					if err := r.e.OrderAfter(r.s); err != nil {
						return err
					}
				} else {
					for range 3 {
						if err := r.e.Launch(&p.args); err != nil {
							return err
						}
					}
				}
				require.Error(t, r.rt.StreamQuery(r.s), "the collective must be blocked on its absent peer")
				require.NoError(t, r.e.Abort())
				require.NoError(t, r.e.Abort())
				if err := streamDoneWithin(r.rt, r.s, time.Second); err != nil {
					return err
				}
				err := r.e.Launch(&p.args)
				require.Error(t, err)
				require.Equal(t, result.InvalidUsage, result.Of(err))
				require.Contains(t, err.Error(), "communicator aborted")
				require.Equal(t, result.InvalidUsage, result.Of(r.e.OrderBefore(r.s)))
				// A released stream goes on pushing into its peers' staging
				// windows: nobody frees one before every stream drained.
				r.w.bar.wait()
				start := time.Now()
				require.NoError(t, r.e.Finalize())
				require.Less(t, time.Since(start), time.Second)
				require.Nil(t, r.e.relStop, "release loop still running")
				require.Zero(t, r.e.syncBase, "state not freed")
				require.NoError(t, r.e.Finalize())
				require.NoError(t, r.e.Abort(), "abort after finalize is a no-op")
				return nil
			})
		})
	}
}

// TestAbortReleasesOnlyItself: rank 2 never calls, and only one of ranks 0
// and 1 aborts. The other stays blocked: an abort writes only the words its
// own waits watch, never one a peer waits on (rank 0's array holds the
// peers' release words when every rank is on one device), and the flags
// its released stream copies later carry 0 (a star's rank 0 would release
// everyone).
func TestAbortReleasesOnlyItself(t *testing.T) {
	c := collCase{fn: FuncAllGather, count: 8, dtype: 0, mode: bufPlain}
	for _, sy := range []string{SyncAllPairs, SyncStar} {
		for _, aborter := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/aborter=%d", sy, aborter), func(t *testing.T) {
				w := newWorld(t, 3, worldOpts{devices: 1})
				cfg := testCfg()
				cfg.Sync, cfg.FlagWrite = sy, FlagWriteCopy
				w.run(cfg, 20*time.Second, false, func(r *rankEnv) error {
					if r.rank == 2 {
						r.w.bar.wait()
						r.w.bar.wait()
						return nil
					}
					p := r.prepare(c)
					if err := r.e.Launch(&p.args); err != nil {
						return err
					}
					if r.rank == aborter {
						require.NoError(t, r.e.Abort())
						if err := streamDoneWithin(r.rt, r.s, time.Second); err != nil {
							return err
						}
					}
					r.w.bar.wait()
					if r.rank != aborter {
						time.Sleep(50 * time.Millisecond)
						require.ErrorIs(t, r.rt.StreamQuery(r.s), hip.ErrNotReady, "rank %d released by rank %d's abort", r.rank, aborter)
						require.NoError(t, r.e.Abort())
						if err := streamDoneWithin(r.rt, r.s, time.Second); err != nil {
							return err
						}
					}
					r.w.bar.wait()
					return r.e.Finalize()
				})
			})
		}
	}
}

// TestFinalizeWaitsForLastCollective: Finalize must not free the flags
// while the last collective is still queued (B19's event), and must give
// up, leaking, after CECOLL_TIMEOUT.
func TestFinalizeWaitsForLastCollective(t *testing.T) {
	c := collCase{fn: FuncAllGather, count: 64, dtype: 0, mode: bufPlain}
	t.Run("waits", func(t *testing.T) {
		w := newWorld(t, 2, worldOpts{})
		w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
			p := r.prepare(c)
			release := r.gate(r.s)
			if err := r.e.Launch(&p.args); err != nil {
				return err
			}
			done := make(chan error, 1)
			go func() { done <- r.e.Finalize() }()
			select {
			case err := <-done:
				return fmt.Errorf("finalize returned while the collective was queued: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			release()
			select {
			case err := <-done:
				if err != nil {
					return err
				}
			case <-time.After(10 * time.Second):
				return fmt.Errorf("finalize still waiting after the collective ended")
			}
			if r.e.syncBase != 0 {
				return fmt.Errorf("state not freed")
			}
			return streamDoneWithin(r.rt, r.s, time.Second)
		})
	})
	t.Run("timeout leaks", func(t *testing.T) {
		t.Setenv("CECOLL_TIMEOUT", "0.2")
		w := newWorld(t, 2, worldOpts{})
		var release []func()
		w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
			p := r.prepare(c)
			rel := r.gate(r.s)
			if err := r.e.Launch(&p.args); err != nil {
				return err
			}
			start := time.Now()
			if err := r.e.Finalize(); err != nil {
				return err
			}
			if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
				return fmt.Errorf("finalize gave up after %v, want about 0.2 s", d)
			}
			if r.e.syncBase == 0 {
				return fmt.Errorf("the flags were freed under a queued collective")
			}
			r.w.regMu.Lock()
			release = append(release, rel)
			r.w.regMu.Unlock()
			r.w.bar.wait()
			if r.rank == 0 {
				for _, f := range release {
					f()
				}
			}
			return streamDoneWithin(r.rt, r.s, 10*time.Second)
		})
	})
}

func TestSequenceStaysBelow2To31(t *testing.T) {
	for _, tc := range []struct{ from, want uint32 }{
		{1, 2},
		{seqLimit - 2, seqLimit - 1},
		{seqLimit - 1, 2},
		{^uint32(0), 2},
	} {
		e := &Engine{seq: tc.from}
		require.Equal(t, tc.want, e.nextSeq(), "after %d", tc.from)
	}
}
