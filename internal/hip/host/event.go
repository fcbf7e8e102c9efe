package host

import (
	"sync"
	"time"

	"cecoll/internal/hip"
)

// event remembers its most recent record: the stream and op number of the
// marker (or, under capture, the graph record point).
type event struct {
	h     hip.Event
	flags hip.EventFlags

	mu    sync.Mutex
	gen   uint64  // records made so far
	s     *stream // stream of the latest record; nil: never recorded (complete)
	seq   uint64  // op number of the latest record's marker on s
	tgen  uint64  // record number whose marker ran last
	ts    time.Duration
	cap   *capture // non-nil: the latest record was captured, at point capID
	capID int
}

// mark runs on the worker when the marker of record number gen executes.
func (e *event) mark(gen uint64, now time.Duration) {
	e.mu.Lock()
	if gen > e.tgen {
		e.tgen, e.ts = gen, now
	}
	e.mu.Unlock()
}

func (rt *Runtime) lookupEvent(h hip.Event) (*event, error) {
	rt.regMu.RLock()
	e := rt.events[h]
	rt.regMu.RUnlock()
	if e == nil {
		return nil, hip.ErrInvalidHandle
	}
	return e, nil
}

// EventCreate implements hip.Runtime.
func (rt *Runtime) EventCreate(flags hip.EventFlags) (hip.Event, error) {
	if flags&^(hip.EventBlockingSync|hip.EventDisableTiming|4 /* interprocess */) != 0 {
		return 0, hip.ErrInvalidValue
	}
	e := &event{h: hip.Event(rt.newHandle()), flags: flags}
	rt.regMu.Lock()
	rt.events[e.h] = e
	rt.regMu.Unlock()
	return e.h, nil
}

// EventDestroy implements hip.Runtime: a pending record still completes.
func (rt *Runtime) EventDestroy(h hip.Event) error {
	rt.regMu.Lock()
	e := rt.events[h]
	delete(rt.events, h)
	rt.regMu.Unlock()
	if e == nil {
		return hip.ErrInvalidHandle
	}
	return nil
}

// EventRecord implements hip.Runtime.
func (rt *Runtime) EventRecord(h hip.Event, sh hip.Stream) error {
	e, err := rt.lookupEvent(h)
	if err != nil {
		return err
	}
	s, err := rt.lookupStream(sh)
	if err != nil {
		return err
	}
	// Lock order: the stream, then the event. s.lock may wait for room
	// until the worker drains ops, and a worker running an earlier marker
	// of this event takes e.mu (mark): holding e.mu across that wait
	// deadlocked a 4-rank group of 500 Gathers on the host device.
	if err := s.lock(1); err != nil {
		return err
	}
	e.mu.Lock()
	if c := s.cap; c != nil {
		id, err := c.record(s.branch)
		s.mu.Unlock()
		if err == nil {
			e.cap, e.capID, e.s = c, id, nil
		}
		e.mu.Unlock()
		return err
	}
	e.gen++
	seq := s.push(&op{kind: opRecord, ev: e, seq: e.gen})
	e.s, e.seq, e.cap = s, seq, nil
	// Released before kick: an inline run of the marker takes e.mu.
	e.mu.Unlock()
	s.kick()
	return nil
}

// state returns the latest record's stream and op number (s nil: none),
// or ErrCapturedEvent when it was recorded in a capture still running.
func (e *event) state() (*stream, uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cap != nil {
		if e.cap.active() {
			return nil, 0, hip.ErrCapturedEvent
		}
		// The capture ended: that record never runs eagerly.
		return nil, 0, nil
	}
	return e.s, e.seq, nil
}

// EventSynchronize implements hip.Runtime. A record whose stream failed
// at or before it returns the stream's sticky error.
func (rt *Runtime) EventSynchronize(h hip.Event) error {
	e, err := rt.lookupEvent(h)
	if err != nil {
		return err
	}
	s, seq, err := e.state()
	if err != nil || s == nil {
		return err
	}
	if done, _ := s.isDone(seq); rt.inline && !done {
		rt.progress() // about to sleep: move blocked streams first
	}
	return s.waitDone(seq)
}

// EventQuery implements hip.Runtime (with EventSynchronize's errors).
func (rt *Runtime) EventQuery(h hip.Event) error {
	e, err := rt.lookupEvent(h)
	if err != nil {
		return err
	}
	s, seq, err := e.state()
	if err != nil || s == nil {
		return err
	}
	done, err := s.isDone(seq)
	if err != nil {
		return err
	}
	if !done {
		return hip.ErrNotReady
	}
	return nil
}

// EventElapsedTime implements hip.Runtime: milliseconds between the times
// the two markers ran.
func (rt *Runtime) EventElapsedTime(start, end hip.Event) (float32, error) {
	a, err := rt.lookupEvent(start)
	if err != nil {
		return 0, err
	}
	b, err := rt.lookupEvent(end)
	if err != nil {
		return 0, err
	}
	ta, err := a.timestamp()
	if err != nil {
		return 0, err
	}
	tb, err := b.timestamp()
	if err != nil {
		return 0, err
	}
	return float32(float64(tb-ta) / float64(time.Millisecond)), nil
}

func (e *event) timestamp() (time.Duration, error) {
	if e.flags&hip.EventDisableTiming != 0 {
		return 0, hip.ErrInvalidHandle
	}
	s, seq, err := e.state()
	if err != nil {
		return 0, err
	}
	if s == nil {
		return 0, hip.ErrInvalidHandle // never recorded
	}
	done, err := s.isDone(seq)
	if err != nil {
		return 0, err // the marker was dropped: the record never happened
	}
	if !done {
		return 0, hip.ErrNotReady
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tgen != e.gen {
		return 0, hip.ErrNotReady // re-recorded since
	}
	return e.ts, nil
}

// StreamWaitEvent implements hip.Runtime: s waits for the latest record
// made before the call. An event recorded in a capturing stream makes s
// join that capture.
func (rt *Runtime) StreamWaitEvent(sh hip.Stream, h hip.Event) error {
	s, err := rt.lookupStream(sh)
	if err != nil {
		return err
	}
	e, err := rt.lookupEvent(h)
	if err != nil {
		return err
	}
	// The latest record made before this call, read under e.mu and used
	// after releasing it: no stream lock (nor its wait for room) is ever
	// taken while holding an event's lock (see EventRecord).
	e.mu.Lock()
	ec, capID, es, seq := e.cap, e.capID, e.s, e.seq
	e.mu.Unlock()
	if ec != nil && ec.active() {
		return ec.join(s, capID)
	}
	if ec != nil {
		es = nil
	}
	if err := s.lock(1); err != nil {
		return err
	}
	if s.cap != nil {
		// A dependency on work outside the capture: it is already ordered
		// before the graph's launch, so the graph records nothing.
		s.mu.Unlock()
		return nil
	}
	if es == nil || es == s {
		s.mu.Unlock() // never recorded, or FIFO order already covers it
		return nil
	}
	s.push(&op{kind: opWaitStream, ws: es, seq: seq})
	s.kick()
	return nil
}
