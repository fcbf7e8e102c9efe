package comm

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// On a device of 8 hardware queues (the host device stalls as a GPU does
// once every queue holds a parked stream), n ranks of one process run a
// ring on as many streams each as callStreams leaves them, many
// times, without a stall; one stream more on one rank is refused at
// ncclGroupEnd, naming the queues, and the communicator fails on every
// rank (its peers may have issued theirs).
func TestQueuesFit(t *testing.T) {
	watchdog(t, 90*time.Second)
	t.Setenv("CECOLL_HOST_QUEUES", "8")
	smallStaging(t, 8<<10)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint("n", n), func(t *testing.T) {
			rt := newRT(t, 1)
			comms, err := InitAll(rt, n, make([]int, n), DefaultConfig())
			require.NoError(t, err)
			fit := callStreams(8, n)
			require.GreaterOrEqual(t, fit, 1)
			require.LessOrEqual(t, fit+1, 4, "parts of a quarter")
			streams := make([][]hip.Stream, n)
			bufs := make([][2]hip.DevicePtr, n)
			const bytes = 4 * 6000 // parts of several pieces each
			for r := range n {
				for range fit + 1 {
					s, err := rt.StreamCreate()
					require.NoError(t, err)
					streams[r] = append(streams[r], s)
				}
				for i := range bufs[r] {
					bufs[r][i], err = MemAlloc(rt, bytes)
					require.NoError(t, err)
				}
			}
			// ring issues rank r's sends to r+1 and receives from r-1 in
			// one group: fit+1 parts each, part i on stream min(i, use-1)
			// of rank r's, so that it uses use streams.
			const part = bytes / 4
			ring := func(use func(r int) int) error {
				require.NoError(t, GroupStart())
				for r, c := range comms {
					for i := range fit + 1 {
						s, off := streams[r][min(i, use(r)-1)], hip.DevicePtr(i*part)
						if err := c.P2P(FuncSend, bufs[r][0]+off, part, 0, (r+1)%n, s); err != nil {
							return err
						}
						if err := c.P2P(FuncRecv, bufs[r][1]+off, part, 0, (r+n-1)%n, s); err != nil {
							return err
						}
					}
				}
				return GroupEnd()
			}
			for range 30 {
				require.NoError(t, ring(func(int) int { return fit }))
			}
			for r := range n {
				for _, s := range streams[r] {
					require.NoError(t, rt.StreamSynchronize(s))
				}
			}
			err = ring(func(r int) int {
				if r == 0 {
					return fit + 1
				}
				return fit
			})
			requireCode(t, result.InvalidUsage, err)
			require.ErrorContains(t, err, fmt.Sprintf("rank 0's sends and receives of this group are on %d streams", fit+1))
			require.ErrorContains(t, err, "CUDA_DEVICE_MAX_CONNECTIONS")
			for _, c := range comms {
				requireCode(t, result.RemoteError, c.AsyncError())
			}
			for r := range n {
				for _, s := range streams[r] {
					require.NoError(t, rt.StreamSynchronize(s))
				}
			}
			for _, c := range comms {
				require.NoError(t, c.Destroy())
			}
		})
	}
}
