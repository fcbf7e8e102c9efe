package comm

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/bootstrap"
	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/memfd"
	"cecoll/internal/peermem"
	"cecoll/internal/result"
)

// Communicators against failing and hostile peers. A local user without
// the secret can at most delay a join; a peer holding it can at most fail
// the communicator with an error (internal/bootstrap's hostile tests cover
// the root and the frames).

// ncclCommInitRank with an absurd nranks is ncclInvalidArgument at once,
// before any connection and without reserving memory for the ranks.
func TestInitRankHugeN(t *testing.T) {
	rt := newRT(t, 1)
	id, err := NewID()
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for _, n := range []int{math.MaxInt32, MaxRanks + 1, 1 << 40, -1, 0} {
		_, err := InitRank(rt, id, n, 0, DefaultConfig())
		requireCode(t, result.InvalidArgument, err)
		_, err = InitAll(rt, n, nil, DefaultConfig())
		requireCode(t, result.InvalidArgument, err)
	}
	require.Less(t, time.Since(start), time.Second)
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated")
}

// After an asynchronous failure every later collective, registration
// (also one deferred to a group) and ncclCeInit returns that failure;
// finalize, destroy and the async query keep working.
func TestAsyncErrorSticks(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 1)
	comms, err := InitAll(rt, 2, []int{0, 0}, DefaultConfig())
	require.NoError(t, err)
	cause := result.Errorf(result.RemoteError, "rank 1 (pid 42 on elsewhere) closed its bootstrap connection")
	comms[1].fail(cause)
	buf, err := MemAlloc(rt, 2*WindowAlign)
	require.NoError(t, err)
	defer MemFree(rt, buf)
	for r, c := range comms {
		require.ErrorIs(t, c.AsyncError(), cause, "rank %d", r)
		err := c.Collective(ce.FuncAllGather, buf, buf+WindowAlign, 8, 0, 0, 0)
		requireCode(t, result.RemoteError, err)
		require.ErrorContains(t, err, "closed its bootstrap connection")
		err = c.Collective(ce.FuncAllGather, 0, 0, 8, 99, 0, 0) // bad arguments too
		requireCode(t, result.RemoteError, err)
		_, err = c.WindowRegister(buf, WindowAlign, WinCollSymmetric)
		requireCode(t, result.RemoteError, err)
		_, err = c.Register(buf, WindowAlign)
		requireCode(t, result.RemoteError, err)
		requireCode(t, result.RemoteError, c.CeInit())

		require.NoError(t, GroupStart())
		_, err = c.WindowRegister(buf, WindowAlign, WinCollSymmetric)
		requireCode(t, result.RemoteError, err)
		err = c.Collective(ce.FuncAllGather, buf, buf+WindowAlign, 8, 0, 0, 0)
		requireCode(t, result.RemoteError, err)
		require.NoError(t, GroupEnd())
	}
	require.NoError(t, comms[0].Finalize())
	destroyAll(t, comms)
}

// fakeNode plays the bootstrap of a 2-rank communicator whose rank 1
// lives in "another process" it makes up: it answers the victim's (rank
// 0's) every allgather with rank 1's part crafted from the victim's, and
// publishes on this process's fd socket what rank 1's would pass. Each
// case bends one thing a hostile peer controls.
type fakeNode struct {
	sec    bootstrap.Secret
	opts   bootstrap.NodeOptions
	mutate func(m *peermem.Claim)        // rank 1's window claim
	fd     func(size int64) (int, error) // what rank 1's fd socket passes

	mu     sync.Mutex
	allocs int
	fds    []int
}

func (f *fakeNode) Connect() error                       { return nil }
func (f *fakeNode) SameProcess(r int) bool               { return r == 0 }
func (f *fakeNode) Secret() bootstrap.Secret             { return f.sec }
func (f *fakeNode) Wait() time.Duration                  { return 5 * time.Second }
func (f *fakeNode) ID() bootstrap.ID                     { return bootstrap.LocalID(f.sec.Key) }
func (f *fakeNode) Close()                               {}
func (f *fakeNode) Abort(error)                          {}
func (f *fakeNode) Barrier() error                       { _, err := f.AllGather(nil); return err }
func (f *fakeNode) AllGather(b []byte) ([][]byte, error) { return [][]byte{b, f.peer(b)}, nil }

func (f *fakeNode) Peer(r int) bootstrap.Peer {
	sock, _ := peermem.Socket()
	return bootstrap.Peer{Pid: uint32(1 + r), Host: bootstrap.Hostname(), Sock: sock}
}

// peer is rank 1's part, given the victim's.
func (f *fakeNode) peer(mine []byte) []byte {
	if m, err := decodeInit(mine); err == nil { // init: the victim's, from pid 1
		m.pid = 1
		return m.encode()
	}
	switch len(mine) {
	case peermem.ClaimBytes:
		m, err := peermem.ParseClaim(mine)
		if err != nil {
			return nil
		}
		f.mu.Lock()
		alloc := hip.DevicePtr(0x5000_0000_0000 + uint64(f.allocs)<<32)
		f.allocs++
		f.mu.Unlock()
		pass := f.fd
		if pass == nil {
			pass = func(size int64) (int, error) { return memfd.Create("fake-peer", size) }
		}
		if fd, err := pass(int64(m.AllocSize)); err == nil {
			f.mu.Lock()
			f.fds = append(f.fds, fd)
			f.mu.Unlock()
			peermem.PublishFD(f.sec, alloc, fd)
		}
		fake := peermem.Claim{Base: alloc + (m.Base - m.AllocBase), Size: m.Size, AllocBase: alloc, AllocSize: m.AllocSize, OK: true}
		if f.mutate != nil {
			f.mutate(&fake)
		}
		return fake.Encode()
	case 1:
		return []byte{1}
	}
	return nil
}

// useFakeNode makes the next communicator's node f (its id must name a
// root: NewID's).
func useFakeNode(t *testing.T, f *fakeNode) {
	old := newNode
	newNode = func(id *bootstrap.ID, n, rank int, o bootstrap.NodeOptions) node {
		f.opts = o
		return f
	}
	t.Cleanup(func() {
		newNode = old
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, fd := range f.fds {
			syscall.Close(fd)
		}
	})
}

// The rank's side: a peer in another process sends each bad value of
// what a communicator exchanges (its init, its window claims, the fds of
// its memory); the victim, a real communicator of this process with the
// real engine, survives every one with an error, promptly.
func TestHostilePeerAtRank(t *testing.T) {
	watchdog(t, 120*time.Second)
	rt := newRT(t, 1)
	victim := func(t *testing.T, f *fakeNode) (*Comm, error) {
		useFakeNode(t, f)
		f.sec = bootstrap.Secret{Key: uint64(time.Now().UnixNano()), Tag: [bootstrap.TagBytes]byte{7}}
		id, err := NewID()
		require.NoError(t, err)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(t, rt.SetDevice(0))
		return InitRank(rt, id, 2, 0, DefaultConfig())
	}
	for _, tc := range []struct {
		name  string
		setup func(f *fakeNode)
		code  result.Code
		want  string
	}{
		{"window-base-outside-mapping", func(f *fakeNode) {
			f.mutate = func(m *peermem.Claim) { m.Base = m.AllocBase + hip.DevicePtr(m.AllocSize) + 4096 }
		}, result.RemoteError, "outside its allocation"},
		{"window-below-mapping", func(f *fakeNode) {
			f.mutate = func(m *peermem.Claim) { m.Base = m.AllocBase - 4096 }
		}, result.RemoteError, "outside its allocation"},
		{"window-size-wraps", func(f *fakeNode) {
			f.mutate = func(m *peermem.Claim) { m.Size = math.MaxUint64 - 100 }
		}, result.RemoteError, "runs past its allocation"},
		{"window-past-mapping", func(f *fakeNode) {
			f.mutate = func(m *peermem.Claim) { m.Base += 4096 }
		}, result.RemoteError, "runs past its allocation"},
		{"internal-window-smaller", func(f *fakeNode) {
			f.mutate = func(m *peermem.Claim) { m.Size /= 2 }
		}, result.RemoteError, "internal window"},
		{"window-message-garbage", func(f *fakeNode) {
			f.mutate = func(m *peermem.Claim) { m.OK = false }
		}, result.InvalidArgument, "refused its buffer"},
		{"memfd-unsealed", func(f *fakeNode) {
			f.fd = func(size int64) (int, error) { return memfd.CreateUnsealed("unsealed", size) }
		}, result.UnhandledCudaError, "rank 1 (pid 2): mapping its allocation"},
		{"memfd-short", func(f *fakeNode) {
			f.fd = func(size int64) (int, error) { return memfd.Create("short", size/2) }
		}, result.UnhandledCudaError, "rank 1 (pid 2): mapping its allocation"},
		{"fd-is-a-pipe", func(f *fakeNode) {
			f.fd = func(int64) (int, error) {
				var p [2]int
				err := syscall.Pipe(p[:])
				syscall.Close(p[1])
				return p[0], err
			}
		}, result.UnhandledCudaError, "rank 1 (pid 2): mapping its allocation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNode{}
			tc.setup(f)
			start := time.Now()
			c, err := victim(t, f)
			if err == nil {
				c.Destroy()
			}
			requireCode(t, tc.code, err)
			require.ErrorContains(t, err, tc.want)
			require.Less(t, time.Since(start), 8*time.Second, "refused promptly, not by a timeout")
		})
	}

	// A peer that passes sealed memory cannot shrink it under the
	// victim's mapping; its failure reaches the victim (the node's
	// OnFail: a peer's abort or death), and every later call returns it.
	t.Run("sealed-then-abort", func(t *testing.T) {
		f := &fakeNode{}
		c, err := victim(t, f)
		require.NoError(t, err)
		defer c.Destroy()
		f.mu.Lock()
		fds := append([]int(nil), f.fds...)
		f.mu.Unlock()
		require.NotEmpty(t, fds, "the victim mapped rank 1's memory")
		for _, fd := range fds {
			require.ErrorIs(t, syscall.Ftruncate(fd, 0), syscall.EPERM, "a sealed memfd cannot shrink under the victim")
		}
		f.opts.OnFail(result.Errorf(result.RemoteError, "rank 1 says so"))
		requireCode(t, result.RemoteError, c.AsyncError())
		require.ErrorContains(t, c.AsyncError(), "rank 1 says so")
		buf, err := MemAlloc(rt, 2*WindowAlign)
		require.NoError(t, err)
		defer MemFree(rt, buf)
		requireCode(t, result.RemoteError, c.Collective(ce.FuncAllGather, buf, buf+WindowAlign, 8, 0, 0, 0))
		_, err = c.WindowRegister(buf, WindowAlign, WinCollSymmetric)
		requireCode(t, result.RemoteError, err)
	})
}

// A flood of connections without the secret, more than the root process
// has fds, at the root's port and at its fd socket, while the real ranks
// join and register windows: the join is delayed at most. The root runs
// in a child whose fd limit is low (RLIMIT_NOFILE 128, set after the Go
// runtime raised it), is rank 0, and runs the collectives' sweep; rank 1
// is another child.
func TestMPFlood(t *testing.T) {
	watchdog(t, 90*time.Second)
	// A join that failed would end at CECOLL_BOOTSTRAP_TIMEOUT with its
	// reason rather than at this test's deadline.
	done := filepath.Join(t.TempDir(), "rank1.done")
	rootProc := startChild(t, ID{}, 2, "0", "floodroot", "CECOLL_BOOTSTRAP_TIMEOUT=30", envAwait+"="+done)
	var idHex, sock string
	deadline := time.After(20 * time.Second)
	for idHex == "" || sock == "" {
		select {
		case l := <-rootProc.lines:
			if v, ok := strings.CutPrefix(l, "id "); ok {
				idHex = v
			}
			if v, ok := strings.CutPrefix(l, "sock "); ok {
				sock = v
			}
		case <-deadline:
			t.Fatalf("the root child never printed its id; output:\n%s", rootProc.output())
		}
	}
	id := parseHexID(t, idHex)
	addr, ok := id.RootAddr()
	require.True(t, ok)

	stop := make(chan struct{})
	var flooders sync.WaitGroup
	var opened sync.Map
	flood := func(network, address string) {
		defer flooders.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.DialTimeout(network, address, time.Second)
			if err != nil {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			opened.Store(network, true)
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			c.Read(make([]byte, 1)) // hold it until the server drops it
			c.Close()
		}
	}
	const per = 160 // more than the child's 128 fds, at each socket
	for range per {
		flooders.Add(2)
		go flood("tcp", addr.String())
		go flood("unix", sock)
	}
	defer func() { close(stop); flooders.Wait() }()
	time.Sleep(300 * time.Millisecond) // the flood is on before rank 1 comes
	_, tcpOK := opened.Load("tcp")
	_, unixOK := opened.Load("unix")
	require.True(t, tcpOK && unixOK, "the flood reached both sockets")

	peer := startChild(t, id, 2, "1", "collsbarrier", "CECOLL_BOOTSTRAP_TIMEOUT=30", envDone+"="+done)
	requireChildOK(t, []*child{rootProc, peer}, 60*time.Second)
	require.Contains(t, rootProc.output(), "MP flood-ok")
}

func parseHexID(t *testing.T, s string) ID {
	raw, err := hex.DecodeString(s)
	require.NoError(t, err)
	require.Len(t, raw, IDBytes)
	return ID(raw)
}

// floodRoot is the root child of TestMPFlood: it lowers its fd limit,
// makes the id, tells the parent its addresses, and runs rank 0.
func floodRoot(t *testing.T, rt hip.Runtime) {
	lim := syscall.Rlimit{Cur: 128, Max: 128}
	var cur syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur))
	lim.Max = cur.Max
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	id, err := NewID()
	require.NoError(t, err)
	sock, err := peermem.Socket()
	require.NoError(t, err)
	fmt.Printf("MP id %x\n", id[:])
	fmt.Printf("MP sock %s\n", sock)
	require.NoError(t, rt.SetDevice(0))
	start := time.Now()
	c, err := InitRank(rt, id, 2, 0, DefaultConfig())
	require.NoError(t, err)
	fmt.Printf("MP init %v\n", time.Since(start))
	mpCollectives(t, rt, []*Comm{c}, 2)
	// The root lives in this process: it stays until rank 1 has checked
	// its collectives (else rank 1 may see it gone, an asynchronous error).
	require.NoError(t, c.Barrier())
	require.NoError(t, c.Destroy())
	fmt.Printf("MP flood-ok\n")
	// The barrier's reply to rank 1 may still be on its way: the root
	// stays until rank 1 is done (a CI run saw rank 1 lose the root).
	for f, dl := os.Getenv(envAwait), time.Now().Add(10*time.Second); f != "" && time.Now().Before(dl); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(f); err == nil {
			break
		}
	}
}

// No value of any environment variable crashes the process: with every
// variable that takes bad values with a warning set to each hostile
// value, ids are made (or refused with an error), communicators form and
// run, on one process and through the TCP bootstrap.
func TestHostileEnvironment(t *testing.T) {
	watchdog(t, 120*time.Second)
	// CECOLL_DEBUG and CECOLL_DEBUG_FILE are read once, at the log's set-up
	// (internal/param's TestHostileValues covers them).
	names := []string{"CECOLL_STAGING_BYTES", "CECOLL_INTRA_BATCH_SYNC_FREQ",
		"CECOLL_INTRA_BATCH_SYNC_THRESHOLD", "CECOLL_FLAG_WRITE", "CECOLL_SYNC", "CECOLL_HUB_BYTES", "CECOLL_EVENTS",
		"CECOLL_TIMEOUT", "CECOLL_ABORT_TIMEOUT", "CECOLL_CHECK_POINTERS", "CECOLL_BOOTSTRAP_TIMEOUT", "CECOLL_CHECK",
		"NCCL_SOCKET_IFNAME", "CECOLL_SOCKET_IFNAME", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_SOCKET_FAMILY", "CECOLL_SOCKET_FAMILY",
		"NCCL_COMM_ID", "CECOLL_COMM_ID"}
	rt := newRT(t, 2)
	for _, v := range []string{"inf", "NaN", "1e10", "1e-12", "-1", "0", "99999999999999999999G", "%p%h%n", "^", "=", ",,", "\xff\xfe", strings.Repeat("9", 4096)} {
		t.Run(fmt.Sprintf("%.12q", v), func(t *testing.T) {
			for _, n := range names {
				t.Setenv(n, v)
			}
			require.NotPanics(t, func() {
				comms, err := InitAll(rt, 2, []int{0, 1}, DefaultConfig())
				require.NoError(t, err)
				destroyAll(t, comms)
				if _, err := NewID(); err != nil {
					return // no such interface, or no root address: an error
				}
				comms, errs := initThreads(t, rt, []int{0, 1})
				for _, err := range errs {
					require.NoError(t, err)
				}
				destroyAll(t, comms)
			})
		})
	}
}

// A peer's window smaller than this rank's: copies reach the smaller one
// only (a symmetric buffer past it is staged, not written beyond the
// peer's mapping), in one process as across processes.
func TestWindowReach(t *testing.T) {
	watchdog(t, 30*time.Second)
	useFakeEngine(t)
	rt := newRT(t, 1)
	comms, err := InitAll(rt, 2, []int{0, 0}, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, comms)
	sizes := []uintptr{4 * WindowAlign, 2 * WindowAlign}
	bufs := make([]hip.DevicePtr, 2)
	wins := make([]*Window, 2)
	errs := onThreads(comms, func(c *Comm) error {
		var err error
		if bufs[c.rank], err = MemAlloc(rt, sizes[c.rank]); err != nil {
			return err
		}
		wins[c.rank], err = c.WindowRegister(bufs[c.rank], sizes[c.rank], WinCollSymmetric)
		return err
	})
	require.NoError(t, errors.Join(errs...))
	for r, w := range wins {
		require.Equal(t, 2*WindowAlign, int(w.Size()), "rank %d", r)
		_, ok := comms[r].FindWindow(bufs[r], 2*WindowAlign)
		require.True(t, ok)
		_, ok = comms[r].FindWindow(bufs[r], 2*WindowAlign+1)
		require.False(t, ok, "rank %d: past the smaller window", r)
	}
	for r, c := range comms {
		require.NoError(t, c.WindowDeregister(wins[r]))
		require.NoError(t, MemFree(rt, bufs[r]))
	}
}
