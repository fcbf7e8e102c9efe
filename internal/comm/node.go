package comm

import (
	"sync"
	"time"

	"cecoll/internal/bootstrap"
	"cecoll/internal/peermem"
)

// Several processes of one node. An id from ncclGetUniqueId names a TCP
// bootstrap root (internal/bootstrap); ranks rendezvous there and run
// their exchanges through it, and windows cross processes as file
// descriptors (internal/peermem).

// node is the bootstrap of a communicator whose ranks may live in several
// processes: a bootstrap.Node (tests give a fake, to play a hostile peer).
type node interface {
	bootstrap.Bootstrap
	// Connect presents this rank and waits for every rank's entry.
	Connect() error
	// SameProcess and Peer read the table Connect got.
	SameProcess(r int) bool
	Peer(r int) bootstrap.Peer
	Secret() bootstrap.Secret
	// Wait bounds a wait for the peers (CECOLL_BOOTSTRAP_TIMEOUT).
	Wait() time.Duration
	// ID is the unique id the node was made from.
	ID() bootstrap.ID
	Close()
}

// newNode is rank's node of an n-rank communicator made from id, nil when
// id names no root (the in-process bootstrap).
var newNode = func(id *bootstrap.ID, n, rank int, o bootstrap.NodeOptions) node {
	if b := bootstrap.NewNode(id, n, rank, o); b != nil {
		return b
	}
	return nil
}

// nodeState is a communicator's multi-process state.
type nodeState struct {
	boot node

	mu       sync.Mutex
	imports  map[*Window][]importedMem
	winIndex map[*Window]int64 // registration order, the same on every rank
	nextWin  int64
	board    *checkBoard
	boardFD  int // rank 0, CECOLL_CHECK: the board's memfd, published for the peers (-1: none)

	stopWatch chan struct{}
	stopOnce  sync.Once
}

// attachNode switches c to the TCP bootstrap when its id names a root.
func (c *Comm) attachNode(id *ID) {
	b := newNode(id, c.size, c.rank, bootstrap.NodeOptions{
		Local:  func(r int) bool { return c.w.peer(r) != nil },
		OnFail: c.fail,
		// After the root's answer every rank of this process has joined;
		// after a failure the id must not stay reserved: either way the
		// in-process rendezvous of the id is done with.
		OnDone: c.w.leaveRendezvous,
		Socket: peermem.Socket,
	})
	if b == nil {
		return
	}
	c.node = &nodeState{boot: b, imports: make(map[*Window][]importedMem), winIndex: make(map[*Window]int64),
		boardFD: -1, stopWatch: make(chan struct{})}
	c.boot = b
}

// nodeClose leaves the TCP bootstrap cleanly (destroy, abort).
func (c *Comm) nodeClose() {
	if c.node != nil {
		c.node.stopOnce.Do(func() { close(c.node.stopWatch) })
		c.closeCheck()
		c.node.boot.Close()
	}
}

// sameProcess reports whether rank r lives in this process (for a node,
// once it connected).
func (c *Comm) sameProcess(r int) bool { return c.node == nil || c.node.boot.SameProcess(r) }

// remotePeers reports whether some rank of c lives in another process.
func (c *Comm) remotePeers() bool {
	for r := range c.size {
		if !c.sameProcess(r) {
			return true
		}
	}
	return false
}
