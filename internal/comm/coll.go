package comm

import (
	"math/bits"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// dtypeSizes are the sizes of ncclDataType_t values 0..11.
var dtypeSizes = [...]uintptr{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

// DatatypeSize is the size of an ncclDataType_t, 0 for an unknown one.
func DatatypeSize(dt int32) uintptr {
	if dt < 0 || int(dt) >= len(dtypeSizes) {
		return 0
	}
	return dtypeSizes[dt]
}

var funcNames = [...]string{"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce",
	"SendRecv", "Send", "Recv", "AlltoAll", "Scatter", "Gather"}

// FuncName is the NCCL name of fn ("AllGather").
func FuncName(fn ce.Func) string {
	if fn < 0 || int(fn) >= len(funcNames) {
		return "unknown collective"
	}
	return funcNames[fn]
}

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
		pc.a.PeerSend, pc.a.PeerRecv = nil, nil
		if sendWin != nil {
			pc.a.SendWin = sendWin
		}
		if recvWin != nil {
			pc.a.RecvWin = recvWin
		}
		g.colls = append(g.colls, pc)
		return nil
	}
	if err := c.usable(FuncName(a.Func)); err != nil {
		return err
	}
	c.seq.Add(1)
	c.engMu.Lock()
	defer c.engMu.Unlock()
	c.args = *a
	c.args.PeerSend, c.args.PeerRecv, c.args.SendWin, c.args.RecvWin = nil, nil, nil, nil
	if sendWin != nil {
		c.args.SendWin = sendWin
	}
	if recvWin != nil {
		c.args.RecvWin = recvWin
	}
	cur, err := c.rt.GetDevice()
	if err != nil {
		return result.Errorf(result.UnhandledCudaError, "current device: %w", err)
	}
	err = c.launchLocked(&c.args)
	if cur != c.dev {
		c.rt.SetDevice(cur)
	}
	return err
}

// launchNow launches a deferred collective at ncclGroupEnd. It leaves the
// comm's device current: the group restores the caller's once, at its end.
func (c *Comm) launchNow(a *ce.Args) error {
	if err := c.usable(FuncName(a.Func)); err != nil {
		return err
	}
	c.engMu.Lock()
	defer c.engMu.Unlock()
	c.args = *a
	return c.launchLocked(&c.args)
}

// stepNow runs step k of a grouped event round (ce.Engine.Step). Like
// launchNow it leaves the comm's device current.
func (c *Comm) stepNow(a *ce.Args, k int) error {
	if k == 0 {
		if err := c.usable(FuncName(a.Func)); err != nil {
			return err
		}
	}
	c.engMu.Lock()
	defer c.engMu.Unlock()
	ee, ok := c.eng.(eventEngine)
	if !ok {
		return result.Errorf(result.InvalidUsage, "%s: the copy-engine state was released by ncclCeFinalize (call ncclCeInit)", FuncName(a.Func))
	}
	if k == 0 {
		c.checkPost(a) // CECOLL_CHECK (check.go); no-op otherwise
	}
	if err := ee.Step(a, k); err != nil {
		return result.Errorf(result.Of(err), "%s: %w", FuncName(a.Func), err)
	}
	return nil
}

// launchLocked hands a to the engine, which makes the comm's device
// current; c.engMu held. The caller restores its own device.
func (c *Comm) launchLocked(a *ce.Args) error {
	if c.eng == nil {
		return result.Errorf(result.InvalidUsage, "%s: the copy-engine state was released by ncclCeFinalize (call ncclCeInit)", FuncName(a.Func))
	}
	c.checkPost(a) // CECOLL_CHECK (check.go); no-op otherwise
	if err := c.eng.Launch(a); err != nil {
		return result.Errorf(result.Of(err), "%s: %w", FuncName(a.Func), err)
	}
	return nil
}

// check validates one rank's arguments as NCCL's argcheck does.
func (c *Comm) check(a *ce.Args, sendWin, recvWin *Window) error {
	name := FuncName(a.Func)
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
		return result.Errorf(result.InvalidArgument, "%s: eltSize %d does not match datatype %d (%d bytes)", name, a.EltSize, a.Datatype, elt)
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
