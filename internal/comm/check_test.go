package comm

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// postSig writes a descriptor as checkPost does.
func postSig(b *checkBoard, rank int, seq uint64, fn int32) {
	b.at(rank, seq).post(seq, sig{fn: fn, dt: 7, count: 100, win: -1})
}

// TestCheckLostTrack: a rank more than the ring ahead of a watcher
// overwrites slots the watcher has not compared; the watcher counts them
// as lost (and warns) instead of comparing a torn or foreign slot, and
// still compares what remains, reporting a real mismatch.
func TestCheckLostTrack(t *testing.T) {
	b := &checkBoard{mem: make([]byte, 2*checkRing*slotBytes), n: 2}
	c := &Comm{rank: 0}
	const ahead = checkRing + 100
	for seq := uint64(1); seq <= ahead; seq++ {
		postSig(b, 1, seq, 2)
	}
	for seq := uint64(1); seq <= ahead; seq++ {
		postSig(b, 0, seq, 2)
	}
	next := uint64(1)
	require.NoError(t, c.checkScan(b, &next))
	require.Equal(t, uint64(ahead+1), next, "every sequence passed")
	require.Equal(t, uint64(100), b.lostN, "the overwritten ones counted as lost")

	postSig(b, 0, ahead+1, 2)
	postSig(b, 1, ahead+1, 8) // another collective
	err := c.checkScan(b, &next)
	require.Error(t, err)
	require.Contains(t, err.Error(), "differs between ranks")
}

// CECOLL_CHECK compares only what NCCL's contract makes every rank agree
// on: a non-root's Scatter sendbuff and Gather recvbuff are ignored (NULL,
// or any value), and in the in-place rooted layout (one buffer buf per
// rank at the same window offset; Scatter: recvbuff = buf + rank*count,
// Gather: sendbuff = buf + rank*count) the root's peers pass their blocks
// at rank-dependent offsets. A peer at another offset breaks the contract
// and is reported.
func TestCheckRootedInPlace(t *testing.T) {
	watchdog(t, 60*time.Second)
	t.Setenv("CECOLL_CHECK", "1")
	const count = 256 // bytes (ncclInt8)
	const root = 1
	for _, tc := range []struct {
		name     string
		fn       ce.Func
		ignored  hip.DevicePtr // what the non-root passes as the buffer it does not use
		peerOff  uintptr       // the non-root's block: its offset in the window
		mismatch bool
	}{
		{"gather, non-root recvbuff NULL", ce.FuncGather, 0, 0, false},
		{"gather, non-root recvbuff anything", ce.FuncGather, 0xdead000, 0, false},
		{"scatter, non-root sendbuff NULL", ce.FuncScatter, 0, 0, false},
		{"scatter, non-root sendbuff anything", ce.FuncScatter, 0xdead000, 0, false},
		{"scatter, non-root block at the root's offset", ce.FuncScatter, 0, count, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRT(t, 2)
			comms, errs := initThreads(t, rt, []int{0, 1})
			require.NoError(t, firstError(errs))
			defer destroyAll(t, comms)
			bufs := make([]hip.DevicePtr, 2)
			streams := make([]hip.Stream, 2)
			errs = onRanks(comms, func(c *Comm) error {
				r := c.Rank()
				if err := rt.SetDevice(c.Device()); err != nil {
					return err
				}
				var err error
				if streams[r], err = rt.StreamCreate(); err != nil {
					return err
				}
				if bufs[r], err = MemAlloc(rt, WindowAlign); err != nil {
					return err
				}
				b := make([]byte, 2*count)
				for i := range b {
					b[i] = byte(r*100 + i)
				}
				if err := hip.CopyToDevice(rt, bufs[r], b); err != nil {
					return err
				}
				if _, err := c.WindowRegister(bufs[r], WindowAlign, WinCollSymmetric); err != nil {
					return err
				}
				buf := bufs[r]
				block := buf + hip.DevicePtr(uintptr(r)*count)
				send, recv := block, buf // Gather: sendbuff = buf + rank*count
				if tc.fn == ce.FuncScatter {
					send, recv = buf, block // Scatter: recvbuff = buf + rank*count
				}
				if r != root {
					block = buf + hip.DevicePtr(tc.peerOff)
					if tc.fn == ce.FuncScatter {
						send, recv = tc.ignored, block
					} else {
						send, recv = block, tc.ignored
					}
				}
				return c.Collective(tc.fn, send, recv, count, 0, root, streams[r])
			})
			require.NoError(t, firstError(errs))
			for r := range 2 {
				runtime.LockOSThread()
				require.NoError(t, rt.SetDevice(comms[r].Device()))
				require.NoError(t, rt.StreamSynchronize(streams[r]))
				runtime.UnlockOSThread()
			}
			deadline := time.Now().Add(5 * time.Second)
			if !tc.mismatch {
				deadline = time.Now().Add(100 * time.Millisecond) // the watcher scans every 2 ms
			}
			for comms[0].AsyncError() == nil && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if tc.mismatch {
				err := comms[0].AsyncError()
				requireCode(t, result.InvalidUsage, err)
				require.Contains(t, err.Error(), "symmetric-registration contract")
				return
			}
			for _, c := range comms {
				require.NoError(t, c.AsyncError(), "rank %d", c.Rank())
			}
			// The root's buffer holds every rank's block (Gather); each
			// non-root's block is the root's (Scatter).
			fill := func(r, i int) byte { return byte(r*100 + i) }
			got := make([]byte, 2*count)
			if tc.fn == ce.FuncGather {
				require.NoError(t, hip.CopyFromDevice(rt, got, bufs[root]))
				for i := range count {
					require.Equal(t, fill(0, i), got[i], "block 0 byte %d", i)
					require.Equal(t, fill(root, count+i), got[count+i], "block 1 byte %d", i)
				}
			} else {
				require.NoError(t, hip.CopyFromDevice(rt, got, bufs[0]))
				for i := range count {
					require.Equal(t, fill(root, i), got[i], "rank 0's block byte %d", i)
				}
			}
		})
	}
}
