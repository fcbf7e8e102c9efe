package comm

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/hip/host"
)

// BenchmarkGroupAllGather4 is the communicator layer's host cost of one
// grouped AllGather of 4 ranks in one process (ncclGroupStart, four
// ncclAllGather, ncclGroupEnd, as cecoll-perf -g 4 and the host-cost
// probe issue them: docs/performance.md, "Host cost against the same
// driver calls from C"), with an engine that does
// nothing: the part of a collective's host cost on a GPU that is neither
// the engine nor the driver.
func BenchmarkGroupAllGather4(b *testing.B) {
	runtime.LockOSThread() // groups belong to the calling thread
	defer runtime.UnlockOSThread()
	old := newEngine
	newEngine = func(ce.Comm, ce.Config) (engine, error) { return nopEngine{}, nil }
	b.Cleanup(func() { newEngine = old })
	cfg, err := host.ConfigFromEnv()
	require.NoError(b, err)
	cfg.Devices = 1
	rt, err := host.New(cfg)
	require.NoError(b, err)
	b.Cleanup(func() { reclaiming.Wait(); rt.Close() })
	const n, chunk = 4, 64
	comms, err := InitAll(rt, n, []int{0, 0, 0, 0}, DefaultConfig())
	require.NoError(b, err)
	bufs := make([]hip.DevicePtr, n)
	for r, c := range comms {
		require.NoError(b, rt.SetDevice(c.Device()))
		bufs[r], err = MemAlloc(rt, 2*n*chunk)
		require.NoError(b, err)
	}
	require.NoError(b, GroupStart())
	for r, c := range comms {
		_, err := c.WindowRegister(bufs[r], 2*n*chunk, WinCollSymmetric)
		require.NoError(b, err)
	}
	require.NoError(b, GroupEnd())
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := GroupStart(); err != nil {
			b.Fatal(err)
		}
		for r, c := range comms {
			if err := c.Collective(ce.FuncAllGather, bufs[r], bufs[r]+n*chunk, chunk, 0, 0, hip.Stream(0)); err != nil {
				b.Fatal(err)
			}
		}
		if err := GroupEnd(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for _, c := range comms {
		require.NoError(b, c.Destroy())
	}
}
