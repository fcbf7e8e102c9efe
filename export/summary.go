package main

// #include "cshim.h"
import "C"

import (
	"runtime/cgo"
	"sync/atomic"
	"unsafe"

	"cecoll/internal/comm"
	"cecoll/internal/forward"
	"cecoll/internal/log"
)

// The INFO summary of where a communicator's calls went: one line at its
// ncclCommFinalize, ncclCommDestroy or ncclCommAbort, whichever comes
// first, or at process exit for one never destroyed (torch often exits
// without destroying its communicators).

// summaryOn is whether summaries are printed; xsummary_armed tells C's
// exit hook (forward.c) whether to enter Go at all.
func summaryOn() bool { return log.Enabled(log.LevelInfo, log.Init) }

// summarize logs h's summary once; c is its communicator.
func summarize(h C.ncclComm_t, c *comm.Comm) {
	if !summaryOn() {
		return
	}
	handles.Lock()
	e := handles.m[uintptr(unsafe.Pointer(h))]
	done := e == nil || e.win || e.tomb || e.summarized
	if e != nil {
		e.summarized = true
	}
	handles.Unlock()
	if !done {
		logSummary(h, c)
	}
}

func logSummary(h C.ncclComm_t, c *comm.Comm) {
	var stubs []forward.StubCalls
	for i := range C.XR_COUNT {
		if n := atomic.LoadUint64((*uint64)(unsafe.Pointer(&h.calls[i]))); n > 0 {
			stubs = append(stubs, forward.StubCalls{Name: C.GoString(C.xfwd_name[i]), Calls: n})
		}
	}
	log.Infof(log.Init, "%s", c.Summary(stubs))
}

// goexp_xfwdExitSummary is the exit hook's (forward.c): the summary of
// every communicator not yet summarized. It never waits: with the registry
// held elsewhere (a thread stuck in a call), it prints nothing.
//
//export goexp_xfwdExitSummary
func goexp_xfwdExitSummary() {
	defer func() { _ = recover() }() // at exit, never a crash
	if !summaryOn() || !handles.TryLock() {
		return
	}
	defer handles.Unlock() // held while printing: no handle is freed meanwhile
	for _, e := range handles.m {
		if !e.win && !e.tomb && !e.summarized && e.wp != nil {
			e.summarized = true
			h := C.ncclComm_t(e.wp)
			logSummary(h, cgo.Handle(h.handle).Value().(*comm.Comm))
		}
	}
}

// goexp_xfwdNoteStub logs a stub's route at its first call (xfwd_ensure).
//
//export goexp_xfwdNoteStub
func goexp_xfwdNoteStub(name *C.char) {
	forward.NoteStub(C.GoString(name))
}
