package main

// #include "cshim.h"
import "C"

import (
	"runtime/cgo"
	"sync"
	"unsafe"

	"cecoll/internal/comm"
)

// entry is one live C handle. A communicator freed by ncclCommAbort stays
// as a tombstone until ncclCommDestroy, so destroy after abort works; its C
// memory is already gone, so a tombstone is never dereferenced.
type entry struct {
	win   bool
	owner uintptr        // a window's communicator handle
	wp    unsafe.Pointer // a window's C struct
	tomb  bool
	last  *C.char // a communicator's own last-error text (errors.go), C memory
}

// handles is the registry of live C handles, keyed by address: a destroyed
// or garbage handle is refused without touching its (maybe freed) memory.
var handles = struct {
	sync.RWMutex
	m map[uintptr]*entry
}{m: make(map[uintptr]*entry)}

func lookup(p unsafe.Pointer) *entry {
	handles.RLock()
	defer handles.RUnlock()
	return handles.m[uintptr(p)]
}

// commOf checks a communicator handle and returns its communicator.
func commOf(call string, h C.ncclComm_t) (*comm.Comm, error) {
	if h == nil {
		return nil, argErr(call, "NULL communicator")
	}
	e := lookup(unsafe.Pointer(h))
	switch {
	case e == nil || e.win:
		return nil, argErr(call, "invalid or destroyed communicator")
	case e.tomb:
		return nil, usage(call, "communicator was aborted")
	case h.magic != C.XCOMM_MAGIC:
		return nil, argErr(call, "corrupt communicator (bad magic)")
	}
	return cgo.Handle(h.handle).Value().(*comm.Comm), nil
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

func newCommHandle(c *comm.Comm) C.ncclComm_t {
	h := (*C.struct_ncclComm)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_ncclComm{}))))
	h.magic = C.XCOMM_MAGIC
	h.handle = C.uintptr_t(cgo.NewHandle(c))
	handles.Lock()
	handles.m[uintptr(unsafe.Pointer(h))] = &entry{}
	handles.Unlock()
	return h
}

func newWindowHandle(h C.ncclComm_t, w *comm.Window) C.ncclWindow_t {
	wh := (*C.struct_ncclWindow_vidmem)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_ncclWindow_vidmem{}))))
	wh.magic = C.XWIN_MAGIC
	wh.handle = C.uintptr_t(cgo.NewHandle(w))
	handles.Lock()
	handles.m[uintptr(unsafe.Pointer(wh))] = &entry{win: true, owner: uintptr(unsafe.Pointer(h)), wp: unsafe.Pointer(wh)}
	handles.Unlock()
	return wh
}

// freeWindowLocked releases a window handle; handles.Lock held.
func freeWindowLocked(w C.ncclWindow_t) {
	delete(handles.m, uintptr(unsafe.Pointer(w)))
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
		return true
	}
	return false
}
