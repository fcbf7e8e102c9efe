package main

// #include "cshim.h"
import "C"

import (
	"unsafe"

	"cecoll/internal/comm"
	"cecoll/internal/hip"
)

// The cecoll* helpers: each maps onto one hip.Runtime call of the process's
// runtime (comm.Runtime, which fails with ncclSystemError when a forced
// backend cannot load). Handles are the runtime's own integers.

//export goexp_cecollGetBackend
func goexp_cecollGetBackend(name **C.char) (res C.ncclResult_t) {
	const call = "cecollGetBackend"
	defer recoverInto(&res, call)
	if name == nil {
		return toResult(call, argErr(call, "NULL name"))
	}
	rt, err := comm.Runtime()
	if err == nil {
		k := C.int(-1)
		switch rt.Name() {
		case "host":
			k = 0
		case "nvidia":
			k = 1
		case "amd":
			k = 2
		}
		*name = C.xbackend_name(k)
	}
	return toResult(call, err)
}

//export goexp_cecollGetDeviceCount
func goexp_cecollGetDeviceCount(count *C.int) (res C.ncclResult_t) {
	const call = "cecollGetDeviceCount"
	defer recoverInto(&res, call)
	if count == nil {
		return toResult(call, argErr(call, "NULL count"))
	}
	rt, err := comm.Runtime()
	if err == nil {
		var n int
		if n, err = rt.DeviceCount(); err == nil {
			*count = C.int(n)
		}
	}
	return toResult(call, err)
}

//export goexp_cecollSetDevice
func goexp_cecollSetDevice(dev C.int) (res C.ncclResult_t) {
	const call = "cecollSetDevice"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.SetDevice(int(dev))
	}
	return toResult(call, err)
}

//export goexp_cecollStreamCreate
func goexp_cecollStreamCreate(out *C.cudaStream_t) (res C.ncclResult_t) {
	const call = "cecollStreamCreate"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL stream"))
	}
	rt, err := comm.Runtime()
	if err == nil {
		var s hip.Stream
		if s, err = rt.StreamCreate(); err == nil {
			*out = C.xstream(C.uintptr_t(s))
		}
	}
	return toResult(call, err)
}

//export goexp_cecollStreamDestroy
func goexp_cecollStreamDestroy(s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "cecollStreamDestroy"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.StreamDestroy(stream(s))
	}
	return toResult(call, err)
}

//export goexp_cecollStreamSynchronize
func goexp_cecollStreamSynchronize(s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "cecollStreamSynchronize"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.StreamSynchronize(stream(s))
	}
	return toResult(call, err)
}

//export goexp_cecollStreamWaitEvent
func goexp_cecollStreamWaitEvent(s C.cudaStream_t, e C.cecollEvent_t) (res C.ncclResult_t) {
	const call = "cecollStreamWaitEvent"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.StreamWaitEvent(stream(s), event(e))
	}
	return toResult(call, err)
}

//export goexp_cecollMemcpy
func goexp_cecollMemcpy(dst, src unsafe.Pointer, n C.size_t) (res C.ncclResult_t) {
	const call = "cecollMemcpy"
	defer recoverInto(&res, call)
	if n == 0 {
		return C.ncclSuccess
	}
	if dst == nil || src == nil {
		return toResult(call, argErr(call, "NULL pointer"))
	}
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.Memcpy(uintptr(dst), uintptr(src), uintptr(n))
	}
	return toResult(call, err)
}

//export goexp_cecollMemcpyAsync
func goexp_cecollMemcpyAsync(dst, src unsafe.Pointer, n C.size_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "cecollMemcpyAsync"
	defer recoverInto(&res, call)
	if n == 0 {
		return C.ncclSuccess
	}
	if dst == nil || src == nil {
		return toResult(call, argErr(call, "NULL pointer"))
	}
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.MemcpyAsync(hip.DevicePtr(dst), hip.DevicePtr(src), uintptr(n), stream(s))
	}
	return toResult(call, err)
}

//export goexp_cecollMemset
func goexp_cecollMemset(dst unsafe.Pointer, value C.int, n C.size_t) (res C.ncclResult_t) {
	const call = "cecollMemset"
	defer recoverInto(&res, call)
	if n == 0 {
		return C.ncclSuccess
	}
	if dst == nil {
		return toResult(call, argErr(call, "NULL pointer"))
	}
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.Memset(dptr(dst), byte(value), uintptr(n))
	}
	return toResult(call, err)
}

func event(e C.cecollEvent_t) hip.Event { return hip.Event(uintptr(unsafe.Pointer(e))) }

//export goexp_cecollEventCreate
func goexp_cecollEventCreate(out *C.cecollEvent_t) (res C.ncclResult_t) {
	const call = "cecollEventCreate"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL event"))
	}
	rt, err := comm.Runtime()
	if err == nil {
		var e hip.Event
		if e, err = rt.EventCreate(hip.EventDefault); err == nil {
			*out = C.xevent(C.uintptr_t(e))
		}
	}
	return toResult(call, err)
}

//export goexp_cecollEventRecord
func goexp_cecollEventRecord(e C.cecollEvent_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "cecollEventRecord"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.EventRecord(event(e), stream(s))
	}
	return toResult(call, err)
}

//export goexp_cecollEventSynchronize
func goexp_cecollEventSynchronize(e C.cecollEvent_t) (res C.ncclResult_t) {
	const call = "cecollEventSynchronize"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.EventSynchronize(event(e))
	}
	return toResult(call, err)
}

//export goexp_cecollEventElapsedTime
func goexp_cecollEventElapsedTime(ms *C.float, start, end C.cecollEvent_t) (res C.ncclResult_t) {
	const call = "cecollEventElapsedTime"
	defer recoverInto(&res, call)
	if ms == nil {
		return toResult(call, argErr(call, "NULL ms"))
	}
	rt, err := comm.Runtime()
	if err == nil {
		var v float32
		if v, err = rt.EventElapsedTime(event(start), event(end)); err == nil {
			*ms = C.float(v)
		}
	}
	return toResult(call, err)
}

//export goexp_cecollEventDestroy
func goexp_cecollEventDestroy(e C.cecollEvent_t) (res C.ncclResult_t) {
	const call = "cecollEventDestroy"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		err = rt.EventDestroy(event(e))
	}
	return toResult(call, err)
}

// Thread-local capture mode, as the header prescribes. One thread that
// captures every rank's stream (a grouped collective) ends the first
// capture while its others are still open, and CUDA refuses
// cuGraphInstantiate in that state (error 900, which invalidates the other
// captures: docs/performance.md, "Instantiating a graph while captures are
// open"): cecollStreamEndCapture then defers instantiation to the graph's
// first launch (graphs.go).
//
//export goexp_cecollStreamBeginCapture
func goexp_cecollStreamBeginCapture(s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "cecollStreamBeginCapture"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		if err = rt.StreamBeginCapture(stream(s), hip.CaptureModeThreadLocal); err == nil {
			captures.begin(stream(s))
		}
	}
	return toResult(call, err)
}

//export goexp_cecollStreamEndCapture
func goexp_cecollStreamEndCapture(s C.cudaStream_t, out *C.cecollGraph_t) (res C.ncclResult_t) {
	const call = "cecollStreamEndCapture"
	defer recoverInto(&res, call)
	if out == nil {
		return toResult(call, argErr(call, "NULL graph"))
	}
	rt, err := comm.Runtime()
	if err == nil {
		var h uintptr
		if h, err = endCapture(rt, stream(s)); err == nil {
			*out = C.xgraph(C.uintptr_t(h))
		}
	}
	return toResult(call, err)
}

func graphKey(g C.cecollGraph_t) uintptr { return uintptr(unsafe.Pointer(g)) }

//export goexp_cecollGraphLaunch
func goexp_cecollGraphLaunch(g C.cecollGraph_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "cecollGraphLaunch"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		err = launchGraph(call, rt, graphKey(g), stream(s))
	}
	return toResult(call, err)
}

//export goexp_cecollGraphDestroy
func goexp_cecollGraphDestroy(g C.cecollGraph_t) (res C.ncclResult_t) {
	const call = "cecollGraphDestroy"
	defer recoverInto(&res, call)
	rt, err := comm.Runtime()
	if err == nil {
		err = destroyGraph(call, rt, graphKey(g))
	}
	return toResult(call, err)
}
