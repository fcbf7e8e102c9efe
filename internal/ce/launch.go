package ce

import (
	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Launch enqueues this rank's part of a collective on a.Stream. It
// validates a, allocates nothing, and orders the call after the previous
// collective of the communicator (B19). It never waits on the host for
// peers: every rank decides the call's path from what it alone knows, alike
// under NCCL's contract that symmetric registration is symmetric (B11).
func (e *Engine) Launch(a *Args) error {
	if a == nil {
		return result.Errorf(result.InvalidUsage, "ce launch: nil arguments")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evr = evRound{} // a group that asked EventRound launches with flags after all
	if err := e.usable("ce launch"); err != nil {
		return err
	}
	if e.lazy {
		e.lazy = false
		if err := e.setup(); err != nil {
			e.live = false
			e.release()
			return err
		}
	}
	chunk, err := e.validate(a)
	if err != nil {
		return err
	}
	if seed.b16 {
		// The seed calloc'ed its parameter arrays on every call.
		n := e.n
		e.ops, e.bounds = make([]hip.MemOp, 0, 3*n+2), make([]int, n+1)
		e.dsts, e.srcs, e.sizes = make([]hip.DevicePtr, 0, n), make([]hip.DevicePtr, 0, n), make([]uintptr, 0, n)
	}
	if err := e.rt.SetDevice(e.dev); err != nil {
		return launchErr(a.Func, "set device", err)
	}
	s := a.Stream
	st, err := e.rt.StreamGetCaptureStatus(s)
	if err != nil {
		return launchErr(a.Func, "capture status", err)
	}
	if st == hip.CaptureInvalidated {
		return launchErr(a.Func, "capture status", hip.ErrStreamCaptureInvalidated)
	}
	capturing := st == hip.CaptureActive
	if err := e.orderBefore(s, capturing); err != nil {
		return launchErr(a.Func, "order after previous collective", err)
	}
	if chunk > 0 {
		if err := e.collective(a, chunk, capturing); err != nil {
			return err
		}
	}
	if err := e.orderAfter(s, capturing); err != nil {
		return launchErr(a.Func, "record end", err)
	}
	return nil
}

// collective enqueues a's copies and syncs (chunk > 0, a validated) and
// joins the side stream back; a runtime error comes back naming the call.
func (e *Engine) collective(a *Args, chunk uintptr, capturing bool) error {
	var err error
	switch a.Func {
	case FuncAllGather:
		err = e.allGather(a, chunk, capturing)
	case FuncAlltoAll:
		err = e.alltoAll(a, chunk, capturing)
	case FuncScatter:
		err = e.scatter(a, chunk, capturing)
	case FuncGather:
		err = e.gather(a, chunk, capturing)
	}
	if jerr := e.join(a.Stream); err == nil {
		err = jerr
	}
	if err == nil {
		return nil
	}
	if _, ok := err.(*result.Error); ok {
		return err
	}
	return launchErr(a.Func, "enqueue", err)
}

// usable refuses a call after Abort or Finalize; who names the caller.
func (e *Engine) usable(who string) error {
	if e.aborted {
		return result.Errorf(result.InvalidUsage, "%s: communicator aborted", who)
	}
	if !e.live {
		return result.Errorf(result.InvalidUsage, "%s: the CE engine of this communicator is finalized", who)
	}
	return nil
}

func launchErr(f Func, what string, err error) error {
	return result.Errorf(result.Of(err), "ce %s: %s: %w", funcName(f), what, err)
}

// OrderBefore makes s wait for the communicator's last eager collective.
// Call it before enqueuing on s work that holds collectives of this
// communicator without going through Launch (a graph launch), so that the
// work cannot overlap an earlier collective (B19).
func (e *Engine) OrderBefore(s hip.Stream) error { return e.orderOutside(s, true) }

// OrderAfter records the end of the work just enqueued on s (a graph
// launch) as the communicator's last collective: the next Launch on
// another stream waits for it (B19).
func (e *Engine) OrderAfter(s hip.Stream) error { return e.orderOutside(s, false) }

// orderOutside is OrderBefore (before) or OrderAfter, for work enqueued
// outside Launch and outside any capture.
func (e *Engine) orderOutside(s hip.Stream, before bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable("ce"); err != nil {
		return err
	}
	if err := e.rt.SetDevice(e.dev); err != nil {
		return err
	}
	if before {
		return e.orderBefore(s, false)
	}
	return e.orderAfter(s, false)
}

// orderBefore orders the call on s after the communicator's previous one.
// Eager: wait on the event recorded at the end of the previous eager call,
// unless it ran on s already. Under capture the engine never waits on that
// eager event: in CUDA a captured wait on an event recorded outside the
// capture becomes part of the graph only as an external-event node
// (cudaEventWaitExternal, which the runtime interface does not carry), and
// an eager event waited on inside a capture could not order later replays
// anyway. So a captured call is ordered only after the previous captured
// call of the same capture (an event recorded inside it, a legal join of
// the two streams). A graph's launch is ordered against eager calls by
// OrderBefore/OrderAfter, or by stream order when it is launched on the
// stream of the last collective.
func (e *Engine) orderBefore(s hip.Stream, capturing bool) error {
	if seed.b19 {
		return nil
	}
	if capturing {
		if !e.capValid || e.capStream == s {
			return nil
		}
		st, err := e.rt.StreamGetCaptureStatus(e.capStream)
		if err != nil || st != hip.CaptureActive {
			return nil // that capture ended: the new one starts a new graph
		}
		return e.rt.StreamWaitEvent(s, e.capEv)
	}
	if !e.evValid || e.evStream == s {
		return nil
	}
	return e.rt.StreamWaitEvent(s, e.ev)
}

func (e *Engine) orderAfter(s hip.Stream, capturing bool) error {
	if seed.b19 {
		return nil
	}
	if capturing {
		if err := e.rt.EventRecord(e.capEv, s); err != nil {
			return err
		}
		e.capStream, e.capValid = s, true
		return nil
	}
	if err := e.rt.EventRecord(e.ev, s); err != nil {
		return err
	}
	e.evStream, e.evValid = s, true
	return nil
}

// validate checks a and returns the chunk in bytes.
func (e *Engine) validate(a *Args) (uintptr, error) {
	switch a.Func {
	case FuncAllGather, FuncAlltoAll, FuncScatter, FuncGather:
	default:
		return 0, result.Errorf(result.InvalidUsage, "ce: %s cannot run on copy engines: they move data only (AllGather, AlltoAll, Scatter, Gather)", funcName(a.Func))
	}
	if a.Datatype < 0 || a.Datatype >= numTypes {
		return 0, result.Errorf(result.InvalidArgument, "ce %s: invalid datatype %d", funcName(a.Func), a.Datatype)
	}
	if !e.able {
		return 0, result.Errorf(result.InvalidUsage, "ce %s: copy engines cannot run it on this runtime (%s): stream memory operations need CUDA driver >= 12.5 or HIP >= 7.0", funcName(a.Func), e.rt.Name())
	}
	if a.EltSize != eltSizes[a.Datatype] {
		return 0, result.Errorf(result.InvalidArgument, "ce %s: element size %d does not match datatype %d (%d bytes)", funcName(a.Func), a.EltSize, a.Datatype, eltSizes[a.Datatype])
	}
	root := a.Func == FuncScatter || a.Func == FuncGather
	if root && (a.Root < 0 || a.Root >= e.n) {
		return 0, result.Errorf(result.InvalidArgument, "ce %s: root %d out of range [0, %d)", funcName(a.Func), a.Root, e.n)
	}
	const maxPtr = ^uintptr(0)
	if a.Count > maxPtr/a.EltSize || a.Count*a.EltSize > maxPtr/uintptr(e.n) {
		return 0, result.Errorf(result.InvalidArgument, "ce %s: count %d of %d-byte elements times %d ranks overflows", funcName(a.Func), a.Count, a.EltSize, e.n)
	}
	chunk := a.Count * a.EltSize
	if chunk == 0 {
		return 0, nil
	}
	isRoot := a.Root == e.rank
	needSend := !(a.Func == FuncScatter && !isRoot)
	needRecv := !(a.Func == FuncGather && !isRoot)
	if needSend && a.Send == 0 {
		return 0, result.Errorf(result.InvalidArgument, "ce %s: NULL send buffer on rank %d", funcName(a.Func), e.rank)
	}
	if needRecv && a.Recv == 0 {
		return 0, result.Errorf(result.InvalidArgument, "ce %s: NULL recv buffer on rank %d", funcName(a.Func), e.rank)
	}
	if (a.PeerSend != nil && len(a.PeerSend) != e.n) || (a.PeerRecv != nil && len(a.PeerRecv) != e.n) {
		return 0, result.Errorf(result.InvalidArgument, "ce %s: peer buffer lists must hold one entry per rank (%d)", funcName(a.Func), e.n)
	}
	return chunk, nil
}

// funcName returns static text, so error and log paths allocate only
// when they format.
func funcName(f Func) string {
	switch f {
	case FuncBroadcast:
		return "Broadcast"
	case FuncReduce:
		return "Reduce"
	case FuncAllGather:
		return "AllGather"
	case FuncReduceScatter:
		return "ReduceScatter"
	case FuncAllReduce:
		return "AllReduce"
	case FuncSendRecv:
		return "SendRecv"
	case FuncSend:
		return "Send"
	case FuncRecv:
		return "Recv"
	case FuncAlltoAll:
		return "AlltoAll"
	case FuncScatter:
		return "Scatter"
	case FuncGather:
		return "Gather"
	}
	return "unknown function"
}

// String names f as NCCL does.
func (f Func) String() string { return funcName(f) }

// logHub reports a hub round (INFO).
func (e *Engine) logHub(f Func, chunk uintptr) {
	if log.Enabled(log.LevelInfo) {
		log.Infof("ce %s: rank %d/%d chunk %d B path group, hub round at rank %d", funcName(f), e.rank, e.n, chunk, hubRoot)
	}
}

// logPath reports the path a call took (INFO; nothing is built otherwise).
func (e *Engine) logPath(f Func, p path, chunk, piece uintptr) {
	if !log.Enabled(log.LevelInfo) {
		return
	}
	rounds := uintptr(1)
	if piece > 0 {
		rounds = (chunk + piece - 1) / piece
	}
	log.Infof("ce %s: rank %d/%d chunk %d B path %s rounds %d", funcName(f), e.rank, e.n, chunk, p, rounds)
}
