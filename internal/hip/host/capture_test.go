package host

import (
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// issueSync issues a flag sync and a copy the way the engine does under
// capture: write my slot, wait for the peer's, copy, then reset.
func issueWork(t *testing.T, rt *Runtime, s hip.Stream, src, dst, flags hip.DevicePtr) {
	t.Helper()
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(flags, 1), wait(flags, 1, hip.WaitEQ)}))
	for i := hip.DevicePtr(0); i < 4; i++ {
		require.NoError(t, rt.MemcpyAsync(dst+i*256, src+(3-i)*256, 256, s))
	}
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(flags+4, 2), write(flags, 0)}))
}

func TestCaptureReplayMatchesEager(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	s := newStream(t, rt)
	src := alloc(t, rt, 4096)
	eager, replay, flags := alloc(t, rt, 4096), alloc(t, rt, 4096), alloc(t, rt, 4096)
	fill(mem(src, 1024), 11)

	issueWork(t, rt, s, src, eager, flags)
	require.NoError(t, rt.StreamSynchronize(s))

	store(flags+4, 0)
	require.NoError(t, rt.StreamBeginCapture(s, hip.CaptureModeGlobal))
	st, err := rt.StreamGetCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, hip.CaptureActive, st)
	issueWork(t, rt, s, src, replay, flags)
	g, err := rt.StreamEndCapture(s)
	require.NoError(t, err)
	st, err = rt.StreamGetCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, hip.CaptureNone, st)
	require.Zero(t, load(flags+4), "capture ran the ops")
	require.Zero(t, load(replay))

	x, err := rt.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, rt.GraphDestroy(g), "an exec outlives its graph")
	for i := 0; i < 3; i++ {
		require.NoError(t, rt.Memset(replay, 0, 1024))
		require.NoError(t, rt.GraphLaunch(x, s))
		require.NoError(t, rt.StreamSynchronize(s))
		require.Equal(t, mem(eager, 1024), mem(replay, 1024), "replay %d", i)
		require.Equal(t, uint32(2), load(flags+4))
		require.Zero(t, load(flags))
	}
	require.NoError(t, rt.GraphExecDestroy(x))
	require.Equal(t, hip.ErrInvalidHandle, rt.GraphLaunch(x, s))
	require.Equal(t, hip.ErrInvalidHandle, rt.GraphDestroy(g))
}

// A second stream joins the capture through an event and rejoins the
// origin the same way; the replay keeps the cross-branch order.
func TestCaptureJoinedStream(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	origin, side, launch := newStream(t, rt), newStream(t, rt), newStream(t, rt)
	fork, joinEv := newEvent(t, rt, hip.EventDisableTiming), newEvent(t, rt, hip.EventDisableTiming)
	buf := alloc(t, rt, 4096)
	a, b, c := buf, buf+4, buf+8

	lockThread()
	defer unlockThread()
	require.NoError(t, rt.StreamBeginCapture(origin, hip.CaptureModeThreadLocal))
	require.NoError(t, rt.StreamBatchMemOp(origin, []hip.MemOp{write(a, 1)}))
	require.NoError(t, rt.EventRecord(fork, origin))
	require.Equal(t, hip.ErrCapturedEvent, rt.EventQuery(fork))
	require.NoError(t, rt.StreamWaitEvent(side, fork))
	st, err := rt.StreamGetCaptureStatus(side)
	require.NoError(t, err)
	require.Equal(t, hip.CaptureActive, st, "the waiting stream joined")
	// side: b = a (copy), only after origin's write.
	require.NoError(t, rt.MemcpyAsync(b, a, 4, side))
	require.NoError(t, rt.EventRecord(joinEv, side))
	require.NoError(t, rt.StreamWaitEvent(origin, joinEv))
	// origin: c = b, only after side's copy.
	require.NoError(t, rt.MemcpyAsync(c, b, 4, origin))
	g, err := rt.StreamEndCapture(origin)
	require.NoError(t, err)
	st, err = rt.StreamGetCaptureStatus(side)
	require.NoError(t, err)
	require.Equal(t, hip.CaptureNone, st)

	x, err := rt.GraphInstantiate(g)
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		store(a, 0)
		store(b, 0)
		store(c, 0)
		require.NoError(t, rt.GraphLaunch(x, launch))
		require.NoError(t, rt.StreamSynchronize(launch))
		require.Equal(t, uint32(1), load(c), "replay %d lost the branch order", i)
	}
	require.NoError(t, rt.GraphExecDestroy(x))
	require.NoError(t, rt.GraphDestroy(g))
}

func TestCaptureErrors(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	lockThread()
	defer unlockThread()
	buf := alloc(t, rt, 4096)

	require.Equal(t, hip.ErrStreamCaptureUnsupported, rt.StreamBeginCapture(hip.StreamNull, hip.CaptureModeGlobal))
	require.Equal(t, hip.ErrStreamCaptureUnsupported, rt.StreamBeginCapture(hip.StreamLegacy, hip.CaptureModeGlobal))

	t.Run("unjoined", func(t *testing.T) {
		lockThread() // a non-relaxed capture ends on the thread that began it
		defer unlockThread()
		origin, side := newStream(t, rt), newStream(t, rt)
		ev := newEvent(t, rt, hip.EventDisableTiming)
		require.NoError(t, rt.StreamBeginCapture(origin, hip.CaptureModeGlobal))
		require.NoError(t, rt.EventRecord(ev, origin))
		require.NoError(t, rt.StreamWaitEvent(side, ev))
		require.NoError(t, rt.StreamBatchMemOp(side, []hip.MemOp{write(buf, 1)}))
		_, err := rt.StreamEndCapture(origin)
		require.Equal(t, hip.ErrStreamCaptureUnjoined, err)
		st, err := rt.StreamGetCaptureStatus(side)
		require.NoError(t, err)
		require.Equal(t, hip.CaptureNone, st)
		require.Zero(t, load(buf))
	})
	t.Run("synchronize invalidates", func(t *testing.T) {
		lockThread() // a non-relaxed capture ends on the thread that began it
		defer unlockThread()
		s := newStream(t, rt)
		require.NoError(t, rt.StreamBeginCapture(s, hip.CaptureModeGlobal))
		require.Equal(t, hip.ErrStreamCaptureUnsupported, rt.StreamSynchronize(s))
		st, err := rt.StreamGetCaptureStatus(s)
		require.NoError(t, err)
		require.Equal(t, hip.CaptureInvalidated, st)
		require.Equal(t, hip.ErrStreamCaptureInvalidated, rt.MemcpyAsync(buf, buf+4, 4, s))
		_, err = rt.StreamEndCapture(s)
		require.Equal(t, hip.ErrStreamCaptureInvalidated, err)
		require.NoError(t, rt.StreamSynchronize(s))
	})
	t.Run("allocation in global capture (B15)", func(t *testing.T) {
		lockThread() // a non-relaxed capture ends on the thread that began it
		defer unlockThread()
		s := newStream(t, rt)
		require.NoError(t, rt.StreamBeginCapture(s, hip.CaptureModeGlobal))
		_, err := rt.MemAlloc(64)
		require.Equal(t, hip.ErrStreamCaptureUnsupported, err)
		_, err = rt.StreamEndCapture(s)
		require.Equal(t, hip.ErrStreamCaptureInvalidated, err)
	})
	t.Run("allocation in relaxed capture", func(t *testing.T) {
		lockThread() // a non-relaxed capture ends on the thread that began it
		defer unlockThread()
		s := newStream(t, rt)
		require.NoError(t, rt.StreamBeginCapture(s, hip.CaptureModeRelaxed))
		p, err := rt.MemAlloc(64)
		require.NoError(t, err)
		require.NoError(t, rt.MemFree(p))
		g, err := rt.StreamEndCapture(s)
		require.NoError(t, err)
		require.NoError(t, rt.GraphDestroy(g))
	})
	t.Run("nested and unmatched", func(t *testing.T) {
		lockThread() // a non-relaxed capture ends on the thread that began it
		defer unlockThread()
		s := newStream(t, rt)
		require.Equal(t, errIllegalState, func() error { _, err := rt.StreamEndCapture(s); return err }())
		require.NoError(t, rt.StreamBeginCapture(s, hip.CaptureModeRelaxed))
		require.Equal(t, errIllegalState, rt.StreamBeginCapture(s, hip.CaptureModeRelaxed))
		g, err := rt.StreamEndCapture(s)
		require.NoError(t, err)
		x, err := rt.GraphInstantiate(g)
		require.NoError(t, err)
		require.NoError(t, rt.GraphLaunch(x, s), "an empty graph launches")
		require.NoError(t, rt.StreamSynchronize(s))
		require.NoError(t, rt.GraphExecDestroy(x))
		require.NoError(t, rt.GraphDestroy(g))
	})
}

// Launches of one exec are ordered even on different streams: the second
// replay's writes cannot overtake the first, which waits on a flag.
func TestGraphLaunchesOrdered(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	cs, l1, l2 := newStream(t, rt), newStream(t, rt), newStream(t, rt)
	buf := alloc(t, rt, 4096)
	gate, counter := buf, buf+4
	require.NoError(t, rt.StreamBeginCapture(cs, hip.CaptureModeRelaxed))
	require.NoError(t, rt.StreamBatchMemOp(cs, []hip.MemOp{wait(gate, 1, hip.WaitEQ), write(gate, 0)}))
	require.NoError(t, rt.MemcpyAsync(counter+4, counter, 4, cs))
	require.NoError(t, rt.StreamBatchMemOp(cs, []hip.MemOp{write(counter, 5)}))
	g, err := rt.StreamEndCapture(cs)
	require.NoError(t, err)
	x, err := rt.GraphInstantiate(g)
	require.NoError(t, err)
	store(counter, 3)
	require.NoError(t, rt.GraphLaunch(x, l1))
	require.NoError(t, rt.GraphLaunch(x, l2))
	require.Equal(t, hip.ErrNotReady, rt.StreamQuery(l2), "the second launch did not wait for the first")
	store(gate, 1)
	require.NoError(t, rt.StreamSynchronize(l1))
	require.Equal(t, uint32(3), load(counter+4))
	require.Equal(t, hip.ErrNotReady, rt.StreamQuery(l2))
	store(gate, 1)
	require.NoError(t, rt.StreamSynchronize(l2))
	require.Equal(t, uint32(5), load(counter+4))
}

// cuGraphInstantiate is refused like any unsafe call during capture: a
// Global capture forbids it on every thread, a ThreadLocal one on its own
// thread, a Relaxed one nowhere; a refusal invalidates the capture.
func TestGraphInstantiateUnderCapture(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	lockThread()
	defer unlockThread()
	// An empty graph to instantiate, captured before the case's capture.
	gs := newStream(t, rt)
	require.NoError(t, rt.StreamBeginCapture(gs, hip.CaptureModeRelaxed))
	g, err := rt.StreamEndCapture(gs)
	require.NoError(t, err)
	t.Cleanup(func() { rt.GraphDestroy(g) })

	tests := []struct {
		name        string
		mode        hip.CaptureMode
		otherThread bool
		refused     bool
	}{
		{"global, same thread", hip.CaptureModeGlobal, false, true},
		{"global, other thread", hip.CaptureModeGlobal, true, true},
		{"thread-local, same thread", hip.CaptureModeThreadLocal, false, true},
		{"thread-local, other thread", hip.CaptureModeThreadLocal, true, false},
		{"relaxed, same thread", hip.CaptureModeRelaxed, false, false},
		{"relaxed, other thread", hip.CaptureModeRelaxed, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lockThread() // a non-relaxed capture ends on the thread that began it
			defer unlockThread()
			s := newStream(t, rt)
			require.NoError(t, rt.StreamBeginCapture(s, tc.mode))
			instantiate := func() (hip.GraphExec, error) { return rt.GraphInstantiate(g) }
			var x hip.GraphExec
			if tc.otherThread {
				done := make(chan struct{})
				go func() {
					defer close(done)
					lockThread()
					defer unlockThread()
					x, err = instantiate()
				}()
				<-done
			} else {
				x, err = instantiate()
			}
			if tc.refused {
				require.Equal(t, hip.ErrStreamCaptureUnsupported, err)
				st, err := rt.StreamGetCaptureStatus(s)
				require.NoError(t, err)
				require.Equal(t, hip.CaptureInvalidated, st)
				_, err = rt.StreamEndCapture(s)
				require.Equal(t, hip.ErrStreamCaptureInvalidated, err)
			} else {
				require.NoError(t, err)
				require.NoError(t, rt.GraphExecDestroy(x))
				cg, err := rt.StreamEndCapture(s)
				require.NoError(t, err)
				require.NoError(t, rt.GraphDestroy(cg))
			}
			// Once the capture is over, instantiation works again.
			x, err = rt.GraphInstantiate(g)
			require.NoError(t, err)
			require.NoError(t, rt.GraphExecDestroy(x))
		})
	}
}
