package comm

import (
	"math/bits"
	"slices"
	"strconv"
	"sync"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/osthread"
	"cecoll/internal/result"
)

// Func is ncclFunc_t; export names the collectives through comm, which
// alone talks to the engine.
type Func = ce.Func

// The collectives cecoll runs.
const (
	FuncAllGather = ce.FuncAllGather
	FuncAlltoAll  = ce.FuncAlltoAll
	FuncBroadcast = ce.FuncBroadcast
	FuncScatter   = ce.FuncScatter
	FuncGather    = ce.FuncGather
)

// LaunchArgs are ncclLaunchCeColl's: its ncclCeCollArgs and stream.
type LaunchArgs struct {
	Func       Func
	Root       int
	Datatype   int32 // ncclDataType_t
	Count      uintptr
	EltSize    uintptr
	Send, Recv hip.DevicePtr
	Stream     hip.Stream
}

// Collective issues one public collective call (ncclAllGather ...): it
// fills the arguments ncclLaunchCeColl would get and launches them.
func (c *Comm) Collective(fn Func, send, recv hip.DevicePtr, count uintptr, dt int32, root int, s hip.Stream) error {
	a := ce.Args{Func: fn, Root: root, Datatype: dt, Count: count, EltSize: ce.TypeSize(dt),
		Send: send, Recv: recv, Stream: s}
	return c.launch(&a, nil, nil)
}

// Launch is ncclLaunchCeColl. sendWin/recvWin (may be nil) are windows of
// c holding the buffers.
func (c *Comm) Launch(l *LaunchArgs, sendWin, recvWin *Window) error {
	err := c.launchArgs(l, sendWin, recvWin)
	if err == nil {
		c.tally.Add(int(l.Func), uint64(l.Count)*uint64(l.EltSize), true) // the seed's entry: copy engines only
	}
	return err
}

// launchArgs is Launch's work: a send or receive goes to P2P, the rest to
// launch.
func (c *Comm) launchArgs(l *LaunchArgs, sendWin, recvWin *Window) error {
	if l.Func == FuncSend || l.Func == FuncRecv {
		// A send or receive: rootRank is its peer; windows change nothing.
		if e := ce.TypeSize(l.Datatype); e != 0 && l.EltSize != e {
			return c.Refuse(result.Errorf(result.InvalidArgument, "%s: eltSize %d does not match %s (%d bytes)", l.Func, l.EltSize, ce.TypeName(l.Datatype), e))
		}
		buf := l.Send
		if l.Func == FuncRecv {
			buf = l.Recv
		}
		return c.P2P(l.Func, buf, l.Count, l.Datatype, l.Root, l.Stream)
	}
	a := ce.Args{Func: l.Func, Root: l.Root, Datatype: l.Datatype, Count: l.Count, EltSize: l.EltSize,
		Send: l.Send, Recv: l.Recv, Stream: l.Stream}
	return c.launch(&a, sendWin, recvWin)
}

// launch validates a, then queues this rank's part on a.Stream, or defers
// it to the thread's ncclGroupEnd. a is only read.
func (c *Comm) launch(a *ce.Args, sendWin, recvWin *Window) error {
	if err := c.failedAsync(a.Func.String()); err != nil {
		return err
	}
	if err := provided(a.Func); err != nil {
		return err // every rank refuses it alike
	}
	if c.noCE != "" {
		return result.Errorf(result.InvalidUsage, "%s: %s", a.Func, c.noCE) // alike too: agreed at init
	}
	if err := c.check(a, sendWin, recvWin); err != nil {
		return c.Refuse(err)
	}
	if a.Count == 0 {
		return nil // NCCL: an empty collective is a no-op
	}
	if g := currentGroup(); g != nil {
		if st := c.state(); st != stReady && st != stInit {
			return c.Refuse(c.usable("ncclLaunchCeColl"))
		}
		pc := pendingColl{c: c, seq: c.seq.Add(1), a: *a}
		pc.a.PeerSend, pc.a.PeerRecv, pc.a.PeerEvents = nil, nil, nil
		pc.a.SendWin, pc.a.RecvWin = symmetric(sendWin), symmetric(recvWin)
		g.colls = append(g.colls, pc)
		return nil
	}
	if err := c.usable(a.Func.String()); err != nil {
		return c.Refuse(err)
	}
	if err := c.claimStream(a.Stream); err != nil {
		return err
	}
	c.engMu.Lock()
	defer c.engMu.Unlock()
	c.args = *a
	c.args.PeerSend, c.args.PeerRecv, c.args.PeerEvents = nil, nil, nil
	c.args.SendWin, c.args.RecvWin = symmetric(sendWin), symmetric(recvWin)
	cur, err := c.rt.GetDevice()
	if err != nil {
		return result.Errorf(result.UnhandledCudaError, "current device: %w", err)
	}
	if cur != c.dev {
		defer c.rt.SetDevice(cur)
	}
	pr, err := c.prepareLocked(&c.args)
	if err != nil {
		return c.Refuse(err)
	}
	for k := range pr.Steps {
		if err := c.stepLocked(a.Func, k); err != nil {
			return err
		}
	}
	return nil
}

// symmetric is w as the engine may use it: windows registered without
// NCCL_WIN_COLL_SYMMETRIC promise nothing about peers' offsets.
func symmetric(w *Window) ce.Window {
	if w == nil || w.flags&WinCollSymmetric == 0 {
		return nil
	}
	return w
}

// claimStream refuses an ungrouped call on a stream on which another rank
// of this communicator in this process has issued a collective that is not
// earlier than this one: that call waits for this rank's part of it, which
// this rank issues after this call, and this call is queued behind it on
// the stream, forever. In a group the steps of every rank interleave, so
// ranks may share a stream there. The NULL stream and its explicit name
// are one stream; cudaStreamPerThread is one per thread.
func (c *Comm) claimStream(s hip.Stream) error {
	if c.w == nil || c.w.n == 1 {
		c.seq.Add(1)
		return nil
	}
	seq := c.seq.Load() + 1 // the call being issued
	if err := c.claim(s, seq, nil); err != nil {
		// The other rank's part is enqueued and would wait for this one
		// forever: the communicator fails, which releases it.
		c.fail(err)
		return err
	}
	c.seq.Store(seq)
	return nil
}

// claim notes this rank's call on stream s in its world's streams (seq:
// a collective's number; p2pMark: a send or receive, which marks the
// stream for good) and refuses it where another rank of this process has
// issued there a call this one may queue behind, or wait for while
// queued before it: for a collective one numbered seq or later, for a
// transfer any call. Ranks for which in answers true (a group's set,
// whose steps interleave with this call's) are not others. The error
// names the rank and its call.
func (c *Comm) claim(s hip.Stream, seq uint64, in func(rank int) bool) error {
	if c.w == nil || c.w.n == 1 {
		return nil
	}
	key := keyOf(s, c.dev)
	from := seq
	if seq == p2pMark {
		from = 1
	}
	w := c.w
	w.mu.Lock()
	last := w.streams[key]
	if last == nil {
		last = make([]uint64, w.n) // the last call of each rank here
		w.streams[key] = last
	}
	other := -1
	for r, q := range last {
		if r != c.rank && q >= from && (in == nil || !in(r)) {
			other = r
			break
		}
	}
	if other < 0 {
		last[c.rank] = max(last[c.rank], seq)
		w.mu.Unlock()
		return nil
	}
	q := last[other]
	w.mu.Unlock()
	mine, theirs := "collective #"+strconv.FormatUint(seq, 10), "collective #"+strconv.FormatUint(q, 10)
	if seq == p2pMark {
		mine = "a send or receive"
	}
	if q == p2pMark {
		theirs = "send or receive"
	}
	where := "outside a group"
	if in != nil {
		where = "in a group without it"
	}
	return result.Errorf(result.InvalidUsage,
		"rank %d issued %s on %s %s, with rank %d's %s there: each may wait for the other; give each rank its own stream, or issue them in one ncclGroupStart/End",
		c.rank, mine, streamName(key), where, other, theirs)
}

type streamKey struct {
	s   hip.Stream
	tid int // the per-thread stream's thread
	dev int // the NULL and per-thread streams' device
}

// Graphs. A graph replayed beside eager calls of a communicator, or beside
// another graph of it, must not overlap them: they share its flags and
// staging windows (B19). The calls captured on a stream are remembered by
// the capturing thread and stream; cecollStreamEndCapture takes them, and
// cecollGraphLaunch puts the replay between OrderBefore and OrderAfter of
// each. (Collectives captured on another stream forked into the capture
// are not seen: launch such a graph on a stream ordered with the
// communicator's other work.)
var captured = struct {
	sync.Mutex
	m map[captureKey][]*Comm
}{m: make(map[captureKey][]*Comm)}

type captureKey struct {
	tid int
	s   hip.Stream
}

func noteCapture(s hip.Stream, c *Comm) {
	k := captureKey{osthread.ID(), s}
	captured.Lock()
	defer captured.Unlock()
	if !slices.Contains(captured.m[k], c) {
		captured.m[k] = append(captured.m[k], c)
	}
}

// TakeCaptured returns and forgets the communicators whose collectives the
// calling thread captured on s (its capture ends).
func TakeCaptured(s hip.Stream) []*Comm {
	k := captureKey{osthread.ID(), s}
	captured.Lock()
	defer captured.Unlock()
	cs := captured.m[k]
	delete(captured.m, k)
	return cs
}

// OrderBefore makes s wait for every eager collective of c so far, before
// a graph holding collectives of c is launched on s; OrderAfter makes c's
// next collective wait for that launch. A failed communicator refuses
// OrderBefore with its failure; OrderAfter comes after the launch was
// enqueued, so it records the launch's end whatever happened meanwhile
// (the engine's Close waits for it before it frees what the replay
// writes). A finalized or destroyed one orders nothing.
func (c *Comm) OrderBefore(s hip.Stream) error { return c.order(s, true) }

// OrderAfter: see OrderBefore.
func (c *Comm) OrderAfter(s hip.Stream) error { return c.order(s, false) }

func (c *Comm) order(s hip.Stream, before bool) error {
	if before {
		if c.state() != stReady {
			return nil
		}
		if err := c.usable("cecollGraphLaunch"); err != nil {
			return err
		}
	}
	c.engMu.Lock()
	defer c.engMu.Unlock()
	if c.eng == nil {
		return nil
	}
	err := c.onDevice(func() error {
		if before {
			return c.eng.OrderBefore(s)
		}
		return c.eng.OrderAfter(s)
	})
	if err != nil {
		if ferr := c.failedAsync("cecollGraphLaunch"); ferr != nil {
			return ferr // the failure aborted the engine as this call reached it: name the cause
		}
		return err
	}
	return nil
}

// prepareLocked hands a to the engine, which plans it without enqueueing
// anything; c.engMu held.
func (c *Comm) prepareLocked(a *ce.Args) (ce.Prepared, error) {
	if c.eng == nil {
		return ce.Prepared{}, result.Errorf(result.InvalidUsage, "%s: the copy-engine state was released by ncclCeFinalize (call ncclCeInit)", a.Func)
	}
	if a.Func != ce.FuncSendRecv {
		// CECOLL_CHECK (check.go; no-op otherwise) compares collectives:
		// batches of transfers differ between ranks by design.
		c.checkPost(a)
	}
	pr, err := c.eng.Prepare(a)
	if err != nil {
		if ferr := c.failedAsync(a.Func.String()); ferr != nil {
			return pr, ferr // the engine was aborted by that failure: name its cause
		}
		return pr, result.Errorf(result.Of(err), "%s: %w", a.Func, err)
	}
	if pr.Captured {
		noteCapture(a.Stream, c)
	}
	return pr, nil
}

// stepLocked runs step k of the prepared call; c.engMu held. A step that
// fails may leave part of the collective enqueued, with the flags out of
// step: the communicator fails (and its waits are released).
func (c *Comm) stepLocked(f ce.Func, k int) error {
	if err := c.eng.Step(k); err != nil {
		err = result.Errorf(result.Of(err), "%s: %w", f, err)
		c.fail(err)
		return err
	}
	return nil
}

// Refuse is the error of a collective this rank refuses (its arguments,
// its state, the engine's checks) while its peers may have issued theirs.
// Those would wait for this rank's next call and pair with it: silent
// wrong data, or a wait until CECOLL_TIMEOUT. So on a communicator of
// several ranks the refusal fails the communicator, as a peer's abort
// does: every rank learns it at once (ncclCommGetAsyncError) and refuses
// its later calls. err itself is returned to the caller. A one-rank
// communicator has no peer to mislead and stays usable. Refusals every
// rank makes alike (provided) never come here.
func (c *Comm) Refuse(err error) error {
	if err != nil && c.size > 1 {
		c.fail(result.Errorf(result.RemoteError, "rank %d refused a call, so the communicator fails (no rank may pair a later call with another rank's): %w", c.rank, err))
	}
	return err
}

// Provided names the operations copy engines run ("AllGather, AlltoAll,
// Scatter and Gather"), for refusals.
func Provided() string { return ce.Provided() }

// provided refuses what cecoll never runs on copy engines (the row of
// the operation, ce op.go, says): the same answer on every rank, so the
// communicator stays usable.
func provided(fn ce.Func) error {
	o := ce.OpOf(fn)
	switch {
	case o == nil, o.CE:
		return nil // a value that is no operation is a bad argument: check refuses it
	case o.Reduces:
		return result.Errorf(result.InvalidUsage, "%s: reductions need compute; cecoll moves data only", fn)
	}
	return result.Errorf(result.InvalidUsage, "%s: cecoll runs %s on copy engines only", fn, ce.Provided())
}

// check validates one rank's arguments as NCCL's argcheck does, by the
// operation's row (ce op.go): its root or peer, its buffers' lengths and
// which ranks use them.
func (c *Comm) check(a *ce.Args, sendWin, recvWin *Window) error {
	name := a.Func.String()
	o := ce.OpOf(a.Func)
	if o == nil {
		return result.Errorf(result.InvalidArgument, "ncclLaunchCeColl: unknown collective %d", a.Func)
	}
	elt := ce.TypeSize(a.Datatype)
	if elt == 0 {
		return result.Errorf(result.InvalidArgument, "%s: unknown datatype %d (nccl.h's are 0 to %d)", name, a.Datatype, ce.NumTypes-1)
	}
	if a.EltSize != elt {
		return result.Errorf(result.InvalidArgument, "%s: eltSize %d does not match %s (%d bytes)", name, a.EltSize, ce.TypeName(a.Datatype), elt)
	}
	if o.Arg != ce.ArgNone && (a.Root < 0 || a.Root >= c.size) {
		what := "root"
		if o.Arg == ce.ArgPeer {
			what = "peer"
		}
		return result.Errorf(result.InvalidArgument, "%s: %s %d out of range [0, %d)", name, what, a.Root, c.size)
	}
	hi, chunk := bits.Mul64(uint64(a.Count), uint64(elt))
	hi2, total := bits.Mul64(chunk, o.MaxBlocks(c.size))
	if hi != 0 || hi2 != 0 || total > uint64(^uintptr(0)>>1) {
		return result.Errorf(result.InvalidArgument, "%s: count %d of %s times %d ranks overflows", name, a.Count, ce.TypeName(a.Datatype), c.size)
	}
	for _, w := range [...]*Window{sendWin, recvWin} {
		if w != nil && (w.c != c || !w.live.Load()) {
			return result.Errorf(result.InvalidArgument, "%s: window is not registered on this communicator", name)
		}
	}
	if a.Count == 0 {
		return nil
	}
	for _, side := range ce.Sides {
		if o.Uses(side, c.rank, a.Root) && a.Buffer(side) == 0 {
			return result.Errorf(result.InvalidArgument, "%s: %s is NULL", name, side)
		}
	}
	return nil
}
