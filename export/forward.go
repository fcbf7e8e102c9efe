package main

// #include "cshim.h"
import "C"

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unsafe"

	"cecoll/internal/comm"
	"cecoll/internal/forward"
	"cecoll/internal/result"
)

// Forward mode's C side, for internal/forward: the loader (loader) and the
// real library (realLib), both over forward.c, whose every call into the
// real library is marked "inside" on the calling thread.

// loader implements forward.Loader with dladdr, dlsym(RTLD_NEXT), dlopen
// and dl_iterate_phdr.
type loader struct{}

func (loader) Self() string {
	var buf [4096]C.char
	if C.xfwd_self(&buf[0], C.size_t(len(buf))) == 0 {
		return ""
	}
	return C.GoString(&buf[0])
}

func (loader) Next() (forward.Lib, error) {
	var buf [4096]C.char
	if C.xfwd_bind_next(&buf[0], C.size_t(len(buf))) == 0 {
		return nil, nil
	}
	return newRealLib(C.GoString(&buf[0]))
}

func (loader) Open(path string) (forward.Lib, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var buf [1024]C.char
	if C.xfwd_open(cp, &buf[0], C.size_t(len(buf))) != 0 {
		return nil, errors.New(C.GoString(&buf[0]))
	}
	return newRealLib(path)
}

func (loader) Objects() []string {
	buf := make([]C.char, 1<<16)
	C.xfwd_objects(&buf[0], C.size_t(len(buf)))
	return strings.Fields(C.GoString(&buf[0]))
}

// realLib implements forward.Lib over the slots that forward.c bound.
type realLib struct {
	name    string
	version int
}

func newRealLib(path string) (forward.Lib, error) {
	v := int(C.xr_version())
	if v == 0 {
		C.xfwd_unbind()
		return nil, fmt.Errorf("%s: its ncclGetVersion failed", path)
	}
	return &realLib{name: filepath.Base(path), version: v}, nil
}

func (l *realLib) Name() string { return l.name }
func (l *realLib) Version() int { return l.version }

// xmissing is forward.c's answer for a function the library lacks.
const xmissing = ^C.ncclResult_t(0) // (ncclResult_t)-1

// check turns the real library's result into an error carrying its
// ncclGetLastError text.
func (l *realLib) check(call string, r C.ncclResult_t) error {
	switch r {
	case C.ncclSuccess:
		return nil
	case xmissing:
		return result.Errorf(result.InvalidUsage, "%s: the real library (%s) has no %s", call, l.name, call)
	}
	return result.Errorf(result.Code(r), "%s of the real library (%s) failed (%d): %s", call, l.name, int(r), C.GoString(C.xr_last_error()))
}

// made is check for the calls that make a communicator: with a
// non-blocking config ncclInProgress says it is being made (the caller
// waits for it through AsyncError).
func (l *realLib) made(call string, r C.ncclResult_t) error {
	if r == C.ncclInProgress {
		return nil
	}
	return l.check(call, r)
}

// cConfig copies a config into C memory for one call (the real library
// reads it during the call); free with C.free (nil: none).
func cConfig(cfg []byte) unsafe.Pointer {
	if len(cfg) == 0 {
		return nil
	}
	return C.CBytes(cfg)
}

func (l *realLib) GetUniqueID(id *[forward.IDBytes]byte) error {
	return l.check("ncclGetUniqueId", C.xr_unique_id(unsafe.Pointer(id)))
}

func (l *realLib) InitRank(n int, id *[forward.IDBytes]byte, rank int, cfg []byte) (forward.Handle, error) {
	cc := cConfig(cfg)
	defer C.free(cc)
	var out C.uintptr_t
	r := C.xr_init_rank(&out, C.int(n), unsafe.Pointer(id), C.int(rank), cc)
	return forward.Handle(out), l.made("ncclCommInitRankConfig", r)
}

func (l *realLib) InitAll(n int, devs []int) ([]forward.Handle, error) {
	if n < 1 {
		return nil, result.Errorf(result.InvalidArgument, "ncclCommInitAll: ndev %d < 1", n)
	}
	out := make([]C.uintptr_t, n)
	var cdevs *C.int
	if devs != nil {
		cd := make([]C.int, n)
		for i, d := range devs {
			cd[i] = C.int(d)
		}
		cdevs = &cd[0]
	}
	if err := l.made("ncclCommInitAll", C.xr_init_all(&out[0], C.int(n), cdevs)); err != nil {
		return nil, err
	}
	hs := make([]forward.Handle, n)
	for i, h := range out {
		hs[i] = forward.Handle(h)
	}
	return hs, nil
}

func (l *realLib) Split(h forward.Handle, color, key int, cfg []byte) (forward.Handle, error) {
	cc := cConfig(cfg)
	defer C.free(cc)
	var out C.uintptr_t
	r := C.xr_split(C.uintptr_t(h), C.int(color), C.int(key), &out, cc)
	return forward.Handle(out), l.made("ncclCommSplit", r)
}

func (l *realLib) Shrink(h forward.Handle, exclude []int32, cfg []byte, flags int) (forward.Handle, error) {
	cc := cConfig(cfg)
	defer C.free(cc)
	var excl *C.int
	if len(exclude) > 0 {
		excl = (*C.int)(unsafe.Pointer(&exclude[0]))
	}
	var out C.uintptr_t
	r := C.xr_shrink(C.uintptr_t(h), excl, C.int(len(exclude)), &out, cc, C.int(flags))
	return forward.Handle(out), l.made("ncclCommShrink", r)
}

func (l *realLib) Finalize(h forward.Handle) error {
	return l.check("ncclCommFinalize", C.xr_finalize(C.uintptr_t(h)))
}

func (l *realLib) Destroy(h forward.Handle) error {
	return l.check("ncclCommDestroy", C.xr_destroy(C.uintptr_t(h)))
}

func (l *realLib) Abort(h forward.Handle) error {
	return l.check("ncclCommAbort", C.xr_abort(C.uintptr_t(h)))
}

func (l *realLib) AsyncError(h forward.Handle) error {
	var st C.int
	if err := l.check("ncclCommGetAsyncError", C.xr_async_error(C.uintptr_t(h), &st)); err != nil {
		return err
	}
	switch st {
	case C.ncclSuccess:
		return nil
	case C.ncclInProgress:
		return result.Errorf(result.InProgress, "the real communicator (%s) is in progress", l.name)
	}
	return result.Errorf(result.Code(st), "the real communicator (%s) failed (%d): %s", l.name, int(st), C.GoString(C.xr_last_error()))
}

func (l *realLib) Register(h forward.Handle, p, size uintptr) (forward.Handle, error) {
	var out C.uintptr_t
	r := C.xr_register(C.uintptr_t(h), C.uintptr_t(p), C.size_t(size), &out)
	return forward.Handle(out), l.check("ncclCommRegister", r)
}

func (l *realLib) Deregister(h, reg forward.Handle) error {
	return l.check("ncclCommDeregister", C.xr_deregister(C.uintptr_t(h), C.uintptr_t(reg)))
}

func (l *realLib) WindowRegister(h forward.Handle, p, size uintptr, flags int) (forward.Handle, error) {
	var out C.uintptr_t
	r := C.xr_window_register(C.uintptr_t(h), C.uintptr_t(p), C.size_t(size), C.int(flags), &out)
	return forward.Handle(out), l.check("ncclCommWindowRegister", r)
}

func (l *realLib) WindowDeregister(h, w forward.Handle) error {
	return l.check("ncclCommWindowDeregister", C.xr_window_deregister(C.uintptr_t(h), C.uintptr_t(w)))
}

func (l *realLib) GroupStart() error { return l.check("ncclGroupStart", C.xr_group_start()) }

func (l *realLib) GroupEnd() error { return l.check("ncclGroupEnd", C.xr_group_end()) }

func (l *realLib) GroupSimulateEnd(info unsafe.Pointer) error {
	return l.check("ncclGroupSimulateEnd", C.xr_group_simulate_end(info))
}

func (l *realLib) Send(buf, count uintptr, dt int32, peer int, h forward.Handle, s uintptr) error {
	return l.check("ncclSend", C.xr_send(C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), C.uintptr_t(h), C.uintptr_t(s)))
}

func (l *realLib) Recv(buf, count uintptr, dt int32, peer int, h forward.Handle, s uintptr) error {
	return l.check("ncclRecv", C.xr_recv(C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), C.uintptr_t(h), C.uintptr_t(s)))
}

// What cecoll says of the functions it does not provide, without a real
// library to forward them to; which operations copy engines run is their
// table's (comm.Provided).
const whyReduce = "reductions need compute; cecoll moves data only"

func notProvided(call string) string {
	ceRuns := " is not provided by cecoll (copy engines run " + comm.Provided() + ")"
	switch call {
	case "ncclReduce", "ncclAllReduce", "ncclReduceScatter", "ncclReduceConfig", "ncclAllReduceConfig",
		"ncclReduceScatterConfig", "ncclRedOpCreatePreMulSum":
		return whyReduce
	case "ncclRedOpDestroy":
		return "not an operator made by ncclRedOpCreatePreMulSum (cecoll makes none)"
	case "ncclCommRevoke":
		return "revoking a communicator is not provided by cecoll (use ncclCommAbort)"
	}
	return call + ceRuns
}

// goexp_xfwdRefuse is the refusal of a stub of fwd_stubs.S (through
// xfwd_refuse): why 0, the cecoll communicator comm owns no real one; 1, a
// window argument owns none; 2, the real library has no such function, or
// none is loaded. takesComm: the function has a communicator argument.
//
//export goexp_xfwdRefuse
func goexp_xfwdRefuse(name *C.char, comm unsafe.Pointer, why, takesComm C.int) (res C.ncclResult_t) {
	call := C.GoString(name)
	defer recoverInto(&res, call)
	base := notProvided(call)
	lib, loadErr := forward.Current()
	if takesComm != 0 && (why == 0 || lib == nil) {
		c, err := ownCommOf(call, C.ncclComm_t(comm))
		if err != nil {
			return toResult(call, err)
		}
		if lib == nil && loadErr == nil && call == "ncclRedOpDestroy" {
			return toResult(call, argErr(call, base))
		}
		if why == 0 || loadErr == nil {
			return toResult(call, c.ForwardRefusal(call, base))
		}
	}
	switch {
	case why == 1:
		return toResult(call, usage(call, base+"; a window argument is cecoll's alone: the real library refused it at registration (see the log)"))
	case lib != nil:
		return toResult(call, usage(call, fmt.Sprintf("%s; the real library (%s) has no %s", base, lib.Name(), call)))
	case loadErr != nil:
		return toResult(call, usage(call, base+"; the real library did not load: "+loadErr.Error()))
	}
	return toResult(call, usage(call, base+"; no real NCCL or RCCL is loaded to forward it to (CECOLL_NCCL_LIB)"))
}
