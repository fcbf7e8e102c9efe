package comm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"cecoll/internal/bootstrap"
	"cecoll/internal/ce"
	"cecoll/internal/forward"
	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// engine is what a communicator needs of *ce.Engine. Tests substitute a
// fake through newEngine to exercise this package before the engine exists.
type engine interface {
	// Prepare validates and plans a call, enqueueing nothing; Step runs
	// its steps in order (ce run.go).
	Prepare(a *ce.Args) (ce.Prepared, error)
	Step(k int) error
	// Close ends the engine at once and frees it once its streams drained
	// (the channel closes then); Abort releases its queued flag waits.
	// Neither waits for peers, and Abort takes no lock a call may hold.
	Close() <-chan struct{}
	Drained() bool
	Abort()
	// Pending and Issued are the watchdog's progress probe, lock-free.
	Pending() bool
	Issued() uint64
	// Event is the rank's signal event for a group's event syncs.
	Event() hip.Event
	// OrderBefore and OrderAfter put a graph launch between the engine's
	// eager calls (B19).
	OrderBefore(s hip.Stream) error
	OrderAfter(s hip.Stream) error
}

// engRef boxes an engine for an atomic pointer: the watchdog and abort
// read it without the launch lock.
type engRef struct{ e engine }

// newEngine sets up a rank's CE state; collective.
var newEngine = func(c ce.Comm, cfg ce.Config) (engine, error) {
	e, err := ce.Init(c, cfg)
	if err != nil {
		return nil, err
	}
	return e, nil
}

type state int32

const (
	stInit      state = iota // created; its collective init has not finished
	stReady                  // usable
	stFailed                 // init failed; only destroy is useful
	stFinalized              // ncclCommFinalize ran
	stAborted                // ncclCommAbort ran
	stDestroyed
)

// Comm is one rank of a communicator. It implements ce.Comm.
type Comm struct {
	rt   hip.Runtime
	rank int
	size int
	dev  int
	// devShared: another rank runs in this process on dev; oneDevice:
	// every rank does (initCollective).
	devShared bool
	oneDevice bool
	// callStreams: the most streams this rank's group of transfers may
	// join while the queues hold (ceBlocked; 0: no limit).
	callStreams int
	queues      uint64 // this rank's Caps.StreamQueues (0: no limit)
	cfg         Config
	engCfg      ce.Config // the engine's settings, agreed among the ranks at init
	w           *world
	boot        bootstrap.Bootstrap
	node        *nodeState // the TCP bootstrap's state (node.go); nil in-process

	mu      sync.Mutex // state transitions
	st      atomic.Int32
	ready   chan struct{} // closed when init finished, either way
	initErr error

	engMu sync.Mutex // engine (re)init, launches, finalize
	eng   engine
	engA  atomic.Pointer[engRef] // eng, for readers that must not take engMu
	args  ce.Args                // reused by every launch: the launch path allocates nothing
	seq   atomic.Uint64          // collectives issued, the same sequence on every rank
	// Sends and receives issued, by peer (p2p.go), and the batch of an
	// ungrouped one.
	sendSeq, recvSeq []uint64
	one              [1]ce.Transfer

	// asyncErr is the communicator's first asynchronous failure (a peer's
	// death or abort, no progress for CECOLL_TIMEOUT, a failed step, a
	// CECOLL_CHECK mismatch): every later call returns it.
	asyncErr atomic.Pointer[error]

	winMu   sync.RWMutex
	wins    []*Window // sorted by base; registered or being registered
	regs    map[uintptr]regEntry
	nextReg uintptr

	pairing // forward mode (pair.go)
}

// regEntry is one ncclCommRegister: the buffer, and the real library's
// handle for it in forward mode.
type regEntry struct {
	p, size uintptr
	real    forward.Handle
}

var _ ce.Comm = (*Comm)(nil)

func newComm(rt hip.Runtime, rank, size, dev int, cfg Config) *Comm {
	return &Comm{rt: rt, rank: rank, size: size, dev: dev, cfg: cfg,
		ready: make(chan struct{}), regs: make(map[uintptr]regEntry),
		sendSeq: make([]uint64, max(size, 0)), recvSeq: make([]uint64, max(size, 0))}
}

func (c *Comm) state() state { return state(c.st.Load()) }

// Rank implements ce.Comm (ncclCommUserRank).
func (c *Comm) Rank() int { return c.rank }

// Size implements ce.Comm (ncclCommCount).
func (c *Comm) Size() int { return c.size }

// Device implements ce.Comm (ncclCommCuDevice).
func (c *Comm) Device() int { return c.dev }

// DeviceShared implements ce.Comm: another rank of this communicator runs
// in this process on the same device (known once creation has gathered
// every rank's device and process).
func (c *Comm) DeviceShared() bool { return c.devShared }

// OneDevice implements ce.Comm: every rank runs in this process on this
// rank's device (the same answer on every rank).
func (c *Comm) OneDevice() bool { return c.oneDevice }

// Runtime implements ce.Comm.
func (c *Comm) Runtime() hip.Runtime { return c.rt }

// Config is the configuration the communicator was created with.
func (c *Comm) Config() Config { return c.cfg }

// Barrier implements ce.Comm.
func (c *Comm) Barrier() error { return c.boot.Barrier() }

// ID is ncclUniqueId (internal/bootstrap says what it holds).
type ID = bootstrap.ID

// IDBytes is NCCL_UNIQUE_ID_BYTES.
const IDBytes = bootstrap.IDBytes

// MaxRanks bounds nranks.
const MaxRanks = bootstrap.MaxRanks

// NewID is ncclGetUniqueId.
func NewID() (ID, error) { return bootstrap.NewID() }

// InitRank creates rank `rank` of an n-rank communicator on the calling
// thread's current device. Outside a group it returns once every rank has
// joined (collective); inside one it returns at once and the communicator
// is set up at ncclGroupEnd. In forward mode it owns a real communicator
// made from the same init (pair.go).
func InitRank(rt hip.Runtime, id ID, n, rank int, cfg Config) (*Comm, error) {
	lib, mode, err := currentLib()
	if err != nil {
		return nil, err
	}
	dev, err := rt.GetDevice()
	if err != nil {
		return nil, result.Errorf(result.UnhandledCudaError, "current device: %w", err)
	}
	return initRank(rt, id, n, rank, dev, cfg, pairArgs{lib: lib, mode: mode})
}

// initRank is InitRank on device dev, with the forward-mode set-up p
// (pairGiven: a real communicator the caller made).
func initRank(rt hip.Runtime, id ID, n, rank, dev int, cfg Config, p pairArgs) (*Comm, error) {
	if n < 1 || n > MaxRanks {
		return nil, result.Errorf(result.InvalidArgument, "nranks %d is outside 1..%d", n, MaxRanks)
	}
	if rank < 0 || rank >= n {
		return nil, result.Errorf(result.InvalidArgument, "rank %d out of range [0, %d)", rank, n)
	}
	key, err := id.Key()
	if err != nil {
		return nil, err
	}
	if rank == 0 && id.FromCommID() {
		if err := bootstrap.ListenCommID(&id); err != nil {
			return nil, err
		}
	}
	c := newComm(rt, rank, n, dev, cfg)
	c.lib, c.mode, c.given, c.givenErr = p.lib, p.mode, p.given, p.givenErr
	w, err := join(key, n, rank, c)
	if err != nil {
		c.dropGiven()
		return nil, err
	}
	c.w = w
	c.boot = newLocalBoot(w, rank)
	c.attachNode(&id)
	if g := currentGroup(); g != nil {
		g.addInit(c)
		return c, nil
	}
	if err := c.runInit(); err != nil {
		c.nodeClose()
		return nil, err
	}
	return c, nil
}

// dropGiven aborts a real communicator handed in for a pairing that never
// came (pairGiven).
func (c *Comm) dropGiven() {
	if c.mode == pairGiven && c.given != 0 {
		c.dropReal(c.given)
		c.given = 0
	}
}

// InitAll creates all n ranks of a communicator in this process, rank i on
// devs[i] (nil: devices 0..n-1). A device may appear several times.
func InitAll(rt hip.Runtime, n int, devs []int, cfg Config) ([]*Comm, error) {
	if n < 1 || n > MaxRanks {
		return nil, result.Errorf(result.InvalidArgument, "ndev %d is outside 1..%d", n, MaxRanks)
	}
	if devs != nil && len(devs) != n {
		return nil, result.Errorf(result.InvalidArgument, "devlist has %d entries, want %d", len(devs), n)
	}
	count, err := rt.DeviceCount()
	if err != nil {
		return nil, result.Errorf(result.UnhandledCudaError, "device count: %w", err)
	}
	var kb [8]byte
	if _, err := rand.Read(kb[:]); err != nil {
		return nil, result.Errorf(result.SystemError, "random key: %w", err)
	}
	for r := range n {
		if devs != nil && (devs[r] < 0 || devs[r] >= count) {
			return nil, result.Errorf(result.InvalidArgument, "devlist[%d] = %d: the backend has devices 0..%d", r, devs[r], count-1)
		}
	}
	if devs == nil && n > count {
		return nil, result.Errorf(result.InvalidArgument, "ndev %d with no devlist means devices 0..%d, but the backend has %d", n, n-1, count)
	}
	lib, _, err := currentLib()
	if err != nil {
		return nil, err
	}
	// The real library's ncclCommInitAll makes its side, all ranks at once;
	// each cecoll rank pairs with its own at init (pairUp), or, where it
	// refused, every rank stays CE-only.
	var real []forward.Handle
	var realErr error
	if lib != nil {
		real, realErr = lib.InitAll(n, devs)
		if realErr == nil && len(real) != n {
			realErr = fmt.Errorf("it made %d communicators, not %d", len(real), n)
		}
	}
	w := newWorld(binary.LittleEndian.Uint64(kb[:]), n)
	comms := make([]*Comm, n)
	for r := range comms {
		dev := r
		if devs != nil {
			dev = devs[r]
		}
		c := newComm(rt, r, n, dev, cfg)
		if lib != nil {
			c.lib, c.mode, c.givenErr = lib, pairGiven, realErr
			if realErr == nil {
				c.given = real[r]
			}
		}
		c.w = w
		c.boot = newLocalBoot(w, r)
		w.comms[r] = c
		comms[r] = c
	}
	w.joined = n
	errs := onThreads(comms, func(c *Comm) error { return c.runInit() })
	if err := firstError(errs); err != nil {
		for _, c := range comms {
			c.Destroy()
		}
		return nil, err
	}
	return comms, nil
}

// onThreads runs f for every comm concurrently, each on its own locked OS
// thread with the comm's device current, and returns the errors by index.
func onThreads(comms []*Comm, f func(*Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := c.rt.SetDevice(c.dev); err != nil {
				errs[i] = result.Errorf(result.UnhandledCudaError, "rank %d: set device %d: %w", c.rank, c.dev, err)
				// f is collective: its peers would wait for this rank.
				c.boot.Abort(result.Errorf(result.RemoteError, "rank %d failed: %w", c.rank, errs[i]))
				return
			}
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errs
}

// firstError returns the first of errs and logs the others, each distinct
// message once (every rank of a device may fail the same way).
func firstError(errs []error) error {
	var first error
	same := 0
	for _, e := range errs {
		switch {
		case e == nil:
		case first == nil:
			first = e
		case e.Error() == first.Error():
			same++
		default:
			log.Warnf("also failed: %v", e)
		}
	}
	if same > 0 {
		log.Warnf("%d more failed with the same error", same)
	}
	return first
}

// runInit is the collective part of creation: peers' devices, then the
// engine. On failure it aborts the bootstrap, so the other ranks fail
// promptly instead of waiting, and releases what it built.
func (c *Comm) runInit() error {
	defer close(c.ready)
	err := c.initCollective()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.initErr = err
		if c.state() == stInit {
			c.st.Store(int32(stFailed))
		}
		c.boot.Abort(result.Errorf(result.RemoteError, "rank %d failed to initialise: %w", c.rank, err))
		c.releaseLocked()
		c.dropGiven()
		if h := c.takeReal(); h != 0 {
			c.dropReal(h)
		}
		return err
	}
	if c.state() != stInit { // aborted while initialising
		return result.Errorf(result.InvalidUsage, "communicator aborted during initialisation")
	}
	c.st.Store(int32(stReady))
	watchAdd(c)
	log.Infof(log.Init, "comm %#x rank %d/%d on device %d (%s) ready", c.w.key, c.rank, c.size, c.dev, c.rt.Name())
	return nil
}

func (c *Comm) initCollective() error {
	all, err := c.exchangeInit()
	if err != nil {
		return err
	}
	c.oneDevice = true
	me := all[c.rank]
	for r, p := range all {
		// Only this process's world says which ranks run here: a peer
		// could claim this pid.
		here := r == c.rank || c.w.peer(r) != nil
		same := here && p.dev == me.dev
		if r != c.rank && same {
			c.devShared = true
		}
		c.oneDevice = c.oneDevice && same
	}
	c.queues, c.callStreams = me.queues, callStreams(me.queues, localRanks(all, me))
	if c.spans {
		// Copy engines reach one node: the real library runs every call.
		if c.lib == nil {
			return result.Errorf(result.InvalidUsage, "the communicator's ranks are on several hosts (%s, %s, ...): copy engines reach one node only, and no real NCCL or RCCL is loaded to forward to (CECOLL_NCCL_LIB)",
				all[0].host, me.host)
		}
		return c.pairUp(all[0])
	}
	if why := ceBlocked(all, c.lib != nil); why != "" {
		if c.lib == nil {
			return result.Errorf(result.InvalidUsage, "%s", why)
		}
		return c.forwardOnly(all[0], why)
	}
	if err := agreeEngine(all); err != nil {
		return err
	}
	eng, err := newEngine(c, c.engCfg)
	if err != nil {
		return result.Errorf(result.Of(err), "rank %d: copy-engine init: %w", c.rank, err)
	}
	c.engMu.Lock()
	c.setEngine(eng)
	c.engMu.Unlock()
	if c.lib != nil {
		return c.pairUp(all[0])
	}
	return nil
}

// setEngine installs eng (nil: none); c.engMu held.
func (c *Comm) setEngine(eng engine) {
	c.eng = eng
	if eng == nil {
		c.engA.Store(nil)
		return
	}
	c.engA.Store(&engRef{eng})
}

// engine is the current engine, read without the launch lock; nil if none.
func (c *Comm) engine() engine {
	if r := c.engA.Load(); r != nil {
		return r.e
	}
	return nil
}

// ceBlocked says why copy engines cannot run safely on some rank of the
// communicator ("" when they can on every rank). Every rank reads the same
// table (exchangeInit), so all decide alike, without another round.
//
// Hardware queues: while a collective is pending each rank holds two of
// its context's queues: the engine's stream parked on a flag wait, and the
// caller's stream waiting on the engine's end event (an event wait holds a
// queue as a flag wait does: docs/performance.md, "Do event waits hold
// hardware queues?"); a rank alone on its device in its process holds a
// third, its engine's side stream. Once every queue holds a parked stream
// no other stream of the process runs, the releasing writes included
// (Caps.StreamQueues): the first collective would hang. So the ranks of
// one process on one device need more queues than they hold together
// (queuesPerRank), and a group of transfers on several streams, each of
// which waits for the engine, may use only what is left (callStreams).
//
// Stream memory operations (Caps.StreamMemOps) are the flags' mechanism;
// without them every collective is refused, alike on every rank, which in
// CE-only mode is what the caller gets (forward: false), and in forward
// mode a reason to forward everything.
func ceBlocked(all []initInfo, forward bool) string {
	for r, m := range all {
		if forward && !m.memops {
			return fmt.Sprintf("copy engines cannot run on rank %d: its runtime has no stream memory operations (they need CUDA driver >= 12.5 or HIP >= 7.0)", r)
		}
		local := localRanks(all, m)
		if q := m.queues; q != 0 && uint64(queuesPerRank(local)*local) >= q {
			who := fmt.Sprintf("%d ranks of this communicator share device %d in its process (pid %d), and each holds", local, m.dev, m.pid)
			if local == 1 {
				who = fmt.Sprintf("it is its process's (pid %d) one rank on device %d, and holds", m.pid, m.dev)
			}
			return fmt.Sprintf("copy engines cannot run safely on rank %d: %s %d of the context's %d hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) while a collective is pending, which would stall the GPU; %s",
				r, who, queuesPerRank(local), q, queueAdvice(local, q))
		}
	}
	return ""
}

// queueAdvice says how local ranks of one process on one device get the
// queues they need with q now.
func queueAdvice(local int, q uint64) string {
	need := queuesPerRank(local)*local + 1
	fit := fitRanks(hip.MaxStreamQueues) // the most ranks any setting allows
	var fixes []string
	if need <= hip.MaxStreamQueues {
		fixes = append(fixes, fmt.Sprintf("set CUDA_DEVICE_MAX_CONNECTIONS to at least %d (the driver allows up to %d) in the environment before the process first uses CUDA", need, hip.MaxStreamQueues))
	}
	if now := fitRanks(q); now >= 1 {
		fixes = append(fixes, fmt.Sprintf("run at most %d ranks per device per process", now))
	} else if need > hip.MaxStreamQueues {
		fixes = append(fixes, fmt.Sprintf("run at most %d ranks per device per process (with CUDA_DEVICE_MAX_CONNECTIONS=%d)", fit, hip.MaxStreamQueues))
	}
	return strings.Join(fixes, ", or ")
}

// queuesPerRank is how many hardware queues a rank's pending collective
// holds where local ranks of its process share its device (ceBlocked):
// the engine's stream and the caller's, and the side stream of a rank
// alone there (ce: Engine.side).
func queuesPerRank(local int) int {
	if local == 1 {
		return 3
	}
	return 2
}

// fitRanks is the most ranks of one process that q queues let share a
// device (0: not even one).
func fitRanks(q uint64) int {
	n := int(q-1) / queuesPerRank(2)
	if n == 1 && q <= uint64(queuesPerRank(1)) {
		n = 0 // one rank alone holds its side stream too
	}
	return n
}

// localRanks is how many ranks of m's process run on m's device.
func localRanks(all []initInfo, m initInfo) int {
	local := 0
	for _, o := range all {
		if o.host == m.host && o.pid == m.pid && o.dev == m.dev {
			local++
		}
	}
	return local
}

// callStreams is the most streams a rank's group of transfers may join
// (its first one included) with q queues shared by local ranks, each
// holding its engine's streams: every stream of a pending group waits on
// the engine's end and holds a queue (ceBlocked). 0: no limit.
func callStreams(q uint64, local int) int {
	if q == 0 {
		return 0
	}
	return max(int(q-1)/local-(queuesPerRank(local)-1), 1)
}

// forwardOnly sets up a communicator that forwards every call, because
// copy engines cannot run safely on some rank (why): in forward mode that
// must not fail the job. Every rank decided it from the same table; this
// wins over CECOLL_ROUTE=ce. Where the real library refused the
// communicator too, nothing can run it: the init fails on every rank.
func (c *Comm) forwardOnly(root initInfo, why string) error {
	c.noCE = why
	if err := c.pairUp(root); err != nil {
		return err
	}
	if c.Real() == 0 {
		return result.Errorf(result.InvalidUsage, "%s; and %s", why, c.realWhy)
	}
	if c.rank == 0 {
		log.Warnf("comm %#x: every call goes to the real library (%s), CECOLL_ROUTE=ce included: %s", c.w.key, c.lib.Name(), why)
	}
	return nil
}

// onDevice runs f with the comm's device current on the calling thread,
// then restores the caller's device (NCCL programs do not expect a call to
// change it).
func (c *Comm) onDevice(f func() error) error {
	cur, err := c.rt.GetDevice()
	if err != nil {
		return result.Errorf(result.UnhandledCudaError, "current device: %w", err)
	}
	if cur != c.dev {
		if err := c.rt.SetDevice(c.dev); err != nil {
			return result.Errorf(result.UnhandledCudaError, "set device %d: %w", c.dev, err)
		}
		defer c.rt.SetDevice(cur)
	}
	return f()
}

// closeEngineLocked ends the CE state: the engine stops taking calls at
// once and frees itself once its streams drained (the returned function
// waits for that and reports whether it happened, rather than a leak).
// c.engMu held. It never waits for peers.
func (c *Comm) closeEngineLocked() (drained func() bool) {
	eng := c.eng
	c.setEngine(nil)
	if eng == nil {
		return func() bool { return true }
	}
	done := eng.Close()
	return func() bool {
		<-done
		return eng.Drained()
	}
}

// releaseLocked frees everything local: engine, windows, the world's slot.
// c.mu held. Idempotent, and it never waits: the user windows' peer
// mappings, which a pending collective's copies may still write, are
// unmapped once the engine's streams have drained (never if they did not);
// the engine deregisters its own windows when it frees itself.
func (c *Comm) releaseLocked() {
	watchRemove(c)
	c.engMu.Lock()
	drained := c.closeEngineLocked()
	c.engMu.Unlock()
	c.winMu.Lock()
	var user []*Window
	kept := c.wins[:0]
	for _, w := range c.wins {
		if w.internal {
			kept = append(kept, w)
			continue
		}
		w.live.Store(false)
		w.dead = true
		user = append(user, w)
	}
	c.wins = kept
	c.regs = make(map[uintptr]regEntry)
	c.winMu.Unlock()
	reclaiming.Add(1)
	go func() {
		defer reclaiming.Done()
		if !drained() {
			return
		}
		for _, w := range user {
			c.unmapWindow(w)
		}
	}()
}

// reclaiming counts the communicators whose engines are still freeing
// themselves in the background (tests wait for it before they close the
// runtime).
var reclaiming sync.WaitGroup

// Finalize is ncclCommFinalize: local, idempotent. It releases the CE state
// (the engine completes or abandons its own work); collectives afterwards
// are ncclInvalidUsage. In forward mode the real communicator is finalized
// first (it keeps it until Destroy).
func (c *Comm) Finalize() error {
	var rerr error
	if h := c.Real(); h != 0 && c.state() == stReady {
		rerr = c.lib.Finalize(forward.Handle(h))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state() {
	case stInit:
		return result.Errorf(result.InvalidUsage, "ncclCommFinalize: communicator is still being created (its ncclGroupEnd has not run)")
	case stReady:
		c.st.Store(int32(stFinalized))
		watchRemove(c)
		c.engMu.Lock()
		c.closeEngineLocked()
		c.engMu.Unlock()
	}
	return rerr
}

// Destroy is ncclCommDestroy: local, never waits for peers, frees
// everything (finalizing first if needed). Idempotent here; export's handle
// registry turns a second call into ncclInvalidArgument. In forward mode
// the real communicator is destroyed first; its error is returned, but
// cecoll's side is gone either way (Destroyed).
func (c *Comm) Destroy() error {
	if c.state() == stInit {
		select {
		case <-c.ready:
		default:
			return result.Errorf(result.InvalidUsage, "ncclCommDestroy: communicator is still being created (its ncclGroupEnd has not run)")
		}
	}
	var rerr error
	if h := c.takeReal(); h != 0 {
		rerr = c.lib.Destroy(h)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state() == stDestroyed {
		return rerr
	}
	c.releaseLocked()
	c.detach()
	c.st.Store(int32(stDestroyed))
	return rerr
}

// Destroyed reports whether Destroy (or Abort) freed cecoll's side.
func (c *Comm) Destroyed() bool {
	st := c.state()
	return st == stDestroyed || st == stAborted
}

func (c *Comm) detach() {
	c.nodeClose()
	if c.w == nil {
		return
	}
	c.w.mu.Lock()
	if c.w.comms[c.rank] == c {
		c.w.comms[c.rank] = nil
	}
	c.w.mu.Unlock()
}

// AsyncError is ncclCommGetAsyncError: nil normally, the init error of a
// communicator whose deferred creation failed, or its first asynchronous
// failure. In forward mode the real communicator's state comes first: its
// failure, or InProgress.
func (c *Comm) AsyncError() error {
	if h := c.Real(); h != 0 {
		if err := c.lib.AsyncError(forward.Handle(h)); err != nil {
			return err
		}
	}
	if c.state() == stFailed {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.initErr
	}
	if p := c.asyncErr.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records err as the communicator's asynchronous failure (the first
// one wins) and releases what waits: the engine's queued flag waits, the
// peers in other processes (told through the bootstrap) and the ranks of
// this process, which share the failed collectives. It takes no lock a
// call may hold, so it gets through while a call waits for room in a
// stream's queue.
func (c *Comm) fail(err error) {
	if !c.asyncErr.CompareAndSwap(nil, &err) {
		return
	}
	log.Warnf("rank %d: %v", c.rank, err)
	if eng := c.engine(); eng != nil {
		eng.Abort()
	}
	if c.node != nil {
		c.node.boot.Abort(err)
	}
	if c.w != nil {
		for r := range c.w.n {
			if p := c.w.peer(r); p != nil && p != c {
				p.fail(err)
			}
		}
	}
}

// failedAsync is the asynchronous failure of a live communicator (ready,
// or still forming in a group) as what's error, or nil: every collective,
// registration and ncclCeInit after it returns that error, also one made
// inside a group and one whose arguments are wrong.
func (c *Comm) failedAsync(what string) error {
	if st := c.state(); st != stReady && st != stInit {
		return nil
	}
	if p := c.asyncErr.Load(); p != nil {
		return result.Errorf(result.Of(*p), "%s: the communicator failed: %w", what, *p)
	}
	return nil
}

// usable returns nil when collectives may be issued on c.
func (c *Comm) usable(what string) error {
	switch c.state() {
	case stReady:
		return c.failedAsync(what)
	case stInit:
		return result.Errorf(result.InvalidUsage, "%s: communicator is still being created (its ncclGroupEnd has not run)", what)
	case stFailed:
		return result.Errorf(result.InvalidUsage, "%s: communicator creation failed: %w", what, c.initErr)
	case stFinalized:
		return result.Errorf(result.InvalidUsage, "%s: communicator was finalized", what)
	case stAborted:
		return result.Errorf(result.InvalidUsage, "%s: communicator was aborted", what)
	default:
		return result.Errorf(result.InvalidArgument, "%s: communicator was destroyed", what)
	}
}

// CeInit is ncclCeInit: a no-op while the CE state exists (made at
// creation); after CeFinalize it sets it up again, collectively (inside a
// group: at ncclGroupEnd).
func (c *Comm) CeInit() error {
	if st := c.state(); st != stReady && st != stInit {
		return c.usable("ncclCeInit")
	}
	if err := c.failedAsync("ncclCeInit"); err != nil {
		return err
	}
	if g := currentGroup(); g != nil {
		g.addCeInit(c)
		return nil
	}
	if err := c.usable("ncclCeInit"); err != nil {
		return err
	}
	return c.ceInitNow()
}

func (c *Comm) ceInitNow() error {
	if err := c.usable("ncclCeInit"); err != nil {
		return err
	}
	c.engMu.Lock()
	defer c.engMu.Unlock()
	if c.eng != nil {
		return nil
	}
	if c.noCE != "" {
		return result.Errorf(result.InvalidUsage, "ncclCeInit: %s", c.noCE)
	}
	return c.onDevice(func() error {
		eng, err := newEngine(c, c.engCfg)
		if err != nil {
			return result.Errorf(result.Of(err), "ncclCeInit: %w", err)
		}
		c.setEngine(eng)
		return nil
	})
}

// CeFinalize is ncclCeFinalize: local and idempotent. The engine is freed
// once its streams drained; a later ncclCeInit makes a new one. It needs
// no watchdog lock (Finalize, Destroy and Abort take it to stop watching):
// a watchdog that read the engine just before still probes it safely, since
// the engine frees nothing a probe reads while one runs (ce Engine.freeMu).
func (c *Comm) CeFinalize() error {
	c.engMu.Lock()
	defer c.engMu.Unlock()
	c.closeEngineLocked()
	return nil
}
