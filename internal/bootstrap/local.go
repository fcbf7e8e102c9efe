package bootstrap

import (
	"sync"
	"time"

	"cecoll/internal/param"
	"cecoll/internal/result"
)

// Bootstrap is the host-side exchange among the ranks of one communicator.
// Every rank calls the collective methods in the same order. Group's
// members implement it for ranks of one process, Node for ranks that may
// live in several.
type Bootstrap interface {
	// AllGather returns every rank's bytes, indexed by rank. The result is
	// shared and read-only.
	AllGather(mine []byte) ([][]byte, error)
	// Barrier returns once every rank has entered it.
	Barrier() error
	// Abort makes every pending and later collective call of every rank
	// fail with err (a peer that died or was aborted never hangs the rest).
	Abort(err error)
}

// Timeout bounds every bootstrap wait, so a missing rank is an error
// rather than a hang: CECOLL_BOOTSTRAP_TIMEOUT seconds (default 300).
func Timeout() time.Duration { return param.BootstrapTimeout.Get() }

// Group is the exchange of the n ranks of one communicator in this
// process: allgather rounds by sequence number, and an abort that ends
// every pending and later round.
type Group struct {
	n       int
	timeout time.Duration

	mu      sync.Mutex
	rounds  map[uint64]*round
	abortCh chan struct{}
	abortEr error
}

type round struct {
	data [][]byte
	in   int
	out  int
	done chan struct{}
}

// NewGroup is the exchange of n ranks.
func NewGroup(n int) *Group {
	return &Group{n: n, timeout: Timeout(), rounds: make(map[uint64]*round), abortCh: make(chan struct{})}
}

// Abort fails every pending and later round with err (the first wins).
func (g *Group) Abort(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abortEr == nil {
		g.abortEr = err
		close(g.abortCh)
	}
}

// Member is rank's Bootstrap in the group.
func (g *Group) Member(rank int) Bootstrap { return &member{g: g, rank: rank} }

// member is one rank's in-process bootstrap.
type member struct {
	g    *Group
	rank int
	seq  uint64 // collective calls made by this rank
}

func (b *member) Abort(err error) { b.g.Abort(err) }

func (b *member) Barrier() error {
	_, err := b.AllGather(nil)
	return err
}

func (b *member) AllGather(mine []byte) ([][]byte, error) {
	g := b.g
	b.seq++
	g.mu.Lock()
	if g.abortEr != nil {
		err := g.abortEr
		g.mu.Unlock()
		return nil, err
	}
	r := g.rounds[b.seq]
	if r == nil {
		r = &round{data: make([][]byte, g.n), done: make(chan struct{})}
		g.rounds[b.seq] = r
	}
	r.data[b.rank] = append([]byte(nil), mine...)
	r.in++
	if r.in == g.n {
		close(r.done)
	}
	g.mu.Unlock()

	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	select {
	case <-r.done:
	case <-g.abortCh:
		select {
		case <-r.done: // the round completed before the abort: its answer stands
		default:
			return nil, result.Errorf(result.RemoteError, "bootstrap: %w", g.abortEr)
		}
	case <-timer.C:
		err := result.Errorf(result.RemoteError, "bootstrap: rank %d waited %v for its %d peers (a rank never joined or stopped calling)", b.rank, g.timeout, g.n-1)
		g.Abort(err)
		return nil, err
	}
	g.mu.Lock()
	r.out++
	if r.out == g.n {
		delete(g.rounds, b.seq)
	}
	g.mu.Unlock()
	return r.data, nil
}
