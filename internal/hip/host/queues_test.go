package host

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// With Queues hardware queues, P streams parked on flag waits stall every
// other stream of the device from P = Queues, the releasing write
// included, and below it stall nothing (docs/performance.md, "Hardware
// queues", the GPU's figures); another device's streams run on. A host
// store releasing the waits ends the stall.
func TestQueuesStall(t *testing.T) {
	const queues = 4
	for parked := 1; parked <= queues+1; parked++ {
		t.Run(fmt.Sprint("parked", parked), func(t *testing.T) {
			rt := newRT(t, Config{Devices: 2, Queues: queues})
			flag := alloc(t, rt, 4096)
			out := flag + 64
			for range parked {
				s := newStream(t, rt)
				require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(flag, 1, hip.WaitGEQ)}))
			}
			time.Sleep(20 * time.Millisecond) // the parked streams' workers take their queues
			w := newStream(t, rt)
			require.NoError(t, rt.StreamBatchMemOp(w, []hip.MemOp{write(out, 7)}))
			require.NoError(t, rt.SetDevice(1))
			other := newStream(t, rt)
			require.NoError(t, rt.StreamBatchMemOp(other, []hip.MemOp{write(out+4, 9)}))
			require.NoError(t, rt.StreamSynchronize(other), "another device's queues are its own")
			require.NoError(t, rt.SetDevice(0))
			time.Sleep(100 * time.Millisecond)
			if parked < queues {
				require.Equal(t, uint32(7), load(out), "%d parked of %d queues stalled the write", parked, queues)
			} else {
				require.Zero(t, load(out), "%d parked streams of %d queues: the write ran", parked, queues)
			}
			store(flag, 1) // from the host: the parked streams complete and give their queues back
			require.NoError(t, rt.StreamSynchronize(w))
			require.Equal(t, uint32(7), load(out))
		})
	}
}
