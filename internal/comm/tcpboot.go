package comm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
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
	addr   *net.TCPAddr
	secret uint64
	// parent and tag: a derived id's (DerivedID): the root accepts the
	// secret as derived from its parent's.
	parent, tag uint64
	n, rank     int
	onFail      func(error)  // a peer's death or abort; never called for our own Abort
	onTable     func() error // the root answered: every rank has arrived
	onDone      func()       // the rendezvous ended, either way
	check       bool         // CECOLL_CHECK: rank 0 makes the board before its hello
	boardFD     int
	timeout     time.Duration

	connectOnce sync.Once
	connErr     error
	conn        net.Conn
	wmu         sync.Mutex
	table       []peerInfo

	seq uint64 // allgathers made by this rank (one caller at a time)

	mu      sync.Mutex
	replies map[uint64]chan [][]byte
	failCh  chan struct{}
	failErr error
	closed  bool
}

func newTCPBoot(addr *net.TCPAddr, secret uint64, n, rank int) *tcpBoot {
	return &tcpBoot{addr: addr, secret: secret, n: n, rank: rank, timeout: bootTimeout(), boardFD: -1,
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
			unpublishFD(b.secret, boardTag)
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
		if b.boardFD, err = newBoardFD(b.secret, b.n); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(b.timeout + 2*time.Second)
	d := net.Dialer{Deadline: deadline}
	conn, err := d.Dial("tcp", b.addr.String())
	if err != nil {
		return result.Errorf(result.SystemError, "bootstrap: rank %d cannot reach the root %v named in the unique id: %w", b.rank, b.addr, err)
	}
	var e enc
	e.u64(idMagic)
	e.u64(b.secret)
	e.u32(uint32(b.n))
	e.u32(uint32(b.rank))
	e.u32(uint32(os.Getpid()))
	e.str(hostname())
	e.str(sock)
	if b.parent != 0 {
		e.u64(b.parent)
		e.u64(b.tag)
	}
	conn.SetDeadline(deadline)
	if err := writeFrame(conn, frHello, e.b); err != nil {
		conn.Close()
		return result.Errorf(result.SystemError, "bootstrap: rank %d: hello to %v: %w", b.rank, b.addr, err)
	}
	br := bufio.NewReader(conn)
	typ, p, err := readFrame(br, maxFrame)
	if err != nil {
		conn.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return result.Errorf(result.RemoteError, "bootstrap: rank %d waited %v for its %d peers (a rank never arrived)", b.rank, b.timeout, b.n-1)
		}
		return result.Errorf(result.RemoteError, "bootstrap: rank %d: the root %v closed the connection before the table (a stranger or a failed communicator?): %v", b.rank, b.addr, err)
	}
	dd := dec{b: p}
	switch typ {
	case frFail:
		conn.Close()
		code, msg := result.Code(dd.u32()), dd.str()
		if dd.err != nil {
			code, msg = result.RemoteError, "malformed failure frame"
		}
		return result.Errorf(code, "%s", msg)
	case frTable:
	default:
		conn.Close()
		return result.Errorf(result.InternalError, "bootstrap: rank %d: unexpected frame type %d from the root", b.rank, typ)
	}
	n := int(dd.u32())
	table := make([]peerInfo, 0, n)
	for range n {
		table = append(table, peerInfo{pid: dd.u32(), host: dd.str(), sock: dd.str()})
	}
	if dd.err != nil || n != b.n {
		conn.Close()
		return result.Errorf(result.InternalError, "bootstrap: rank %d: malformed table from the root", b.rank)
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
	for {
		typ, p, err := readFrame(br, maxFrame)
		if err != nil {
			b.mu.Lock()
			closed := b.closed
			b.mu.Unlock()
			if !closed {
				b.peerFailed(result.Errorf(result.RemoteError, "bootstrap: rank %d lost its connection to the root %v (the root process died?): %v", b.rank, b.addr, err))
			}
			return
		}
		d := dec{b: p}
		switch typ {
		case frGather:
			seq := d.u64()
			all := make([][]byte, b.n)
			for r := range all {
				all[r] = d.bytes()
			}
			if d.err != nil {
				b.peerFailed(result.Errorf(result.InternalError, "bootstrap: rank %d: malformed allgather from the root", b.rank))
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
			code, msg := result.Code(d.u32()), d.str()
			if code == result.Success || d.err != nil {
				code = result.RemoteError
			}
			b.peerFailed(result.Errorf(code, "%s", msg))
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
	var e enc
	e.u64(b.seq)
	e.bytes(mine)
	if err := b.send(frGather, e.b); err != nil {
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
		log.Infof("bootstrap: rank %d: abort not delivered to the root (not connected)", b.rank)
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

// sameProcess reports whether rank r lives in this process.
func (b *tcpBoot) sameProcess(r int) bool {
	return b.table[r].pid == uint32(os.Getpid()) && b.table[r].host == hostname()
}

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

// newTCPID fills id's address part with this process's root listener and
// registers the id's secret there.
func newTCPID(id *ID) error {
	ln, err := startRoot()
	if err != nil {
		return err
	}
	putSockaddr(id[16:], ln.Addr().(*net.TCPAddr))
	root.mu.Lock()
	root.ids[binary.LittleEndian.Uint64(id[8:16])] = nil
	root.mu.Unlock()
	return nil
}

// attachNode switches c to the TCP bootstrap when its id names a root.
func (c *Comm) attachNode(id *ID) {
	addr, ok, _ := getSockaddr(id[16:])
	if !ok {
		return
	}
	b := newTCPBoot(addr, binary.LittleEndian.Uint64(id[8:16]), c.size, c.rank)
	b.parent, b.tag = id.derivation()
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
