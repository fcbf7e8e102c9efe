package comm

import (
	"sync"
	"sync/atomic"
	"syscall"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// group is one OS thread's open ncclGroupStart/End: the deferred work.
type group struct {
	depth   int
	inits   []*Comm
	ceInits []*Comm
	regs    []*Window
	colls   []pendingColl
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
	tid := syscall.Gettid()
	groups.Lock()
	defer groups.Unlock()
	return groups.m[tid]
}

func (g *group) addInit(c *Comm)   { g.inits = append(g.inits, c) }
func (g *group) addReg(w *Window)  { g.regs = append(g.regs, w) }
func (g *group) addCeInit(c *Comm) { g.ceInits = append(g.ceInits, c) }

// GroupStart is ncclGroupStart for the calling OS thread; groups nest.
func GroupStart() error {
	tid := syscall.Gettid()
	groups.Lock()
	defer groups.Unlock()
	g := groups.m[tid]
	if g == nil {
		g = &group{}
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
	return g.run()
}

// closeLevel closes one group level of the calling thread. It returns the
// group once its outermost level closed (the caller then owns its deferred
// work), else nil and an error only when the thread had no group open.
func closeLevel(call string) (*group, error) {
	tid := syscall.Gettid()
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
	var errs []error
	if len(order) > 0 {
		errs = onThreads(order, func(c *Comm) error {
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
	if len(g.colls) > 0 {
		errs = append(errs, g.launch()...)
	}
	return firstError(errs)
}

// launch issues the deferred collectives in order. A collective whose
// every rank was issued in this group gets every rank's buffers
// (Args.PeerSend/PeerRecv): each rank sees the same complete set, so all
// ranks of that call take the same path.
func (g *group) launch() []error {
	type key struct {
		w   *world
		seq uint64
	}
	sets := make(map[key][]int)
	for i, pc := range g.colls {
		k := key{pc.c.w, pc.seq}
		sets[k] = append(sets[k], i)
	}
	var errs []error
	bad := make(map[key]bool)
	for k, idx := range sets {
		if len(idx) != k.w.n {
			continue
		}
		send := make([]hip.DevicePtr, k.w.n)
		recv := make([]hip.DevicePtr, k.w.n)
		a0 := &g.colls[idx[0]].a
		for _, i := range idx {
			a := &g.colls[i].a
			if a.Func != a0.Func || a.Count != a0.Count || a.Datatype != a0.Datatype || a.Root != a0.Root {
				errs = append(errs, result.Errorf(result.InvalidUsage,
					"ranks of one grouped collective disagree: rank %d issued func %d count %d datatype %d root %d, rank %d func %d count %d datatype %d root %d",
					g.colls[idx[0]].c.rank, a0.Func, a0.Count, a0.Datatype, a0.Root, g.colls[i].c.rank, a.Func, a.Count, a.Datatype, a.Root))
				bad[k] = true
				break
			}
			r := g.colls[i].c.rank
			send[r], recv[r] = a.Send, a.Recv
		}
		if bad[k] {
			continue
		}
		for _, i := range idx {
			g.colls[i].a.PeerSend, g.colls[i].a.PeerRecv = send, recv
		}
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
		pc := &g.colls[i]
		if bad[key{pc.c.w, pc.seq}] {
			continue
		}
		if err := pc.c.launchNow(&pc.a); err != nil {
			errs = append(errs, err)
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
