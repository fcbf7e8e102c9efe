package comm

import (
	"fmt"
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

// TestCheckP2PLostTrack: as TestCheckLostTrack for transfers: a pair more
// than the ring ahead of the receiver's watcher has overwritten slots; the
// watcher counts them as lost and compares the rest, reporting a real
// mismatch by its number.
func TestCheckP2PLostTrack(t *testing.T) {
	b := &checkBoard{mem: make([]byte, boardBytes(2)), n: 2, p2p: true}
	c := &Comm{rank: 1}
	const ahead = p2pRing + 10
	for seq := uint64(1); seq <= ahead; seq++ {
		b.p2pAt(0, 1, seq).send.post(seq, 100)
		b.p2pAt(0, 1, seq).recv.post(seq, 100)
	}
	next := []uint64{1, 1}
	require.NoError(t, c.checkScanP2P(b, next))
	require.Equal(t, uint64(ahead+1), next[0], "every transfer passed")
	require.Equal(t, uint64(10), b.lostP, "the overwritten ones counted as lost")
	b.p2pAt(0, 1, ahead+1).recv.post(ahead+1, 100)
	require.NoError(t, c.checkScanP2P(b, next), "its send is not posted yet")
	b.p2pAt(0, 1, ahead+1).send.post(ahead+1, 99)
	err := c.checkScanP2P(b, next)
	requireCode(t, result.InvalidUsage, err)
	require.Contains(t, err.Error(), fmt.Sprintf("rank 1's receive #%d from rank 0 is 100 bytes, rank 0's send #%d to rank 1 is 99 bytes", ahead+1, ahead+1))
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

// CECOLL_CHECK=1 compares every receive with its send (the k-th from a to
// b, by number, empty ones included): sizes that differ (a receive
// shorter than its send, which would leave the rest of the send to a
// later receive, one longer, which would wait for bytes that never come,
// an empty send meeting a receive of bytes) become an asynchronous
// ncclInvalidUsage on both ranks naming the pair, the direction, the
// number and both sizes, and the failure releases the streams; matching
// transfers report nothing and arrive whole. Ranks on their own threads,
// alone or each in its group (staged, several pieces each).
func TestCheckP2P(t *testing.T) {
	watchdog(t, 60*time.Second)
	t.Setenv("CECOLL_CHECK", "1")
	smallStaging(t, 8<<10) // 4 KiB pieces between 2 ranks
	for _, tc := range []struct {
		name         string
		sends, recvs []uintptr // rank 0's to rank 1, rank 1's from rank 0
		grouped      bool
		want         []string // the error's parts; none: the sizes match
	}{
		{"match", []uintptr{4096, 0, 20000, 5}, []uintptr{4096, 0, 20000, 5}, false, nil},
		{"match-grouped", []uintptr{20000, 0, 4096}, []uintptr{20000, 0, 4096}, true, nil},
		{"receive-shorter", []uintptr{4096, 20000, 4096}, []uintptr{4096, 6000, 4096}, false,
			[]string{"rank 1's receive #2 from rank 0 is 6000 bytes", "rank 0's send #2 to rank 1 is 20000 bytes"}},
		{"receive-longer", []uintptr{20000}, []uintptr{30000}, false,
			[]string{"rank 1's receive #1 from rank 0 is 30000 bytes", "rank 0's send #1 to rank 1 is 20000 bytes"}},
		{"empty-send", []uintptr{0, 4096}, []uintptr{4096, 4096}, false,
			[]string{"rank 1's receive #1 from rank 0 is 4096 bytes", "rank 0's send #1 to rank 1 is 0 bytes"}},
		{"receive-shorter-grouped", []uintptr{8192, 20000}, []uintptr{8192, 2000}, true,
			[]string{"rank 1's receive #2 from rank 0 is 2000 bytes", "rank 0's send #2 to rank 1 is 20000 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRT(t, 2)
			comms, errs := initThreads(t, rt, []int{0, 1})
			require.NoError(t, firstError(errs))
			defer destroyAll(t, comms)
			streams := make([]hip.Stream, 2)
			bufs := make([][]hip.DevicePtr, 2)
			data := func(k int, n uintptr) []byte {
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(k*31 + i*7 + 1)
				}
				return b
			}
			errs = onRanks(comms, func(c *Comm) error {
				r := c.Rank()
				if err := rt.SetDevice(c.Device()); err != nil {
					return err
				}
				var err error
				if streams[r], err = rt.StreamCreate(); err != nil {
					return err
				}
				fn, sizes := FuncSend, tc.sends
				if r == 1 {
					fn, sizes = FuncRecv, tc.recvs
				}
				if tc.grouped {
					if err := GroupStart(); err != nil {
						return err
					}
				}
				for k, n := range sizes {
					p, err := MemAlloc(rt, max(n, 1))
					if err != nil {
						return err
					}
					bufs[r] = append(bufs[r], p)
					if fn == FuncSend {
						if err := hip.CopyToDevice(rt, p, data(k, n)); err != nil {
							return err
						}
					}
					if err := c.P2P(fn, p, n, 0, 1-r, streams[r]); err != nil {
						if k > firstMismatch(tc.sends, tc.recvs) && result.Of(err) == result.InvalidUsage {
							continue // the check failed the communicator already: a later call fails with the cause
						}
						return err
					}
				}
				if tc.grouped {
					return GroupEnd()
				}
				return nil
			})
			require.NoError(t, firstError(errs))
			sync := func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for r := range 2 {
					require.NoError(t, rt.SetDevice(comms[r].Device()))
					_ = rt.StreamSynchronize(streams[r]) // returns: the failure released its waits
				}
			}
			if tc.want == nil {
				sync()
				time.Sleep(50 * time.Millisecond) // the watcher scans every 2 ms
				for _, c := range comms {
					require.NoError(t, c.AsyncError(), "rank %d", c.Rank())
				}
				for k, n := range tc.recvs {
					got := make([]byte, n)
					require.NoError(t, hip.CopyFromDevice(rt, got, bufs[1][k]))
					require.Equal(t, data(k, n), got, "receive #%d", k+1)
				}
				return
			}
			awaitAsyncErrors(comms, 5*time.Second)
			for _, c := range comms {
				err := c.AsyncError()
				requireCode(t, result.InvalidUsage, err)
				for _, w := range tc.want {
					require.Contains(t, err.Error(), w, "rank %d", c.Rank())
				}
			}
			sync()
			// Every later call fails with the cause.
			err := comms[0].P2P(FuncSend, bufs[0][0], 4, 0, 1, streams[0])
			requireCode(t, result.InvalidUsage, err)
			require.Contains(t, err.Error(), tc.want[0])
		})
	}
}

// An ungrouped send allocates nothing, a transfer of bytes or an empty
// one, with CECOLL_CHECK=1 (posting it on the board) and without.
func TestCheckP2PAllocs(t *testing.T) {
	watchdog(t, 30*time.Second)
	useNopEngine(t)
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprintf("check=%v", check), func(t *testing.T) {
			if check {
				t.Setenv("CECOLL_CHECK", "1")
			}
			rt := newRT(t, 1)
			comms, errs := initThreads(t, rt, []int{0, 0})
			require.NoError(t, firstError(errs))
			defer destroyAll(t, comms)
			require.Equal(t, check, comms[0].checksP2P())
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			send := func() {
				for _, n := range []uintptr{4, 0} {
					if err := comms[0].P2P(FuncSend, 0x1000, n, 7, 1, 0x1234); err != nil {
						panic(err)
					}
				}
			}
			send()
			require.Zero(t, testing.AllocsPerRun(100, send))
		})
	}
}

// CECOLL_CHECK=1 numbers ncclAllToAllv's empty pairs as P2P does: rank 0
// sends rank 1 nothing while rank 1 expects 4 elements from it, which
// without the check hangs rank 1's receive; both ranks get the pair by
// name, and the failure releases the streams.
func TestCheckAlltoAllv(t *testing.T) {
	watchdog(t, 60*time.Second)
	t.Setenv("CECOLL_CHECK", "1")
	rt := newRT(t, 2)
	comms, errs := initThreads(t, rt, []int{0, 0})
	require.NoError(t, firstError(errs))
	defer destroyAll(t, comms)
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
		buf, err := MemAlloc(rt, 64)
		if err != nil {
			return err
		}
		sc := []uintptr{4, 4} // int32 elements to rank 0, rank 1
		if r == 0 {
			sc[1] = 0 // rank 1 expects 4
		}
		return c.AlltoAllv(buf, sc, []uintptr{0, 4}, buf+32, []uintptr{4, 4}, []uintptr{0, 4}, 2, streams[r])
	})
	require.NoError(t, firstError(errs))
	awaitAsyncErrors(comms, 5*time.Second)
	for _, c := range comms {
		err := c.AsyncError()
		requireCode(t, result.InvalidUsage, err)
		require.Contains(t, err.Error(), "rank 1's receive #1 from rank 0 is 16 bytes, rank 0's send #1 to rank 1 is 0 bytes", "rank %d", c.Rank())
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for r := range 2 {
		_ = rt.StreamSynchronize(streams[r]) // returns: the failure released its waits
	}
}

// awaitAsyncErrors waits until every rank reports its asynchronous error,
// or d passes. Each rank learns of a failure on its own watcher's scan, so
// waiting for the rank that found it leaves the other a few ms behind.
func awaitAsyncErrors(comms []*Comm, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, c := range comms {
		for c.AsyncError() == nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// firstMismatch is the index of the first transfer whose two sides differ
// in size (len: none).
func firstMismatch(sends, recvs []uintptr) int {
	for k := range min(len(sends), len(recvs)) {
		if sends[k] != recvs[k] {
			return k
		}
	}
	return min(len(sends), len(recvs))
}
