/* hostcost: the host cost of a collective through cecoll against the cost
 * of making the same driver calls directly from C (the target: at most 1.2x),
 * both sides timed in one process on one GPU.
 *
 *   (a) cecoll: ncclGroupStart; N x ncclAllGather (zero-copy windows from
 *       ncclMemAlloc + ncclCommWindowRegister); ncclGroupEnd  = 1 collective
 *   (b) C reference: for each of the N ranks, the driver calls cecoll's
 *       AllGather makes: cuStreamIsCapturing; a flag sync on the ready
 *       slots; cuMemcpyBatchAsync_v2 of N copies (its own chunk included;
 *       one attribute: srcAccessOrder STREAM, PREFER_OVERLAP_WITH_COMPUTE);
 *       a flag sync on the complete slots; cuEventRecord. The flag sync
 *       follows CECOLL_SYNC and CECOLL_FLAG_WRITE with cecoll's rules (see
 *       sync_batch): all pairs or star, flags by write-value (announce and
 *       wait and reset in one cuStreamBatchMemOp_v2) or by 4-byte
 *       cuMemcpyAsync from a device word set by a write-value.
 * Both use the same N non-blocking streams on the primary context and the
 * same device buffers (the reference's flags come from cuMemAlloc).
 *
 * Timing: rounds of one burst of K collectives of (a), an untimed
 * cuCtxSynchronize, one burst of K of (b), an untimed cuCtxSynchronize; the
 * figure is host time per collective (N rank-calls), median over rounds.
 * Before timing, one collective of each is checked byte for byte.
 *
 * Everything is loaded with dlopen (libcuda.so.1 and libcecoll.so), with
 * the prototypes declared here by hand (layouts as in cuda.h, which
 * internal/hip/nvidia/symbols.go quotes), so it
 * builds anywhere with: gcc -O2 -Wall -o hostcost hostcost.c -ldl -lpthread
 *
 *   hostcost [-l build/libcecoll.so] [-n 4] [-s 8,65536] [-r 30] [-k 64] [-t 60] [-x] [-F c|v|r]
 *
 * -x: the reference alone (no libcecoll; buffers from cuMemAlloc), e.g.
 * with a mock libcuda.so.1 to check the flag protocol and the data.
 *
 * -F c|v|r: where the reference's flags live: one cuMemAlloc (c, the
 * default), one ncclMemAlloc (v), or one ncclMemAlloc per rank (r), which
 * is how cecoll's sync windows are laid out. On the H200 the driver's
 * cuStreamBatchMemOp_v2 took about 0.8 us longer per call on VMM memory
 * (v, r) than on cuMemAlloc memory (c), whoever called it.
 *
 * Output: "HOSTCOST bytes=B ranks=N cecoll_us=.. c_us=.. ratio=.." per size
 * (us per collective, median), plus VERIFY / INFO lines.
 *
 * Under lab/h200/cushim.c (a counting libcuda.so.1 first on
 * LD_LIBRARY_PATH, found by its cushim_* symbols in the libcuda handle) the
 * timed bursts of each side count into their own shim account (the untimed
 * syncs, checks and warm-ups into account 0), and per size and side it also
 * prints "HOSTSPLIT bytes=B side=cecoll|c calls_per_coll=..
 * driver_us_per_coll=.. outside_us_per_coll=.. wall_us_per_coll=.." (means
 * over all timed bursts; outside = wall - time inside the real driver) and
 * the shim's per-symbol "CUSHIM bytes=B side=.." block on stderr.
 *
 * Exit 0 on success, 1 on a failed call or check, 2 when there is no GPU or
 * library, 3 when the watchdog fired (a hang). Never calls cuMulticast*. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- Driver API, declared by hand ---------------------------------------- */
typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUevent;
typedef unsigned long long CUdeviceptr;

/* CUstreamBatchMemOpParams: a 48-byte union (gpu-abi.md A.1). */
typedef union {
  uint32_t operation;
  struct {
    uint32_t operation;
    uint32_t pad0;
    CUdeviceptr address;
    uint64_t value; /* value (u32, low half) / value64 */
    uint32_t flags;
    uint32_t pad1;
    CUdeviceptr alias;
  } op;
  uint64_t pad[6];
} CUstreamBatchMemOpParams;
_Static_assert(sizeof(CUstreamBatchMemOpParams) == 48, "CUstreamBatchMemOpParams is 48 bytes");

/* CUmemcpyAttributes: 24 bytes (gpu-abi.md A.2). */
typedef struct {
  int type, id;
} CUmemLocation;
typedef struct {
  uint32_t srcAccessOrder;
  CUmemLocation srcLocHint, dstLocHint;
  uint32_t flags;
} CUmemcpyAttributes;
_Static_assert(sizeof(CUmemcpyAttributes) == 24, "CUmemcpyAttributes is 24 bytes");

enum {
  CU_STREAM_NON_BLOCKING = 1,
  CU_EVENT_DISABLE_TIMING = 2,
  CU_STREAM_MEM_OP_WAIT_VALUE_32 = 1,
  CU_STREAM_MEM_OP_WRITE_VALUE_32 = 2,
  CU_STREAM_WAIT_VALUE_GEQ = 0,
  CU_STREAM_WRITE_VALUE_DEFAULT = 0,
  CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 1,
  CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE = 1,
};

static struct {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)(void);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamIsCapturing)(CUstream, int*);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*StreamBatchMemOp)(CUstream, unsigned, CUstreamBatchMemOpParams*, unsigned);
  /* CUDA 13 ABI (no failIdx); NULL where the driver lacks it. */
  CUresult (*MemcpyBatchAsync)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*, size_t*, size_t,
                               CUstream);
  CUresult (*GetErrorString)(CUresult, const char**);
} cu;

/* cushim.c's controls; all NULL under the real driver. */
static struct {
  int (*account)(int);
  int (*mark)(const char*);
  int (*totals)(unsigned long long*, unsigned long long*);
  const char* (*real)(void);
} shim;
enum { ACCT_OTHER = 0, ACCT_CECOLL = 1, ACCT_C = 2 };

/* ---- NCCL / cecoll API, declared by hand (include/nccl.h) ---------------- */
typedef int ncclResult_t;
typedef void* ncclComm_t;
typedef void* ncclWindow_t;
enum { ncclUint8 = 1, NCCL_WIN_COLL_SYMMETRIC = 1 };

static struct {
  ncclResult_t (*CommInitAll)(ncclComm_t*, int, const int*);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  ncclResult_t (*AllGather)(const void*, void*, size_t, int, ncclComm_t, void* /* cudaStream_t */);
  ncclResult_t (*MemAlloc)(void**, size_t);
  ncclResult_t (*MemFree)(void*);
  ncclResult_t (*CommWindowRegister)(ncclComm_t, void*, size_t, ncclWindow_t*, int);
  ncclResult_t (*CommWindowDeregister)(ncclComm_t, ncclWindow_t);
  const char* (*GetErrorString)(ncclResult_t);
  const char* (*GetLastError)(ncclComm_t);
  ncclResult_t (*GetBackend)(const char**);
} nc;

/* ---- Helpers --------------------------------------------------------------- */
static void cu_fail(const char* what, CUresult r, int line) {
  const char* s = NULL;
  if (cu.GetErrorString) cu.GetErrorString(r, &s);
  fprintf(stderr, "hostcost:%d: %s failed: %d (%s)\n", line, what, r, s ? s : "?");
  exit(1);
}
#define CU(x)                               \
  do {                                      \
    CUresult r_ = (x);                      \
    if (r_ != 0) cu_fail(#x, r_, __LINE__); \
  } while (0)
#define NC(x)                                                                                          \
  do {                                                                                                 \
    ncclResult_t r_ = (x);                                                                             \
    if (r_ != 0) {                                                                                     \
      fprintf(stderr, "hostcost:%d: %s failed: %s (%s)\n", __LINE__, #x, nc.GetErrorString(r_),         \
              nc.GetLastError(NULL));                                                                  \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

static void* sym(void* h, const char* lib, const char* name, int required) {
  void* p = dlsym(h, name);
  if (!p && required) {
    fprintf(stderr, "hostcost: %s has no symbol %s\n", lib, name);
    exit(2);
  }
  return p;
}
#define SYM(h, lib, field, name) memcpy(&(field), &(void*){sym(h, lib, name, 1)}, sizeof(void*))
#define OPTSYM(h, lib, field, name) memcpy(&(field), &(void*){sym(h, lib, name, 0)}, sizeof(void*))

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "HOSTCOST watchdog: a call or a synchronize did not return in time (hang)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(3);
}

/* ---- State ------------------------------------------------------------------ */
enum { MAXN = 8, MAXSIZES = 8 };
static int n = 4;
static ncclComm_t comms[MAXN];
static CUstream streams[MAXN];
static CUevent events[MAXN];
static void *sendb[MAXN], *recvb[MAXN];
static ncclWindow_t sendw[MAXN], recvw[MAXN];
static CUdeviceptr flags; /* ready[r][p] then complete[r][p], u32 each */
static int useBatchCopy;
/* -F: where the reference's flags live. 'c' one cuMemAlloc (default);
 * 'v' one ncclMemAlloc (VMM, as cecoll's sync windows); 'r' one
 * ncclMemAlloc per owner rank (ready[p] then complete[p] each), as cecoll's
 * windows are laid out. */
static char flagAlloc = 'c';
static void* flagsOwner[MAXN];

static CUdeviceptr slot(int complete, int owner, int from) {
  if (flagAlloc == 'r') return (CUdeviceptr)(uintptr_t)flagsOwner[owner] + 4 * ((size_t)complete * n + from);
  return flags + 4 * ((size_t)complete * n * n + (size_t)owner * n + from);
}

/* The flag-sync choices cecoll made for this run, read from the same
 * variables with the same rules (internal/ce: every rank here shares device
 * 0, so CECOLL_FLAG_WRITE=auto means copies; CECOLL_SYNC=auto means star
 * from 5 ranks up), so that both sides make the same driver calls. */
static int refStar, refCopy;
static CUdeviceptr words; /* rank r's u32 at words + 4r: the copies' source */

static void memop(CUstreamBatchMemOpParams* o, unsigned op, CUdeviceptr a, unsigned v) {
  memset(o, 0, sizeof *o);
  o->op.operation = op;
  o->op.address = a;
  o->op.value = v;
  o->op.flags = op == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? CU_STREAM_WAIT_VALUE_GEQ : CU_STREAM_WRITE_VALUE_DEFAULT;
}

static void submit(int r, CUstreamBatchMemOpParams* ops, int* k) {
  if (*k > 0) CU(cu.StreamBatchMemOp(streams[r], (unsigned)*k, ops, 0));
  *k = 0;
}

/* Rank r announces itself in array `complete` of rank `to`, or of every
 * peer when to < 0 (internal/ce announce): by queued write-values, or by
 * a write-value to its word (submitted) and 4-byte copies from it. */
static void announce(int r, int complete, int to, CUstreamBatchMemOpParams* ops, int* k) {
  if (!refCopy) {
    for (int p = 0; p < n; p++)
      if (p != r && (to < 0 || p == to)) memop(&ops[(*k)++], CU_STREAM_MEM_OP_WRITE_VALUE_32, slot(complete, p, r), 1);
    return;
  }
  memop(&ops[(*k)++], CU_STREAM_MEM_OP_WRITE_VALUE_32, words + 4 * (CUdeviceptr)r, 1);
  submit(r, ops, k);
  for (int p = 0; p < n; p++)
    if (p != r && (to < 0 || p == to)) CU(cu.MemcpyAsync(slot(complete, p, r), words + 4 * (CUdeviceptr)r, 4, streams[r]));
}

/* Rank r waits for slot `from` of its array (every peer's when from < 0),
 * then resets what it waited on, and submits (internal/ce await). A
 * constant 1 and resets, graph style, so it repeats without sequence
 * numbers. */
static void await_slots(int r, int complete, int from, CUstreamBatchMemOpParams* ops, int* k) {
  for (int p = 0; p < n; p++)
    if (p != r && (from < 0 || p == from)) memop(&ops[(*k)++], CU_STREAM_MEM_OP_WAIT_VALUE_32, slot(complete, r, p), 1);
  for (int p = 0; p < n; p++)
    if (p != r && (from < 0 || p == from)) memop(&ops[(*k)++], CU_STREAM_MEM_OP_WRITE_VALUE_32, slot(complete, r, p), 0);
  submit(r, ops, k);
}

/* One flag sync of rank r, as internal/ce sync issues it. */
static void sync_batch(int r, int complete) {
  CUstreamBatchMemOpParams ops[3 * MAXN];
  int k = 0;
  if (!refStar) { /* all pairs */
    announce(r, complete, -1, ops, &k);
    await_slots(r, complete, -1, ops, &k);
  } else if (r != 0) { /* star: arrive at rank 0, wait for its release */
    announce(r, complete, 0, ops, &k);
    await_slots(r, complete, 0, ops, &k);
  } else { /* star, rank 0: gather the arrivals, then release everyone */
    await_slots(0, complete, -1, ops, &k);
    announce(0, complete, -1, ops, &k);
    submit(0, ops, &k);
  }
}

static void ref_allgather(size_t bytes) {
  for (int r = 0; r < n; r++) {
    int capturing = 0;
    CU(cu.StreamIsCapturing(streams[r], &capturing));
    sync_batch(r, 0);
    CUdeviceptr dsts[MAXN], srcs[MAXN];
    size_t sizes[MAXN];
    for (int p = 0; p < n; p++) {
      dsts[p] = (CUdeviceptr)(uintptr_t)recvb[p] + (CUdeviceptr)r * bytes;
      srcs[p] = (CUdeviceptr)(uintptr_t)sendb[r];
      sizes[p] = bytes;
    }
    if (useBatchCopy) {
      CUmemcpyAttributes attr;
      size_t attrIdx = 0;
      memset(&attr, 0, sizeof attr);
      attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
      attr.flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
      CU(cu.MemcpyBatchAsync(dsts, srcs, sizes, (size_t)n, &attr, &attrIdx, 1, streams[r]));
    } else {
      for (int p = 0; p < n; p++) CU(cu.MemcpyAsync(dsts[p], srcs[p], sizes[p], streams[r]));
    }
    sync_batch(r, 1);
    CU(cu.EventRecord(events[r], streams[r]));
  }
}

static void cecoll_allgather(size_t bytes) {
  NC(nc.GroupStart());
  for (int r = 0; r < n; r++) NC(nc.AllGather(sendb[r], recvb[r], bytes, ncclUint8, comms[r], streams[r]));
  NC(nc.GroupEnd());
}

/* One collective on patterned inputs, then every output byte checked. */
static int verify(const char* name, void (*coll)(size_t), size_t bytes) {
  for (int r = 0; r < n; r++) {
    CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)sendb[r], (unsigned char)(0x11 * (r + 1)), bytes));
    CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)recvb[r], 0, bytes * n));
  }
  CU(cu.CtxSynchronize());
  coll(bytes);
  CU(cu.CtxSynchronize());
  unsigned char* h = malloc(bytes * n);
  long wrong = 0;
  for (int r = 0; r < n; r++) {
    CU(cu.MemcpyDtoH(h, (CUdeviceptr)(uintptr_t)recvb[r], bytes * n));
    for (size_t i = 0; i < bytes * n; i++)
      if (h[i] != (unsigned char)(0x11 * (i / bytes + 1))) wrong++;
  }
  free(h);
  printf("VERIFY %s bytes=%zu ranks=%d wrong=%ld %s\n", name, bytes, n, wrong, wrong ? "FAIL" : "ok");
  fflush(stdout);
  return wrong != 0;
}

/* acct: the shim account the burst counts into (ACCT_OTHER: not reported);
 * the synchronize after it always counts into ACCT_OTHER. */
static double burst_us(void (*coll)(size_t), size_t bytes, int k, int acct) {
  if (shim.account) shim.account(acct);
  double t0 = now_ns();
  for (int i = 0; i < k; i++) coll(bytes);
  double us = (now_ns() - t0) / 1e3 / k;
  if (shim.account) shim.account(ACCT_OTHER);
  CU(cu.CtxSynchronize());
  return us;
}

/* The shim's split of one side's timed bursts (us[] per collective, one per
 * round): calls and driver time from the shim, wall time from our own clock. */
static void hostsplit(size_t bytes, const char* side, int acct, const double* us, int rounds, int k) {
  if (!shim.mark) return;
  unsigned long long calls = 0, ns = 0;
  shim.account(acct);
  shim.totals(&calls, &ns);
  double colls = (double)rounds * k, wall = 0;
  for (int i = 0; i < rounds; i++) wall += us[i];
  wall /= rounds;
  char label[64];
  snprintf(label, sizeof label, "bytes=%zu side=%s", bytes, side);
  shim.mark(label); /* first: its wall_us would count our printing */
  shim.account(ACCT_OTHER);
  double drv = (double)ns / 1e3 / colls;
  printf("HOSTSPLIT bytes=%zu side=%s calls_per_coll=%.1f driver_us_per_coll=%.2f outside_us_per_coll=%.2f "
         "wall_us_per_coll=%.2f (means over %d bursts of %d; per rank-call %.1f calls, %.2f us in the driver, %.2f "
         "outside)\n",
         bytes, side, (double)calls / colls, drv, wall - drv, wall, rounds, k, (double)calls / colls / n, drv / n,
         (wall - drv) / n);
  fflush(stdout);
}

static void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [-l libcecoll.so] [-n ranks<=%d] [-s bytes,...] [-r rounds] [-k burst] [-t watchdog_s] [-x] [-F c|v|r]\n"
          "  -x: the C reference only (no libcecoll; buffers from cuMemAlloc)\n"
          "  -F: the reference's flags in one cuMemAlloc (c), one ncclMemAlloc (v), one ncclMemAlloc per rank (r)\n",
          prog, MAXN);
  exit(2);
}

int main(int argc, char** argv) {
  const char* libPath = "build/libcecoll.so";
  const char* sizesArg = "8,65536";
  int rounds = 30, k = 64, watchdog = 60, refOnly = 0, opt;
  while ((opt = getopt(argc, argv, "l:n:s:r:k:t:xF:")) != -1) {
    switch (opt) {
      case 'l': libPath = optarg; break;
      case 'n': n = atoi(optarg); break;
      case 's': sizesArg = optarg; break;
      case 'r': rounds = atoi(optarg); break;
      case 'k': k = atoi(optarg); break;
      case 't': watchdog = atoi(optarg); break;
      case 'x': refOnly = 1; break;
      case 'F': flagAlloc = optarg[0]; break;
      default: usage(argv[0]);
    }
  }
  size_t sizes[MAXSIZES], maxBytes = 0;
  int nsizes = 0;
  for (const char* s = sizesArg; *s && nsizes < MAXSIZES;) {
    char* end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || v == 0) usage(argv[0]);
    sizes[nsizes++] = (size_t)v;
    if (v > maxBytes) maxBytes = (size_t)v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') usage(argv[0]);
  }
  if (n < 2 || n > MAXN || rounds < 1 || k < 1 || nsizes == 0) usage(argv[0]);
  if (!strchr("cvr", flagAlloc) || (flagAlloc != 'c' && refOnly)) usage(argv[0]);
  /* SA_ONSTACK: the alarm may land on one of the Go runtime's threads. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  alarm((unsigned)watchdog);

  /* As the library would do itself (it only can before the first context):
   * parked wait-values need more than the default 8 hardware queues. */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);

  void* hc = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!hc) {
    fprintf(stderr, "hostcost: no NVIDIA driver here (dlopen libcuda.so.1: %s): nothing to measure\n", dlerror());
    return 2;
  }
  const char* L = "libcuda.so.1";
  SYM(hc, L, cu.Init, "cuInit");
  SYM(hc, L, cu.DriverGetVersion, "cuDriverGetVersion");
  SYM(hc, L, cu.DeviceGetCount, "cuDeviceGetCount");
  SYM(hc, L, cu.DeviceGet, "cuDeviceGet");
  SYM(hc, L, cu.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(hc, L, cu.CtxSetCurrent, "cuCtxSetCurrent");
  SYM(hc, L, cu.CtxSynchronize, "cuCtxSynchronize");
  SYM(hc, L, cu.StreamCreate, "cuStreamCreate");
  SYM(hc, L, cu.StreamDestroy, "cuStreamDestroy_v2");
  SYM(hc, L, cu.StreamIsCapturing, "cuStreamIsCapturing");
  SYM(hc, L, cu.EventCreate, "cuEventCreate");
  SYM(hc, L, cu.EventDestroy, "cuEventDestroy_v2");
  SYM(hc, L, cu.EventRecord, "cuEventRecord");
  SYM(hc, L, cu.MemAlloc, "cuMemAlloc_v2");
  SYM(hc, L, cu.MemFree, "cuMemFree_v2");
  SYM(hc, L, cu.MemsetD8, "cuMemsetD8_v2");
  SYM(hc, L, cu.MemcpyDtoH, "cuMemcpyDtoH_v2");
  SYM(hc, L, cu.MemcpyAsync, "cuMemcpyAsync");
  SYM(hc, L, cu.StreamBatchMemOp, "cuStreamBatchMemOp_v2");
  SYM(hc, L, cu.GetErrorString, "cuGetErrorString");
  OPTSYM(hc, L, cu.MemcpyBatchAsync, "cuMemcpyBatchAsync_v2");
  OPTSYM(hc, L, shim.account, "cushim_account");
  OPTSYM(hc, L, shim.mark, "cushim_mark");
  OPTSYM(hc, L, shim.totals, "cushim_totals");
  OPTSYM(hc, L, shim.real, "cushim_real");
  if (!shim.account || !shim.mark || !shim.totals || !shim.real) shim.account = NULL, shim.mark = NULL;

  int ver = 0, ndev = 0;
  CU(cu.Init(0));
  CU(cu.DriverGetVersion(&ver));
  CU(cu.DeviceGetCount(&ndev));
  if (ndev < 1) {
    fprintf(stderr, "hostcost: no CUDA device\n");
    return 2;
  }
  useBatchCopy = cu.MemcpyBatchAsync != NULL && ver >= 13000;
  printf("INFO driver %d, CUDA_DEVICE_MAX_CONNECTIONS=%s, reference copies: %s\n", ver,
         getenv("CUDA_DEVICE_MAX_CONNECTIONS"),
         useBatchCopy ? "cuMemcpyBatchAsync_v2" : "cuMemcpyAsync per copy (no CUDA 13 batch copy)");
  if (shim.mark) printf("INFO cushim: counting driver calls (real driver %s)\n", shim.real() ? shim.real() : "none");
  CUdevice dev;
  CUcontext ctx;
  CU(cu.DeviceGet(&dev, 0));
  CU(cu.DevicePrimaryCtxRetain(&ctx, dev));
  CU(cu.CtxSetCurrent(ctx));

  size_t winBytes = (maxBytes * n + 4095) / 4096 * 4096;
  if (refOnly) {
    printf("INFO reference only (-x): %d ranks on device 0, burst %d, rounds %d\n", n, k, rounds);
    for (int r = 0; r < n; r++) {
      CUdeviceptr a, b;
      CU(cu.StreamCreate(&streams[r], CU_STREAM_NON_BLOCKING));
      CU(cu.EventCreate(&events[r], CU_EVENT_DISABLE_TIMING));
      CU(cu.MemAlloc(&a, winBytes));
      CU(cu.MemAlloc(&b, winBytes));
      sendb[r] = (void*)(uintptr_t)a;
      recvb[r] = (void*)(uintptr_t)b;
    }
  } else {
    void* hl = dlopen(libPath, RTLD_NOW | RTLD_LOCAL);
    if (!hl) {
      fprintf(stderr, "hostcost: cannot load %s: %s\n", libPath, dlerror());
      return 2;
    }
    SYM(hl, libPath, nc.CommInitAll, "ncclCommInitAll");
    SYM(hl, libPath, nc.CommDestroy, "ncclCommDestroy");
    SYM(hl, libPath, nc.GroupStart, "ncclGroupStart");
    SYM(hl, libPath, nc.GroupEnd, "ncclGroupEnd");
    SYM(hl, libPath, nc.AllGather, "ncclAllGather");
    SYM(hl, libPath, nc.MemAlloc, "ncclMemAlloc");
    SYM(hl, libPath, nc.MemFree, "ncclMemFree");
    SYM(hl, libPath, nc.CommWindowRegister, "ncclCommWindowRegister");
    SYM(hl, libPath, nc.CommWindowDeregister, "ncclCommWindowDeregister");
    SYM(hl, libPath, nc.GetErrorString, "ncclGetErrorString");
    SYM(hl, libPath, nc.GetLastError, "ncclGetLastError");
    SYM(hl, libPath, nc.GetBackend, "cecollGetBackend");
    const char* backend = "?";
    NC(nc.GetBackend(&backend));
    if (strcmp(backend, "nvidia") != 0) {
      fprintf(stderr, "hostcost: cecoll runs on the %s backend; the reference needs nvidia (CECOLL_BACKEND=nvidia)\n",
              backend);
      return 2;
    }
    printf("INFO cecoll backend %s, CECOLL_SYNC=%s CECOLL_FLAG_WRITE=%s, %d ranks on device 0, burst %d, rounds %d\n",
           backend, getenv("CECOLL_SYNC") ? getenv("CECOLL_SYNC") : "(unset)",
           getenv("CECOLL_FLAG_WRITE") ? getenv("CECOLL_FLAG_WRITE") : "(unset)", n, k, rounds);
    fflush(stdout);

    int devs[MAXN] = {0};
    NC(nc.CommInitAll(comms, n, devs));
    CU(cu.CtxSetCurrent(ctx));
    NC(nc.GroupStart());
    for (int r = 0; r < n; r++) {
      CU(cu.StreamCreate(&streams[r], CU_STREAM_NON_BLOCKING));
      CU(cu.EventCreate(&events[r], CU_EVENT_DISABLE_TIMING));
      NC(nc.MemAlloc(&sendb[r], winBytes));
      NC(nc.MemAlloc(&recvb[r], winBytes));
      NC(nc.CommWindowRegister(comms[r], sendb[r], winBytes, &sendw[r], NCCL_WIN_COLL_SYMMETRIC));
      NC(nc.CommWindowRegister(comms[r], recvb[r], winBytes, &recvw[r], NCCL_WIN_COLL_SYMMETRIC));
    }
    NC(nc.GroupEnd());
    CU(cu.CtxSetCurrent(ctx));
  }
  if (flagAlloc == 'c') {
    CU(cu.MemAlloc(&flags, 2 * 4 * (size_t)n * n));
    CU(cu.MemsetD8(flags, 0, 2 * 4 * (size_t)n * n));
  } else if (flagAlloc == 'v') {
    void* p;
    NC(nc.MemAlloc(&p, 2 * 4 * (size_t)n * n));
    flags = (CUdeviceptr)(uintptr_t)p;
    CU(cu.MemsetD8(flags, 0, 2 * 4 * (size_t)n * n));
  } else {
    for (int r = 0; r < n; r++) {
      NC(nc.MemAlloc(&flagsOwner[r], 2 * 4 * (size_t)n));
      CU(cu.MemsetD8((CUdeviceptr)(uintptr_t)flagsOwner[r], 0, 2 * 4 * (size_t)n));
    }
  }
  printf("INFO reference flags in %s\n", flagAlloc == 'c' ? "one cuMemAlloc" : flagAlloc == 'v' ? "one ncclMemAlloc" : "one ncclMemAlloc per rank");
  CU(cu.MemAlloc(&words, 4 * (size_t)n));
  CU(cu.MemsetD8(words, 0, 4 * (size_t)n));
  {
    const char* sy = getenv("CECOLL_SYNC");
    const char* fw = getenv("CECOLL_FLAG_WRITE");
    refStar = sy && strcmp(sy, "star") == 0 ? 1 : sy && strcmp(sy, "allpairs") == 0 ? 0 : n >= 5;
    refCopy = !(fw && strcmp(fw, "value") == 0);
    printf("INFO reference sync: %s, flags by %s (as cecoll with CECOLL_SYNC=%s CECOLL_FLAG_WRITE=%s)\n",
           refStar ? "star" : "all pairs", refCopy ? "4-byte copies" : "write-value", sy ? sy : "auto",
           fw ? fw : "auto");
  }
  CU(cu.CtxSynchronize());

  int bad = 0;
  double* ce = malloc(sizeof(double) * rounds);
  double* cr = malloc(sizeof(double) * rounds);
  for (int si = 0; si < nsizes; si++) {
    size_t bytes = sizes[si];
    alarm((unsigned)watchdog);
    if (!refOnly) bad |= verify("cecoll", cecoll_allgather, bytes);
    bad |= verify("reference", ref_allgather, bytes);
    if (!refOnly) burst_us(cecoll_allgather, bytes, k, ACCT_OTHER); /* warm-up */
    burst_us(ref_allgather, bytes, k, ACCT_OTHER);
    for (int a = ACCT_CECOLL; shim.mark && a <= ACCT_C; a++) { /* from zero for this size */
      shim.account(a);
      shim.mark(NULL);
      shim.account(ACCT_OTHER);
    }
    for (int i = 0; i < rounds; i++) {
      ce[i] = refOnly ? 0 : burst_us(cecoll_allgather, bytes, k, ACCT_CECOLL);
      cr[i] = burst_us(ref_allgather, bytes, k, ACCT_C);
    }
    double mce = median(ce, rounds), mcr = median(cr, rounds);
    if (refOnly)
      printf("HOSTCOST bytes=%zu ranks=%d cecoll_us=- c_us=%.2f ratio=- (reference only; per collective of %d "
             "rank-calls; min %.2f; per rank-call %.2f)\n",
             bytes, n, mcr, n, cr[0], mcr / n);
    else
      printf("HOSTCOST bytes=%zu ranks=%d cecoll_us=%.2f c_us=%.2f ratio=%.2f (per collective of %d rank-calls; "
             "min %.2f / %.2f; per rank-call %.2f / %.2f)\n",
             bytes, n, mce, mcr, mce / mcr, n, ce[0], cr[0], mce / n, mcr / n);
    fflush(stdout);
    if (!refOnly) hostsplit(bytes, "cecoll", ACCT_CECOLL, ce, rounds, k);
    hostsplit(bytes, "c", ACCT_C, cr, rounds, k);
  }
  free(ce);
  free(cr);

  alarm((unsigned)watchdog);
  CU(cu.CtxSynchronize());
  if (refOnly) {
    for (int r = 0; r < n; r++) {
      CU(cu.MemFree((CUdeviceptr)(uintptr_t)sendb[r]));
      CU(cu.MemFree((CUdeviceptr)(uintptr_t)recvb[r]));
      CU(cu.EventDestroy(events[r]));
      CU(cu.StreamDestroy(streams[r]));
    }
    CU(cu.MemFree(flags));
    CU(cu.MemFree(words));
    return bad ? 1 : 0;
  }
  /* Teardown in cecoll-perf's order. */
  for (int r = 0; r < n; r++) {
    NC(nc.CommWindowDeregister(comms[r], sendw[r]));
    NC(nc.CommWindowDeregister(comms[r], recvw[r]));
    NC(nc.MemFree(sendb[r]));
    NC(nc.MemFree(recvb[r]));
    CU(cu.EventDestroy(events[r]));
    CU(cu.StreamDestroy(streams[r]));
  }
  for (int r = 0; r < n; r++) NC(nc.CommDestroy(comms[r]));
  if (flagAlloc == 'c') CU(cu.MemFree(flags));
  if (flagAlloc == 'v') NC(nc.MemFree((void*)(uintptr_t)flags));
  for (int r = 0; flagAlloc == 'r' && r < n; r++) NC(nc.MemFree(flagsOwner[r]));
  CU(cu.MemFree(words));
  return bad ? 1 : 0;
}
