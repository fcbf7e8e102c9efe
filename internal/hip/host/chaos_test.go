package host

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

type pieceRec struct {
	s           hip.Stream
	dst, src, n uintptr
}

// chaosRun issues the same work on a fresh runtime with the given seed and
// returns the pieces in the order they executed, as offsets into its
// buffers so that runs compare.
func chaosRun(t *testing.T, seed int64) []pieceRec {
	rt := newRT(t, Config{Devices: 1, Chaos: seed})
	var mu sync.Mutex
	var got []pieceRec
	var base hip.DevicePtr
	rt.pieceHook = func(s hip.Stream, dst, src, n uintptr) {
		mu.Lock()
		got = append(got, pieceRec{s, dst - uintptr(base), src - uintptr(base), n})
		mu.Unlock()
	}
	s := newStream(t, rt)
	const size, n = 1024, 16
	base = alloc(t, rt, 4*n*size)
	src, dst := base, base+n*size
	fill(mem(src, n*size), 5)
	var ds, ss []hip.DevicePtr
	var sz []uintptr
	for i := hip.DevicePtr(0); i < n; i++ {
		ds = append(ds, dst+i*size)
		ss = append(ss, src+i*size)
		sz = append(sz, size)
	}
	for round := 0; round < 3; round++ {
		require.NoError(t, rt.MemcpyBatchAsync(ds, ss, sz, nil, nil, s))
		require.NoError(t, rt.MemcpyAsync(dst+2*n*size, src, 4*size, s))
	}
	require.NoError(t, rt.StreamSynchronize(s))
	require.Equal(t, mem(src, n*size), mem(dst, n*size), "chaos corrupted the data")
	require.Equal(t, mem(src, 4*size), mem(dst+2*n*size, 4*size))
	mu.Lock()
	defer mu.Unlock()
	return got
}

func TestChaosReproducible(t *testing.T) {
	a, b := chaosRun(t, 99), chaosRun(t, 99)
	require.Equal(t, a, b, "same seed, different schedule")
	require.Greater(t, len(a), 3*(16+1), "no copy was split")
	c := chaosRun(t, 100)
	require.NotEqual(t, a, c, "the seed changed nothing")
	inOrder := true
	for i := 1; i < 16; i++ {
		if a[i].dst < a[i-1].dst {
			inOrder = false
		}
	}
	require.False(t, inOrder, "the first batch ran in issue order")
}

// Under chaos the protocol still works when it is right: a ping-pong of
// flags and copies between two streams.
func TestChaosPingPong(t *testing.T) {
	rt := newRT(t, Config{Devices: 2, Chaos: 5})
	a, b := newStream(t, rt), newStream(t, rt)
	buf := alloc(t, rt, 1<<16)
	ping, pong, data := buf, buf+4, buf+4096
	const rounds = 32
	fill(mem(data, 1024), 1)
	for r := uint32(1); r <= rounds; r++ {
		off := hip.DevicePtr(r * 1024)
		// b answers: waits for ping r, copies the previous block on, pongs r.
		require.NoError(t, rt.StreamBatchMemOp(b, []hip.MemOp{wait(ping, r, hip.WaitGEQ)}))
		require.NoError(t, rt.MemcpyBatchAsync([]hip.DevicePtr{data + off}, []hip.DevicePtr{data + off - 1024}, []uintptr{1024}, nil, nil, b))
		require.NoError(t, rt.StreamBatchMemOp(b, []hip.MemOp{write(pong, r)}))
	}
	for r := uint32(1); r <= rounds; r++ {
		require.NoError(t, rt.StreamBatchMemOp(a, []hip.MemOp{write(ping, r), wait(pong, r, hip.WaitGEQ)}))
	}
	require.NoError(t, rt.StreamSynchronize(a))
	require.NoError(t, rt.StreamSynchronize(b))
	require.Equal(t, mem(data, 1024), mem(data+rounds*1024, 1024))
}
