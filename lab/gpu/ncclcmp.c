/* ncclcmp: one program that times any library with NCCL 2.28's C API
 * (libcecoll.so, NVIDIA's libnccl.so.2) on the same GPUs, the same buffers
 * and the same harness, so their figures compare directly.
 *
 *   ncclcmp info    -L LIB
 *   ncclcmp ceil    [-N devs] [-b 1G] [-n 5]
 *   ncclcmp perf    -L LIB [-l NAME] [--ce] [-G [-K k]] [-N ranks] [-b 8] [-e 1G] [-f 8] [-s 8,64M,1G]
 *                   [-n 20] [-w 5] [-c 1] [-o allgather,alltoall,scatter,gather,sendrecv,broadcast]
 *                   [-r root] [-S 4G]
 *   ncclcmp overlap -L LIB [-l NAME] [--ce] [-N ranks] [-b 256M] [-M 8192] [-R 100]
 *                   [-o allgather|alltoall|scatter|gather|sendrecv|broadcast] [-r root] [-X]
 *   common: -W watchdog seconds per phase (default 180)
 *
 * The library is loaded with dlopen(LIB, RTLD_NOW|RTLD_LOCAL) and every
 * entry point is looked up with dlsym (both libraries export the same
 * names, so neither is linked); the types come from this repository's
 * include/nccl.h, which is NCCL 2.28's ABI. CUDA is reached the same way:
 * libcuda.so.1 (driver API, versioned *_v2 names where cuda.h maps to them)
 * and, for overlap, libcublas (CUBLAS_LIB, else libcublas.so.13/.12/plain,
 * else /usr/local/cuda/lib64). No CUDA header is needed: the few
 * prototypes and enum values used are declared below.
 *
 * Threads: one pthread per rank; rank r runs on device r % deviceCount
 * with that device's primary context current (the context the CUDA
 * runtime, cuBLAS, NCCL and cecoll all use) and one non-blocking stream.
 * Rank threads call ncclCommInitRank (ncclCommInitRankConfig with
 * CTAPolicy = NCCL_CTA_POLICY_ZERO for --ce) on an id from ncclGetUniqueId,
 * and pthread barriers separate the phases.
 *
 * Modes
 *  info     the library's ncclGetVersion, and whether libcuda/libcublas load.
 *  ceil     copy ceilings with cuMemcpyDtoDAsync (copy engines), -b bytes
 *           (default 1 GiB), best of -n: local device-to-device on device 0;
 *           device 0 -> 1 pushed (stream on 0) and pulled (stream on 1);
 *           0 <-> 1 both ways at once; every ordered pair at once (each
 *           device pushing to every other on its own stream; aggregate and
 *           per-device GB/s, host-timed). Peer access is enabled first.
 *  perf     for each operation of -o (default all six) and per-rank chunk
 *           sizes -b..-e by -f (or the list -s, e.g. 8,4K,1M,64M,256M,1G).
 *           sendrecv is nccl-tests' sendrecv_perf: each rank, in one
 *           ncclGroupStart/End, sends its chunk to rank+1 and receives
 *           rank-1's (mod n); broadcast is ncclBroadcast from root -r, out
 *           of place (the harness has no in-place runs).
 *           -c 1 checks the data once per size (each block filled with its
 *           own 32-bit value, outputs poisoned; blocks over 2 MiB are
 *           checked at their first and last MiB); -w warm-up calls; then -n
 *           timed calls, events on each rank's stream; time = the slowest
 *           rank's mean per call. -G: each rank captures -K calls on its
 *           stream (thread-local capture mode) into a graph and the replays
 *           are timed (time per call = per replay / K). --ce: buffers from
 *           ncclMemAlloc, each registered with ncclCommWindowRegister(...,
 *           NCCL_WIN_COLL_SYMMETRIC), CTAPolicy ZERO (NCCL's copy-engine
 *           path, which covers the four collectives only: sendrecv and
 *           broadcast run NCCL's usual kernels under that config); default:
 *           cuMemAlloc buffers, default config. -S caps the bytes of one
 *           size's timed loop (iterations x size; at least 5 iterations are
 *           kept).
 *           Size column, as nccl-tests: n*chunk (a rank's larger buffer) for
 *           the four collectives, chunk for sendrecv and broadcast;
 *           algbw = size/time; busbw = algbw*(n-1)/n for the four and
 *           algbw for sendrecv and broadcast (nccl-tests' factors). One
 *           machine-readable line per row:
 *           ROW lib= path= mode= coll= n= bytes=<chunk> size= iters= us= algbw= busbw= wrong=
 *  overlap  a bf16 GEMM (cublasGemmEx, M x M x M, fp32 accumulate) on a
 *           separate stream of every device that hosts a rank, -R times,
 *           timed with events: alone; while every rank loops the operation
 *           of -o (default allgather; called as perf calls it) of -b bytes
 *           per rank on its own stream; and while every rank instead loops
 *           an SM copy (cublasScopy) of the same bytes along the same
 *           pairs (its block of a plain cuMemAlloc buffer on the peer
 *           device, peer access enabled): every peer for allgather and
 *           alltoall, rank+1 for sendrecv, root to every rank for scatter
 *           and broadcast, every rank to root for gather. The loops keep at most 3 calls in flight per
 *           rank and all ranks stop after the same call (rank 0 decides
 *           between host barriers). Prints per device and
 *           OVERLAP lib= path= coll= n= bytes= M= alone_ms= with_coll_ms=
 *               with_smcopy_ms= coll_slowdown= smcopy_slowdown=
 *               coll_busbw= coll_alone_busbw= smcopy_busbw=
 *           (ms per GEMM, averaged over devices; slowdown = with/alone;
 *           busbw with perf's factor for the operation).
 *           -X: the older spelling of -o sendrecv (the ring exchange).
 *
 * Every failure prints the call, the CUDA/cuBLAS code or NCCL's
 * ncclGetErrorString and ncclGetLastError, and exits 1 (2 for a bad
 * command line or a library that does not load). A watchdog (alarm) ends
 * the process with exit code 3 and the phase of every rank when a phase
 * takes more than -W seconds. Build:
 *   gcc -O2 -Wall -Wextra -I include -o build/gpu/ncclcmp lab/gpu/ncclcmp.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

/* ---- CUDA driver API (cuda.h, CUDA 12/13), declared by hand ---------------- */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef cudaStream_t CUstream; /* struct CUstream_st*, as in cuda.h */
typedef struct CUevent_st* CUevent;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 on LP64 */

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  CU_STREAM_NON_BLOCKING = 0x1,              /* CUstream_flags */
  CU_EVENT_DEFAULT = 0x0,                    /* timing enabled */
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,   /* CUstreamCaptureMode: GLOBAL 0, THREAD_LOCAL 1, RELAXED 2 */
};

static struct {
  CUresult (*Init)(unsigned int flags);
  CUresult (*DriverGetVersion)(int* v);
  CUresult (*DeviceGetCount)(int* n);
  CUresult (*DeviceGet)(CUdevice* d, int ordinal);
  CUresult (*DeviceGetName)(char* name, int len, CUdevice d);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext* c, CUdevice d);
  CUresult (*CtxSetCurrent)(CUcontext c);
  CUresult (*CtxEnablePeerAccess)(CUcontext peer, unsigned int flags);
  CUresult (*DeviceCanAccessPeer)(int* can, CUdevice d, CUdevice peer);
  CUresult (*MemGetInfo)(size_t* freeB, size_t* totalB);
  CUresult (*StreamCreate)(CUstream* s, unsigned int flags);
  CUresult (*StreamDestroy)(CUstream s);
  CUresult (*StreamSynchronize)(CUstream s);
  CUresult (*MemAlloc)(CUdeviceptr* p, size_t bytes);
  CUresult (*MemFree)(CUdeviceptr p);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*MemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  CUresult (*MemsetD8Async)(CUdeviceptr p, unsigned char v, size_t n, CUstream s);
  CUresult (*MemsetD32Async)(CUdeviceptr p, unsigned int v, size_t n, CUstream s);
  CUresult (*EventCreate)(CUevent* e, unsigned int flags);
  CUresult (*EventDestroy)(CUevent e);
  CUresult (*EventRecord)(CUevent e, CUstream s);
  CUresult (*EventSynchronize)(CUevent e);
  CUresult (*EventElapsedTime)(float* ms, CUevent start, CUevent end);
  CUresult (*StreamBeginCapture)(CUstream s, int mode);
  CUresult (*StreamEndCapture)(CUstream s, CUgraph* g);
  CUresult (*GraphInstantiateWithFlags)(CUgraphExec* ge, CUgraph g, unsigned long long flags);
  CUresult (*GraphLaunch)(CUgraphExec ge, CUstream s);
  CUresult (*GraphExecDestroy)(CUgraphExec ge);
  CUresult (*GraphDestroy)(CUgraph g);
  CUresult (*GetErrorName)(CUresult r, const char** s);
  CUresult (*GetErrorString)(CUresult r, const char** s);
} cu;

/* ---- cuBLAS (cublas_api.h, cuBLAS 12/13), declared by hand ------------------- */

typedef struct cublasContext* cublasHandle_t;
typedef int cublasStatus_t; /* CUBLAS_STATUS_SUCCESS = 0 */
enum {
  CUBLAS_OP_N = 0,
  CUDA_R_16BF = 14,          /* cudaDataType_t; CUDA_R_16F = 2, CUDA_R_32F = 0 */
  CUBLAS_COMPUTE_32F = 68,   /* cublasComputeType_t */
  CUBLAS_GEMM_DEFAULT = -1,  /* cublasGemmAlgo_t */
};

static struct {
  cublasStatus_t (*Create)(cublasHandle_t* h);
  cublasStatus_t (*Destroy)(cublasHandle_t h);
  cublasStatus_t (*SetStream)(cublasHandle_t h, cudaStream_t s);
  cublasStatus_t (*GemmEx)(cublasHandle_t h, int transa, int transb, int m, int n, int k, const void* alpha,
                           const void* A, int Atype, int lda, const void* B, int Btype, int ldb,
                           const void* beta, void* C, int Ctype, int ldc, int computeType, int algo);
  cublasStatus_t (*Scopy)(cublasHandle_t h, int n, const float* x, int incx, float* y, int incy);
  const char* (*GetStatusString)(cublasStatus_t s);
} cb;

/* ---- The NCCL API under test ------------------------------------------------ */

static struct {
  ncclResult_t (*GetVersion)(int*);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  const char* (*GetErrorString)(ncclResult_t);
  const char* (*GetLastError)(ncclComm_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*AlltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Scatter)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Gather)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  ncclResult_t (*MemAlloc)(void**, size_t);
  ncclResult_t (*MemFree)(void*);
  ncclResult_t (*CommWindowRegister)(ncclComm_t, void*, size_t, ncclWindow_t*, int);
  ncclResult_t (*CommWindowDeregister)(ncclComm_t, ncclWindow_t);
} nc;

/* One dlsym table entry: the name, an older name tried when the first is
 * missing (0 if none), where the pointer goes, and whether it may be absent. */
struct sym {
  const char* name;
  const char* fallback;
  void* slot;
  int optional;
};

/* ---- Options and shared state ---------------------------------------------- */

enum { MAXR = 64, MAXD = 16, RING = 3 };
enum { C_ALLGATHER, C_ALLTOALL, C_SCATTER, C_GATHER, C_SENDRECV, C_BROADCAST, NCOLL };
static const char* kColl[NCOLL] = {"allgather", "alltoall", "scatter", "gather", "sendrecv", "broadcast"};
static const char* kTitle[NCOLL] = {"AllGather", "AlltoAll", "Scatter", "Gather", "SendRecv", "Broadcast"};

static const char* mode;
static const char* libPath;
static char libName[64];
static int ceMode, graphMode, graphK = 1, check = 1, root;
static int nranks, ndev, usedDevs, iters = 20, warmup = 5, ceilReps = 5, mmReps = 100, mmSize = 8192;
static size_t minBytes = 8, maxBytes = (size_t)1 << 30, factor = 8, capBytes = (size_t)4 << 30;
static size_t ceilBytes = (size_t)1 << 30, ovBytes = (size_t)256 << 20;
static int ovColl = C_ALLGATHER; /* overlap -o: the looping operation (-X: sendrecv) */
static int collMask = (1 << NCOLL) - 1;
static size_t sizeList[64];
static int nSizes; /* -s; 0: -b..-e by -f */
static int wdSecs = 180;
static CUcontext ctxs[MAXD];
static ncclUniqueId uid;
static pthread_barrier_t rbar; /* rank threads */
static pthread_barrier_t gbar; /* overlap: rank threads, matmul threads and main */

struct rank {
  int rank, dev;
  pthread_t th;
  ncclComm_t comm;
  cudaStream_t s;
  CUdeviceptr send, recv; /* n*maxChunk bytes each */
  size_t bufBytes;
  ncclWindow_t sw, rw;
  CUevent e0, e1, ring[RING];
  unsigned char* host; /* check staging */
  /* per case results, read by rank 0 after a barrier */
  double us;
  long wrong;
  long calls;
  /* overlap */
  cublasHandle_t blas;
  CUdeviceptr smdst; /* n*ovBytes on this rank's device: peers write their block */
  double ovUs[3];    /* per call: coll alone, coll during GEMM, SM copy during GEMM */
};
static struct rank R[MAXR];

/* ---- Watchdog ---------------------------------------------------------------- */

static char wdPhase[MAXR + MAXD + 1][112];

static void wdHandler(int sig) {
  (void)sig;
  static const char head[] = "\nncclcmp: WATCHDOG: a phase ran past its limit (-W); where each thread was:\n";
  ssize_t w = write(2, head, sizeof head - 1);
  for (int i = 0; i < MAXR + MAXD + 1; i++) {
    size_t n = strnlen(wdPhase[i], sizeof wdPhase[i]);
    if (n == 0) continue;
    w = write(2, "  ", 2);
    w = write(2, wdPhase[i], n);
    w = write(2, "\n", 1);
  }
  (void)w;
  _exit(3);
}

/* phase records what thread slot is doing, for the watchdog's message. */
static void phase(int slot, const char* fmt, ...) {
  char buf[112];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(wdPhase[slot], buf, sizeof buf);
}

/* arm restarts the phase clock. */
static void arm(void) { alarm((unsigned)wdSecs); }

static void installWatchdog(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = wdHandler;
  /* SA_ONSTACK: the signal may land on a thread of cecoll's Go runtime,
   * which requires handlers installed by C code to run on the alternate
   * signal stack. */
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
}

/* ---- Errors ------------------------------------------------------------------ */

static void die(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ncclcmp: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stdout);
  fflush(stderr);
  _exit(code); /* never exit(): other threads are inside the libraries */
}

static void cuCheck(CUresult r, const char* call, int line) {
  if (r == CUDA_SUCCESS) return;
  const char *name = "?", *str = "?";
  if (cu.GetErrorName) cu.GetErrorName(r, &name);
  if (cu.GetErrorString) cu.GetErrorString(r, &str);
  die(1, "line %d: %s failed: CUresult %d %s (%s)", line, call, r, name ? name : "?", str ? str : "?");
}
#define CU(call) cuCheck((call), #call, __LINE__)

static void ncCheck(ncclResult_t r, const char* call, ncclComm_t comm, int line) {
  if (r == ncclSuccess) return;
  const char* s = nc.GetErrorString ? nc.GetErrorString(r) : "?";
  const char* last = nc.GetLastError ? nc.GetLastError(comm) : NULL;
  die(1, "line %d: %s failed: ncclResult_t %d (%s); ncclGetLastError: %s", line, call, (int)r, s ? s : "?",
      last && *last ? last : "(empty)");
}
#define NC(call, comm) ncCheck((call), #call, (comm), __LINE__)

static void cbCheck(cublasStatus_t r, const char* call, int line) {
  if (r == 0) return;
  const char* s = cb.GetStatusString ? cb.GetStatusString(r) : NULL;
  die(1, "line %d: %s failed: cublasStatus_t %d (%s)", line, call, r, s ? s : "?");
}
#define CB(call) cbCheck((call), #call, __LINE__)

/* ---- Loading ----------------------------------------------------------------- */

/* resolve fills every entry of tab from handle h; a missing required one
 * ends the program naming it. */
static void resolve(void* h, const char* lib, const struct sym* tab, int n) {
  for (int i = 0; i < n; i++) {
    void* p = dlsym(h, tab[i].name);
    if (!p && tab[i].fallback) p = dlsym(h, tab[i].fallback);
    if (!p && !tab[i].optional) die(2, "%s has no symbol %s", lib, tab[i].name);
    memcpy(tab[i].slot, &p, sizeof p);
  }
}

#define S(field, name) {name, NULL, &field, 0}
#define SF(field, name, old) {name, old, &field, 0}
#define SO(field, name) {name, NULL, &field, 1}

static const char* loadCuda(int fatal) {
  static char err[512];
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(err, sizeof err, "cannot load libcuda.so.1 (%s): is the NVIDIA driver installed and its directory "
             "(e.g. /usr/local/nvidia/lib64) on LD_LIBRARY_PATH?", dlerror());
    if (fatal) die(2, "%s", err);
    return err;
  }
  /* The versioned names are what cuda.h's macros resolve to (a plain name
   * can be an older ABI); cuEventElapsedTime_v2 is CUDA 12.8+. */
  const struct sym tab[] = {
      S(cu.Init, "cuInit"),
      S(cu.DriverGetVersion, "cuDriverGetVersion"),
      S(cu.DeviceGetCount, "cuDeviceGetCount"),
      S(cu.DeviceGet, "cuDeviceGet"),
      S(cu.DeviceGetName, "cuDeviceGetName"),
      S(cu.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
      S(cu.CtxSetCurrent, "cuCtxSetCurrent"),
      S(cu.CtxEnablePeerAccess, "cuCtxEnablePeerAccess"),
      S(cu.DeviceCanAccessPeer, "cuDeviceCanAccessPeer"),
      S(cu.MemGetInfo, "cuMemGetInfo_v2"),
      S(cu.StreamCreate, "cuStreamCreate"),
      S(cu.StreamDestroy, "cuStreamDestroy_v2"),
      S(cu.StreamSynchronize, "cuStreamSynchronize"),
      S(cu.MemAlloc, "cuMemAlloc_v2"),
      S(cu.MemFree, "cuMemFree_v2"),
      S(cu.MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
      S(cu.MemcpyDtoH, "cuMemcpyDtoH_v2"),
      S(cu.MemsetD8Async, "cuMemsetD8Async"),
      S(cu.MemsetD32Async, "cuMemsetD32Async"),
      S(cu.EventCreate, "cuEventCreate"),
      S(cu.EventDestroy, "cuEventDestroy_v2"),
      S(cu.EventRecord, "cuEventRecord"),
      S(cu.EventSynchronize, "cuEventSynchronize"),
      SF(cu.EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
      S(cu.StreamBeginCapture, "cuStreamBeginCapture_v2"),
      S(cu.StreamEndCapture, "cuStreamEndCapture"),
      S(cu.GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags"),
      S(cu.GraphLaunch, "cuGraphLaunch"),
      S(cu.GraphExecDestroy, "cuGraphExecDestroy"),
      S(cu.GraphDestroy, "cuGraphDestroy"),
      S(cu.GetErrorName, "cuGetErrorName"),
      S(cu.GetErrorString, "cuGetErrorString"),
  };
  resolve(h, "libcuda.so.1", tab, (int)(sizeof tab / sizeof tab[0]));
  return NULL;
}

/* loadCublas tries CUBLAS_LIB, the sonames on the loader's path, then the
 * toolkit's directory. Returns the path that loaded, or NULL (why in err). */
static const char* loadCublas(char* err, size_t errLen) {
  static char used[512];
  const char* env = getenv("CUBLAS_LIB");
  const char* cands[] = {env, "libcublas.so.13", "libcublas.so.12", "libcublas.so",
                         "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12",
                         "/usr/local/cuda/lib64/libcublas.so"};
  void* h = NULL;
  err[0] = 0;
  for (size_t i = 0; i < sizeof cands / sizeof cands[0] && !h; i++) {
    if (!cands[i] || !*cands[i]) continue;
    h = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      snprintf(used, sizeof used, "%s", cands[i]);
    } else if (i == 0 || !err[0]) {
      snprintf(err, errLen, "%s", dlerror()); /* CUBLAS_LIB's failure, else the first one */
    }
  }
  if (!h) return NULL;
  const struct sym tab[] = {
      S(cb.Create, "cublasCreate_v2"),
      S(cb.Destroy, "cublasDestroy_v2"),
      S(cb.SetStream, "cublasSetStream_v2"),
      S(cb.GemmEx, "cublasGemmEx"),
      S(cb.Scopy, "cublasScopy_v2"),
      SO(cb.GetStatusString, "cublasGetStatusString"),
  };
  resolve(h, used, tab, (int)(sizeof tab / sizeof tab[0]));
  return used;
}

static void loadNccl(void) {
  void* h = dlopen(libPath, RTLD_NOW | RTLD_LOCAL);
  if (!h) die(2, "cannot load %s: %s", libPath, dlerror());
  const struct sym tab[] = {
      S(nc.GetVersion, "ncclGetVersion"),
      S(nc.GetUniqueId, "ncclGetUniqueId"),
      S(nc.CommInitRank, "ncclCommInitRank"),
      S(nc.CommInitRankConfig, "ncclCommInitRankConfig"),
      SO(nc.CommFinalize, "ncclCommFinalize"),
      S(nc.CommDestroy, "ncclCommDestroy"),
      S(nc.GetErrorString, "ncclGetErrorString"),
      S(nc.GetLastError, "ncclGetLastError"),
      S(nc.AllGather, "ncclAllGather"),
      S(nc.AlltoAll, "ncclAlltoAll"),
      S(nc.Scatter, "ncclScatter"),
      S(nc.Gather, "ncclGather"),
      SO(nc.Send, "ncclSend"),
      SO(nc.Recv, "ncclRecv"),
      SO(nc.Broadcast, "ncclBroadcast"),
      S(nc.GroupStart, "ncclGroupStart"),
      S(nc.GroupEnd, "ncclGroupEnd"),
      S(nc.MemAlloc, "ncclMemAlloc"),
      S(nc.MemFree, "ncclMemFree"),
      S(nc.CommWindowRegister, "ncclCommWindowRegister"),
      S(nc.CommWindowDeregister, "ncclCommWindowDeregister"),
  };
  resolve(h, libPath, tab, (int)(sizeof tab / sizeof tab[0]));
  if (!libName[0]) {
    const char* b = strrchr(libPath, '/');
    b = b ? b + 1 : libPath;
    snprintf(libName, sizeof libName, "%s", strstr(b, "cecoll") ? "cecoll" : strstr(b, "nccl") ? "nccl" : b);
  }
}

/* ---- Small helpers ----------------------------------------------------------- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t parseSize(const char* s) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || v < 0) die(2, "bad size %s", s);
  switch (*end) {
    case 'K': case 'k': v *= 1024; end++; break;
    case 'M': case 'm': v *= 1024.0 * 1024; end++; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; end++; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end) die(2, "bad size %s", s);
  return (size_t)v;
}

static int parseInt(const char* s, int lo, int hi, const char* what) {
  char* end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) die(2, "bad %s %s (want %d..%d)", what, s, lo, hi);
  return (int)v;
}

static void useDev(int d) { CU(cu.CtxSetCurrent(ctxs[d])); }

static float elapsed(CUevent a, CUevent b) {
  float ms = 0;
  CU(cu.EventElapsedTime(&ms, a, b));
  return ms;
}

static void bar(pthread_barrier_t* b) { pthread_barrier_wait(b); }

/* enablePeers lets every used device reach every other (cuMemAlloc memory;
 * ncclMemAlloc memory is mapped for peers by the library). Idempotent. */
static void enablePeers(int quiet) {
  for (int i = 0; i < usedDevs; i++) {
    useDev(i);
    for (int j = 0; j < usedDevs; j++) {
      if (i == j) continue;
      int can = 0;
      CU(cu.DeviceCanAccessPeer(&can, i, j));
      if (!can) {
        if (!quiet) printf("# warning: device %d cannot access device %d directly (copies are staged)\n", i, j);
        continue;
      }
      CUresult r = cu.CtxEnablePeerAccess(ctxs[j], 0);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) CU(r);
    }
  }
}

static void initCuda(int wantDevs) {
  CU(cu.Init(0));
  int v = 0;
  CU(cu.DriverGetVersion(&v));
  CU(cu.DeviceGetCount(&ndev));
  if (ndev < 1) die(1, "no CUDA device");
  if (ndev > MAXD) ndev = MAXD;
  usedDevs = wantDevs < ndev ? wantDevs : ndev;
  for (int d = 0; d < usedDevs; d++) {
    CUdevice dev;
    CU(cu.DeviceGet(&dev, d));
    CU(cu.DevicePrimaryCtxRetain(&ctxs[d], dev));
  }
  char name[128] = "?";
  CUdevice d0;
  CU(cu.DeviceGet(&d0, 0));
  CU(cu.DeviceGetName(name, sizeof name, d0));
  printf("# ncclcmp %s: driver %d, %d device(s) (%s), using %d\n", mode, v, ndev, name, usedDevs);
}

/* ---- Data patterns (check) ---------------------------------------------------- */

/* Each block (source rank src, block blk) gets its own value; salt changes
 * per case so stale data from an earlier case is caught. Never the poison. */
static uint32_t pat32(int src, int blk, unsigned salt) {
  uint32_t v = (uint32_t)(src + 1) * 0x01000193u ^ (uint32_t)(blk + 1) * 0x9E3779B1u ^ (salt + 1) * 0x85EBCA6Bu;
  return v == 0xA5A5A5A5u ? v ^ 1u : v;
}
static uint8_t pat8(int src, int blk, unsigned salt) {
  uint8_t b = (uint8_t)(src * 37 + blk * 11 + salt * 3 + 1);
  return b == 0xA5 ? 0x5A : b;
}

static void fill(CUdeviceptr p, size_t bytes, int src, int blk, unsigned salt, CUstream s) {
  if (bytes == 0) return;
  if (bytes % 4 == 0 && p % 4 == 0)
    CU(cu.MemsetD32Async(p, pat32(src, blk, salt), bytes / 4, s));
  else
    CU(cu.MemsetD8Async(p, pat8(src, blk, salt), bytes, s));
}

/* verify counts the wrong bytes of one block (checked whole up to 2 MiB,
 * else its first and last MiB) through the rank's host staging buffer. */
enum { HOSTBUF = 1 << 20 };
static long verify(struct rank* me, CUdeviceptr p, size_t bytes, int src, int blk, unsigned salt) {
  long wrong = 0;
  int words = bytes % 4 == 0 && p % 4 == 0;
  uint32_t w = pat32(src, blk, salt);
  uint8_t want[4];
  if (words) {
    memcpy(want, &w, 4); /* little-endian: the byte order the device wrote */
  } else {
    memset(want, pat8(src, blk, salt), 4);
  }
  size_t spans[2][2] = {{0, bytes}, {0, 0}};
  if (bytes > 2 * (size_t)HOSTBUF) {
    spans[0][1] = HOSTBUF;
    spans[1][0] = bytes - HOSTBUF;
    spans[1][1] = HOSTBUF;
  }
  for (int k = 0; k < 2; k++) {
    size_t off = spans[k][0], len = spans[k][1];
    while (len > 0) {
      size_t n = len < HOSTBUF ? len : HOSTBUF;
      CU(cu.MemcpyDtoH(me->host, p + off, n));
      for (size_t i = 0; i < n; i++) wrong += me->host[i] != want[(off + i) % 4];
      off += n;
      len -= n;
    }
  }
  return wrong;
}

/* ---- Collectives ---------------------------------------------------------------- */

/* The size column, as nccl-tests: a rank's larger buffer (n*chunk) for the
 * four; the bytes sent per rank (chunk) for sendrecv and broadcast. */
static double collSize(int c, size_t chunk) {
  return c == C_SENDRECV || c == C_BROADCAST ? (double)chunk : (double)nranks * (double)chunk;
}

/* busbw = algbw * this: nccl-tests' factors ((n-1)/n for the four, 1 for
 * sendrecv and broadcast). */
static double busFactor(int c) {
  return c == C_SENDRECV || c == C_BROADCAST ? 1.0 : (double)(nranks - 1) / nranks;
}

static double busbw(int c, double us, size_t chunk) {
  if (us <= 0) return 0;
  return collSize(c, chunk) / (us * 1e-6) / 1e9 * busFactor(c);
}

/* call queues one operation c of chunk bytes per rank. sendrecv is
 * nccl-tests' sendrecv_perf: in one group, a send to rank+1 and a receive
 * from rank-1 (mod n). broadcast is out of place from root (-r). */
static void call(struct rank* me, int c, size_t chunk) {
  void* s = (void*)(uintptr_t)me->send;
  void* d = (void*)(uintptr_t)me->recv;
  int n = nranks, r = me->rank;
  switch (c) {
    case C_ALLGATHER: NC(nc.AllGather(s, d, chunk, ncclUint8, me->comm, me->s), me->comm); break;
    case C_ALLTOALL: NC(nc.AlltoAll(s, d, chunk, ncclUint8, me->comm, me->s), me->comm); break;
    case C_SCATTER: NC(nc.Scatter(s, d, chunk, ncclUint8, root, me->comm, me->s), me->comm); break;
    case C_GATHER: NC(nc.Gather(s, d, chunk, ncclUint8, root, me->comm, me->s), me->comm); break;
    case C_SENDRECV:
      NC(nc.GroupStart(), me->comm);
      NC(nc.Send(s, chunk, ncclUint8, (r + 1) % n, me->comm, me->s), me->comm);
      NC(nc.Recv(d, chunk, ncclUint8, (r + n - 1) % n, me->comm, me->s), me->comm);
      NC(nc.GroupEnd(), me->comm);
      break;
    case C_BROADCAST: NC(nc.Broadcast(s, d, chunk, ncclUint8, root, me->comm, me->s), me->comm); break;
  }
}

/* prepare fills the inputs and poisons the outputs of collective c. */
static void prepare(struct rank* me, int c, size_t chunk, unsigned salt) {
  int n = nranks, r = me->rank;
  switch (c) {
    case C_ALLGATHER: fill(me->send, chunk, r, 0, salt, me->s); break;
    case C_ALLTOALL: for (int j = 0; j < n; j++) fill(me->send + (size_t)j * chunk, chunk, r, j, salt, me->s); break;
    case C_SCATTER:
      if (r == root)
        for (int j = 0; j < n; j++) fill(me->send + (size_t)j * chunk, chunk, root, j, salt, me->s);
      break;
    case C_GATHER: fill(me->send, chunk, r, 0, salt, me->s); break;
    case C_SENDRECV: fill(me->send, chunk, r, 0, salt, me->s); break;
    case C_BROADCAST:
      if (r == root) fill(me->send, chunk, root, 0, salt, me->s);
      break;
  }
  size_t out = (c == C_SCATTER || c == C_SENDRECV || c == C_BROADCAST) ? chunk : (size_t)n * chunk;
  if (out) CU(cu.MemsetD8Async(me->recv, 0xA5, out, me->s));
  CU(cu.StreamSynchronize(me->s));
}

static long checkResult(struct rank* me, int c, size_t chunk, unsigned salt) {
  int n = nranks, r = me->rank;
  long wrong = 0;
  CU(cu.StreamSynchronize(me->s));
  switch (c) {
    case C_ALLGATHER:
      for (int i = 0; i < n; i++) wrong += verify(me, me->recv + (size_t)i * chunk, chunk, i, 0, salt);
      break;
    case C_ALLTOALL:
      for (int i = 0; i < n; i++) wrong += verify(me, me->recv + (size_t)i * chunk, chunk, i, r, salt);
      break;
    case C_SCATTER: wrong += verify(me, me->recv, chunk, root, r, salt); break;
    case C_GATHER:
      if (r == root)
        for (int i = 0; i < n; i++) wrong += verify(me, me->recv + (size_t)i * chunk, chunk, i, 0, salt);
      break;
    case C_SENDRECV: wrong += verify(me, me->recv, chunk, (r + n - 1) % n, 0, salt); break; /* rank-1's chunk */
    case C_BROADCAST: wrong += verify(me, me->recv, chunk, root, 0, salt); break;        /* root's, on every rank */
  }
  return wrong;
}

/* ---- Rank set-up and teardown ------------------------------------------------------ */

static void rankSetup(struct rank* me, size_t chunkMax) {
  int slot = me->rank;
  useDev(me->dev);
  CU(cu.StreamCreate(&me->s, CU_STREAM_NON_BLOCKING));
  CU(cu.EventCreate(&me->e0, CU_EVENT_DEFAULT));
  CU(cu.EventCreate(&me->e1, CU_EVENT_DEFAULT));
  for (int i = 0; i < RING; i++) CU(cu.EventCreate(&me->ring[i], CU_EVENT_DEFAULT));
  me->host = malloc(HOSTBUF);
  if (!me->host) die(1, "out of host memory");
  phase(slot, "rank %d: comm init (%s)", me->rank, ceMode ? "ncclCommInitRankConfig, CTAPolicy ZERO" : "ncclCommInitRank");
  if (ceMode) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    NC(nc.CommInitRankConfig(&me->comm, nranks, uid, me->rank, &cfg), NULL);
  } else {
    NC(nc.CommInitRank(&me->comm, nranks, uid, me->rank), NULL);
  }
  /* Both buffers hold n chunks; rounded to 2 MiB (the VMM granularity). */
  size_t bytes = (size_t)nranks * chunkMax;
  bytes = (bytes + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
  me->bufBytes = bytes;
  phase(slot, "rank %d: allocate 2 x %zu bytes", me->rank, bytes);
  if (ceMode) {
    void *s = NULL, *d = NULL;
    NC(nc.MemAlloc(&s, bytes), me->comm);
    NC(nc.MemAlloc(&d, bytes), me->comm);
    me->send = (CUdeviceptr)(uintptr_t)s;
    me->recv = (CUdeviceptr)(uintptr_t)d;
    phase(slot, "rank %d: ncclCommWindowRegister (symmetric, collective)", me->rank);
    NC(nc.CommWindowRegister(me->comm, s, bytes, &me->sw, NCCL_WIN_COLL_SYMMETRIC), me->comm);
    NC(nc.CommWindowRegister(me->comm, d, bytes, &me->rw, NCCL_WIN_COLL_SYMMETRIC), me->comm);
  } else {
    CU(cu.MemAlloc(&me->send, bytes));
    CU(cu.MemAlloc(&me->recv, bytes));
  }
  CU(cu.MemsetD8Async(me->send, 0, bytes, me->s));
  CU(cu.MemsetD8Async(me->recv, 0, bytes, me->s));
  CU(cu.StreamSynchronize(me->s));
}

static void rankTeardown(struct rank* me) {
  phase(me->rank, "rank %d: teardown", me->rank);
  useDev(me->dev);
  CU(cu.StreamSynchronize(me->s));
  if (ceMode) {
    NC(nc.CommWindowDeregister(me->comm, me->sw), me->comm);
    NC(nc.CommWindowDeregister(me->comm, me->rw), me->comm);
  }
  if (nc.CommFinalize) NC(nc.CommFinalize(me->comm), me->comm);
  NC(nc.CommDestroy(me->comm), NULL);
  if (ceMode) {
    NC(nc.MemFree((void*)(uintptr_t)me->send), NULL);
    NC(nc.MemFree((void*)(uintptr_t)me->recv), NULL);
  } else {
    CU(cu.MemFree(me->send));
    CU(cu.MemFree(me->recv));
  }
  for (int i = 0; i < RING; i++) CU(cu.EventDestroy(me->ring[i]));
  CU(cu.EventDestroy(me->e0));
  CU(cu.EventDestroy(me->e1));
  CU(cu.StreamDestroy(me->s));
  free(me->host);
  phase(me->rank, "rank %d: done", me->rank);
}

/* ---- perf ---------------------------------------------------------------------------- */

static void perfCase(struct rank* me, int c, size_t chunk, unsigned salt) {
  int r = me->rank;
  const char* cn = kColl[c];
  int it = iters;
  size_t per = (size_t)collSize(c, chunk);
  if (capBytes && per > 0 && (size_t)it * per > capBytes) {
    it = (int)(capBytes / per);
    if (it < 5) it = iters < 5 ? iters : 5;
  }
  int wu = warmup < it ? warmup : it;
  CUgraph g = NULL;
  CUgraphExec ge = NULL;

  bar(&rbar);
  if (r == 0) arm();
  if (graphMode) {
    /* One eager call first: lazy connection set-up (NCCL connects peers at
     * a communicator's first collective) then happens outside the capture. */
    phase(r, "rank %d: %s %zu B: eager call before capture", r, cn, chunk);
    call(me, c, chunk);
    CU(cu.StreamSynchronize(me->s));
    bar(&rbar);
    phase(r, "rank %d: %s %zu B: capture %d call(s)", r, cn, chunk, graphK);
    CU(cu.StreamBeginCapture(me->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int k = 0; k < graphK; k++) call(me, c, chunk);
    CU(cu.StreamEndCapture(me->s, &g));
    CU(cu.GraphInstantiateWithFlags(&ge, g, 0));
  }
  me->wrong = 0;
  if (check) {
    phase(r, "rank %d: %s %zu B: check", r, cn, chunk);
    prepare(me, c, chunk, salt);
    bar(&rbar); /* every rank's inputs are in place before anyone reads them */
    if (graphMode)
      CU(cu.GraphLaunch(ge, me->s));
    else
      call(me, c, chunk);
    CU(cu.StreamSynchronize(me->s));
    bar(&rbar); /* no rank's later calls overwrite data another is still checking */
    me->wrong = checkResult(me, c, chunk, salt);
    bar(&rbar);
  }
  phase(r, "rank %d: %s %zu B: warm-up %d", r, cn, chunk, wu);
  for (int i = 0; i < wu; i++) {
    if (graphMode)
      CU(cu.GraphLaunch(ge, me->s));
    else
      call(me, c, chunk);
  }
  CU(cu.StreamSynchronize(me->s));
  bar(&rbar);
  phase(r, "rank %d: %s %zu B: %d timed", r, cn, chunk, it);
  CU(cu.EventRecord(me->e0, me->s));
  for (int i = 0; i < it; i++) {
    if (graphMode)
      CU(cu.GraphLaunch(ge, me->s));
    else
      call(me, c, chunk);
  }
  CU(cu.EventRecord(me->e1, me->s));
  CU(cu.EventSynchronize(me->e1));
  double calls = graphMode ? (double)it * graphK : (double)it;
  me->us = 1000.0 * elapsed(me->e0, me->e1) / calls;
  me->calls = it;
  if (graphMode) {
    CU(cu.GraphExecDestroy(ge));
    CU(cu.GraphDestroy(g));
  }
  bar(&rbar);
  if (r == 0) {
    double us = 0;
    long wrong = 0;
    for (int i = 0; i < nranks; i++) {
      if (R[i].us > us) us = R[i].us;
      wrong += R[i].wrong;
    }
    double size = collSize(c, chunk);
    double algbw = us > 0 ? size / (us * 1e-6) / 1e9 : 0;
    double bus = algbw * busFactor(c);
    char wr[24];
    if (check)
      snprintf(wr, sizeof wr, "%ld", wrong);
    else
      snprintf(wr, sizeof wr, "-");
    printf("  %-9s %12zu %13.0f %6d %12.2f %10.2f %10.2f %8s\n", cn, chunk, size, it, us, algbw, bus, wr);
    printf("ROW lib=%s path=%s mode=%s coll=%s n=%d bytes=%zu size=%.0f iters=%d us=%.3f algbw=%.3f busbw=%.3f "
           "wrong=%s\n",
           libName, ceMode ? "ce" : "default", graphMode ? "graph" : "eager", cn, nranks, chunk, size, it, us, algbw,
           bus, wr);
    fflush(stdout);
  }
}

static void* perfRank(void* arg) {
  struct rank* me = arg;
  rankSetup(me, maxBytes);
  bar(&rbar);
  unsigned salt = 0;
  for (int c = 0; c < NCOLL; c++) {
    if (!(collMask & (1 << c))) continue;
    if (me->rank == 0) {
      printf("#\n# %s\n#  %-9s %12s %13s %6s %12s %10s %10s %8s\n", kColl[c], "coll", "chunk(B)", "size(B)",
             "iters", "time(us)", "algbw", "busbw", "#wrong");
      fflush(stdout);
    }
    for (int i = 0; i < nSizes; i++) perfCase(me, c, sizeList[i], salt++);
  }
  bar(&rbar);
  if (me->rank == 0) arm();
  rankTeardown(me);
  return NULL;
}

/* ---- overlap ---------------------------------------------------------------------------- */

static atomic_int ovStop;     /* set when every GEMM thread finished its timed run */
static atomic_long ovDone0;   /* calls rank 0 has seen complete in the current loop */
static atomic_int ovMmDone;
static volatile int ovGo;     /* rank 0's decision for the next call, read after a barrier */
static double mmMs[MAXD][3];  /* per device: ms per GEMM alone, with coll, with SM copy */

enum { W_COLL = 0, W_SMCOPY = 1 };

/* smPair says whether the SM copy of rank src sends its chunk to rank dst
 * (src != dst): the transfers operation c makes directly. AllGather,
 * AlltoAll: every pair; sendrecv: to rank+1; Scatter, Broadcast: from
 * root to every rank; Gather: from every rank to root. */
static int smPair(int c, int src, int dst) {
  switch (c) {
    case C_SENDRECV: return dst == (src + 1) % nranks;
    case C_SCATTER:
    case C_BROADCAST: return src == root;
    case C_GATHER: return dst == root;
    default: return 1;
  }
}

/* work queues one unit of the loop: operation ovColl of ovBytes per rank
 * (as perf calls it), or the SM copy of the same bytes: this rank's chunk
 * into its block of the smdst of each rank smPair names. */
static void work(struct rank* me, int kind) {
  if (kind == W_COLL) {
    call(me, ovColl, ovBytes);
    return;
  }
  int nfl = (int)(ovBytes / 4);
  for (int j = 0; j < nranks; j++) {
    if (j == me->rank || !smPair(ovColl, me->rank, j)) continue;
    float* x = (float*)(uintptr_t)me->send;
    float* y = (float*)(uintptr_t)(R[j].smdst + (size_t)me->rank * ovBytes);
    CB(cb.Scopy(me->blas, nfl, x, 1, y, 1));
  }
}

/* loop runs work until fixed calls are done (fixed > 0) or ovStop is set;
 * every rank stops after the same call, as rank 0 decides between
 * barriers, and at most RING calls are in flight. Returns the calls made
 * and sets *usPer to the mean time per call. */
static long loop(struct rank* me, int kind, long fixed, double* usPer) {
  long i;
  CU(cu.EventRecord(me->e0, me->s));
  for (i = 0;; i++) {
    if (me->rank == 0) ovGo = fixed > 0 ? i < fixed : !atomic_load(&ovStop);
    bar(&rbar);
    int go = ovGo;
    bar(&rbar);
    if (!go) break;
    if (i >= RING) {
      CU(cu.EventSynchronize(me->ring[i % RING]));
      if (me->rank == 0) atomic_store(&ovDone0, i - RING + 1);
    }
    work(me, kind);
    CU(cu.EventRecord(me->ring[i % RING], me->s));
  }
  CU(cu.EventRecord(me->e1, me->s));
  CU(cu.EventSynchronize(me->e1));
  *usPer = i > 0 ? 1000.0 * elapsed(me->e0, me->e1) / i : 0;
  return i;
}

static void* ovRank(void* arg) {
  struct rank* me = arg;
  int r = me->rank;
  rankSetup(me, ovBytes);
  CB(cb.Create(&me->blas));
  CB(cb.SetStream(me->blas, me->s));
  CU(cu.MemAlloc(&me->smdst, (size_t)nranks * ovBytes));
  bar(&gbar); /* set-up done */

  bar(&gbar);
  phase(r, "rank %d: %s alone", r, kTitle[ovColl]);
  long n0 = loop(me, W_COLL, 3, &me->ovUs[0]); /* warm-up */
  n0 = loop(me, W_COLL, 20, &me->ovUs[0]);
  (void)n0;
  bar(&gbar);

  bar(&gbar); /* GEMM alone: idle */
  bar(&gbar);

  bar(&gbar);
  phase(r, "rank %d: %s during GEMM", r, kTitle[ovColl]);
  me->calls = loop(me, W_COLL, 0, &me->ovUs[1]);
  bar(&gbar);

  bar(&gbar);
  phase(r, "rank %d: SM copy during GEMM", r);
  loop(me, W_SMCOPY, 0, &me->ovUs[2]);
  bar(&gbar);

  useDev(me->dev);
  CU(cu.MemFree(me->smdst));
  CB(cb.Destroy(me->blas));
  rankTeardown(me);
  return NULL;
}

struct mm {
  int dev;
  pthread_t th;
  cudaStream_t s;
  cublasHandle_t h;
  CUdeviceptr a, b, c;
  CUevent e0, e1;
};
static struct mm MM[MAXD];

static double gemmRun(struct mm* m, int reps) {
  const float alpha = 1.0f, beta = 0.0f;
  int M = mmSize;
  void *A = (void*)(uintptr_t)m->a, *B = (void*)(uintptr_t)m->b, *C = (void*)(uintptr_t)m->c;
  for (int i = 0; i < 2; i++)
    CB(cb.GemmEx(m->h, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &alpha, A, CUDA_R_16BF, M, B, CUDA_R_16BF, M, &beta, C,
                 CUDA_R_16BF, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CU(cu.StreamSynchronize(m->s));
  CU(cu.EventRecord(m->e0, m->s));
  for (int i = 0; i < reps; i++)
    CB(cb.GemmEx(m->h, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &alpha, A, CUDA_R_16BF, M, B, CUDA_R_16BF, M, &beta, C,
                 CUDA_R_16BF, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CU(cu.EventRecord(m->e1, m->s));
  CU(cu.EventSynchronize(m->e1));
  return elapsed(m->e0, m->e1) / reps;
}

/* waitLoopRunning returns once rank 0 has seen 2 calls of the current loop
 * complete, so the GEMMs start with the loop in full swing. */
static void waitLoopRunning(void) {
  struct timespec ts = {0, 100 * 1000};
  while (atomic_load(&ovDone0) < 2) nanosleep(&ts, NULL);
}

static void* ovMm(void* arg) {
  struct mm* m = arg;
  int slot = MAXR + m->dev;
  size_t bytes = (size_t)mmSize * mmSize * 2;
  useDev(m->dev);
  CU(cu.StreamCreate(&m->s, CU_STREAM_NON_BLOCKING));
  CU(cu.EventCreate(&m->e0, CU_EVENT_DEFAULT));
  CU(cu.EventCreate(&m->e1, CU_EVENT_DEFAULT));
  CB(cb.Create(&m->h));
  CB(cb.SetStream(m->h, m->s));
  CU(cu.MemAlloc(&m->a, bytes));
  CU(cu.MemAlloc(&m->b, bytes));
  CU(cu.MemAlloc(&m->c, bytes));
  /* bf16 0.0078125 (0x3C00) everywhere: finite sums, no denormals */
  CU(cu.MemsetD32Async(m->a, 0x3C003C00u, bytes / 4, m->s));
  CU(cu.MemsetD32Async(m->b, 0x3C003C00u, bytes / 4, m->s));
  CU(cu.StreamSynchronize(m->s));
  bar(&gbar);

  bar(&gbar); /* the operation alone: idle */
  bar(&gbar);

  bar(&gbar);
  phase(slot, "device %d: GEMM alone", m->dev);
  mmMs[m->dev][0] = gemmRun(m, mmReps);
  bar(&gbar);

  for (int k = 1; k <= 2; k++) {
    bar(&gbar);
    phase(slot, "device %d: GEMM with %s: waiting for the loop", m->dev, k == 1 ? kTitle[ovColl] : "SM copy");
    waitLoopRunning();
    phase(slot, "device %d: GEMM with %s", m->dev, k == 1 ? kTitle[ovColl] : "SM copy");
    mmMs[m->dev][k] = gemmRun(m, mmReps);
    if (atomic_fetch_add(&ovMmDone, 1) + 1 == usedDevs) atomic_store(&ovStop, 1);
    bar(&gbar);
  }
  CU(cu.MemFree(m->a));
  CU(cu.MemFree(m->b));
  CU(cu.MemFree(m->c));
  CB(cb.Destroy(m->h));
  CU(cu.EventDestroy(m->e0));
  CU(cu.EventDestroy(m->e1));
  CU(cu.StreamDestroy(m->s));
  phase(slot, "device %d: done", m->dev);
  return NULL;
}

/* ovMain is the main thread's part: it resets the loop state between
 * phases and restarts the watchdog. */
static void ovMain(void) {
  bar(&gbar); /* set-up done */
  for (int p = 1; p <= 4; p++) {
    atomic_store(&ovStop, 0);
    atomic_store(&ovDone0, 0);
    atomic_store(&ovMmDone, 0);
    if (p == 1) phase(MAXR + MAXD, "main: phase %s alone", kTitle[ovColl]);
    if (p == 2) phase(MAXR + MAXD, "main: phase GEMM alone");
    if (p == 3) phase(MAXR + MAXD, "main: phase GEMM with %s", kTitle[ovColl]);
    if (p == 4) phase(MAXR + MAXD, "main: phase GEMM with SM copy");
    arm();
    bar(&gbar); /* start */
    bar(&gbar); /* end */
  }
  arm();
}

/* ---- ceil ---------------------------------------------------------------------------------- */

static double copyOnce(int dev, CUstream s, CUevent e0, CUevent e1, CUdeviceptr dst, CUdeviceptr src, size_t b) {
  useDev(dev);
  CU(cu.EventRecord(e0, s));
  CU(cu.MemcpyDtoDAsync(dst, src, b, s));
  CU(cu.EventRecord(e1, s));
  CU(cu.EventSynchronize(e1));
  return elapsed(e0, e1);
}

static void ceilMode(void) {
  size_t b = ceilBytes;
  int n = usedDevs;
  CUdeviceptr src[MAXD], dst[MAXD][MAXD], loc = 0;
  CUstream st[MAXD][MAXD];
  CUevent e0[MAXD], e1[MAXD];
  phase(0, "ceil: allocate and enable peer access");
  arm();
  enablePeers(0);
  for (int i = 0; i < n; i++) {
    useDev(i);
    CU(cu.MemAlloc(&src[i], b));
    CU(cu.MemsetD8Async(src[i], (unsigned char)(i + 1), b, NULL));
    CU(cu.EventCreate(&e0[i], CU_EVENT_DEFAULT));
    CU(cu.EventCreate(&e1[i], CU_EVENT_DEFAULT));
    for (int j = 0; j < n; j++) CU(cu.StreamCreate(&st[i][j], CU_STREAM_NON_BLOCKING));
  }
  for (int j = 0; j < n; j++) { /* dst[i][j]: device j's buffer that device i writes */
    useDev(j);
    for (int i = 0; i < n; i++) {
      dst[i][j] = 0;
      if (i != j) CU(cu.MemAlloc(&dst[i][j], b));
    }
  }
  useDev(0);
  CU(cu.MemAlloc(&loc, b));
  for (int i = 0; i < n; i++) {
    useDev(i);
    CU(cu.StreamSynchronize(NULL));
  }
  printf("# copies of %zu bytes with cuMemcpyDtoDAsync, best of %d (GB = 1e9 bytes)\n", b, ceilReps);

  phase(0, "ceil: local copy");
  double best = 1e30;
  for (int k = 0; k <= ceilReps; k++) {
    double ms = copyOnce(0, st[0][0], e0[0], e1[0], loc, src[0], b);
    if (k > 0 && ms < best) best = ms; /* the first is a warm-up */
  }
  printf("CEIL kind=local dev=0 bytes=%zu GBps=%.1f\n", b, b / (best * 1e-3) / 1e9);

  if (n >= 2) {
    phase(0, "ceil: 0 -> 1 push");
    best = 1e30;
    for (int k = 0; k <= ceilReps; k++) {
      double ms = copyOnce(0, st[0][1], e0[0], e1[0], dst[0][1], src[0], b);
      if (k > 0 && ms < best) best = ms;
    }
    printf("CEIL kind=push src=0 dst=1 bytes=%zu GBps=%.1f\n", b, b / (best * 1e-3) / 1e9);
    phase(0, "ceil: 0 -> 1 pull");
    best = 1e30;
    for (int k = 0; k <= ceilReps; k++) {
      double ms = copyOnce(1, st[1][0], e0[1], e1[1], dst[0][1], src[0], b);
      if (k > 0 && ms < best) best = ms;
    }
    printf("CEIL kind=pull src=0 dst=1 bytes=%zu GBps=%.1f\n", b, b / (best * 1e-3) / 1e9);

    /* Host-timed: events of different devices cannot be compared. */
    phase(0, "ceil: 0 <-> 1 both ways");
    best = 1e30;
    for (int k = 0; k <= ceilReps; k++) {
      double t0 = now();
      useDev(0);
      CU(cu.MemcpyDtoDAsync(dst[0][1], src[0], b, st[0][1]));
      useDev(1);
      CU(cu.MemcpyDtoDAsync(dst[1][0], src[1], b, st[1][0]));
      useDev(0);
      CU(cu.StreamSynchronize(st[0][1]));
      useDev(1);
      CU(cu.StreamSynchronize(st[1][0]));
      double t = now() - t0;
      if (k > 0 && t < best) best = t;
    }
    printf("CEIL kind=bidir devs=0,1 bytes=%zu aggregate_GBps=%.1f per_direction_GBps=%.1f\n", b, 2.0 * b / best / 1e9,
           b / best / 1e9);

    phase(0, "ceil: all %d x %d ordered pairs at once", n, n - 1);
    best = 1e30;
    for (int k = 0; k <= ceilReps; k++) {
      double t0 = now();
      for (int i = 0; i < n; i++) {
        useDev(i);
        for (int d = 1; d < n; d++) { /* rotated order: not everyone starts on the same target */
          int j = (i + d) % n;
          CU(cu.MemcpyDtoDAsync(dst[i][j], src[i], b, st[i][j]));
        }
      }
      for (int i = 0; i < n; i++) {
        useDev(i);
        for (int j = 0; j < n; j++)
          if (j != i) CU(cu.StreamSynchronize(st[i][j]));
      }
      double t = now() - t0;
      if (k > 0 && t < best) best = t;
    }
    double agg = (double)n * (n - 1) * b / best / 1e9;
    printf("CEIL kind=allpairs n=%d bytes=%zu aggregate_GBps=%.1f per_gpu_GBps=%.1f\n", n, b, agg, agg / n);
  } else {
    printf("# one device: no peer ceilings\n");
  }
  for (int i = 0; i < n; i++) {
    useDev(i);
    CU(cu.MemFree(src[i]));
    for (int j = 0; j < n; j++) {
      if (dst[j][i]) CU(cu.MemFree(dst[j][i]));
      CU(cu.StreamDestroy(st[i][j]));
    }
    CU(cu.EventDestroy(e0[i]));
    CU(cu.EventDestroy(e1[i]));
  }
  useDev(0);
  CU(cu.MemFree(loc));
}

/* ---- main -------------------------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: ncclcmp info -L LIB\n"
          "       ncclcmp ceil [-N devices] [-b 1G] [-n 5]\n"
          "       ncclcmp perf -L LIB [-l NAME] [--ce] [-G [-K calls]] [-N ranks] [-b 8] [-e 1G] [-f 8] [-n 20]\n"
          "                    [-w 5] [-c 0|1] [-o allgather,alltoall,scatter,gather,sendrecv,broadcast|all]\n"
          "                    [-r root] [-S 4G] [-s 8,4K,64M,...: sizes instead of -b/-e/-f]\n"
          "       ncclcmp overlap -L LIB [-l NAME] [--ce] [-N ranks] [-b 256M] [-M 8192] [-R 100]\n"
          "                    [-o allgather|alltoall|scatter|gather|sendrecv|broadcast] [-r root] [-X: -o sendrecv]\n"
          "       common: -W seconds (watchdog per phase, default 180)\n");
  _exit(2);
}

static void parseColls(const char* s) {
  if (strcmp(s, "all") == 0) {
    collMask = (1 << NCOLL) - 1;
    return;
  }
  collMask = 0;
  while (*s) {
    size_t m = strcspn(s, ",");
    int found = 0;
    for (int c = 0; c < NCOLL; c++)
      if (strlen(kColl[c]) == m && strncmp(s, kColl[c], m) == 0) collMask |= 1 << c, found = 1;
    if (!found) die(2, "unknown collective in -o: %.*s", (int)m, s);
    s += m + (s[m] == ',');
  }
}

static void parseList(const char* s) {
  char buf[64];
  nSizes = 0;
  while (*s) {
    size_t m = strcspn(s, ",");
    if (m == 0 || m >= sizeof buf || nSizes == 64) die(2, "bad -s list");
    memcpy(buf, s, m);
    buf[m] = 0;
    sizeList[nSizes] = parseSize(buf);
    if (sizeList[nSizes] == 0) die(2, "-s: sizes must be positive");
    nSizes++;
    s += m + (s[m] == ',');
  }
  if (nSizes == 0) die(2, "empty -s list");
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Several ranks on one GPU park one stream each on flag waits; with the
   * driver's 8 hardware queues per context, 8 of them stall the GPU (cecoll
   * refuses such a communicator). This program makes the contexts before
   * either library loads, so it asks for the most queues itself, unless
   * the caller chose a number. */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  if (argc < 2 || argv[1][0] == '-') usage();
  mode = argv[1];
  int isInfo = !strcmp(mode, "info"), isCeil = !strcmp(mode, "ceil"), isPerf = !strcmp(mode, "perf"),
      isOv = !strcmp(mode, "overlap");
  if (!isInfo && !isCeil && !isPerf && !isOv) usage();
  int bSet = 0, oSet = 0, xSet = 0;
  static const struct option longs[] = {{"ce", no_argument, NULL, 'C'}, {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
  optind = 2;
  int o;
  while ((o = getopt_long(argc, argv, "L:l:CGK:N:b:e:f:n:w:c:o:r:s:S:M:R:W:Xh", longs, NULL)) != -1) {
    switch (o) {
      case 'L': libPath = optarg; break;
      case 'l': snprintf(libName, sizeof libName, "%s", optarg); break;
      case 'C': ceMode = 1; break;
      case 'G': graphMode = 1; break;
      case 'K': graphK = parseInt(optarg, 1, 1000, "-K"); break;
      case 'N': nranks = parseInt(optarg, 1, MAXR, "-N"); break;
      case 'b': minBytes = ceilBytes = ovBytes = parseSize(optarg); bSet = 1; break;
      case 'e': maxBytes = parseSize(optarg); break;
      case 'f': factor = (size_t)parseInt(optarg, 2, 1 << 20, "-f"); break;
      case 'n': iters = ceilReps = parseInt(optarg, 1, 1 << 24, "-n"); break;
      case 'w': warmup = parseInt(optarg, 0, 1 << 24, "-w"); break;
      case 'c': check = parseInt(optarg, 0, 1, "-c"); break;
      case 'o': parseColls(optarg); oSet = 1; break;
      case 'r': root = parseInt(optarg, 0, MAXR - 1, "-r"); break;
      case 's': parseList(optarg); break;
      case 'S': capBytes = parseSize(optarg); break;
      case 'M': mmSize = parseInt(optarg, 64, 65536, "-M"); break;
      case 'R': mmReps = parseInt(optarg, 1, 1 << 20, "-R"); break;
      case 'W': wdSecs = parseInt(optarg, 1, 86400, "-W"); break;
      case 'X': xSet = 1; break;
      default: usage();
    }
  }
  if (optind != argc) usage();
  if (isCeil && !bSet) ceilBytes = (size_t)1 << 30;
  if (isOv && !bSet) ovBytes = (size_t)256 << 20;
  if (isOv) { /* one looping operation: -o NAME, -X = -o sendrecv, default allgather */
    if (oSet) {
      if (collMask & (collMask - 1)) die(2, "overlap: -o takes one operation (%s|%s|%s|%s|%s|%s)", kColl[0],
                                         kColl[1], kColl[2], kColl[3], kColl[4], kColl[5]);
      ovColl = __builtin_ctz((unsigned)collMask);
    }
    if (xSet) {
      if (oSet && ovColl != C_SENDRECV) die(2, "overlap: -X is -o sendrecv; it contradicts -o %s", kColl[ovColl]);
      ovColl = C_SENDRECV;
    }
  }
  if (isPerf && !bSet) minBytes = 8;

  if (!isCeil) {
    if (!libPath) die(2, "%s needs -L LIB (libcecoll.so or libnccl.so.2)", mode);
    loadNccl();
    int v = 0;
    NC(nc.GetVersion(&v), NULL);
    printf("# library %s (%s): ncclGetVersion %d\n", libName, libPath, v);
  }
  /* ncclSend, ncclRecv and ncclBroadcast are looked up as optional: only
   * the operations that need them fail on a library without them. */
  for (int c = 0; c < NCOLL && (isPerf || isOv); c++) {
    if (isPerf ? !(collMask & (1 << c)) : c != ovColl) continue;
    if (c == C_SENDRECV && (!nc.Send || !nc.Recv)) die(2, "sendrecv needs ncclSend and ncclRecv, which %s lacks", libPath);
    if (c == C_BROADCAST && !nc.Broadcast) die(2, "broadcast needs ncclBroadcast, which %s lacks", libPath);
  }
  if (isInfo) {
    const char* e = loadCuda(0);
    printf("# libcuda.so.1: %s\n", e ? e : "loads, every symbol found");
    char err[512];
    const char* used = loadCublas(err, sizeof err);
    printf("# libcublas: %s%s\n", used ? used : "not found: ", used ? "" : err);
    return 0;
  }
  loadCuda(1);
  const char* blasErr = NULL;
  char err[512];
  if (isOv) {
    const char* used = loadCublas(err, sizeof err);
    if (!used) blasErr = err;
    else printf("# cuBLAS: %s\n", used);
  }
  if (blasErr) die(2, "overlap needs cuBLAS: set CUBLAS_LIB to libcublas.so.*; last loader error: %s", blasErr);
  installWatchdog();
  phase(MAXR + MAXD, "main: CUDA init");
  arm();
  /* Only the devices that host a rank get a context (-N, default all). */
  initCuda(nranks ? nranks : MAXD);
  if (nranks == 0) nranks = ndev;

  if (isCeil) {
    ceilMode();
    return 0;
  }
  if (nranks < 1) die(2, "need at least one rank");
  if (root >= nranks) die(2, "-r %d: only %d ranks", root, nranks);
  if (isPerf && nSizes == 0) {
    if (factor < 2) die(2, "-f must be at least 2");
    if (minBytes == 0) minBytes = 1;
    if (maxBytes < minBytes) die(2, "-e below -b");
    for (size_t b = minBytes; b <= maxBytes && nSizes < 64; b *= factor) sizeList[nSizes++] = b;
  }
  if (isPerf) {
    minBytes = maxBytes = sizeList[0];
    for (int i = 0; i < nSizes; i++) {
      if (sizeList[i] > maxBytes) maxBytes = sizeList[i];
      if (sizeList[i] < minBytes) minBytes = sizeList[i];
    }
  }
  if (isOv && (ovBytes == 0 || ovBytes % 4 || ovBytes / 4 > INT_MAX))
    die(2, "overlap: -b must be a positive multiple of 4 bytes below 8 GiB (cublasScopy's int count)");

  phase(MAXR + MAXD, "main: ncclGetUniqueId");
  NC(nc.GetUniqueId(&uid), NULL);
  for (int r = 0; r < nranks; r++) {
    R[r].rank = r;
    R[r].dev = r % ndev;
  }
  pthread_barrier_init(&rbar, NULL, (unsigned)nranks);
  phase(MAXR + MAXD, "main: waiting for the rank threads");

  if (isPerf) {
    printf("# perf: lib %s, path %s (%s), mode %s%s, %d ranks on %d device(s), chunks %zu..%zu, iters %d "
           "(capped at %zu bytes per size), warm-up %d, check %d, root %d, %d sizes\n",
           libName, ceMode ? "ce" : "default",
           ceMode ? "ncclMemAlloc + symmetric windows + CTAPolicy ZERO" : "cuMemAlloc buffers, default config",
           graphMode ? "graph" : "eager", graphMode && graphK > 1 ? " (K calls per graph)" : "", nranks, usedDevs,
           minBytes, maxBytes, iters, capBytes, warmup, check, root, nSizes);
    printf("# per rank: 2 buffers of %zu bytes\n", (size_t)nranks * maxBytes);
    for (int r = 0; r < nranks; r++)
      if (pthread_create(&R[r].th, NULL, perfRank, &R[r])) die(1, "pthread_create failed");
    for (int r = 0; r < nranks; r++) pthread_join(R[r].th, NULL);
    alarm(0);
    printf("# done\n");
    return 0;
  }

  /* overlap */
  enablePeers(0);
  printf("# overlap: lib %s, path %s, %d ranks on %d device(s), %s%s %zu bytes per rank; GEMM bf16 %dx%dx%d "
         "x %d per phase on every device\n",
         libName, ceMode ? "ce" : "default", nranks, usedDevs, kTitle[ovColl],
         ovColl == C_SENDRECV ? " (send to rank+1, receive from rank-1)" : "", ovBytes, mmSize, mmSize, mmSize,
         mmReps);
  pthread_barrier_init(&gbar, NULL, (unsigned)(nranks + usedDevs + 1));
  for (int r = 0; r < nranks; r++)
    if (pthread_create(&R[r].th, NULL, ovRank, &R[r])) die(1, "pthread_create failed");
  for (int d = 0; d < usedDevs; d++) {
    MM[d].dev = d;
    if (pthread_create(&MM[d].th, NULL, ovMm, &MM[d])) die(1, "pthread_create failed");
  }
  ovMain();
  for (int d = 0; d < usedDevs; d++) pthread_join(MM[d].th, NULL);
  for (int r = 0; r < nranks; r++) pthread_join(R[r].th, NULL);
  alarm(0);

  double alone = 0, wc = 0, ws = 0, tflops = 2.0 * mmSize * (double)mmSize * mmSize;
  for (int d = 0; d < usedDevs; d++) {
    printf("OVERLAPDEV dev=%d alone_ms=%.3f with_coll_ms=%.3f with_smcopy_ms=%.3f alone_TFLOPS=%.1f\n", d,
           mmMs[d][0], mmMs[d][1], mmMs[d][2], tflops / (mmMs[d][0] * 1e-3) / 1e12);
    alone += mmMs[d][0] / usedDevs;
    wc += mmMs[d][1] / usedDevs;
    ws += mmMs[d][2] / usedDevs;
  }
  double usAlone = 0, usColl = 0, usSm = 0;
  long calls = R[0].calls;
  for (int r = 0; r < nranks; r++) {
    if (R[r].ovUs[0] > usAlone) usAlone = R[r].ovUs[0];
    if (R[r].ovUs[1] > usColl) usColl = R[r].ovUs[1];
    if (R[r].ovUs[2] > usSm) usSm = R[r].ovUs[2];
  }
  /* The SM copy moves the same bytes as the operation: report it alike. */
  printf("OVERLAP lib=%s path=%s coll=%s n=%d bytes=%zu M=%d alone_ms=%.3f with_coll_ms=%.3f with_smcopy_ms=%.3f "
         "coll_slowdown=%.3f smcopy_slowdown=%.3f coll_busbw=%.1f coll_alone_busbw=%.1f smcopy_busbw=%.1f "
         "coll_calls=%ld\n",
         libName, ceMode ? "ce" : "default", kColl[ovColl], nranks, ovBytes, mmSize, alone, wc, ws,
         alone > 0 ? wc / alone : 0, alone > 0 ? ws / alone : 0, busbw(ovColl, usColl, ovBytes),
         busbw(ovColl, usAlone, ovBytes), busbw(ovColl, usSm, ovBytes), calls);
  return 0;
}
