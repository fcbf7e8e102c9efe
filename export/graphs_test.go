package main

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/host"
	"cecoll/internal/result"
)

// TestGraphRegistry: one thread captures two streams; the graph ended
// while the other capture is open is instantiated when that one ends, with
// it; bad keys are InvalidArgument.
func TestGraphRegistry(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := oneDevice(t)
	word, err := rt.MemAlloc(64)
	require.NoError(t, err)
	s := captureTwo(t, rt)
	for i := range s {
		require.NoError(t, rt.StreamBatchMemOp(s[i], []hip.MemOp{hip.WriteValue32(word+hip.DevicePtr(4*i), uint32(7+i))}))
	}
	k0, err := endCapture(rt, s[0])
	require.NoError(t, err)
	o0, err := graphOf("t", k0)
	require.NoError(t, err)
	require.Zero(t, o0.x, "ended while another capture was open: instantiation deferred")
	k1, err := endCapture(rt, s[1])
	require.NoError(t, err)
	require.NotEqual(t, k0, k1)
	o1, err := graphOf("t", k1)
	require.NoError(t, err)
	require.NotZero(t, o1.x, "ended as the thread's last capture: instantiated")
	require.NotZero(t, o0.x, "deferred graph instantiated with the thread's last capture")

	for i, k := range []uintptr{k0, k1} {
		require.NoError(t, launchGraph("t", rt, k, s[i]))
		require.NoError(t, rt.StreamSynchronize(s[i]))
	}
	require.NotZero(t, o0.x)
	got := make([]byte, 8)
	require.NoError(t, hip.CopyFromDevice(rt, got, word))
	require.Equal(t, []byte{7, 0, 0, 0, 8, 0, 0, 0}, got)

	require.NoError(t, destroyGraph("t", rt, k0))
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"destroyed launch", launchGraph("t", rt, k0, s[0])},
		{"destroyed destroy", destroyGraph("t", rt, k0)},
		{"garbage", launchGraph("t", rt, 0x5a5a5a5a5a5a, s[0])},
		{"NULL", destroyGraph("t", rt, 0)},
	} {
		require.Error(t, tc.err, tc.name)
		require.Equal(t, result.InvalidArgument, result.Of(tc.err), tc.name)
	}
	require.NoError(t, destroyGraph("t", rt, k1))
	for i := range s {
		require.NoError(t, rt.StreamDestroy(s[i]))
	}
	require.NoError(t, rt.MemFree(word))
}

// TestGraphFailedCapture: a capture that fails while the thread keeps
// another open returns its error, and the thread's last capture is still
// instantiated when it ends.
func TestGraphFailedCapture(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := oneDevice(t)
	s := captureTwo(t, rt)
	require.Error(t, rt.StreamSynchronize(s[0]), "a sync under capture invalidates it")
	_, err := endCapture(rt, s[0])
	require.Error(t, err, "the invalidated capture")
	k1, err := endCapture(rt, s[1])
	require.NoError(t, err)
	o1, err := graphOf("t", k1)
	require.NoError(t, err)
	require.NotZero(t, o1.x, "the thread's last capture: instantiated")
	require.NoError(t, launchGraph("t", rt, k1, s[1]))
	require.NoError(t, rt.StreamSynchronize(s[1]))
	require.NoError(t, destroyGraph("t", rt, k1))
	for i := range s {
		require.NoError(t, rt.StreamDestroy(s[i]))
	}
}

// oneDevice is a host device of one GPU, current on the calling thread.
func oneDevice(t *testing.T) *host.Runtime {
	rt, err := host.New(host.Config{Devices: 1})
	require.NoError(t, err)
	t.Cleanup(rt.Close)
	require.NoError(t, rt.SetDevice(0))
	return rt
}

// captureTwo makes two streams that the calling thread (locked by the
// caller) captures, as cecollStreamBeginCapture does.
func captureTwo(t *testing.T, rt *host.Runtime) [2]hip.Stream {
	var s [2]hip.Stream
	for i := range s {
		var err error
		s[i], err = rt.StreamCreate()
		require.NoError(t, err)
		require.NoError(t, rt.StreamBeginCapture(s[i], hip.CaptureModeThreadLocal))
		captures.begin(s[i])
	}
	return s
}
