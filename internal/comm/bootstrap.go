package comm

import (
	"sync"
	"time"

	"cecoll/internal/param"
	"cecoll/internal/result"
)

// Bootstrap is the host-side exchange among the ranks of one communicator.
// Every rank calls the collective methods in the same order. The in-process
// implementation is localBoot; a TCP one for several processes plugs in here.
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

// bootTimeout bounds every bootstrap wait, so a missing rank is an error
// rather than a hang: CECOLL_BOOTSTRAP_TIMEOUT seconds (default 300).
func bootTimeout() time.Duration { return param.BootstrapTimeout.Get() }

// world is the shared state of the ranks of one communicator in this process.
type world struct {
	key     uint64
	n       int
	timeout time.Duration

	mu      sync.Mutex
	joined  int
	comms   []*Comm // by rank; nil until joined and after destroy
	rounds  map[uint64]*round
	abortCh chan struct{}
	abortEr error

	// Engines that may still write into their peers' internal windows,
	// and the memory of those windows already released (shared.go).
	holds   int
	pending []sharedAlloc

	// The last ungrouped call on each stream (coll.go, claimStream).
	streams map[streamKey][]uint64
}

type round struct {
	data [][]byte
	in   int
	out  int
	done chan struct{}
}

func newWorld(key uint64, n int) *world {
	return &world{key: key, n: n, timeout: bootTimeout(), comms: make([]*Comm, n),
		rounds: make(map[uint64]*round), abortCh: make(chan struct{}), streams: make(map[streamKey][]uint64)}
}

// peer returns rank's comm (nil before it joined and after its destroy).
func (w *world) peer(rank int) *Comm {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.comms[rank]
}

func (w *world) abort(err error) {
	w.mu.Lock()
	if w.abortEr == nil {
		w.abortEr = err
		close(w.abortCh)
	}
	w.mu.Unlock()
	// A world that never completed must not keep its id reserved.
	rendezvous.Lock()
	if rendezvous.m[w.key] == w {
		delete(rendezvous.m, w.key)
	}
	rendezvous.Unlock()
}

// localBoot is one rank's in-process bootstrap.
type localBoot struct {
	w    *world
	rank int
	seq  uint64 // collective calls made by this rank
}

func (b *localBoot) Abort(err error) { b.w.abort(err) }

func (b *localBoot) Barrier() error {
	_, err := b.AllGather(nil)
	return err
}

func (b *localBoot) AllGather(mine []byte) ([][]byte, error) {
	w := b.w
	b.seq++
	w.mu.Lock()
	if w.abortEr != nil {
		err := w.abortEr
		w.mu.Unlock()
		return nil, err
	}
	r := w.rounds[b.seq]
	if r == nil {
		r = &round{data: make([][]byte, w.n), done: make(chan struct{})}
		w.rounds[b.seq] = r
	}
	r.data[b.rank] = append([]byte(nil), mine...)
	r.in++
	if r.in == w.n {
		close(r.done)
	}
	w.mu.Unlock()

	timer := time.NewTimer(w.timeout)
	defer timer.Stop()
	select {
	case <-r.done:
	case <-w.abortCh:
		select {
		case <-r.done: // the round completed before the abort: its answer stands
		default:
			return nil, result.Errorf(result.RemoteError, "bootstrap: %w", w.abortEr)
		}
	case <-timer.C:
		err := result.Errorf(result.RemoteError, "bootstrap: rank %d waited %v for its %d peers (a rank never joined or stopped calling)", b.rank, w.timeout, w.n-1)
		w.abort(err)
		return nil, err
	}
	w.mu.Lock()
	r.out++
	if r.out == w.n {
		delete(w.rounds, b.seq)
	}
	w.mu.Unlock()
	return r.data, nil
}

// rendezvous holds the worlds of ids whose ranks are still joining.
var rendezvous = struct {
	sync.Mutex
	m map[uint64]*world
}{m: make(map[uint64]*world)}

// join reserves rank in the world of key (made on first use), checking the
// arguments every rank must agree on. It never blocks on peers.
func join(key uint64, n, rank int, c *Comm) (*world, error) {
	rendezvous.Lock()
	defer rendezvous.Unlock()
	w := rendezvous.m[key]
	if w == nil {
		w = newWorld(key, n)
		rendezvous.m[key] = w
	}
	if w.n != n {
		return nil, result.Errorf(result.InvalidArgument, "nranks %d differs from the %d another rank passed with this unique id", n, w.n)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.comms[rank] != nil {
		return nil, result.Errorf(result.InvalidArgument, "rank %d already joined this unique id", rank)
	}
	w.comms[rank] = c
	w.joined++
	if w.joined == n {
		// Complete: the id may be used again for a new communicator.
		delete(rendezvous.m, key)
	}
	return w, nil
}
