package comm

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
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
