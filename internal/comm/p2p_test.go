package comm

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// xfer is one send or receive of a test pattern: its peer, its bytes and
// the stream (of the rank's) it is issued on.
type xfer struct {
	send   bool
	peer   int
	bytes  uintptr
	stream int
}

// pattern is each rank's transfers in issue order; every send from a to b
// has its receive at b, in the same order among b's receives from a.
type pattern struct {
	name    string
	grouped bool // needs a group (self transfers, or cycles of waits)
	ops     func(n, me int, big uintptr) []xfer
	inPlace bool // transfer 1 uses transfer 0's buffer
}

func patterns() []pattern {
	return []pattern{
		{"ring", true, func(n, me int, big uintptr) []xfer {
			return []xfer{{true, (me + 1) % n, big, 0}, {false, (me - 1 + n) % n, big, 0}}
		}, false},
		// Uneven sizes to every rank, itself included: AlltoAllv.
		{"all-pairs-uneven", true, func(n, me int, big uintptr) []xfer {
			var xs []xfer
			for q := range n {
				xs = append(xs, xfer{true, q, big/uintptr(1+me+q) + uintptr(q), 0})
			}
			for q := range n {
				xs = append(xs, xfer{false, q, big/uintptr(1+me+q) + uintptr(me), 0})
			}
			return xs
		}, false},
		// Scatter from rank 1 as torch issues it (the root sends to itself).
		{"scatter", true, func(n, me int, big uintptr) []xfer {
			xs := []xfer{}
			if me == 1%n {
				for q := range n {
					xs = append(xs, xfer{true, q, big, 0})
				}
			}
			return append(xs, xfer{false, 1 % n, big, 0})
		}, false},
		// Gather to rank 0, each transfer on its own stream, with an empty
		// transfer between.
		{"gather-streams", true, func(n, me int, big uintptr) []xfer {
			xs := []xfer{{true, 0, big, 0}, {true, 0, 0, 0}}
			if me == 0 {
				for q := range n {
					xs = append(xs, xfer{false, q, big, 1 + q%2})
				}
				xs = append(xs, xfer{false, n - 1, 0, 1})
			}
			return xs
		}, false},
		// In place: the receive from the previous rank lands in the buffer
		// the send to the next rank reads (nccl-tests' in-place sendrecv).
		{"ring-in-place", true, func(n, me int, big uintptr) []xfer {
			return []xfer{{true, (me + 1) % n, big, 0}, {false, (me - 1 + n) % n, big, 0}}
		}, true},
		// Two transfers of different sizes to the next rank: the k-th send
		// meets the k-th receive.
		{"twice", true, func(n, me int, big uintptr) []xfer {
			next, prev := (me+1)%n, (me+n-1)%n
			return []xfer{{true, next, 5, 0}, {true, next, big, 0}, {false, prev, 5, 0}, {false, prev, big, 0}}
		}, false},
		// Pairs (0,1), (2,3), ...: the even one sends first. Ungrouped
		// this is the one safe order, as with NCCL.
		{"pairs", false, func(n, me int, big uintptr) []xfer {
			q := me ^ 1
			if q >= n {
				return nil
			}
			s, r := xfer{true, q, big, 0}, xfer{false, q, big / 3, 0}
			s2, r2 := xfer{true, q, big / 3, 0}, xfer{false, q, big, 0}
			if me%2 == 0 {
				return []xfer{s, r}
			}
			return []xfer{r2, s2}
		}, false},
	}
}

// p2pData is what rank from sends to rank to in its k-th transfer to it,
// replay rnd.
func p2pData(from, to, k, rnd int, n uintptr) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from*37 + to*11 + k*5 + rnd*3 + i*7)
	}
	return b
}

// How the ranks issue a pattern.
type issue int

const (
	oneThread    issue = iota // one group on one thread holding every rank (sends copy in place)
	threadGroups              // a group per rank, on its own thread (staged)
	alone                     // ungrouped, a thread per rank
)

func (i issue) String() string { return [...]string{"one-thread", "thread-groups", "alone"}[i] }

// TestP2PMatrix runs every pattern by every way of issuing it, eagerly and
// captured, on ranks sharing one device and on two, with a staging window
// small enough that large transfers take several pieces, and checks every
// receive buffer and the guard bytes around it.
func TestP2PMatrix(t *testing.T) {
	smallStaging(t, 8<<10)
	for _, n := range []int{2, 3, 4} {
		for _, devs := range []int{1, 2} {
			for _, pt := range patterns() {
				for _, how := range []issue{oneThread, threadGroups, alone} {
					if how == alone && pt.grouped {
						continue
					}
					for _, graph := range []bool{false, true} {
						if graph && how == oneThread {
							continue // a capture is one thread's stream's
						}
						name := fmt.Sprintf("n%d/dev%d/%s/%s/graph=%v", n, devs, pt.name, how, graph)
						t.Run(name, func(t *testing.T) { runPattern(t, n, devs, pt, how, graph) })
					}
				}
			}
		}
	}
}

// smallStaging gives the test's engines a staging window of size bytes.
func smallStaging(t *testing.T, size uintptr) {
	old := engineConfig
	engineConfig = func(c *Comm) ce.Config {
		cfg := old(c)
		cfg.StagingBytes = size
		return cfg
	}
	t.Cleanup(func() { engineConfig = old })
}

func runPattern(t *testing.T, n, devs int, pt pattern, how issue, graph bool) {
	watchdog(t, 60*time.Second)
	rt := newRT(t, devs)
	devOf := make([]int, n)
	for r := range devOf {
		devOf[r] = r % devs
	}
	comms, err := InitAll(rt, n, devOf, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, comms)
	const guard = 32
	const big = 20<<10 + 13 // several pieces of an 8 KiB window's halves
	type rankState struct {
		ops     []xfer
		bufs    []hip.DevicePtr
		streams [3]hip.Stream
	}
	rs := make([]rankState, n)
	for r := range n {
		require.NoError(t, rt.SetDevice(devOf[r]))
		st := &rs[r]
		st.ops = pt.ops(n, r, big)
		for i := range st.streams {
			st.streams[i], err = rt.StreamCreate()
			require.NoError(t, err)
		}
		for i, x := range st.ops {
			if pt.inPlace && i == 1 {
				st.bufs = append(st.bufs, st.bufs[0])
				continue
			}
			p, err := MemAlloc(rt, x.bytes+2*guard)
			require.NoError(t, err)
			st.bufs = append(st.bufs, p)
		}
	}
	// fill writes replay rnd's data into the send buffers and a marker
	// into the receive buffers and guards.
	fill := func(rnd int) {
		for r := range n {
			k := make([]int, n)
			for i, x := range rs[r].ops {
				if pt.inPlace && i == 1 {
					continue // the send's buffer, filled
				}
				b := bytes.Repeat([]byte{0xee}, int(x.bytes+2*guard))
				if x.send {
					copy(b[guard:], p2pData(r, x.peer, k[x.peer], rnd, x.bytes))
					k[x.peer]++
				}
				require.NoError(t, hip.CopyToDevice(rt, rs[r].bufs[i], b))
			}
		}
	}
	check := func(rnd int) {
		for r := range n {
			for _, s := range rs[r].streams {
				require.NoError(t, rt.StreamSynchronize(s))
			}
		}
		for r := range n {
			k := make([]int, n)
			for i, x := range rs[r].ops {
				if x.send {
					continue
				}
				b := make([]byte, x.bytes+2*guard)
				require.NoError(t, hip.CopyFromDevice(rt, b, rs[r].bufs[i]))
				want := append(append(bytes.Repeat([]byte{0xee}, guard), p2pData(x.peer, r, k[x.peer], rnd, x.bytes)...), bytes.Repeat([]byte{0xee}, guard)...)
				require.True(t, bytes.Equal(want, b), "rank %d receive %d (from %d, %d B), replay %d", r, i, x.peer, x.bytes, rnd)
				k[x.peer]++
			}
		}
	}
	issueRank := func(r int) error {
		c := comms[r]
		for i, x := range rs[r].ops {
			fn := FuncRecv
			if x.send {
				fn = FuncSend
			}
			if err := c.P2P(fn, rs[r].bufs[i]+guard, x.bytes, 0 /* int8 */, x.peer, rs[r].streams[x.stream]); err != nil {
				return err
			}
		}
		return nil
	}
	inGroup := func(f func() error) error {
		if err := GroupStart(); err != nil {
			return err
		}
		err := f()
		if e := GroupEnd(); err == nil {
			err = e
		}
		return err
	}
	perRank := func(f func(c *Comm) error) {
		for r, err := range onRanks(comms, func(c *Comm) error {
			if err := rt.SetDevice(c.Device()); err != nil {
				return err
			}
			return f(c)
		}) {
			require.NoError(t, err, "rank %d", r)
		}
	}
	issueOnce := func(c *Comm) error {
		if how == alone {
			return issueRank(c.Rank())
		}
		return inGroup(func() error { return issueRank(c.Rank()) })
	}
	if !graph {
		for rnd := range 2 {
			fill(rnd)
			if how == oneThread {
				runtime.LockOSThread()
				require.NoError(t, inGroup(func() error {
					for r := range n {
						if err := issueRank(r); err != nil {
							return err
						}
					}
					return nil
				}))
				runtime.UnlockOSThread()
			} else {
				perRank(issueOnce)
			}
			check(rnd)
		}
		return
	}
	execs := make([]hip.GraphExec, n)
	perRank(func(c *Comm) error {
		s := rs[c.Rank()].streams[0]
		if err := rt.StreamBeginCapture(s, hip.CaptureModeRelaxed); err != nil {
			return err
		}
		// The other streams fork from the captured one and join it again,
		// as a user captures work on several streams.
		ev, err := rt.EventCreate(hip.EventDisableTiming)
		if err != nil {
			return err
		}
		defer rt.EventDestroy(ev)
		for _, o := range rs[c.Rank()].streams[1:] {
			if err := rt.EventRecord(ev, s); err != nil {
				return err
			}
			if err := rt.StreamWaitEvent(o, ev); err != nil {
				return err
			}
		}
		ierr := issueOnce(c)
		for _, o := range rs[c.Rank()].streams[1:] {
			if err := rt.EventRecord(ev, o); err != nil {
				return err
			}
			if err := rt.StreamWaitEvent(s, ev); err != nil {
				return err
			}
		}
		g, err := rt.StreamEndCapture(s)
		if ierr != nil {
			return ierr
		}
		if err != nil {
			return err
		}
		defer rt.GraphDestroy(g)
		execs[c.Rank()], err = rt.GraphInstantiate(g)
		return err
	})
	for rnd := range 3 {
		fill(rnd)
		perRank(func(c *Comm) error {
			s := rs[c.Rank()].streams[0]
			if err := c.OrderBefore(s); err != nil {
				return err
			}
			if err := rt.GraphLaunch(execs[c.Rank()], s); err != nil {
				return err
			}
			return c.OrderAfter(s)
		})
		check(rnd)
	}
	for r := range n {
		require.NoError(t, rt.GraphExecDestroy(execs[r]))
	}
}

// TestP2PRefusals: what NCCL's contract forbids is refused with a clear
// error, and where a peer may have issued its side, the communicator
// fails on every rank (no later transfer pairs with the wrong one).
func TestP2PRefusals(t *testing.T) {
	watchdog(t, 60*time.Second)
	rt := newRT(t, 1)
	fresh := func(n int) []*Comm {
		comms, err := InitAll(rt, n, make([]int, n), DefaultConfig())
		require.NoError(t, err)
		t.Cleanup(func() { destroyAll(t, comms) })
		return comms
	}
	buf, err := MemAlloc(rt, 1024)
	require.NoError(t, err)
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	failed := func(t *testing.T, comms []*Comm) {
		for _, c := range comms {
			requireCode(t, result.RemoteError, c.AsyncError())
		}
	}
	// A stream conflict fails every rank with the conflict itself.
	conflict := func(t *testing.T, comms []*Comm) {
		for _, c := range comms {
			requireCode(t, result.InvalidUsage, c.AsyncError())
		}
	}
	t.Run("peer out of range", func(t *testing.T) {
		c := fresh(2)
		requireCode(t, result.InvalidArgument, c[0].P2P(FuncSend, buf, 4, 0, 2, s))
		failed(t, c)
	})
	t.Run("NULL buffer", func(t *testing.T) {
		c := fresh(2)
		requireCode(t, result.InvalidArgument, c[1].P2P(FuncRecv, 0, 4, 0, 0, s))
		failed(t, c)
	})
	t.Run("bad datatype", func(t *testing.T) {
		c := fresh(2)
		requireCode(t, result.InvalidArgument, c[0].P2P(FuncSend, buf, 4, 99, 1, s))
		failed(t, c)
	})
	t.Run("self alone", func(t *testing.T) {
		c := fresh(2)
		requireCode(t, result.InvalidUsage, c[0].P2P(FuncSend, buf, 4, 0, 0, s))
		failed(t, c)
	})
	t.Run("self without its match", func(t *testing.T) {
		c := fresh(1)
		require.NoError(t, GroupStart())
		require.NoError(t, c[0].P2P(FuncSend, buf, 4, 0, 0, s))
		requireCode(t, result.InvalidUsage, GroupEnd())
		require.NoError(t, c[0].AsyncError(), "one rank: no peer to mislead")
	})
	// groupRefused issues one thread's group of two ranks' transfers,
	// which ncclGroupEnd must refuse with want in its text; the world fails.
	groupRefused := func(t *testing.T, want string, issue func(c []*Comm)) {
		c := fresh(2)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(t, GroupStart())
		issue(c)
		err := GroupEnd()
		requireCode(t, result.InvalidUsage, err)
		require.Contains(t, err.Error(), want)
		failed(t, c)
	}
	t.Run("sizes differ", func(t *testing.T) {
		groupRefused(t, "8 bytes", func(c []*Comm) {
			require.NoError(t, c[0].P2P(FuncSend, buf, 8, 0, 1, s))
			require.NoError(t, c[1].P2P(FuncRecv, buf+512, 4, 0, 0, s))
		})
	})
	// In place (each rank sends and receives one buffer, nccl-tests'
	// sendrecv) the pair stages, and its sizes must agree as well.
	t.Run("sizes differ in place", func(t *testing.T) {
		groupRefused(t, "48 bytes", func(c []*Comm) {
			for r := range 2 {
				b := buf + hip.DevicePtr(r*512)
				require.NoError(t, c[r].P2P(FuncSend, b, 64, 0, 1-r, s))
				require.NoError(t, c[r].P2P(FuncRecv, b, uintptr(64-16*r), 0, 1-r, s))
			}
		})
	})
	// Under CECOLL_CHECK an empty receive of one thread's group meets its
	// send there: refused, not left to CECOLL_TIMEOUT.
	t.Run("empty receive against a send, CECOLL_CHECK", func(t *testing.T) {
		t.Setenv("CECOLL_CHECK", "1")
		groupRefused(t, "is 0 bytes, the matching ncclSend 8 bytes", func(c []*Comm) {
			require.NoError(t, c[0].P2P(FuncSend, buf, 8, 0, 1, s))
			require.NoError(t, c[1].P2P(FuncRecv, buf+512, 0, 0, 0, s))
		})
	})
	t.Run("partly in place", func(t *testing.T) {
		groupRefused(t, "shares bytes", func(c []*Comm) {
			for r := range 2 {
				b := buf + hip.DevicePtr(r*512)
				require.NoError(t, c[r].P2P(FuncSend, b, 64, 0, 1-r, s))
				require.NoError(t, c[r].P2P(FuncRecv, b+4, 64, 0, 1-r, s))
			}
		})
	})
	t.Run("shared stream alone", func(t *testing.T) {
		c := fresh(2)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		// Rank 0's receive is queued first; rank 1's send behind it on the
		// same stream would never run: refused, and the world fails,
		// which releases rank 0's wait.
		errs[0] = c[0].P2P(FuncRecv, buf, 4, 0, 1, s)
		wg.Add(1)
		go func() { defer wg.Done(); errs[1] = c[1].P2P(FuncSend, buf+512, 4, 0, 0, s) }()
		wg.Wait()
		require.NoError(t, errs[0])
		requireCode(t, result.InvalidUsage, errs[1])
		conflict(t, c)
		_ = rt.StreamSynchronize(s) // returns: the failure released the wait
	})
	// A group per thread holds one rank of the process: the same as alone,
	// for transfers and for collectives.
	for _, coll := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared stream, a group per thread, collective=%v", coll), func(t *testing.T) {
			c := fresh(2)
			issue := func(r int) error {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if err := GroupStart(); err != nil {
					return err
				}
				var err error
				if coll {
					err = c[r].Collective(FuncAllGather, buf+hip.DevicePtr(r*4), buf+512, 4, 0, 0, s)
				} else {
					err = c[r].P2P(FuncSend, buf, 4, 0, 1-r, s)
					if err == nil {
						err = c[r].P2P(FuncRecv, buf+512+hip.DevicePtr(r*8), 4, 0, 1-r, s)
					}
				}
				if e := GroupEnd(); err == nil {
					err = e
				}
				return err
			}
			require.NoError(t, issue(0))
			var err error
			done := make(chan struct{})
			go func() { defer close(done); err = issue(1) }()
			<-done
			requireCode(t, result.InvalidUsage, err)
			require.Contains(t, err.Error(), "stream")
			conflict(t, c)
			_ = rt.StreamSynchronize(s)
		})
	}
}
