/*
 * nccl.h: cecoll's C interface, source- and binary-compatible with NVIDIA's
 * NCCL 2.28 (2.28.9) nccl.h. Type layouts, enum values, macros and function
 * prototypes are those of NCCL 2.28 (see docs: nccl-api.md), so a program built
 * against NVIDIA's header links and runs against libcecoll.so unchanged.
 *
 * Copy engines move data but cannot compute: AllGather, AlltoAll (also under
 * RCCL's spelling ncclAllToAll), Gather and Scatter run; reductions and
 * whatever else is not built return ncclInvalidUsage, and ncclGetLastError
 * says why.
 *
 * CONTRACT FOR export/ (the implementation): every prototype below is NCCL's
 * exact prototype, const qualifiers included. cgo's generated _cgo_export.h
 * writes `void*`/`int*` where these say `const void*`/`const int*`, so the
 * //export functions must NOT carry these names. Instead export/ defines each
 * public function in a C file that includes this header (so the compiler
 * checks every prototype against it) and forwards to a Go export under an
 * internal, non-exported name; the pnccl* names are aliases of the same
 * functions. Only nccl*, pnccl* and cecoll* symbols leave the library.
 *
 * The header compiles as C (C11 or later) and C++, with or without the CUDA
 * runtime headers included before or after it: cudaStream_t is declared with
 * the exact typedef CUDA uses, which C11 and C++ allow to be repeated. It
 * never includes a CUDA header itself.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

/* Releases up to 2.8 used X*1000 + Y*100 + Z; later ones X*10000 + Y*100 + Z. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE 22809

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA's own stream handle type. driver_types.h guards itself with
 * __DRIVER_TYPES_H__; when it came first there is nothing to add (this also
 * keeps pre-C11 compilers, which refuse a repeated typedef, happy). When it
 * comes later its identical typedef is a legal redeclaration. */
#if !defined(__DRIVER_TYPES_H__)
typedef struct CUstream_st* cudaStream_t;
#endif

/* Opaque communicator and memory-window handles. */
typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* The bootstrap identifier, passed by value to ncclCommInitRank*. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Result codes. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* Marks a structure initialised by one of the *_INITIALIZER macros. */
#define NCCL_API_MAGIC 0xcafebeef

/* ncclCommWindowRegister flags and the alignment a window's buffer needs. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy values. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* Communicator configuration, version 2.28: 80 bytes on LP64. The library
 * tells header generations apart by `size` and reads only the fields that
 * size covers (so older and newer headers work); a wrong `magic`, or a size
 * too small to hold size, magic and version, is ncclInvalidArgument. */
typedef struct ncclConfig_v22800 {
  size_t size;          /* sizeof(ncclConfig_t) of the caller's header */
  unsigned int magic;   /* NCCL_API_MAGIC */
  unsigned int version; /* NCCL_VERSION_CODE of the caller's header */
  int blocking;         /* 0: calls may return ncclInProgress */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

/* Every ncclConfig_t must start from this value. */
#define NCCL_CONFIG_INITIALIZER {                                          \
  sizeof(ncclConfig_t),  /* size */                                        \
  NCCL_API_MAGIC,        /* magic */                                       \
  NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */          \
  NCCL_CONFIG_UNDEF_INT, /* blocking */                                    \
  NCCL_CONFIG_UNDEF_INT, /* cgaClusterSize */                              \
  NCCL_CONFIG_UNDEF_INT, /* minCTAs */                                     \
  NCCL_CONFIG_UNDEF_INT, /* maxCTAs */                                     \
  NCCL_CONFIG_UNDEF_PTR, /* netName */                                     \
  NCCL_CONFIG_UNDEF_INT, /* splitShare */                                  \
  NCCL_CONFIG_UNDEF_INT, /* trafficClass */                                \
  NCCL_CONFIG_UNDEF_PTR, /* commName */                                    \
  NCCL_CONFIG_UNDEF_INT, /* collnetEnable */                               \
  NCCL_CONFIG_UNDEF_INT, /* CTAPolicy */                                   \
  NCCL_CONFIG_UNDEF_INT, /* shrinkShare */                                 \
  NCCL_CONFIG_UNDEF_INT, /* nvlsCTAs */                                    \
  NCCL_CONFIG_UNDEF_INT, /* nChannelsPerNetPeer */                         \
  NCCL_CONFIG_UNDEF_INT  /* nvlinkCentricSched */                          \
}

/* Filled by ncclGroupSimulateEnd. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER {                                        \
  sizeof(ncclSimInfo_t), /* size */                                        \
  0x74685283,            /* magic */                                       \
  NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */          \
  NCCL_UNDEF_FLOAT       /* estimatedTime */                               \
}

/* Reduction operators. The helper enum pins ncclRedOp_t's size to the
 * compiler's size for a small enum (int), and ncclMaxRedOp is the largest
 * value that keeps it so. Operators made by ncclRedOpCreatePreMulSum take
 * values from ncclNumOps upwards. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/* Element types. Sizes in bytes: 1,1,4,4,8,8,2,4,8,2,1,1. */
typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives: read by the device
 * while the collective runs, or read from host memory before the call returns. */
typedef enum {
  ncclScalarDevice = 0,
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/* ---- Memory ----------------------------------------------------------- */

/* Allocates device memory suited to window registration (granularity-aligned;
 * the allocation may be larger than asked). */
ncclResult_t  ncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);

/* Frees memory from ncclMemAlloc. */
ncclResult_t  ncclMemFree(void* ptr);
ncclResult_t pncclMemFree(void* ptr);

/* ---- Version and bootstrap ---------------------------------------------- */

/* Stores the library's NCCL_VERSION_CODE (cecoll reports 22809). */
ncclResult_t  ncclGetVersion(int* version);
ncclResult_t pncclGetVersion(int* version);

/* Makes a new bootstrap identifier; one rank calls it and hands the bytes to
 * every rank before ncclCommInitRank. */
ncclResult_t  ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);

/* ---- Communicators ------------------------------------------------------ */

/* ncclCommInitRank with a configuration (config may be NULL). */
ncclResult_t  ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config);

/* Creates rank `rank` of an nranks communicator on the calling thread's
 * current device. It waits for the other ranks, so each rank is initialised
 * from its own thread/process or all inside ncclGroupStart/ncclGroupEnd. */
ncclResult_t  ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);

/* Creates all ndev ranks of a communicator in this process; rank i uses
 * device devlist[i] (devices 0..ndev-1 when devlist is NULL). cecoll accepts a
 * device repeated in devlist. */
ncclResult_t  ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);

/* Completes all work issued on comm and releases its shared resources; then
 * ncclCommDestroy frees the rest locally. Collectives on a finalized
 * communicator return ncclInvalidUsage. One thread finalizing several
 * communicators groups the calls. */
ncclResult_t  ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);

/* Frees comm's local resources. NULL is a no-op returning ncclSuccess (as
 * in NCCL); a destroyed handle, a second destroy included, is
 * ncclInvalidArgument. */
ncclResult_t  ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);

/* Stops comm's pending work, releasing any device waits, and frees its
 * resources. NULL is a no-op returning ncclSuccess. The handle stays
 * recognisable: collectives on an aborted communicator return
 * ncclInvalidUsage. */
ncclResult_t  ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

/* Stops in-flight work; revokeFlags must be 0. */
ncclResult_t  ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* Splits comm by color, ordering ranks by key; NCCL_SPLIT_NOCOLOR gives a
 * NULL communicator. config NULL inherits comm's configuration. */
ncclResult_t  ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);

/* Makes a communicator of comm's ranks minus excludeRanksList. */
ncclResult_t  ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);

/* ncclCommInitRankConfig with nId bootstrap identifiers, the same on every rank. */
ncclResult_t  ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config);

/* ---- Errors -------------------------------------------------------------- */

/* A fixed text for each result code; never freed by the caller. */
const char*  ncclGetErrorString(ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result);

/* The text of the last error (comm may be NULL); never freed by the caller. */
const char*  ncclGetLastError(ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm);

/* Stores comm's asynchronous state: ncclSuccess, ncclInProgress while a
 * non-blocking operation runs, or the error that ended it. */
ncclResult_t  ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

/* ---- Queries -------------------------------------------------------------- */

ncclResult_t  ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);

ncclResult_t  ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);

ncclResult_t  ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);

/* ---- Registration ----------------------------------------------------------- */

/* Local buffer registration. */
ncclResult_t  ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);

ncclResult_t  ncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);

/* Collective: registers buff as a window on every rank (NCCL_WIN_* flags).
 * The buffer must be NCCL_WIN_REQUIRED_ALIGNMENT-aligned; registering a buffer
 * that is already in a window of comm is refused. */
ncclResult_t  ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags);

/* Local. */
ncclResult_t  ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* ---- Reduction operators ------------------------------------------------- */

ncclResult_t  ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm);

ncclResult_t  ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- Collectives ---------------------------------------------------------
 * Each rank of the communicator makes the call; it returns once the work is
 * queued on `stream` (asynchronous to the host). One thread driving several
 * ranks wraps the calls in ncclGroupStart/ncclGroupEnd. Counts are in
 * elements of `datatype`, per rank. */

/* Reductions: copy engines cannot reduce; cecoll returns ncclInvalidUsage. */
ncclResult_t  ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

/* In-place broadcast from root (deprecated spelling of ncclBroadcast). */
ncclResult_t  ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
    ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
    ncclComm_t comm, cudaStream_t stream);

/* Copies count elements of root's sendbuff into every rank's recvbuff
 * (sendbuff is unused, may be NULL, on other ranks); in place when
 * sendbuff == recvbuff on the root. On copy engines. recvbuff is the
 * pointer NCCL's symmetric contract puts at one offset of a window on
 * every rank: a window there makes it zero-copy. */
ncclResult_t  ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
    ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
    ncclComm_t comm, cudaStream_t stream);

/* Reduction: ncclInvalidUsage in cecoll. */
ncclResult_t  ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

/* Reduction: ncclInvalidUsage in cecoll. */
ncclResult_t  ncclReduceScatter(const void* sendbuff, void* recvbuff,
    size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
    cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff,
    size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
    cudaStream_t stream);

/* Rank i's sendcount elements land at recvbuff + i*sendcount on every rank.
 * In place when sendbuff == recvbuff + rank*sendcount. */
ncclResult_t  ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Block j of sendbuff (count elements at sendbuff + j*count) goes to rank j,
 * where it lands at recvbuff + i*count, i being the sender. cecoll also
 * accepts sendbuff == recvbuff. */
ncclResult_t  ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* RCCL's spelling of ncclAlltoAll; identical behaviour. */
ncclResult_t  ncclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* RCCL's all-to-all with per-peer counts and displacements (elements of
 * datatype, one entry per rank): sendcounts[p] elements from
 * sendbuff + sdispls[p] go to rank p, recvcounts[p] elements from rank p
 * land at recvbuff + rdispls[p]; any count may be zero. Rank a's
 * sendcounts[b] must equal rank b's recvcounts[a]. Each pair moves as a
 * send and a receive of one group: in forward mode each pair routes by its
 * bytes, like ncclSend. A receive may not share bytes with a send. */
ncclResult_t  ncclAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
    void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
    void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Each rank's count elements land at root's recvbuff + rank*count; recvbuff
 * is unused (may be NULL) on other ranks. In place when
 * sendbuff == recvbuff + root*count on the root. */
ncclResult_t  ncclGather(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Root's sendbuff + i*count goes to rank i's recvbuff; sendbuff is unused
 * (may be NULL) on other ranks. In place when recvbuff == sendbuff + root*count
 * on the root. */
ncclResult_t  ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Point-to-point: the peer makes the matching call with the same count and
 * datatype. */
ncclResult_t  ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
    ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
    ncclComm_t comm, cudaStream_t stream);

ncclResult_t  ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
    ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
    ncclComm_t comm, cudaStream_t stream);

/* ---- Groups ----------------------------------------------------------------
 * Calls between ncclGroupStart and ncclGroupEnd are deferred and issued
 * together at ncclGroupEnd (which returns once the work is queued). Groups
 * nest; communicator creation and window registration may be grouped too.
 * NVIDIA declares these with an empty parameter list; (void) is the same
 * function type in C and C++. */
ncclResult_t  ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);

ncclResult_t  ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);

/* Ends the group like ncclGroupEnd but, instead of running its work, fills
 * simInfo with an estimate. Programs call it in place of ncclGroupEnd, so
 * the group is closed whatever it returns (cecoll has no performance model
 * and may answer ncclInvalidUsage). */
ncclResult_t  ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
