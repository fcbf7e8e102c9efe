package host

import (
	"math/rand"
	"sync"
	"time"

	"cecoll/internal/hip"
)

type opKind uint8

const (
	opNop        opKind = iota
	opCopy              // copy n bytes src -> dst
	opBatch             // marker: the next count entries are the copies of one batch
	opWrite             // write-value: atomic store of val at dst
	opWait              // wait-value: block until cond(*dst, val)
	opRecord            // event marker: ev's record number gen is reached
	opWaitStream        // block until stream ws has completed op number seq
	opGRecord           // in a graph: record point count (graph-local event id)
	opGWait             // in a graph: wait for record point count
)

// op is one fixed-size queue entry; a stream's queue is a ring of them, so
// enqueueing copies a struct and allocates nothing once the ring is big
// enough.
type op struct {
	kind  opKind
	big   bool // a copy or batch of at least inlineMaxCopy bytes: the worker's
	cond  uint32
	val   uint32
	count int
	dst   uintptr
	src   uintptr
	n     uintptr
	ev    *event
	ws    *stream
	seq   uint64 // opRecord: record number; opWaitStream: op number
}

// stream is a FIFO of ops run by its own worker goroutine.
type stream struct {
	rt       *Runtime
	h        hip.Stream
	dev      int
	internal bool // a graph exec's branch stream: not in the registry

	mu        sync.Mutex
	work      sync.Cond // the worker waits here for ops
	done      sync.Cond // synchronizers wait here for completions
	room      sync.Cond // enqueuers blocked by back-pressure wait here
	blocked   int       // enqueuers waiting on room
	need      uint64    // largest op count a blocked enqueuer waits to add
	ring      []op
	head      uint64 // ops taken by the worker
	tail      uint64 // ops enqueued
	completed uint64 // ops finished; op number k is done when completed > k
	destroyed bool
	cap       *capture // capture this stream records into, or nil
	branch    int      // its branch in cap

	// Sticky error (fault.go): set when an op of the stream faulted, or
	// waited on work of another stream that had failed. From then on the
	// stream runs nothing: ops still queued are dropped (they complete
	// without running), and every later enqueue, synchronize and query
	// returns err.
	err    error
	errSeq uint64 // op number of the op that failed

	// Executor state (inline.go). Exactly one executor runs the ops at
	// head at a time: the worker, or a thread running them inline.
	running  bool      // an executor owns the stream
	idle     bool      // the worker sleeps in work.Wait
	parked   bool      // the worker waits, without owning, for the flag of the wait at head
	parkAddr uintptr   // that flag's word
	parkSeq  uint64    // that wait's op number
	guard    parkGuard // keeps the parked worker off the word once another executor passed the wait
	listed   bool      // on rt.blocked (guarded by rt.blkMu)
	nBig     int       // big ops pending: while any is, the stream is the worker's

	// Executor-only state (the owner's).
	holdsQueue bool       // the worker holds one of its device's hardware queues (queues.go)
	rng        *rand.Rand // chaos source; nil when chaos is off
	batch      []op
	pieces     []piece
	job        batchJob
}

type piece struct{ dst, src, n uintptr }

const initialRing = 64

func (rt *Runtime) newStream(h hip.Stream, dev int, internal bool) *stream {
	s := &stream{rt: rt, h: h, dev: dev, internal: internal, ring: make([]op, initialRing)}
	s.work.L = &s.mu
	s.done.L = &s.mu
	s.room.L = &s.mu
	idx := rt.nStreams.Add(1)
	if rt.seed != 0 {
		s.rng = rand.New(rand.NewSource(rt.seed*1000003 + idx))
	}
	s.job.rt = rt
	rt.regMu.Lock()
	rt.live[s] = struct{}{}
	rt.regMu.Unlock()
	rt.workers.Add(1)
	go s.worker()
	return s
}

// StreamCreate implements hip.Runtime.
func (rt *Runtime) StreamCreate() (hip.Stream, error) {
	s := rt.newStream(hip.Stream(rt.newHandle()), rt.current(), false)
	rt.regMu.Lock()
	rt.streams[s.h] = s
	rt.regMu.Unlock()
	return s.h, nil
}

// lookupStream resolves a handle: 0 and 1 are the current device's legacy
// NULL stream, 2 the calling thread's per-thread default stream; both are
// created on first use.
func (rt *Runtime) lookupStream(h hip.Stream) (*stream, error) {
	switch h {
	case hip.StreamNull, hip.StreamLegacy:
		dev := rt.current()
		rt.regMu.RLock()
		s := rt.legacy[dev]
		rt.regMu.RUnlock()
		if s == nil {
			n := rt.newStream(hip.StreamLegacy, dev, false)
			rt.regMu.Lock()
			if s = rt.legacy[dev]; s == nil {
				rt.legacy[dev], s = n, n
			}
			rt.regMu.Unlock()
			if s != n {
				n.destroy() // lost a creation race
			}
		}
		return s, nil
	case hip.StreamPerThread:
		k := ptsKey{tid(), rt.current()}
		rt.regMu.RLock()
		s := rt.perThread[k]
		rt.regMu.RUnlock()
		if s == nil {
			s = rt.newStream(hip.StreamPerThread, k.dev, false)
			rt.regMu.Lock()
			rt.perThread[k] = s
			rt.regMu.Unlock()
		}
		return s, nil
	}
	rt.regMu.RLock()
	s := rt.streams[h]
	rt.regMu.RUnlock()
	if s == nil {
		return nil, hip.ErrInvalidHandle
	}
	return s, nil
}

// StreamDestroy implements hip.Runtime. As in CUDA the stream's queued work
// still completes: the worker exits once it has drained the queue.
func (rt *Runtime) StreamDestroy(h hip.Stream) error {
	rt.regMu.Lock()
	s := rt.streams[h]
	delete(rt.streams, h)
	rt.regMu.Unlock()
	if s == nil {
		return hip.ErrInvalidHandle
	}
	s.destroy()
	return nil
}

func (s *stream) destroy() {
	s.mu.Lock()
	s.destroyed = true
	s.work.Broadcast()
	s.room.Broadcast()
	s.mu.Unlock()
}

// StreamSynchronize implements hip.Runtime.
func (rt *Runtime) StreamSynchronize(h hip.Stream) error {
	s, err := rt.lookupStream(h)
	if err != nil {
		return err
	}
	if c := s.capturing(); c != nil {
		c.invalidate()
		return hip.ErrStreamCaptureUnsupported
	}
	return s.sync()
}

// StreamQuery implements hip.Runtime.
func (rt *Runtime) StreamQuery(h hip.Stream) error {
	s, err := rt.lookupStream(h)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cap != nil {
		s.cap.invalidate()
		return hip.ErrStreamCaptureUnsupported
	}
	if s.err != nil {
		return s.err
	}
	if s.completed < s.tail {
		return hip.ErrNotReady
	}
	return nil
}

func (s *stream) capturing() *capture {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cap
}

// sync waits until the work enqueued before the call is done and returns
// the stream's sticky error.
func (s *stream) sync() error {
	s.mu.Lock()
	target := s.tail
	if s.rt.inline && s.completed < target {
		// About to sleep: first move the blocked streams that can move.
		s.mu.Unlock()
		s.rt.progress()
		s.mu.Lock()
	}
	for s.completed < target && !s.rt.stopping() {
		s.done.Wait()
	}
	err := s.err
	s.mu.Unlock()
	return err
}

// waitDone blocks until op number seq of s is done (or the runtime closes)
// and returns the error of a failure at or before it.
func (s *stream) waitDone(seq uint64) error {
	s.mu.Lock()
	for s.completed <= seq && !s.rt.stopping() {
		s.done.Wait()
	}
	err := s.failedBy(seq)
	s.mu.Unlock()
	return err
}

// isDone reports whether op number seq of s is done, and the error of a
// failure at or before it.
func (s *stream) isDone(seq uint64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completed > seq, s.failedBy(seq)
}

// failedBy is the sticky error if the stream failed at or before op
// number seq: that op then never ran, or ran after work it depends on was
// dropped (s.mu held). A failure after seq leaves op seq's work intact.
func (s *stream) failedBy(seq uint64) error {
	if s.err != nil && s.errSeq <= seq {
		return s.err
	}
	return nil
}

// isDestroyed reports whether StreamDestroy was called (its worker may
// still drain).
func (s *stream) isDestroyed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.destroyed
}

// fail records that op number seq faulted and drops every op still
// queued (s.mu held, by the stream's executor). Waiters on those ops are
// released: they complete without running.
func (s *stream) fail(seq uint64) {
	if s.err == nil {
		s.err, s.errSeq = hip.ErrIllegalAddress, seq
	}
	s.dropPending()
}

// dropPending completes, without running them, the ops not yet taken
// (s.mu held, by the executor, once s.err is set).
func (s *stream) dropPending() {
	if s.head == s.tail {
		return
	}
	s.completed += s.tail - s.head
	s.head = s.tail
	s.nBig = 0
	s.roomCheck()
	s.done.Broadcast()
}

// maxPending bounds a stream's queue, as a GPU bounds its command queue:
// an enqueue that would leave more ops pending than this blocks until the
// worker has taken enough (one call larger than the bound waits for an
// empty queue). It keeps memory flat when the issuing thread runs far
// ahead of the worker. The worker wakes a blocked enqueuer as soon as its
// ops fit, not at a lower watermark: the ops still pending may wait on
// flags that only this enqueuer's later calls provide (one thread driving
// several ranks in a group), so waiting for a deeper drain could deadlock.
const maxPending = 4096

// lock takes s.mu for enqueueing k more ops, waiting for room (back-
// pressure) and growing the ring if needed. It refuses a destroyed stream
// (a handle that raced with StreamDestroy) and returns the sticky error of
// a failed one.
func (s *stream) lock(k int) error {
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return hip.ErrInvalidHandle
	}
	if err := s.err; err != nil {
		s.mu.Unlock()
		return err
	}
	if s.cap == nil {
		// Only ops not yet taken by the worker count: the ring slots of
		// taken ones are free again.
		for s.tail-s.head+uint64(k) > maxPending && s.tail != s.head && !s.destroyed && !s.rt.stopping() {
			s.blocked++
			s.need = max(s.need, uint64(k))
			s.room.Wait()
			s.blocked--
			if s.blocked == 0 {
				s.need = 0
			}
		}
		if s.destroyed {
			s.mu.Unlock()
			return hip.ErrInvalidHandle
		}
		if err := s.err; err != nil {
			s.mu.Unlock()
			return err
		}
		if s.cap == nil {
			s.reserve(k)
		}
	}
	return nil
}

// reserve makes room for k more ops: the ring doubles, so growth is
// amortised and the steady state allocates nothing; with back-pressure it
// stays at most twice maxPending (or one oversized call).
func (s *stream) reserve(k int) {
	need := s.tail - s.head + uint64(k)
	if need <= uint64(len(s.ring)) {
		return
	}
	n := len(s.ring)
	for uint64(n) < need {
		n *= 2
	}
	ring := make([]op, n)
	oldMask, newMask := uint64(len(s.ring)-1), uint64(n-1)
	for i := s.head; i < s.tail; i++ {
		ring[i&newMask] = s.ring[i&oldMask]
	}
	s.ring = ring
}

// push appends o (s.mu held, room reserved) and returns its op number.
func (s *stream) push(o *op) uint64 {
	if o.big {
		s.nBig++
	}
	seq := s.tail
	s.ring[seq&uint64(len(s.ring)-1)] = *o
	s.tail++
	return seq
}

// unlock releases s.mu after enqueueing and wakes the worker (for streams
// that always leave their ops to the worker: graph branch streams).
func (s *stream) unlock() {
	s.work.Signal()
	s.mu.Unlock()
}

// worker runs the stream's ops in order until the stream is destroyed and
// drained, or the runtime closes. It sleeps while the stream is empty or
// another executor owns it (that executor signals it when it stops with
// ops pending).
func (s *stream) worker() {
	rt := s.rt
	defer func() {
		rt.regMu.Lock()
		delete(rt.live, s)
		rt.regMu.Unlock()
		rt.workers.Done()
	}()
	s.mu.Lock()
	for !rt.stopping() {
		if s.running || s.head == s.tail {
			if s.destroyed && !s.running {
				break
			}
			s.idle = true
			s.work.Wait()
			s.idle = false
			continue
		}
		s.running = true
		if !s.takeQueue() {
			s.running = false
			continue // closing
		}
		s.drain()
		s.giveQueue()
	}
	s.giveQueue()
	s.mu.Unlock()
}

// drain runs ops on the worker until the queue is empty (s.mu held and
// s.running set on entry; on return s.mu is held and the worker no longer
// owns the stream). With inline execution on, an unsatisfied flag wait
// parks: the worker waits for the flag without owning the stream, so a
// thread that sees the flag first may go on. An op that faults fails the
// stream, and what is queued behind it is dropped.
func (s *stream) drain() {
	rt := s.rt
	for s.head != s.tail && !rt.stopping() {
		if s.err != nil {
			s.dropPending() // ops a graph launch replayed onto a failed branch stream
			break
		}
		mask := uint64(len(s.ring) - 1)
		seq := s.head
		o := s.ring[seq&mask]
		if o.kind == opWait && rt.inline {
			v, ok := loadWord(o.dst)
			if ok && !condHolds(v, o.val, o.cond) {
				switch s.park(&o) {
				case parkMoved:
					return
				case parkFault:
					ok = false
				}
			}
			s.head++
			s.completed++
			if !ok {
				s.fail(seq)
			}
			s.roomCheck()
			s.done.Broadcast()
			continue
		}
		taken := s.take(&o)
		s.mu.Unlock()

		ok := s.exec(&o)

		s.mu.Lock()
		s.completed += taken
		if !ok {
			s.fail(seq)
		}
		s.done.Broadcast()
	}
	s.running = false
}

// take removes the op at head (the entries of a batch into s.batch) and
// returns how many ring slots it used; s.mu held.
func (s *stream) take(o *op) uint64 {
	mask := uint64(len(s.ring) - 1)
	taken := uint64(1)
	if o.big {
		s.nBig--
	}
	if o.kind == opBatch {
		s.batch = s.batch[:0]
		for i := 0; i < o.count; i++ {
			s.batch = append(s.batch, s.ring[(s.head+1+uint64(i))&mask])
		}
		taken += uint64(o.count)
	}
	s.head += taken
	s.roomCheck()
	return taken
}

// roomCheck wakes enqueuers blocked by back-pressure once their ops fit.
func (s *stream) roomCheck() {
	if s.blocked > 0 && (s.tail-s.head+s.need <= maxPending || s.tail == s.head) {
		s.room.Broadcast()
	}
}

// exec runs one op (a whole batch for opBatch) on the executor and
// reports whether it completed; false means it faulted (or waited on work
// of a failed stream), and the stream fails.
func (s *stream) exec(o *op) bool {
	rt := s.rt
	switch o.kind {
	case opCopy:
		s.chaosDelay(8)
		s.pieces = s.pieces[:0]
		s.addPieces(o.dst, o.src, o.n)
		return s.runPieces()
	case opBatch:
		s.chaosDelay(8)
		s.pieces = s.pieces[:0]
		for i := range s.batch {
			b := &s.batch[i]
			s.addPieces(b.dst, b.src, b.n)
		}
		return s.runPieces()
	case opWrite:
		s.chaosDelay(4)
		return rt.tryWrite(o.dst, o.val)
	case opWait:
		s.chaosDelay(8)
		return waitValue(o.dst, o.val, o.cond, &rt.closed) != waitFault
	case opRecord:
		o.ev.mark(o.seq, time.Since(rt.epoch))
	case opWaitStream:
		s.chaosDelay(8)
		return o.ws.waitDone(o.seq) == nil
	}
	return true
}

// chaos: below this size a copy is never split, so flags published by
// small copies stay single stores.
const chaosMinSplit = 64

// addPieces queues a copy; under chaos it may be cut into 2..4 pieces.
func (s *stream) addPieces(dst, src, n uintptr) {
	if n == 0 {
		return
	}
	if s.rng == nil || n < chaosMinSplit || s.rng.Intn(2) == 0 {
		s.pieces = append(s.pieces, piece{dst, src, n})
		return
	}
	k := 2 + s.rng.Intn(3)
	off := uintptr(0)
	for i := 0; i < k-1 && off < n; i++ {
		cut := off + uintptr(s.rng.Int63n(int64(n-off)))&^7
		if cut <= off {
			continue
		}
		s.pieces = append(s.pieces, piece{dst + off, src + off, cut - off})
		off = cut
	}
	s.pieces = append(s.pieces, piece{dst + off, src + off, n - off})
}

// poolMinBytes: batches smaller than this are copied by the stream worker
// alone; larger ones are shared with the copy engines.
const poolMinBytes = 1 << 20

// runPieces executes the queued pieces: under chaos one by one in a
// shuffled order (reproducible from the seed), otherwise in order, spread
// over the copy engines when large. It reports false if a piece faulted.
func (s *stream) runPieces() bool {
	rt := s.rt
	if s.rng != nil {
		s.rng.Shuffle(len(s.pieces), func(i, j int) { s.pieces[i], s.pieces[j] = s.pieces[j], s.pieces[i] })
		for i, p := range s.pieces {
			if i > 0 {
				s.chaosDelay(16)
			}
			if !rt.runPiece(s.h, p) {
				return false
			}
		}
		return true
	}
	total := uintptr(0)
	for _, p := range s.pieces {
		total += p.n
	}
	if len(s.pieces) > 1 && total >= poolMinBytes {
		return rt.copyPool.run(&s.job, s.pieces, s.h)
	}
	for _, p := range s.pieces {
		if !rt.runPiece(s.h, p) {
			return false
		}
	}
	return true
}

func (rt *Runtime) runPiece(h hip.Stream, p piece) bool {
	if rt.pieceHook != nil {
		rt.pieceHook(h, p.dst, p.src, p.n)
	}
	return rt.tryCopy(p.dst, p.src, p.n)
}

// chaos delays: before an op, with probability 1/oneIn, sleep 0..200us.
const chaosMaxDelay = 200 * time.Microsecond

func (s *stream) chaosDelay(oneIn int) {
	if s.rng == nil {
		return
	}
	if s.rng.Intn(oneIn) == 0 {
		time.Sleep(time.Duration(s.rng.Int63n(int64(chaosMaxDelay))))
	}
}
