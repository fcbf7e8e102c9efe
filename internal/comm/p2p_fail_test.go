package comm

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/host"
	"cecoll/internal/result"
)

// watchIdle waits until no watchdog runs: one reads CECOLL_TIMEOUT when it
// starts (watchAdd), so a test that sets it starts from none and leaves
// none behind.
func watchIdle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		watched.Lock()
		running := watched.running
		watched.Unlock()
		if !running {
			return
		}
		require.True(t, time.Now().Before(deadline), "the watchdog of earlier communicators still runs")
		time.Sleep(5 * time.Millisecond)
	}
}

// silentPair makes a communicator of two ranks on devices 0 and 1 whose
// rank 1 will stay silent, and locks the test's thread to rank 0's device
// with a stream and a buffer of size bytes there.
func silentPair(t *testing.T, size uintptr) (*host.Runtime, []*Comm, hip.Stream, hip.DevicePtr) {
	t.Helper()
	rt := newRT(t, 2)
	comms, err := InitAll(rt, 2, []int{0, 1}, DefaultConfig())
	require.NoError(t, err)
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread) // cleanups run on the test's goroutine
	require.NoError(t, rt.SetDevice(comms[0].Device()))
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	buf, err := MemAlloc(rt, size)
	require.NoError(t, err)
	return rt, comms, s, buf
}

// A send whose receive is never posted, or a receive whose send is never
// posted (staged, several pieces), stays parked until CECOLL_TIMEOUT:
// then the communicator fails on both ranks with ncclRemoteError naming
// the timeout, the parked stream drains, the next call returns that
// error, and teardown (ncclCommAbort or ncclCommDestroy) is prompt.
func TestP2PTimeout(t *testing.T) {
	watchdog(t, 60*time.Second)
	smallStaging(t, 8<<10)
	t.Setenv("CECOLL_TIMEOUT", "0.3")
	t.Cleanup(func() { watchIdle(t) }) // later tests get a watchdog of their own timeout
	for _, fn := range []Func{FuncSend, FuncRecv} {
		for _, abort := range []bool{true, false} {
			name := fn.String() + "/destroy"
			if abort {
				name = fn.String() + "/abort"
			}
			t.Run(name, func(t *testing.T) {
				watchIdle(t)
				const bytes = 20000 // 5 pieces of 4 KiB
				rt, comms, s, buf := silentPair(t, bytes)
				c := comms[0]
				start := time.Now()
				require.NoError(t, c.P2P(fn, buf, bytes, 0, 1, s))
				require.Less(t, time.Since(start), 200*time.Millisecond, "the call waited for its peer")
				deadline := time.Now().Add(10 * time.Second)
				for c.AsyncError() == nil && time.Now().Before(deadline) {
					time.Sleep(2 * time.Millisecond)
				}
				waited := time.Since(start)
				err := c.AsyncError()
				requireCode(t, result.RemoteError, err)
				require.Contains(t, err.Error(), "CECOLL_TIMEOUT")
				require.GreaterOrEqual(t, waited, 300*time.Millisecond, "failed before the timeout")
				// Comm.fail sets this rank's error before it tells the peers.
				awaitAsyncErrors(comms[1:], 5*time.Second)
				requireCode(t, result.RemoteError, comms[1].AsyncError()) // the silent peer hears it
				require.NoError(t, rt.StreamSynchronize(s), "the failure released the parked stream")
				err = c.P2P(fn, buf, bytes, 0, 1, s)
				requireCode(t, result.RemoteError, err)
				require.Contains(t, err.Error(), "CECOLL_TIMEOUT")
				start = time.Now()
				for _, c := range comms {
					if abort {
						require.NoError(t, c.Abort())
					} else {
						require.NoError(t, c.Destroy())
					}
				}
				require.Less(t, time.Since(start), 3*time.Second, "teardown took too long")
				require.NoError(t, rt.StreamSynchronize(s))
				require.NoError(t, rt.StreamDestroy(s))
				require.NoError(t, MemFree(rt, buf))
			})
		}
	}
}

// A graph replay parked on a peer that never launches its own stays
// pending past CECOLL_TIMEOUT as an eager call does: the communicator
// fails on both ranks with ncclRemoteError naming the timeout, and the
// failure releases the replay.
func TestGraphTimeout(t *testing.T) {
	watchdog(t, 60*time.Second)
	t.Setenv("CECOLL_TIMEOUT", "0.3")
	t.Cleanup(func() { watchIdle(t) })
	watchIdle(t)
	rt, comms, s, buf := silentPair(t, 128)
	t.Cleanup(func() {
		if t.Failed() { // the replay may still be parked: release it
			for _, c := range comms {
				_ = c.Abort()
			}
		}
	})
	c := comms[0]
	require.NoError(t, rt.StreamBeginCapture(s, hip.CaptureModeRelaxed))
	require.NoError(t, c.Collective(FuncAllGather, buf, buf, 16, 7 /* float32 */, 0, s))
	g, err := rt.StreamEndCapture(s)
	require.NoError(t, err)
	x, err := rt.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, rt.GraphDestroy(g))
	require.NoError(t, c.OrderBefore(s))
	start := time.Now()
	require.NoError(t, rt.GraphLaunch(x, s)) // rank 1 never launches its replay
	require.NoError(t, c.OrderAfter(s))
	deadline := time.Now().Add(10 * time.Second)
	for c.AsyncError() == nil && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	err = c.AsyncError()
	requireCode(t, result.RemoteError, err)
	require.Contains(t, err.Error(), "CECOLL_TIMEOUT")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "failed before the timeout")
	// Comm.fail sets this rank's error before it tells the peers.
	awaitAsyncErrors(comms[1:], 5*time.Second)
	requireCode(t, result.RemoteError, comms[1].AsyncError()) // the silent peer hears it
	require.NoError(t, rt.StreamSynchronize(s), "the failure released the parked replay")
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
	require.NoError(t, rt.GraphExecDestroy(x))
	require.NoError(t, rt.StreamDestroy(s))
	require.NoError(t, MemFree(rt, buf))
}
