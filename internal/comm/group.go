package comm

import (
	"sync"
	"sync/atomic"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/osthread"
	"cecoll/internal/result"
)

// group is one OS thread's open ncclGroupStart/End: the deferred work.
// Finished groups go back to groupPool with their slices emptied, so that
// a steady stream of grouped collectives allocates nothing.
type group struct {
	depth   int
	inits   []*Comm
	ceInits []*Comm
	regs    []*Window
	colls   []pendingColl

	// launch's scratch: the set of each collective (same world and
	// sequence), and every complete set's peer buffers and events.
	setOf  []int
	sets   []collSet
	index  map[setKey]int
	peers  []hip.DevicePtr
	events []hip.Event
}

type setKey struct {
	w   *world
	seq uint64
}

// collSet is one collective's ranks in a group: how many were issued, and
// whether they disagree.
type collSet struct {
	key     setKey
	first   int // index in colls of its first rank
	count   int
	bad     bool
	evented bool        // runs as an event round (eventSet)
	events  []hip.Event // every rank's ready then done events (eventSet)
}

var groupPool = sync.Pool{New: func() any { return &group{index: make(map[setKey]int)} }}

// release empties g (dropping its pointers) and returns it to the pool.
func (g *group) release() {
	clear(g.inits)
	clear(g.ceInits)
	clear(g.regs)
	clear(g.colls)
	clear(g.peers)
	clear(g.events)
	clear(g.sets)
	clear(g.index)
	g.depth = 0
	g.inits, g.ceInits, g.regs, g.colls = g.inits[:0], g.ceInits[:0], g.regs[:0], g.colls[:0]
	g.setOf, g.sets, g.peers, g.events = g.setOf[:0], g.sets[:0], g.peers[:0], g.events[:0]
	groupPool.Put(g)
}

type pendingColl struct {
	c      *Comm
	seq    uint64
	a      ce.Args
	failed bool // a step of its event round failed: it takes no further step
}

var groups = struct {
	sync.Mutex
	m map[int]*group // by OS thread id
}{m: make(map[int]*group)}

// eventRounds counts the event rounds run (runEventSet), for tests.
var eventRounds atomic.Uint64

// openGroups counts threads inside a group, so that the common case (no
// group anywhere) skips the lookup on the launch path.
var openGroups atomic.Int32

// currentGroup is the calling thread's open group, or nil.
func currentGroup() *group {
	if openGroups.Load() == 0 {
		return nil
	}
	tid := osthread.ID()
	groups.Lock()
	defer groups.Unlock()
	return groups.m[tid]
}

func (g *group) addInit(c *Comm)   { g.inits = append(g.inits, c) }
func (g *group) addReg(w *Window)  { g.regs = append(g.regs, w) }
func (g *group) addCeInit(c *Comm) { g.ceInits = append(g.ceInits, c) }

// GroupStart is ncclGroupStart for the calling OS thread; groups nest.
func GroupStart() error {
	tid := osthread.ID()
	groups.Lock()
	defer groups.Unlock()
	g := groups.m[tid]
	if g == nil {
		g = groupPool.Get().(*group)
		groups.m[tid] = g
		openGroups.Add(1)
	}
	g.depth++
	return nil
}

// GroupEnd is ncclGroupEnd: the outermost one runs the deferred work and
// returns its first error.
func GroupEnd() error {
	g, err := closeLevel("ncclGroupEnd")
	if g == nil {
		return err
	}
	defer g.release()
	return g.run()
}

// closeLevel closes one group level of the calling thread. It returns the
// group once its outermost level closed (the caller then owns its deferred
// work), else nil and an error only when the thread had no group open.
func closeLevel(call string) (*group, error) {
	tid := osthread.ID()
	groups.Lock()
	defer groups.Unlock()
	g := groups.m[tid]
	if g == nil {
		return nil, result.Errorf(result.InvalidUsage, "%s without ncclGroupStart on this thread", call)
	}
	g.depth--
	if g.depth > 0 {
		return nil, nil
	}
	delete(groups.m, tid)
	openGroups.Add(-1)
	return g, nil
}

// run executes a finished group: creations, ncclCeInit and registrations
// first, all communicators concurrently (they are collective, and one
// thread may hold every rank), each comm's own in that order; then the
// collectives in issue order.
func (g *group) run() error {
	var errs []error
	if len(g.inits)+len(g.ceInits)+len(g.regs) > 0 {
		errs = g.setUp()
	}
	if len(g.colls) > 0 {
		errs = append(errs, g.launch()...)
	}
	return firstError(errs)
}

// setUp runs the group's creations, ncclCeInit calls and registrations.
func (g *group) setUp() []error {
	var order []*Comm
	jobs := make(map[*Comm]*[]*Window)
	initing := make(map[*Comm]bool)
	ceIniting := make(map[*Comm]bool)
	add := func(c *Comm) *[]*Window {
		if j, ok := jobs[c]; ok {
			return j
		}
		j := new([]*Window)
		jobs[c] = j
		order = append(order, c)
		return j
	}
	for _, c := range g.inits {
		add(c)
		initing[c] = true
	}
	for _, c := range g.ceInits {
		add(c)
		ceIniting[c] = true
	}
	for _, w := range g.regs {
		j := add(w.c)
		*j = append(*j, w)
	}
	return onThreads(order, func(c *Comm) error {
		if initing[c] {
			if err := c.runInit(); err != nil {
				return err
			}
		}
		if ceIniting[c] {
			if err := c.ceInitNow(); err != nil {
				return err
			}
		}
		for _, w := range *jobs[c] {
			if err := c.usable("ncclCommWindowRegister"); err != nil {
				return err
			}
			if err := c.register(w); err != nil {
				return err
			}
		}
		return nil
	})
}

// launch issues the deferred collectives in order. A collective whose
// every rank was issued in this group gets every rank's buffers
// (Args.PeerSend/PeerRecv): each rank sees the same complete set, so all
// ranks of that call take the same path.
func (g *group) launch() []error {
	for i := range g.colls {
		pc := &g.colls[i]
		k := setKey{pc.c.w, pc.seq}
		j, ok := g.index[k]
		if !ok {
			j = len(g.sets)
			g.index[k] = j
			g.sets = append(g.sets, collSet{key: k, first: i})
		}
		g.sets[j].count++
		g.setOf = append(g.setOf, j)
	}
	need := 0
	for _, st := range g.sets {
		if st.count == st.key.w.n {
			need += 2 * st.key.w.n
		}
	}
	g.peers = append(g.peers[:0], make([]hip.DevicePtr, need)...) // grows once; no allocation after
	g.events = append(g.events[:0], make([]hip.Event, need)...)
	var errs []error
	off := 0
	for j := range g.sets {
		st := &g.sets[j]
		n := st.key.w.n
		if st.count != n {
			continue
		}
		send, recv := g.peers[off:off+n:off+n], g.peers[off+n:off+2*n:off+2*n]
		off += 2 * n
		a0 := &g.colls[st.first].a
		for i := st.first; i < len(g.colls); i++ {
			if g.setOf[i] != j {
				continue
			}
			a := &g.colls[i].a
			if a.Func != a0.Func || a.Count != a0.Count || a.Datatype != a0.Datatype || a.Root != a0.Root {
				errs = append(errs, result.Errorf(result.InvalidUsage,
					"ranks of one grouped collective disagree: rank %d issued func %d count %d datatype %d root %d, rank %d func %d count %d datatype %d root %d",
					g.colls[st.first].c.rank, a0.Func, a0.Count, a0.Datatype, a0.Root, g.colls[i].c.rank, a.Func, a.Count, a.Datatype, a.Root))
				st.bad = true
				break
			}
			r := g.colls[i].c.rank
			send[r], recv[r] = a.Send, a.Recv
		}
		if st.bad {
			continue
		}
		for i := st.first; i < len(g.colls); i++ {
			if g.setOf[i] == j {
				g.colls[i].a.PeerSend, g.colls[i].a.PeerRecv = send, recv
			}
		}
		st.events = g.events[off-2*n : off : off]
	}
	// Each launch makes its comm's device current; the caller's device
	// comes back once, here, not after every rank (each device switch is
	// a driver call, or a system call on the host device).
	rt := g.colls[0].c.rt
	cur, err := rt.GetDevice()
	if err != nil {
		return append(errs, result.Errorf(result.UnhandledCudaError, "current device: %w", err))
	}
	defer rt.SetDevice(cur)
	for i := range g.colls {
		st := &g.sets[g.setOf[i]]
		switch {
		case st.bad:
			continue
		case i == st.first && g.eventSet(st):
			st.evented = true
			errs = g.runEventSet(st, errs)
		}
		if st.evented {
			continue
		}
		if err := g.colls[i].c.launchNow(&g.colls[i].a); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// eventSet reports whether the complete set st runs as an event round
// (internal/ce event.go): its ranks were issued one right after another,
// so that running them together keeps every stream's order of calls, and
// every rank's engine takes it (ce.Engine.EventRound). It hands every rank
// the events of all.
func (g *group) eventSet(st *collSet) bool {
	n := st.key.w.n
	if st.events == nil || st.first+n > len(g.colls) {
		return false
	}
	for i := st.first + 1; i < st.first+n; i++ {
		if g.setOf[i] != g.setOf[st.first] {
			return false
		}
	}
	ready, done := st.events[:n:n], st.events[n:]
	for i := st.first; i < st.first+n; i++ {
		c := g.colls[i].c
		c.engMu.Lock()
		if ee, ok := c.eng.(eventEngine); ok {
			ready[c.rank], done[c.rank] = ee.Events()
		}
		c.engMu.Unlock()
		if ready[c.rank] == 0 {
			return false
		}
	}
	for i := st.first; i < st.first+n; i++ {
		pc := &g.colls[i]
		pc.a.PeerReady, pc.a.PeerDone = ready, done
		if pc.c.usable(FuncName(pc.a.Func)) != nil {
			return false
		}
		pc.c.engMu.Lock()
		ee, ok := pc.c.eng.(eventEngine)
		ok = ok && ee.EventRound(&pc.a)
		pc.c.engMu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// runEventSet runs the event round of st: step k for every rank before
// step k+1 for any (ce.Engine.Step). A rank whose step fails takes no
// further step; the others go on, since an event wait never hangs on a
// record that was not made (it waits for the one before).
func (g *group) runEventSet(st *collSet, errs []error) []error {
	eventRounds.Add(1)
	n := st.key.w.n
	for k := range 3 {
		for i := st.first; i < st.first+n; i++ {
			pc := &g.colls[i]
			if pc.failed {
				continue
			}
			if err := pc.c.stepNow(&pc.a, k); err != nil {
				pc.failed = true
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// GroupSimulateEnd is ncclGroupSimulateEnd: cecoll has no performance
// model, so it refuses (InvalidUsage), but it still closes the group level
// so the thread's later calls are not deferred forever. The outermost level
// drops the deferred work; communicators it would have created fail.
func GroupSimulateEnd() error {
	g, err := closeLevel("ncclGroupSimulateEnd")
	if err != nil {
		return err
	}
	refused := result.Errorf(result.InvalidUsage, "ncclGroupSimulateEnd: cecoll has no performance model to simulate a group with; the group's deferred work was dropped")
	if g == nil {
		return refused
	}
	for _, c := range g.inits {
		c.mu.Lock()
		c.initErr = refused
		c.st.Store(int32(stFailed))
		c.boot.Abort(refused)
		c.mu.Unlock()
		close(c.ready)
	}
	return refused
}
