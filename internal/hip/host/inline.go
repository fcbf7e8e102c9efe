package host

// Inline execution. Waking a stream's worker goroutine for every enqueue
// costs a scheduler hand-over (often a futex wake of an idle thread), and
// for the small grouped collectives of one process those hand-overs were
// most of the time. So when a thread enqueues on a stream that no
// executor owns (chaos off, Config.NoInline unset), it runs the ops
// itself, in order, while each completes at once: write-values, nops,
// event markers, flag waits that already hold (one check, no spinning),
// stream waits already done and copies below inlineMaxCopy. At the first
// other op it stops and the rest is the worker's. It then tries the other
// streams left blocked (rt.blocked) whose next op now completes, so a
// whole grouped collective of a few ranks can finish on the issuing
// thread. Nothing here ever blocks, so a thread that drives every rank of
// a group cannot deadlock on a flag only its own later calls write.
// (docs/performance.md, "Inline execution, from one thread", has what it
// saves.)
//
// Ownership: s.running marks the one executor, taken and dropped under
// s.mu. A worker that meets an unsatisfied flag wait parks: it drops
// ownership, waits for the flag outside the lock, and takes the stream
// back if nobody moved it meanwhile. An executor that passes the parked
// wait first makes sure the worker no longer reads its word (parkGuard):
// once the wait is done the program may free that memory. Whoever drops
// ownership with ops pending makes sure the worker is awake (signals it
// when idle) before the API call returns, so progress never depends on a
// later call.

// inlineMaxCopy: copies (or whole batches) of at least this many bytes
// stay asynchronous, on the worker and the copy engines; inline, they
// would serialise large transfers on the issuing thread.
const inlineMaxCopy = 64 << 10

// blockedScan bounds one pass over rt.blocked (a stack buffer: the enqueue
// path allocates nothing).
const blockedScan = 64

// kick replaces unlock after an enqueue (s.mu held, ops pushed; releases
// s.mu): it runs the new ops inline when nobody owns the stream, else
// leaves them to the owner.
func (s *stream) kick() {
	rt := s.rt
	if !rt.inline {
		s.work.Signal()
		s.mu.Unlock()
		return
	}
	if s.running {
		// The owner takes them: a running worker drains to the end, and an
		// inline runner that stops hands what is left to the worker.
		s.mu.Unlock()
		return
	}
	if !s.inlineable() {
		s.wakeIfPending()
		s.mu.Unlock()
		return
	}
	s.running = true
	s.runInline()
	pending := s.head != s.tail
	s.mu.Unlock()
	if !pending {
		if rt.nBlocked.Load() != 0 {
			rt.progress()
		}
		return
	}
	rt.block(s)
	rt.progress()
	// s may have been drained by progress; if not, its worker must run.
	s.mu.Lock()
	s.wakeIfPending()
	s.mu.Unlock()
}

// inlineable reports whether a thread other than the worker should take
// the stream (s.mu held): only when nothing pending has to go to the
// worker anyway. A queue with a big copy is the worker's from its head:
// running the small ops before it inline would not spare the worker's
// wake, and taking a stream from a parked worker costs it a hand-over.
// Counted, not scanned: a thread that runs ahead leaves long queues, and
// those should still be taken over (docs/performance.md, "Which queues
// are taken inline").
func (s *stream) inlineable() bool { return s.nBig == 0 }

// wakeIfPending signals an idle worker when ops are pending and nobody
// owns the stream (s.mu held).
func (s *stream) wakeIfPending() {
	if s.idle && !s.running && (s.head != s.tail || s.destroyed) {
		s.work.Signal()
	}
}

// runInline runs ops at head on the calling thread while each completes at
// once (s.mu held and s.running set; on return s.mu is held and s.running
// clear). The ops run under s.mu: they are short, and it keeps the run
// free of lock round trips.
func (s *stream) runInline() {
	start := s.head
	for s.head != s.tail && !s.rt.stopping() {
		if s.err != nil {
			s.dropPending()
			break
		}
		mask := uint64(len(s.ring) - 1)
		seq := s.head
		o := s.ring[seq&mask]
		switch o.kind {
		case opWait:
			v, ok := loadWord(o.dst)
			if ok && !condHolds(v, o.val, o.cond) {
				goto stop
			}
			if s.parked && s.parkSeq == seq {
				// The worker waits on this word: once the wait is done the
				// program may free it, so the worker must be off it first.
				s.guard.pass()
			}
			s.head++
			s.completed++
			if !ok {
				s.fail(seq)
			}
			continue
		case opWaitStream:
			var err error
			if o.ws == s {
				if s.completed <= o.seq {
					goto stop
				}
			} else {
				// No stream lock is held while taking another's.
				s.mu.Unlock()
				var done bool
				done, err = o.ws.isDone(o.seq)
				s.mu.Lock()
				if !done {
					goto stop
				}
			}
			s.head++
			s.completed++
			if err != nil {
				s.fail(seq) // the work waited for failed: so does this stream
			}
			continue
		case opCopy, opBatch:
			if o.big {
				goto stop
			}
		}
		taken := s.take(&o)
		ok := s.exec(&o)
		s.completed += taken
		if !ok {
			s.fail(seq)
		}
	}
stop:
	s.running = false
	if s.destroyed {
		s.wakeIfPending() // a destroyed stream's idle worker exits once drained
	}
	if s.head == start {
		return
	}
	s.roomCheck()
	s.done.Broadcast()
	if s.parked && s.head > s.parkSeq {
		// The parked worker may sleep on the flag of a wait this run
		// passed (and perhaps reset): wake it to look at the new head. The
		// word may be gone by now; a futex wake of it fails harmlessly.
		wakeLocal(s.parkAddr)
	}
}

// parkResult is how a parked worker's wait ended.
type parkResult uint8

const (
	parkHeld  parkResult = iota // the flag holds and the worker owns the stream again
	parkMoved                   // another executor went on, or the runtime closes
	parkFault                   // the flag's word faulted; the worker owns the stream again
)

// park lets the worker wait for the flag of the wait at head without
// owning the stream (s.mu held and s.running set on entry; s.mu held on
// return). parkHeld and parkFault: the worker owns the stream again, with
// the wait at head holding or its word unreadable; parkMoved: another
// executor moved on meanwhile (the worker then looks at the stream afresh)
// or the runtime closes.
func (s *stream) park(o *op) parkResult {
	seq, gen := s.head, s.guard.moved.Load()
	s.running = false
	s.parked, s.parkAddr, s.parkSeq = true, o.dst, seq
	s.mu.Unlock()
	s.rt.block(s)
	res := waitValueGuarded(o.dst, o.val, o.cond, &s.rt.closed, &s.guard, gen)
	s.mu.Lock()
	s.parked = false
	if res == waitGaveUp || s.running || s.head != seq {
		return parkMoved
	}
	s.running = true
	if res == waitFault {
		return parkFault
	}
	return parkHeld
}

// block lists s as blocked: progress tries it after later inline runs.
func (rt *Runtime) block(s *stream) {
	rt.blkMu.Lock()
	if !s.listed {
		s.listed = true
		rt.blocked = append(rt.blocked, s)
		rt.nBlocked.Store(int32(len(rt.blocked)))
	}
	rt.blkMu.Unlock()
}

// progress runs, inline, the blocked streams whose next op now completes
// (another stream's inline run may have written their flag), pass after
// pass while that moves something, then drops drained streams from the
// list and wakes the idle worker of every stream it leaves pending.
func (rt *Runtime) progress() {
	var buf [blockedScan]*stream
	rt.blkMu.Lock()
	list := buf[:copy(buf[:], rt.blocked)]
	rt.blkMu.Unlock()
	if len(list) == 0 {
		return
	}
	for pass := 0; pass < 4; pass++ {
		moved := false
		for _, s := range list {
			s.mu.Lock()
			if !s.running && s.head != s.tail && s.inlineable() {
				before := s.head
				s.running = true
				s.runInline()
				moved = moved || s.head != before
			}
			s.mu.Unlock()
		}
		if !moved {
			break
		}
	}
	drained := 0
	for _, s := range list {
		s.mu.Lock()
		s.wakeIfPending()
		if s.head == s.tail && !s.running {
			list[drained] = s // drained <= i: that slot was already looked at
			drained++
		}
		s.mu.Unlock()
	}
	if drained == 0 {
		return
	}
	rt.blkMu.Lock()
	for _, s := range list[:drained] {
		// Unlisted unless it got ops again (then it stays, harmlessly: a
		// later pass drops it once drained).
		s.mu.Lock()
		empty := s.head == s.tail
		s.mu.Unlock()
		if !empty || !s.listed {
			continue
		}
		for j, b := range rt.blocked {
			if b == s {
				last := len(rt.blocked) - 1
				rt.blocked[j] = rt.blocked[last]
				rt.blocked[last] = nil
				rt.blocked = rt.blocked[:last]
				break
			}
		}
		s.listed = false
	}
	rt.nBlocked.Store(int32(len(rt.blocked)))
	rt.blkMu.Unlock()
}
