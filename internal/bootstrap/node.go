package bootstrap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Peer is one rank's entry in the table the root hands out.
type Peer struct {
	Pid  uint32
	Host string
	Sock string // its process's fd-passing socket (internal/peermem); starts with SockPrefix
}

// NodeOptions are what a Node needs from its communicator.
type NodeOptions struct {
	// Local reports whether rank r is one of this process's (its
	// in-process world): a peer cannot claim to be here.
	Local func(r int) bool
	// OnFail hears a peer's death or abort; never our own Abort.
	OnFail func(error)
	// OnDone runs once the rendezvous ended, either way.
	OnDone func()
	// Socket names this process's fd-passing socket, for the hello.
	Socket func() (string, error)
}

// Node is one rank's bootstrap through the root listener named in the
// unique id. It connects on first use (inside the collective init, so
// several ranks created in one group connect concurrently). A reader
// goroutine takes every frame the root sends: allgather results, and the
// abort that says a peer died, which it reports at once through OnFail.
type Node struct {
	addr *net.TCPAddr
	sec  Secret
	// parent and dtag: a derived id's (DerivedID): the root accepts the
	// key as derived from its parent's.
	parent, dtag uint64
	n, rank      int
	opts         NodeOptions
	timeout      time.Duration

	connectOnce sync.Once
	connErr     error
	conn        net.Conn
	wmu         sync.Mutex
	table       []Peer
	here        []bool // by rank: in this process (set with table)

	seq uint64 // allgathers made by this rank (one caller at a time)

	mu      sync.Mutex
	replies map[uint64]chan [][]byte
	failCh  chan struct{}
	failErr error
	closed  bool

	// patient: the id names a given address (commid.go), where rank 0
	// may not listen yet: a refused connection is tried again.
	patient bool
}

// NewNode is rank's bootstrap of an n-rank communicator through the root
// id names; nil when id names none (an id of the in-process bootstrap).
// Nothing is connected yet (Connect).
func NewNode(id *ID, n, rank int, opts NodeOptions) *Node {
	addr, ok, _ := getSockaddr(id[16:])
	if !ok {
		return nil
	}
	b := &Node{addr: addr, sec: id.Secret(), n: n, rank: rank, opts: opts, timeout: Timeout(),
		replies: make(map[uint64]chan [][]byte), failCh: make(chan struct{})}
	b.parent, b.dtag = id.Derivation()
	b.patient = id.FromCommID()
	return b
}

// Hostname is this machine's name as ranks report it ("?" when unknown).
var Hostname = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil {
		return "?"
	}
	return h
})

// Connect presents this rank to the root and waits for the table (once;
// later calls return the first's answer).
func (b *Node) Connect() error {
	b.connectOnce.Do(func() {
		b.connErr = b.dial()
		if b.opts.OnDone != nil {
			b.opts.OnDone()
		}
	})
	return b.connErr
}

func (b *Node) dial() error {
	if err := b.failed(); err != nil {
		return err
	}
	sock, err := b.opts.Socket()
	if err != nil {
		return err
	}
	h := hello{sec: b.sec, n: b.n, rank: b.rank, pid: uint32(os.Getpid()), host: Hostname(), sock: sock, parent: b.parent, dtag: b.dtag}
	frame := h.encode()
	deadline := time.Now().Add(b.timeout + 2*time.Second)
	var conn net.Conn
	var br *bufio.Reader
	var typ byte
	var p []byte
	// The root drops a connection before any answer only when it is
	// flooded (Gate.go) or the id is not its own: retry until the
	// deadline, so that a flood delays a join and never breaks it.
	delay, drops := 5*time.Millisecond, 0
	for {
		conn, br, typ, p, err = b.attempt(frame, deadline)
		var dr dropped
		if err == nil || !errors.As(err, &dr) {
			break
		}
		drops++
		if time.Until(deadline) < delay && b.patient {
			return result.Errorf(result.RemoteError, "bootstrap: rank %d: no root answered at %v within %v (CECOLL_BOOTSTRAP_TIMEOUT): is rank 0 running, with the same CECOLL_COMM_ID or NCCL_COMM_ID? last: %v",
				b.rank, b.addr, b.timeout, dr.err)
		}
		if time.Until(deadline) < delay {
			return result.Errorf(result.RemoteError, "bootstrap: rank %d: the root %v dropped %d connections before answering within %v (CECOLL_BOOTSTRAP_TIMEOUT): is the unique id from the root's current process, or is the root flooded? last: %v",
				b.rank, b.addr, drops, b.timeout, dr.err)
		}
		switch {
		case !b.patient:
			log.Infof(log.Bootstrap, "bootstrap: rank %d: the root %v dropped the connection (%v); retrying in %v", b.rank, b.addr, dr.err, delay)
		case drops == 1:
			log.Infof(log.Bootstrap, "bootstrap: rank %d: waiting for rank 0 to listen at %v (%v)", b.rank, b.addr, dr.err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 250*time.Millisecond)
	}
	if err != nil {
		return err
	}
	switch typ {
	case frFail:
		conn.Close()
		code, msg := parseFail(p)
		return result.Errorf(code, "%s", msg)
	case frTable:
	default:
		conn.Close()
		return result.Errorf(result.RemoteError, "bootstrap: rank %d: unexpected frame type %d from the root", b.rank, typ)
	}
	table, err := parseTable(p, b.n)
	if err == nil {
		err = b.checkHere(table)
	}
	if err != nil {
		conn.Close()
		return result.Errorf(result.RemoteError, "bootstrap: rank %d: bad table from the root: %v", b.rank, err)
	}
	conn.SetDeadline(time.Time{})
	b.table = table
	b.mu.Lock()
	if b.closed || b.failErr != nil {
		b.mu.Unlock()
		conn.Close()
		if b.failErr != nil {
			return b.failErr
		}
		return result.Errorf(result.InvalidUsage, "bootstrap: communicator closed during initialisation")
	}
	b.conn = conn
	b.mu.Unlock()
	go b.reader(br)
	return nil
}

// dropped is an attempt the root cut short before answering: worth
// another.
type dropped struct{ err error }

func (d dropped) Error() string { return d.err.Error() }

// Transient reports whether a connect error may pass: this process out of
// fds or ports for a moment (a flood), a reset, a full backlog. Clients of
// a Gate retry those.
func Transient(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.EAGAIN, syscall.ECONNRESET, syscall.EADDRNOTAVAIL, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// attempt makes one connection: hello, then the root's first frame.
func (b *Node) attempt(frame []byte, deadline time.Time) (net.Conn, *bufio.Reader, byte, []byte, error) {
	d := net.Dialer{Deadline: deadline}
	conn, err := d.Dial("tcp", b.addr.String())
	if err != nil {
		if Transient(err) || (b.patient && errors.Is(err, syscall.ECONNREFUSED)) {
			return nil, nil, 0, nil, dropped{err}
		}
		return nil, nil, 0, nil, result.Errorf(result.SystemError, "bootstrap: rank %d cannot reach the root %v named in the unique id: %w", b.rank, b.addr, err)
	}
	conn.SetDeadline(deadline)
	if err := writeFrame(conn, frHello, frame); err != nil {
		conn.Close()
		return nil, nil, 0, nil, dropped{err}
	}
	br := bufio.NewReader(conn)
	typ, p, err := readFrame(br, tableLimit(b.n), nil)
	if err != nil {
		conn.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil, nil, 0, nil, result.Errorf(result.RemoteError, "bootstrap: rank %d waited %v for its %d peers (a rank never arrived)", b.rank, b.timeout, b.n-1)
		}
		return nil, nil, 0, nil, dropped{err}
	}
	return conn, br, typ, p, nil
}

// tableLimit bounds the root's first answer to a rank of an n-rank
// communicator: its table, or a failure.
func tableLimit(n int) int {
	return int(max(min(4+int64(n)*(12+MaxHost+maxSock), rootBudget), MaxText+16))
}

// checkHere records which ranks run in this process. That comes from the
// process's own world of the id (a peer cannot claim to be here: its
// window bases would then be taken as pointers into this process), and
// the table must agree.
func (b *Node) checkHere(table []Peer) error {
	b.here = make([]bool, b.n)
	pid, host := uint32(os.Getpid()), Hostname()
	for r := range table {
		b.here[r] = r == b.rank || (b.opts.Local != nil && b.opts.Local(r))
		if claims := table[r].Pid == pid && table[r].Host == host; claims != b.here[r] {
			runs := "does not run it"
			if b.here[r] {
				runs = "runs it"
			}
			return fmt.Errorf("rank %d is listed as pid %d on %s, but this process (pid %d) %s", r, table[r].Pid, table[r].Host, pid, runs)
		}
	}
	return nil
}

func (b *Node) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failErr
}

// fail records err as the communicator's end; the first error wins.
func (b *Node) fail(err error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failErr != nil {
		return false
	}
	b.failErr = err
	close(b.failCh)
	return true
}

func (b *Node) reader(br *bufio.Reader) {
	limit := max(gatherReplyLimit(b.n), MaxText+16)
	for {
		typ, p, err := readFrame(br, limit, nil)
		if err != nil {
			b.mu.Lock()
			closed := b.closed
			b.mu.Unlock()
			if !closed {
				b.peerFailed(result.Errorf(result.RemoteError, "bootstrap: rank %d lost its connection to the root %v (the root process died?): %v", b.rank, b.addr, err))
			}
			return
		}
		switch typ {
		case frGather:
			seq, all, err := parseGatherReply(p, b.n)
			if err != nil {
				b.peerFailed(result.Errorf(result.RemoteError, "bootstrap: rank %d: malformed allgather from the root: %v", b.rank, err))
				continue
			}
			b.mu.Lock()
			ch := b.replies[seq]
			delete(b.replies, seq)
			b.mu.Unlock()
			if ch != nil {
				ch <- all
			}
		case frAbort:
			code, msg := parseFail(p)
			b.peerFailed(result.Errorf(code, "%s", msg))
		default:
			b.peerFailed(result.Errorf(result.RemoteError, "bootstrap: rank %d: unexpected frame type %d from the root", b.rank, typ))
		}
	}
}

func (b *Node) peerFailed(err error) {
	if b.fail(err) && b.opts.OnFail != nil {
		b.opts.OnFail(err)
	}
}

func (b *Node) send(typ byte, p []byte) error {
	b.mu.Lock()
	conn := b.conn
	b.mu.Unlock()
	if conn == nil {
		return fmt.Errorf("not connected")
	}
	b.wmu.Lock()
	defer b.wmu.Unlock()
	conn.SetWriteDeadline(time.Now().Add(b.timeout))
	return writeFrame(conn, typ, p)
}

// AllGather implements Bootstrap.
func (b *Node) AllGather(mine []byte) ([][]byte, error) {
	if len(mine) > maxGatherBytes {
		return nil, result.Errorf(result.InternalError, "bootstrap: an allgather of %d bytes per rank (at most %d)", len(mine), maxGatherBytes)
	}
	if err := b.Connect(); err != nil {
		return nil, err
	}
	b.seq++
	ch := make(chan [][]byte, 1)
	b.mu.Lock()
	if b.failErr != nil {
		err := b.failErr
		b.mu.Unlock()
		return nil, result.Errorf(result.Of(err), "bootstrap: %w", err)
	}
	b.replies[b.seq] = ch
	b.mu.Unlock()
	if err := b.send(frGather, encodeGather(b.seq, mine)); err != nil {
		err = result.Errorf(result.RemoteError, "bootstrap: rank %d: send to the root: %w", b.rank, err)
		b.peerFailed(err)
		return nil, err
	}
	timer := time.NewTimer(b.timeout)
	defer timer.Stop()
	select {
	case all := <-ch:
		return all, nil
	case <-b.failCh:
		select {
		case all := <-ch:
			// The round completed before the failure (the reader
			// delivers frames in order): every rank gets the same
			// answer, and a rank that fails on it fails alike.
			return all, nil
		default:
		}
		err := b.failed()
		return nil, result.Errorf(result.Of(err), "bootstrap: %w", err)
	case <-timer.C:
		err := result.Errorf(result.RemoteError, "bootstrap: rank %d waited %v for its %d peers (a rank stopped calling)", b.rank, b.timeout, b.n-1)
		b.Abort(err)
		return nil, err
	}
}

// Barrier implements Bootstrap.
func (b *Node) Barrier() error {
	_, err := b.AllGather(nil)
	return err
}

// Abort implements Bootstrap: peers learn it through the root.
func (b *Node) Abort(err error) {
	if !b.fail(err) {
		return
	}
	if b.send(frAbort, failPayload(err)) != nil {
		log.Infof(log.Bootstrap, "bootstrap: rank %d: abort not delivered to the root (not connected)", b.rank)
	}
}

// Close leaves the communicator cleanly and closes the connection.
func (b *Node) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	conn := b.conn
	b.mu.Unlock()
	if conn == nil {
		return
	}
	b.wmu.Lock()
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	writeFrame(conn, frBye, nil)
	b.wmu.Unlock()
	conn.Close()
}

// SameProcess reports whether rank r lives in this process (once
// Connect succeeded).
func (b *Node) SameProcess(r int) bool { return b.here[r] }

// Peer is rank r's entry of the table (once Connect succeeded).
func (b *Node) Peer(r int) Peer { return b.table[r] }

// Secret is the id's secret, which peers' fd sockets ask for too.
func (b *Node) Secret() Secret { return b.sec }

// Wait bounds a wait for this communicator's peers
// (CECOLL_BOOTSTRAP_TIMEOUT).
func (b *Node) Wait() time.Duration { return b.timeout }

// ID is the unique id this node was made from (Split and Shrink derive
// their children's from it).
func (b *Node) ID() ID {
	var id ID
	binary.LittleEndian.PutUint64(id[0:8], idMagic)
	binary.LittleEndian.PutUint64(id[8:16], b.sec.Key)
	putSockaddr(id[16:], b.addr)
	copy(id[tagOff:], b.sec.Tag[:])
	binary.LittleEndian.PutUint64(id[derivedOff:], b.parent)
	binary.LittleEndian.PutUint64(id[derivedOff+8:], b.dtag)
	return id
}

// newTCPID fills id's address part with this process's root listener.
func newTCPID(id *ID) error {
	ln, err := startRoot()
	if err != nil {
		return err
	}
	putSockaddr(id[16:], ln.Addr().(*net.TCPAddr))
	return nil
}
