package hip

import "strconv"

// Error is a runtime result code. Values are CUDA driver codes; the HIP
// runtime uses the same numbers for the codes cecoll meets, and the host
// device returns what real hardware would. Error allocates nothing.
type Error int32

const (
	ErrInvalidValue             Error = 1
	ErrOutOfMemory              Error = 2
	ErrNotInitialized           Error = 3
	ErrDeinitialized            Error = 4
	ErrNoDevice                 Error = 100
	ErrInvalidDevice            Error = 101
	ErrInvalidContext           Error = 201
	ErrPeerAccessUnsupported    Error = 217
	ErrInvalidHandle            Error = 400
	ErrIllegalState             Error = 401
	ErrNotFound                 Error = 500
	ErrNotReady                 Error = 600
	ErrIllegalAddress           Error = 700
	ErrNotPermitted             Error = 800
	ErrNotSupported             Error = 801
	ErrStreamCaptureUnsupported Error = 900
	ErrStreamCaptureInvalidated Error = 901
	ErrStreamCaptureMerge       Error = 902
	ErrStreamCaptureUnmatched   Error = 903
	ErrStreamCaptureUnjoined    Error = 904
	ErrStreamCaptureIsolation   Error = 905
	ErrStreamCaptureImplicit    Error = 906
	ErrCapturedEvent            Error = 907
	ErrStreamCaptureWrongThread Error = 908
	ErrTimeout                  Error = 909
	ErrUnknown                  Error = 999
)

var errorNames = map[Error]string{
	ErrInvalidValue:             "invalid value",
	ErrOutOfMemory:              "out of memory",
	ErrNotInitialized:           "not initialized",
	ErrDeinitialized:            "deinitialized",
	ErrNoDevice:                 "no device",
	ErrInvalidDevice:            "invalid device",
	ErrInvalidContext:           "invalid context",
	ErrPeerAccessUnsupported:    "peer access unsupported",
	ErrInvalidHandle:            "invalid handle",
	ErrIllegalState:             "illegal state",
	ErrNotFound:                 "not found",
	ErrNotReady:                 "not ready",
	ErrIllegalAddress:           "illegal address",
	ErrNotPermitted:             "operation not permitted",
	ErrNotSupported:             "operation not supported",
	ErrStreamCaptureUnsupported: "operation not permitted when stream is capturing",
	ErrStreamCaptureInvalidated: "stream capture invalidated",
	ErrStreamCaptureMerge:       "stream capture merge",
	ErrStreamCaptureUnmatched:   "stream capture unmatched",
	ErrStreamCaptureUnjoined:    "stream capture unjoined",
	ErrStreamCaptureIsolation:   "stream capture isolation",
	ErrStreamCaptureImplicit:    "stream capture implicit",
	ErrCapturedEvent:            "operation not permitted on an event last recorded in a capturing stream",
	ErrStreamCaptureWrongThread: "stream capture wrong thread",
	ErrTimeout:                  "timeout",
	ErrUnknown:                  "unknown error",
}

// Error returns the code's text; unknown codes print their number. Known
// codes allocate nothing.
func (e Error) Error() string {
	if s, ok := errorNames[e]; ok {
		return s
	}
	return "runtime error " + strconv.Itoa(int(e))
}
