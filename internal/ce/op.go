package ce

import (
	"strings"

	"cecoll/internal/hip"
)

// The operations, one row each: what NCCL's contract says of a call's
// buffers and arguments, which everything else reads (internal/comm's
// argument check, CECOLL_CHECK and forward mode's routing; the engine's
// validation, path and plan). A new operation is a new row; its columns:
//
//   - CE: copy engines run it; a row without it is refused alike on every
//     rank (Reduces says why when it is a reduction).
//   - Arg: what Args.Root is: nothing, the root, or (one peer, as
//     send/recv) the peer.
//   - Send, Recv: each buffer's length in blocks of chunk = count x element
//     size (1, or one per rank; PerPeer: per-peer counts and
//     displacements, as AlltoAllv), and whether only the root uses it (the
//     others may pass NULL, or any value: NCCL ignores it).
//   - Decides: the buffer whose window decides the path (zero-copy or
//     staged) on every rank: one every rank passes, under NCCL's symmetric
//     contract at the same window offset. DecidesNone: the path follows
//     from the count alone (a pair's two buffers differ).
//
// Derived, so never restated (see the methods): the in-place form (the
// rank's block of the longer buffer is the shorter one; of equal lengths,
// the same pointer), on the ranks that use both buffers; the pointer the
// contract makes symmetric (the deciding buffer, or in a rooted root's
// in-place form the longer buffer, whose block r is rank r's); whose form
// the peers' plans depend on (Form).
type Op struct {
	Name    string
	CE      bool
	Reduces bool
	Arg     ArgKind
	Send    Buf
	Recv    Buf
	Decides Side
}

// ArgKind is what Args.Root means for an operation.
type ArgKind uint8

const (
	ArgNone ArgKind = iota
	ArgRoot         // the rank every block comes from or goes to
	ArgPeer         // the one peer of a point-to-point call
)

// Side names one of a call's two buffers.
type Side uint8

const (
	SideNone Side = iota
	SideSend
	SideRecv
)

// String names the buffer as nccl.h's prototypes do.
func (s Side) String() string { return [...]string{"no buffer", "sendbuff", "recvbuff"}[s] }

// Sides are the buffers of a call, in the prototypes' order.
var Sides = [...]Side{SideSend, SideRecv}

// Buffer is a's pointer of side s.
func (a *Args) Buffer(s Side) hip.DevicePtr {
	switch s {
	case SideSend:
		return a.Send
	case SideRecv:
		return a.Recv
	}
	return 0
}

// Blocks is a buffer's length in blocks of chunk bytes.
type Blocks uint8

const (
	NoBuffer Blocks = iota
	OneBlock
	PerRank // one block per rank of the communicator
	PerPeer // counts and displacements per peer (AlltoAllv)
)

// Buf is one buffer's column.
type Buf struct {
	Blocks   Blocks
	RootOnly bool // used on the root alone
}

var (
	block     = Buf{Blocks: OneBlock}
	perRank   = Buf{Blocks: PerRank}
	rootBlock = Buf{Blocks: OneBlock, RootOnly: true}
	rootRanks = Buf{Blocks: PerRank, RootOnly: true}
)

// ops is the table, by ncclFunc_t.
var ops = [NumFuncs]Op{
	FuncBroadcast:     {Name: "Broadcast", CE: true, Arg: ArgRoot, Send: rootBlock, Recv: block, Decides: SideRecv},
	FuncReduce:        {Name: "Reduce", Reduces: true, Arg: ArgRoot, Send: block, Recv: rootBlock},
	FuncAllGather:     {Name: "AllGather", CE: true, Send: block, Recv: perRank, Decides: SideRecv},
	FuncReduceScatter: {Name: "ReduceScatter", Reduces: true, Send: perRank, Recv: block},
	FuncAllReduce:     {Name: "AllReduce", Reduces: true, Send: block, Recv: block},
	FuncSendRecv:      {Name: "SendRecv", Arg: ArgPeer, Send: block, Recv: block},
	FuncSend:          {Name: "Send", CE: true, Arg: ArgPeer, Send: block},
	FuncRecv:          {Name: "Recv", CE: true, Arg: ArgPeer, Recv: block},
	FuncAlltoAll:      {Name: "AlltoAll", CE: true, Send: perRank, Recv: perRank, Decides: SideRecv},
	FuncScatter:       {Name: "Scatter", CE: true, Arg: ArgRoot, Send: rootRanks, Recv: block, Decides: SideRecv},
	FuncGather:        {Name: "Gather", CE: true, Arg: ArgRoot, Send: block, Recv: rootRanks, Decides: SideSend},
}

// OpOf is f's row, nil for a value that is no ncclFunc_t.
func OpOf(f Func) *Op {
	if f < 0 || f >= NumFuncs {
		return nil
	}
	return &ops[f]
}

// Rooted reports whether the operation has a root.
func (o *Op) Rooted() bool { return o.Arg == ArgRoot }

// FromRoot reports whether a rooted operation moves the root's send to
// the peers (Broadcast, Scatter), not the peers' sends to the root's
// receive (Gather).
func (o *Op) FromRoot() bool { return o.Send.RootOnly }

// BlockOff is the offset of rank q's block in buffer s: q's block of one
// per rank, or the one block every rank shares (a Broadcast's send).
func (o *Op) BlockOff(s Side, q int, chunk uintptr) hip.DevicePtr {
	if o.buf(s).Blocks == PerRank {
		return hip.DevicePtr(uintptr(q) * chunk)
	}
	return 0
}

func (o *Op) buf(s Side) Buf {
	switch s {
	case SideSend:
		return o.Send
	case SideRecv:
		return o.Recv
	}
	return Buf{}
}

// Uses reports whether rank's call reads or writes buffer s: NCCL ignores
// the others, which may be NULL or anything.
func (o *Op) Uses(s Side, rank, root int) bool {
	b := o.buf(s)
	return b.Blocks != NoBuffer && (!b.RootOnly || rank == root)
}

// Len is buffer s's length in bytes for n ranks (PerPeer: 0, its extent
// follows from its counts).
func (o *Op) Len(s Side, chunk uintptr, n int) uintptr {
	switch o.buf(s).Blocks {
	case OneBlock:
		return chunk
	case PerRank:
		return uintptr(n) * chunk
	}
	return 0
}

// MaxBlocks is the most blocks any buffer of the call holds: what the
// argument check bounds (count x element size x this must not overflow).
func (o *Op) MaxBlocks(n int) uint64 {
	if o.Send.Blocks == PerRank || o.Recv.Blocks == PerRank {
		return uint64(n)
	}
	return 1
}

// InPlace reports whether a is the in-place form on rank: on a rank that
// uses both buffers, the shorter one is this rank's block of the longer
// (AllGather: sendbuff = recvbuff + rank*chunk; a Scatter root: recvbuff
// = sendbuff + root*chunk; a Gather root: sendbuff = recvbuff +
// root*chunk), or both are the same pointer (AlltoAll, a Broadcast root).
func (o *Op) InPlace(a *Args, rank int) bool {
	if !o.Uses(SideSend, rank, a.Root) || !o.Uses(SideRecv, rank, a.Root) {
		return false
	}
	mine := hip.DevicePtr(uintptr(rank) * a.Count * a.EltSize)
	switch s, r := o.Send.Blocks, o.Recv.Blocks; {
	case s == r:
		return a.Send == a.Recv
	case s == PerRank:
		return a.Recv == a.Send+mine
	case r == PerRank:
		return a.Send == a.Recv+mine
	}
	return false
}

// Deciding is the buffer whose window decides the call's path on every
// rank, and the bytes of it the call reaches (0, 0: the path follows from
// the count alone).
func (o *Op) Deciding(a *Args, n int) (hip.DevicePtr, uintptr) {
	switch o.Decides {
	case SideSend, SideRecv:
		return a.Buffer(o.Decides), o.Len(o.Decides, a.Count*a.EltSize, n)
	}
	return 0, 0
}

// Symmetric is the pointer of rank's call that NCCL's symmetric contract
// puts at the same offset of one window on every rank, the bytes the call
// reaches from it, and whether peer r's block lies r*chunk into it (the
// in-place layout): the deciding buffer, except on a rooted root in place,
// where it is the longer buffer, one block per rank (one buffer buf per
// rank at the same offset; Scatter: recvbuff = buf + rank*count, Gather:
// sendbuff = buf + rank*count, on every rank).
func (o *Op) Symmetric(a *Args, rank, n int) (p hip.DevicePtr, size uintptr, layout bool) {
	p, size = o.Deciding(a, n)
	if o.layout() && rank == a.Root && o.InPlace(a, rank) {
		chunk := a.Count * a.EltSize
		if o.Send.Blocks == PerRank {
			return a.Send, uintptr(n) * chunk, true
		}
		return a.Recv, uintptr(n) * chunk, true
	}
	return p, size, false
}

// layout reports whether the operation has the in-place rooted layout:
// rooted, with one block on one side and one per rank on the other
// (Scatter, Gather).
func (o *Op) layout() bool {
	return o.Rooted() && o.Send.Blocks != o.Recv.Blocks
}

// FormShared reports whether the peers' plans depend on rank's form (in
// place or not), so that it must agree with theirs (CECOLL_CHECK): each
// rank's own where every rank's in-place form changes the plan (AlltoAll
// swaps in place: equal lengths of one block per rank), the root's where
// it lays out the peers' blocks (a rooted call).
func (o *Op) FormShared(rank, root int) bool {
	switch {
	case o.Rooted():
		return rank == root && o.layout()
	case o.Send.Blocks == PerRank && o.Recv.Blocks == PerRank:
		return true
	}
	return false
}

// provided names the operations copy engines run, for refusals
// ("Broadcast, AllGather, Send, Recv, AlltoAll, Scatter and Gather").
var provided = func() string {
	var names []string
	for _, o := range ops {
		if o.CE {
			names = append(names, o.Name)
		}
	}
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " and " + names[last]
}()

// Provided names the operations copy engines run, for refusals
// ("Broadcast, AllGather, Send, Recv, AlltoAll, Scatter and Gather").
func Provided() string { return provided }
