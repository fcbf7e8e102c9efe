package main

// #include "cshim.h"
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"cecoll/internal/log"
	"cecoll/internal/result"
)

var lastMu sync.Mutex

// setLastError stores text, prefixed with the C call's name, in the
// C-owned last-error buffer that ncclGetLastError returns.
func setLastError(call, text string) string {
	if !strings.HasPrefix(text, call) {
		text = call + ": " + text
	}
	b := []byte(text)
	lastMu.Lock()
	defer lastMu.Unlock()
	C.xlast_set((*C.char)(unsafe.Pointer(&b[0])), C.size_t(len(b)))
	return text
}

// toResult is the one place a Go error becomes an ncclResult_t; it also
// records the error's text. It allocates nothing on success. A
// communicator of the real library (errForeign) becomes XSENT_RAW: api.c
// forwards the call unchanged. ncclInProgress is a state, not a failure:
// no text, no warning.
func toResult(call string, err error) C.ncclResult_t {
	if err == nil {
		return C.ncclSuccess
	}
	if err == errForeign {
		return C.XSENT_RAW
	}
	code := result.Of(err)
	if code == result.InProgress {
		return C.ncclResult_t(code)
	}
	log.Warnf("%s", setLastError(call, err.Error()))
	return C.ncclResult_t(code)
}

// recoverInto turns a panic of an export into ncclInternalError with a
// last-error text: a bug must never take the host program down. Use as
// `defer recoverInto(&res, "ncclX")`.
func recoverInto(res *C.ncclResult_t, call string) {
	if r := recover(); r != nil {
		log.Warnf("%s", setLastError(call, fmt.Sprintf("internal error (panic): %v", r)))
		*res = C.ncclInternalError
	}
}

// usage is an ncclInvalidUsage error for what cecoll does not do.
func usage(call, why string) error {
	return result.Errorf(result.InvalidUsage, "%s: %s", call, why)
}

// argErr is an ncclInvalidArgument error.
func argErr(call, what string) error {
	return result.Errorf(result.InvalidArgument, "%s: %s", call, what)
}
