/* cushim.c: a counting libcuda.so.1 that splits hostcost's time. Put
 * first on LD_LIBRARY_PATH, it is what dlopen("libcuda.so.1") finds (in
 * hostcost and in cecoll's nvidia backend alike); every entry point either
 * side resolves is a wrapper that forwards to the real driver and adds the
 * call, and the time spent inside the real call, to a per-symbol counter.
 * A reader then splits a burst's host time into driver time and time
 * outside the driver (cecoll's Go code, the shim's few ns, the caller).
 *
 *   gcc -O2 -Wall -Wextra -shared -fPIC -Wl,-soname,libcuda.so.1 \
 *     -o DIR/libcuda.so.1 lab/h200/cushim.c -ldl -lpthread
 *   LD_LIBRARY_PATH=DIR:$LD_LIBRARY_PATH hostcost ...
 *
 * The real driver: $CUSHIM_REAL if set, else the first libcuda.so.1 in the
 * folders of LD_LIBRARY_PATH, then in /usr/lib/x86_64-linux-gnu,
 * /usr/lib64, /usr/local/cuda/compat, /lib/x86_64-linux-gnu and
 * /usr/local/nvidia/lib64, that is not this file (realpath). It is loaded
 * RTLD_LOCAL by absolute path, so a later dlopen("libcuda.so.1") still
 * returns the shim, and with RTLD_DEEPBIND (CUSHIM_DEEPBIND=0: without),
 * so that the driver's calls to its own exported names, if it makes any
 * through the symbol table, do not land in the (global) shim and count
 * twice. Without a real driver the shim says so on stderr and every entry
 * point returns CUDA_ERROR_SHARED_OBJECT_INIT_FAILED (304); one the real
 * driver lacks returns CUDA_ERROR_NOT_FOUND (500) (listed at load).
 *
 * Every driver entry point takes at most 9 integer or pointer arguments
 * (none a float or a struct by value: cuEventElapsedTime's float is behind
 * a pointer) and returns CUresult, so one generic wrapper of 10 words
 * serves all on x86-64 SysV and arm64, as cecoll's own trampoline does
 * (internal/hip/nvidia/ccall.go). Neither side resolves through
 * cuGetProcAddress, so the shim does not export it.
 *
 * Control, for a program that finds these with dlsym on its libcuda handle
 * (absent = the real driver, nothing to do):
 *   int cushim_account(int a)   counters from now on go to account a
 *                               (0..3; 0 at load); returns the previous
 *   int cushim_mark(const char *label)
 *                               prints the current account to stderr:
 *                               "CUSHIM <label> calls=.. driver_us=.. wall_us=.."
 *                               then "CUSHIM <label> <symbol> n=.. us=.. avg_ns=.."
 *                               per symbol called (most time first), and
 *                               resets it; label NULL resets silently.
 *                               wall_us: time the account was current since
 *                               its previous mark.
 *   int cushim_totals(unsigned long long *calls, unsigned long long *ns)
 *                               the current account's totals, no reset
 *   const char *cushim_real(void)  the real driver's path (NULL: none)
 * Calls from every thread count, into the account current at the call.
 *
 * Time: rdtsc on x86-64 (calibrated against CLOCK_MONOTONIC over the
 * process's life), CLOCK_MONOTONIC elsewhere; counters are relaxed
 * atomics, one cache line per symbol and account.
 *
 * CUSHIM_DOT=DIR writes every captured graph as a DOT file (see cuStreamEndCapture);
 * CUSHIM_STREAMS=N makes N idle streams before the process's first (cuStreamCreate).
 *
 * Built with -DCUSHIM_BENCH this file is instead a small program that
 * measures the shim's overhead: cuDriverGetVersion through the shim
 * (dlopen "libcuda.so.1") against the same call on cushim_real() directly. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

typedef uint64_t u64;

static u64 mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (u64)ts.tv_sec * 1000000000u + (u64)ts.tv_nsec;
}

#ifndef CUSHIM_BENCH

/* Every cu* name that internal/hip/nvidia/symbols.go or hostcost.c
 * resolves, plus a few that cecoll may come to use (capture info, context
 * queries); small.sh's hostsplit stage checks symbols.go's names against this list. */
#define CUSHIM_SYMBOLS(X)                                                                                 \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)                   \
  X(cuDeviceGetAttribute) X(cuDeviceCanAccessPeer) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)         \
  X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuMemGetAllocationGranularity)               \
  X(cuMemCreate) X(cuMemRelease) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap)     \
  X(cuMemSetAccess) X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle)                     \
  X(cuMemRetainAllocationHandle) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemGetAddressRange_v2)              \
  X(cuMemsetD8_v2) X(cuMemcpy) X(cuMemcpyAsync) X(cuMemcpy2DAsync_v2) X(cuMemcpyDtoH_v2) X(cuStreamDestroy_v2) \
  X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy_v2)      \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime_v2) X(cuEventElapsedTime)   \
  X(cuStreamBatchMemOp_v2) X(cuStreamIsCapturing) X(cuStreamBeginCapture_v2) X(cuPointerGetAttributes)   \
  X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphDestroy) X(cuGraphExecDestroy)                 \
  X(cuMemcpyBatchAsync_v2) X(cuMemcpyBatchAsync) X(cuGetErrorString) X(cuGetErrorName)                    \
  X(cuStreamGetCaptureInfo_v3) X(cuStreamGetCtx) X(cuCtxGetId) X(cuEventRecordWithFlags)

/* Wrapped by hand below (CUSHIM_DOT), counted like the rest. */
#define CUSHIM_HOOKED(X) X(cuStreamEndCapture) X(cuStreamCreate)

enum {
#define X(name) S_##name,
  CUSHIM_SYMBOLS(X) CUSHIM_HOOKED(X)
#undef X
      NSYM
};
static const char* const names[NSYM] = {
#define X(name) #name,
    CUSHIM_SYMBOLS(X) CUSHIM_HOOKED(X)
#undef X
};

typedef int (*fn10)(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64);
static fn10 real[NSYM];
static char realPath[PATH_MAX];
static int realLoaded;

enum { NACCT = 4 };
struct counter {
  u64 n, ticks;
} __attribute__((aligned(64)));
static struct counter ctr[NACCT][NSYM];
static int cur; /* the current account, read relaxed by every call */
static pthread_mutex_t ctlMu = PTHREAD_MUTEX_INITIALIZER;
static u64 acctWall[NACCT]; /* ticks the account was current before acctFrom */
static u64 acctFrom;        /* when the current account last became current or was marked */

/* ---- clock ---------------------------------------------------------------------- */
static u64 tick0, ns0;
static inline u64 ticks(void) {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return mono_ns();
#endif
}
/* ns per tick, from the whole time since load (cushim_init spends the
 * first 2 ms, so that an early caller gets a fair figure without waiting:
 * a wait here would land in an account's wall time). */
static double ns_per_tick(void) {
#if defined(__x86_64__)
  u64 n = mono_ns(), t = ticks();
  return t > tick0 ? (double)(n - ns0) / (double)(t - tick0) : 1.0;
#else
  return 1.0;
#endif
}

/* ---- the real driver ---------------------------------------------------------- */
static int same_file(const char* a, const char* b) {
  char ra[PATH_MAX], rb[PATH_MAX];
  return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* A candidate libcuda.so.1 in dir that exists and is not the shim. */
static int candidate(const char* dir, size_t len, const char* self) {
  char p[PATH_MAX];
  if (len == 0 || len + sizeof "/libcuda.so.1" > sizeof p) return 0;
  memcpy(p, dir, len);
  strcpy(p + len, "/libcuda.so.1");
  if (access(p, R_OK) != 0 || same_file(p, self)) return 0;
  strcpy(realPath, p);
  return 1;
}

static int find_real(const char* self) {
  const char* env = getenv("CUSHIM_REAL");
  if (env && *env) {
    if (same_file(env, self)) {
      fprintf(stderr, "CUSHIM FATAL: CUSHIM_REAL=%s is the shim itself; every call fails with 304\n", env);
      return 0;
    }
    snprintf(realPath, sizeof realPath, "%s", env);
    return 1;
  }
  const char* lp = getenv("LD_LIBRARY_PATH");
  for (const char* s = lp; s && *s;) {
    const char* e = strchr(s, ':');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (candidate(s, len, self)) return 1;
    s = e ? e + 1 : s + len;
  }
  static const char* const dirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/compat",
                                     "/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
    if (candidate(dirs[i], strlen(dirs[i]), self)) return 1;
  fprintf(stderr, "CUSHIM FATAL: no real libcuda.so.1 found (set CUSHIM_REAL); every call fails with 304\n");
  return 0;
}

__attribute__((constructor)) static void cushim_init(void) {
  ns0 = mono_ns();
  tick0 = ticks();
  acctFrom = tick0;
#if defined(__x86_64__)
  while (mono_ns() - ns0 < 2000000) {
  }
#endif
  Dl_info self;
  if (!dladdr((void*)cushim_init, &self) || !self.dli_fname) {
    fprintf(stderr, "CUSHIM FATAL: dladdr of the shim failed; no real driver loaded\n");
    return;
  }
  if (!find_real(self.dli_fname)) return;
  const char* db = getenv("CUSHIM_DEEPBIND");
  int deep = !(db && strcmp(db, "0") == 0);
  void* h = dlopen(realPath, RTLD_NOW | RTLD_LOCAL | (deep ? RTLD_DEEPBIND : 0));
  if (!h) {
    fprintf(stderr, "CUSHIM FATAL: dlopen %s: %s; every call fails with 304\n", realPath, dlerror());
    return;
  }
  realLoaded = 1;
  char missing[1024] = "";
  for (int i = 0; i < NSYM; i++) {
    void* p = dlsym(h, names[i]);
    memcpy(&real[i], &p, sizeof p);
    if (!p && strlen(missing) + strlen(names[i]) + 2 < sizeof missing) {
      strcat(missing, " ");
      strcat(missing, names[i]);
    }
  }
  fprintf(stderr, "CUSHIM real driver %s%s (shim %s)%s%s\n", realPath, deep ? " (deepbind)" : "", self.dli_fname,
          *missing ? "; lacks (return 500):" : "", missing);
}

/* ---- wrappers ------------------------------------------------------------------ */
static int absent(int s) {
  static int told[NSYM];
  if (!__atomic_exchange_n(&told[s], 1, __ATOMIC_RELAXED))
    fprintf(stderr, "CUSHIM %s called but %s\n", names[s], realLoaded ? "the real driver lacks it" : "no real driver");
  return realLoaded ? 500 : 304;
}

static inline int forward(int s, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6, u64 a7, u64 a8, u64 a9) {
  fn10 f = real[s];
  if (__builtin_expect(!f, 0)) return absent(s);
  int a = __atomic_load_n(&cur, __ATOMIC_RELAXED);
  u64 t0 = ticks();
  int r = f(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9);
  u64 t1 = ticks();
  __atomic_fetch_add(&ctr[a][s].n, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&ctr[a][s].ticks, t1 - t0, __ATOMIC_RELAXED);
  return r;
}

/* No cuda.h here, so these definitions declare the exported names. */
#define X(name)                                                                                                \
  int name(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6, u64 a7, u64 a8, u64 a9);                    \
  int name(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6, u64 a7, u64 a8, u64 a9) {                   \
    return forward(S_##name, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9);                                          \
  }
CUSHIM_SYMBOLS(X)
#undef X

/* CUSHIM_DOT=DIR: every graph a capture ends with is written to DIR/graph-N.dot
 * by the driver's cuGraphDebugDotPrint (verbose: every node's parameters), N
 * counting from 0 in the process, so two libraries' captures of the same calls
 * can be compared node by node. */
int cuStreamEndCapture(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6, u64 a7, u64 a8, u64 a9);
int cuStreamEndCapture(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6, u64 a7, u64 a8, u64 a9) {
  int r = forward(S_cuStreamEndCapture, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9);
  const char* dir = getenv("CUSHIM_DOT");
  if (r != 0 || !dir || !*dir || !realLoaded) return r;
  static int n;
  static int (*dot)(u64, const char*, unsigned);
  if (!dot) {
    void* h = dlopen(realPath, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    void* p = h ? dlsym(h, "cuGraphDebugDotPrint") : NULL;
    memcpy(&dot, &p, sizeof p);
  }
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/graph-%d.dot", dir, __atomic_fetch_add(&n, 1, __ATOMIC_RELAXED));
  u64 graph;
  memcpy(&graph, (const void*)(uintptr_t)a1, sizeof graph);
  int d = dot ? dot(graph, path, 1u /* CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE */) : -1;
  if (d != 0) fprintf(stderr, "CUSHIM cuGraphDebugDotPrint %s: %d\n", path, d);
  return r;
}

/* CUSHIM_STREAMS=N: the process's first cuStreamCreate first makes N more
 * streams (same flags) that stay idle: does the number of streams the
 * process made before its own change what its graphs cost? */
int cuStreamCreate(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6, u64 a7, u64 a8, u64 a9);
int cuStreamCreate(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6, u64 a7, u64 a8, u64 a9) {
  static int done;
  const char* env = getenv("CUSHIM_STREAMS");
  if (env && !__atomic_exchange_n(&done, 1, __ATOMIC_RELAXED)) {
    for (int i = 0, n = atoi(env); i < n; i++) {
      u64 extra;
      forward(S_cuStreamCreate, (u64)(uintptr_t)&extra, a1, 0, 0, 0, 0, 0, 0, 0, 0);
    }
    fprintf(stderr, "CUSHIM %s idle streams made first\n", env);
  }
  return forward(S_cuStreamCreate, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9);
}

/* ---- control ------------------------------------------------------------------- */
int cushim_account(int a);
int cushim_mark(const char* label);
int cushim_totals(unsigned long long* calls, unsigned long long* ns);
const char* cushim_real(void);

int cushim_account(int a) {
  if (a < 0 || a >= NACCT) return -1;
  pthread_mutex_lock(&ctlMu);
  u64 now = ticks();
  int prev = cur;
  acctWall[prev] += now - acctFrom;
  acctFrom = now;
  __atomic_store_n(&cur, a, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&ctlMu);
  return prev;
}

static void sums(int a, u64* n, u64* t) {
  *n = *t = 0;
  for (int s = 0; s < NSYM; s++) {
    *n += __atomic_load_n(&ctr[a][s].n, __ATOMIC_RELAXED);
    *t += __atomic_load_n(&ctr[a][s].ticks, __ATOMIC_RELAXED);
  }
}

int cushim_totals(unsigned long long* calls, unsigned long long* ns) {
  u64 n, t;
  sums(__atomic_load_n(&cur, __ATOMIC_RELAXED), &n, &t);
  if (calls) *calls = n;
  if (ns) *ns = (unsigned long long)((double)t * ns_per_tick());
  return 0;
}

static int by_time_desc(const void* x, const void* y) {
  const struct counter *a = &ctr[0][0] + *(const int*)x, *b = &ctr[0][0] + *(const int*)y;
  return (a->ticks < b->ticks) - (a->ticks > b->ticks);
}

int cushim_mark(const char* label) {
  pthread_mutex_lock(&ctlMu);
  int a = __atomic_load_n(&cur, __ATOMIC_RELAXED);
  u64 now = ticks();
  u64 wall = acctWall[a] + (now - acctFrom);
  if (label) {
    double npt = ns_per_tick();
    u64 n, t;
    sums(a, &n, &t);
    /* One snapshot, sorted by time: indexes into the flat counter array. */
    int idx[NSYM], k = 0;
    for (int s = 0; s < NSYM; s++)
      if (__atomic_load_n(&ctr[a][s].n, __ATOMIC_RELAXED)) idx[k++] = a * NSYM + s;
    qsort(idx, (size_t)k, sizeof idx[0], by_time_desc);
    fprintf(stderr, "CUSHIM %s calls=%llu driver_us=%.1f wall_us=%.1f\n", label, (unsigned long long)n,
            (double)t * npt / 1e3, (double)wall * npt / 1e3);
    for (int i = 0; i < k; i++) {
      const struct counter* c = &ctr[0][0] + idx[i];
      fprintf(stderr, "CUSHIM %s %s n=%llu us=%.1f avg_ns=%.0f\n", label, names[idx[i] % NSYM],
              (unsigned long long)c->n, (double)c->ticks * npt / 1e3, (double)c->ticks * npt / (double)c->n);
    }
    fflush(stderr);
  }
  for (int s = 0; s < NSYM; s++) {
    __atomic_store_n(&ctr[a][s].n, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ctr[a][s].ticks, 0, __ATOMIC_RELAXED);
  }
  acctWall[a] = 0;
  acctFrom = now;
  pthread_mutex_unlock(&ctlMu);
  return 0;
}

const char* cushim_real(void) { return realLoaded ? realPath : NULL; }

#else /* CUSHIM_BENCH */

typedef int (*versionFn)(int*);

static double ns_per_call(versionFn f, int iters) {
  double best = 1e30;
  int v;
  for (int rep = 0; rep < 5; rep++) {
    u64 t0 = mono_ns();
    for (int i = 0; i < iters; i++) f(&v);
    double ns = (double)(mono_ns() - t0) / iters;
    if (ns < best) best = ns;
  }
  return best;
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 1000000;
  void* shim = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!shim) {
    fprintf(stderr, "cushim_bench: dlopen libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  const char* (*realName)(void) = NULL;
  int (*mark)(const char*) = NULL;
  void* p = dlsym(shim, "cushim_real");
  memcpy(&realName, &p, sizeof p);
  p = dlsym(shim, "cushim_mark");
  memcpy(&mark, &p, sizeof p);
  if (!realName || !mark || !realName()) {
    fprintf(stderr, "cushim_bench: libcuda.so.1 is not the shim, or the shim has no real driver\n");
    return 2;
  }
  void* real = dlopen(realName(), RTLD_NOW | RTLD_LOCAL);
  versionFn viaShim = NULL, direct = NULL;
  p = dlsym(shim, "cuDriverGetVersion");
  memcpy(&viaShim, &p, sizeof p);
  p = real ? dlsym(real, "cuDriverGetVersion") : NULL;
  memcpy(&direct, &p, sizeof p);
  if (!viaShim || !direct) {
    fprintf(stderr, "cushim_bench: no cuDriverGetVersion\n");
    return 2;
  }
  double d = ns_per_call(direct, iters), s = ns_per_call(viaShim, iters);
  mark(NULL);
  printf("CUSHIM overhead: cuDriverGetVersion direct %.1f ns/call, through the shim %.1f ns/call, overhead %.1f "
         "ns/call (best of 5 x %d calls; real %s)\n",
         d, s, s - d, iters, realName());
  return 0;
}

#endif /* CUSHIM_BENCH */
