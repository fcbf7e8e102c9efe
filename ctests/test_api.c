/* test_api.c: the non-collective surface of nccl.h and nccl_ce.h: layouts
 * and values, version, devices and the cecoll helpers, communicator
 * creation (ncclCommInitAll with a devlist, one thread initialising every
 * rank inside a group, one thread per rank, configs of several sizes,
 * non-blocking), finalize/destroy/abort, ncclCeInit/ncclCeFinalize,
 * ncclCeImplemented, windows and groups. Options: -r RANKS (see common.h). */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* ---- Layouts and values (checked by the compiler) ------------------------ */

_Static_assert(sizeof(ncclUniqueId) == 128 && NCCL_UNIQUE_ID_BYTES == 128, "ncclUniqueId");
_Static_assert(sizeof(ncclRedOp_t) == sizeof(int), "ncclRedOp_t is int-sized");
_Static_assert(sizeof(ncclDataType_t) == sizeof(int), "ncclDataType_t is int-sized");
_Static_assert(sizeof(ncclResult_t) == sizeof(int), "ncclResult_t is int-sized");
#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t is 80 bytes on LP64");
_Static_assert(offsetof(ncclConfig_t, magic) == 8 && offsetof(ncclConfig_t, version) == 12, "config header");
_Static_assert(offsetof(ncclConfig_t, blocking) == 16 && offsetof(ncclConfig_t, netName) == 32, "config");
_Static_assert(offsetof(ncclConfig_t, splitShare) == 40 && offsetof(ncclConfig_t, commName) == 48, "config");
_Static_assert(offsetof(ncclConfig_t, collnetEnable) == 56 && offsetof(ncclConfig_t, CTAPolicy) == 60, "config");
_Static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) == 76, "config tail");
_Static_assert(sizeof(ncclSimInfo_t) == 24, "ncclSimInfo_t");
#endif
_Static_assert(NCCL_VERSION_CODE == 22809 && NCCL_VERSION(2, 28, 9) == 22809, "version");
_Static_assert(NCCL_VERSION(2, 8, 4) == 2804, "old version scheme");
_Static_assert(NCCL_MAJOR == 2 && NCCL_MINOR == 28 && NCCL_PATCH == 9, "version parts");
_Static_assert(ncclSuccess == 0 && ncclInvalidArgument == 4 && ncclInvalidUsage == 5 && ncclInProgress == 7 &&
                   ncclNumResults == 8,
               "ncclResult_t");
_Static_assert(ncclSum == 0 && ncclAvg == 4 && ncclNumOps == 5 && ncclMaxRedOp == 0x7fffffff, "ncclRedOp_t");
_Static_assert(ncclChar == 0 && ncclUint8 == 1 && ncclInt == 2 && ncclUint32 == 3 && ncclInt64 == 4 &&
                   ncclUint64 == 5 && ncclHalf == 6 && ncclFloat == 7 && ncclDouble == 8 && ncclBfloat16 == 9 &&
                   ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11 && ncclNumTypes == 12,
               "ncclDataType_t");
_Static_assert(NCCL_WIN_DEFAULT == 0 && NCCL_WIN_COLL_SYMMETRIC == 1 && NCCL_WIN_REQUIRED_ALIGNMENT == 4096, "win");
_Static_assert(NCCL_CTA_POLICY_DEFAULT == 0 && NCCL_CTA_POLICY_EFFICIENCY == 1 && NCCL_CTA_POLICY_ZERO == 2, "cta");
_Static_assert(NCCL_SPLIT_NOCOLOR == -1 && NCCL_CONFIG_UNDEF_INT == INT_MIN, "undef");
_Static_assert(ncclFuncAllGather == 2 && ncclFuncAlltoAll == 8 && ncclFuncScatter == 9 && ncclFuncGather == 10 &&
                   ncclNumFuncs == 11,
               "ncclFunc_t");

static t_opts opts;

static void check_config_initializer(void) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  t_set_case("NCCL_CONFIG_INITIALIZER");
  EXPECT(c.size == sizeof(ncclConfig_t) && c.magic == 0xcafebeefu && c.version == 22809, "config header");
  EXPECT(c.blocking == INT_MIN && c.nvlinkCentricSched == INT_MIN && c.netName == NULL && c.commName == NULL,
         "config defaults");
}

/* ---- Version, devices, helpers ------------------------------------------- */

static void check_version_and_devices(void) {
  int v = 0, count = 0, dev;
  const char* backend = NULL;
  t_set_case("version and devices");
  EXPECT_RESULT(ncclGetVersion(&v), ncclSuccess);
  EXPECT(v == NCCL_VERSION_CODE && v >= 22800, "ncclGetVersion = %d", v);
  EXPECT_RESULT(pncclGetVersion(&v), ncclSuccess);
  EXPECT_RESULT(cecollGetBackend(&backend), ncclSuccess);
  EXPECT(backend && (!strcmp(backend, "host") || !strcmp(backend, "nvidia") || !strcmp(backend, "amd")),
         "backend %s", backend ? backend : "(null)");
  const char* own = NULL;
  int major = -1, minor = -1, patch = -1, end = 0;
  EXPECT_RESULT(cecollGetVersion(&own), ncclSuccess);
  EXPECT(own && sscanf(own, "%d.%d.%d%n", &major, &minor, &patch, &end) == 3 && own[end] == '\0',
         "cecollGetVersion = %s, not MAJOR.MINOR.PATCH", own ? own : "(null)");
  EXPECT_RESULT(cecollGetVersion(NULL), ncclInvalidArgument);
  EXPECT_RESULT(cecollGetDeviceCount(&count), ncclSuccess);
  EXPECT(count >= 1, "device count %d", count);
  for (dev = 0; dev < count; dev++) EXPECT_RESULT(cecollSetDevice(dev), ncclSuccess);
  EXPECT(cecollSetDevice(count) != ncclSuccess, "cecollSetDevice(%d) of %d devices accepted", count, count);
  EXPECT(cecollSetDevice(-1) != ncclSuccess, "cecollSetDevice(-1) accepted");
  CHECK(cecollSetDevice(0));
}

static void* worker_device(void* p) {
  /* A thread that never set a device is on device 0: a 1-rank communicator
   * made here reports device 0. */
  ncclComm_t comm = NULL;
  ncclUniqueId id;
  int* dev = (int*)p;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRank(&comm, 1, id, 0));
  CHECK(ncclCommCuDevice(comm, dev));
  CHECK(ncclCommDestroy(comm));
  return NULL;
}

static void check_default_device(void) {
  pthread_t th;
  int dev = -1, count = 0;
  t_set_case("default device of a new thread");
  CHECK(cecollGetDeviceCount(&count));
  CHECK(cecollSetDevice(count - 1)); /* this thread's choice must not leak */
  REQUIRE(pthread_create(&th, NULL, worker_device, &dev) == 0);
  REQUIRE(pthread_join(th, NULL) == 0);
  EXPECT(dev == 0, "a fresh thread's communicator is on device %d", dev);
  CHECK(cecollSetDevice(0));
}

static void check_helpers(void) {
  enum { N = 10000 };
  unsigned char in[N], out[N];
  void *a = NULL, *b = NULL;
  cudaStream_t s1, s2;
  cecollEvent_t e1, e2;
  cecollGraph_t g;
  float ms = -1;
  uint64_t rng = 42;
  t_set_case("cecoll helpers");
  t_fill_random(in, N, &rng);
  CHECK(cecollSetDevice(0));
  CHECK(ncclMemAlloc(&a, N));
  CHECK(ncclMemAlloc(&b, N));
  EXPECT_RESULT(cecollMemcpy(a, in, N), ncclSuccess);
  EXPECT_RESULT(cecollMemcpy(b, a, N), ncclSuccess);
  EXPECT_RESULT(cecollMemcpy(out, b, N), ncclSuccess);
  EXPECT(memcmp(in, out, N) == 0, "host->device->device->host copy changed the bytes");
  EXPECT_RESULT(cecollMemset(b, 0x3c, N / 2), ncclSuccess);
  CHECK(cecollMemcpy(out, b, N));
  EXPECT(out[0] == 0x3c && out[N / 2 - 1] == 0x3c && out[N / 2] == in[N / 2], "cecollMemset wrote the wrong bytes");
  EXPECT_RESULT(cecollMemcpy(a, a, 0), ncclSuccess);

  CHECK(cecollStreamCreate(&s1));
  CHECK(cecollStreamCreate(&s2));
  EXPECT(s1 != NULL && s1 != s2, "streams not distinct");
  /* cecollMemcpyAsync: stream-ordered device-to-device copies. */
  CHECK(cecollMemcpy(a, in, N));
  EXPECT_RESULT(cecollMemcpyAsync(b, a, N / 2, s1), ncclSuccess);
  EXPECT_RESULT(cecollMemcpyAsync((char*)b + N / 2, (char*)a + N / 2, N - N / 2, s1), ncclSuccess);
  EXPECT_RESULT(cecollMemcpyAsync(b, a, 0, s1), ncclSuccess);
  EXPECT_RESULT(cecollMemcpyAsync(NULL, a, N, s1), ncclInvalidArgument);
  CHECK(cecollStreamSynchronize(s1));
  CHECK(cecollMemcpy(out, b, N));
  EXPECT(memcmp(in, out, N) == 0, "cecollMemcpyAsync changed the bytes");
  CHECK(cecollEventCreate(&e1));
  CHECK(cecollEventCreate(&e2));
  EXPECT_RESULT(cecollEventRecord(e1, s1), ncclSuccess);
  EXPECT_RESULT(cecollStreamWaitEvent(s2, e1), ncclSuccess);
  EXPECT_RESULT(cecollEventRecord(e2, s2), ncclSuccess);
  EXPECT_RESULT(cecollEventSynchronize(e2), ncclSuccess);
  EXPECT_RESULT(cecollEventElapsedTime(&ms, e1, e2), ncclSuccess);
  EXPECT(ms >= 0.0f, "elapsed time %f ms", (double)ms);
  EXPECT_RESULT(cecollStreamSynchronize(s1), ncclSuccess);

  /* An empty capture still gives a launchable graph. */
  EXPECT_RESULT(cecollStreamBeginCapture(s1), ncclSuccess);
  EXPECT_RESULT(cecollStreamEndCapture(s1, &g), ncclSuccess);
  EXPECT_RESULT(cecollGraphLaunch(g, s1), ncclSuccess);
  EXPECT_RESULT(cecollGraphLaunch(g, s1), ncclSuccess);
  EXPECT_RESULT(cecollStreamSynchronize(s1), ncclSuccess);
  EXPECT_RESULT(cecollGraphDestroy(g), ncclSuccess);

  EXPECT_RESULT(cecollEventDestroy(e1), ncclSuccess);
  EXPECT_RESULT(cecollEventDestroy(e2), ncclSuccess);
  EXPECT_RESULT(cecollStreamDestroy(s1), ncclSuccess);
  EXPECT_RESULT(cecollStreamDestroy(s2), ncclSuccess);
  CHECK(ncclMemFree(a));
  CHECK(ncclMemFree(b));
}

/* ---- Communicators -------------------------------------------------------- */

/* Count, rank and device of every rank of w. */
static void check_identity(const t_world* w, const char* how) {
  for (int r = 0; r < w->n; r++) {
    int count = -1, rank = -1, dev = -1;
    EXPECT_RESULT(ncclCommCount(w->comm[r], &count), ncclSuccess);
    EXPECT_RESULT(ncclCommUserRank(w->comm[r], &rank), ncclSuccess);
    EXPECT_RESULT(ncclCommCuDevice(w->comm[r], &dev), ncclSuccess);
    EXPECT(count == w->n && rank == r && dev == w->dev[r], "%s rank %d: count %d rank %d device %d, want %d %d %d", how,
           r, count, rank, dev, w->n, r, w->dev[r]);
  }
}

/* A small AllGather proves a communicator works. */
static void smoke(t_world* w, uint64_t seed) {
  t_coll c;
  memset(&c, 0, sizeof c);
  c.func = ncclFuncAllGather;
  c.dtype = ncclInt32;
  c.count = 17;
  c.iters = 1;
  c.seed = seed;
  t_coll_run(w, &c);
}

static void check_init_all(void) {
  for (int i = 0; i < opts.nranks; i++) {
    t_world w;
    int n = opts.ranks[i];
    t_set_case("ncclCommInitAll n=%d", n);
    t_world_init_all(&w, n, NULL);
    check_identity(&w, "InitAll");
    smoke(&w, 100 + n);
    t_world_destroy(&w);
  }
  {
    /* One device for every rank, then a devlist in reverse order. */
    t_world w;
    int devs[4], count = 0;
    CHECK(cecollGetDeviceCount(&count));
    for (int r = 0; r < 4; r++) devs[r] = t_device_for(0);
    t_set_case("ncclCommInitAll devlist {0,0,0,0}");
    t_world_init_all(&w, 4, devs);
    check_identity(&w, "InitAll same device");
    smoke(&w, 7);
    t_world_destroy(&w);
    for (int r = 0; r < 4; r++) devs[r] = (count - 1 - r % count + count) % count;
    t_set_case("ncclCommInitAll devlist reversed");
    t_world_init_all(&w, 4, devs);
    check_identity(&w, "InitAll reversed");
    smoke(&w, 8);
    t_world_destroy(&w);
  }
}

/* One thread, n ranks: ncclGetUniqueId, then ncclCommInitRank for each rank
 * inside one group, each on its device. */
static void check_init_rank_grouped(void) {
  for (int i = 0; i < opts.nranks; i++) {
    t_world w;
    ncclUniqueId id;
    int n = opts.ranks[i];
    t_set_case("grouped ncclCommInitRank n=%d", n);
    memset(&w, 0, sizeof w);
    w.n = n;
    CHECK(ncclGetUniqueId(&id));
    CHECK(ncclGroupStart());
    for (int r = 0; r < n; r++) {
      w.dev[r] = t_device_for(r);
      CHECK(cecollSetDevice(w.dev[r]));
      CHECK(ncclCommInitRank(&w.comm[r], n, id, r));
    }
    EXPECT_RESULT(ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < n; r++) {
      CHECK(cecollSetDevice(w.dev[r]));
      CHECK(cecollStreamCreate(&w.stream[r]));
    }
    check_identity(&w, "grouped InitRank");
    smoke(&w, 200 + n);
    t_world_destroy(&w);
  }
}

static void check_init_rank_threads(void) {
  for (int i = 0; i < opts.nranks; i++) {
    t_world w;
    int n = opts.ranks[i];
    t_set_case("ncclCommInitRank, one thread per rank, n=%d", n);
    t_world_init_threads(&w, n);
    check_identity(&w, "threaded InitRank");
    smoke(&w, 300 + n);
    t_world_destroy(&w);
  }
}

/* A config the size of an older header (ending at CTAPolicy, as 2.27's
 * did), the current one, and one from a newer header with fields this
 * library does not know: each is read up to its own size. */
typedef struct {
  ncclConfig_t base;
  int future[6];
} newer_config;

static ncclResult_t init_one(ncclComm_t* comm, ncclConfig_t* config) {
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  return ncclCommInitRankConfig(comm, 1, id, 0, config);
}

static void wait_ready(ncclComm_t comm) {
  ncclResult_t st = ncclInProgress;
  for (int i = 0; i < 20000 && st == ncclInProgress; i++) {
    CHECK(ncclCommGetAsyncError(comm, &st));
    if (st == ncclInProgress) usleep(500);
  }
  EXPECT(st == ncclSuccess, "non-blocking communicator state %d (%s)", (int)st, ncclGetErrorString(st));
}

static void check_config(void) {
  ncclComm_t comm;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  newer_config nc;
  int rank = -1;

  t_set_case("config NULL");
  EXPECT_RESULT(init_one(&comm, NULL), ncclSuccess);
  CHECK(ncclCommDestroy(comm));

  t_set_case("config 2.28 (%zu bytes)", sizeof c);
  c.commName = "cecoll-test";
  c.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  EXPECT_RESULT(init_one(&comm, &c), ncclSuccess);
  CHECK(ncclCommDestroy(comm));

  t_set_case("config of an older header (size %zu)", offsetof(ncclConfig_t, shrinkShare));
  c = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  c.size = offsetof(ncclConfig_t, shrinkShare);
  c.version = 22703;
  c.shrinkShare = 12345; /* beyond its size: must be ignored */
  EXPECT_RESULT(init_one(&comm, &c), ncclSuccess);
  CHECK(ncclCommDestroy(comm));

  t_set_case("config of a newer header (size %zu)", sizeof nc);
  memset(&nc, 0x7f, sizeof nc);
  nc.base = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  nc.base.size = sizeof nc;
  nc.base.version = 22900;
  EXPECT_RESULT(init_one(&comm, &nc.base), ncclSuccess);
  CHECK(ncclCommDestroy(comm));

  t_set_case("config blocking=0");
  c = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  {
    ncclResult_t r = init_one(&comm, &c);
    EXPECT(r == ncclSuccess || r == ncclInProgress, "non-blocking init -> %d (%s)", (int)r, ncclGetErrorString(r));
    if (r == ncclSuccess || r == ncclInProgress) {
      wait_ready(comm);
      EXPECT_RESULT(ncclCommUserRank(comm, &rank), ncclSuccess);
      EXPECT(rank == 0, "rank %d", rank);
      CHECK(ncclCommDestroy(comm));
    }
  }

  t_set_case("config blocking=1");
  c = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  c.blocking = 1;
  EXPECT_RESULT(init_one(&comm, &c), ncclSuccess);
  CHECK(ncclCommDestroy(comm));

  t_set_case("ncclCommInitRankScalable, one id");
  {
    ncclUniqueId ids[1];
    ncclResult_t r;
    CHECK(ncclGetUniqueId(&ids[0]));
    c = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    comm = NULL;
    r = ncclCommInitRankScalable(&comm, 1, 0, 1, ids, &c);
    EXPECT(r == ncclSuccess, "ncclCommInitRankScalable(nId=1) -> %d: %s", (int)r, ncclGetLastError(NULL));
    if (r == ncclSuccess) CHECK(ncclCommDestroy(comm));
  }
}

static void check_finalize_destroy_abort(void) {
  t_world w;
  int n = 2;
  t_set_case("finalize then destroy");
  t_world_init_all(&w, n, NULL);
  smoke(&w, 11);
  for (int r = 0; r < n; r++) CHECK(cecollStreamDestroy(w.stream[r]));
  CHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) EXPECT_RESULT(ncclCommFinalize(w.comm[r]), ncclSuccess);
  CHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) EXPECT_RESULT(ncclCommDestroy(w.comm[r]), ncclSuccess);

  t_set_case("destroy without finalize");
  t_world_init_all(&w, n, NULL);
  smoke(&w, 12);
  for (int r = 0; r < n; r++) {
    CHECK(cecollStreamDestroy(w.stream[r]));
    EXPECT_RESULT(ncclCommDestroy(w.comm[r]), ncclSuccess);
  }

  t_set_case("abort idle communicators");
  t_world_init_all(&w, n, NULL);
  smoke(&w, 13);
  for (int r = 0; r < n; r++) {
    CHECK(cecollStreamDestroy(w.stream[r]));
    EXPECT_RESULT(ncclCommAbort(w.comm[r]), ncclSuccess);
  }
}

/* Rank 0 calls an AllGather that rank 1 never joins, so its stream waits
 * on a flag that never comes; abort must release it. */
static void check_abort_releases_waits(void) {
  t_world w;
  void *send, *recv;
  t_set_case("abort a communicator whose peer never joins");
  t_world_init_threads(&w, 2);
  CHECK(cecollSetDevice(w.dev[0]));
  CHECK(ncclMemAlloc(&send, 4096));
  CHECK(ncclMemAlloc(&recv, 8192));
  EXPECT_RESULT(ncclAllGather(send, recv, 64, ncclInt8, w.comm[0], w.stream[0]), ncclSuccess);
  for (int r = 0; r < 2; r++) EXPECT_RESULT(ncclCommAbort(w.comm[r]), ncclSuccess);
  /* The stream must drain (its result is the backend's to report). */
  (void)cecollStreamSynchronize(w.stream[0]);
  t_passed++;
  for (int r = 0; r < 2; r++) CHECK(cecollStreamDestroy(w.stream[r]));
  CHECK(ncclMemFree(send));
  CHECK(ncclMemFree(recv));
}

/* ---- CE entry points ----------------------------------------------------- */

static void check_ce_init_finalize(void) {
  t_world w;
  int n = 3;
  t_set_case("ncclCeInit after creation is a no-op");
  t_world_init_all(&w, n, NULL);
  /* Not grouped, one thread: it must not wait for the peers. */
  for (int r = 0; r < n; r++) EXPECT_RESULT(ncclCeInit(w.comm[r]), ncclSuccess);
  smoke(&w, 21);

  t_set_case("ncclCeFinalize twice, then ncclCeInit again");
  for (int r = 0; r < n; r++) {
    EXPECT_RESULT(ncclCeFinalize(w.comm[r]), ncclSuccess);
    EXPECT_RESULT(ncclCeFinalize(w.comm[r]), ncclSuccess);
  }
  CHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) EXPECT_RESULT(ncclCeInit(w.comm[r]), ncclSuccess);
  CHECK(ncclGroupEnd());
  smoke(&w, 22);
  t_world_destroy(&w);
}

static void ce_reinit_rank(int r, void* p) {
  t_world* w = (t_world*)p;
  EXPECT_RESULT(ncclCeInit(w->comm[r]), ncclSuccess);
}

static void check_ce_reinit_threads(void) {
  t_world w;
  t_set_case("ncclCeFinalize + ncclCeInit, one thread per rank");
  t_world_init_threads(&w, 3);
  for (int r = 0; r < 3; r++) EXPECT_RESULT(ncclCeFinalize(w.comm[r]), ncclSuccess);
  t_run_threads(&w, ce_reinit_rank, &w);
  smoke(&w, 23);
  t_world_destroy(&w);
}

static void check_ce_implemented(void) {
  static const ncclFunc_t ce[] = {ncclFuncBroadcast, ncclFuncAllGather, ncclFuncAlltoAll, ncclFuncScatter, ncclFuncGather};
  static const ncclFunc_t reducing[] = {ncclFuncReduce, ncclFuncAllReduce, ncclFuncReduceScatter};
  int count = 0;
  CHECK(cecollGetDeviceCount(&count));
  for (int dev = 0; dev < count && dev < 2; dev++) {
    CHECK(cecollSetDevice(dev));
    t_set_case("ncclCeImplemented on device %d", dev);
    for (size_t f = 0; f < sizeof ce / sizeof ce[0]; f++)
      for (int t = 0; t < ncclNumTypes; t++)
        EXPECT(ncclCeImplemented(ce[f], 0, (ncclDataType_t)t) == 1, "%s %s not implemented", t_func_name(ce[f]),
               t_type_name((ncclDataType_t)t));
    for (size_t f = 0; f < sizeof reducing / sizeof reducing[0]; f++)
      EXPECT(ncclCeImplemented(reducing[f], ncclSum, ncclFloat32) == 0, "%s claimed", t_func_name(reducing[f]));
    EXPECT(ncclCeImplemented(ncclFuncAllGather, 0, ncclNumTypes) == 0, "unknown datatype claimed");
    EXPECT(ncclCeImplemented(ncclFuncAllGather, 0, (ncclDataType_t)-1) == 0, "datatype -1 claimed");
    EXPECT(ncclCeImplemented(ncclNumFuncs, 0, ncclInt8) == 0, "ncclNumFuncs claimed");
    EXPECT(ncclCeImplemented((ncclFunc_t)-1, 0, ncclInt8) == 0, "func -1 claimed");
  }
  CHECK(cecollSetDevice(0));
}

/* ---- Windows ------------------------------------------------------------- */

static void check_windows(void) {
  t_world w;
  int n = 2;
  void* buf[2];
  ncclWindow_t win[2], win2[2];
  t_set_case("window register/deregister");
  t_world_init_all(&w, n, NULL);
  for (int r = 0; r < n; r++) {
    CHECK(cecollSetDevice(w.dev[r]));
    CHECK(ncclMemAlloc(&buf[r], 1 << 20));
  }
  CHECK(ncclGroupStart());
  for (int r = 0; r < n; r++)
    EXPECT_RESULT(ncclCommWindowRegister(w.comm[r], buf[r], 1 << 20, &win[r], NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  CHECK(ncclGroupEnd());
  EXPECT(win[0] != NULL && win[1] != NULL && win[0] != win[1], "window handles");

  /* A second window, on another allocation, beside the first. */
  t_set_case("window register, NCCL_WIN_DEFAULT, second buffer");
  {
    void* b2[2];
    for (int r = 0; r < n; r++) {
      CHECK(cecollSetDevice(w.dev[r]));
      CHECK(ncclMemAlloc(&b2[r], 8192));
    }
    CHECK(ncclGroupStart());
    for (int r = 0; r < n; r++)
      EXPECT_RESULT(ncclCommWindowRegister(w.comm[r], b2[r], 8192, &win2[r], NCCL_WIN_DEFAULT), ncclSuccess);
    CHECK(ncclGroupEnd());
    for (int r = 0; r < n; r++) {
      EXPECT_RESULT(ncclCommWindowDeregister(w.comm[r], win2[r]), ncclSuccess);
      CHECK(ncclMemFree(b2[r]));
    }
  }
  smoke(&w, 31);
  for (int r = 0; r < n; r++) EXPECT_RESULT(ncclCommWindowDeregister(w.comm[r], win[r]), ncclSuccess);

  /* Registering again after deregistration works. */
  t_set_case("window register again after deregister");
  CHECK(ncclGroupStart());
  for (int r = 0; r < n; r++)
    EXPECT_RESULT(ncclCommWindowRegister(w.comm[r], buf[r], 1 << 20, &win[r], NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  CHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) EXPECT_RESULT(ncclCommWindowDeregister(w.comm[r], win[r]), ncclSuccess);
  for (int r = 0; r < n; r++) CHECK(ncclMemFree(buf[r]));
  t_world_destroy(&w);
}

/* ---- Groups ---------------------------------------------------------------- */

/* Nested groups, and two collectives per rank in one group: both land. */
static void check_groups(void) {
  enum { N = 2, CNT = 300 };
  t_world w;
  void *s1[N], *r1[N], *s2[N], *r2[N];
  int in1[N][CNT], in2[N][CNT], out[N * CNT];
  uint64_t rng = 99;
  t_set_case("nested group with two AllGathers per rank");
  t_world_init_all(&w, N, NULL);
  t_fill_random(in1, sizeof in1, &rng);
  t_fill_random(in2, sizeof in2, &rng);
  for (int r = 0; r < N; r++) {
    CHECK(cecollSetDevice(w.dev[r]));
    CHECK(ncclMemAlloc(&s1[r], sizeof in1[r]));
    CHECK(ncclMemAlloc(&s2[r], sizeof in2[r]));
    CHECK(ncclMemAlloc(&r1[r], sizeof out));
    CHECK(ncclMemAlloc(&r2[r], sizeof out));
    CHECK(cecollMemcpy(s1[r], in1[r], sizeof in1[r]));
    CHECK(cecollMemcpy(s2[r], in2[r], sizeof in2[r]));
  }
  CHECK(ncclGroupStart());
  CHECK(ncclGroupStart());
  for (int r = 0; r < N; r++)
    EXPECT_RESULT(ncclAllGather(s1[r], r1[r], CNT, ncclInt32, w.comm[r], w.stream[r]), ncclSuccess);
  CHECK(ncclGroupEnd()); /* inner end: nothing runs yet */
  for (int r = 0; r < N; r++)
    EXPECT_RESULT(ncclAllGather(s2[r], r2[r], CNT, ncclInt32, w.comm[r], w.stream[r]), ncclSuccess);
  CHECK(ncclGroupEnd());
  for (int r = 0; r < N; r++) {
    CHECK(cecollStreamSynchronize(w.stream[r]));
    CHECK(cecollMemcpy(out, r1[r], sizeof out));
    EXPECT(t_compare(out, in1, sizeof out, "first AllGather") == 0, "rank %d first AllGather", r);
    CHECK(cecollMemcpy(out, r2[r], sizeof out));
    EXPECT(t_compare(out, in2, sizeof out, "second AllGather") == 0, "rank %d second AllGather", r);
    CHECK(ncclMemFree(s1[r]));
    CHECK(ncclMemFree(s2[r]));
    CHECK(ncclMemFree(r1[r]));
    CHECK(ncclMemFree(r2[r]));
  }
  t_set_case("empty group");
  EXPECT_RESULT(ncclGroupStart(), ncclSuccess);
  EXPECT_RESULT(ncclGroupEnd(), ncclSuccess);
  t_world_destroy(&w);
}

/* Two collectives of one communicator issued back to back on different
 * streams, with no wait between them, share its sync window: cecoll orders
 * the second after the first (B19). Group mode and one thread per rank. */
enum { ORD_N = 3, ORD_CNT = 4096, ORD_CALLS = 4 };

typedef struct {
  t_world* w;
  cudaStream_t s2[ORD_N];
  void* send[ORD_CALLS][ORD_N];
  void* recv[ORD_CALLS][ORD_N];
} order_state;

static cudaStream_t order_stream(order_state* o, int call, int r) {
  return (call % 2) ? o->s2[r] : o->w->stream[r];
}

static void order_rank(int r, void* p) {
  order_state* o = (order_state*)p;
  for (int k = 0; k < ORD_CALLS; k++)
    CHECK(ncclAllGather(o->send[k][r], o->recv[k][r], ORD_CNT, ncclUint8, o->w->comm[r], order_stream(o, k, r)));
}

static void check_ordering_across_streams(void) {
  for (int threaded = 0; threaded < 2; threaded++) {
    t_world w;
    order_state o;
    static unsigned char in[ORD_CALLS][ORD_N][ORD_CNT], out[ORD_N * ORD_CNT];
    uint64_t rng = 77 + threaded;
    t_set_case("B19: %d AllGathers on alternating streams (%s)", ORD_CALLS, threaded ? "threads" : "group");
    if (threaded)
      t_world_init_threads(&w, ORD_N);
    else
      t_world_init_all(&w, ORD_N, NULL);
    memset(&o, 0, sizeof o);
    o.w = &w;
    t_fill_random(in, sizeof in, &rng);
    for (int r = 0; r < ORD_N; r++) {
      CHECK(cecollSetDevice(w.dev[r]));
      CHECK(cecollStreamCreate(&o.s2[r]));
      for (int k = 0; k < ORD_CALLS; k++) {
        CHECK(ncclMemAlloc(&o.send[k][r], ORD_CNT));
        CHECK(ncclMemAlloc(&o.recv[k][r], sizeof out));
        CHECK(cecollMemcpy(o.send[k][r], in[k][r], ORD_CNT));
        CHECK(cecollMemset(o.recv[k][r], T_POISON, sizeof out));
      }
    }
    if (threaded) {
      t_run_threads(&w, order_rank, &o);
    } else {
      for (int k = 0; k < ORD_CALLS; k++) {
        CHECK(ncclGroupStart());
        for (int r = 0; r < ORD_N; r++)
          CHECK(ncclAllGather(o.send[k][r], o.recv[k][r], ORD_CNT, ncclUint8, w.comm[r], order_stream(&o, k, r)));
        CHECK(ncclGroupEnd());
      }
    }
    for (int r = 0; r < ORD_N; r++) {
      CHECK(cecollStreamSynchronize(o.s2[r]));
      CHECK(cecollStreamSynchronize(w.stream[r]));
    }
    for (int k = 0; k < ORD_CALLS; k++) {
      for (int r = 0; r < ORD_N; r++) {
        char what[64];
        CHECK(cecollMemcpy(out, o.recv[k][r], sizeof out));
        snprintf(what, sizeof what, "call %d rank %d", k, r);
        EXPECT(t_compare(out, in[k], sizeof out, what) == 0, "%s wrong", what);
      }
    }
    for (int r = 0; r < ORD_N; r++) {
      for (int k = 0; k < ORD_CALLS; k++) {
        CHECK(ncclMemFree(o.send[k][r]));
        CHECK(ncclMemFree(o.recv[k][r]));
      }
      CHECK(cecollStreamDestroy(o.s2[r]));
    }
    t_world_destroy(&w);
  }
}

/* Each group of checks runs in its own process (posix_spawn of this
 * program with -X NAME) under its own watchdog, so a hang or a crash in one
 * is reported and the others still run. -X NAME runs one group in-process. */
typedef struct {
  const char* name;
  void (*fn)(void);
} check_group;

static const check_group groups[] = {
    {"config_initializer", check_config_initializer},
    {"version_and_devices", check_version_and_devices},
    {"default_device", check_default_device},
    {"helpers", check_helpers},
    {"init_all", check_init_all},
    {"init_rank_grouped", check_init_rank_grouped},
    {"init_rank_threads", check_init_rank_threads},
    {"config", check_config},
    {"finalize_destroy_abort", check_finalize_destroy_abort},
    {"abort_releases_waits", check_abort_releases_waits},
    {"ce_init_finalize", check_ce_init_finalize},
    {"ce_reinit_threads", check_ce_reinit_threads},
    {"ce_implemented", check_ce_implemented},
    {"windows", check_windows},
    {"groups", check_groups},
    {"ordering_across_streams", check_ordering_across_streams},
};

static int run_group(const char* name) {
  for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
    if (strcmp(groups[i].name, name) == 0) {
      t_set_case("%s", name);
      groups[i].fn();
      return 1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  const char* only = NULL;
  char watchdog[64];
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "-X") == 0) only = argv[i + 1];
  t_parse(&opts, argc, argv);
  if (only) {
    t_watchdog(600);
    if (!run_group(only)) t_fatal_at(__FILE__, __LINE__, "no check group %s", only);
    return t_report(argv[0]);
  }
  /* Children get a share of the time the runner gives this program. */
  snprintf(watchdog, sizeof watchdog, "CECOLL_TEST_WATCHDOG=%d",
           getenv("CECOLL_TEST_CHILD_WATCHDOG") ? atoi(getenv("CECOLL_TEST_CHILD_WATCHDOG")) : 30);
  t_watchdog(0);
  for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
    char* env[] = {watchdog, NULL};
    char* args[T_MAX_LIST + 8];
    int na = 0, rc;
    if (t_skipped(groups[i].name)) continue;
    args[na++] = "-X";
    args[na++] = (char*)groups[i].name;
    for (int k = 1; k < argc && na < (int)(sizeof args / sizeof args[0]) - 1; k++) args[na++] = argv[k];
    args[na] = NULL;
    t_set_case("%s", groups[i].name);
    printf("== %s\n", groups[i].name);
    fflush(stdout);
    rc = t_spawn_self(argv[0], env, args);
    EXPECT(rc == 0, "check group %s exited with %d (%s)", groups[i].name, rc,
           rc == 3 ? "hung: watchdog" : rc < 0 ? "crashed" : "failures above");
  }
  return t_report(argv[0]);
}
