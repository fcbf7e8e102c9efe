package comm

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/memfd"
	"cecoll/internal/result"
)

// Issue 17: the bootstrap and the shared windows against failing and
// hostile peers. A local user without the secret can at most delay a
// join; a peer holding it can at most fail the communicator with an error.

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

// An id costs its root nothing until ranks arrive (1M ncclGetUniqueId
// calls added 49 MB when every id had an entry).
func TestUniqueIDsCostNothing(t *testing.T) {
	_, err := NewID()
	require.NoError(t, err)
	forming := func() int {
		root.mu.Lock()
		defer root.mu.Unlock()
		return len(root.forming)
	}
	worlds := forming()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 100000 {
		_, err := NewID()
		require.NoError(t, err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Less(t, int64(after.HeapInuse)-int64(before.HeapInuse), int64(1<<20), "heap growth after 100000 ids")
	require.Equal(t, worlds, forming(), "no world forms without ranks")
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

// The root's side: a peer holding the secret sends each bad value of
// issue 17. The root (this test process) survives, holds no memory for
// it, fails that communicator on the other rank with an error, and goes
// on serving.
func TestHostileRankAtRoot(t *testing.T) {
	watchdog(t, 60*time.Second)
	join := func(t *testing.T, id ID, n, rank int) (net.Conn, *bufio.Reader, byte, []byte) {
		t.Helper()
		addr, _, err := getSockaddr(id[16:])
		require.NoError(t, err)
		conn, err := net.Dial("tcp", addr.String())
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		h := realHello(t, rank, n)
		h.sec = id.secret()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		require.NoError(t, writeFrame(conn, frHello, h.encode()))
		br := bufio.NewReader(conn)
		if rank > 0 || n == 1 {
			typ, p, err := readFrame(br, tableLimit(n), nil)
			require.NoError(t, err)
			return conn, br, typ, p
		}
		return conn, br, 0, nil
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	// The legitimate rank 0 contributes to allgather #1, then must learn
	// that rank 1 was dropped.
	victimSees := func(t *testing.T, conn net.Conn, br *bufio.Reader, want string) {
		t.Helper()
		typ, _, err := readFrame(br, tableLimit(2), nil)
		require.NoError(t, err)
		require.Equal(t, frTable, typ)
		require.NoError(t, writeFrame(conn, frGather, encodeGather(1, make([]byte, 16))))
		for {
			typ, p, err := readFrame(br, gatherReplyLimit(2), nil)
			require.NoError(t, err, "the victim hears why")
			if typ == frAbort {
				code, msg := parseFail(p)
				require.Equal(t, result.RemoteError, code)
				require.Contains(t, msg, "rank 1")
				require.Contains(t, msg, want)
				return
			}
		}
	}
	budget0 := root.budget.used.Load()

	t.Run("nranks=INT_MAX", func(t *testing.T) {
		id, err := NewID()
		require.NoError(t, err)
		before := heap()
		_, _, typ, p := join(t, id, math.MaxInt32, 1)
		require.Equal(t, frFail, typ)
		code, msg := parseFail(p)
		require.Equal(t, result.InvalidArgument, code)
		require.Contains(t, msg, "nranks 2147483647")
		require.Less(t, int64(heap())-int64(before), int64(8<<20), "heap growth")
	})
	t.Run("rank-out-of-range", func(t *testing.T) {
		id, err := NewID()
		require.NoError(t, err)
		_, _, typ, p := join(t, id, 2, 5)
		require.Equal(t, frFail, typ)
		code, _ := parseFail(p)
		require.Equal(t, result.InvalidArgument, code)
	})
	for _, tc := range []struct{ name, host, sock, want string }{
		{"foreign-socket", "", "/run/user/0/bus", "not one of cecoll's"},
		{"host-forging-a-log-line", "vm\nvm:1:1 cecoll WARN all is well", "", "names the host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := NewID()
			require.NoError(t, err)
			addr, _, _ := getSockaddr(id[16:])
			conn, err := net.Dial("tcp", addr.String())
			require.NoError(t, err)
			defer conn.Close()
			h := realHello(t, 0, 1)
			h.sec = id.secret()
			if tc.host != "" {
				h.host = tc.host
			}
			if tc.sock != "" {
				h.sock = tc.sock
			}
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			require.NoError(t, writeFrame(conn, frHello, h.encode()))
			typ, p, err := readFrame(bufio.NewReader(conn), tableLimit(1), nil)
			require.NoError(t, err)
			require.Equal(t, frFail, typ)
			_, msg := parseFail(p)
			require.Contains(t, msg, tc.want)
			require.NotContains(t, msg, "\n")
		})
	}
	for _, tc := range []struct {
		name   string
		frames [][]byte
		want   string
	}{
		// 15 frames of 60 MiB took the root from 6 MB to 930 MB: the
		// first is refused at its header.
		{"gather-60MiB", [][]byte{{0x00, 0x00, 0xc0, 0x03, frGather}}, "frame too large"},
		{"gather-twice", [][]byte{frame(frGather, encodeGather(1, make([]byte, 16))), frame(frGather, encodeGather(1, make([]byte, 16)))}, "again"},
		{"gather-ahead", [][]byte{frame(frGather, encodeGather(7, make([]byte, 16)))}, "at #1"},
		{"gather-over-limit", [][]byte{frame(frGather, encodeGather(1, make([]byte, maxGatherBytes+1)))}, "at most 65536"},
		{"second-hello", [][]byte{frame(frHello, nil)}, "unexpected frame type 1"},
		{"truncated", [][]byte{{1, 0, 0, 0, frGather}}, "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := NewID()
			require.NoError(t, err)
			before := heap()
			victim, vbr, _, _ := join(t, id, 2, 0)
			hostile, _, typ, _ := join(t, id, 2, 1)
			require.Equal(t, frTable, typ)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for _, f := range tc.frames {
					if _, err := hostile.Write(f); err != nil {
						return
					}
				}
				if tc.name == "truncated" {
					hostile.(*net.TCPConn).CloseWrite()
				}
			}()
			victimSees(t, victim, vbr, tc.want)
			<-done
			require.Less(t, int64(heap())-int64(before), int64(16<<20), "heap growth")
			victim.Close()
			require.Eventually(t, func() bool { return root.budget.used.Load() == budget0 }, 5*time.Second, 10*time.Millisecond,
				"the root gives back what it held")
		})
	}
	t.Run("still-serving", func(t *testing.T) {
		useFakeEngine(t)
		rt := newRT(t, 1)
		comms, errs := initThreads(t, rt, []int{0, 0})
		for _, err := range errs {
			require.NoError(t, err)
		}
		destroyAll(t, comms)
	})
}

// fakeRoot plays the root of a 2-rank communicator whose rank 1 lives in
// "another process" it makes up: it answers the victim's (rank 0's) every
// allgather with rank 1's part crafted from the victim's, and serves rank
// 1's fd socket. Each scenario bends one thing a hostile peer controls.
type fakeRoot struct {
	ln     net.Listener
	fdln   net.Listener
	sock   string
	id     ID
	mutate func(m *winMsg)                              // rank 1's window message
	table  func(victim hello, fake peerInfo) []byte     // the table's payload
	fd     func(size int64) (int, error)                // what rank 1's fd socket passes
	reply  func(seq uint64, mine, theirs []byte) []byte // the allgather answer

	mu     sync.Mutex
	conn   net.Conn // the victim's
	allocs map[hip.DevicePtr]int64
	fds    []int
}

func newFakeRoot(t *testing.T) *fakeRoot {
	f := &fakeRoot{allocs: make(map[hip.DevicePtr]int64)}
	var err error
	f.ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.sock = fmt.Sprintf("%sfake-%d-%d", sockPrefix, os.Getpid(), time.Now().UnixNano())
	f.fdln, err = net.Listen("unix", f.sock)
	require.NoError(t, err)
	binary.LittleEndian.PutUint64(f.id[0:], idMagic)
	binary.LittleEndian.PutUint64(f.id[8:], uint64(time.Now().UnixNano()))
	putSockaddr(f.id[16:], f.ln.Addr().(*net.TCPAddr))
	t.Cleanup(func() {
		f.ln.Close()
		f.fdln.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, fd := range f.fds {
			syscall.Close(fd)
		}
	})
	go f.serveFDs()
	go func() {
		for {
			conn, err := f.ln.Accept()
			if err != nil {
				return
			}
			go f.serve(conn)
		}
	}()
	return f
}

func (f *fakeRoot) serve(conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	_, p, err := readFrame(br, maxHelloFrame, nil)
	if err != nil {
		return
	}
	h, err := parseHello(p)
	if err != nil {
		return
	}
	f.mu.Lock()
	f.conn = conn
	f.mu.Unlock()
	fake := peerInfo{pid: 1, host: hostname(), sock: f.sock}
	table := encodeTable([]*rootRank{{pid: h.pid, host: h.host, sock: h.sock}, {pid: fake.pid, host: fake.host, sock: fake.sock}})
	if f.table != nil {
		table = f.table(h, fake)
	}
	writeFrame(conn, frTable, table)
	for {
		typ, p, err := readFrame(br, maxRankFrame, nil)
		if err != nil || typ == frBye {
			return
		}
		if typ != frGather {
			continue
		}
		seq, mine, err := parseGather(p)
		if err != nil {
			return
		}
		theirs := f.peer(mine)
		var e enc
		e.u64(seq)
		e.bytes(mine)
		e.bytes(theirs)
		if f.reply != nil {
			e.b = f.reply(seq, mine, theirs)
		}
		writeFrame(conn, frGather, e.b)
	}
}

// peer is rank 1's part, given the victim's.
func (f *fakeRoot) peer(mine []byte) []byte {
	if m, err := decodeInit(mine); err == nil { // init: the victim's, from pid 1
		m.pid = 1
		return m.encode()
	}
	switch len(mine) {
	case nodeWinMsg:
		m, err := parseWinMsg(mine)
		if err != nil {
			return nil
		}
		f.mu.Lock()
		alloc := hip.DevicePtr(0x5000_0000_0000 + uint64(len(f.allocs))<<32)
		f.allocs[alloc] = int64(m.allocSize)
		f.mu.Unlock()
		fake := winMsg{base: alloc + (m.base - m.allocBase), size: m.size, allocBase: alloc, allocSize: m.allocSize, ok: true}
		if f.mutate != nil {
			f.mutate(&fake)
		}
		return fake.encode()
	case 1:
		return []byte{1}
	}
	return nil
}

func (f *fakeRoot) serveFDs() {
	for {
		conn, err := f.fdln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			var req [fdReqBytes]byte
			if _, err := ioReadFull(conn, req[:]); err != nil {
				return
			}
			_, base := parseFDRequest(req)
			f.mu.Lock()
			size, ok := f.allocs[base]
			f.mu.Unlock()
			if !ok {
				conn.Write([]byte("no such allocation"))
				return
			}
			pass := f.fd
			if pass == nil {
				pass = func(size int64) (int, error) { return memfd.Create("fake-peer", size) }
			}
			fd, err := pass(size)
			if err != nil {
				conn.Write([]byte(err.Error()))
				return
			}
			f.mu.Lock()
			f.fds = append(f.fds, fd)
			f.mu.Unlock()
			conn.(*net.UnixConn).WriteMsgUnix([]byte{0}, syscall.UnixRights(fd), nil)
		}()
	}
}

// The rank's side: a peer (through the root that relays it) sends each
// bad value; the victim, a real communicator of this process with the
// real engine, survives every one with an error.
func TestHostilePeerAtRank(t *testing.T) {
	watchdog(t, 120*time.Second)
	t.Setenv("CECOLL_BOOTSTRAP_TIMEOUT", "10")
	rt := newRT(t, 1)
	victim := func(t *testing.T, f *fakeRoot) (*Comm, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(t, rt.SetDevice(0))
		return InitRank(rt, f.id, 2, 0, DefaultConfig())
	}
	for _, tc := range []struct {
		name  string
		setup func(f *fakeRoot)
		code  result.Code
		want  string
	}{
		{"window-base-outside-mapping", func(f *fakeRoot) {
			f.mutate = func(m *winMsg) { m.base = m.allocBase + hip.DevicePtr(m.allocSize) + 4096 }
		}, result.RemoteError, "outside its allocation"},
		{"window-below-mapping", func(f *fakeRoot) {
			f.mutate = func(m *winMsg) { m.base = m.allocBase - 4096 }
		}, result.RemoteError, "outside its allocation"},
		{"window-size-wraps", func(f *fakeRoot) {
			f.mutate = func(m *winMsg) { m.size = math.MaxUint64 - 100 }
		}, result.RemoteError, "runs past its allocation"},
		{"window-past-mapping", func(f *fakeRoot) {
			f.mutate = func(m *winMsg) { m.base += 4096 }
		}, result.RemoteError, "runs past its allocation"},
		{"internal-window-smaller", func(f *fakeRoot) {
			f.mutate = func(m *winMsg) { m.size /= 2 }
		}, result.RemoteError, "internal window"},
		{"window-message-garbage", func(f *fakeRoot) {
			f.mutate = func(m *winMsg) { m.ok = false }
		}, result.InvalidArgument, "refused its buffer"},
		{"memfd-unsealed", func(f *fakeRoot) {
			f.fd = func(size int64) (int, error) { return memfd.CreateUnsealed("unsealed", size) }
		}, result.UnhandledCudaError, "mapping rank 1's allocation"},
		{"memfd-short", func(f *fakeRoot) {
			f.fd = func(size int64) (int, error) { return memfd.Create("short", size/2) }
		}, result.UnhandledCudaError, "mapping rank 1's allocation"},
		{"fd-is-a-pipe", func(f *fakeRoot) {
			f.fd = func(int64) (int, error) {
				var p [2]int
				err := syscall.Pipe(p[:])
				syscall.Close(p[1])
				return p[0], err
			}
		}, result.UnhandledCudaError, "mapping rank 1's allocation"},
		{"table-claims-this-pid", func(f *fakeRoot) {
			f.table = func(v hello, fake peerInfo) []byte {
				return encodeTable([]*rootRank{{pid: v.pid, host: v.host, sock: v.sock}, {pid: v.pid, host: v.host, sock: fake.sock}})
			}
		}, result.RemoteError, "does not run it"},
		{"table-foreign-socket", func(f *fakeRoot) {
			f.table = func(v hello, fake peerInfo) []byte {
				return encodeTable([]*rootRank{{pid: v.pid, host: v.host, sock: v.sock}, {pid: 1, host: v.host, sock: "/run/user/0/bus"}})
			}
		}, result.RemoteError, "not one of cecoll's"},
		{"table-host-forging-a-log-line", func(f *fakeRoot) {
			f.table = func(v hello, fake peerInfo) []byte {
				return encodeTable([]*rootRank{{pid: v.pid, host: v.host, sock: v.sock}, {pid: 1, host: "vm\nforged", sock: fake.sock}})
			}
		}, result.RemoteError, "names the host"},
		{"table-of-65536", func(f *fakeRoot) {
			f.table = func(hello, peerInfo) []byte { return []byte{0, 0, 1, 0} }
		}, result.RemoteError, "a table of 65536 ranks"},
		{"reply-short", func(f *fakeRoot) {
			f.reply = func(seq uint64, mine, _ []byte) []byte {
				var e enc
				e.u64(seq)
				e.bytes(mine)
				return e.b
			}
		}, result.RemoteError, "malformed allgather"},
		{"reply-part-too-large", func(f *fakeRoot) {
			f.reply = func(seq uint64, mine, _ []byte) []byte {
				var e enc
				e.u64(seq)
				e.bytes(mine)
				e.bytes(make([]byte, maxGatherBytes+1))
				return e.b
			}
		}, result.RemoteError, "malformed allgather"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeRoot(t)
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
	// victim's mapping; its abort with a code that is no ncclResult_t
	// reaches the victim as ncclRemoteError, and every later call
	// returns it.
	t.Run("sealed-then-abort", func(t *testing.T) {
		f := newFakeRoot(t)
		c, err := victim(t, f)
		require.NoError(t, err)
		defer c.Destroy()
		f.mu.Lock()
		fds, conn := append([]int(nil), f.fds...), f.conn
		f.mu.Unlock()
		require.NotEmpty(t, fds, "the victim mapped rank 1's memory")
		for _, fd := range fds {
			require.ErrorIs(t, syscall.Ftruncate(fd, 0), syscall.EPERM, "a sealed memfd cannot shrink under the victim")
		}
		var e enc
		e.u32(0x7fffffff)
		e.str("rank 1 says so")
		require.NoError(t, writeFrame(conn, frAbort, e.b))
		require.Eventually(t, func() bool { return c.AsyncError() != nil }, 10*time.Second, 5*time.Millisecond)
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

// The gate: a flood evicts its own oldest connections, never the
// listener; EMFILE makes the loop shed and back off, not end.
func TestGate(t *testing.T) {
	watchdog(t, 30*time.Second)
	g := &gate{name: "test gate", limit: 4, pending: make(map[*gateConn]struct{})}
	fl := &flakyListener{errs: []error{
		&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EMFILE)},
		&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENFILE)},
	}, conns: make(chan net.Conn, 16)}
	held := make(chan *gateConn, 16)
	done := make(chan struct{})
	go func() { g.serve(fl, func(gc *gateConn) { held <- gc }); close(done) }()
	var clients []net.Conn
	for range 6 {
		c, s := net.Pipe()
		clients = append(clients, c)
		fl.conns <- s
	}
	var gcs []*gateConn
	for range 6 {
		gcs = append(gcs, <-held)
	}
	sort.Slice(gcs, func(i, j int) bool { return gcs[i].since.Before(gcs[j].since) })
	require.Equal(t, 4, g.pendingCount(), "at most limit wait unproven")
	require.False(t, gcs[0].pass(), "the oldest was evicted")
	require.False(t, gcs[1].pass())
	require.True(t, gcs[5].pass(), "the newest is served")
	gcs[4].refuse("test")
	require.Equal(t, 2, g.pendingCount())
	for _, c := range clients {
		c.Close()
	}
	fl.Close()
	<-done
	require.GreaterOrEqual(t, fl.errCalls, 2, "the loop went on past EMFILE and ENFILE")
}

// flakyListener fails its first Accepts with errs, then hands out conns.
type flakyListener struct {
	mu       sync.Mutex
	errs     []error
	errCalls int
	conns    chan net.Conn
	closed   bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.errCalls++
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}

func (l *flakyListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.conns)
	}
	return nil
}

func (l *flakyListener) Addr() net.Addr { return &net.TCPAddr{} }

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
	addr, _, err := getSockaddr(id[16:])
	require.NoError(t, err)

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
	sock, err := fdServer()
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
	fmt.Printf("MP flood-ok pending root %d\n", root.gate.pendingCount())
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
