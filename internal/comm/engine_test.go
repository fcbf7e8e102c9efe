package comm

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
)

// With the real engine: creation in a group, the four collectives grouped
// from one thread (every rank's buffers known) and eager from one thread
// per rank, on ranks sharing devices.
func TestEngineCollectives(t *testing.T) {
	watchdog(t, 60*time.Second)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := newRT(t, 2)
	const n = 3
	const count = 257 // int32 elements per block
	const blk = count * 4
	id, err := NewID()
	require.NoError(t, err)

	comms := make([]*Comm, n)
	streams := make([]hip.Stream, n)
	send := make([]hip.DevicePtr, n)
	recv := make([]hip.DevicePtr, n)
	require.NoError(t, GroupStart())
	for r := range n {
		require.NoError(t, rt.SetDevice(r%2))
		comms[r], err = InitRank(rt, id, n, r, DefaultConfig())
		require.NoError(t, err)
		streams[r], err = rt.StreamCreate()
		require.NoError(t, err)
		send[r], err = MemAlloc(rt, n*blk)
		require.NoError(t, err)
		recv[r], err = MemAlloc(rt, n*blk)
		require.NoError(t, err)
	}
	require.NoError(t, GroupEnd())

	fill := func() {
		for r := range n {
			b := make([]byte, n*blk)
			for i := range b {
				b[i] = byte(r*31 + i*7)
			}
			require.NoError(t, hip.CopyToDevice(rt, send[r], b))
			require.NoError(t, rt.Memset(recv[r], 0xee, n*blk))
		}
	}
	sendBlock := func(r, k int) []byte { // block k of rank r's send buffer
		b := make([]byte, blk)
		for i := range b {
			b[i] = byte(r*31 + (k*blk+i)*7)
		}
		return b
	}
	recvBlock := func(r, k int) []byte {
		b := make([]byte, blk)
		require.NoError(t, hip.CopyFromDevice(rt, b, recv[r]+hip.DevicePtr(k*blk)))
		return b
	}
	check := func(fn ce.Func, root int, how string) {
		for r := range n {
			require.NoError(t, rt.StreamSynchronize(streams[r]))
		}
		for r := range n {
			for k := range n {
				switch fn {
				case ce.FuncAllGather:
					require.Equal(t, sendBlock(k, 0), recvBlock(r, k), "%s AllGather rank %d block %d", how, r, k)
				case ce.FuncAlltoAll:
					require.Equal(t, sendBlock(k, r), recvBlock(r, k), "%s AlltoAll rank %d block %d", how, r, k)
				case ce.FuncGather:
					if r == root {
						require.Equal(t, sendBlock(k, 0), recvBlock(r, k), "%s Gather block %d", how, k)
					}
				}
			}
			if fn == ce.FuncScatter {
				require.Equal(t, sendBlock(root, r), recvBlock(r, 0), "%s Scatter rank %d", how, r)
			}
		}
	}
	funcs := []ce.Func{ce.FuncAllGather, ce.FuncAlltoAll, ce.FuncScatter, ce.FuncGather}

	for _, fn := range funcs {
		fill()
		require.NoError(t, GroupStart())
		for r := range n {
			require.NoError(t, comms[r].Collective(fn, send[r], recv[r], count, 2, 1, streams[r]))
		}
		require.NoError(t, GroupEnd())
		check(fn, 1, "grouped")
	}
	for _, fn := range funcs {
		fill()
		errs := onRanks(comms, func(c *Comm) error {
			if err := rt.SetDevice(c.Device()); err != nil {
				return err
			}
			return c.Collective(fn, send[c.Rank()], recv[c.Rank()], count, 2, 2, streams[c.Rank()])
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
		check(fn, 2, "eager")
	}

	for r := range n {
		require.NoError(t, comms[r].Destroy())
		require.NoError(t, rt.StreamDestroy(streams[r]))
		require.NoError(t, MemFree(rt, send[r]))
		require.NoError(t, MemFree(rt, recv[r]))
	}
}
