package comm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"math"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// Fuzz targets for every decoder of what a peer sends: the bootstrap's
// frames and payloads (both sides), the fd socket's request and answer,
// the window exchange's message, the id, the CECOLL_CHECK board's slots,
// and the root's and a rank's session as a whole. Plain `go test` runs
// their seed corpora (real messages, built by the encoders the library
// sends with, and the hostile values of issue 17); `make fuzz` runs each
// for FUZZTIME. A decoder must never panic, never allocate more than its
// input can justify, and accept only what its encoder writes (round trip).

// realHello is a hello as a rank of a 4-rank communicator sends it.
func realHello(t testing.TB, rank, n int) hello {
	sock, err := fdServer()
	require.NoError(t, err)
	sec := secret{key: 0x1234_5678_9abc_def0}
	sec.tag = tagOf(sec.key)
	return hello{sec: sec, n: n, rank: rank, pid: uint32(os.Getpid()), host: hostname(), sock: sock}
}

func frame(typ byte, p []byte) []byte {
	var b bytes.Buffer
	writeFrame(&b, typ, p)
	return b.Bytes()
}

func FuzzFrame(f *testing.F) {
	h := realHello(f, 1, 4)
	f.Add(frame(frHello, h.encode()), uint16(maxHelloFrame))
	f.Add(frame(frGather, encodeGather(3, make([]byte, nodeWinMsg))), uint16(math.MaxUint16))
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
	sock, err := fdServer()
	require.NoError(f, err)
	ranks := []*rootRank{
		{pid: uint32(os.Getpid()), host: hostname(), sock: sock},
		{pid: 4242, host: hostname(), sock: sockPrefix + "4242-00112233aabbccdd"},
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
			require.True(t, validSock(e.sock))
			require.True(t, printable(e.host))
			rr[i] = &rootRank{pid: e.pid, host: e.host, sock: e.sock}
		}
		require.Equal(t, p, encodeTable(rr))
	})
}

func FuzzGather(f *testing.F) {
	f.Add(encodeGather(1, make([]byte, 16)))
	f.Add(encodeGather(2, winMsg{base: 0x7f0000001000, size: 1 << 20, allocBase: 0x7f0000000000, allocSize: 2 << 20, ok: true}.encode()))
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
		var e enc
		e.u64(seq)
		for _, b := range parts {
			e.bytes(b)
		}
		return e.b
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
	var e enc
	e.u32(0x7fffffff)
	e.str("a code that is no ncclResult_t")
	f.Add(e.b)
	f.Add([]byte{6, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add(failPayload(result.Errorf(result.RemoteError, "forged\nvm:1:1 cecoll WARN all is well")))
	f.Fuzz(func(t *testing.T, p []byte) {
		code, msg := parseFail(p)
		require.True(t, code >= result.UnhandledCudaError && code <= result.RemoteError, "code %d", code)
		require.LessOrEqual(t, len(msg), 3*maxText)
		require.Equal(t, msg, clean(msg), "no control characters reach a log line")
	})
}

// FuzzInitInfo: the init exchange (pair.go), each rank's device, process,
// host, routing policy and real library, decoded from every peer.
func FuzzInitInfo(f *testing.F) {
	f.Add((&initInfo{dev: 1, pid: 7, host: "h", policy: []byte{1, 2}, lib: "libnccl.so.2 (version 22809)"}).encode())
	f.Add((&initInfo{realID: make([]byte, 128), idErr: "no id"}).encode())
	var e enc
	e.u64(0)
	e.u64(0)
	e.u32(0xffffffff)
	f.Add(e.b)
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := decodeInit(p)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(m.host), 3*maxHost)
		require.LessOrEqual(t, len(m.lib)+len(m.idErr), 6*maxText)
		require.Equal(t, m.host, clean(m.host), "no control characters reach a log line")
		require.Equal(t, m.idErr, clean(m.idErr))
		back, err := decodeInit(m.encode())
		require.NoError(t, err)
		require.Equal(t, m.dev, back.dev)
		require.Equal(t, m.pid, back.pid)
	})
}

func FuzzFDRequest(f *testing.F) {
	sec := secret{key: 99}
	sec.tag = tagOf(sec.key)
	req := encodeFDRequest(sec, 0x7f1234560000)
	f.Add(req[:])
	req = encodeFDRequest(sec, boardTag)
	f.Add(req[:])
	f.Fuzz(func(t *testing.T, p []byte) {
		var b [fdReqBytes]byte
		copy(b[:], p)
		s, base := parseFDRequest(b)
		require.Equal(t, b, encodeFDRequest(s, base))
	})
}

// The answer's control message: whatever it holds, every fd it names is
// returned for the caller to close. (The fuzzer's fds are only numbers
// here; nothing is closed.)
func FuzzRights(f *testing.F) {
	f.Add(syscall.UnixRights(7))
	f.Add(syscall.UnixRights(7, 8, 9))
	f.Add(append(syscall.UnixRights(3), syscall.UnixRights(4)...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, oob []byte) {
		fds, err := parseRights(oob)
		if err == nil {
			require.LessOrEqual(t, 4*len(fds), len(oob))
		}
	})
}

func FuzzWinMsg(f *testing.F) {
	good := winMsg{base: 0x7f0000001000, size: 1 << 20, allocBase: 0x7f0000000000, allocSize: 2 << 20, ok: true}
	f.Add(good.encode())
	bad := good
	bad.base = bad.allocBase + hip.DevicePtr(bad.allocSize) + 4096 // outside its mapping
	f.Add(bad.encode())
	bad = good
	bad.size = math.MaxUint64 - 100 // wraps
	f.Add(bad.encode())
	bad = good
	bad.ok = false
	f.Add(bad.encode())
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := parseWinMsg(p)
		if err != nil {
			return
		}
		require.Equal(t, p, m.encode())
		if m.fits() == nil {
			lo, off := uint64(m.allocBase), uint64(m.base-m.allocBase)
			require.GreaterOrEqual(t, uint64(m.base), lo)
			require.LessOrEqual(t, off, uint64(m.allocSize))
			require.LessOrEqual(t, uint64(m.size), uint64(m.allocSize)-off)
			require.NotZero(t, m.size)
		}
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
		if _, err := id.key(); err != nil {
			require.Equal(t, result.InvalidArgument, result.Of(err))
			return
		}
		sec := id.secret()
		_ = sec.ours()
	})
}

// A CECOLL_CHECK slot as another rank wrote it, read and compared.
func FuzzBoardSlot(f *testing.F) {
	slotBytesOf := func(s sig, seq uint64) []byte {
		b := make([]byte, slotBytes)
		binary.LittleEndian.PutUint64(b[0:], seq)
		binary.LittleEndian.PutUint32(b[8:], uint32(s.fn))
		binary.LittleEndian.PutUint32(b[12:], uint32(s.dt))
		binary.LittleEndian.PutUint32(b[16:], uint32(s.root))
		binary.LittleEndian.PutUint32(b[20:], uint32(s.flags))
		binary.LittleEndian.PutUint64(b[24:], s.count)
		binary.LittleEndian.PutUint64(b[32:], uint64(s.win))
		binary.LittleEndian.PutUint64(b[40:], s.off)
		binary.LittleEndian.PutUint32(b[56:], 1)
		return b
	}
	f.Add(slotBytesOf(sig{fn: int32(ce.FuncAllGather), dt: 7, count: 4096, win: 2, off: 8192}, 1))
	f.Add(slotBytesOf(sig{fn: -1, dt: 99, root: -5, flags: -1, count: math.MaxUint64, win: -1}, 1))
	f.Fuzz(func(t *testing.T, p []byte) {
		mem := make([]byte, 2*checkRing*slotBytes)
		copy(mem[checkRing*slotBytes+slotBytes:], p) // rank 1's slot of seq 1
		b := &checkBoard{mem: mem, n: 2}
		theirs, ok := b.read(1, 1)
		if !ok {
			return
		}
		_ = theirs.String()
		for _, mine := range []sig{
			{fn: int32(ce.FuncAllGather), dt: 7, count: 4096, win: 2, off: 8192},
			{fn: int32(ce.FuncGather), dt: 7, root: 1, flags: flagInPlace, count: 4096, win: 2, off: 8192},
		} {
			_ = mine.mismatch(0, theirs, 1)
			_ = theirs.mismatch(1, mine, 0)
			_ = mine.sameCall(theirs)
		}
	})
}

// rootSession runs the root (serveConn) on two ranks of a 2-rank
// communicator over in-memory pipes: rank 0 sends a hello, one allgather
// and a bye; rank 1 a hello, then stream. It returns once the root let go
// of both.
func rootSession(t testing.TB, stream []byte) {
	sec := secret{key: uint64(time.Now().UnixNano())}
	sec.tag = tagOf(sec.key)
	g := newGate("fuzz root")
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
		var e enc
		e.u64(seq)
		for range n {
			e.bytes(make([]byte, 16))
		}
		return frame(frGather, e.b)
	}
	f.Add(reply(1, 2), uint8(2))
	f.Add(reply(1, 3), uint8(2))
	f.Add(frame(frAbort, failPayload(result.Errorf(result.RemoteError, "rank 1 aborted"))), uint8(2))
	f.Add(frame(frAbort, []byte{0x39, 0x05, 0, 0, 0, 0, 0, 0}), uint8(2)) // code 1337
	f.Add(frame(frTable, nil), uint8(2))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, frGather}, uint8(4))
	f.Fuzz(func(t *testing.T, stream []byte, n uint8) {
		b := newTCPBoot(&net.TCPAddr{}, secret{}, int(n%8)+1, 0)
		got := make(chan [][]byte, 1)
		b.replies[1] = got
		var failed error
		b.onFail = func(err error) { failed = err }
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
