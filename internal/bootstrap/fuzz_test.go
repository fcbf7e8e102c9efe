package bootstrap

import (
	"bufio"
	"bytes"
	"math"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/result"
)

// Fuzz targets for every decoder of what a peer sends the bootstrap: its
// frames and payloads (both sides), the id, and the root's and a rank's
// session as a whole (internal/peermem and internal/comm fuzz what travels
// inside). Plain `go test` runs their seed corpora (real messages, built
// by the encoders the library sends with, and hostile values); `make fuzz`
// runs each for FUZZTIME. A decoder must never panic, never allocate more
// than its input can justify, and accept only what its encoder writes
// (round trip).

// testSock is a socket name of the form a hello carries.
const testSock = SockPrefix + "4242-00112233aabbccdd"

// realHello is a hello as a rank of a 4-rank communicator sends it.
func realHello(t testing.TB, rank, n int) hello {
	sec := Secret{Key: 0x1234_5678_9abc_def0}
	sec.Tag = tagOf(sec.Key)
	return hello{sec: sec, n: n, rank: rank, pid: uint32(os.Getpid()), host: Hostname(), sock: testSock}
}

func frame(typ byte, p []byte) []byte {
	var b bytes.Buffer
	writeFrame(&b, typ, p)
	return b.Bytes()
}

func FuzzFrame(f *testing.F) {
	h := realHello(f, 1, 4)
	f.Add(frame(frHello, h.encode()), uint16(maxHelloFrame))
	f.Add(frame(frGather, encodeGather(3, make([]byte, 33))), uint16(math.MaxUint16))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, frHello}, uint16(maxHelloFrame)) // a huge length
	f.Add([]byte{1, 0, 0}, uint16(16))                                    // truncated header
	f.Add([]byte{8, 0, 0, 0, frGather, 1, 2}, uint16(16))                 // truncated payload
	f.Fuzz(func(t *testing.T, in []byte, limit uint16) {
		var b budget
		typ, p, err := readFrame(bufio.NewReader(bytes.NewReader(in)), int(limit), &b)
		if err != nil {
			require.Zero(t, b.used.Load(), "a failed read keeps nothing")
			return
		}
		require.LessOrEqual(t, len(p), int(limit))
		require.Equal(t, int64(len(p)), b.used.Load())
		require.Equal(t, frame(typ, p), in[:5+len(p)])
	})
}

func FuzzHello(f *testing.F) {
	h := realHello(f, 1, 4)
	f.Add(h.encode())
	h.n, h.rank = math.MaxInt32, 0
	f.Add(h.encode()) // nranks = INT_MAX
	h.n, h.rank = 2, -1
	f.Add(h.encode())
	h.rank, h.sock = 1, "/run/somebody-elses.sock"
	f.Add(h.encode())
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := parseHello(p)
		if err != nil {
			return
		}
		require.Equal(t, p, h.encode(), "one form only")
		if h.validate() == nil {
			require.True(t, h.n >= 1 && h.n <= MaxRanks && h.rank >= 0 && h.rank < h.n)
			require.True(t, validSock(h.sock))
			require.True(t, printable(h.host))
		}
	})
}

func FuzzTable(f *testing.F) {
	ranks := []*rootRank{
		{pid: uint32(os.Getpid()), host: Hostname(), sock: SockPrefix + "7-0123456789abcdef"},
		{pid: 4242, host: Hostname(), sock: testSock},
	}
	f.Add(encodeTable(ranks), uint32(2))
	f.Add(encodeTable(ranks), uint32(3))
	f.Add([]byte{0xff, 0xff, 0, 0}, uint32(65535)) // claims 65535 entries, holds none
	f.Fuzz(func(t *testing.T, p []byte, n uint32) {
		n = n%MaxRanks + 1
		table, err := parseTable(p, int(n))
		if err != nil {
			return
		}
		require.Len(t, table, int(n))
		rr := make([]*rootRank, n)
		for i, e := range table {
			require.True(t, validSock(e.Sock))
			require.True(t, printable(e.Host))
			rr[i] = &rootRank{pid: e.Pid, host: e.Host, sock: e.Sock}
		}
		require.Equal(t, p, encodeTable(rr))
	})
}

func FuzzGather(f *testing.F) {
	f.Add(encodeGather(1, make([]byte, 16)))
	f.Add(encodeGather(2, make([]byte, 33))) // a window claim's size
	f.Add(encodeGather(3, nil))
	f.Add(encodeGather(math.MaxUint64, make([]byte, maxGatherBytes+1)))
	f.Fuzz(func(t *testing.T, p []byte) {
		seq, data, err := parseGather(p)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(data), maxGatherBytes)
		require.Equal(t, p, encodeGather(seq, data))
	})
}

func FuzzGatherReply(f *testing.F) {
	reply := func(seq uint64, parts ...[]byte) []byte {
		var e Enc
		e.U64(seq)
		for _, b := range parts {
			e.Bytes(b)
		}
		return e.B
	}
	f.Add(reply(1, make([]byte, 16), make([]byte, 16)), uint32(2))
	f.Add(reply(4, []byte{1}, []byte{1}, []byte{0}), uint32(3))
	f.Add(reply(9, nil, nil), uint32(65536))
	f.Fuzz(func(t *testing.T, p []byte, n uint32) {
		n = n%MaxRanks + 1
		seq, all, err := parseGatherReply(p, int(n))
		if err != nil {
			return
		}
		require.Len(t, all, int(n))
		require.Equal(t, p, reply(seq, all...))
	})
}

func FuzzFail(f *testing.F) {
	f.Add(failPayload(result.Errorf(result.RemoteError, "rank 1 (pid 7 on h) closed its bootstrap connection")))
	f.Add(failPayload(result.Errorf(result.InvalidUsage, "bootstrap: rank 0 claimed twice")))
	var e Enc
	e.U32(0x7fffffff)
	e.Str("a code that is no ncclResult_t")
	f.Add(e.B)
	f.Add([]byte{6, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add(failPayload(result.Errorf(result.RemoteError, "forged\nvm:1:1 cecoll WARN all is well")))
	f.Fuzz(func(t *testing.T, p []byte) {
		code, msg := parseFail(p)
		require.True(t, code >= result.UnhandledCudaError && code <= result.RemoteError, "code %d", code)
		require.LessOrEqual(t, len(msg), 3*MaxText)
		require.Equal(t, msg, Clean(msg), "no control characters reach a log line")
	})
}

func FuzzID(f *testing.F) {
	id, err := NewID()
	require.NoError(f, err)
	f.Add(id[:])
	f.Add(make([]byte, IDBytes))
	v6 := id
	putSockaddr(v6[16:], &net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "lo"})
	f.Add(v6[:])
	f.Fuzz(func(t *testing.T, p []byte) {
		var id ID
		copy(id[:], p)
		if _, err := id.Key(); err != nil {
			require.Equal(t, result.InvalidArgument, result.Of(err))
			return
		}
		sec := id.Secret()
		_ = sec.ours()
	})
}

// rootSession runs the root (serveConn) on two ranks of a 2-rank
// communicator over in-memory pipes: rank 0 sends a hello, one allgather
// and a bye; rank 1 a hello, then stream. It returns once the root let go
// of both.
func rootSession(t testing.TB, stream []byte) {
	sec := Secret{Key: uint64(time.Now().UnixNano())}
	sec.Tag = tagOf(sec.Key)
	g := NewGate("fuzz root")
	var served sync.WaitGroup
	conns := make([]net.Conn, 2)
	for r := range conns {
		c, s := net.Pipe()
		conns[r] = c
		served.Add(1)
		go func() { defer served.Done(); serveConn(g.admit(s)) }()
		h := realHello(t, r, 2)
		h.sec = sec
		c.SetDeadline(time.Now().Add(5 * time.Second))
		require.NoError(t, writeFrame(c, frHello, h.encode()))
	}
	for _, c := range conns {
		typ, _, err := readFrame(bufio.NewReader(c), tableLimit(2), nil)
		require.NoError(t, err)
		require.Equal(t, frTable, typ)
		served.Add(1)
		go func() { // the rank's reader
			defer served.Done()
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}()
	}
	conns[0].Write(frame(frGather, encodeGather(1, make([]byte, 16))))
	conns[1].SetWriteDeadline(time.Now().Add(5 * time.Second))
	conns[1].Write(stream)
	conns[1].Close()
	conns[0].Write(frame(frBye, nil))
	conns[0].Close()
	done := make(chan struct{})
	go func() { served.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the root still serves a finished session")
	}
}

func FuzzRootSession(f *testing.F) {
	gather := func(seq uint64, n int) []byte { return frame(frGather, encodeGather(seq, make([]byte, n))) }
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	f.Add(cat(gather(1, 16), frame(frBye, nil)))
	f.Add(cat(gather(1, 16), gather(1, 16)))                                    // twice
	f.Add(cat(gather(2, 16)))                                                   // ahead
	f.Add(cat(gather(1, 16), gather(2, 16), gather(3, 16)))                     // running ahead
	f.Add([]byte{0x00, 0x00, 0xc0, 0x03, frGather})                             // 60 MiB announced
	f.Add(frame(frAbort, failPayload(result.Errorf(result.InvalidUsage, "x")))) // a peer's abort
	f.Add(frame(frAbort, []byte{0xff, 0xff, 0xff, 0xff}))                       // a malformed one
	f.Add(frame(frHello, nil))                                                  // a second hello
	f.Add(frame(frGather, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}))
	f.Fuzz(func(t *testing.T, stream []byte) {
		before := root.budget.used.Load()
		rootSession(t, stream)
		require.Equal(t, before, root.budget.used.Load(), "the root gave back every byte it held")
	})
}

// A rank's reader on whatever the root sends after the table.
func FuzzRankReader(f *testing.F) {
	reply := func(seq uint64, n int) []byte {
		var e Enc
		e.U64(seq)
		for range n {
			e.Bytes(make([]byte, 16))
		}
		return frame(frGather, e.B)
	}
	f.Add(reply(1, 2), uint8(2))
	f.Add(reply(1, 3), uint8(2))
	f.Add(frame(frAbort, failPayload(result.Errorf(result.RemoteError, "rank 1 aborted"))), uint8(2))
	f.Add(frame(frAbort, []byte{0x39, 0x05, 0, 0, 0, 0, 0, 0}), uint8(2)) // code 1337
	f.Add(frame(frTable, nil), uint8(2))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, frGather}, uint8(4))
	f.Fuzz(func(t *testing.T, stream []byte, n uint8) {
		var failed error
		b := &Node{addr: &net.TCPAddr{}, n: int(n%8) + 1, replies: make(map[uint64]chan [][]byte), failCh: make(chan struct{}),
			opts: NodeOptions{OnFail: func(err error) { failed = err }}}
		got := make(chan [][]byte, 1)
		b.replies[1] = got
		b.reader(bufio.NewReader(bytes.NewReader(stream)))
		require.Error(t, failed, "the stream's end is the root's loss")
		code := result.Of(failed)
		require.True(t, code >= result.UnhandledCudaError && code <= result.RemoteError, "code %d", code)
		select {
		case all := <-got:
			require.Len(t, all, b.n)
		default:
		}
	})
}
