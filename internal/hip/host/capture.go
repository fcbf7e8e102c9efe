package host

import (
	"sync"

	"cecoll/internal/hip"
)

// errIllegalState is CUDA_ERROR_ILLEGAL_STATE (401): ending a capture on a
// stream that is not capturing, or beginning one on a capturing stream.
const errIllegalState = hip.ErrIllegalState

// capture records the ops issued to its streams instead of running them.
// Each stream of the capture is a branch (the origin is branch 0); an
// event recorded on one branch and waited on by another is a record point
// and a wait. Every branch keeps a coverage vector: for each branch, how
// many of its ops this branch's tail depends on. At the end the origin
// must cover every op of every branch (else the capture is unjoined).
type capture struct {
	rt     *Runtime
	origin *stream
	mode   hip.CaptureMode
	tid    int32

	mu       sync.Mutex
	ended    bool
	invalid  bool
	branches []*branch
	points   []recPoint
}

type branch struct {
	s   *stream
	ops []op
	cov []int
}

type recPoint struct {
	branch, pos int
	cov         []int
}

func (c *capture) active() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.ended
}

func (c *capture) invalidate() {
	c.mu.Lock()
	c.invalid = true
	c.mu.Unlock()
}

// add records o on branch b.
func (c *capture) add(b int, o *op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.invalid {
		return hip.ErrStreamCaptureInvalidated
	}
	c.branches[b].ops = append(c.branches[b].ops, *o)
	return nil
}

// record adds a record point at the end of branch b and returns its id.
func (c *capture) record(b int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.invalid {
		return 0, hip.ErrStreamCaptureInvalidated
	}
	br := c.branches[b]
	id := len(c.points)
	br.ops = append(br.ops, op{kind: opGRecord, count: id})
	cov := make([]int, len(c.branches))
	copy(cov, br.cov)
	cov[b] = len(br.ops)
	c.points = append(c.points, recPoint{branch: b, pos: len(br.ops) - 1, cov: cov})
	return id, nil
}

// join makes s wait for record point id; a stream outside the capture
// joins it as a new branch.
func (c *capture) join(s *stream, id int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return hip.ErrInvalidHandle
	}
	if s.cap != nil && s.cap != c {
		return hip.ErrStreamCaptureMerge
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.invalid {
		return hip.ErrStreamCaptureInvalidated
	}
	if s.cap == nil {
		if s.h.IsLegacyNull() {
			c.invalid = true
			return hip.ErrStreamCaptureImplicit
		}
		s.cap, s.branch = c, len(c.branches)
		c.branches = append(c.branches, &branch{s: s})
	}
	br := c.branches[s.branch]
	br.ops = append(br.ops, op{kind: opGWait, count: id})
	p := c.points[id]
	if len(br.cov) < len(p.cov) {
		br.cov = append(br.cov, make([]int, len(p.cov)-len(br.cov))...)
	}
	for i, v := range p.cov {
		br.cov[i] = max(br.cov[i], v)
	}
	return nil
}

// StreamBeginCapture implements hip.Runtime. The legacy NULL stream cannot
// capture (as in CUDA).
func (rt *Runtime) StreamBeginCapture(h hip.Stream, mode hip.CaptureMode) error {
	if mode > hip.CaptureModeRelaxed {
		return hip.ErrInvalidValue
	}
	if h.IsLegacyNull() {
		return hip.ErrStreamCaptureUnsupported
	}
	s, err := rt.lookupStream(h)
	if err != nil {
		return err
	}
	c := &capture{rt: rt, origin: s, mode: mode, tid: tid()}
	c.branches = []*branch{{s: s}}
	s.mu.Lock()
	if s.cap != nil {
		s.mu.Unlock()
		return errIllegalState
	}
	s.cap, s.branch = c, 0
	s.mu.Unlock()
	rt.capMu.Lock()
	rt.captures[c] = struct{}{}
	rt.nCaptures.Store(int32(len(rt.captures)))
	rt.capMu.Unlock()
	return nil
}

// StreamEndCapture implements hip.Runtime.
func (rt *Runtime) StreamEndCapture(h hip.Stream) (hip.Graph, error) {
	s, err := rt.lookupStream(h)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	c := s.cap
	s.mu.Unlock()
	if c == nil {
		return 0, errIllegalState
	}
	if c.origin != s {
		c.invalidate()
		return 0, hip.ErrStreamCaptureUnmatched
	}
	if c.mode != hip.CaptureModeRelaxed && c.tid != tid() {
		return 0, hip.ErrStreamCaptureWrongThread
	}
	c.mu.Lock()
	c.ended = true
	branches, points, invalid := c.branches, c.points, c.invalid
	c.mu.Unlock()
	rt.capMu.Lock()
	delete(rt.captures, c)
	rt.nCaptures.Store(int32(len(rt.captures)))
	rt.capMu.Unlock()
	for _, b := range branches {
		b.s.mu.Lock()
		if b.s.cap == c {
			b.s.cap = nil
		}
		b.s.mu.Unlock()
	}
	if invalid {
		return 0, hip.ErrStreamCaptureInvalidated
	}
	// The origin's tail must depend on all the work of every branch; a
	// branch tail of bare record/wait points does no work.
	cov := branches[0].cov
	for i := 1; i < len(branches); i++ {
		from := 0
		if i < len(cov) {
			from = cov[i]
		}
		for _, o := range branches[i].ops[from:] {
			if o.kind != opGRecord && o.kind != opGWait {
				return 0, hip.ErrStreamCaptureUnjoined
			}
		}
	}
	g := &graph{h: hip.Graph(rt.newHandle()), points: points}
	for _, b := range branches {
		g.branches = append(g.branches, b.ops)
	}
	rt.regMu.Lock()
	rt.graphs[g.h] = g
	rt.regMu.Unlock()
	return g.h, nil
}

// StreamGetCaptureStatus implements hip.Runtime.
func (rt *Runtime) StreamGetCaptureStatus(h hip.Stream) (hip.CaptureStatus, error) {
	s, err := rt.lookupStream(h)
	if err != nil {
		return hip.CaptureNone, err
	}
	c := s.capturing()
	if c == nil {
		return hip.CaptureNone, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.invalid {
		return hip.CaptureInvalidated, nil
	}
	return hip.CaptureActive, nil
}

// unsafeCall refuses a call CUDA forbids during capture (allocation, free,
// synchronous copies, graph instantiation): from any thread while a Global
// capture runs, from the capturing thread of a ThreadLocal one; a Relaxed
// capture allows them. Those captures are invalidated, as in CUDA.
func (rt *Runtime) unsafeCall() error {
	if rt.nCaptures.Load() == 0 {
		return nil
	}
	t := tid()
	var err error
	rt.capMu.Lock()
	for c := range rt.captures {
		if c.mode == hip.CaptureModeGlobal || (c.mode == hip.CaptureModeThreadLocal && c.tid == t) {
			c.invalidate()
			err = hip.ErrStreamCaptureUnsupported
		}
	}
	rt.capMu.Unlock()
	return err
}

// graph is a captured op list per branch.
type graph struct {
	h        hip.Graph
	branches [][]op
	points   []recPoint
}

// graphExec replays a graph: branch 0 on the launch stream, the others on
// streams of its own. Launches of one exec are ordered.
type graphExec struct {
	h        hip.GraphExec
	branches [][]op
	points   []recPoint
	streams  []*stream // [0] unused

	mu      sync.Mutex
	lastS   *stream
	lastSeq uint64
	launch  *stream // the stream of the launch being pushed
	starts  []uint64
}

// GraphInstantiate implements hip.Runtime. Like cuGraphInstantiate it is
// refused (ErrStreamCaptureUnsupported, invalidating the capture) while a
// Global capture is open anywhere in the process or a ThreadLocal one on
// the calling thread; callers that may run under capture instantiate
// lazily, outside it.
func (rt *Runtime) GraphInstantiate(gh hip.Graph) (hip.GraphExec, error) {
	if err := rt.unsafeCall(); err != nil {
		return 0, err
	}
	rt.regMu.RLock()
	g := rt.graphs[gh]
	rt.regMu.RUnlock()
	if g == nil {
		return 0, hip.ErrInvalidHandle
	}
	x := &graphExec{h: hip.GraphExec(rt.newHandle()), branches: g.branches, points: g.points}
	x.streams = make([]*stream, len(g.branches))
	x.starts = make([]uint64, len(g.branches))
	dev := rt.current()
	for i := 1; i < len(g.branches); i++ {
		x.streams[i] = rt.newStream(hip.Stream(rt.newHandle()), dev, true)
	}
	rt.regMu.Lock()
	rt.execs[x.h] = x
	rt.regMu.Unlock()
	return x.h, nil
}

// GraphLaunch implements hip.Runtime. Launching into a capturing stream
// (a child graph in CUDA) is not emulated: ErrStreamCaptureUnsupported.
func (rt *Runtime) GraphLaunch(xh hip.GraphExec, sh hip.Stream) error {
	rt.regMu.RLock()
	x := rt.execs[xh]
	rt.regMu.RUnlock()
	if x == nil {
		return hip.ErrInvalidHandle
	}
	s, err := rt.lookupStream(sh)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := s.lock(len(x.branches[0]) + 2); err != nil {
		return err
	}
	if s.cap != nil {
		s.mu.Unlock()
		return hip.ErrStreamCaptureUnsupported
	}
	// Op numbers of every branch's first op in this replay.
	prefix := 0
	if x.lastS != nil && x.lastS != s {
		prefix = 1
	}
	x.launch = s
	x.starts[0] = s.tail + uint64(prefix)
	for i := 1; i < len(x.branches); i++ {
		bs := x.streams[i]
		bs.mu.Lock()
		x.starts[i] = bs.tail
		bs.mu.Unlock()
	}
	for i := 1; i < len(x.branches); i++ {
		bs := x.streams[i]
		bs.mu.Lock()
		bs.reserve(len(x.branches[i]))
		x.replay(bs, i)
		bs.unlock()
	}
	if prefix == 1 {
		s.push(&op{kind: opWaitStream, ws: x.lastS, seq: x.lastSeq})
	}
	x.replay(s, 0)
	x.lastS, x.lastSeq = s, s.push(&op{kind: opNop})
	// Branch streams were left to their workers (s.mu was held); the launch
	// stream may run inline.
	s.kick()
	return nil
}

// replay pushes branch b onto s (s.mu held, room reserved), turning record
// points into no-ops and waits into waits on the recording branch's stream.
func (x *graphExec) replay(s *stream, b int) {
	for i := range x.branches[b] {
		o := x.branches[b][i]
		switch o.kind {
		case opGRecord:
			o = op{kind: opNop}
		case opGWait:
			p := x.points[o.count]
			if p.branch == b {
				o = op{kind: opNop}
				break
			}
			ws := x.launch
			if p.branch != 0 {
				ws = x.streams[p.branch]
			}
			o = op{kind: opWaitStream, ws: ws, seq: x.starts[p.branch] + uint64(p.pos)}
		}
		s.push(&o)
	}
}

// GraphDestroy implements hip.Runtime: execs made from it stay valid.
func (rt *Runtime) GraphDestroy(gh hip.Graph) error {
	rt.regMu.Lock()
	defer rt.regMu.Unlock()
	if rt.graphs[gh] == nil {
		return hip.ErrInvalidHandle
	}
	delete(rt.graphs, gh)
	return nil
}

// GraphExecDestroy implements hip.Runtime: replays already launched finish.
func (rt *Runtime) GraphExecDestroy(xh hip.GraphExec) error {
	rt.regMu.Lock()
	x := rt.execs[xh]
	delete(rt.execs, xh)
	rt.regMu.Unlock()
	if x == nil {
		return hip.ErrInvalidHandle
	}
	for _, s := range x.streams[1:] {
		s.destroy()
	}
	return nil
}
