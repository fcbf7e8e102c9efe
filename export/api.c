/* api.c: every public function of include/nccl.h and include/nccl_ce.h with
 * its exact prototype (the compiler checks each against the headers),
 * forwarding to the Go half goexp_<name> (exports_*.go). As in NCCL,
 * pncclX is the function and ncclX a weak alias of it. Error strings, the
 * version and the last-error buffer live here, in C, so every string handed
 * to a caller has static lifetime. */
#include <pthread.h>
#include <string.h>

#include "nccl.h"
#include "nccl_ce.h"
#include "_cgo_export.h"

/* ---- last error ---------------------------------------------------------- */

static char xlast_buf[2048];

/* Called from Go under its lock; the text is copied and NUL-terminated. */
void xlast_set(const char* text, size_t n) {
  if (n >= sizeof(xlast_buf)) n = sizeof(xlast_buf) - 1;
  if (n > 0) memcpy(xlast_buf, text, n);
  xlast_buf[n] = '\0';
}

/* ---- forwarding ------------------------------------------------------------ */

/* The first call into Go copies the C environment into the Go runtime's,
 * which otherwise only knows the environment of exec time (env.go). */
static pthread_once_t xenv_once = PTHREAD_ONCE_INIT;
static void xenv_sync(void) { goexp_cecollSyncEnv(); }
#define XENV() pthread_once(&xenv_once, xenv_sync)

#define XALIAS(name) __attribute__((weak, alias("p" #name)))

#define XFWD(name, params, args)                           \
  ncclResult_t p##name params { XENV(); return goexp_##name args; } \
  ncclResult_t name params XALIAS(name);

XFWD(ncclMemAlloc, (void** ptr, size_t size), (ptr, size))
XFWD(ncclMemFree, (void* ptr), (ptr))
XFWD(ncclGetUniqueId, (ncclUniqueId* uniqueId), (uniqueId))
XFWD(ncclCommInitRankConfig, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config),
     (comm, nranks, commId, rank, config))
XFWD(ncclCommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank), (comm, nranks, commId, rank))
XFWD(ncclCommInitAll, (ncclComm_t* comm, int ndev, const int* devlist), (comm, ndev, (int*)devlist))
XFWD(ncclCommFinalize, (ncclComm_t comm), (comm))
XFWD(ncclCommDestroy, (ncclComm_t comm), (comm))
XFWD(ncclCommAbort, (ncclComm_t comm), (comm))
XFWD(ncclCommRevoke, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags))
XFWD(ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),
     (comm, color, key, newcomm, config))
XFWD(ncclCommShrink,
     (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,
      int shrinkFlags),
     (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags))
XFWD(ncclCommInitRankScalable,
     (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config),
     (newcomm, nranks, myrank, nId, commIds, config))
XFWD(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError), (comm, asyncError))
XFWD(ncclCommCount, (const ncclComm_t comm, int* count), (comm, count))
XFWD(ncclCommCuDevice, (const ncclComm_t comm, int* device), (comm, device))
XFWD(ncclCommUserRank, (const ncclComm_t comm, int* rank), (comm, rank))
XFWD(ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle), (comm, buff, size, handle))
XFWD(ncclCommDeregister, (const ncclComm_t comm, void* handle), (comm, handle))
XFWD(ncclCommWindowRegister, (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags),
     (comm, buff, size, win, winFlags))
XFWD(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win))
XFWD(ncclRedOpCreatePreMulSum,
     (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm),
     (op, scalar, datatype, residence, comm))
XFWD(ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm))
XFWD(ncclReduce,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
      ncclComm_t comm, cudaStream_t stream),
     ((void*)sendbuff, recvbuff, count, datatype, op, root, comm, stream))
XFWD(ncclBcast, (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),
     (buff, count, datatype, root, comm, stream))
XFWD(ncclBroadcast,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
      cudaStream_t stream),
     ((void*)sendbuff, recvbuff, count, datatype, root, comm, stream))
XFWD(ncclAllReduce,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
      cudaStream_t stream),
     ((void*)sendbuff, recvbuff, count, datatype, op, comm, stream))
XFWD(ncclReduceScatter,
     (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
      ncclComm_t comm, cudaStream_t stream),
     ((void*)sendbuff, recvbuff, recvcount, datatype, op, comm, stream))
XFWD(ncclAllGather,
     (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
      cudaStream_t stream),
     ((void*)sendbuff, recvbuff, sendcount, datatype, comm, stream))
XFWD(ncclAlltoAll,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
      cudaStream_t stream),
     ((void*)sendbuff, recvbuff, count, datatype, comm, stream))
XFWD(ncclAllToAll,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
      cudaStream_t stream),
     ((void*)sendbuff, recvbuff, count, datatype, comm, stream))
XFWD(ncclGather,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
      cudaStream_t stream),
     ((void*)sendbuff, recvbuff, count, datatype, root, comm, stream))
XFWD(ncclScatter,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
      cudaStream_t stream),
     ((void*)sendbuff, recvbuff, count, datatype, root, comm, stream))
XFWD(ncclSend,
     (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),
     ((void*)sendbuff, count, datatype, peer, comm, stream))
XFWD(ncclRecv, (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),
     (recvbuff, count, datatype, peer, comm, stream))
XFWD(ncclGroupStart, (void), ())
XFWD(ncclGroupEnd, (void), ())
XFWD(ncclGroupSimulateEnd, (ncclSimInfo_t* simInfo), (simInfo))

/* ---- pure C: version and strings --------------------------------------- */

ncclResult_t pncclGetVersion(int* version) {
  if (version == NULL) {
    static const char msg[] = "ncclGetVersion: NULL version";
    xlast_set(msg, sizeof(msg) - 1);
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetVersion(int* version) XALIAS(ncclGetVersion);

const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with CECOLL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with CECOLL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the cecoll developers";
  case ncclInvalidArgument: return "invalid argument (run with CECOLL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with CECOLL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}
const char* ncclGetErrorString(ncclResult_t result) XALIAS(ncclGetErrorString);

/* Process-wide, except for a communicator that failed asynchronously:
 * then its own text, what failed and on which rank (errors.go), valid
 * until ncclCommDestroy. comm may be NULL. */
const char* pncclGetLastError(ncclComm_t comm) {
  if (comm != NULL) {
    const char* own;
    XENV();
    own = goexp_xlastComm(comm);
    if (own != NULL) return own;
  }
  return xlast_buf;
}
const char* ncclGetLastError(ncclComm_t comm) XALIAS(ncclGetLastError);

/* ---- nccl_ce.h ------------------------------------------------------------- */

ncclResult_t ncclCeInit(ncclComm_t comm) { XENV(); return goexp_ncclCeInit(comm); }
ncclResult_t ncclCeFinalize(ncclComm_t comm) { XENV(); return goexp_ncclCeFinalize(comm); }
int ncclCeImplemented(ncclFunc_t coll, int redOp, ncclDataType_t type) {
  XENV(); return goexp_ncclCeImplemented(coll, redOp, type);
}
ncclResult_t ncclLaunchCeColl(ncclComm_t comm, const struct ncclCeCollArgs* args, cudaStream_t stream) {
  XENV(); return goexp_ncclLaunchCeColl(comm, (struct ncclCeCollArgs*)args, stream);
}

ncclResult_t cecollGetBackend(const char** name) { XENV(); return goexp_cecollGetBackend((char**)name); }
ncclResult_t cecollGetDeviceCount(int* count) { XENV(); return goexp_cecollGetDeviceCount(count); }
ncclResult_t cecollSetDevice(int device) { XENV(); return goexp_cecollSetDevice(device); }
ncclResult_t cecollStreamCreate(cudaStream_t* stream) { XENV(); return goexp_cecollStreamCreate(stream); }
ncclResult_t cecollStreamDestroy(cudaStream_t stream) { XENV(); return goexp_cecollStreamDestroy(stream); }
ncclResult_t cecollStreamSynchronize(cudaStream_t stream) { XENV(); return goexp_cecollStreamSynchronize(stream); }
ncclResult_t cecollStreamWaitEvent(cudaStream_t stream, cecollEvent_t event) {
  XENV(); return goexp_cecollStreamWaitEvent(stream, event);
}
ncclResult_t cecollMemcpy(void* dst, const void* src, size_t bytes) {
  XENV(); return goexp_cecollMemcpy(dst, (void*)src, bytes);
}
ncclResult_t cecollMemcpyAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  XENV(); return goexp_cecollMemcpyAsync(dst, (void*)src, bytes, stream);
}
ncclResult_t cecollMemset(void* dst, int value, size_t bytes) { XENV(); return goexp_cecollMemset(dst, value, bytes); }
ncclResult_t cecollEventCreate(cecollEvent_t* event) { XENV(); return goexp_cecollEventCreate(event); }
ncclResult_t cecollEventRecord(cecollEvent_t event, cudaStream_t stream) {
  XENV(); return goexp_cecollEventRecord(event, stream);
}
ncclResult_t cecollEventSynchronize(cecollEvent_t event) { XENV(); return goexp_cecollEventSynchronize(event); }
ncclResult_t cecollEventElapsedTime(float* ms, cecollEvent_t start, cecollEvent_t end) {
  XENV(); return goexp_cecollEventElapsedTime(ms, start, end);
}
ncclResult_t cecollEventDestroy(cecollEvent_t event) { XENV(); return goexp_cecollEventDestroy(event); }
ncclResult_t cecollStreamBeginCapture(cudaStream_t stream) { XENV(); return goexp_cecollStreamBeginCapture(stream); }
ncclResult_t cecollStreamEndCapture(cudaStream_t stream, cecollGraph_t* graph) {
  XENV(); return goexp_cecollStreamEndCapture(stream, graph);
}
ncclResult_t cecollGraphLaunch(cecollGraph_t graph, cudaStream_t stream) {
  XENV(); return goexp_cecollGraphLaunch(graph, stream);
}
ncclResult_t cecollGraphDestroy(cecollGraph_t graph) { XENV(); return goexp_cecollGraphDestroy(graph); }
