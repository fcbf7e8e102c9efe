package forward

import (
	"sync/atomic"
	"unsafe"

	"cecoll/internal/param"
	"cecoll/internal/result"
)

// Handle is one of the real library's handles (ncclComm_t, ncclWindow_t,
// a registration handle): an address cecoll never dereferences.
type Handle uintptr

// IDBytes is NCCL_UNIQUE_ID_BYTES.
const IDBytes = 128

// Lib is the real NCCL or RCCL. Methods return the real library's result as
// a result.Error whose text includes its ncclGetLastError; cfg is the
// caller's ncclConfig_t as bytes (nil: none), handed over unchanged.
type Lib interface {
	// Name identifies the library for the ranks' agreement and the logs:
	// its file's base name and NCCL_VERSION_CODE.
	Name() string
	// Version is its ncclGetVersion.
	Version() int

	// ncclGetUniqueId
	GetUniqueID(id *[IDBytes]byte) error
	// ncclCommInitRankConfig
	InitRank(n int, id *[IDBytes]byte, rank int, cfg []byte) (Handle, error)
	// ncclCommInitAll (devs nil: devices 0..n-1)
	InitAll(n int, devs []int) ([]Handle, error)
	// ncclCommSplit; a zero Handle for NCCL_SPLIT_NOCOLOR.
	Split(h Handle, color, key int, cfg []byte) (Handle, error)
	// ncclCommShrink
	Shrink(h Handle, exclude []int32, cfg []byte, flags int) (Handle, error)
	// ncclCommFinalize, ncclCommDestroy, ncclCommAbort
	Finalize(h Handle) error
	Destroy(h Handle) error
	Abort(h Handle) error
	// ncclCommGetAsyncError: nil while the communicator is fine, else an
	// error of its state's code (InProgress included) or of the call's.
	AsyncError(h Handle) error
	// ncclCommRegister, ncclCommDeregister
	Register(h Handle, p, size uintptr) (Handle, error)
	Deregister(h, reg Handle) error
	// ncclCommWindowRegister, ncclCommWindowDeregister
	WindowRegister(h Handle, p, size uintptr, flags int) (Handle, error)
	WindowDeregister(h, win Handle) error
	// ncclGroupStart, ncclGroupEnd, ncclGroupSimulateEnd (info: the
	// caller's ncclSimInfo_t, handed over unchanged)
	GroupStart() error
	GroupEnd() error
	GroupSimulateEnd(info unsafe.Pointer) error
	// ncclSend, ncclRecv (stream: the caller's, unchanged): the pairs of
	// an ncclAllToAllv that cecoll forwards one by one.
	Send(buf, count uintptr, dt int32, peer int, h Handle, stream uintptr) error
	Recv(buf, count uintptr, dt int32, peer int, h Handle, stream uintptr) error
}

type libBox struct {
	lib Lib
	err error
}

var current atomic.Pointer[libBox]

// Current is the real library loaded by Load (or Install), nil when none,
// and the error that made loading fail (CECOLL_NCCL_LIB named one that did
// not load): every communicator creation then fails with it.
func Current() (Lib, error) {
	if b := current.Load(); b != nil {
		return b.lib, b.err
	}
	return nil, nil
}

// Install makes l (nil: none) the process's real library and returns the
// previous one, for Load and for tests. A library asked for (loaded or
// not) owns the NCCL_ variables of its own bootstrap (param.SetForwarding).
func Install(l Lib, err error) (prev Lib, prevErr error) {
	param.SetForwarding(l != nil || err != nil)
	old := current.Swap(&libBox{lib: l, err: err})
	if old == nil {
		return nil, nil
	}
	return old.lib, old.err
}

// Refused is the error of a call cecoll neither runs nor can forward.
func Refused(call, why string) error {
	return result.Errorf(result.InvalidUsage, "%s: %s", call, why)
}
