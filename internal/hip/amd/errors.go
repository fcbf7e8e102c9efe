package amd

import "cecoll/internal/hip"

// hipSuccess is hipError_t's success value.
const hipSuccess = 0

// hipErrorPeerAccessAlreadyEnabled is returned by hipDeviceEnablePeerAccess
// for a pair that is already enabled; cecoll treats it as success.
const hipErrorPeerAccessAlreadyEnabled = 704

// knownErrors holds the hip.Error of every hipError_t value cecoll may
// meet, already boxed in an error interface, so that returning one (say
// ErrNotReady to a polling loop) allocates nothing.
var knownErrors = func() map[int32]error {
	codes := []hip.Error{
		hip.ErrInvalidValue, hip.ErrOutOfMemory, hip.ErrNotInitialized, hip.ErrDeinitialized,
		hip.ErrNoDevice, hip.ErrInvalidDevice, hip.ErrInvalidContext, hip.ErrPeerAccessUnsupported,
		hip.ErrInvalidHandle, hip.ErrNotFound, hip.ErrNotReady, hip.ErrIllegalAddress,
		hip.ErrNotSupported, hip.ErrStreamCaptureUnsupported, hip.ErrStreamCaptureInvalidated,
		hip.ErrStreamCaptureMerge, hip.ErrStreamCaptureUnmatched, hip.ErrStreamCaptureUnjoined,
		hip.ErrStreamCaptureIsolation, hip.ErrStreamCaptureImplicit, hip.ErrCapturedEvent,
		hip.ErrStreamCaptureWrongThread, hip.ErrUnknown,
		hipErrorPeerAccessAlreadyEnabled,
	}
	m := make(map[int32]error, len(codes))
	for _, c := range codes {
		m[int32(c)] = c
	}
	return m
}()

// toError maps a hipError_t to a hip.Error. The mapping is the identity:
// hip_runtime_api.h gives every code cecoll distinguishes the CUDA number
// (1 invalid value, 2 out of memory, 3 not initialized, 100 no device,
// 101 invalid device, 400 invalid handle, 600 not ready, 700 illegal
// address, 801 not supported, 900-908 capture errors, 999 unknown). HIP has
// no 800 (not permitted) and no 909 (timeout); its own codes (704 peer access
// already enabled, 910 graph update failure, 1052 runtime memory, 1053
// runtime other, 1054 tbd) pass through and print as "runtime error N".
// hipError_t is a C enum: only the low 32 bits of the return register count.
func toError(r1 uintptr) error {
	code := int32(uint32(r1))
	if code == hipSuccess {
		return nil
	}
	if err, ok := knownErrors[code]; ok {
		return err
	}
	return hip.Error(code)
}
