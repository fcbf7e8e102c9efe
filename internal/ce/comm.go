package ce

import "cecoll/internal/hip"

// Comm is the engine's view of a communicator. internal/comm implements it;
// the engine never imports internal/comm.
type Comm interface {
	Rank() int
	Size() int
	// Device is the communicator's device; the engine makes it current on
	// the calling OS thread before any runtime call (callers often do not).
	Device() int
	Runtime() hip.Runtime
	// RegisterWindow registers this rank's buffer [p, p+size) as a
	// symmetric window, collectively: every rank calls it in the same order.
	// The engine uses it at Init for its internal windows (sync flags,
	// staging). p comes from Runtime().MemAlloc.
	RegisterWindow(p hip.DevicePtr, size uintptr) (Window, error)
	// DeregisterWindow is local and never waits for peers.
	DeregisterWindow(w Window) error
	// FindWindow returns the symmetric window (NCCL_WIN_COLL_SYMMETRIC, or
	// one of the engine's own) that holds [p, p+n), if any. A window
	// registered without the symmetric flag promises nothing about the
	// offsets peers pass, so it is not returned.
	FindWindow(p hip.DevicePtr, n uintptr) (Window, bool)
	// Barrier returns once every rank has entered it (host side, used by
	// Init only: never inside a collective call).
	Barrier() error
	// DeviceShared reports whether another rank of this communicator runs
	// in this process on this rank's device.
	DeviceShared() bool
	// OneDevice reports whether every rank of the communicator runs in
	// this process on this rank's device. The answer is the same on every
	// rank, so it may choose plans and signals.
	OneDevice() bool
}

// Window is a symmetric window: one buffer per rank at the same offsets.
type Window interface {
	// Base is this rank's buffer.
	Base() hip.DevicePtr
	Size() uintptr
	// PeerBase is rank peer's buffer as mapped in this process (Base() for
	// this rank).
	PeerBase(peer int) hip.DevicePtr
}

// Func is ncclFunc_t.
type Func int32

const (
	FuncBroadcast     Func = 0
	FuncReduce        Func = 1
	FuncAllGather     Func = 2
	FuncReduceScatter Func = 3
	FuncAllReduce     Func = 4
	FuncSendRecv      Func = 5
	FuncSend          Func = 6
	FuncRecv          Func = 7
	FuncAlltoAll      Func = 8
	FuncScatter       Func = 9
	FuncGather        Func = 10
	NumFuncs          Func = 11
)

// String names f as NCCL does ("AllGather"): its row's name (op.go).
func (f Func) String() string {
	if o := OpOf(f); o != nil {
		return o.Name
	}
	return "unknown collective"
}

// Rooted reports whether f has a root (its row's Arg: Scatter, Gather,
// Broadcast, Reduce).
func (f Func) Rooted() bool {
	o := OpOf(f)
	return o != nil && o.Rooted()
}

// NumTypes is ncclNumTypes.
const NumTypes = 12

var eltSizes = [NumTypes]uintptr{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

var typeNames = [NumTypes]string{"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64",
	"ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"}

// TypeSize is the size of ncclDataType_t dt, 0 for an unknown one.
func TypeSize(dt int32) uintptr {
	if dt < 0 || dt >= NumTypes {
		return 0
	}
	return eltSizes[dt]
}

// TypeName names ncclDataType_t dt as nccl.h does ("ncclFloat32").
func TypeName(dt int32) string {
	if dt < 0 || dt >= NumTypes {
		return "unknown datatype"
	}
	return typeNames[dt]
}

// Args describes one rank's part of a collective (ncclCeCollArgs plus the
// stream). Count is the per-rank element count of the public call and
// EltSize the datatype's size: chunk = Count*EltSize bytes.
type Args struct {
	Func     Func
	Root     int
	Datatype int32 // ncclDataType_t
	Count    uintptr
	EltSize  uintptr
	Send     hip.DevicePtr
	Recv     hip.DevicePtr
	SendWin  Window // nil: looked up with Comm.FindWindow
	RecvWin  Window
	Stream   hip.Stream
	// PeerSend and PeerRecv, when not nil, hold every rank's Send and Recv
	// of this same call, indexed by rank: internal/comm knows them when all
	// ranks were issued in one ncclGroupStart/End of one process, and the
	// engine then reaches them directly (the group path).
	PeerSend []hip.DevicePtr
	PeerRecv []hip.DevicePtr
	// PeerEvents, when not nil, holds every rank's signal event
	// (Engine.Event), for a group whose every rank runs on one device:
	// the engine may then sync by events (see chooseSignal).
	PeerEvents []hip.Event
	// P2P is a batch's transfers (Func FuncSendRecv; p2p.go), and Joins
	// the streams of the batch's transfers beside Stream, which it joins
	// in and out as it does Stream.
	P2P   []Transfer
	Joins []hip.Stream
}
