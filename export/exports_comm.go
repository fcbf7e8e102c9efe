package main

// #include "cshim.h"
import "C"

import (
	"unsafe"

	"cecoll/internal/comm"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// Communicators, memory, groups, windows, queries. Each function is the Go
// half of the C function of the same name without the goexp_ prefix (api.c
// holds the exact prototypes).

//export goexp_ncclMemAlloc
func goexp_ncclMemAlloc(ptr *unsafe.Pointer, size C.size_t) (res C.ncclResult_t) {
	const call = "ncclMemAlloc"
	defer recoverInto(&res, call)
	if ptr == nil {
		return toResult(call, argErr(call, "NULL ptr"))
	}
	p, err := comm.ProcMemAlloc(uintptr(size))
	if err == nil {
		*ptr = C.xptr(C.uintptr_t(p))
	}
	return toResult(call, err)
}

//export goexp_ncclMemFree
func goexp_ncclMemFree(ptr unsafe.Pointer) (res C.ncclResult_t) {
	const call = "ncclMemFree"
	defer recoverInto(&res, call)
	return toResult(call, comm.ProcMemFree(hip.DevicePtr(uintptr(ptr))))
}

//export goexp_ncclGetUniqueId
func goexp_ncclGetUniqueId(out *C.ncclUniqueId) (res C.ncclResult_t) {
	const call = "ncclGetUniqueId"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL uniqueId"))
	}
	id, err := comm.NewID()
	if err == nil {
		*(*comm.ID)(unsafe.Pointer(out)) = id
	}
	return toResult(call, err)
}

func initRank(call string, out *C.ncclComm_t, n C.int, cid *C.ncclUniqueId, rank C.int, cfg *C.ncclConfig_t) C.ncclResult_t {
	if out == nil {
		return toResult(call, argErr(call, "NULL comm"))
	}
	*out = nil
	c, err := comm.ProcInitRank(*(*comm.ID)(unsafe.Pointer(cid)), int(n), int(rank), unsafe.Pointer(cfg))
	if err == nil {
		*out = newCommHandle(c)
	}
	return toResult(call, err)
}

//export goexp_ncclCommInitRank
func goexp_ncclCommInitRank(out *C.ncclComm_t, n C.int, cid C.ncclUniqueId, rank C.int) (res C.ncclResult_t) {
	const call = "ncclCommInitRank"
	defer recoverInto(&res, call)
	return initRank(call, out, n, &cid, rank, nil)
}

//export goexp_ncclCommInitRankConfig
func goexp_ncclCommInitRankConfig(out *C.ncclComm_t, n C.int, cid C.ncclUniqueId, rank C.int, cfg *C.ncclConfig_t) (res C.ncclResult_t) {
	const call = "ncclCommInitRankConfig"
	defer recoverInto(&res, call)
	return initRank(call, out, n, &cid, rank, cfg)
}

//export goexp_ncclCommInitAll
func goexp_ncclCommInitAll(out *C.ncclComm_t, n C.int, devlist *C.int) (res C.ncclResult_t) {
	const call = "ncclCommInitAll"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL comm array"))
	}
	if n < 1 {
		return toResult(call, argErr(call, "ndev < 1"))
	}
	var devs []int
	if devlist != nil {
		for _, d := range unsafe.Slice(devlist, int(n)) {
			devs = append(devs, int(d))
		}
	}
	comms, err := comm.ProcInitAll(int(n), devs)
	if err == nil {
		outs := unsafe.Slice(out, int(n))
		for i, c := range comms {
			outs[i] = newCommHandle(c)
		}
	}
	return toResult(call, err)
}

//export goexp_ncclCommFinalize
func goexp_ncclCommFinalize(h C.ncclComm_t) (res C.ncclResult_t) {
	const call = "ncclCommFinalize"
	defer recoverInto(&res, call)
	c, err := commOf(call, h)
	if err == nil {
		err = c.Finalize()
	}
	return toResult(call, err)
}

//export goexp_ncclCommDestroy
func goexp_ncclCommDestroy(h C.ncclComm_t) (res C.ncclResult_t) {
	const call = "ncclCommDestroy"
	defer recoverInto(&res, call)
	if h == nil || forgetTomb(h) {
		return C.ncclSuccess // NCCL: destroying NULL is a no-op
	}
	c, err := commOf(call, h)
	if err == nil {
		if err = c.Destroy(); err == nil {
			releaseComm(h, false)
		}
	}
	return toResult(call, err)
}

//export goexp_ncclCommAbort
func goexp_ncclCommAbort(h C.ncclComm_t) (res C.ncclResult_t) {
	const call = "ncclCommAbort"
	defer recoverInto(&res, call)
	if h == nil {
		return C.ncclSuccess // NCCL: aborting NULL is a no-op
	}
	if e := lookup(unsafe.Pointer(h)); e != nil && e.tomb {
		return C.ncclSuccess
	}
	c, err := commOf(call, h)
	if err == nil {
		if err = c.Abort(); err == nil {
			releaseComm(h, true)
		}
	}
	return toResult(call, err)
}

//export goexp_ncclCommGetAsyncError
func goexp_ncclCommGetAsyncError(h C.ncclComm_t, out *C.ncclResult_t) (res C.ncclResult_t) {
	const call = "ncclCommGetAsyncError"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL asyncError"))
	}
	c, err := commOf(call, h)
	if err == nil {
		aerr := c.AsyncError()
		*out = C.ncclResult_t(result.Of(aerr))
		if aerr != nil {
			// ncclGetLastError then says what failed, and where.
			setLastError(call, aerr.Error())
		}
	}
	return toResult(call, err)
}

//export goexp_ncclCommCount
func goexp_ncclCommCount(h C.ncclComm_t, out *C.int) (res C.ncclResult_t) {
	const call = "ncclCommCount"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL count"))
	}
	c, err := commOf(call, h)
	if err == nil {
		*out = C.int(c.Size())
	}
	return toResult(call, err)
}

//export goexp_ncclCommCuDevice
func goexp_ncclCommCuDevice(h C.ncclComm_t, out *C.int) (res C.ncclResult_t) {
	const call = "ncclCommCuDevice"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL device"))
	}
	c, err := commOf(call, h)
	if err == nil {
		*out = C.int(c.Device())
	}
	return toResult(call, err)
}

//export goexp_ncclCommUserRank
func goexp_ncclCommUserRank(h C.ncclComm_t, out *C.int) (res C.ncclResult_t) {
	const call = "ncclCommUserRank"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL rank"))
	}
	c, err := commOf(call, h)
	if err == nil {
		*out = C.int(c.Rank())
	}
	return toResult(call, err)
}

//export goexp_ncclCommRegister
func goexp_ncclCommRegister(h C.ncclComm_t, buff unsafe.Pointer, size C.size_t, out *unsafe.Pointer) (res C.ncclResult_t) {
	const call = "ncclCommRegister"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL handle"))
	}
	c, err := commOf(call, h)
	if err == nil {
		var id uintptr
		if id, err = c.Register(hip.DevicePtr(uintptr(buff)), uintptr(size)); err == nil {
			*out = C.xptr(C.uintptr_t(id))
		}
	}
	return toResult(call, err)
}

//export goexp_ncclCommDeregister
func goexp_ncclCommDeregister(h C.ncclComm_t, handle unsafe.Pointer) (res C.ncclResult_t) {
	const call = "ncclCommDeregister"
	defer recoverInto(&res, call)
	c, err := commOf(call, h)
	if err == nil {
		err = c.Deregister(uintptr(handle))
	}
	return toResult(call, err)
}

//export goexp_ncclCommWindowRegister
func goexp_ncclCommWindowRegister(h C.ncclComm_t, buff unsafe.Pointer, size C.size_t, out *C.ncclWindow_t, flags C.int) (res C.ncclResult_t) {
	const call = "ncclCommWindowRegister"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL win"))
	}
	*out = nil
	c, err := commOf(call, h)
	if err == nil {
		var w *comm.Window
		if w, err = c.WindowRegister(hip.DevicePtr(uintptr(buff)), uintptr(size), int(flags)); err == nil {
			*out = newWindowHandle(h, w)
		}
	}
	return toResult(call, err)
}

//export goexp_ncclCommWindowDeregister
func goexp_ncclCommWindowDeregister(h C.ncclComm_t, wh C.ncclWindow_t) (res C.ncclResult_t) {
	const call = "ncclCommWindowDeregister"
	defer recoverInto(&res, call)
	c, err := commOf(call, h)
	if err != nil {
		return toResult(call, err)
	}
	if wh == nil {
		return toResult(call, argErr(call, "NULL window"))
	}
	w, err := windowOf(call, h, wh)
	if err == nil {
		// The handle goes even when the window never became live (its
		// deferred registration failed), so nothing leaks.
		err = c.WindowDeregister(w)
		freeWindowHandle(wh)
	}
	return toResult(call, err)
}

//export goexp_ncclGroupStart
func goexp_ncclGroupStart() (res C.ncclResult_t) {
	const call = "ncclGroupStart"
	defer recoverInto(&res, call)
	return toResult(call, comm.GroupStart())
}

//export goexp_ncclGroupEnd
func goexp_ncclGroupEnd() (res C.ncclResult_t) {
	const call = "ncclGroupEnd"
	defer recoverInto(&res, call)
	return toResult(call, comm.GroupEnd())
}
