/* api.c: every function of include/nccl.h and include/nccl_ce.h, and the
 * NCCL 2.31 functions cecoll implements itself (tools/fwdgen's handled
 * set; the others are the tail-jump stubs of fwd_stubs.S), each with its
 * exact prototype (the compiler checks each against the headers),
 * forwarding to the Go half goexp_<name> (exports_*.go). As in NCCL,
 * pncclX is the function and ncclX a weak alias of it. Error strings, the
 * version and the last-error buffer live here, in C, so every string
 * handed to a caller has static lifetime.
 *
 * Forward mode (a real NCCL or RCCL loaded, forward.c): a call made while
 * this thread is inside the real library goes straight back to it (the
 * real library's own calls to its exported names, cecoll preloaded). A Go
 * half answers XSENT_RAW for a communicator that is not cecoll's (it goes
 * to the real library unchanged) and XSENT_REAL for a collective routed
 * to the real communicator the cecoll one owns. */
#include <pthread.h>
#include <string.h>

#include "nccl.h"
#include "nccl_ce.h"
#include "_cgo_export.h"

/* ---- last error ---------------------------------------------------------- */

static char xlast_buf[2048];
/* The real library's last-error text when cecoll last set its own: a
 * different text now means the real library failed since. */
static char xlast_real[2048];

/* Called from Go under its lock; the text is copied and NUL-terminated. */
void xlast_set(const char* text, size_t n) {
  if (n >= sizeof(xlast_buf)) n = sizeof(xlast_buf) - 1;
  if (n > 0) memcpy(xlast_buf, text, n);
  xlast_buf[n] = '\0';
  strncpy(xlast_real, xr_last_error(), sizeof(xlast_real) - 1);
}

/* ---- forwarding ------------------------------------------------------------ */

/* Every entry point that may enter Go: refused in a forked child (fork.c);
 * else the first call copies the environment and looks for the real
 * library. */
#define XENTER()                                \
  do {                                          \
    if (xforked) return xfork_refuse(__func__); \
    xenv();                                     \
  } while (0)
#define XALIAS(name) __attribute__((weak, alias("p" #name)))
#define XHAVE(name) (xfwd_slot[XR_##name] != NULL)
#define XCALL(name, args) ({ xinside++; __typeof__(XREAL(name) args) r_ = XREAL(name) args; xinside--; r_; })
#define XRC(c) ((ncclComm_t)((c)->real))

/* The real function, when cecoll has none to forward a call to. */
static ncclResult_t xmissing(const char* name) { return goexp_xfwdRefuse((char*)name, NULL, 2, 0); }

/* Go decides; a handle that is not cecoll's goes to the real library. */
#define XFWD(name, params, args)                                   \
  ncclResult_t p##name params {                                    \
    if (xinside && XHAVE(name)) return XREAL(name) args;           \
    XENTER();                                                      \
    ncclResult_t r_ = goexp_##name args;                           \
    if (r_ == XSENT_RAW) return XHAVE(name) ? XCALL(name, args) : xmissing(#name); \
    return r_;                                                     \
  }                                                                \
  ncclResult_t name params XALIAS(name);

/* A collective: also XSENT_REAL, the call routed to the real library, on
 * the real communicator (rargs: args with XRC(comm) for comm). */
#define XCOLL(name, params, args, rargs)                           \
  ncclResult_t p##name params {                                    \
    if (xinside && XHAVE(name)) return XREAL(name) args;           \
    XENTER();                                                      \
    ncclResult_t r_ = goexp_##name args;                           \
    if (r_ == XSENT_RAW) return XHAVE(name) ? XCALL(name, args) : xmissing(#name); \
    if (r_ == XSENT_REAL) return XHAVE(name) ? XCALL(name, rargs) : xmissing(#name); \
    return r_;                                                     \
  }                                                                \
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
XCOLL(ncclAllGather,
      (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
       cudaStream_t stream),
      ((void*)sendbuff, recvbuff, sendcount, datatype, comm, stream),
      (sendbuff, recvbuff, sendcount, datatype, XRC(comm), stream))
XCOLL(ncclAlltoAll,
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
       cudaStream_t stream),
      ((void*)sendbuff, recvbuff, count, datatype, comm, stream), (sendbuff, recvbuff, count, datatype, XRC(comm), stream))
XCOLL(ncclAllToAll,
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
       cudaStream_t stream),
      ((void*)sendbuff, recvbuff, count, datatype, comm, stream), (sendbuff, recvbuff, count, datatype, XRC(comm), stream))
XCOLL(ncclGather,
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
       cudaStream_t stream),
      ((void*)sendbuff, recvbuff, count, datatype, root, comm, stream),
      (sendbuff, recvbuff, count, datatype, root, XRC(comm), stream))
XCOLL(ncclScatter,
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
       cudaStream_t stream),
      ((void*)sendbuff, recvbuff, count, datatype, root, comm, stream),
      (sendbuff, recvbuff, count, datatype, root, XRC(comm), stream))
XCOLL(ncclBroadcast,
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
       cudaStream_t stream),
      ((void*)sendbuff, recvbuff, count, datatype, root, comm, stream),
      (sendbuff, recvbuff, count, datatype, root, XRC(comm), stream))
XCOLL(ncclBcast, (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),
      (buff, count, datatype, root, comm, stream), (buff, count, datatype, root, XRC(comm), stream))
XCOLL(ncclSend, (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),
      ((void*)sendbuff, count, datatype, peer, comm, stream), (sendbuff, count, datatype, peer, XRC(comm), stream))
XCOLL(ncclRecv, (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),
      (recvbuff, count, datatype, peer, comm, stream), (recvbuff, count, datatype, peer, XRC(comm), stream))
XFWD(ncclAllToAllv,
     (const void* sendbuff, const size_t sendcounts[], const size_t sdispls[], void* recvbuff,
      const size_t recvcounts[], const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream),
     ((void*)sendbuff, (size_t*)sendcounts, (size_t*)sdispls, recvbuff, (size_t*)recvcounts, (size_t*)rdispls,
      datatype, comm, stream))
XFWD(ncclGroupStart, (void), ())
XFWD(ncclGroupEnd, (void), ())
XFWD(ncclGroupSimulateEnd, (ncclSimInfo_t* simInfo), (simInfo))

/* ---- NCCL 2.31's per-collective config (ncclCollConfig_t) ----------------- */

/* ncclCollConfig_v23100: size_t size; unsigned magic, version; ext*;
 * int minCTAs, maxCTAs, nvlsCTAs, cgaClusterSize; const char*
 * algSelection; int forceAlgSelection; int CTAPolicy (offset 52); ... */
#define XCOLLCFG_CTA_OFF 52

/* The CTA policy a ncclCollConfig_t asks for; -1: none or unset (cecoll
 * reads nothing else of it; the real library gets it unchanged). */
static int xcollcfg_cta(const void* cfg) {
  if (cfg == NULL) return -1;
  size_t size = *(const size_t*)cfg;
  if (size < XCOLLCFG_CTA_OFF + sizeof(int)) return -1;
  int v = *(const int*)((const char*)cfg + XCOLLCFG_CTA_OFF);
  return v == NCCL_CONFIG_UNDEF_INT ? -1 : v;
}

/* The *Config collective on the real communicator, or the plain one when
 * the real library predates them and no config was given. */
#define XCFG_REAL(name, plain, rargs, pargs)                                  \
  (XHAVE(name) ? XCALL(name, rargs) : config == NULL && XHAVE(plain) ? XCALL(plain, pargs) : xmissing(#name))

#define XCOLLCFG(name, plain, params, goargs, args, rargs, pargs)                 \
  ncclResult_t p##name params {                                                \
    if (xinside && XHAVE(name)) return XREAL(name) args;                       \
    XENTER();                                                                  \
    ncclResult_t r_ = goexp_##plain##Config goargs;                            \
    if (r_ == XSENT_RAW) return XCFG_REAL(name, plain, args, pargs);           \
    if (r_ == XSENT_REAL) return XCFG_REAL(name, plain, rargs, pargs##Real);   \
    return r_;                                                                 \
  }                                                                            \
  ncclResult_t name params XALIAS(name);

#define XCOLLCFG_PARAMS_PLAIN                                                                              \
  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream, \
   const struct ncclCollConfig_v23100* config)
#define XCOLLCFG_PARAMS_ROOT                                                                               \
  (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,       \
   cudaStream_t stream, const struct ncclCollConfig_v23100* config)

#define XARGS ((void*)sendbuff, recvbuff, count, datatype, comm, stream, config)
#define XARGS_REAL (sendbuff, recvbuff, count, datatype, XRC(comm), stream, config)
#define XPLAIN (sendbuff, recvbuff, count, datatype, comm, stream)
#define XPLAINReal (sendbuff, recvbuff, count, datatype, XRC(comm), stream)
#define XGOARGS ((void*)sendbuff, recvbuff, count, datatype, comm, stream, xcollcfg_cta(config))
#define XRARGS ((void*)sendbuff, recvbuff, count, datatype, root, comm, stream, config)
#define XRARGS_REAL (sendbuff, recvbuff, count, datatype, root, XRC(comm), stream, config)
#define XRPLAIN (sendbuff, recvbuff, count, datatype, root, comm, stream)
#define XRPLAINReal (sendbuff, recvbuff, count, datatype, root, XRC(comm), stream)
#define XRGOARGS ((void*)sendbuff, recvbuff, count, datatype, root, comm, stream, xcollcfg_cta(config))

XCOLLCFG(ncclAllGatherConfig, ncclAllGather, XCOLLCFG_PARAMS_PLAIN, XGOARGS, XARGS, XARGS_REAL, XPLAIN)
XCOLLCFG(ncclAlltoAllConfig, ncclAlltoAll, XCOLLCFG_PARAMS_PLAIN, XGOARGS, XARGS, XARGS_REAL, XPLAIN)
XCOLLCFG(ncclGatherConfig, ncclGather, XCOLLCFG_PARAMS_ROOT, XRGOARGS, XRARGS, XRARGS_REAL, XRPLAIN)
XCOLLCFG(ncclScatterConfig, ncclScatter, XCOLLCFG_PARAMS_ROOT, XRGOARGS, XRARGS, XRARGS_REAL, XRPLAIN)
XCOLLCFG(ncclBroadcastConfig, ncclBroadcast, XCOLLCFG_PARAMS_ROOT, XRGOARGS, XRARGS, XRARGS_REAL, XRPLAIN)

/* ---- pure C: version and strings --------------------------------------- */

/* The real library's version where one is loaded (programs enable features
 * by it), else NCCL 2.28's code. */
ncclResult_t pncclGetVersion(int* version) {
  if (xinside && XHAVE(ncclGetVersion)) return XREAL(ncclGetVersion)(version);
  if (!xforked) xenv(); /* a forked child answers from C */
  if (XHAVE(ncclGetVersion)) return XCALL(ncclGetVersion, (version));
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
  if (xinside && XHAVE(ncclGetErrorString)) return XREAL(ncclGetErrorString)(result);
  switch (result) {
  case ncclSuccess: return "no error";
  /* The details are in ncclGetLastError (and a WARN line, cecoll's
   * default level): no advice to set a level that may be set already. */
  case ncclUnhandledCudaError: return "unhandled cuda error (ncclGetLastError() says which call failed)";
  case ncclSystemError: return "unhandled system error (ncclGetLastError() says what failed)";
  case ncclInternalError: return "internal error - please report this issue to the cecoll developers";
  case ncclInvalidArgument: return "invalid argument (ncclGetLastError() says which)";
  case ncclInvalidUsage: return "invalid usage (ncclGetLastError() says why)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}
const char* ncclGetErrorString(ncclResult_t result) XALIAS(ncclGetErrorString);

/* Process-wide, except for a communicator that failed asynchronously:
 * then its own text, what failed and on which rank (errors.go), valid
 * until ncclCommDestroy. comm may be NULL. With a real library, the text
 * of whichever side failed last: the real one's when it changed since
 * cecoll last set its own. */
const char* pncclGetLastError(ncclComm_t comm) {
  if (xinside && XHAVE(ncclGetLastError)) return XREAL(ncclGetLastError)(comm);
  if (xforked) return xlast_buf; /* the fork refusal's text, from C */
  xenv();
  if (comm != NULL) {
    const char* own = goexp_xlastComm(comm);
    if (own != NULL) return own;
  }
  if (XHAVE(ncclGetLastError)) {
    const char* real = xr_last_error();
    if (real[0] != '\0' && strcmp(real, xlast_real) != 0) return real;
  }
  return xlast_buf;
}
const char* ncclGetLastError(ncclComm_t comm) XALIAS(ncclGetLastError);

/* ---- nccl_ce.h ------------------------------------------------------------- */

ncclResult_t ncclCeInit(ncclComm_t comm) { XENTER(); return goexp_ncclCeInit(comm); }
ncclResult_t ncclCeFinalize(ncclComm_t comm) { XENTER(); return goexp_ncclCeFinalize(comm); }
int ncclCeImplemented(ncclFunc_t coll, int redOp, ncclDataType_t type) {
  if (xforked) { /* nothing runs in a forked child */
    xfork_refuse(__func__);
    return 0;
  }
  xenv();
  return goexp_ncclCeImplemented(coll, redOp, type);
}
ncclResult_t ncclLaunchCeColl(ncclComm_t comm, const struct ncclCeCollArgs* args, cudaStream_t stream) {
  XENTER(); return goexp_ncclLaunchCeColl(comm, (struct ncclCeCollArgs*)args, stream);
}

ncclResult_t cecollGetBackend(const char** name) { XENTER(); return goexp_cecollGetBackend((char**)name); }
ncclResult_t cecollGetVersion(const char** version) { XENTER(); return goexp_cecollGetVersion((char**)version); }
ncclResult_t cecollGetDeviceCount(int* count) { XENTER(); return goexp_cecollGetDeviceCount(count); }
ncclResult_t cecollSetDevice(int device) { XENTER(); return goexp_cecollSetDevice(device); }
ncclResult_t cecollStreamCreate(cudaStream_t* stream) { XENTER(); return goexp_cecollStreamCreate(stream); }
ncclResult_t cecollStreamDestroy(cudaStream_t stream) { XENTER(); return goexp_cecollStreamDestroy(stream); }
ncclResult_t cecollStreamSynchronize(cudaStream_t stream) { XENTER(); return goexp_cecollStreamSynchronize(stream); }
ncclResult_t cecollStreamWaitEvent(cudaStream_t stream, cecollEvent_t event) {
  XENTER(); return goexp_cecollStreamWaitEvent(stream, event);
}
ncclResult_t cecollMemcpy(void* dst, const void* src, size_t bytes) {
  XENTER(); return goexp_cecollMemcpy(dst, (void*)src, bytes);
}
ncclResult_t cecollMemcpyAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  XENTER(); return goexp_cecollMemcpyAsync(dst, (void*)src, bytes, stream);
}
ncclResult_t cecollMemset(void* dst, int value, size_t bytes) { XENTER(); return goexp_cecollMemset(dst, value, bytes); }
ncclResult_t cecollEventCreate(cecollEvent_t* event) { XENTER(); return goexp_cecollEventCreate(event); }
ncclResult_t cecollEventRecord(cecollEvent_t event, cudaStream_t stream) {
  XENTER(); return goexp_cecollEventRecord(event, stream);
}
ncclResult_t cecollEventSynchronize(cecollEvent_t event) { XENTER(); return goexp_cecollEventSynchronize(event); }
ncclResult_t cecollEventElapsedTime(float* ms, cecollEvent_t start, cecollEvent_t end) {
  XENTER(); return goexp_cecollEventElapsedTime(ms, start, end);
}
ncclResult_t cecollEventDestroy(cecollEvent_t event) { XENTER(); return goexp_cecollEventDestroy(event); }
ncclResult_t cecollStreamBeginCapture(cudaStream_t stream) { XENTER(); return goexp_cecollStreamBeginCapture(stream); }
ncclResult_t cecollStreamEndCapture(cudaStream_t stream, cecollGraph_t* graph) {
  XENTER(); return goexp_cecollStreamEndCapture(stream, graph);
}
ncclResult_t cecollGraphLaunch(cecollGraph_t graph, cudaStream_t stream) {
  XENTER(); return goexp_cecollGraphLaunch(graph, stream);
}
ncclResult_t cecollGraphDestroy(cecollGraph_t graph) { XENTER(); return goexp_cecollGraphDestroy(graph); }
