package main

import (
	"sync"

	"cecoll/internal/comm"
	"cecoll/internal/hip"
	"cecoll/internal/osthread"
)

// A cecollGraph_t is a key into graphs, never a pointer: the C side never
// dereferences it, and a garbage or destroyed key is refused
// (ncclInvalidArgument) by a map lookup. Keys are never reused, so a
// destroyed handle cannot alias a later graph.
type graphObj struct {
	mu    sync.Mutex
	g     hip.Graph     // the captured graph
	x     hip.GraphExec // 0 until instantiated
	dead  bool          // destroyed while a launch held it
	comms []*comm.Comm  // whose collectives it holds (ordered at launch)
}

var graphs = struct {
	sync.Mutex
	m    map[uintptr]*graphObj
	next uintptr
}{m: make(map[uintptr]*graphObj), next: graphKeyBase}

// graphKeyBase and graphKeyStep make keys look like aligned addresses
// (what a C program expects a handle to be) without being any.
const (
	graphKeyBase = 0x6c1a0000
	graphKeyStep = 16
)

// captures tracks the thread-local captures begun through
// cecollStreamBeginCapture: stream -> capturing OS thread. A cgo callback
// runs on the calling C thread, so gettid names it.
var captures = captureSet{open: make(map[hip.Stream]int), deferred: make(map[int][]*graphObj)}

type captureSet struct {
	mu       sync.Mutex
	open     map[hip.Stream]int  // stream -> capturing thread
	deferred map[int][]*graphObj // thread -> graphs ended while it captured others
}

func (c *captureSet) begin(s hip.Stream) {
	c.mu.Lock()
	c.open[s] = osthread.ID()
	c.mu.Unlock()
}

// end forgets s. While the calling thread still captures another stream it
// keeps o for later and returns nil; at the thread's last open capture it
// returns o with every graph kept before it, all now instantiable.
func (c *captureSet) end(s hip.Stream, o *graphObj) []*graphObj {
	t := osthread.ID()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, s)
	for _, tid := range c.open {
		if tid == t {
			c.deferred[t] = append(c.deferred[t], o)
			return nil
		}
	}
	ready := append(c.deferred[t], o)
	delete(c.deferred, t)
	return ready
}

// endCapture ends the capture on s and registers the graph. CUDA refuses
// instantiation while the calling thread captures other streams (thread-
// local mode), so a graph ended then is instantiated when the thread's last
// capture ends, with the others, so that a launch does not instantiate
// (beside replays already parked on peers). A graph whose instantiation
// fails here is tried again at its first launch.
func endCapture(rt hip.Runtime, s hip.Stream) (uintptr, error) {
	g, err := rt.StreamEndCapture(s)
	// A failed capture leaves no graph: dead, it is never instantiated.
	o := &graphObj{g: g, comms: comm.TakeCaptured(s), dead: err != nil}
	for _, r := range captures.end(s, o) {
		r.mu.Lock()
		if r.x == 0 && !r.dead {
			if x, ierr := rt.GraphInstantiate(r.g); ierr == nil {
				r.x = x
			} else if r == o {
				err = ierr
			}
		}
		r.mu.Unlock()
	}
	if err != nil {
		if !o.dead {
			_ = rt.GraphDestroy(g)
		}
		return 0, err
	}
	graphs.Lock()
	k := graphs.next
	graphs.next += graphKeyStep
	graphs.m[k] = o
	graphs.Unlock()
	return k, nil
}

func graphOf(call string, k uintptr) (*graphObj, error) {
	if k == 0 {
		return nil, argErr(call, "NULL graph")
	}
	graphs.Lock()
	o := graphs.m[k]
	graphs.Unlock()
	if o == nil {
		return nil, argErr(call, "invalid or destroyed graph")
	}
	return o, nil
}

// launchGraph queues one replay, instantiating the graph first if
// endCapture could not.
func launchGraph(call string, rt hip.Runtime, k uintptr, s hip.Stream) error {
	o, err := graphOf(call, k)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dead {
		return argErr(call, "invalid or destroyed graph")
	}
	if o.x == 0 {
		if o.x, err = rt.GraphInstantiate(o.g); err != nil {
			o.x = 0
			return err
		}
	}
	// The replay runs after each communicator's earlier work and before
	// its later work (B19).
	for _, c := range o.comms {
		if err := c.OrderBefore(s); err != nil {
			return err
		}
	}
	if err := rt.GraphLaunch(o.x, s); err != nil {
		return err
	}
	for _, c := range o.comms {
		if err := c.OrderAfter(s); err != nil {
			return err
		}
	}
	return nil
}

// destroyGraph forgets the key, then destroys the executable graph (if
// instantiated) and the captured one.
func destroyGraph(call string, rt hip.Runtime, k uintptr) error {
	o, err := graphOf(call, k)
	if err != nil {
		return err
	}
	graphs.Lock()
	if graphs.m[k] != o {
		graphs.Unlock()
		return argErr(call, "invalid or destroyed graph")
	}
	delete(graphs.m, k)
	graphs.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dead = true
	var first error
	if o.x != 0 {
		first = rt.GraphExecDestroy(o.x)
		o.x = 0
	}
	if err := rt.GraphDestroy(o.g); first == nil {
		first = err
	}
	return first
}
