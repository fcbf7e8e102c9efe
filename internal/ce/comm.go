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
	// FindWindow returns the registered window that holds [p, p+n), if any.
	FindWindow(p hip.DevicePtr, n uintptr) (Window, bool)
	// Barrier returns once every rank has entered it (host side, used by
	// Init only: never inside a collective call).
	Barrier() error
	// DeviceShared reports whether another rank of this communicator runs
	// in this process on this rank's device. Such ranks' streams share the
	// device's hardware queues, so the engine adds no stream of its own
	// there (see Engine.side).
	DeviceShared() bool
	// OneDevice reports whether every rank of the communicator runs in
	// this process on this rank's device. The answer is the same on every
	// rank, so it may choose the sync protocol (see Engine.rootRel).
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
	// engine then writes to them directly (zero-copy, no window needed).
	PeerSend []hip.DevicePtr
	PeerRecv []hip.DevicePtr
	// PeerReady and PeerDone hold every rank's events (Engine.Events), for
	// an event round (Engine.EventRound); nil otherwise.
	PeerReady []hip.Event
	PeerDone  []hip.Event
}
