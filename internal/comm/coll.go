package comm

import (
	"math/bits"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/osthread"
	"cecoll/internal/result"
)

// DatatypeSize is the size of an ncclDataType_t, 0 for an unknown one.
func DatatypeSize(dt int32) uintptr { return ce.TypeSize(dt) }

// Collective issues one public collective call (ncclAllGather ...): it
// fills the arguments ncclLaunchCeColl would get and launches them.
func (c *Comm) Collective(fn ce.Func, send, recv hip.DevicePtr, count uintptr, dt int32, root int, s hip.Stream) error {
	a := ce.Args{Func: fn, Root: root, Datatype: dt, Count: count, EltSize: DatatypeSize(dt),
		Send: send, Recv: recv, Stream: s}
	return c.Launch(&a, nil, nil)
}

// Launch is ncclLaunchCeColl: it validates a, then queues this rank's part
// on a.Stream, or defers it to the thread's ncclGroupEnd. sendWin/recvWin
// (may be nil) are windows of c holding the buffers. a is only read.
func (c *Comm) Launch(a *ce.Args, sendWin, recvWin *Window) error {
	if err := c.check(a, sendWin, recvWin); err != nil {
		return err
	}
	if a.Count == 0 {
		return nil // NCCL: an empty collective is a no-op
	}
	if g := currentGroup(); g != nil {
		if st := c.state(); st != stReady && st != stInit {
			return c.usable("ncclLaunchCeColl")
		}
		pc := pendingColl{c: c, seq: c.seq.Add(1), a: *a}
		pc.a.PeerSend, pc.a.PeerRecv, pc.a.PeerEvents = nil, nil, nil
		pc.a.SendWin, pc.a.RecvWin = symmetric(sendWin), symmetric(recvWin)
		g.colls = append(g.colls, pc)
		return nil
	}
	if err := c.usable(a.Func.String()); err != nil {
		return err
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
		return err
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
// of this communicator in this process has issued the same collective:
// each would wait for the other behind it, forever. In a group the steps
// of every rank interleave, so ranks may share a stream there. The NULL
// stream and its explicit name are one stream; cudaStreamPerThread is one
// per thread.
func (c *Comm) claimStream(s hip.Stream) error {
	if c.w == nil || c.w.n == 1 {
		c.seq.Add(1)
		return nil
	}
	key := streamKey{s: s}
	switch s {
	case hip.StreamLegacy:
		key.s = hip.StreamNull
	case hip.StreamPerThread:
		key.tid = osthread.ID()
	}
	seq := c.seq.Load() + 1 // the call being issued
	w := c.w
	w.mu.Lock()
	u, ok := w.streams[key]
	if !ok || u.seq != seq || u.rank == c.rank {
		w.streams[key] = streamUse{seq: seq, rank: c.rank}
		c.seq.Store(seq)
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	what := "the same stream"
	if key.s == hip.StreamNull {
		what = "the NULL stream"
	}
	err := result.Errorf(result.InvalidUsage,
		"ranks %d and %d of this communicator issued collective #%d on %s outside a group: each would wait for the other behind it; give each rank its own stream, or issue them in one ncclGroupStart/End",
		u.rank, c.rank, seq, what)
	// Rank u.rank's part is enqueued and would wait for this one forever:
	// the communicator fails, which releases it.
	c.fail(err)
	return err
}

type streamKey struct {
	s   hip.Stream
	tid int
}

type streamUse struct {
	seq  uint64
	rank int
}

// prepareLocked hands a to the engine, which plans it without enqueueing
// anything; c.engMu held.
func (c *Comm) prepareLocked(a *ce.Args) (ce.Prepared, error) {
	if c.eng == nil {
		return ce.Prepared{}, result.Errorf(result.InvalidUsage, "%s: the copy-engine state was released by ncclCeFinalize (call ncclCeInit)", a.Func)
	}
	c.checkPost(a) // CECOLL_CHECK (check.go); no-op otherwise
	pr, err := c.eng.Prepare(a)
	if err != nil {
		return pr, result.Errorf(result.Of(err), "%s: %w", a.Func, err)
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

// check validates one rank's arguments as NCCL's argcheck does.
func (c *Comm) check(a *ce.Args, sendWin, recvWin *Window) error {
	name := a.Func.String()
	switch a.Func {
	case ce.FuncAllGather, ce.FuncAlltoAll, ce.FuncScatter, ce.FuncGather:
	case ce.FuncReduce, ce.FuncAllReduce, ce.FuncReduceScatter:
		return result.Errorf(result.InvalidUsage, "%s: reductions need compute; cecoll moves data only", name)
	default:
		if a.Func < 0 || a.Func >= ce.NumFuncs {
			return result.Errorf(result.InvalidArgument, "ncclLaunchCeColl: unknown collective %d", a.Func)
		}
		return result.Errorf(result.InvalidUsage, "%s: cecoll runs AllGather, AlltoAll, Scatter and Gather on copy engines only", name)
	}
	elt := DatatypeSize(a.Datatype)
	if elt == 0 {
		return result.Errorf(result.InvalidArgument, "%s: unknown datatype %d", name, a.Datatype)
	}
	if a.EltSize != elt {
		return result.Errorf(result.InvalidArgument, "%s: eltSize %d does not match %s (%d bytes)", name, a.EltSize, ce.TypeName(a.Datatype), elt)
	}
	rooted := a.Func == ce.FuncScatter || a.Func == ce.FuncGather
	if rooted && (a.Root < 0 || a.Root >= c.size) {
		return result.Errorf(result.InvalidArgument, "%s: root %d out of range [0, %d)", name, a.Root, c.size)
	}
	hi, chunk := bits.Mul64(uint64(a.Count), uint64(elt))
	hi2, total := bits.Mul64(chunk, uint64(c.size))
	if hi != 0 || hi2 != 0 || total > uint64(^uintptr(0)>>1) {
		return result.Errorf(result.InvalidArgument, "%s: count %d of %d-byte elements times %d ranks overflows", name, a.Count, elt, c.size)
	}
	for _, w := range [...]*Window{sendWin, recvWin} {
		if w != nil && (w.c != c || !w.live.Load()) {
			return result.Errorf(result.InvalidArgument, "%s: window is not registered on this communicator", name)
		}
	}
	if a.Count == 0 {
		return nil
	}
	isRoot := c.rank == a.Root
	needSend := a.Func != ce.FuncScatter || isRoot
	needRecv := a.Func != ce.FuncGather || isRoot
	if needSend && a.Send == 0 {
		return result.Errorf(result.InvalidArgument, "%s: sendbuff is NULL", name)
	}
	if needRecv && a.Recv == 0 {
		return result.Errorf(result.InvalidArgument, "%s: recvbuff is NULL", name)
	}
	return nil
}
