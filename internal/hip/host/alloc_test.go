package host

import (
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// The enqueue path allocates nothing once a stream's ring has grown (B16).
func TestEnqueueAllocatesNothing(t *testing.T) {
	rt := newRT(t, Config{Devices: 2, Caps: capsWith(func(c *hip.Caps) { c.PeerWriteValue = false })})
	s := newStream(t, rt)
	buf := alloc(t, rt, 1<<16)
	dsts := []hip.DevicePtr{buf, buf + 64, buf + 128, buf + 192}
	srcs := []hip.DevicePtr{buf + 1024, buf + 1088, buf + 1152, buf + 1216}
	sizes := []uintptr{64, 64, 64, 64}
	attrs := []hip.CopyAttributes{{SrcAccessOrder: hip.SrcAccessOrderStream, Flags: hip.CopyFlagPreferOverlapWithCompute}}
	idxs := []uintptr{0}
	ops := []hip.MemOp{write(buf+4096, 1), write(buf+4100, 1), wait(buf+4096, 1, hip.WaitEQ), wait(buf+4100, 1, hip.WaitGEQ)}

	tests := []struct {
		name string
		f    func() error
	}{
		{"MemcpyAsync", func() error { return rt.MemcpyAsync(buf+8192, buf+12288, 256, s) }},
		{"MemcpyBatchAsync", func() error { return rt.MemcpyBatchAsync(dsts, srcs, sizes, attrs, idxs, s) }},
		{"StreamBatchMemOp", func() error { return rt.StreamBatchMemOp(s, ops) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Warm up: grow the ring well past what the measured runs need.
			for i := 0; i < 2000; i++ {
				require.NoError(t, tc.f())
			}
			require.NoError(t, rt.StreamSynchronize(s))
			allocs := testing.AllocsPerRun(200, func() {
				if err := tc.f(); err != nil {
					panic(err)
				}
			})
			require.NoError(t, rt.StreamSynchronize(s))
			require.Zero(t, allocs)
		})
	}
}
