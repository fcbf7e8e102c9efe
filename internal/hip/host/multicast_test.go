package host

import (
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

func TestMulticastFanOut(t *testing.T) {
	rt := newRT(t, Config{Devices: 4})
	const members = 4
	var bufs []hip.DevicePtr
	for i := 0; i < members; i++ {
		bufs = append(bufs, alloc(t, rt, 4096))
	}
	mc, err := rt.MulticastCreate(bufs, 256)
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.MulticastDestroy(mc)) }()
	for _, b := range bufs {
		require.NotEqual(t, b, mc)
	}
	waiters := make([]hip.Stream, members)
	for i := range waiters {
		waiters[i] = newStream(t, rt)
		// Each member waits on its own slot 2, released through multicast.
		require.NoError(t, rt.StreamBatchMemOp(waiters[i], []hip.MemOp{wait(bufs[i]+8, 42, hip.WaitEQ), write(bufs[i]+64, 1)}))
	}
	s := newStream(t, rt)

	// By write-value.
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(mc+8, 42)}))
	for i, w := range waiters {
		require.NoError(t, rt.StreamSynchronize(w))
		require.Equal(t, uint32(42), load(bufs[i]+8))
		require.Equal(t, uint32(1), load(bufs[i]+64))
	}

	// By a 4-byte copy from a device-resident word (B4/B5 style).
	src := alloc(t, rt, 4096)
	store(src, 7)
	for i, w := range waiters {
		require.NoError(t, rt.StreamBatchMemOp(w, []hip.MemOp{wait(bufs[i]+12, 7, hip.WaitEQ), write(bufs[i]+68, 1)}))
	}
	require.NoError(t, rt.MemcpyAsync(mc+12, src, 4, s))
	for i, w := range waiters {
		require.NoError(t, rt.StreamSynchronize(w))
		require.Equal(t, uint32(7), load(bufs[i]+12))
		require.Equal(t, uint32(1), load(bufs[i]+68))
	}

	// Synchronous copies fan out too; reading from a multicast address or
	// waiting on one is refused.
	fill(mem(src, 64), 9)
	require.NoError(t, rt.Memcpy(uintptr(mc+128), uintptr(src), 64))
	for _, b := range bufs {
		require.Equal(t, mem(src, 64), mem(b+128, 64))
	}
	require.Equal(t, hip.ErrInvalidValue, rt.MemcpyAsync(src, mc, 4, s))
	require.Equal(t, hip.ErrInvalidValue, rt.StreamBatchMemOp(s, []hip.MemOp{wait(mc, 1, hip.WaitEQ)}))

	_, err = rt.MulticastCreate(nil, 64)
	require.Equal(t, hip.ErrInvalidValue, err)
	require.Equal(t, hip.ErrInvalidValue, rt.MulticastDestroy(mc+4))
}
