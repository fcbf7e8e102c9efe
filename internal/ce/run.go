package ce

import (
	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Running a plan. An eager call that syncs by flags is joined to the
// caller's stream: an event recorded there is waited on by the engine's
// stream es, every step runs there, and the caller's stream waits for an
// event recorded at the end. So no flag wait ever parks the caller's
// stream, a stream shared by several ranks in a group, or the legacy NULL
// stream, and the engine knows its streams. (The caller's stream still
// waits on the end event, and an event wait holds a hardware queue as a
// flag wait does: docs/performance.md, "Do event waits hold hardware
// queues?"; internal/comm counts two per rank.) A call that syncs by
// events runs on the caller's stream itself: its waits are on events
// recorded before them, and the joins would only add two hops between one
// call's copies and the next's (docs/performance.md, "Event calls on the
// caller's stream"). Every eager call first waits for the communicator's
// latest work (B19: afterTail). A captured call forks es into the capture
// (ranks sharing a stream need the branches); es then stays in the
// capture until it ends, so an eager call meanwhile is refused (capOpen)
// rather than captured. A replay runs on the graph's own streams, ordered
// with the rest by OrderBefore and OrderAfter.
//
// A call runs as 2*steps+1 calls of Step: Step(2i) the first phase of
// plan step i (Step(0) joins in first), Step(2i+1) its second, and
// Step(2*steps) joins out. With flags, phase 0 enqueues the step's sync
// and phase 1 its copies; with events, phase 0 records and phase 1 waits,
// and a group runs every rank's Step(k) before any rank's Step(k+1).
// Launch runs them all for one rank: an ungrouped call.

// call is the prepared call.
type call struct {
	plan
	p2p       p2pPlan    // a batch of transfers (kindP2P)
	s         hip.Stream // the caller's
	ws        hip.Stream // es
	capturing bool
	events    []hip.Event // every rank's event when the call syncs by events
	side      bool        // a local copy went to the side stream
	next      int         // the next Step
	total     int         // 2*steps+1
}

// Prepared says how a prepared call runs.
type Prepared struct {
	Steps    int  // calls of Step, every rank the same
	Events   bool // it syncs by events (group step order required)
	Captured bool // it is captured into a graph
}

// Launch enqueues this rank's part of a collective on a.Stream: an
// ungrouped call. It validates a, allocates nothing, and never waits on
// the host for peers.
func (e *Engine) Launch(a *Args) error {
	if a == nil {
		return result.Errorf(result.InvalidUsage, "ce launch: nil arguments")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	pr, err := e.prepare(a)
	if err != nil {
		return err
	}
	for k := range pr.Steps {
		if err := e.step(k); err != nil {
			return err
		}
	}
	return nil
}

// Prepare validates and plans a (whose arguments its caller checked: see
// validate), enqueueing nothing: a call it refuses
// leaves no trace on any stream, so a group may refuse every rank's part
// of a call when one rank's fails. Step then runs it.
func (e *Engine) Prepare(a *Args) (Prepared, error) {
	if a == nil {
		return Prepared{}, result.Errorf(result.InvalidUsage, "ce launch: nil arguments")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.prepare(a)
}

// Step runs step k of the prepared call (see the top of the file).
func (e *Engine) Step(k int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.step(k)
}

func (e *Engine) prepare(a *Args) (Prepared, error) {
	if err := e.usable(a.Func); err != nil {
		return Prepared{}, err
	}
	if e.cur.next > 0 && e.cur.next < e.cur.total {
		return Prepared{}, result.Errorf(result.InternalError, "ce %s: the previous call stopped at step %d of %d", a.Func, e.cur.next, e.cur.total)
	}
	var chunk uintptr
	var err error
	if a.Func != FuncSendRecv {
		if chunk, err = e.validate(a); err != nil {
			return Prepared{}, err
		}
	} else if !e.able {
		return Prepared{}, result.Errorf(result.InvalidUsage, "ce %s: copy engines cannot run it on this runtime: stream memory operations need CUDA driver >= 12.5 or HIP >= 7.0", a.Func)
	}
	if err := e.rt.SetDevice(e.dev); err != nil {
		return Prepared{}, launchErr(a.Func, "set device", err)
	}
	st, err := e.rt.StreamGetCaptureStatus(a.Stream)
	if err != nil {
		return Prepared{}, launchErr(a.Func, "capture status", err)
	}
	if st == hip.CaptureInvalidated {
		return Prepared{}, launchErr(a.Func, "capture status", hip.ErrStreamCaptureInvalidated)
	}
	c := &e.cur
	c.capturing = st == hip.CaptureActive
	if a.Func == FuncSendRecv {
		if err := e.prepareP2P(a); err != nil {
			return Prepared{}, err
		}
	} else {
		if chunk == 0 {
			// NCCL: an empty collective is a no-op; it still costs nothing.
			c.total, c.next = 0, 0
			return Prepared{}, nil
		}
		if err := e.build(&c.plan, a, chunk, c.capturing); err != nil {
			return Prepared{}, err
		}
	}
	c.s, c.ws, c.side, c.events = a.Stream, e.es, false, nil
	if err := e.checkCapture(a.Func, c.capturing); err != nil {
		return Prepared{}, err
	}
	if e.chooseEvents(&c.plan, c.capturing) {
		c.events, c.ws = a.PeerEvents, a.Stream
	}
	c.total, c.next = 2*c.steps+1, 0
	e.logCall()
	return Prepared{Steps: c.total, Events: c.events != nil, Captured: c.capturing}, nil
}

// chooseEvents is the one place that picks the signal of a call: events
// where every record is enqueued before its wait on the host, that is in
// a group of one thread holding every rank (the group hands every rank's
// event: Args.PeerEvents), with every rank on one device, eagerly (a
// graph is replayed later, with no such order); flags everywhere else.
// Events are the faster there (docs/performance.md, "Events or flags").
func (e *Engine) chooseEvents(p *plan, capturing bool) bool {
	return !e.cfg.NoEvents && !capturing && p.path == pathGroup && len(p.a.PeerEvents) == e.n && e.c.OneDevice()
}

func (e *Engine) step(k int) error {
	c := &e.cur
	// A call prepared before Close: Close frees the state under mu once
	// closed is set, so a step that holds mu and sees it clear runs on
	// whole state (see freeMu).
	if e.closed.Load() {
		c.next = c.total
		return result.Errorf(result.InvalidUsage, "ce %s: the CE engine of this communicator was finalized during the call", c.a.Func)
	}
	if k != c.next || k >= c.total {
		return result.Errorf(result.InternalError, "ce %s: step %d out of order (next %d of %d)", c.a.Func, k, c.next, c.total)
	}
	c.next++
	err := e.runStep(k)
	if err != nil {
		// Part of the call may be enqueued: the communicator cannot go on
		// (internal/comm fails it and aborts the engine).
		c.next = c.total
		if _, ok := err.(*result.Error); !ok {
			err = launchErr(c.a.Func, "enqueue", err)
		}
	}
	return err
}

func (e *Engine) runStep(k int) error {
	c := &e.cur
	rt := e.rt
	if err := rt.SetDevice(e.dev); err != nil {
		return err
	}
	if k == c.total-1 {
		return e.joinOut()
	}
	if k == 0 {
		if err := e.joinIn(); err != nil {
			return err
		}
	}
	i, phase := k/2, k%2
	if c.kind == kindP2P {
		return e.p2pStep(c.ws, i, phase)
	}
	sk, root := e.fill(i)
	if phase == 0 {
		if err := e.copySeg(c.ws, segPre, segPre); err != nil {
			return err
		}
		if c.events != nil {
			return e.eventSync(c.ws, sk, root, 0, c.events)
		}
		return e.flagSync(c.ws, sk, root, c.capturing)
	}
	if c.events != nil {
		if err := e.eventSync(c.ws, sk, root, 1, c.events); err != nil {
			return err
		}
	}
	return e.copySeg(c.ws, segStage1, segStage3)
}

// joinIn makes the work stream wait for the caller's stream, and an eager
// call for the communicator's latest work; joinOut makes the caller's
// stream wait for the work stream (and the side stream for the work
// stream), and marks the end of an eager call. Each records its event
// right before its wait, on the same thread.
func (e *Engine) joinIn() error {
	c := &e.cur
	if !c.capturing {
		e.issued.Add(1) // progress: Pending watches this call from now on
		if err := e.afterTail(c.ws); err != nil {
			return err
		}
	}
	if c.ws == c.s {
		return nil
	}
	if c.capturing {
		e.capOpen = true
	}
	for _, s := range e.joinStreams() {
		// Recorded again for each stream: each wait binds to the record
		// made before it.
		if err := e.rt.EventRecord(e.evIn, s); err != nil {
			return err
		}
		if err := e.rt.StreamWaitEvent(c.ws, e.evIn); err != nil {
			return err
		}
	}
	return nil
}

// joinStreams are the caller's streams of the call: its stream, and a
// batch's other transfers' (Args.Joins); a batch that runs on the
// caller's stream joins none of it.
func (e *Engine) joinStreams() []hip.Stream {
	c := &e.cur
	e.joinBuf = append(e.joinBuf[:0], c.s)
	if c.kind == kindP2P {
		e.joinBuf = append(e.joinBuf, c.p2p.joins...)
	}
	return e.joinBuf
}

// checkCapture refuses an eager call while es is still in a capture a
// captured call forked it into: the call would become part of that graph.
// It asks the runtime only after a capture.
func (e *Engine) checkCapture(f Func, capturing bool) error {
	if !e.capOpen {
		return nil
	}
	st, err := e.rt.StreamGetCaptureStatus(e.es)
	if err != nil {
		return launchErr(f, "capture status", err)
	}
	if st == hip.CaptureNone {
		e.capOpen = false
		return nil
	}
	if capturing {
		return nil // the same capture, or the runtime refuses the join
	}
	return result.Errorf(result.InvalidUsage, "ce %s: a stream capture holding this communicator's collectives is still open: end it before issuing the communicator's eager calls", f)
}

func (e *Engine) joinOut() error {
	c := &e.cur
	if c.side {
		if err := e.rt.EventRecord(e.joinSide, e.side); err != nil {
			return err
		}
		if err := e.rt.StreamWaitEvent(c.ws, e.joinSide); err != nil {
			return err
		}
	}
	out := e.evOut
	if c.capturing {
		out = e.capOut // a captured record: never one for eager calls to wait on
	}
	if err := e.rt.EventRecord(out, c.ws); err != nil {
		return err
	}
	if !c.capturing {
		e.tailS, e.tailEv = c.ws, e.evOut
	}
	if c.ws == c.s {
		return nil
	}
	for _, s := range e.joinStreams() {
		if err := e.rt.StreamWaitEvent(s, out); err != nil {
			return err
		}
	}
	return nil
}

// sideCopyMin is the smallest own-block copy that goes to the side stream:
// below it the fork and join cost more host time than the overlap gains.
// A variable so that tests can send every copy there.
var sideCopyMin uintptr = 1 << 20

// localCopies enqueues the step's local copies (segLocal: this rank's own
// block), after what e.ops holds. A large one runs on the side stream,
// beside the pushes, since a batch's copies run one after another
// (docs/performance.md, "The own block on a side stream"); not under
// capture, where a branch of the graph would do, nor by events, whose
// order is the group's.
func (e *Engine) localCopies(s hip.Stream, capturing bool) error {
	lo, hi := e.cp.bounds(segLocal)
	if lo == hi {
		return nil
	}
	if err := e.submit(s); err != nil {
		return err
	}
	c := &e.cur
	if capturing || c.events != nil || e.side == 0 || e.cp.ops[lo].n < sideCopyMin {
		return e.copies(s, lo, hi, capturing)
	}
	if err := e.rt.EventRecord(e.fork, s); err != nil {
		return err
	}
	if err := e.rt.StreamWaitEvent(e.side, e.fork); err != nil {
		return err
	}
	c.side = true
	return e.copies(e.side, lo, hi, false)
}

// copySeg enqueues the copies of segments from..to, one batch per segment
// (the stream keeps the batches' order).
func (e *Engine) copySeg(s hip.Stream, from, to int) error {
	for g := from; g <= to; g++ {
		lo, hi := e.cp.bounds(g)
		if err := e.copies(s, lo, hi, e.cur.capturing); err != nil {
			return err
		}
	}
	return nil
}

// copies enqueues e.cp.ops[lo:hi] on s, which have no order among them:
// one batched copy where the runtime has it, else (and under capture,
// where the driver refuses it) one copy each. A single copy goes alone: a
// batch of one orders nothing, and a batch call costs about twice a plain
// copy's host time. 2D copies always go alone. Never a batch on the legacy
// NULL stream, which refuses them (B14): an event call runs there when its
// caller's stream is that one.
func (e *Engine) copies(s hip.Stream, lo, hi int, capturing bool) error {
	if lo >= hi {
		return nil
	}
	cp := &e.cp
	cp.dsts, cp.srcs, cp.sizes = cp.dsts[:0], cp.srcs[:0], cp.sizes[:0]
	batch := hi-lo > 1 && !capturing && e.caps.BatchCopy && !s.IsLegacyNull()
	for i := lo; i < hi; i++ {
		op := &cp.ops[i]
		switch {
		case op.rows > 0:
			if err := e.rt.Memcpy2DAsync(op.dst, op.dpitch, op.src, op.spitch, op.n, op.rows, s); err != nil {
				return err
			}
		case batch:
			cp.dsts, cp.srcs, cp.sizes = append(cp.dsts, op.dst), append(cp.srcs, op.src), append(cp.sizes, op.n)
		default:
			if err := e.rt.MemcpyAsync(op.dst, op.src, op.n, s); err != nil {
				return err
			}
		}
	}
	switch {
	case len(cp.dsts) == 1:
		return e.rt.MemcpyAsync(cp.dsts[0], cp.srcs[0], cp.sizes[0], s)
	case len(cp.dsts) > 1:
		attrs, idxs := e.attrs[:0], e.attrI[:0]
		if e.caps.CopyAttributes {
			// One entry for every copy (B3: only where the batch takes them).
			attrs, idxs = e.attrs[:], e.attrI[:]
		}
		return e.rt.MemcpyBatchAsync(cp.dsts, cp.srcs, cp.sizes, attrs, idxs, s)
	}
	return nil
}

// Copy-list segments, in the order a step issues them.
const (
	segPre    = iota // before the step's signal (a staged Gather peer's block into its staging)
	segLocal         // the rank's own block: after its signal, before its waits
	segStage1        // after the waits, one batch per stage
	segStage2
	segStage3
	numSegs
)

type copyOp struct {
	dst, src       hip.DevicePtr
	n              uintptr // bytes (2D: width)
	rows           uintptr // 2D copies: height; 0 for a plain copy
	dpitch, spitch uintptr
}

// copyList is a step's copies by segment, filled in segment order, with
// the batch scratch, sized at Init.
type copyList struct {
	ops   []copyOp
	start [numSegs]int // where each segment up to cur starts
	cur   int
	dsts  []hip.DevicePtr
	srcs  []hip.DevicePtr
	sizes []uintptr
}

func (l *copyList) init(capacity int) {
	l.ops = make([]copyOp, 0, capacity)
	l.dsts = make([]hip.DevicePtr, 0, capacity)
	l.srcs = make([]hip.DevicePtr, 0, capacity)
	l.sizes = make([]uintptr, 0, capacity)
}

func (l *copyList) reset() { l.ops, l.cur = l.ops[:0], 0 }

// seg makes g the segment that add fills.
func (l *copyList) seg(g int) {
	for l.cur < g {
		l.cur++
		l.start[l.cur] = len(l.ops)
	}
}

func (l *copyList) add(dst, src hip.DevicePtr, n uintptr) {
	l.ops = append(l.ops, copyOp{dst: dst, src: src, n: n})
}

func (l *copyList) addTo(g int, dst, src hip.DevicePtr, n uintptr) {
	l.seg(g)
	l.add(dst, src, n)
}

func (l *copyList) add2D(dst hip.DevicePtr, dpitch uintptr, src hip.DevicePtr, spitch, width, height uintptr) {
	l.ops = append(l.ops, copyOp{dst: dst, src: src, n: width, rows: height, dpitch: dpitch, spitch: spitch})
}

// bounds is the range of l.ops holding segment g.
func (l *copyList) bounds(g int) (int, int) {
	at := func(g int) int {
		if g > l.cur {
			return len(l.ops)
		}
		return l.start[g]
	}
	if g+1 >= numSegs {
		return at(g), len(l.ops)
	}
	return at(g), at(g + 1)
}

// validate checks what only the engine knows of a, and returns the chunk
// in bytes. The arguments themselves (collective, datatype, element size,
// root, overflow, NULL buffers, a group's root included) were checked
// once at each rank's call, by the caller (NCCL's argcheck:
// internal/comm), before a group deferred them.
func (e *Engine) validate(a *Args) (uintptr, error) {
	if !e.able {
		return 0, result.Errorf(result.InvalidUsage, "ce %s: copy engines cannot run it on this runtime: stream memory operations need CUDA driver >= 12.5 or HIP >= 7.0", a.Func)
	}
	chunk := a.Count * a.EltSize
	if chunk == 0 {
		return 0, nil
	}
	if err := e.checkPointers(a, chunk); err != nil {
		return 0, err
	}
	if (a.PeerSend != nil && len(a.PeerSend) != e.n) || (a.PeerRecv != nil && len(a.PeerRecv) != e.n) {
		return 0, result.Errorf(result.InvalidArgument, "ce %s: peer buffer lists must hold one entry per rank (%d)", a.Func, e.n)
	}
	return chunk, nil
}

// pointers remembers the device allocations buffers were found in, for
// every engine of the process (hip.PointerCache: a hit costs no driver
// call and allocates nothing).
var pointers hip.PointerCache

// checkPointers refuses buffers a copy engine cannot use asynchronously:
// unmapped memory, and where the runtime's copies would block on it
// (Caps.PageableBlocks), pageable host memory, which inside a collective
// waiting for its peers would block the host thread for good. Checked
// where the runtime needs it, or everywhere with CECOLL_CHECK_POINTERS=1.
func (e *Engine) checkPointers(a *Args, chunk uintptr) error {
	if !e.checkPtrs {
		return nil
	}
	o := OpOf(a.Func)
	for _, side := range Sides {
		if !o.Uses(side, e.rank, a.Root) {
			continue
		}
		if err := e.checkPointer(a.Func, side.String(), a.Buffer(side), o.Len(side, chunk, e.n)); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) checkPointer(f Func, what string, p hip.DevicePtr, n uintptr) error {
	k, err := pointers.Check(e.rt, p, n)
	switch {
	case err != nil:
		return result.Errorf(result.InvalidArgument, "ce %s: %s %#x: %v", f, what, uintptr(p), err)
	case k == hip.PtrHostPageable:
		return result.Errorf(result.InvalidArgument, "ce %s: %s %#x is pageable host memory, which copy engines reach only with the host waiting: use device memory (ncclMemAlloc, cudaMalloc) or pinned host memory", f, what, uintptr(p))
	case k == hip.PtrUnmapped:
		return result.Errorf(result.InvalidArgument, "ce %s: %s %#x is not mapped", f, what, uintptr(p))
	}
	return nil
}

func launchErr(f Func, what string, err error) error {
	return result.Errorf(result.Of(err), "ce %s: %s: %w", f, what, err)
}

// logCall reports the plan of a call (INFO; nothing is built otherwise).
func (e *Engine) logCall() {
	if !log.Enabled(log.LevelInfo, log.Coll) {
		return
	}
	c := &e.cur
	sig := "flags"
	if c.events != nil {
		sig = "events"
	}
	if c.capturing {
		sig += ", captured"
	}
	if c.kind == kindP2P {
		log.Infof(log.Coll, "ce %s: rank %d/%d transfers %d streams %d piece %d B rounds %d signal %s",
			c.a.Func, e.rank, e.n, len(c.p2p.ops), 1+len(c.p2p.joins), c.p2p.piece, c.rounds, sig)
		return
	}
	log.Infof(log.Coll, "ce %s: rank %d/%d chunk %d B path %s plan %s rounds %d steps %d signal %s",
		c.a.Func, e.rank, e.n, c.chunk, c.path, c.kind, c.rounds, c.steps, sig)
}
