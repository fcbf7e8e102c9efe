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
var captures = captureSet{open: make(map[hip.Stream]int)}

type captureSet struct {
	mu   sync.Mutex
	open map[hip.Stream]int
}

func (c *captureSet) begin(s hip.Stream) {
	c.mu.Lock()
	c.open[s] = osthread.ID()
	c.mu.Unlock()
}

// end forgets s and reports whether the calling thread still captures
// another stream.
func (c *captureSet) end(s hip.Stream) (othersOpen bool) {
	t := osthread.ID()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, s)
	for _, tid := range c.open {
		if tid == t {
			return true
		}
	}
	return false
}

// endCapture ends the capture on s and registers the graph. It is
// instantiated now unless the calling thread still captures other streams
// (CUDA refuses instantiation then, in thread-local mode); otherwise its
// first launch instantiates it.
func endCapture(rt hip.Runtime, s hip.Stream) (uintptr, error) {
	g, err := rt.StreamEndCapture(s)
	othersOpen := captures.end(s)
	comms := comm.TakeCaptured(s)
	if err != nil {
		return 0, err
	}
	o := &graphObj{g: g, comms: comms}
	if !othersOpen {
		if o.x, err = rt.GraphInstantiate(g); err != nil {
			_ = rt.GraphDestroy(g)
			return 0, err
		}
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
