package comm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// TestAlltoAllv runs uneven all-to-alls whose counts change every call,
// zeros included, on one thread for every rank and on a thread per rank,
// on one device and on two, with a staging window small enough for
// several pieces, and checks every byte of each receive buffer, the gaps
// between its blocks included.
func TestAlltoAllv(t *testing.T) {
	smallStaging(t, 8<<10)
	for _, n := range []int{2, 3, 4} {
		for _, devs := range []int{1, 2} {
			for _, one := range []bool{true, false} {
				t.Run(fmt.Sprintf("n%d/dev%d/one-thread=%v", n, devs, one), func(t *testing.T) { runAlltoAllv(t, n, devs, one) })
			}
		}
	}
}

func runAlltoAllv(t *testing.T, n, devs int, one bool) {
	watchdog(t, 60*time.Second)
	rt := newRT(t, devs)
	devOf := make([]int, n)
	for r := range devOf {
		devOf[r] = r % devs
	}
	comms, err := InitAll(rt, n, devOf, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, comms)
	const elt, gap, most = 4, 3, 6000 // int32; elements between blocks; most elements per pair
	rng := rand.New(rand.NewPCG(uint64(n), uint64(devs)))
	for call := range 3 {
		// cnt[a][b]: the elements a sends to b, 0 about one pair in four.
		cnt := make([][]uintptr, n)
		for a := range cnt {
			cnt[a] = make([]uintptr, n)
			for b := range cnt[a] {
				if rng.IntN(4) != 0 {
					cnt[a][b] = uintptr(1 + rng.IntN(most))
				}
			}
		}
		type rank struct {
			sc, sd, rc, rd []uintptr
			send, recv     hip.DevicePtr
			rlen           uintptr
			s              hip.Stream
		}
		rs := make([]rank, n)
		for me := range n {
			r := &rs[me]
			require.NoError(t, rt.SetDevice(devOf[me]))
			var so, ro uintptr
			r.sc, r.sd = make([]uintptr, n), make([]uintptr, n)
			r.rc, r.rd = make([]uintptr, n), make([]uintptr, n)
			for p := n - 1; p >= 0; p-- { // blocks in reverse peer order, with gaps
				r.sc[p], r.sd[p] = cnt[me][p], so
				r.rc[p], r.rd[p] = cnt[p][me], ro
				so += cnt[me][p] + gap
				ro += cnt[p][me] + gap
			}
			r.rlen = ro * elt
			r.send, err = MemAlloc(rt, so*elt+1)
			require.NoError(t, err)
			r.recv, err = MemAlloc(rt, r.rlen+1)
			require.NoError(t, err)
			r.s, err = rt.StreamCreate()
			require.NoError(t, err)
			img := bytes.Repeat([]byte{0xee}, int(so*elt))
			for p := range n {
				copy(img[r.sd[p]*elt:], p2pData(me, p, call, 0, r.sc[p]*elt))
			}
			require.NoError(t, hip.CopyToDevice(rt, r.send, img))
			require.NoError(t, hip.CopyToDevice(rt, r.recv, bytes.Repeat([]byte{0xee}, int(r.rlen))))
		}
		do := func(c *Comm) error {
			r := &rs[c.Rank()]
			return c.AlltoAllv(r.send, r.sc, r.sd, r.recv, r.rc, r.rd, 2 /* int32 */, r.s)
		}
		if one {
			runtime.LockOSThread()
			require.NoError(t, GroupStart())
			for _, c := range comms {
				require.NoError(t, do(c))
			}
			require.NoError(t, GroupEnd())
			runtime.UnlockOSThread()
		} else {
			for r, err := range onRanks(comms, func(c *Comm) error {
				if err := rt.SetDevice(c.Device()); err != nil {
					return err
				}
				return do(c)
			}) {
				require.NoError(t, err, "rank %d", r)
			}
		}
		for me := range n {
			r := &rs[me]
			require.NoError(t, rt.StreamSynchronize(r.s))
			want := bytes.Repeat([]byte{0xee}, int(r.rlen))
			for p := range n {
				copy(want[r.rd[p]*elt:], p2pData(p, me, call, 0, r.rc[p]*elt))
			}
			got := make([]byte, r.rlen)
			require.NoError(t, hip.CopyFromDevice(rt, got, r.recv))
			if i := firstDiff(want, got); i >= 0 {
				t.Fatalf("call %d rank %d: byte %d of %d: got %#x want %#x (counts in %v at %v)", call, me, i, len(got), got[i], want[i], r.rc, r.rd)
			}
			require.NoError(t, rt.StreamDestroy(r.s))
			require.NoError(t, MemFree(rt, r.send))
			require.NoError(t, MemFree(rt, r.recv))
		}
	}
}

// TestAlltoAllvRefusals: bad arguments are refused by name.
func TestAlltoAllvRefusals(t *testing.T) {
	rt := newRT(t, 1)
	comms, err := InitAll(rt, 1, nil, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, comms)
	c := comms[0]
	one := []uintptr{1}
	err = c.AlltoAllv(0x1000, one, one, 0x1000, nil, one, 6, 0)
	requireCode(t, result.InvalidArgument, err)
	require.ErrorContains(t, err, "NULL")
	err = c.AlltoAllv(0x1000, one, one, 0x1000, one, one, 99, 0)
	requireCode(t, result.InvalidArgument, err)
	require.ErrorContains(t, err, "datatype")
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
