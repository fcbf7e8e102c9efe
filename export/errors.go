package main

// #include "cshim.h"
import "C"

import (
	"fmt"
	"runtime/cgo"
	"strings"
	"sync"
	"unsafe"

	"cecoll/internal/comm"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

var lastMu sync.Mutex

// setLastError stores text, prefixed with the C call's name, in the
// C-owned last-error buffer that ncclGetLastError returns. The layers
// below name the collective an error is about ("AllGather: ..."), which
// its own call ("ncclAllGather", "ncclAllGatherConfig") says already.
func setLastError(call, text string) string {
	coll := strings.TrimSuffix(strings.TrimPrefix(call, "nccl"), "Config") + ": "
	if len(text) >= len(coll) && strings.EqualFold(text[:len(coll)], coll) {
		text = text[len(coll):]
	}
	if !strings.HasPrefix(text, call) {
		text = call + ": " + text
	}
	b := []byte(text)
	lastMu.Lock()
	defer lastMu.Unlock()
	C.xlast_set((*C.char)(unsafe.Pointer(&b[0])), C.size_t(len(b)))
	return text
}

// lastCommBytes is the size of a communicator's own last-error text.
const lastCommBytes = 2048

// goexp_xlastComm is ncclGetLastError's text for a live communicator that
// failed asynchronously (or whose deferred creation failed): what
// happened, on which rank, from its async error. It is written once (the
// first failure stays the communicator's) into C memory freed with the
// handle. NULL for any other handle, garbage included.
//
//export goexp_xlastComm
func goexp_xlastComm(h C.ncclComm_t) (text *C.char) {
	defer func() {
		if recover() != nil {
			text = nil
		}
	}()
	key := unsafe.Pointer(h)
	if e := lookup(key); e == nil || e.win || e.tomb || h.magic != C.XCOMM_MAGIC {
		return nil
	}
	c := cgo.Handle(h.handle).Value().(*comm.Comm)
	aerr := c.AsyncError()
	if aerr == nil {
		return nil
	}
	handles.Lock()
	defer handles.Unlock()
	e := handles.m[uintptr(key)]
	if e == nil || e.tomb {
		return nil
	}
	if e.last == nil {
		msg := fmt.Sprintf("rank %d of %d: the communicator failed asynchronously: %v", c.Rank(), c.Size(), aerr)
		if len(msg) >= lastCommBytes {
			msg = msg[:lastCommBytes-1]
		}
		e.last = (*C.char)(C.calloc(1, lastCommBytes))
		copy(unsafe.Slice((*byte)(unsafe.Pointer(e.last)), lastCommBytes), msg)
	}
	return e.last
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
