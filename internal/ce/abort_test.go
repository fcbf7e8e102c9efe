package ce

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// gate blocks s on a word of fresh device memory until the returned
// function is called.
func (r *rankEnv) gate(s hip.Stream) func() {
	w := r.alloc(64)
	r.put(w, make([]byte, 64))
	if err := r.rt.StreamBatchMemOp(s, []hip.MemOp{hip.WaitValue32(w, 1, hip.WaitGEQ)}); err != nil {
		panic(err)
	}
	var once sync.Once
	return func() { once.Do(func() { r.put(w, []byte{1, 0, 0, 0}) }) }
}

// TestAbortReleasesWaits: rank 2 never calls; ranks 0 and 1 queue
// collectives (eager, staged in several rounds, and a captured graph's
// replays), abort, and their streams drain within a second. Calls are
// then refused, Abort is idempotent, and Close frees the state.
func TestAbortReleasesWaits(t *testing.T) {
	c := collCase{fn: FuncAllGather, count: 3000, dtype: 0, mode: bufPlain} // 3 staged rounds
	for _, tc := range []struct {
		sync    string
		devices int
		graph   bool
		absent  int // the rank that never joins
	}{
		{SyncAllPairs, 0, false, 2}, {SyncAllPairs, 0, true, 2},
		{SyncStar, 0, false, 2}, {SyncStar, 0, true, 2},
		{SyncStar, 1, false, 2}, {SyncStar, 1, true, 2},
		// Rank 0 releases the others through its pairs (one device,
		// captured): their aborts must release their waits there.
		{SyncStar, 1, true, 0},
	} {
		t.Run(fmt.Sprintf("%s/devices=%d/graph=%v/absent=%d", tc.sync, tc.devices, tc.graph, tc.absent), func(t *testing.T) {
			w := newWorld(t, 3, worldOpts{devices: tc.devices})
			cfg := testCfg()
			cfg.Sync = tc.sync
			w.run(cfg, 20*time.Second, false, func(r *rankEnv) error {
				if r.rank == tc.absent {
					r.w.bar.wait() // never joins the collective
					r.w.bar.wait()
					return nil
				}
				p := r.prepare(c)
				if tc.graph {
					x, err := r.captureGraph(&p.args)
					if err != nil {
						return err
					}
					for range 3 {
						if err := r.rt.GraphLaunch(x, r.s); err != nil {
							return err
						}
					}
				} else {
					for range 3 {
						if err := r.e.Launch(&p.args); err != nil {
							return err
						}
					}
				}
				require.Error(t, r.rt.StreamQuery(r.s), "the collective must be blocked on its absent peer")
				// Checked on both before either aborts: once released, an
				// aborted rank's stream runs to its end, its signals
				// included, which releases its peers too (internal/comm
				// tells them that the communicator failed).
				r.w.bar.wait()
				r.e.Abort()
				r.e.Abort()
				if err := streamDoneWithin(r.rt, r.s, time.Second); err != nil {
					return err
				}
				err := r.e.Launch(&p.args)
				require.Error(t, err)
				require.Equal(t, result.InvalidUsage, result.Of(err))
				require.Contains(t, err.Error(), "communicator aborted")
				require.Equal(t, result.InvalidUsage, result.Of(r.e.OrderBefore(r.s)))
				// A released stream goes on pushing into its peers'
				// staging windows: nobody frees one before every stream
				// drained (the harness's SharedMem holds them).
				r.w.bar.wait()
				start := time.Now()
				<-r.e.Close()
				require.Less(t, time.Since(start), time.Second)
				require.True(t, r.e.Drained(), "state not freed")
				require.Nil(t, r.e.sig.relStop, "release loop still running")
				<-r.e.Close()
				r.e.Abort() // a no-op after Close
				return nil
			})
		})
	}
}

// TestAbortWhileQueueFull: a rank whose peer never calls keeps issuing
// until its stream's queue is full and Launch waits for room, holding the
// engine's lock. Abort, which takes no lock, still gets through: the
// waits are released, the blocked Launch returns, and Close frees the
// state.
func TestAbortWhileQueueFull(t *testing.T) {
	c := collCase{fn: FuncAllGather, count: 64, dtype: 0, mode: bufWindow}
	w := newWorld(t, 2, worldOpts{})
	w.run(testCfg(), 90*time.Second, false, func(r *rankEnv) error {
		p := r.prepare(c)
		if r.rank == 1 {
			r.w.bar.wait()
			return nil
		}
		var calls atomic.Int64
		done := make(chan error, 1)
		go func() {
			for {
				calls.Add(1)
				if err := r.e.Launch(&p.args); err != nil {
					done <- err
					return
				}
			}
		}()
		// Stuck: no new call for 300 ms.
		for last, since := int64(-1), time.Now(); ; time.Sleep(10 * time.Millisecond) {
			select {
			case err := <-done:
				return fmt.Errorf("launch failed before the queue filled: %w", err)
			default:
			}
			if cur := calls.Load(); cur != last {
				last, since = cur, time.Now()
			} else if time.Since(since) > 300*time.Millisecond {
				break
			}
			if time.Since(since) > 30*time.Second {
				return fmt.Errorf("the queue never filled")
			}
		}
		r.e.Abort()
		select {
		case err := <-done:
			require.Equal(t, result.InvalidUsage, result.Of(err))
		case <-time.After(10 * time.Second):
			return fmt.Errorf("launch still blocked after Abort")
		}
		if err := streamDoneWithin(r.rt, r.s, 5*time.Second); err != nil {
			return err
		}
		r.w.bar.wait()
		<-r.e.Close()
		require.True(t, r.e.Drained())
		return nil
	})
}

// TestCloseNeverWaits: Close returns at once while a collective is
// queued; the collective completes when its gate opens (its peer is
// there), and only then is the state freed. With nothing to release the
// queue (CECOLL_TIMEOUT passes), the state is leaked, not freed under the
// stream.
func TestCloseNeverWaits(t *testing.T) {
	c := collCase{fn: FuncAllGather, count: 64, dtype: 0, mode: bufPlain}
	t.Run("completes", func(t *testing.T) {
		w := newWorld(t, 2, worldOpts{})
		w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
			p := r.prepare(c)
			release := r.gate(r.s)
			if err := r.e.Launch(&p.args); err != nil {
				return err
			}
			start := time.Now()
			done := r.e.Close()
			require.Less(t, time.Since(start), 100*time.Millisecond, "Close waited")
			select {
			case <-done:
				return fmt.Errorf("state freed while the collective was queued")
			case <-time.After(100 * time.Millisecond):
			}
			release()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("state not freed after the collective ended")
			}
			require.True(t, r.e.Drained())
			if err := streamDoneWithin(r.rt, r.s, time.Second); err != nil {
				return err
			}
			return r.verify(c, p)
		})
	})
	t.Run("timeout leaks", func(t *testing.T) {
		w := newWorld(t, 2, worldOpts{})
		var mu sync.Mutex
		var release []func()
		w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
			r.e.drainLimit = 200 * time.Millisecond
			p := r.prepare(c)
			rel := r.gate(r.s)
			if err := r.e.Launch(&p.args); err != nil {
				return err
			}
			start := time.Now()
			<-r.e.Close()
			if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
				return fmt.Errorf("close gave up after %v, want about 0.2 s", d)
			}
			require.False(t, r.e.Drained(), "the state was freed under a queued collective")
			mu.Lock()
			release = append(release, rel)
			mu.Unlock()
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

// slowReleaseRT holds every batch of memory ops enqueued on a stream made
// after `after` is set (Abort's release stream) for 5 ms behind a gate
// word, and records a stream destroyed while its work is still queued.
type slowReleaseRT struct {
	hip.Runtime
	after     atomic.Bool
	gates     hip.DevicePtr
	next      atomic.Int32
	mu        sync.Mutex
	slow      map[hip.Stream]bool
	destroyed []string // slow streams destroyed with queued work
}

const slowGates = 4096

func (w *slowReleaseRT) StreamCreate() (hip.Stream, error) {
	s, err := w.Runtime.StreamCreate()
	if err == nil && w.after.Load() {
		w.mu.Lock()
		w.slow[s] = true
		w.mu.Unlock()
	}
	return s, err
}

func (w *slowReleaseRT) StreamBatchMemOp(s hip.Stream, ops []hip.MemOp) error {
	w.mu.Lock()
	slow := w.slow[s]
	w.mu.Unlock()
	i := w.next.Add(1) - 1
	if !slow || i >= slowGates {
		return w.Runtime.StreamBatchMemOp(s, ops)
	}
	gate := w.gates + hip.DevicePtr(4*i)
	if err := w.Runtime.StreamBatchMemOp(s, append([]hip.MemOp{hip.WaitValue32(gate, 1, hip.WaitGEQ)}, ops...)); err != nil {
		return err
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		_ = hip.CopyToDevice(w.Runtime, gate, []byte{1, 0, 0, 0})
	}()
	return nil
}

func (w *slowReleaseRT) StreamDestroy(s hip.Stream) error {
	w.mu.Lock()
	if w.slow[s] && errors.Is(w.Runtime.StreamQuery(s), hip.ErrNotReady) {
		w.destroyed = append(w.destroyed, fmt.Sprintf("stream %#x", s))
	}
	w.mu.Unlock()
	return w.Runtime.StreamDestroy(s)
}

// TestAbortReleaseLandsBeforeFree: Close frees the signal words only after
// the release loop's last writes landed. A write still queued then lands
// in freed memory, which a later communicator of the process may have
// been given (the matrix's batches, communicator after communicator in one
// process, got wrong data and hangs under CECOLL_HOST_CHAOS=3).
func TestAbortReleaseLandsBeforeFree(t *testing.T) {
	c := collCase{fn: FuncAllGather, count: 64, dtype: 0, mode: bufPlain}
	wraps := make([]*slowReleaseRT, 3)
	w := newWorld(t, 3, worldOpts{wrap: func(rank int, rt hip.Runtime) hip.Runtime {
		gates, err := rt.MemAlloc(4 * slowGates)
		require.NoError(t, err)
		require.NoError(t, hip.CopyToDevice(rt, gates, make([]byte, 4*slowGates)))
		wraps[rank] = &slowReleaseRT{Runtime: rt, gates: gates, slow: make(map[hip.Stream]bool)}
		return wraps[rank]
	}})
	w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
		if r.rank == 2 {
			r.w.bar.wait() // never joins the collective
			return nil
		}
		p := r.prepare(c)
		if err := r.e.Launch(&p.args); err != nil {
			return err
		}
		r.w.bar.wait()
		wraps[r.rank].after.Store(true)
		r.e.Abort()
		if err := streamDoneWithin(r.rt, r.s, time.Second); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond) // the loop keeps writing
		<-r.e.Close()
		require.True(t, r.e.Drained(), "state not freed")
		return nil
	})
	for rank, wr := range wraps[:2] {
		require.NotEmpty(t, wr.slow, "rank %d: no release stream seen", rank)
		require.Empty(t, wr.destroyed, "rank %d: the release stream was destroyed (its words freed) with writes queued", rank)
	}
}

// TestAbortAfterClose: an Abort that comes after Close (a peer-failure
// handler racing a destroy) starts no release loop: Close has freed, or
// is freeing, the words the loop would write.
func TestAbortAfterClose(t *testing.T) {
	w := newWorld(t, 2, worldOpts{})
	w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
		<-r.e.Close()
		r.e.Abort()
		r.e.sig.relMu.Lock()
		defer r.e.sig.relMu.Unlock()
		if r.e.sig.relStop != nil {
			return fmt.Errorf("rank %d: Abort after Close started the release loop", r.rank)
		}
		return nil
	})
}

// TestCloseWaitsForGraphLaunch: Close frees the engine's state only after
// the latest graph launch ordered with it (OrderAfter, as
// cecollGraphLaunch orders it) has ended, since the replay signals into
// the sync windows (on the H200 a replay that outlived its process's
// Close wrote through unmapped imports: error 719); also when the engine
// was aborted between the launch and its OrderAfter (a peer's failure
// landing meanwhile). Each rank's stream is held before its launch and
// opened 50 ms after Close was called.
func TestCloseWaitsForGraphLaunch(t *testing.T) {
	c := collCase{fn: FuncAllGather, count: 64, mode: bufWindow}
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprint("abort=", abort), func(t *testing.T) {
			w := newWorld(t, 2, worldOpts{})
			w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
				p := r.prepare(c)
				x, err := r.captureGraph(&p.args)
				if err != nil {
					return err
				}
				open := r.gate(r.s)
				if err := r.e.OrderBefore(r.s); err != nil {
					return err
				}
				if err := r.rt.GraphLaunch(x, r.s); err != nil {
					return err
				}
				if abort {
					r.e.Abort()
				}
				if err := r.e.OrderAfter(r.s); err != nil {
					return err
				}
				var opened atomic.Bool
				go func() {
					time.Sleep(50 * time.Millisecond)
					opened.Store(true)
					open()
				}()
				<-r.e.Close()
				if !opened.Load() {
					return fmt.Errorf("rank %d: Close freed the state before its graph launch ran", r.rank)
				}
				if err := r.rt.StreamQuery(r.s); err != nil {
					return fmt.Errorf("rank %d: Close freed the state before its graph launch ended: %v", r.rank, err)
				}
				require.True(t, r.e.Drained(), "state not freed")
				return nil
			})
		})
	}
}
