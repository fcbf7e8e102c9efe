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
	config, err := configOf(unsafe.Pointer(cfg))
	if err != nil {
		return toResult(call, err)
	}
	c, err := comm.ProcInitRank(*(*comm.ID)(unsafe.Pointer(cid)), int(n), int(rank), config)
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
		summarize(h, c)
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
		summarize(h, c)
		// The real communicator's error, if any, is returned; cecoll's
		// side is gone either way.
		if err = c.Destroy(); c.Destroyed() {
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
		summarize(h, c)
		if err = c.Abort(); c.Destroyed() {
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
		if aerr != nil && result.Of(aerr) != result.InProgress {
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

//export goexp_ncclCommSplit
func goexp_ncclCommSplit(h C.ncclComm_t, color, key C.int, out *C.ncclComm_t, cfg *C.ncclConfig_t) (res C.ncclResult_t) {
	const call = "ncclCommSplit"
	defer recoverInto(&res, call)
	return derive(call, h, out, cfg, func(c *comm.Comm, cc *comm.Config) (*comm.Comm, error) {
		return c.Split(int(color), int(key), cc)
	})
}

//export goexp_ncclCommShrink
func goexp_ncclCommShrink(h C.ncclComm_t, exclude *C.int, nExclude C.int, out *C.ncclComm_t, cfg *C.ncclConfig_t, flags C.int) (res C.ncclResult_t) {
	const call = "ncclCommShrink"
	defer recoverInto(&res, call)
	if nExclude < 0 || (nExclude > 0 && exclude == nil) {
		return toResult(call, argErr(call, "bad excludeRanksList"))
	}
	var excl []int32
	for _, r := range unsafe.Slice(exclude, int(nExclude)) {
		excl = append(excl, int32(r))
	}
	return derive(call, h, out, cfg, func(c *comm.Comm, cc *comm.Config) (*comm.Comm, error) {
		return c.Shrink(excl, cc, int(flags))
	})
}

// derive is the shell of Split and Shrink: the new communicator made from
// h by mk (nil: none for this rank, NCCL_SPLIT_NOCOLOR) goes to *out.
// cfg nil: the parent's configuration.
func derive(call string, h C.ncclComm_t, out *C.ncclComm_t, cfg *C.ncclConfig_t, mk func(*comm.Comm, *comm.Config) (*comm.Comm, error)) C.ncclResult_t {
	if out == nil {
		return toResult(call, argErr(call, "NULL newcomm"))
	}
	*out = nil
	c, err := commOf(call, h)
	if err != nil {
		return toResult(call, err)
	}
	cc, err := configArg(cfg)
	if err != nil {
		return toResult(call, err)
	}
	nc, err := mk(c, cc)
	if err == nil && nc != nil {
		*out = newCommHandle(nc)
	}
	return toResult(call, err)
}

//export goexp_ncclCommInitRankScalable
func goexp_ncclCommInitRankScalable(out *C.ncclComm_t, n, rank, nID C.int, ids *C.ncclUniqueId, cfg *C.ncclConfig_t) (res C.ncclResult_t) {
	const call = "ncclCommInitRankScalable"
	defer recoverInto(&res, call)
	if nID < 1 || ids == nil {
		if out != nil {
			*out = nil
		}
		return toResult(call, argErr(call, "no unique ids"))
	}
	// Every rank holds the same ids; the bootstrap needs only the first
	// to meet.
	return initRank(call, out, n, ids, rank, cfg)
}

//export goexp_ncclGroupSimulateEnd
func goexp_ncclGroupSimulateEnd(info *C.ncclSimInfo_t) (res C.ncclResult_t) {
	const call = "ncclGroupSimulateEnd"
	defer recoverInto(&res, call)
	return toResult(call, comm.GroupSimulateEnd(unsafe.Pointer(info)))
}
