package comm

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"cecoll/internal/ce"
	"cecoll/internal/forward"
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
	p2ps    []pendingP2P

	// launch's scratch: the set of each collective (same world and
	// sequence), every complete set's peer buffers and events, and the
	// members of the set being run.
	setOf   []int
	sets    []collSet
	index   map[setKey]int
	peers   []hip.DevicePtr
	events  []hip.Event
	members []int

	// launchP2P's scratch (p2p.go): each transfer's set, the transfers by
	// member with their numbers and streams, the members, the sends by
	// their pair.
	psets  []int
	pindex map[p2pSetKey]int
	porder []int
	xfers  []ce.Transfer
	xseq   []uint64
	xs     []hip.Stream
	joins  []hip.Stream
	pm     []p2pMember
	sends  map[pairKey]int
}

type setKey struct {
	w   *world
	seq uint64
}

// collSet is one collective's ranks in a group: how many were issued.
type collSet struct {
	key   setKey
	first int // index in colls of its first rank
	count int
}

var groupPool = sync.Pool{New: func() any {
	return &group{index: make(map[setKey]int), pindex: make(map[p2pSetKey]int), sends: make(map[pairKey]int)}
}}

// release empties g (dropping its pointers) and returns it to the pool.
func (g *group) release() {
	clear(g.inits)
	clear(g.ceInits)
	clear(g.regs)
	clear(g.colls)
	clear(g.p2ps)
	clear(g.xfers)
	clear(g.pm)
	clear(g.pindex)
	clear(g.sends)
	clear(g.peers)
	clear(g.events)
	clear(g.sets)
	clear(g.index)
	g.depth = 0
	g.inits, g.ceInits, g.regs, g.colls = g.inits[:0], g.ceInits[:0], g.regs[:0], g.colls[:0]
	g.setOf, g.sets, g.peers, g.events, g.members = g.setOf[:0], g.sets[:0], g.peers[:0], g.events[:0], g.members[:0]
	g.p2ps, g.psets, g.porder, g.xfers, g.xseq, g.xs, g.joins, g.pm = g.p2ps[:0], g.psets[:0], g.porder[:0], g.xfers[:0], g.xseq[:0], g.xs[:0], g.joins[:0], g.pm[:0]
	groupPool.Put(g)
}

type pendingColl struct {
	c   *Comm
	seq uint64
	a   ce.Args
}

var groups = struct {
	sync.Mutex
	m map[int]*group // by OS thread id
}{m: make(map[int]*group)}

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

// GroupStart is ncclGroupStart for the calling OS thread; groups nest. In
// forward mode the real library's group opens with cecoll's, on this
// thread, so forwarded calls in it are deferred to ncclGroupEnd too.
func GroupStart() error {
	if err := groupReal(true); err != nil {
		return err
	}
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
// returns its first error. In forward mode the real library's group
// closes with it: at the outermost level after cecoll's creations and
// registrations (which pair with the real library on their own threads)
// and before cecoll's collectives, so every rank enqueues a mixed group's
// forwarded calls, then its copy-engine ones, on their streams.
func GroupEnd() error {
	g, err := closeLevel("ncclGroupEnd")
	if g == nil {
		if err != nil {
			return err
		}
		return groupReal(false)
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
// collectives in issue order; then each communicator's sends and
// receives, as one batch (p2p.go). Every rank keeps that order, so a
// rank's batch never waits for a collective queued behind it.
func (g *group) run() error {
	var errs []error
	if len(g.inits)+len(g.ceInits)+len(g.regs) > 0 {
		errs = g.setUp()
	}
	if err := groupReal(false); err != nil {
		errs = append(errs, err)
	}
	if len(g.colls) > 0 {
		errs = append(errs, g.launch()...)
	}
	if len(g.p2ps) > 0 {
		errs = append(errs, g.launchP2P()...)
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
			if err := c.registerUser(w); err != nil {
				return err
			}
		}
		return nil
	})
}

// launch issues the deferred collectives. The calls of one collective
// (one world and sequence number) form a set, and sets run in the order
// of their first call. A complete set (every rank of the communicator was
// issued here) gets every rank's buffers (the group path) and events
// (chooseEvents in internal/ce decides whether to use them), so every
// rank of it takes the same plan.
//
// A set runs all or nothing: every member is prepared (planned, nothing
// enqueued) before any step runs, and a refusal of one refuses all (and,
// on several ranks, fails the communicator: Refuse). Then
// step k of every member runs before step k+1 of any: event syncs need
// each record enqueued before its wait, and so no member's stream queue
// fills with its later rounds while a peer issued by this same thread
// has not arrived (a full queue would block this thread for good), and
// members sharing a stream are all joined in before any is joined out.
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
	g.events = append(g.events[:0], make([]hip.Event, need/2)...)
	// Each engine call makes its comm's device current; the caller's
	// device comes back once, here.
	rt := g.colls[0].c.rt
	cur, err := rt.GetDevice()
	if err != nil {
		return []error{result.Errorf(result.UnhandledCudaError, "current device: %w", err)}
	}
	defer rt.SetDevice(cur)
	var errs []error
	off, evOff := 0, 0
	for j := range g.sets {
		st := &g.sets[j]
		g.members = g.members[:0]
		for i := st.first; i < len(g.colls); i++ {
			if g.setOf[i] == j {
				g.members = append(g.members, i)
			}
		}
		if err := g.agree(); err != nil {
			errs = append(errs, g.colls[g.members[0]].c.Refuse(err))
			continue
		}
		if n := st.key.w.n; st.count == n {
			send, recv := g.peers[off:off+n:off+n], g.peers[off+n:off+2*n:off+2*n]
			evs := g.events[evOff : evOff+n : evOff+n]
			off, evOff = off+2*n, evOff+n
			for _, i := range g.members {
				pc := &g.colls[i]
				r := pc.c.rank
				send[r], recv[r] = pc.a.Send, pc.a.Recv
				if eng := pc.c.engine(); eng != nil {
					evs[r] = eng.Event()
				}
			}
			for _, i := range g.members {
				g.colls[i].a.PeerSend, g.colls[i].a.PeerRecv, g.colls[i].a.PeerEvents = send, recv, evs
			}
		}
		errs = g.runSet(errs)
	}
	return errs
}

// agree checks that the members of a set describe the same collective.
func (g *group) agree() error {
	a0 := &g.colls[g.members[0]].a
	for _, i := range g.members[1:] {
		a := &g.colls[i].a
		if a.Func != a0.Func || a.Count != a0.Count || a.Datatype != a0.Datatype || (a.Func.Rooted() && a.Root != a0.Root) {
			return result.Errorf(result.InvalidUsage,
				"ranks of one grouped collective disagree: rank %d issued %s count %d %s root %d, rank %d %s count %d %s root %d",
				g.colls[g.members[0]].c.rank, a0.Func, a0.Count, ce.TypeName(a0.Datatype), a0.Root,
				g.colls[i].c.rank, a.Func, a.Count, ce.TypeName(a.Datatype), a.Root)
		}
	}
	return nil
}

// runSet prepares every member of the set in g.members, then runs its
// steps (see launch). Members are locked in rank order, one world at a
// time, so two threads never take the same communicators' locks in
// opposite orders.
func (g *group) runSet(errs []error) []error {
	ms := g.members
	slices.SortFunc(ms, func(x, y int) int { return g.colls[x].c.rank - g.colls[y].c.rank })
	for _, i := range ms {
		g.colls[i].c.engMu.Lock()
	}
	defer func() {
		for _, i := range ms {
			g.colls[i].c.engMu.Unlock()
		}
	}()
	in := func(r int) bool {
		for _, i := range ms {
			if g.colls[i].c.rank == r {
				return true
			}
		}
		return false
	}
	steps := -1
	for _, i := range ms {
		pc := &g.colls[i]
		err := pc.c.usable(pc.a.Func.String())
		if err == nil {
			// Ranks of this process outside the set, on its streams
			// (claim): a thread's group holding only some of them.
			if err = pc.c.claim(pc.a.Stream, pc.seq, in); err != nil {
				pc.c.fail(err) // as claimStream
				return append(errs, err)
			}
		}
		var pr ce.Prepared
		if err == nil {
			pr, err = pc.c.prepareLocked(&pc.a)
		}
		if err == nil && steps >= 0 && pr.Steps != steps {
			err = planMismatch(&g.colls[ms[0]], pc, pr.Steps, steps)
		}
		if err != nil {
			// Nothing of the set is enqueued, but its ranks elsewhere
			// (other threads, processes) may have issued theirs: the
			// world fails (one member's Refuse reaches every rank).
			return append(errs, pc.c.Refuse(err))
		}
		steps = pr.Steps
	}
	for k := range steps {
		for _, i := range ms {
			pc := &g.colls[i]
			if err := pc.c.stepLocked(pc.a.Func, k); err != nil {
				return append(errs, err) // the communicator failed: its peers are released
			}
		}
	}
	return errs
}

// planMismatch is the error of a set whose ranks planned different
// numbers of steps. Every plan follows from what NCCL's contract makes
// the ranks agree on, so the calls break it: it names the first argument
// that differs from the set's first member, else the buffers' windows.
func planMismatch(first, pc *pendingColl, steps, firstSteps int) error {
	a, b := &first.a, &pc.a
	what := "their buffers: every rank passes its buffer at the same offset of one NCCL_WIN_COLL_SYMMETRIC window, in the same form (in place or not), or none does (the symmetric-registration contract)"
	switch {
	case a.Count != b.Count:
		what = fmt.Sprintf("the count: rank %d passed %d, rank %d %d", first.c.rank, a.Count, pc.c.rank, b.Count)
	case a.Datatype != b.Datatype:
		what = fmt.Sprintf("the datatype: rank %d passed %s, rank %d %s", first.c.rank, ce.TypeName(a.Datatype), pc.c.rank, ce.TypeName(b.Datatype))
	case a.Root != b.Root:
		what = fmt.Sprintf("the root: rank %d passed %d, rank %d %d", first.c.rank, a.Root, pc.c.rank, b.Root)
	}
	return result.Errorf(result.InvalidUsage,
		"%s: the ranks of this group planned different copies (rank %d %d steps, rank %d %d): their calls break NCCL's contract in %s; CECOLL_CHECK=1 compares every call across all ranks",
		b.Func, first.c.rank, firstSteps, pc.c.rank, steps, what)
}

// GroupSimulateEnd is ncclGroupSimulateEnd: cecoll has no performance
// model, so it refuses (InvalidUsage), but it still closes the group level
// so the thread's later calls are not deferred forever. The outermost level
// drops the deferred work; communicators it would have created fail. In
// forward mode the real library's group closes with it, by its own
// ncclGroupSimulateEnd (info, the caller's ncclSimInfo_t), whose answer is
// returned: its estimate leaves out cecoll's part.
func GroupSimulateEnd(info unsafe.Pointer) error {
	g, err := closeLevel("ncclGroupSimulateEnd")
	if err != nil {
		return err
	}
	dropped := result.Errorf(result.InvalidUsage, "ncclGroupSimulateEnd: cecoll has no performance model to simulate a group with; the group's deferred work was dropped")
	refused := dropped
	if lib, _ := forward.Current(); lib != nil {
		refused = lib.GroupSimulateEnd(info)
	}
	if g == nil {
		return refused
	}
	for _, c := range g.inits {
		c.mu.Lock()
		c.initErr = dropped
		c.st.Store(int32(stFailed))
		c.boot.Abort(dropped)
		c.mu.Unlock()
		close(c.ready)
		c.dropGiven()
	}
	g.release()
	return refused
}
