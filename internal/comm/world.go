package comm

import (
	"sync"

	"cecoll/internal/bootstrap"
	"cecoll/internal/result"
)

// world is the shared state of the ranks of one communicator in this
// process: their communicators, their bootstrap exchange (a
// bootstrap.Group; with a TCP id each rank also has its bootstrap.Node),
// the lifetime of the engines' internal windows (shared.go) and the last
// ungrouped call on each stream (claimStream).
type world struct {
	key   uint64
	n     int
	group *bootstrap.Group

	mu     sync.Mutex
	joined int
	comms  []*Comm // by rank; nil until joined and after destroy

	// Engines that may still write into their peers' internal windows,
	// and the memory of those windows already released (shared.go).
	holds   int
	pending []sharedAlloc

	// The last ungrouped call on each stream (coll.go, claimStream).
	streams map[streamKey][]uint64
}

func newWorld(key uint64, n int) *world {
	return &world{key: key, n: n, group: bootstrap.NewGroup(n), comms: make([]*Comm, n),
		streams: make(map[streamKey][]uint64)}
}

// peer returns rank's comm (nil before it joined and after its destroy).
func (w *world) peer(rank int) *Comm {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.comms[rank]
}

// abort fails the world's exchange; a world that never completed must not
// keep its id reserved.
func (w *world) abort(err error) {
	w.group.Abort(err)
	w.leaveRendezvous()
}

// leaveRendezvous takes w out of the worlds still joining.
func (w *world) leaveRendezvous() {
	rendezvous.Lock()
	if rendezvous.m[w.key] == w {
		delete(rendezvous.m, w.key)
	}
	rendezvous.Unlock()
}

// localBoot is one rank's in-process bootstrap: its group's member, whose
// abort also ends the world's rendezvous.
type localBoot struct {
	bootstrap.Bootstrap
	w *world
}

func (b localBoot) Abort(err error) { b.w.abort(err) }

func newLocalBoot(w *world, rank int) localBoot {
	return localBoot{Bootstrap: w.group.Member(rank), w: w}
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
