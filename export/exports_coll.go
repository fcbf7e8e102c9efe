package main

// #include "cshim.h"
import "C"

import (
	"unsafe"

	"cecoll/internal/ce"
	"cecoll/internal/comm"
	"cecoll/internal/hip"
)

func dptr(p unsafe.Pointer) hip.DevicePtr { return hip.DevicePtr(uintptr(p)) }

func stream(s C.cudaStream_t) hip.Stream { return hip.Stream(uintptr(unsafe.Pointer(s))) }

// coll is the shell of the four public collectives: they are
// ncclLaunchCeColl with the arguments filled in.
func coll(call string, fn ce.Func, send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) C.ncclResult_t {
	c, err := commOf(call, h)
	if err == nil {
		err = c.Collective(fn, dptr(send), dptr(recv), uintptr(count), int32(dt), int(root), stream(s))
	}
	return toResult(call, err)
}

//export goexp_ncclAllGather
func goexp_ncclAllGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclAllGather"
	defer recoverInto(&res, call)
	return coll(call, ce.FuncAllGather, send, recv, count, dt, 0, h, s)
}

//export goexp_ncclAlltoAll
func goexp_ncclAlltoAll(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclAlltoAll"
	defer recoverInto(&res, call)
	return coll(call, ce.FuncAlltoAll, send, recv, count, dt, 0, h, s)
}

//export goexp_ncclAllToAll
func goexp_ncclAllToAll(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclAllToAll"
	defer recoverInto(&res, call)
	return coll(call, ce.FuncAlltoAll, send, recv, count, dt, 0, h, s)
}

//export goexp_ncclGather
func goexp_ncclGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclGather"
	defer recoverInto(&res, call)
	return coll(call, ce.FuncGather, send, recv, count, dt, root, h, s)
}

//export goexp_ncclScatter
func goexp_ncclScatter(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclScatter"
	defer recoverInto(&res, call)
	return coll(call, ce.FuncScatter, send, recv, count, dt, root, h, s)
}

//export goexp_ncclLaunchCeColl
func goexp_ncclLaunchCeColl(h C.ncclComm_t, args *C.struct_ncclCeCollArgs, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclLaunchCeColl"
	defer recoverInto(&res, call)
	c, err := commOf(call, h)
	if err != nil {
		return toResult(call, err)
	}
	if args == nil {
		return toResult(call, argErr(call, "NULL args"))
	}
	sw, err := windowOf(call, h, args.sendWin)
	if err != nil {
		return toResult(call, err)
	}
	rw, err := windowOf(call, h, args.recvWin)
	if err != nil {
		return toResult(call, err)
	}
	a := ce.Args{Func: ce.Func(args._func), Root: int(args.rootRank), Datatype: int32(args.datatype),
		Count: uintptr(args.nElts), EltSize: uintptr(args.eltSize),
		Send: dptr(unsafe.Pointer(args.sendBuff)), Recv: dptr(args.recvBuff), Stream: stream(s)}
	return toResult(call, c.Launch(&a, sw, rw))
}

//export goexp_ncclCeInit
func goexp_ncclCeInit(h C.ncclComm_t) (res C.ncclResult_t) {
	const call = "ncclCeInit"
	defer recoverInto(&res, call)
	c, err := commOf(call, h)
	if err == nil {
		err = c.CeInit()
	}
	return toResult(call, err)
}

//export goexp_ncclCeFinalize
func goexp_ncclCeFinalize(h C.ncclComm_t) (res C.ncclResult_t) {
	const call = "ncclCeFinalize"
	defer recoverInto(&res, call)
	c, err := commOf(call, h)
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
	if comm.Implemented(ce.Func(fn), int32(redOp), int32(dt)) {
		return 1
	}
	return 0
}

// What copy engines cannot do. The handle is still checked first, so a
// bad communicator reads the same everywhere.

const (
	whyReduce = "reductions need compute; cecoll moves data only"
	whyBcast  = "broadcast is not provided by cecoll (copy engines run AllGather, AlltoAll, Scatter and Gather)"
	whyP2P    = "point-to-point send/recv is not provided by cecoll (copy engines run AllGather, AlltoAll, Scatter and Gather)"
)

func unsupported(call string, h C.ncclComm_t, why string) C.ncclResult_t {
	_, err := commOf(call, h)
	if err == nil {
		err = usage(call, why)
	}
	return toResult(call, err)
}

//export goexp_ncclReduce
func goexp_ncclReduce(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclReduce"
	defer recoverInto(&res, call)
	return unsupported(call, h, whyReduce)
}

//export goexp_ncclAllReduce
func goexp_ncclAllReduce(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclAllReduce"
	defer recoverInto(&res, call)
	return unsupported(call, h, whyReduce)
}

//export goexp_ncclReduceScatter
func goexp_ncclReduceScatter(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclReduceScatter"
	defer recoverInto(&res, call)
	return unsupported(call, h, whyReduce)
}

//export goexp_ncclBcast
func goexp_ncclBcast(buff unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclBcast"
	defer recoverInto(&res, call)
	return unsupported(call, h, whyBcast)
}

//export goexp_ncclBroadcast
func goexp_ncclBroadcast(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclBroadcast"
	defer recoverInto(&res, call)
	return unsupported(call, h, whyBcast)
}

//export goexp_ncclSend
func goexp_ncclSend(send unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclSend"
	defer recoverInto(&res, call)
	return unsupported(call, h, whyP2P)
}

//export goexp_ncclRecv
func goexp_ncclRecv(recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, h C.ncclComm_t, s C.cudaStream_t) (res C.ncclResult_t) {
	const call = "ncclRecv"
	defer recoverInto(&res, call)
	return unsupported(call, h, whyP2P)
}

//export goexp_ncclRedOpCreatePreMulSum
func goexp_ncclRedOpCreatePreMulSum(op *C.ncclRedOp_t, scalar unsafe.Pointer, dt C.ncclDataType_t, residence C.ncclScalarResidence_t, h C.ncclComm_t) (res C.ncclResult_t) {
	const call = "ncclRedOpCreatePreMulSum"
	defer recoverInto(&res, call)
	return unsupported(call, h, whyReduce)
}

//export goexp_ncclRedOpDestroy
func goexp_ncclRedOpDestroy(op C.ncclRedOp_t, h C.ncclComm_t) (res C.ncclResult_t) {
	const call = "ncclRedOpDestroy"
	defer recoverInto(&res, call)
	_, err := commOf(call, h)
	if err == nil {
		err = argErr(call, "not an operator made by ncclRedOpCreatePreMulSum (cecoll makes none)")
	}
	return toResult(call, err)
}

//export goexp_ncclCommRevoke
func goexp_ncclCommRevoke(h C.ncclComm_t, flags C.int) (res C.ncclResult_t) {
	const call = "ncclCommRevoke"
	defer recoverInto(&res, call)
	return unsupported(call, h, "revoking a communicator is not provided by cecoll (use ncclCommAbort)")
}

//export goexp_ncclCommSplit
func goexp_ncclCommSplit(h C.ncclComm_t, color, key C.int, out *C.ncclComm_t, cfg *C.ncclConfig_t) (res C.ncclResult_t) {
	const call = "ncclCommSplit"
	defer recoverInto(&res, call)
	if out != nil {
		*out = nil
	}
	return unsupported(call, h, "splitting communicators is not provided by cecoll yet (create the new communicator with ncclCommInitRank)")
}

//export goexp_ncclCommShrink
func goexp_ncclCommShrink(h C.ncclComm_t, exclude *C.int, nExclude C.int, out *C.ncclComm_t, cfg *C.ncclConfig_t, flags C.int) (res C.ncclResult_t) {
	const call = "ncclCommShrink"
	defer recoverInto(&res, call)
	if out != nil {
		*out = nil
	}
	return unsupported(call, h, "shrinking communicators is not provided by cecoll yet (create the new communicator with ncclCommInitRank)")
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
	// Every rank holds the same ids; the in-process bootstrap needs only
	// the first to meet.
	return initRank(call, out, n, ids, rank, cfg)
}

//export goexp_ncclGroupSimulateEnd
func goexp_ncclGroupSimulateEnd(info *C.ncclSimInfo_t) (res C.ncclResult_t) {
	const call = "ncclGroupSimulateEnd"
	defer recoverInto(&res, call)
	return toResult(call, comm.GroupSimulateEnd())
}
