/* fakegpu.c: a host-memory stand-in for libcuda.so.1, libcublas and an NCCL
 * library, only so that ncclcmp's own logic (threads, barriers, data checks,
 * graph capture and replay, the overlap protocol, teardown, error paths) can
 * be exercised on a machine without a GPU. It measures nothing real.
 *
 *   gcc -O2 -shared -fPIC -o /tmp/fake/libcuda.so.1 lab/gpu/fakegpu.c -lpthread
 *   LD_LIBRARY_PATH=/tmp/fake CUBLAS_LIB=/tmp/fake/libcuda.so.1 \
 *     build/gpu/ncclcmp perf -L /tmp/fake/libcuda.so.1 -N 3 -s 8,1K,1M -G
 *
 * Devices: FAKE_NDEV (default 2). Device pointers are host pointers; every
 * stream runs its work synchronously at the call, except while capturing,
 * when it records the work into a graph that cuGraphLaunch replays. A
 * collective is a rendezvous of all ranks of the communicator (each rank
 * pulls what it receives between two barriers). So is a group of
 * ncclSend/ncclRecv (or a lone one): it runs at ncclGroupEnd, on the stream
 * of its first call, and every rank of the communicator must take part (as
 * in ncclcmp's sendrecv); the k-th receive from a peer takes that peer's
 * k-th send to this rank, and a receive without a matching send of the
 * same size is reported on stderr and left as it was. GEMMs sleep FAKE_GEMM_US
 * (default 2000) microseconds. FAKE_FAIL=name makes that entry point fail;
 * FAKE_CORRUPT=1 flips a received byte on the last rank; FAKE_HANG=1 stops
 * rank 0 inside its first collective.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

typedef unsigned long long CUdeviceptr;
typedef int CUresult;

static int fail(const char* name) {
  const char* f = getenv("FAKE_FAIL");
  return f && strcmp(f, name) == 0;
}
#define FAILPOINT(name, code) \
  do {                        \
    if (fail(name)) return code; \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- streams, graphs ---- */
enum { OP_COPY, OP_SET8, OP_SET32, OP_COLL, OP_SLEEP, OP_P2P };
enum { P2P_MAX = 256 };
struct p2p { /* one rank's sends and receives of one group */
  int n;
  struct { int send, peer; void* buf; size_t bytes; } e[P2P_MAX];
};
struct op {
  int kind;
  void *dst;
  const void* src;
  size_t n;
  unsigned v;
  /* collective */
  int coll, root;
  ncclComm_t comm;
  struct p2p* p2p; /* OP_P2P; owned by the op (a graph's ops: by the graph) */
};
struct stream {
  int capturing;
  struct op* ops;
  int nops, cap;
};
struct graph {
  struct op* ops;
  int nops;
};

static void collRun(struct op* o);
static void p2pRun(struct op* o);
static void exec(struct op* o) {
  switch (o->kind) {
    case OP_COPY: memmove(o->dst, o->src, o->n); break;
    case OP_SET8: memset(o->dst, (int)o->v, o->n); break;
    case OP_SET32:
      for (size_t i = 0; i < o->n; i++) ((uint32_t*)o->dst)[i] = o->v;
      break;
    case OP_COLL: collRun(o); break;
    case OP_SLEEP: usleep((useconds_t)o->n); break;
    case OP_P2P: p2pRun(o); break;
  }
}
static void submit(struct stream* s, struct op o) {
  if (s && s->capturing) {
    if (s->nops == s->cap) {
      s->cap = s->cap ? 2 * s->cap : 8;
      s->ops = realloc(s->ops, sizeof(struct op) * (size_t)s->cap);
    }
    s->ops[s->nops++] = o;
    return;
  }
  exec(&o);
  if (o.kind == OP_P2P) free(o.p2p);
}

static int ndev(void) {
  const char* e = getenv("FAKE_NDEV");
  return e ? atoi(e) : 2;
}

CUresult cuInit(unsigned f) { (void)f; FAILPOINT("cuInit", 100); return 0; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = ndev(); return 0; }
CUresult cuDeviceGet(int* d, int o) { *d = o; return o < ndev() ? 0 : 101; }
CUresult cuDeviceGetName(char* n, int len, int d) { snprintf(n, (size_t)len, "FakeGPU %d", d); return 0; }
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)(uintptr_t)(d + 1); return 0; }
CUresult cuCtxSetCurrent(void* c) { (void)c; return 0; }
CUresult cuCtxEnablePeerAccess(void* c, unsigned f) { (void)c; (void)f; return 704; }
CUresult cuDeviceCanAccessPeer(int* can, int a, int b) { *can = a != b; return 0; }
CUresult cuMemGetInfo_v2(size_t* f, size_t* t) { *f = *t = (size_t)1 << 34; return 0; }
CUresult cuStreamCreate(struct stream** s, unsigned f) { (void)f; *s = calloc(1, sizeof **s); return 0; }
CUresult cuStreamDestroy_v2(struct stream* s) { if (s) { free(s->ops); free(s); } return 0; }
CUresult cuStreamSynchronize(struct stream* s) { (void)s; return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  FAILPOINT("cuMemAlloc_v2", 2);
  void* q = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
  if (!q) return 2;
  *p = (CUdeviceptr)(uintptr_t)q;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void*)(uintptr_t)p); return 0; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, struct stream* st) {
  submit(st, (struct op){.kind = OP_COPY, .dst = (void*)(uintptr_t)d, .src = (void*)(uintptr_t)s, .n = n});
  return 0;
}
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) { memcpy(d, (void*)(uintptr_t)s, n); return 0; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, struct stream* s) {
  submit(s, (struct op){.kind = OP_SET8, .dst = (void*)(uintptr_t)p, .n = n, .v = v});
  return 0;
}
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, struct stream* s) {
  submit(s, (struct op){.kind = OP_SET32, .dst = (void*)(uintptr_t)p, .n = n, .v = v});
  return 0;
}
CUresult cuEventCreate(double** e, unsigned f) { (void)f; *e = calloc(1, sizeof(double)); return 0; }
CUresult cuEventDestroy_v2(double* e) { free(e); return 0; }
CUresult cuEventRecord(double* e, struct stream* s) { (void)s; *e = now(); return 0; }
CUresult cuEventSynchronize(double* e) { (void)e; return 0; }
CUresult cuEventElapsedTime_v2(float* ms, double* a, double* b) { *ms = (float)((*b - *a) * 1e3); return 0; }
CUresult cuStreamBeginCapture_v2(struct stream* s, int mode) {
  if (mode != 1) return 1;
  s->capturing = 1;
  s->nops = 0;
  return 0;
}
CUresult cuStreamEndCapture(struct stream* s, struct graph** g) {
  *g = calloc(1, sizeof **g);
  (*g)->ops = s->ops;
  (*g)->nops = s->nops;
  s->ops = NULL;
  s->nops = s->cap = 0;
  s->capturing = 0;
  return 0;
}
CUresult cuGraphInstantiateWithFlags(struct graph** ge, struct graph* g, unsigned long long f) {
  (void)f;
  *ge = g;
  return 0;
}
CUresult cuGraphLaunch(struct graph* ge, struct stream* s) {
  (void)s;
  for (int i = 0; i < ge->nops; i++) exec(&ge->ops[i]);
  return 0;
}
CUresult cuGraphExecDestroy(struct graph* ge) { (void)ge; return 0; }
CUresult cuGraphDestroy(struct graph* g) {
  for (int i = 0; i < g->nops; i++)
    if (g->ops[i].kind == OP_P2P) free(g->ops[i].p2p);
  free(g->ops);
  free(g);
  return 0;
}
/* For lab/h200/hostcost -x (and its cushim check): every stream runs at
 * the call, so a wait-value cannot block and is not checked; write-values
 * and copies run, so the data still is. */
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuStreamIsCapturing(struct stream* s, int* c) { *c = s && s->capturing; return 0; }
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { memset((void*)(uintptr_t)p, v, n); return 0; }
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, struct stream* st) {
  return cuMemcpyDtoDAsync_v2(d, s, n, st);
}
CUresult cuStreamBatchMemOp_v2(struct stream* s, unsigned count, uint64_t* ops, unsigned f) {
  (void)f;
  for (unsigned i = 0; i < count; i++) { /* 48-byte params: operation, address, value (gpu-abi.md A.1) */
    uint64_t* o = ops + 6 * i;
    if ((uint32_t)o[0] == 2) /* a write-value; waits cannot block here */
      submit(s, (struct op){.kind = OP_SET32, .dst = (void*)(uintptr_t)o[1], .n = 1, .v = (unsigned)o[2]});
  }
  return 0;
}
CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* d, CUdeviceptr* s, size_t* n, size_t count, void* attrs,
                               size_t* idx, size_t nattrs, struct stream* st) {
  (void)attrs, (void)idx, (void)nattrs;
  for (size_t i = 0; i < count; i++) cuMemcpyDtoDAsync_v2(d[i], s[i], n[i], st);
  return 0;
}
CUresult cuGetErrorName(CUresult r, const char** s) { *s = r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE"; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { (void)r; *s = "fake failure"; return 0; }

/* ---- cuBLAS ---- */
struct blas { struct stream* s; };
int cublasCreate_v2(struct blas** h) { *h = calloc(1, sizeof **h); return 0; }
int cublasDestroy_v2(struct blas* h) { free(h); return 0; }
int cublasSetStream_v2(struct blas* h, struct stream* s) { h->s = s; return 0; }
int cublasGemmEx(struct blas* h, int ta, int tb, int m, int n, int k, const void* al, const void* A, int At, int lda,
                 const void* B, int Bt, int ldb, const void* be, void* C, int Ct, int ldc, int ct, int algo) {
  (void)ta; (void)tb; (void)m; (void)n; (void)k; (void)al; (void)A; (void)lda; (void)B; (void)ldb; (void)be;
  (void)C; (void)ldc; (void)algo;
  if (At != 14 || Bt != 14 || Ct != 14 || ct != 68) return 7;
  const char* e = getenv("FAKE_GEMM_US");
  submit(h->s, (struct op){.kind = OP_SLEEP, .n = e ? (size_t)atoi(e) : 2000});
  return 0;
}
int cublasScopy_v2(struct blas* h, int n, const float* x, int incx, float* y, int incy) {
  if (incx != 1 || incy != 1) return 7;
  submit(h->s, (struct op){.kind = OP_COPY, .dst = y, .src = x, .n = (size_t)n * 4});
  return 0;
}
const char* cublasGetStatusString(int s) { return s ? "CUBLAS_STATUS_FAKE" : "CUBLAS_STATUS_SUCCESS"; }

/* ---- NCCL ---- */
struct ncclComm {
  int n, rank;
  struct world* w;
};
struct world {
  uint64_t id;
  int n, arrived;
  pthread_barrier_t bar;
  struct { const void* send; void* recv; const struct p2p* p2p; } post[64];
  struct world* next;
};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct world* worlds;
static uint64_t nextId = 1;
static __thread char lastErr[256];

ncclResult_t ncclGetVersion(int* v) { *v = 22809; return ncclSuccess; }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 0, sizeof *id);
  pthread_mutex_lock(&mu);
  uint64_t v = nextId++;
  pthread_mutex_unlock(&mu);
  memcpy(id->internal, &v, sizeof v);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* c, int n, ncclUniqueId id, int rank, ncclConfig_t* cfg) {
  if (cfg && (cfg->magic != NCCL_API_MAGIC || cfg->size != sizeof(ncclConfig_t))) {
    snprintf(lastErr, sizeof lastErr, "fake: bad config");
    return ncclInvalidArgument;
  }
  if (fail("ncclCommInitRank")) {
    snprintf(lastErr, sizeof lastErr, "fake: FAKE_FAIL=ncclCommInitRank");
    return ncclSystemError;
  }
  uint64_t key;
  memcpy(&key, id.internal, sizeof key);
  pthread_mutex_lock(&mu);
  struct world* w = worlds;
  while (w && w->id != key) w = w->next;
  if (!w) {
    w = calloc(1, sizeof *w);
    w->id = key;
    w->n = n;
    pthread_barrier_init(&w->bar, NULL, (unsigned)n);
    w->next = worlds;
    worlds = w;
  }
  w->arrived++;
  pthread_cond_broadcast(&cv);
  while (w->arrived < n) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  struct ncclComm* cm = calloc(1, sizeof *cm);
  cm->n = n;
  cm->rank = rank;
  cm->w = w;
  *c = cm;
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* c, int n, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(c, n, id, rank, NULL);
}
ncclResult_t ncclCommFinalize(ncclComm_t c) { (void)c; return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t c) { free(c); return ncclSuccess; }
const char* ncclGetErrorString(ncclResult_t r) { return r ? "fake error" : "no error"; }
const char* ncclGetLastError(ncclComm_t c) { (void)c; return lastErr; }
ncclResult_t ncclMemAlloc(void** p, size_t n) { *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095); return ncclSuccess; }
ncclResult_t ncclMemFree(void* p) { free(p); return ncclSuccess; }
ncclResult_t ncclCommWindowRegister(ncclComm_t c, void* b, size_t n, ncclWindow_t* w, int f) {
  (void)c; (void)b; (void)n;
  if (f != NCCL_WIN_COLL_SYMMETRIC) return ncclInvalidArgument;
  *w = (ncclWindow_t)b;
  return ncclSuccess;
}
ncclResult_t ncclCommWindowDeregister(ncclComm_t c, ncclWindow_t w) { (void)c; (void)w; return ncclSuccess; }

/* collRun: every rank posts its buffers, waits for all, pulls what it
 * receives, and waits again so no buffer changes under a reader. */
static void collRun(struct op* o) {
  struct ncclComm* c = o->comm;
  struct world* w = c->w;
  int n = c->n, me = c->rank;
  size_t b = o->n;
  w->post[me].send = o->src;
  w->post[me].recv = o->dst;
  pthread_barrier_wait(&w->bar);
  char* recv = o->dst;
  switch (o->coll) {
    case 0:
      for (int i = 0; i < n; i++) memcpy(recv + (size_t)i * b, w->post[i].send, b);
      break;
    case 1:
      for (int i = 0; i < n; i++) memcpy(recv + (size_t)i * b, (const char*)w->post[i].send + (size_t)me * b, b);
      break;
    case 2: memcpy(recv, (const char*)w->post[o->root].send + (size_t)me * b, b); break;
    case 3:
      if (me == o->root)
        for (int i = 0; i < n; i++) memcpy(recv + (size_t)i * b, w->post[i].send, b);
      break;
    case 4: memmove(recv, w->post[o->root].send, b); break; /* broadcast; in place on the root */
  }
  if (getenv("FAKE_CORRUPT") && me == n - 1 && b > 0 && o->coll != 3) recv[b - 1] ^= 0x40; /* the check must see it */
  if (getenv("FAKE_HANG") && me == 0) pause();                                            /* the watchdog must see it */
  pthread_barrier_wait(&w->bar);
}
static const char* kCollName[] = {"ncclAllGather", "ncclAlltoAll", "ncclScatter", "ncclGather", "ncclBroadcast"};
static ncclResult_t coll(int k, const void* s, void* d, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                         cudaStream_t st) {
  if (t != ncclUint8) return ncclInvalidArgument;
  if (fail(kCollName[k])) {
    snprintf(lastErr, sizeof lastErr, "fake: FAKE_FAIL=%s", kCollName[k]);
    return ncclInvalidUsage;
  }
  if (root < 0 || root >= c->n) {
    snprintf(lastErr, sizeof lastErr, "fake: %s: root %d of %d ranks", kCollName[k], root, c->n);
    return ncclInvalidArgument;
  }
  submit((struct stream*)st, (struct op){.kind = OP_COLL, .dst = d, .src = s, .n = n, .coll = k, .root = root, .comm = c});
  return ncclSuccess;
}
ncclResult_t ncclAllGather(const void* s, void* d, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  return coll(0, s, d, n, t, 0, c, st);
}
ncclResult_t ncclAlltoAll(const void* s, void* d, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  return coll(1, s, d, n, t, 0, c, st);
}
ncclResult_t ncclScatter(const void* s, void* d, size_t n, ncclDataType_t t, int r, ncclComm_t c, cudaStream_t st) {
  return coll(2, s, d, n, t, r, c, st);
}
ncclResult_t ncclGather(const void* s, void* d, size_t n, ncclDataType_t t, int r, ncclComm_t c, cudaStream_t st) {
  return coll(3, s, d, n, t, r, c, st);
}
ncclResult_t ncclBroadcast(const void* s, void* d, size_t n, ncclDataType_t t, int r, ncclComm_t c, cudaStream_t st) {
  return coll(4, s, d, n, t, r, c, st);
}

/* ---- point to point: groups ---- */
static __thread int groupDepth;
static __thread struct p2p* pending; /* this thread's sends and receives since the outermost ncclGroupStart */
static __thread struct ncclComm* pendComm;
static __thread struct stream* pendStream;

/* p2pRun: every rank posts its list, waits for all, copies each receive
 * from the matching send, and waits again. */
static void p2pRun(struct op* o) {
  struct ncclComm* c = o->comm;
  struct world* w = c->w;
  int n = c->n, me = c->rank;
  const struct p2p* mine = o->p2p;
  w->post[me].p2p = mine;
  pthread_barrier_wait(&w->bar);
  int firstRecv = 1;
  for (int i = 0; i < mine->n; i++) {
    if (mine->e[i].send) continue;
    int peer = mine->e[i].peer, k = 0;
    for (int j = 0; j < i; j++) k += !mine->e[j].send && mine->e[j].peer == peer;
    const struct p2p* theirs = w->post[peer].p2p;
    int found = 0;
    for (int j = 0; j < theirs->n && !found; j++) {
      if (!theirs->e[j].send || theirs->e[j].peer != me) continue;
      if (k-- > 0) continue;
      found = 1;
      if (theirs->e[j].bytes != mine->e[i].bytes) {
        fprintf(stderr, "fake: rank %d: receive of %zu B from rank %d meets a send of %zu B\n", me,
                mine->e[i].bytes, peer, theirs->e[j].bytes);
        break;
      }
      memcpy(mine->e[i].buf, theirs->e[j].buf, mine->e[i].bytes);
      if (getenv("FAKE_CORRUPT") && me == n - 1 && firstRecv && mine->e[i].bytes > 0)
        ((char*)mine->e[i].buf)[mine->e[i].bytes - 1] ^= 0x40; /* the check must see it */
    }
    if (!found) fprintf(stderr, "fake: rank %d: receive from rank %d has no matching send\n", me, peer);
    firstRecv = 0;
  }
  if (getenv("FAKE_HANG") && me == 0) pause();
  pthread_barrier_wait(&w->bar);
}

ncclResult_t ncclGroupStart(void) {
  FAILPOINT("ncclGroupStart", ncclInternalError);
  groupDepth++;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
  if (groupDepth == 0) {
    snprintf(lastErr, sizeof lastErr, "fake: ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--groupDepth > 0 || !pending) return ncclSuccess;
  struct p2p* p = pending;
  pending = NULL;
  if (fail("ncclGroupEnd")) {
    free(p);
    snprintf(lastErr, sizeof lastErr, "fake: FAKE_FAIL=ncclGroupEnd");
    return ncclSystemError;
  }
  submit(pendStream, (struct op){.kind = OP_P2P, .comm = pendComm, .p2p = p});
  return ncclSuccess;
}
static ncclResult_t p2p(int send, void* buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
  if (t != ncclUint8) return ncclInvalidArgument;
  if (fail(send ? "ncclSend" : "ncclRecv")) {
    snprintf(lastErr, sizeof lastErr, "fake: FAKE_FAIL=%s", send ? "ncclSend" : "ncclRecv");
    return ncclInvalidUsage;
  }
  if (peer < 0 || peer >= c->n) {
    snprintf(lastErr, sizeof lastErr, "fake: peer %d of %d ranks", peer, c->n);
    return ncclInvalidArgument;
  }
  int lone = groupDepth == 0;
  if (lone) ncclGroupStart();
  if (!pending) {
    pending = calloc(1, sizeof *pending);
    pendComm = c;
    pendStream = (struct stream*)st;
  } else if (pendComm != c || pendStream != (struct stream*)st || pending->n == P2P_MAX) {
    snprintf(lastErr, sizeof lastErr, "fake: one group takes one communicator, one stream, %d calls", P2P_MAX);
    if (lone) groupDepth--;
    return ncclInvalidUsage;
  }
  pending->e[pending->n].send = send;
  pending->e[pending->n].peer = peer;
  pending->e[pending->n].buf = buf;
  pending->e[pending->n].bytes = n;
  pending->n++;
  return lone ? ncclGroupEnd() : ncclSuccess;
}
ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
  return p2p(1, (void*)s, n, t, peer, c, st);
}
ncclResult_t ncclRecv(void* d, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
  return p2p(0, d, n, t, peer, c, st);
}
