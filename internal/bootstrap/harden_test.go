package bootstrap

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/result"
)

// The bootstrap against failing and hostile peers. A local user without
// the secret can at most delay a join; a peer holding it can at most fail
// the communicator with an error (internal/comm's hostile tests cover what
// travels inside its exchanges: windows, fds).

// The root's side: a peer holding the secret sends each bad value. The
// root (this test process) survives, holds no memory for
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
		h.sec = id.Secret()
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
			h.sec = id.Secret()
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
		id, err := NewID()
		require.NoError(t, err)
		joinNodes(t, &id, 2)
	})
}

// joinNodes makes n ranks of this process join id through its root and
// run one allgather and a barrier.
func joinNodes(t *testing.T, id *ID, n int) {
	t.Helper()
	nodes := make([]*Node, n)
	for r := range nodes {
		nodes[r] = NewNode(id, n, r, NodeOptions{Local: func(int) bool { return true }, Socket: func() (string, error) { return testSock, nil }})
		require.NotNil(t, nodes[r])
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, b := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			all, err := b.AllGather([]byte{byte(r)})
			if err == nil && len(all) != n {
				err = fmt.Errorf("%d parts", len(all))
			}
			if err == nil {
				err = b.Barrier()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for _, b := range nodes {
		b.Close()
	}
}

// fakeRoot plays the root of a 2-rank communicator whose rank 1 lives in
// "another process" it makes up: it answers the victim's (rank 0's) every
// allgather with 16 bytes of rank 1's. Each case bends one thing a
// hostile root or peer controls.
type fakeRoot struct {
	ln    net.Listener
	id    ID
	table func(victim hello, fake Peer) []byte         // the table's payload
	reply func(seq uint64, mine, theirs []byte) []byte // the allgather answer

	mu   sync.Mutex
	conn net.Conn // the victim's
}

func newFakeRoot(t *testing.T) *fakeRoot {
	f := &fakeRoot{}
	var err error
	f.ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	binary.LittleEndian.PutUint64(f.id[0:], idMagic)
	binary.LittleEndian.PutUint64(f.id[8:], uint64(time.Now().UnixNano()))
	putSockaddr(f.id[16:], f.ln.Addr().(*net.TCPAddr))
	t.Cleanup(func() { f.ln.Close() })
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
	fake := Peer{Pid: 1, Host: Hostname(), Sock: testSock}
	table := encodeTable([]*rootRank{{pid: h.pid, host: h.host, sock: h.sock}, {pid: fake.Pid, host: fake.Host, sock: fake.Sock}})
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
		theirs := make([]byte, 16)
		var e Enc
		e.U64(seq)
		e.Bytes(mine)
		e.Bytes(theirs)
		if f.reply != nil {
			e.B = f.reply(seq, mine, theirs)
		}
		writeFrame(conn, frGather, e.B)
	}
}

// The rank's side: a root (or the peer it relays) sends each bad value;
// the victim, rank 0 of a Node, fails with an error, promptly; and a
// peer's abort, with a code that is no ncclResult_t, reaches it as
// ncclRemoteError.
func TestHostileRoot(t *testing.T) {
	watchdog(t, 60*time.Second)
	victim := func(f *fakeRoot) (*Node, error) {
		b := NewNode(&f.id, 2, 0, NodeOptions{Local: func(r int) bool { return r == 0 }, Socket: func() (string, error) { return testSock, nil }})
		if err := b.Connect(); err != nil {
			return b, err
		}
		_, err := b.AllGather(make([]byte, 16))
		return b, err
	}
	for _, tc := range []struct {
		name  string
		setup func(f *fakeRoot)
		want  string
	}{
		{"table-claims-this-pid", func(f *fakeRoot) {
			f.table = func(v hello, fake Peer) []byte {
				return encodeTable([]*rootRank{{pid: v.pid, host: v.host, sock: v.sock}, {pid: v.pid, host: v.host, sock: fake.Sock}})
			}
		}, "does not run it"},
		{"table-foreign-socket", func(f *fakeRoot) {
			f.table = func(v hello, fake Peer) []byte {
				return encodeTable([]*rootRank{{pid: v.pid, host: v.host, sock: v.sock}, {pid: 1, host: v.host, sock: "/run/user/0/bus"}})
			}
		}, "not one of cecoll's"},
		{"table-host-forging-a-log-line", func(f *fakeRoot) {
			f.table = func(v hello, fake Peer) []byte {
				return encodeTable([]*rootRank{{pid: v.pid, host: v.host, sock: v.sock}, {pid: 1, host: "vm\nforged", sock: fake.Sock}})
			}
		}, "names the host"},
		{"table-of-65536", func(f *fakeRoot) {
			f.table = func(hello, Peer) []byte { return []byte{0, 0, 1, 0} }
		}, "a table of 65536 ranks"},
		{"reply-short", func(f *fakeRoot) {
			f.reply = func(seq uint64, mine, _ []byte) []byte {
				var e Enc
				e.U64(seq)
				e.Bytes(mine)
				return e.B
			}
		}, "malformed allgather"},
		{"reply-part-too-large", func(f *fakeRoot) {
			f.reply = func(seq uint64, mine, _ []byte) []byte {
				var e Enc
				e.U64(seq)
				e.Bytes(mine)
				e.Bytes(make([]byte, maxGatherBytes+1))
				return e.B
			}
		}, "malformed allgather"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeRoot(t)
			tc.setup(f)
			start := time.Now()
			b, err := victim(f)
			b.Close()
			requireCode(t, result.RemoteError, err)
			require.ErrorContains(t, err, tc.want)
			require.Less(t, time.Since(start), 8*time.Second, "refused promptly, not by a timeout")
		})
	}
	t.Run("abort-with-a-foreign-code", func(t *testing.T) {
		f := newFakeRoot(t)
		b, err := victim(f)
		require.NoError(t, err)
		defer b.Close()
		failed := make(chan error, 1)
		b.opts.OnFail = func(err error) { failed <- err }
		f.mu.Lock()
		conn := f.conn
		f.mu.Unlock()
		var e Enc
		e.U32(0x7fffffff)
		e.Str("rank 1 says so")
		require.NoError(t, writeFrame(conn, frAbort, e.B))
		select {
		case err := <-failed:
			requireCode(t, result.RemoteError, err)
			require.ErrorContains(t, err, "rank 1 says so")
		case <-time.After(10 * time.Second):
			t.Fatal("the abort did not reach the victim")
		}
		_, err = b.AllGather(nil)
		requireCode(t, result.RemoteError, err)
	})
}

// The gate: a flood evicts its own oldest connections, never the
// listener; EMFILE makes the loop shed and back off, not end.
func TestGate(t *testing.T) {
	watchdog(t, 30*time.Second)
	g := &Gate{name: "test gate", limit: 4, pending: make(map[*GateConn]struct{})}
	fl := &flakyListener{errs: []error{
		&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EMFILE)},
		&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENFILE)},
	}, conns: make(chan net.Conn, 16)}
	held := make(chan *GateConn, 16)
	done := make(chan struct{})
	go func() { g.Serve(fl, func(gc *GateConn) { held <- gc }); close(done) }()
	var clients []net.Conn
	for range 6 {
		c, s := net.Pipe()
		clients = append(clients, c)
		fl.conns <- s
	}
	var gcs []*GateConn
	for range 6 {
		gcs = append(gcs, <-held)
	}
	sort.Slice(gcs, func(i, j int) bool { return gcs[i].since.Before(gcs[j].since) })
	require.Equal(t, 4, g.pendingCount(), "at most limit wait unproven")
	require.False(t, gcs[0].Pass(), "the oldest was evicted")
	require.False(t, gcs[1].Pass())
	require.True(t, gcs[5].Pass(), "the newest is served")
	gcs[4].Refuse("test")
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
