package comm

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// Sends and receives between processes (staged) and, where a process
// holds two ranks, between its own ranks in one group (direct): a ring, an
// all-pairs exchange whose uneven sizes change every call (all_to_all_single
// with splits), and a 1F1B pipeline schedule of every rank as a stage over
// 8 micro-batches; every receive buffer checked.
func TestMPP2P(t *testing.T) {
	watchdog(t, 90*time.Second)
	before := shmFiles(t)
	cases := []struct {
		name  string
		procs []string
		env   []string
	}{
		{"4procs", []string{"0", "1", "2", "3"}, nil},
		{"2procs-of-2", []string{"0,1", "2,3"}, nil},
		{"3procs-4ranks-chaos", []string{"2", "0,3", "1"}, []string{"CECOLL_HOST_CHAOS=5", "CECOLL_STAGING_BYTES=8192"}},
	}
	var all []*child
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := NewID()
			require.NoError(t, err)
			var cs []*child
			for _, p := range tc.procs {
				cs = append(cs, startChild(t, id, 4, p, "p2p", tc.env...))
			}
			requireChildOK(t, cs, 60*time.Second)
			all = append(all, cs...)
		})
	}
	requireNoLeftovers(t, before, all)
}

// mpXfer is one transfer of a schedule step: rank from sends bytes to
// rank to (its k-th such transfer of the whole schedule).
type mpXfer struct {
	from, to int
	bytes    uintptr
}

// mpSchedule is the p2p role's steps (each a group of every rank's
// transfers in it), and the pipeline's actions of each stage (each a group
// of the stage's transfers), in order.
func mpSchedule(n int) (steps [][]mpXfer, acts [][][]mpXfer) {
	ring := []mpXfer{}
	for r := range n {
		ring = append(ring, mpXfer{r, (r + 1) % n, 20<<10 + 3})
	}
	steps = append(steps, ring)
	for k := range 3 { // all pairs, self included, uneven, changing
		var st []mpXfer
		for s := range n {
			for d := range n {
				st = append(st, mpXfer{s, d, uintptr((s+2*d+k)%5) * 3000})
			}
		}
		steps = append(steps, st)
	}
	// 1F1B (Megatron-LM's): stage s's actions in order; each action is
	// one group of the stage's sends and receives; a step here is one
	// action index of every stage (a stage without one that far skips).
	const mbs = 8
	acts = make([][][]mpXfer, n)
	for s := range n {
		fwdRecv := func(i int) []mpXfer {
			if s == 0 {
				return nil
			}
			return []mpXfer{{s - 1, s, uintptr(4096 + i)}}
		}
		fwdSend := func(i int) []mpXfer {
			if s == n-1 {
				return nil
			}
			return []mpXfer{{s, s + 1, uintptr(4096 + i)}}
		}
		bwdRecv := func(i int) []mpXfer {
			if s == n-1 {
				return nil
			}
			return []mpXfer{{s + 1, s, uintptr(8192 + i)}}
		}
		bwdSend := func(i int) []mpXfer {
			if s == 0 {
				return nil
			}
			return []mpXfer{{s, s - 1, uintptr(8192 + i)}}
		}
		warm := min(n-s-1, mbs)
		var a [][]mpXfer
		for i := range warm {
			a = append(a, fwdRecv(i), fwdSend(i))
		}
		if warm < mbs {
			a = append(a, fwdRecv(warm))
		}
		for j := range mbs - warm {
			i := warm + j
			a = append(a, append(fwdSend(i), bwdRecv(j)...))
			if i+1 < mbs {
				a = append(a, append(bwdSend(j), fwdRecv(i+1)...))
			} else {
				a = append(a, bwdSend(j))
			}
		}
		for j := mbs - warm; j < mbs; j++ {
			a = append(a, bwdRecv(j), bwdSend(j))
		}
		acts[s] = a
	}
	return steps, acts
}

func mpData(x mpXfer, k int) []byte {
	b := make([]byte, x.bytes)
	for i := range b {
		b[i] = byte(x.from*41 + x.to*13 + k*7 + i*3)
	}
	return b
}

// mpP2P is the p2p role: the schedule's steps on this process's ranks, in
// one group of them per step (per action, in the pipeline); then every
// receive checked.
func mpP2P(t *testing.T, rt hip.Runtime, comms []*Comm, n int) {
	steps, acts := mpSchedule(n)
	type recvd struct {
		buf hip.DevicePtr
		x   mpXfer
		k   int
	}
	var checks []recvd
	streams := map[*Comm]hip.Stream{}
	for _, c := range comms {
		require.NoError(t, rt.SetDevice(c.Device()))
		s, err := rt.StreamCreate()
		require.NoError(t, err)
		streams[c] = s
	}
	sent := map[[2]int]int{} // (from, to) -> transfers so far
	got := map[[2]int]int{}
	issue := func(c *Comm, xs []mpXfer) {
		me := c.Rank()
		require.NoError(t, rt.SetDevice(c.Device()))
		for _, x := range xs {
			if x.from == me {
				k := sent[[2]int{x.from, x.to}]
				sent[[2]int{x.from, x.to}]++
				p, err := MemAlloc(rt, max(x.bytes, 1))
				require.NoError(t, err)
				require.NoError(t, hip.CopyToDevice(rt, p, mpData(x, k)))
				require.NoError(t, c.P2P(FuncSend, p, x.bytes, 0, x.to, streams[c]))
			}
		}
		for _, x := range xs {
			if x.to == me {
				k := got[[2]int{x.from, x.to}]
				got[[2]int{x.from, x.to}]++
				p, err := MemAlloc(rt, max(x.bytes, 1))
				require.NoError(t, err)
				require.NoError(t, c.P2P(FuncRecv, p, x.bytes, 0, x.from, streams[c]))
				checks = append(checks, recvd{p, x, k})
			}
		}
	}
	for _, st := range steps {
		require.NoError(t, GroupStart())
		for _, c := range comms {
			issue(c, st)
		}
		require.NoError(t, GroupEnd())
	}
	// The pipeline: action i of every local stage, each in a group of the
	// process's stages (a stage's receives and sends of that action).
	most := 0
	for _, a := range acts {
		most = max(most, len(a))
	}
	for i := range most {
		require.NoError(t, GroupStart())
		for _, c := range comms {
			if a := acts[c.Rank()]; i < len(a) {
				issue(c, a[i])
			}
		}
		require.NoError(t, GroupEnd())
	}
	for _, c := range comms {
		require.NoError(t, rt.StreamSynchronize(streams[c]))
		require.NoError(t, c.AsyncError())
	}
	for _, r := range checks {
		b := make([]byte, r.x.bytes)
		require.NoError(t, hip.CopyFromDevice(rt, b, r.buf))
		require.True(t, bytes.Equal(mpData(r.x, r.k), b), "receive %d of rank %d from rank %d (%d B)", r.k, r.x.to, r.x.from, r.x.bytes)
	}
	fmt.Printf("MP p2p %d receives checked\n", len(checks))
}

// A rank killed in the middle of a large staged transfer with the
// survivor (65 pieces of a 16 KiB staging window), either way: the
// survivor's communicator fails with the peer's death (ncclRemoteError)
// within seconds, its stream drains after Abort, and nothing is left
// behind. The victim is rank 1; ranks 0 (the survivor) and 2 (a gate
// that holds the transfer at a known piece, mpKillMidTransfer) share a
// process.
func TestMPKilledMidTransfer(t *testing.T) {
	for _, dir := range []string{"recv", "send"} { // the survivor's side of the transfer
		t.Run(dir, func(t *testing.T) {
			watchdog(t, 40*time.Second)
			before := shmFiles(t)
			id, err := NewID()
			require.NoError(t, err)
			env := "CECOLL_STAGING_BYTES=16K"
			cs := []*child{
				startChild(t, id, 3, "0,2", "midsurvivor-"+dir, env),
				startChild(t, id, 3, "1", "midvictim-"+dir, env),
			}
			receiver := cs[0] // of the large transfer: it says when it is held
			if dir == "send" {
				receiver = cs[1]
			}
			receiver.expectLine(t, "mid-transfer", 20*time.Second)
			require.NoError(t, cs[1].cmd.Process.Kill())
			require.Error(t, cs[1].wait(t, 10*time.Second))
			requireChildOK(t, cs[:1], 20*time.Second)
			require.Contains(t, cs[0].output(), "MP remote-error")
			requireNoLeftovers(t, before, cs)
		})
	}
}

// mpKillMidTransfer: the survivor (rank 0) and the victim (rank 1) move
// one large transfer, rank 1 to rank 0 (survivorRecvs) or rank 0 to rank
// 1, held at a known piece by the gate (rank 2): the survivor's group
// also has two short transfers with the gate, the way the large one goes
// (from the gate when the survivor receives, to it when it sends), of
// which the gate issues only the first. A batch moves piece r of each of
// its channels in round r, a round's receives (sends) in order behind the
// data (credit) of every peer in it, so the survivor's large transfer
// stops at the round of the gate's second transfer, and the victim's a
// piece or two past it. Its receiver checks that its head landed and its
// tail did not, then the parent kills the victim; both ranks of the
// survivor's process must see its death.
func mpKillMidTransfer(t *testing.T, rt hip.Runtime, comms []*Comm, victim, survivorRecvs bool) {
	const big, short = 64<<12 + 100, 8 << 12 // 4 KiB pieces
	type side struct {
		c         *Comm
		s         hip.Stream
		buf, gbuf hip.DevicePtr // the large transfer's, the gate's two
	}
	var ss []*side
	for _, c := range comms {
		require.NoError(t, rt.SetDevice(c.Device()))
		x := &side{c: c}
		var err error
		x.s, err = rt.StreamCreate()
		require.NoError(t, err)
		x.buf, err = MemAlloc(rt, big)
		require.NoError(t, err)
		require.NoError(t, rt.Memset(x.buf, 0xee, big))
		x.gbuf, err = MemAlloc(rt, 2*short)
		require.NoError(t, err)
		ss = append(ss, x)
	}
	me := ss[0]
	xf := mpXfer{0, 1, big}
	if survivorRecvs {
		xf = mpXfer{1, 0, big}
	}
	data := mpData(xf, 0)
	bigRecv := me.c.Rank() == xf.to
	if !bigRecv {
		require.NoError(t, hip.CopyToDevice(rt, me.buf, data))
	}
	fn := FuncSend // this rank's side of the large transfer
	if bigRecv {
		fn = FuncRecv
	}
	if victim {
		require.NoError(t, me.c.P2P(fn, me.buf, big, 0, 0, me.s))
	} else {
		gate, toGate, fromSurvivor := ss[1], FuncRecv, FuncSend
		if !survivorRecvs {
			toGate, fromSurvivor = FuncSend, FuncRecv
		}
		require.NoError(t, rt.SetDevice(me.c.Device()))
		require.NoError(t, GroupStart())
		require.NoError(t, me.c.P2P(fn, me.buf, big, 0, 1, me.s))
		require.NoError(t, me.c.P2P(toGate, me.gbuf, short, 0, 2, me.s))
		require.NoError(t, me.c.P2P(toGate, me.gbuf+short, short, 0, 2, me.s))
		require.NoError(t, GroupEnd())
		require.NoError(t, rt.SetDevice(gate.c.Device()))
		require.NoError(t, gate.c.P2P(fromSurvivor, gate.gbuf, short, 0, 0, gate.s)) // the first only
	}
	start := time.Now()
	if bigRecv {
		head, tail := make([]byte, 1024), make([]byte, 100)
		for {
			require.NoError(t, hip.CopyFromDevice(rt, head, me.buf))
			if bytes.Equal(head, data[:len(head)]) {
				break
			}
			require.Less(t, time.Since(start), 10*time.Second, "the transfer never started")
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // held: nothing more lands
		require.NoError(t, hip.CopyFromDevice(rt, tail, me.buf+big-hip.DevicePtr(len(tail))))
		require.Equal(t, bytes.Repeat([]byte{0xee}, len(tail)), tail, "the transfer was not held")
		require.ErrorIs(t, rt.StreamQuery(me.s), hip.ErrNotReady)
		fmt.Println("MP mid-transfer")
	}
	if victim {
		time.Sleep(10 * time.Second) // killed here
		t.Fatal("the victim was not killed")
	}
	for _, x := range ss {
		deadline := time.Now().Add(10 * time.Second)
		var aerr error
		for aerr == nil && time.Now().Before(deadline) {
			aerr = x.c.AsyncError()
			time.Sleep(time.Millisecond)
		}
		requireCode(t, result.RemoteError, aerr)
		require.Contains(t, aerr.Error(), "killed")
		fmt.Printf("MP remote-error %v\n", aerr)
	}
	require.Less(t, time.Since(start), 5*time.Second, "the victim's death took too long to reach the survivor")
	for _, x := range ss {
		start := time.Now()
		require.NoError(t, x.c.Abort())
		require.Less(t, time.Since(start), 3*time.Second, "Abort took too long")
		require.NoError(t, rt.SetDevice(x.c.Device()))
		require.NoError(t, rt.StreamSynchronize(x.s))
	}
	if bigRecv { // what landed before the kill stays (the rest is undefined after the abort)
		got := make([]byte, 4096)
		require.NoError(t, hip.CopyFromDevice(rt, got, me.buf))
		require.Equal(t, data[:len(got)], got)
	}
	for _, x := range ss {
		require.NoError(t, rt.StreamDestroy(x.s))
		require.NoError(t, MemFree(rt, x.buf))
		require.NoError(t, MemFree(rt, x.gbuf))
	}
}
