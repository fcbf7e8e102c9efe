package main

// #include "cshim.h"
import "C"

import (
	"unsafe"

	"cecoll/internal/comm"
	"cecoll/internal/hip"
)

func dptr(p unsafe.Pointer) hip.DevicePtr { return hip.DevicePtr(uintptr(p)) }

func stream(s C.cudaStream_t) hip.Stream { return hip.Stream(uintptr(unsafe.Pointer(s))) }

// coll is the shell of the four public collectives: they are
// ncclLaunchCeColl with the arguments filled in, unless the communicator
// routes the call to the real one it owns (XSENT_REAL: api.c calls it
// there). cta is the CTA policy of the call's ncclCollConfig_t (-1: none).
func coll(call string, fn comm.Func, send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t, cta C.int) C.ncclResult_t {
	c, err := commOf(call, h)
	if err == nil {
		if !c.RouteCE(fn, dptr(send), dptr(recv), uintptr(count), int32(dt), int(cta)) {
			return C.XSENT_REAL
		}
		err = c.Collective(fn, dptr(send), dptr(recv), uintptr(count), int32(dt), int(root), stream(s))
	}
	return toResult(call, err)
}

//export goexp_ncclAllGather
func goexp_ncclAllGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclAllGather"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncAllGather, send, recv, count, dt, 0, h, s, -1)
}

//export goexp_ncclAlltoAll
func goexp_ncclAlltoAll(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclAlltoAll"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncAlltoAll, send, recv, count, dt, 0, h, s, -1)
}

//export goexp_ncclAllToAll
func goexp_ncclAllToAll(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclAllToAll"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncAlltoAll, send, recv, count, dt, 0, h, s, -1)
}

//export goexp_ncclGather
func goexp_ncclGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclGather"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncGather, send, recv, count, dt, root, h, s, -1)
}

//export goexp_ncclScatter
func goexp_ncclScatter(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclScatter"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncScatter, send, recv, count, dt, root, h, s, -1)
}

//export goexp_ncclBroadcast
func goexp_ncclBroadcast(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclBroadcast"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncBroadcast, send, recv, count, dt, root, h, s, -1)
}

// ncclBcast is ncclBroadcast in place.
//
//export goexp_ncclBcast
func goexp_ncclBcast(buf unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclBcast"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncBroadcast, buf, buf, count, dt, root, h, s, -1)
}

// p2p is the shell of ncclSend and ncclRecv, as coll is of the
// collectives: routed by the pair's bytes alone (both sides know them;
// their buffers differ).
func p2p(call string, fn comm.Func, buf unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, h C.ncclComm_t, s C.cudaStream_t) C.ncclResult_t {
	c, err := commOf(call, h)
	if err == nil {
		if !c.RouteCE(fn, dptr(buf), dptr(buf), uintptr(count), int32(dt), -1) {
			return C.XSENT_REAL
		}
		err = c.P2P(fn, dptr(buf), uintptr(count), int32(dt), int(peer), stream(s))
	}
	return toResult(call, err)
}

//export goexp_ncclSend
func goexp_ncclSend(buf unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclSend"
	defer recoverInto(&res, call)
	return p2p(call, comm.FuncSend, buf, count, dt, peer, h, s)
}

//export goexp_ncclRecv
func goexp_ncclRecv(buf unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclRecv"
	defer recoverInto(&res, call)
	return p2p(call, comm.FuncRecv, buf, count, dt, peer, h, s)
}

// counts is one of ncclAllToAllv's arrays, one entry per rank (nil: NULL).
func counts(p *C.size_t, n int) []uintptr {
	if p == nil {
		return nil
	}
	return unsafe.Slice((*uintptr)(unsafe.Pointer(p)), n)
}

// goexp_ncclAllToAllv routes pair by pair itself (comm.AlltoAllv): the
// real library gets the pairs it forwards as ncclSend and ncclRecv.
//
//export goexp_ncclAllToAllv
func goexp_ncclAllToAllv(send unsafe.Pointer, sc, sd *C.size_t, recv unsafe.Pointer, rc, rd *C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclAllToAllv"
	defer recoverInto(&res, call)
	c, err := commOf(call, h)
	if err == nil {
		n := c.Size()
		err = c.AlltoAllv(dptr(send), counts(sc, n), counts(sd, n), dptr(recv), counts(rc, n), counts(rd, n), int32(dt), stream(s))
	}
	return toResult(call, err)
}

//export goexp_ncclLaunchCeColl
func goexp_ncclLaunchCeColl(h C.ncclComm_t, args *C.struct_ncclCeCollArgs, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclLaunchCeColl"
	defer recoverInto(&res, call)
	c, err := ownCommOf(call, h)
	if err != nil {
		return toResult(call, err)
	}
	// A refusal of the arguments fails the communicator of several
	// ranks, as comm's own do (Comm.Refuse).
	if args == nil {
		return toResult(call, c.Refuse(argErr(call, "NULL args")))
	}
	sw, err := windowOf(call, h, args.sendWin)
	if err != nil {
		return toResult(call, c.Refuse(err))
	}
	rw, err := windowOf(call, h, args.recvWin)
	if err != nil {
		return toResult(call, c.Refuse(err))
	}
	a := comm.LaunchArgs{Func: comm.Func(args._func), Root: int(args.rootRank), Datatype: int32(args.datatype),
		Count: uintptr(args.nElts), EltSize: uintptr(args.eltSize),
		Send: dptr(unsafe.Pointer(args.sendBuff)), Recv: dptr(args.recvBuff), Stream: stream(s)}
	return toResult(call, c.Launch(&a, sw, rw))
}

//export goexp_ncclCeInit
func goexp_ncclCeInit(h C.ncclComm_t) (res C.ncclResult_t) {
	const call = "ncclCeInit"
	defer recoverInto(&res, call)
	c, err := ownCommOf(call, h)
	if err == nil {
		err = c.CeInit()
	}
	return toResult(call, err)
}

//export goexp_ncclCeFinalize
func goexp_ncclCeFinalize(h C.ncclComm_t) (res C.ncclResult_t) {
	const call = "ncclCeFinalize"
	defer recoverInto(&res, call)
	c, err := ownCommOf(call, h)
	if err == nil {
		err = c.CeFinalize()
	}
	return toResult(call, err)
}

//export goexp_ncclCeImplemented
func goexp_ncclCeImplemented(fn C.ncclFunc_t, redOp C.int, dt C.ncclDataType_t) (ok C.int) {
	defer func() {
		if recover() != nil {
			ok = 0
		}
	}()
	if comm.Implemented(comm.Func(fn), int32(redOp), int32(dt)) {
		return 1
	}
	return 0
}

// The *Config forms (NCCL 2.31): routed like the plain ones, the config's
// CTA policy (cta, -1: none) counting as the communicator's; on copy
// engines the rest of the config does not apply.

//export goexp_ncclAllGatherConfig
func goexp_ncclAllGatherConfig(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, s C.cudaStream_t, cta C.int) (res C.ncclResult_t) {
	const call = "ncclAllGatherConfig"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncAllGather, send, recv, count, dt, 0, h, s, cta)
}

//export goexp_ncclAlltoAllConfig
func goexp_ncclAlltoAllConfig(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, s C.cudaStream_t, cta C.int) (res C.ncclResult_t) {
	const call = "ncclAlltoAllConfig"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncAlltoAll, send, recv, count, dt, 0, h, s, cta)
}

//export goexp_ncclGatherConfig
func goexp_ncclGatherConfig(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t, cta C.int) (res C.ncclResult_t) {
	const call = "ncclGatherConfig"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncGather, send, recv, count, dt, root, h, s, cta)
}

//export goexp_ncclScatterConfig
func goexp_ncclScatterConfig(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t, cta C.int) (res C.ncclResult_t) {
	const call = "ncclScatterConfig"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncScatter, send, recv, count, dt, root, h, s, cta)
}

//export goexp_ncclBroadcastConfig
func goexp_ncclBroadcastConfig(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t, cta C.int) (res C.ncclResult_t) {
	const call = "ncclBroadcastConfig"
	defer recoverInto(&res, call)
	return coll(call, comm.FuncBroadcast, send, recv, count, dt, root, h, s, cta)
}
