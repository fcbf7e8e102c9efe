package comm

import (
	"bufio"
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

// peerInfo is one rank's entry in the table the root hands out.
type peerInfo struct {
	pid  uint32
	host string
	sock string // its process's fd-passing socket (fdpass.go)
}

// tcpBoot is one rank's bootstrap through the root listener named in the
// unique id. It connects on first use (inside the collective init, so
// several ranks created in one group connect concurrently). A reader
// goroutine takes every frame the root sends: allgather results, and the
// abort that says a peer died, which it reports at once through onFail.
type tcpBoot struct {
	addr *net.TCPAddr
	sec  secret
	// parent and dtag: a derived id's (DerivedID): the root accepts the
	// key as derived from its parent's.
	parent, dtag uint64
	n, rank      int
	local        func(r int) bool // rank r is one of this process's (its in-process world)
	onFail       func(error)      // a peer's death or abort; never called for our own Abort
	onTable      func() error     // the root answered: every rank has arrived
	onDone       func()           // the rendezvous ended, either way
	check        bool             // CECOLL_CHECK: rank 0 makes the board before its hello
	boardFD      int
	timeout      time.Duration

	connectOnce sync.Once
	connErr     error
	conn        net.Conn
	wmu         sync.Mutex
	table       []peerInfo
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

func newTCPBoot(addr *net.TCPAddr, sec secret, n, rank int) *tcpBoot {
	return &tcpBoot{addr: addr, sec: sec, n: n, rank: rank, timeout: bootTimeout(), boardFD: -1,
		replies: make(map[uint64]chan [][]byte), failCh: make(chan struct{})}
}

var hostname = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil {
		return "?"
	}
	return h
})

// connect presents this rank to the root and waits for the table.
func (b *tcpBoot) connect() error {
	b.connectOnce.Do(func() {
		b.connErr = b.dial()
		if b.connErr != nil && b.boardFD >= 0 {
			// Rank 0's CECOLL_CHECK board never reached a peer.
			unpublishFD(b.sec.key, boardTag)
			closeFD(b.boardFD)
			b.boardFD = -1
		}
		if b.onDone != nil {
			b.onDone()
		}
	})
	return b.connErr
}

func (b *tcpBoot) dial() error {
	if err := b.failed(); err != nil {
		return err
	}
	sock, err := fdServer()
	if err != nil {
		return err
	}
	if b.check && b.rank == 0 && b.boardFD < 0 {
		if b.boardFD, err = newBoardFD(b.sec, b.n); err != nil {
			return err
		}
	}
	h := hello{sec: b.sec, n: b.n, rank: b.rank, pid: uint32(os.Getpid()), host: hostname(), sock: sock, parent: b.parent, dtag: b.dtag}
	frame := h.encode()
	deadline := time.Now().Add(b.timeout + 2*time.Second)
	var conn net.Conn
	var br *bufio.Reader
	var typ byte
	var p []byte
	// The root drops a connection before any answer only when it is
	// flooded (gate.go) or the id is not its own: retry until the
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
	if b.onTable != nil {
		if err := b.onTable(); err != nil {
			b.Abort(err)
			return err
		}
	}
	go b.reader(br)
	return nil
}

// dropped is an attempt the root (or the fd socket of a peer) cut short
// before answering: worth another.
type dropped struct{ err error }

func (d dropped) Error() string { return d.err.Error() }

// transient reports whether a connect error may pass: this process out of
// fds or ports for a moment (a flood), a reset, a full backlog.
func transient(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.EAGAIN, syscall.ECONNRESET, syscall.EADDRNOTAVAIL, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// attempt makes one connection: hello, then the root's first frame.
func (b *tcpBoot) attempt(frame []byte, deadline time.Time) (net.Conn, *bufio.Reader, byte, []byte, error) {
	d := net.Dialer{Deadline: deadline}
	conn, err := d.Dial("tcp", b.addr.String())
	if err != nil {
		if transient(err) || (b.patient && errors.Is(err, syscall.ECONNREFUSED)) {
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
	return int(max(min(4+int64(n)*(12+maxHost+maxSock), rootBudget), maxText+16))
}

// checkHere records which ranks run in this process. That comes from the
// process's own world of the id (a peer cannot claim to be here: its
// window bases would then be taken as pointers into this process), and
// the table must agree.
func (b *tcpBoot) checkHere(table []peerInfo) error {
	b.here = make([]bool, b.n)
	pid, host := uint32(os.Getpid()), hostname()
	for r := range table {
		b.here[r] = r == b.rank || (b.local != nil && b.local(r))
		if claims := table[r].pid == pid && table[r].host == host; claims != b.here[r] {
			runs := "does not run it"
			if b.here[r] {
				runs = "runs it"
			}
			return fmt.Errorf("rank %d is listed as pid %d on %s, but this process (pid %d) %s", r, table[r].pid, table[r].host, pid, runs)
		}
	}
	return nil
}

func (b *tcpBoot) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failErr
}

// fail records err as the communicator's end; the first error wins.
func (b *tcpBoot) fail(err error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failErr != nil {
		return false
	}
	b.failErr = err
	close(b.failCh)
	return true
}

func (b *tcpBoot) reader(br *bufio.Reader) {
	limit := max(gatherReplyLimit(b.n), maxText+16)
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

func (b *tcpBoot) peerFailed(err error) {
	if b.fail(err) && b.onFail != nil {
		b.onFail(err)
	}
}

func (b *tcpBoot) send(typ byte, p []byte) error {
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
func (b *tcpBoot) AllGather(mine []byte) ([][]byte, error) {
	if len(mine) > maxGatherBytes {
		return nil, result.Errorf(result.InternalError, "bootstrap: an allgather of %d bytes per rank (at most %d)", len(mine), maxGatherBytes)
	}
	if err := b.connect(); err != nil {
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
func (b *tcpBoot) Barrier() error {
	_, err := b.AllGather(nil)
	return err
}

// Abort implements Bootstrap: peers learn it through the root.
func (b *tcpBoot) Abort(err error) {
	if !b.fail(err) {
		return
	}
	if b.send(frAbort, failPayload(err)) != nil {
		log.Infof(log.Bootstrap, "bootstrap: rank %d: abort not delivered to the root (not connected)", b.rank)
	}
}

// close leaves the communicator cleanly and closes the connection.
func (b *tcpBoot) close() {
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

// sameProcess reports whether rank r lives in this process (once the
// table came).
func (b *tcpBoot) sameProcess(r int) bool { return b.here[r] }

// nodeState is a communicator's multi-process state.
type nodeState struct {
	boot *tcpBoot

	mu       sync.Mutex
	imports  map[*Window][]importedMem
	winIndex map[*Window]int64 // registration order, the same on every rank
	nextWin  int64
	board    *checkBoard

	stopWatch chan struct{}
	stopOnce  sync.Once
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

// attachNode switches c to the TCP bootstrap when its id names a root.
func (c *Comm) attachNode(id *ID) {
	addr, ok, _ := getSockaddr(id[16:])
	if !ok {
		return
	}
	b := newTCPBoot(addr, id.secret(), c.size, c.rank)
	b.parent, b.dtag = id.derivation()
	b.patient = id.fromCommID()
	b.local = func(r int) bool { return c.w.peer(r) != nil }
	c.node = &nodeState{boot: b, imports: make(map[*Window][]importedMem), winIndex: make(map[*Window]int64), stopWatch: make(chan struct{})}
	b.onFail = c.fail
	b.check = checkEnabled()
	b.onDone = func() {
		// After the root's answer every rank of this process has joined;
		// after a failure the id must not stay reserved: either way the
		// in-process rendezvous of the id is done with.
		rendezvous.Lock()
		if rendezvous.m[c.w.key] == c.w {
			delete(rendezvous.m, c.w.key)
		}
		rendezvous.Unlock()
	}
	b.onTable = func() error {
		if b.check {
			return c.setupCheck(b)
		}
		return nil
	}
	c.boot = b
}

// nodeClose leaves the TCP bootstrap cleanly (destroy, abort).
func (c *Comm) nodeClose() {
	if c.node != nil {
		c.node.stopOnce.Do(func() { close(c.node.stopWatch) })
		c.closeCheck()
		c.node.boot.close()
	}
}
