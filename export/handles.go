package main

// #include "cshim.h"
import "C"

import (
	"errors"
	"runtime/cgo"
	"sync"
	"unsafe"

	"cecoll/internal/comm"
	"cecoll/internal/forward"
)

// entry is one live C handle. A communicator freed by ncclCommAbort stays
// as a tombstone until ncclCommDestroy, so destroy after abort works; its C
// memory is already gone, so a tombstone is never dereferenced.
type entry struct {
	win   bool
	owner uintptr        // a window's communicator handle
	wp    unsafe.Pointer // the C struct: a window's, or a communicator's (its summary at exit)
	tomb  bool
	last  *C.char // a communicator's own last-error text (errors.go), C memory
	// summarized: its INFO summary was printed (summary.go)
	summarized bool
}

// handles is the registry of live C handles, keyed by address: a destroyed
// or garbage handle is refused without touching its (maybe freed) memory.
// retired holds the addresses of destroyed communicators: in forward mode
// a handle cecoll does not know is the real library's and goes to it,
// unless it is one of these.
var handles = struct {
	sync.RWMutex
	m       map[uintptr]*entry
	retired map[uintptr]bool
}{m: make(map[uintptr]*entry), retired: make(map[uintptr]bool)}

func lookup(p unsafe.Pointer) *entry {
	handles.RLock()
	defer handles.RUnlock()
	return handles.m[uintptr(p)]
}

// errForeign is commOf's answer for a communicator of the real library
// (forward mode): toResult makes it XSENT_RAW, and api.c hands the call to
// the real library unchanged.
var errForeign = errors.New("a communicator of the real library")

// commOf checks a communicator handle and returns its communicator.
func commOf(call string, h C.ncclComm_t) (*comm.Comm, error) {
	if h == nil {
		return nil, argErr(call, "NULL communicator")
	}
	e := lookup(unsafe.Pointer(h))
	switch {
	case e == nil && foreign(unsafe.Pointer(h)):
		return nil, errForeign
	case e == nil || e.win:
		return nil, argErr(call, "invalid or destroyed communicator")
	case e.tomb:
		return nil, usage(call, "communicator was aborted")
	case h.magic != C.XCOMM_MAGIC:
		return nil, argErr(call, "corrupt communicator (bad magic)")
	}
	return cgo.Handle(h.handle).Value().(*comm.Comm), nil
}

// ownCommOf is commOf for the calls that only cecoll has (nccl_ce.h's,
// the stubs' refusals): a communicator of the real library is an invalid
// argument there, not a call to forward.
func ownCommOf(call string, h C.ncclComm_t) (*comm.Comm, error) {
	c, err := commOf(call, h)
	if err == errForeign {
		return nil, argErr(call, "not a cecoll communicator (one of the real library's?)")
	}
	return c, err
}

// windowOf checks a window handle of communicator h (NULL gives nil).
func windowOf(call string, h C.ncclComm_t, w C.ncclWindow_t) (*comm.Window, error) {
	if w == nil {
		return nil, nil
	}
	e := lookup(unsafe.Pointer(w))
	if e == nil || !e.win || e.owner != uintptr(unsafe.Pointer(h)) || w.magic != C.XWIN_MAGIC {
		return nil, argErr(call, "invalid window, or a window of another communicator")
	}
	return cgo.Handle(w.handle).Value().(*comm.Window), nil
}

// foreign reports whether p, unknown to the registry, is the real
// library's communicator: a real library is loaded and p is no destroyed
// cecoll communicator.
func foreign(p unsafe.Pointer) bool {
	if lib, _ := forward.Current(); lib == nil {
		return false
	}
	handles.RLock()
	defer handles.RUnlock()
	return !handles.retired[uintptr(p)]
}

// newCommHandle makes c's C handle; its real field follows c's real
// communicator (the stubs read it).
func newCommHandle(c *comm.Comm) C.ncclComm_t {
	h := (*C.struct_ncclComm)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_ncclComm{}))))
	h.magic = C.XCOMM_MAGIC
	h.handle = C.uintptr_t(cgo.NewHandle(c))
	if summaryOn() {
		C.xsummary_armed = 1
	}
	c.BindRealSlot((*uintptr)(unsafe.Pointer(&h.real)))
	handles.Lock()
	key := uintptr(unsafe.Pointer(h))
	handles.m[key] = &entry{wp: unsafe.Pointer(h)}
	delete(handles.retired, key)
	handles.Unlock()
	return h
}

func newWindowHandle(h C.ncclComm_t, w *comm.Window) C.ncclWindow_t {
	wh := (*C.struct_ncclWindow_vidmem)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_ncclWindow_vidmem{}))))
	wh.magic = C.XWIN_MAGIC
	wh.handle = C.uintptr_t(cgo.NewHandle(w))
	w.BindRealSlot((*uintptr)(unsafe.Pointer(&wh.real)))
	handles.Lock()
	handles.m[uintptr(unsafe.Pointer(wh))] = &entry{win: true, owner: uintptr(unsafe.Pointer(h)), wp: unsafe.Pointer(wh)}
	handles.Unlock()
	return wh
}

// freeWindowLocked releases a window handle; handles.Lock held.
func freeWindowLocked(w C.ncclWindow_t) {
	delete(handles.m, uintptr(unsafe.Pointer(w)))
	cgo.Handle(w.handle).Value().(*comm.Window).BindRealSlot(nil)
	cgo.Handle(w.handle).Delete()
	w.magic = C.XDEAD_MAGIC
	C.free(unsafe.Pointer(w))
}

func freeWindowHandle(w C.ncclWindow_t) {
	handles.Lock()
	defer handles.Unlock()
	freeWindowLocked(w)
}

// releaseComm frees a communicator's C handle and its windows' handles;
// tomb leaves a tombstone (ncclCommAbort) instead of forgetting it.
func releaseComm(h C.ncclComm_t, tomb bool) {
	key := uintptr(unsafe.Pointer(h))
	handles.Lock()
	defer handles.Unlock()
	for _, e := range handles.m {
		if e.win && e.owner == key {
			freeWindowLocked(C.ncclWindow_t(e.wp))
		}
	}
	cgo.Handle(h.handle).Value().(*comm.Comm).BindRealSlot(nil)
	cgo.Handle(h.handle).Delete()
	h.magic = C.XDEAD_MAGIC
	C.free(unsafe.Pointer(h))
	if e := handles.m[key]; e != nil && e.last != nil {
		C.free(unsafe.Pointer(e.last))
	}
	if tomb {
		handles.m[key] = &entry{tomb: true}
	} else {
		delete(handles.m, key)
		handles.retired[key] = true
	}
}

// forgetTomb drops an aborted communicator's tombstone (ncclCommDestroy
// after ncclCommAbort); false when h is not one.
func forgetTomb(h C.ncclComm_t) bool {
	handles.Lock()
	defer handles.Unlock()
	key := uintptr(unsafe.Pointer(h))
	if e := handles.m[key]; e != nil && e.tomb {
		delete(handles.m, key)
		handles.retired[key] = true
		return true
	}
	return false
}
