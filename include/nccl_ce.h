/*
 * nccl_ce.h: cecoll's copy-engine entry points and backend-neutral helpers.
 *
 * The first part is the CE interface of NCCL's ce_coll.cc (ncclCeInit,
 * ncclCeFinalize, ncclCeImplemented, ncclLaunchCeColl) on a cecoll
 * communicator, with a public argument struct and an explicit stream in
 * place of NCCL's internal plan. The public collectives of nccl.h are built
 * on ncclLaunchCeColl.
 *
 * The second part, cecoll*, lets one C program run on any backend: on a GPU
 * each helper forwards to the driver (a cudaStream_t is the driver's stream,
 * a cecollEvent_t a CUevent, a cecollGraph_t names a captured CUgraph and its
 * CUgraphExec);
 * on the host device they drive cecoll's virtual device. Tests and the
 * benchmark use only these, never the CUDA runtime.
 *
 * Every function returns ncclSuccess or an error code with a last-error text
 * (ncclGetLastError(NULL)); a NULL output pointer is ncclInvalidArgument.
 * Like nccl.h, these are the exact prototypes export/ must match (const
 * qualifiers included; see the note at the top of nccl.h).
 */
#ifndef NCCL_CE_H_
#define NCCL_CE_H_

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective kinds, with NCCL's internal numbering (nccl_common.h). */
typedef enum {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5,
  ncclFuncSend = 6,
  ncclFuncRecv = 7,
  ncclFuncAlltoAll = 8,
  ncclFuncScatter = 9,
  ncclFuncGather = 10,
  ncclNumFuncs = 11
} ncclFunc_t;

/* One rank's part of a CE collective.
 * - nElts is the per-rank count argument of the matching public call
 *   (sendcount for AllGather, count for AlltoAll, Scatter and Gather); eltSize
 *   must equal the size of datatype, otherwise ncclInvalidArgument.
 * - rootRank is the root of Scatter and Gather, ignored for AllGather and
 *   AlltoAll.
 * - sendBuff/recvBuff have the meaning they have in the public call
 *   (nccl.h), in-place cases and unused non-root buffers included.
 * - sendWin/recvWin are the windows holding the buffers; NULL means cecoll
 *   looks them up from the buffers (and uses an unregistered path when the
 *   buffer is in no window). */
struct ncclCeCollArgs {
  ncclFunc_t func;
  int rootRank;
  ncclDataType_t datatype;
  size_t nElts;
  size_t eltSize;
  const void* sendBuff;
  void* recvBuff;
  ncclWindow_t sendWin;
  ncclWindow_t recvWin;
};

/* Sets up comm's CE state (sync window, multicast, staging). The first call
 * on a communicator is collective (every rank makes it) and cecoll already
 * makes it when the communicator is created, so a later call is a no-op
 * returning ncclSuccess without waiting for anyone. After ncclCeFinalize it
 * sets the state up again, collectively: every rank calls it, from its own
 * thread or, when one thread drives several ranks, inside
 * ncclGroupStart/ncclGroupEnd (the set-up then completes at ncclGroupEnd).
 * Never call it inside a stream capture. */
ncclResult_t ncclCeInit(ncclComm_t comm);

/* Releases comm's CE state. Local and idempotent. Until ncclCeInit runs
 * again (outside capture), collectives on comm return ncclInvalidUsage. */
ncclResult_t ncclCeFinalize(ncclComm_t comm);

/* 1 when collective `coll` with reduction redOp (ignored for the
 * non-reducing collectives; pass 0) on `type` can run on copy engines with the
 * calling thread's current device and backend, per-copy fallback included;
 * otherwise 0. Never an error code. */
int ncclCeImplemented(ncclFunc_t coll, int redOp, ncclDataType_t type);

/* Queues this rank's part of the collective described by args on stream.
 * It validates like the public calls, honours ncclGroupStart/ncclGroupEnd
 * and orders the collective after the communicator's previous one, whatever
 * the stream; the public AllGather, AlltoAll, Scatter and Gather are this
 * function with args filled in. */
ncclResult_t ncclLaunchCeColl(ncclComm_t comm, const struct ncclCeCollArgs* args, cudaStream_t stream);

/* ---- Backend-neutral helpers ------------------------------------------ */

typedef struct cecollEvent_st* cecollEvent_t;
typedef struct cecollGraph_st* cecollGraph_t;

/* The backend in use: "host", "nvidia" or "amd" (a static string). */
ncclResult_t cecollGetBackend(const char** name);

/* cecoll's own version, as "0.1.0" (a static string); ncclGetVersion gives
 * the NCCL API's. */
ncclResult_t cecollGetVersion(const char** version);

/* Number of devices of the backend. */
ncclResult_t cecollGetDeviceCount(int* count);

/* Sets the calling thread's current device (what ncclCommInitRank and
 * ncclCeImplemented use). A thread that never called it is on device 0. */
ncclResult_t cecollSetDevice(int device);

/* Creates a non-blocking stream on the calling thread's current device. */
ncclResult_t cecollStreamCreate(cudaStream_t* stream);

ncclResult_t cecollStreamDestroy(cudaStream_t stream);

/* Waits on the host until everything queued on stream has finished. */
ncclResult_t cecollStreamSynchronize(cudaStream_t stream);

/* Makes later work on stream wait for the last record of event. */
ncclResult_t cecollStreamWaitEvent(cudaStream_t stream, cecollEvent_t event);

/* Copies bytes between any two of host and device memory. Returns only when
 * the bytes are in place and visible to every stream. */
ncclResult_t cecollMemcpy(void* dst, const void* src, size_t bytes);

/* Enqueues on stream a copy of bytes between two device allocations (the
 * kind of copy the collectives make: copy engines, stream-ordered); returns
 * at once. */
ncclResult_t cecollMemcpyAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream);

/* Sets bytes of host or device memory to (unsigned char)value. Returns only
 * when done and visible to every stream. */
ncclResult_t cecollMemset(void* dst, int value, size_t bytes);

/* Events, with timing enabled. */
ncclResult_t cecollEventCreate(cecollEvent_t* event);

ncclResult_t cecollEventRecord(cecollEvent_t event, cudaStream_t stream);

/* Waits on the host for the work before the event's last record. */
ncclResult_t cecollEventSynchronize(cecollEvent_t event);

/* Milliseconds between two recorded, completed events. */
ncclResult_t cecollEventElapsedTime(float* ms, cecollEvent_t start, cecollEvent_t end);

ncclResult_t cecollEventDestroy(cecollEvent_t event);

/* Starts capturing stream's work into a graph, in thread-local capture mode:
 * work is recorded, not run, until cecollStreamEndCapture. */
ncclResult_t cecollStreamBeginCapture(cudaStream_t stream);

/* Ends the capture and returns the captured work as a launchable graph.
 * It is instantiated here, or at its first cecollGraphLaunch when the calling
 * thread still captures other streams (CUDA refuses instantiation then in
 * thread-local mode). */
ncclResult_t cecollStreamEndCapture(cudaStream_t stream, cecollGraph_t* graph);

/* Queues one replay of graph on stream. */
ncclResult_t cecollGraphLaunch(cecollGraph_t graph, cudaStream_t stream);

ncclResult_t cecollGraphDestroy(cecollGraph_t graph);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_CE_H_ */
