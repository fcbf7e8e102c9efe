package ce

import (
	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Event rounds.
//
// In a group that holds every rank of a communicator, with every rank in
// this process on one device (oneDev) and no rank's stream being captured,
// the ranks' streams order each other with runtime events instead of flags
// in device memory: a rank records an event on its stream and a peer's
// stream waits for it (StreamWaitEvent). A wait applies to the record made
// before it on the host, so the group runs every rank's part of the call in
// three steps (Engine.Step), each step for every rank before the next step
// for any:
//
//	0: order after the previous collective; record my ready event (my
//	   buffers are ready) where a peer waits for it;
//	1: wait for the ready events I need, make my copies, record my done
//	   event where a peer waits for it;
//	2: wait for the done events I need; record the end of the call (B19).
//
// Who waits for whom is the call's round on flags, hop for hop:
//
//   - released round (Scatter, Gather): the peers wait for the root's
//     ready, every rank copies its own block, the root waits for every
//     peer's done;
//   - hub round: the root waits for every peer's ready and makes every
//     copy, the peers wait for its done;
//   - one push round (AllGather, AlltoAll): every rank waits for every
//     peer's ready, pushes, and waits for every peer's done.
//
// A call that would take more rounds on flags (sub-batches, an in-place
// AlltoAll's scratch rounds) is not an event round. Nothing here touches
// the flag arrays, so event rounds and flag rounds mix in any order, and a
// wait for an event whose recorded work is stuck behind a flag wait is
// released with it by Abort.
//
// Measured on one H200 (bench/h200/relround.cu, the same chain of copies,
// 4 ranks): a 64 MiB released round took 132.5 us per collective with
// events against 153.2 with write-value flags and 154.8 with copied flags
// (the copies alone 128.2), and 18.2 us against 31.0 and 49.7 with 4 KiB
// blocks: an eager flag wait costs far more than an event wait.

// evKind is the round an event round replaces.
type evKind uint8

const (
	evNone     evKind = iota
	evReleased        // Scatter, Gather (releasedRound)
	evHub             // hubRound
	evPush            // one push round (launchRound without sub-batches)
)

func (k evKind) String() string {
	switch k {
	case evReleased:
		return "released"
	case evHub:
		return "hub"
	case evPush:
		return "push"
	}
	return "none"
}

// evRound is what an event round carries from EventRound to its steps.
type evRound struct {
	kind        evKind
	root        int // the rank the peers sync with (released, hub)
	chunk       uintptr
	stepping    bool        // inside step 1: the round functions take their event form
	ready, done []hip.Event // every rank's events, from Args
}

// Events returns this rank's ready and done events, which the group hands
// to every rank of an event round (Args.PeerReady, Args.PeerDone); 0 where
// the engine never runs event rounds.
func (e *Engine) Events() (ready, done hip.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evReady, e.evDone
}

// EventRound reports whether this rank's part of a runs as an event round
// (see above); the group asks every rank of the call and runs the steps
// only when every rank answers yes, else it launches every rank with
// Launch. a must hold every rank's buffers (PeerSend, PeerRecv) and events
// (PeerReady, PeerDone). It enqueues nothing; a call it refuses for bad
// arguments fails in Launch with its usual error.
func (e *Engine) EventRound(a *Args) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evr = evRound{}
	if a == nil || !e.live || e.aborted || e.lazy || e.evReady == 0 || e.n == 1 ||
		a.PeerSend == nil || a.PeerRecv == nil || len(a.PeerReady) != e.n || len(a.PeerDone) != e.n {
		return false
	}
	chunk, err := e.validate(a)
	if err != nil || chunk == 0 {
		return false
	}
	if e.rt.SetDevice(e.dev) != nil {
		return false
	}
	if st, err := e.rt.StreamGetCaptureStatus(a.Stream); err != nil || st != hip.CaptureNone {
		return false
	}
	r := evRound{root: a.Root, chunk: chunk, ready: a.PeerReady, done: a.PeerDone}
	switch {
	case a.Func == FuncScatter || a.Func == FuncGather:
		if a.Func == FuncGather && a.PeerRecv[a.Root] == 0 {
			return false
		}
		r.kind = evReleased
	case e.useHub(a, pathGroup, chunk):
		r.kind, r.root = evHub, hubRoot
	case a.Func == FuncAlltoAll && a.Send == a.Recv, e.subBatches(e.n, chunk) > 1:
		return false
	default:
		r.kind = evPush
	}
	e.evr = r
	if log.Enabled(log.LevelInfo) {
		log.Infof("ce %s: rank %d/%d event round (%s, sync rank %d)", funcName(a.Func), e.rank, e.n, r.kind, r.root)
	}
	return true
}

// Step runs step k (0, 1, 2) of this rank's part of the event round a, for
// which EventRound answered yes; every rank of the call runs step k before
// any runs step k+1. Like Launch it allocates nothing.
func (e *Engine) Step(a *Args, k int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable("ce launch"); err != nil {
		return err
	}
	r := &e.evr
	if r.kind == evNone {
		return result.Errorf(result.InternalError, "ce %s: event round step %d without EventRound", funcName(a.Func), k)
	}
	s, me := a.Stream, e.rank
	switch k {
	case 0:
		if err := e.rt.SetDevice(e.dev); err != nil {
			return launchErr(a.Func, "set device", err)
		}
		if err := e.orderBefore(s, false); err != nil {
			return launchErr(a.Func, "order after previous collective", err)
		}
		if (r.kind == evReleased) == (me == r.root) || r.kind == evPush {
			return e.record(a.Func, e.evReady, s)
		}
		return nil
	case 1:
		r.stepping = true
		err := e.collective(a, r.chunk, false)
		r.stepping = false
		if err != nil {
			return err
		}
		if (r.kind == evHub) == (me == r.root) || r.kind == evPush {
			return e.record(a.Func, e.evDone, s)
		}
		return nil
	case 2:
		var err error
		switch {
		case r.kind == evPush, r.kind == evReleased && me == r.root:
			err = e.waitPeers(s, r.done, -1)
		case r.kind == evHub && me != r.root:
			err = e.waitPeers(s, r.done, r.root)
		}
		*r = evRound{} // drops the group's event lists
		if err != nil {
			return launchErr(a.Func, "wait for peers", err)
		}
		if err := e.orderAfter(s, false); err != nil {
			return launchErr(a.Func, "record end", err)
		}
		return nil
	}
	return result.Errorf(result.InternalError, "ce %s: event round step %d", funcName(a.Func), k)
}

func (e *Engine) record(f Func, ev hip.Event, s hip.Stream) error {
	if err := e.rt.EventRecord(ev, s); err != nil {
		return launchErr(f, "record event", err)
	}
	return nil
}

// waitPeers makes s wait for evs[from], or for every peer's when from < 0.
func (e *Engine) waitPeers(s hip.Stream, evs []hip.Event, from int) error {
	if from >= 0 {
		return e.rt.StreamWaitEvent(s, evs[from])
	}
	for p, ev := range evs {
		if p != e.rank {
			if err := e.rt.StreamWaitEvent(s, ev); err != nil {
				return err
			}
		}
	}
	return nil
}

// evWait is step 1's wait in the event form of a round, which the round
// functions issue instead of their first flag sync while stepping: for
// the ready events of the peers this rank needs (a push round first
// copies its held-back own block, which waits for no one).
func (e *Engine) evWait(s hip.Stream) error {
	switch r := &e.evr; {
	case r.kind == evPush:
		if err := e.flushOwn(s); err != nil {
			return err
		}
		return e.waitPeers(s, r.ready, -1)
	case r.kind == evReleased && e.rank != r.root:
		return e.waitPeers(s, r.ready, r.root)
	case r.kind == evHub && e.rank == r.root:
		return e.waitPeers(s, r.ready, -1)
	}
	return nil
}
