package ce

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/param"
	"cecoll/internal/result"
)

// Engine is one rank's CE state for one communicator. Its methods are safe
// for concurrent use (calls are serialised by mu, except Abort, Pending and
// Seq, which take no lock: they must get through while a call waits for
// room in a stream's queue), but a communicator's collectives must still
// be issued in the same order on every rank.
type Engine struct {
	mu sync.Mutex
	// freeMu: release frees the state only holding it, and the lock-free
	// probes (Pending) query the state only holding it for reading, so no
	// probe ever touches what Close freed. (Every call takes mu and checks
	// closed under it, and Close frees only under mu, after closed is set:
	// no call either.) A probe holds it for one event query.
	freeMu    sync.RWMutex
	c         Comm
	rt        hip.Runtime
	cfg       Config
	caps      hip.Caps
	rank      int
	n         int
	dev       int
	able      bool // Implemented for this runtime
	checkPtrs bool // checkPointers runs (Caps.PageableBlocks or CECOLL_CHECK_POINTERS)

	closed  atomic.Bool // Close ran: calls fail
	drained atomic.Bool // Close freed the state
	aborted atomic.Bool // Abort ran: calls fail, waits are being released
	held    bool        // holdShared ran (see SharedMem)

	sig signals // the flag words and their protocol (signal.go)

	// Staging window: unregistered buffers go through the peers' staging
	// windows; in-place AlltoAll swaps and hub AlltoAll use the own one as
	// scratch.
	stageBase hip.DevicePtr
	stageWin  Window
	stageSize uintptr

	// The engine's streams: es runs every call that syncs by flags, joined
	// to the caller's stream by events (run.go); side, where no other rank
	// of the process shares the device, a large own-block copy beside the
	// pushes. capOpen: a captured call forked es into a capture that may
	// still be open. tailS is the stream holding the communicator's latest
	// eager call or graph launch, ended by tailEv (evOut or tail): the next
	// one waits for it (B19: afterTail).
	es, side       hip.Stream
	capOpen        bool
	evIn, evOut    hip.Event // eager join in and out; evOut also marks progress
	capOut         hip.Event // a captured call's join out
	fork, joinSide hip.Event
	tail           hip.Event // OrderAfter: the end of a graph launch
	tailS          hip.Stream
	tailEv         hip.Event

	// The call being run (Prepare, Step), and the per-step scratch it
	// fills, sized at Init (B16: the launch path allocates nothing).
	cur     call
	cp      copyList
	ops     []hip.MemOp
	cuts    []int        // batch boundaries in ops (fence)
	joinBuf []hip.Stream // joinStreams' answer
	attrs   [1]hip.CopyAttributes
	attrI   [1]uintptr

	issued atomic.Uint64 // eager collectives and graph launches enqueued (progress)

	// How long Close waits for the streams.
	drainLimit time.Duration
}

// Init sets up this rank's CE state: collective (every rank calls it; it
// registers windows and ends with a barrier). It builds everything or
// unwinds and returns the error.
func Init(c Comm, cfg Config) (*Engine, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	e := &Engine{c: c, rt: c.Runtime(), cfg: cfg, rank: c.Rank(), n: c.Size(), dev: c.Device(),
		drainLimit: param.Timeout.Get()}
	if err := e.rt.SetDevice(e.dev); err != nil {
		return nil, result.Errorf(result.UnhandledCudaError, "ce init: set device %d: %w", e.dev, err)
	}
	if err := e.setup(); err != nil {
		e.release()
		return nil, err
	}
	return e, nil
}

func (e *Engine) setup() error {
	rt, n := e.rt, e.n
	// From its first registration on, this rank's streams may write into
	// its peers' internal windows.
	e.holdShared()
	e.caps = rt.Caps()
	e.able = Implemented(rt, FuncAllGather, 0, 0)
	e.checkPtrs = e.caps.PageableBlocks || param.CheckPointers.Get()
	if err := e.sig.init(e); err != nil {
		return err
	}
	var err error
	e.stageSize = e.cfg.StagingBytes
	if e.stageBase, err = rt.MemAlloc(e.stageSize); err != nil {
		return initErr("staging window alloc", err)
	}
	if e.stageWin, err = e.c.RegisterWindow(e.stageBase, e.stageSize); err != nil {
		return initErr("staging window register", err)
	}
	if e.es, err = rt.StreamCreate(); err != nil {
		return initErr("stream create", err)
	}
	// Every stream of a process counts against the driver's limits (a
	// graph launch blocks on the host once the streams and the graphs
	// parked on waits reach about 34: docs/performance.md, "Graphs with
	// parked waits"), and where ranks share a device a copy beside the
	// others gains nothing: no side stream there.
	if !e.c.DeviceShared() {
		if e.side, err = rt.StreamCreate(); err != nil {
			return initErr("stream create", err)
		}
	}
	for _, ev := range []*hip.Event{&e.evIn, &e.evOut, &e.capOut, &e.fork, &e.joinSide, &e.tail} {
		if *ev, err = rt.EventCreate(hip.EventDisableTiming); err != nil {
			return initErr("event create", err)
		}
	}
	e.cp.init(3*n + 4)
	e.ops = make([]hip.MemOp, 0, 6*n+8)
	e.cuts = make([]int, 0, 4)
	e.joinBuf = make([]hip.Stream, 0, 8)
	e.cur.p2p.init(n)
	e.attrs[0] = hip.CopyAttributes{SrcAccessOrder: hip.SrcAccessOrderStream, Flags: hip.CopyFlagPreferOverlapWithCompute}
	if err := e.warmUp(); err != nil {
		return initErr("warm-up", err)
	}
	if err := e.c.Barrier(); err != nil {
		return initErr("barrier", err)
	}
	return nil
}

// warmUp runs each kind of device operation the engine uses once on its
// own stream and waits for it, before any flag wait of this communicator
// exists: whatever the driver sets up lazily at a first use happens here
// (without it a thread per rank's first collective could hang:
// docs/performance.md, "Warm-up before the first flag wait").
func (e *Engine) warmUp() error {
	rt, s := e.rt, e.es
	w := e.sig.local(localScratch)
	for _, op := range []hip.MemOp{hip.WriteValue32(w, 1), hip.WaitValue32(w, 1, hip.WaitGEQ)} {
		if err := rt.StreamBatchMemOp(s, []hip.MemOp{op}); err != nil {
			return err
		}
	}
	a, b := e.stageBase, e.stageBase+256
	if err := rt.MemcpyAsync(a, b, 8, s); err != nil {
		return err
	}
	if e.caps.BatchCopy {
		if err := rt.MemcpyBatchAsync([]hip.DevicePtr{a, a + 64}, []hip.DevicePtr{b, b + 64}, []uintptr{8, 8}, nil, nil, s); err != nil {
			return err
		}
	}
	if err := rt.Memcpy2DAsync(a, 16, b, 16, 8, 2, s); err != nil {
		return err
	}
	return rt.StreamSynchronize(s)
}

func initErr(what string, err error) error {
	return result.Errorf(result.Of(err), "ce init: %s: %w", what, err)
}

// release frees whatever setup built. It never waits for peers; the
// memory of the internal windows may outlive it (see SharedMem).
func (e *Engine) release() error {
	rt := e.rt
	if rt == nil {
		return nil
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	e.sig.release(e, keep)
	for _, s := range []*hip.Stream{&e.es, &e.side, &e.sig.abortStream} {
		if *s != 0 {
			keep(rt.StreamDestroy(*s))
			*s = 0
		}
	}
	for _, ev := range []*hip.Event{&e.evIn, &e.evOut, &e.capOut, &e.fork, &e.joinSide, &e.tail} {
		if *ev != 0 {
			keep(rt.EventDestroy(*ev))
			*ev = 0
		}
	}
	if e.stageWin != nil {
		keep(e.c.DeregisterWindow(e.stageWin))
		e.stageWin = nil
	}
	keep(e.freeShared(&e.stageBase, &e.sig.base))
	return first
}

// Close ends the engine: local, idempotent, it returns at once and never
// waits for peers. Later calls fail with InvalidUsage. The memory and
// streams are freed in the background once a call being enqueued has
// finished and this rank's streams have drained; the returned channel
// closes then. A collective still pending completes normally when its
// peers arrive; if the streams do not drain within CECOLL_TIMEOUT seconds
// (after Abort, CECOLL_ABORT_TIMEOUT), the state is left allocated (leaked,
// with a warning, and Drained stays false) rather than freed under a
// stream that may still use it.
func (e *Engine) Close() <-chan struct{} {
	done := make(chan struct{})
	if e == nil || e.closed.Swap(true) {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		e.mu.Lock() // a call being enqueued (maybe waiting for queue room) ends first
		defer e.mu.Unlock()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := e.rt.SetDevice(e.dev); err != nil {
			if !errors.Is(err, hip.ErrDeinitialized) { // the process is exiting: the driver frees all
				log.Warnf("ce close: rank %d: set device: %v", e.rank, err)
			}
			return
		}
		// An event call runs on its caller's stream and may copy through
		// the staging window, and a graph replay runs on its launch stream
		// and signals into the sync windows: their ends (evOut, and tail,
		// the latest launch's: OrderAfter) too.
		drained := e.drain(e.es, e.side) && e.poll(time.Now(), func() error { return e.rt.EventQuery(e.evOut) }) &&
			e.poll(time.Now(), func() error { return e.rt.EventQuery(e.tail) })
		e.sig.stopRelease()
		// The release loop's last writes land before its words are freed:
		// a later communicator may be given that memory.
		drained = drained && e.drain(e.sig.abortStream)
		if !drained {
			log.Warnf("ce close: rank %d: its streams did not drain within %v; leaving the CE state allocated", e.rank, e.limit())
			return
		}
		e.freeMu.Lock()
		defer e.freeMu.Unlock()
		if err := e.release(); err != nil && !errors.Is(err, hip.ErrDeinitialized) {
			log.Warnf("ce close: rank %d: %v", e.rank, err)
		}
		e.drained.Store(true)
	}()
	return done
}

// Drained reports whether Close freed the engine's state (false while it
// waits, and for good when the streams never drained).
func (e *Engine) Drained() bool { return e == nil || e.drained.Load() }

func (e *Engine) limit() time.Duration {
	if e.aborted.Load() {
		return min(e.drainLimit, param.AbortTimeout.Get())
	}
	return e.drainLimit
}

// drain polls streams (0s skipped) until every one is idle, for at most
// limit(). Polling rather than a blocking synchronize keeps the wait
// bounded. A query error other than not-ready counts as idle (the work is
// not running).
func (e *Engine) drain(streams ...hip.Stream) bool {
	start := time.Now()
	for _, s := range streams {
		if s != 0 && !e.poll(start, func() error { return e.rt.StreamQuery(s) }) {
			return false
		}
	}
	return true
}

// poll calls query until it says anything but not-ready, or limit() has
// passed since start (false).
func (e *Engine) poll(start time.Time, query func() error) bool {
	pause := 20 * time.Microsecond
	for {
		err := query()
		if err == nil || !errors.Is(err, hip.ErrNotReady) {
			return true
		}
		if time.Since(start) > e.limit() {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}

// Abort releases every flag wait this rank's streams have queued or will
// reach (signal.go), without waiting for peers and without taking the
// engine's lock: it must get through while another thread waits for room
// in a stream's queue. Calls fail with InvalidUsage afterwards. Idempotent.
// Collectives released this way move whatever their buffers hold: their
// results are undefined.
func (e *Engine) Abort() {
	if e == nil || e.aborted.Swap(true) || e.n == 1 {
		return
	}
	e.sig.startRelease(e)
}

// Pending reports whether this rank's last eager collective, or the last
// graph replay launched through OrderAfter, is still queued or running:
// event queries, no lock, never a wait. The communicator's watchdog polls
// it (with Issued) to find work that makes no progress: a replay parked on
// a peer that never comes is a hang as an eager call's is.
func (e *Engine) Pending() bool {
	if e == nil {
		return false
	}
	e.freeMu.RLock()
	defer e.freeMu.RUnlock()
	if e.closed.Load() || e.issued.Load() == 0 {
		return false
	}
	if err := e.rt.SetDevice(e.dev); err != nil {
		return false
	}
	return errors.Is(e.rt.EventQuery(e.evOut), hip.ErrNotReady) || errors.Is(e.rt.EventQuery(e.tail), hip.ErrNotReady)
}

// Issued is the number of eager collectives and graph launches (OrderAfter)
// enqueued so far.
func (e *Engine) Issued() uint64 { return e.issued.Load() }

// Event is this rank's signal event, which a group hands to every rank of
// a call (Args.PeerEvents) so that it may sync by events.
func (e *Engine) Event() hip.Event { return e.sig.ev }

// usable refuses a call after Abort or Close.
func (e *Engine) usable(f Func) error {
	if e.aborted.Load() {
		return result.Errorf(result.InvalidUsage, "ce %s: communicator aborted", f)
	}
	if e.closed.Load() {
		return result.Errorf(result.InvalidUsage, "ce %s: the CE engine of this communicator is finalized", f)
	}
	return nil
}

// OrderBefore makes s wait for every eager collective and graph launch of
// the communicator so far; OrderAfter makes the next one wait for what was
// just enqueued on s. A graph launch that holds collectives of this
// communicator is put between the two, so it never overlaps an eager call
// or another launch (B19; eager calls wait likewise: joinIn).
func (e *Engine) OrderBefore(s hip.Stream) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(FuncAllGather); err != nil {
		return err
	}
	if err := e.rt.SetDevice(e.dev); err != nil {
		return err
	}
	return e.afterTail(s)
}

// OrderAfter: see OrderBefore. It records the launch's end even after an
// Abort (the launch is enqueued; Close must wait for it): only a finalized
// engine records nothing.
func (e *Engine) OrderAfter(s hip.Stream) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return nil
	}
	if err := e.rt.SetDevice(e.dev); err != nil {
		return err
	}
	if err := e.rt.EventRecord(e.tail, s); err != nil {
		return err
	}
	e.tailS, e.tailEv = s, e.tail
	e.issued.Add(1) // progress: Pending watches the replay from now on
	return nil
}

// afterTail makes s wait for the communicator's latest work, except where
// both are on es, whose order is its own. A caller's stream always waits
// (an event recorded on it is passed already): the same handle may name a
// new stream after the user destroyed the old one.
func (e *Engine) afterTail(s hip.Stream) error {
	if e.tailS == 0 || e.tailS == s && s == e.es {
		return nil
	}
	return e.rt.StreamWaitEvent(s, e.tailEv)
}

// Implemented reports whether fn can run on copy engines with rt: an
// operation whose row says CE (op.go) on a runtime that has stream memory
// operations (Caps.StreamMemOps). redOp is ignored; datatype must be an
// NCCL type.
func Implemented(rt hip.Runtime, fn Func, redOp int32, datatype int32) bool {
	_ = redOp
	if rt == nil || datatype < 0 || datatype >= NumTypes {
		return false
	}
	if o := OpOf(fn); o == nil || !o.CE {
		return false
	}
	return rt.Caps().StreamMemOps
}

func alignUp(x, a uintptr) uintptr { return (x + a - 1) &^ (a - 1) }
