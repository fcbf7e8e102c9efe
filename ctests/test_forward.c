/*
 * test_forward.c: cecoll in forward mode, in front of the fake "real NCCL"
 * of ctests/fake-nccl (libnccl.so.2), on the host device. run.sh runs it
 * three ways, the same checks each time:
 *   lib      linked to cecoll, CECOLL_NCCL_LIB naming the fake;
 *   preload  linked to the fake, LD_PRELOAD=libcecoll.so;
 *   dropin   linked to the fake, cecoll installed as libnccl.so.2 in a
 *            directory before the fake's on LD_LIBRARY_PATH.
 * So it links to one library only and reaches the cecoll* helpers by
 * dlsym. run.sh sets CECOLL_ROUTE_BYTES=4K: 1 KiB blocks go to the fake,
 * 8 KiB ones to the copy engines. The fake logs every call it receives
 * (FAKE_NCCL_LOG); the checks read that log.
 *
 * Cases: the version; ncclCommInitAll, whose fake calls its own
 * ncclGetUniqueId/GroupStart/CommInitRank/GroupEnd (they must reach the
 * fake); routing by size, window and CTA policy; forwarded reductions,
 * Reduce with the communicator on the stack, Send/Recv, stubs that swap a
 * window; groups mixing both, and data passing between them on a stream;
 * registration with both; NCCL's device API (ncclDevCommCreate/Destroy,
 * ncclTeamWorld's struct returned by value, a function the fake lacks
 * refused with a zeroed team); config pass-through and non-blocking init;
 * split; finalize, destroy and abort reaching the fake; errors from
 * either side; a forked child refused; and, between processes: pairing, two processes on one
 * device (the fake refuses the layout: CE-only, the rest refused with its
 * reason), ranks that disagree on CECOLL_ROUTE, and one hardware queue
 * (CECOLL_HOST_QUEUES=1, CECOLL_ROUTE=ce): every call forwarded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "fake-nccl/devapi.h"

/* NCCL 2.29+ functions cecoll forwards (include/nccl.h is 2.28's). */
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** out);

/* NCCL 2.31's per-collective config, as its header lays it out. The fake
 * lacks the nccl*Config calls, so the test reaches cecoll's by dlsym. */
struct ncclCollConfig_v23100 {
  size_t size;
  unsigned int magic, version;
  void* ext;
  int minCTAs, maxCTAs, nvlsCTAs, cgaClusterSize;
  const char* algSelection;
  int forceAlgSelection, CTAPolicy;
  uint64_t userProfilerTag;
};
typedef ncclResult_t (*allgather_config_fn)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t,
                                            const struct ncclCollConfig_v23100*);

extern char** environ;

/* ---- reporting ------------------------------------------------------------- */

static int passed, failed;
static char case_name[128] = "start";

#define EXPECT(cond, ...)                                                \
  do {                                                                   \
    if (cond) {                                                          \
      passed++;                                                          \
    } else {                                                             \
      failed++;                                                          \
      fprintf(stderr, "FAIL %s:%d [%s] ", __FILE__, __LINE__, case_name); \
      fprintf(stderr, __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                             \
    }                                                                    \
  } while (0)
#define EXPECT_OK(call) EXPECT_RES(call, ncclSuccess)
#define EXPECT_RES(call, want)                                                                       \
  do {                                                                                               \
    ncclResult_t r_ = (call);                                                                        \
    EXPECT(r_ == (want), "%s -> %d, want %d: %s", #call, (int)r_, (int)(want), ncclGetLastError(NULL)); \
  } while (0)
#define REQUIRE_OK(call)                                                                        \
  do {                                                                                          \
    ncclResult_t r_ = (call);                                                                   \
    if (r_ != ncclSuccess) {                                                                    \
      fprintf(stderr, "FATAL %s:%d [%s] %s -> %d: %s\n", __FILE__, __LINE__, case_name, #call, (int)r_, \
              ncclGetLastError(NULL));                                                          \
      exit(2);                                                                                  \
    }                                                                                           \
  } while (0)

static void set_case(const char* name) {
  snprintf(case_name, sizeof case_name, "%s", name);
  if (getenv("CECOLL_TEST_VERBOSE")) fprintf(stderr, "case %s\n", name);
}

static void on_alarm(int sig) {
  (void)sig;
  fprintf(stderr, "FAIL [%s] watchdog: hung\n", case_name);
  _exit(3);
}

/* ---- the cecoll helpers, by dlsym ------------------------------------------- */

static ncclResult_t (*cSetDevice)(int);
static ncclResult_t (*cStreamCreate)(cudaStream_t*);
static ncclResult_t (*cStreamSynchronize)(cudaStream_t);
static ncclResult_t (*cStreamDestroy)(cudaStream_t);

static void load_helpers(void) {
  *(void**)&cSetDevice = dlsym(RTLD_DEFAULT, "cecollSetDevice");
  *(void**)&cStreamCreate = dlsym(RTLD_DEFAULT, "cecollStreamCreate");
  *(void**)&cStreamSynchronize = dlsym(RTLD_DEFAULT, "cecollStreamSynchronize");
  *(void**)&cStreamDestroy = dlsym(RTLD_DEFAULT, "cecollStreamDestroy");
  if (!cSetDevice || !cStreamCreate || !cStreamSynchronize || !cStreamDestroy) {
    fprintf(stderr, "FATAL: cecoll's helpers are not loaded (is cecoll in front of the fake?)\n");
    exit(2);
  }
}

/* ---- the fake's log -------------------------------------------------------------- */

static char log_path[512];

static void log_reset(void) {
  FILE* f = fopen(log_path, "w");
  if (f) fclose(f);
}

/* Lines of the fake's log holding every one of the NULL-ended words. */
static int log_count(const char* first, ...) {
  FILE* f = fopen(log_path, "r");
  char line[1024];
  int n = 0;
  if (f == NULL) return 0;
  while (fgets(line, sizeof line, f)) {
    va_list ap;
    int all = 1;
    va_start(ap, first);
    for (const char* w = first; w; w = va_arg(ap, const char*)) all &= strstr(line, w) != NULL;
    va_end(ap);
    n += all;
  }
  fclose(f);
  return n;
}

/* ---- ranks of one process -------------------------------------------------------- */

#define N 2
#define SMALL 256  /* floats: 1 KiB blocks, below CECOLL_ROUTE_BYTES=4K */
#define LARGE 2048 /* floats: 8 KiB blocks, at and above it */

static ncclComm_t comms[N];
static cudaStream_t streams[N];
static float* bufs[N][4];

static void fill(float* p, size_t n, float v) {
  for (size_t i = 0; i < n; i++) p[i] = v + (float)i;
}

static int all_equal(const float* p, size_t n, float v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v + (float)i) return 0;
  return 1;
}

static void sync_all(void) {
  for (int r = 0; r < N; r++) REQUIRE_OK(cStreamSynchronize(streams[r]));
}

static void check_version(void) {
  int v = 0;
  set_case("version");
  EXPECT_OK(ncclGetVersion(&v));
  EXPECT(v == 23100, "ncclGetVersion gave %d: not the real library's 23100", v);
}

static void init_all(void) {
  int devs[N] = {0, 1};
  set_case("ncclCommInitAll");
  log_reset();
  REQUIRE_OK(ncclCommInitAll(comms, N, devs));
  EXPECT(log_count("InitAll n=", NULL) == 1, "the fake's ncclCommInitAll ran %d times", log_count("InitAll n=", NULL));
  /* Its own calls of its exported names reached it, not cecoll. */
  EXPECT(log_count("GetUniqueId", "via=InitAll", NULL) == 1, "its ncclGetUniqueId did not reach it");
  EXPECT(log_count("GroupStart", "via=InitAll", NULL) == 1, "its ncclGroupStart did not reach it");
  EXPECT(log_count("GroupEnd", "via=InitAll", NULL) == 1, "its ncclGroupEnd did not reach it");
  EXPECT(log_count("InitRank", "via=InitAll", NULL) == N, "its ncclCommInitRank reached it %d times of %d",
         log_count("InitRank", "via=InitAll", NULL), N);
  EXPECT(log_count("InitRank", "via=call", NULL) == 0, "cecoll made real communicators of its own");
  for (int r = 0; r < N; r++) {
    int v = -1;
    EXPECT_OK(ncclCommUserRank(comms[r], &v));
    EXPECT(v == r, "rank %d says %d", r, v);
    REQUIRE_OK(cSetDevice(r));
    REQUIRE_OK(cStreamCreate(&streams[r]));
    for (int b = 0; b < 4; b++) bufs[r][b] = calloc(N * LARGE, sizeof(float));
  }
}

/* One grouped call of every rank of a collective with blocks of count. */
enum { AG, A2A, AR, RED };
static ncclResult_t grouped(int what, size_t count, int in, int out) {
  ncclResult_t r = ncclGroupStart(), x;
  for (int k = 0; k < N; k++) {
    switch (what) {
    case AG: x = ncclAllGather(bufs[k][in], bufs[k][out], count, ncclFloat32, comms[k], streams[k]); break;
    case A2A: x = ncclAlltoAll(bufs[k][in], bufs[k][out], count, ncclFloat32, comms[k], streams[k]); break;
    case AR: x = ncclAllReduce(bufs[k][in], bufs[k][out], count, ncclFloat32, ncclSum, comms[k], streams[k]); break;
    default: x = ncclReduce(bufs[k][in], bufs[k][out], count, ncclFloat32, ncclSum, 0, comms[k], streams[k]); break;
    }
    if (r == ncclSuccess) r = x;
  }
  x = ncclGroupEnd();
  return r == ncclSuccess ? x : r;
}

static void check_allgather(size_t count, int forwarded) {
  log_reset();
  for (int r = 0; r < N; r++) fill(bufs[r][0], count, 100.0f * r);
  EXPECT_OK(grouped(AG, count, 0, 1));
  sync_all();
  for (int r = 0; r < N; r++)
    for (int p = 0; p < N; p++)
      EXPECT(all_equal(bufs[r][1] + p * count, count, 100.0f * p), "rank %d: block %d of %zu-float AllGather", r, p, count);
  EXPECT(log_count("AllGather", NULL) == (forwarded ? N : 0), "%zu-float AllGather: the fake ran %d calls, want %d",
         count, log_count("AllGather", NULL), forwarded ? N : 0);
}

static void check_routes(void) {
  set_case("forwarded AllReduce");
  log_reset();
  for (int r = 0; r < N; r++) fill(bufs[r][0], SMALL, (float)r);
  EXPECT_OK(grouped(AR, SMALL, 0, 1));
  sync_all();
  for (int r = 0; r < N; r++) {
    int ok = 1;
    for (int i = 0; i < SMALL; i++) ok &= bufs[r][1][i] == 1.0f + 2.0f * i;
    EXPECT(ok, "rank %d: AllReduce result", r);
  }
  EXPECT(log_count("AllReduce", NULL) == N, "the fake ran %d AllReduce calls", log_count("AllReduce", NULL));

  set_case("routing by size");
  check_allgather(SMALL, 1);
  check_allgather(LARGE, 0);
  log_reset();
  for (int r = 0; r < N; r++) fill(bufs[r][0], N * SMALL, 10.0f * r);
  EXPECT_OK(grouped(A2A, SMALL, 0, 1));
  sync_all();
  EXPECT(log_count("AlltoAll", NULL) == N, "small AlltoAll: the fake ran %d", log_count("AlltoAll", NULL));
  EXPECT(all_equal(bufs[1][1], SMALL, 10.0f * 0 + SMALL), "AlltoAll block 0 of rank 1");

  /* Reduce: the communicator is the 7th argument (on the stack on x86-64):
   * the stub swaps it there. */
  /* ncclAllGatherConfig: the call's CTA policy routes it (zero SMs: copy
   * engines); no config: the plain call; a config the real library cannot
   * take (it predates 2.31): refused. */
  set_case("ncclAllGatherConfig");
  allgather_config_fn agc = (allgather_config_fn)dlsym(RTLD_DEFAULT, "ncclAllGatherConfig");
  struct ncclCollConfig_v23100 cc = {sizeof cc, 0xcafebeef, 23100, NULL, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,
                                     NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NULL, 1, NCCL_CTA_POLICY_ZERO, 0};
  EXPECT(agc != NULL, "no ncclAllGatherConfig");
  if (agc != NULL) {
    const struct ncclCollConfig_v23100* cfgs[3] = {&cc, NULL, &cc};
    for (int i = 0; i < 3; i++) {
      if (i == 2) cc.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
      log_reset();
      ncclResult_t r = ncclGroupStart(), x;
      for (int k = 0; k < N; k++) {
        fill(bufs[k][0], SMALL, 5.0f * k);
        x = agc(bufs[k][0], bufs[k][1], SMALL, ncclFloat32, comms[k], streams[k], cfgs[i]);
        if (r == ncclSuccess) r = x;
      }
      x = ncclGroupEnd();
      if (r == ncclSuccess) r = x;
      sync_all();
      if (i < 2) {
        EXPECT(r == ncclSuccess, "config %d: %d %s", i, (int)r, ncclGetLastError(NULL));
        EXPECT(all_equal(bufs[0][1] + SMALL, SMALL, 5.0f), "config %d: data", i);
        EXPECT(log_count("AllGather", NULL) == (i == 0 ? 0 : N), "config %d: the fake ran %d AllGather", i,
               log_count("AllGather", NULL));
      } else {
        EXPECT(r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "has no ncclAllGatherConfig"),
               "a config the real library cannot take: %d %s", (int)r, ncclGetLastError(NULL));
      }
    }
  }

  set_case("Reduce through a stub");
  log_reset();
  for (int r = 0; r < N; r++) fill(bufs[r][0], SMALL, (float)r);
  EXPECT_OK(grouped(RED, SMALL, 0, 2));
  sync_all();
  EXPECT(bufs[0][2][3] == 1.0f + 6.0f, "Reduce at the root: %g", bufs[0][2][3]);
  EXPECT(log_count("Reduce ", NULL) == N, "the fake ran %d Reduce calls", log_count("Reduce ", NULL));

  /* Send/Recv route by the pair's bytes alone: small ones to the fake,
   * large ones to the copy engines, in one group, with an AllReduce. */
  set_case("Send/Recv by size, in one group");
  log_reset();
  for (int r = 0; r < N; r++) {
    fill(bufs[r][0], LARGE, 7.0f + 2.0f * r);
    fill(bufs[r][2], SMALL, 1.0f);
  }
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    EXPECT_OK(ncclSend(bufs[r][0], SMALL, ncclFloat32, 1 - r, comms[r], streams[r]));
    EXPECT_OK(ncclRecv(bufs[r][3], SMALL, ncclFloat32, 1 - r, comms[r], streams[r]));
    EXPECT_OK(ncclSend(bufs[r][0], LARGE, ncclFloat32, 1 - r, comms[r], streams[r]));
    EXPECT_OK(ncclRecv(bufs[r][1], LARGE, ncclFloat32, 1 - r, comms[r], streams[r]));
    EXPECT_OK(ncclAllReduce(bufs[r][2], bufs[r][2] + SMALL, SMALL, ncclFloat32, ncclSum, comms[r], streams[r]));
  }
  EXPECT_OK(ncclGroupEnd());
  sync_all();
  for (int r = 0; r < N; r++) {
    float peer = 7.0f + 2.0f * (1 - r);
    EXPECT(all_equal(bufs[r][3], SMALL, peer), "rank %d: small Recv data", r);
    EXPECT(all_equal(bufs[r][1], LARGE, peer), "rank %d: large Recv data", r);
    EXPECT(bufs[r][2][SMALL + 5] == 2.0f * (1.0f + 5.0f), "rank %d: the group's AllReduce", r);
  }
  EXPECT(log_count("Send", NULL) == N && log_count("Recv", NULL) == N,
         "the fake ran %d Send and %d Recv calls, want the %d small ones", log_count("Send", NULL),
         log_count("Recv", NULL), N);

  /* Alone: a send and its receive, each from its own rank's call. */
  set_case("Send/Recv alone, large");
  log_reset();
  fill(bufs[0][0], LARGE, 3.0f);
  EXPECT_OK(ncclSend(bufs[0][0], LARGE, ncclFloat32, 1, comms[0], streams[0]));
  EXPECT_OK(ncclRecv(bufs[1][1], LARGE, ncclFloat32, 0, comms[1], streams[1]));
  sync_all();
  EXPECT(all_equal(bufs[1][1], LARGE, 3.0f), "large Send alone: data");
  EXPECT(log_count("Send", NULL) == 0, "a large Send reached the fake");

  /* ncclAllToAllv routes pair by pair: the self pairs (large) on the copy
   * engines, the pairs between the ranks (small) through the fake, in one
   * call. */
  set_case("AllToAllv split pair by pair");
  log_reset();
  {
    /* NCCL has no ncclAllToAllv (RCCL's): the program linked to the fake
     * finds cecoll's at run time, as an RCCL program would. */
    typedef ncclResult_t a2av_t(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*,
                                ncclDataType_t, ncclComm_t, cudaStream_t);
    a2av_t* a2av = (a2av_t*)dlsym(RTLD_DEFAULT, "ncclAllToAllv");
    size_t sc[N][N], sd[N][N], rc[N][N], rd[N][N];
    for (int r = 0; r < N; r++) {
      for (int p = 0; p < N; p++) {
        sc[r][p] = rc[r][p] = p == r ? LARGE : SMALL;
        sd[r][p] = rd[r][p] = p == 0 ? 0 : LARGE; /* block 0 at 0, block 1 after LARGE */
      }
      fill(bufs[r][0], LARGE, 20.0f + r);
      fill(bufs[r][0] + LARGE, SMALL, 40.0f + r);
      fill(bufs[r][1], 2 * LARGE, 0.0f);
    }
    /* rank 0 sends its block for rank 1 from sd[0][1] = LARGE; rank 1 its
     * block for rank 0 from sd[1][0] = 0. */
    fill(bufs[1][0], SMALL, 50.0f);
    fill(bufs[1][0] + LARGE, LARGE, 21.0f);
    EXPECT(a2av != NULL, "ncclAllToAllv is not exported");
    if (a2av == NULL) return;
    EXPECT_OK(ncclGroupStart());
    for (int r = 0; r < N; r++)
      EXPECT_OK(a2av(bufs[r][0], sc[r], sd[r], bufs[r][1], rc[r], rd[r], ncclFloat32, comms[r], streams[r]));
    EXPECT_OK(ncclGroupEnd());
    sync_all();
    EXPECT(all_equal(bufs[0][1], LARGE, 20.0f), "rank 0: its own block");
    EXPECT(all_equal(bufs[0][1] + LARGE, SMALL, 50.0f), "rank 0: rank 1's block");
    EXPECT(all_equal(bufs[1][1], SMALL, 40.0f), "rank 1: rank 0's block");
    EXPECT(all_equal(bufs[1][1] + LARGE, LARGE, 21.0f), "rank 1: its own block");
    EXPECT(log_count("Send", NULL) == N && log_count("Recv", NULL) == N,
           "the fake ran %d Send and %d Recv calls, want the %d small pairs'", log_count("Send", NULL),
           log_count("Recv", NULL), N);
  }

  /* Broadcast routes as the four collectives do: a small one through the
   * fake, a large one on the copy engines. */
  set_case("Broadcast by size");
  log_reset();
  fill(bufs[1][0], LARGE, 9.0f);
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    EXPECT_OK(ncclBroadcast(bufs[r][0], bufs[r][1], LARGE, ncclFloat32, 1, comms[r], streams[r]));
    EXPECT_OK(ncclBroadcast(bufs[r][0], bufs[r][2], SMALL, ncclFloat32, 1, comms[r], streams[r]));
  }
  EXPECT_OK(ncclGroupEnd());
  sync_all();
  for (int r = 0; r < N; r++) {
    EXPECT(all_equal(bufs[r][1], LARGE, 9.0f), "rank %d: large Broadcast", r);
    EXPECT(all_equal(bufs[r][2], SMALL, 9.0f), "rank %d: small Broadcast", r);
  }
  EXPECT(log_count("Broadcast", NULL) == N, "the fake ran %d Broadcast calls, want the %d small ones",
         log_count("Broadcast", NULL), N);

  set_case("operator through a stub");
  ncclRedOp_t op;
  float scalar = 2.0f;
  EXPECT_OK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comms[0]));
  EXPECT_OK(ncclRedOpDestroy(op, comms[0]));
  EXPECT(log_count("RedOpCreatePreMulSum", NULL) == 1, "the operator call did not reach the fake");
}

static void check_windows(void) {
  void* mem[N];
  ncclWindow_t win[N];
  void* reg = NULL;
  set_case("windows with both");
  log_reset();
  for (int r = 0; r < N; r++) {
    REQUIRE_OK(cSetDevice(r));
    REQUIRE_OK(ncclMemAlloc(&mem[r], 1 << 20));
  }
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < N; r++) EXPECT_OK(ncclCommWindowRegister(comms[r], mem[r], 1 << 20, &win[r], NCCL_WIN_COLL_SYMMETRIC));
  EXPECT_OK(ncclGroupEnd());
  EXPECT(log_count("WindowRegister", NULL) == N, "the fake registered %d windows", log_count("WindowRegister", NULL));
  for (int r = 0; r < N; r++) {
    void* p = NULL;
    EXPECT_OK(ncclWinGetUserPtr(comms[r], win[r], &p));
    EXPECT(p == mem[r], "rank %d: the real window's pointer %p, not %p: the stub did not swap the window", r, p, mem[r]);
  }
  /* A small AllGather into a symmetric window: the copy engines. */
  log_reset();
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    fill((float*)mem[r], SMALL, 50.0f * r);
    EXPECT_OK(ncclAllGather(mem[r], (char*)mem[r] + 65536, SMALL, ncclFloat32, comms[r], streams[r]));
  }
  EXPECT_OK(ncclGroupEnd());
  sync_all();
  EXPECT(all_equal((float*)((char*)mem[0] + 65536) + SMALL, SMALL, 50.0f), "window AllGather data");
  EXPECT(log_count("AllGather", NULL) == 0, "a window's AllGather went to the fake");
  for (int r = 0; r < N; r++) EXPECT_OK(ncclCommWindowDeregister(comms[r], win[r]));
  EXPECT(log_count("WindowDeregister", NULL) == N, "the fake deregistered %d windows", log_count("WindowDeregister", NULL));
  EXPECT_OK(ncclCommRegister(comms[0], bufs[0][0], 4096, &reg));
  EXPECT_OK(ncclCommDeregister(comms[0], reg));
  EXPECT(log_count("Register", "size=4096", NULL) == 1 && log_count("Deregister", NULL) >= 1, "ncclCommRegister with both");
  for (int r = 0; r < N; r++) EXPECT_OK(ncclMemFree(mem[r]));
}

/* NCCL's device API (2.28+; torch 2.11 links ncclDevCommCreate/Destroy):
 * cecoll's stubs swap the communicator for the fake's, and ncclTeamWorld's
 * struct comes back by value intact. A function the fake lacks
 * (ncclTeamLsa) is refused with a zeroed team and the reason. */
static void check_device(void) {
  static char reqs[64]; /* NCCL's requirements are opaque here: the fake only checks the pointer */
  ncclDevComm_t dc[N];
  Dl_info stub, helper;
  set_case("device API");
  void* p = dlsym(RTLD_DEFAULT, "ncclDevCommCreate");
  EXPECT(p != NULL && dladdr(p, &stub) && dladdr(*(void**)&cSetDevice, &helper) && stub.dli_fbase == helper.dli_fbase,
         "ncclDevCommCreate is not cecoll's (%s)", p && dladdr(p, &stub) ? stub.dli_fname : "none");
  log_reset();
  for (int r = 0; r < N; r++) {
    memset(&dc[r], 0, sizeof dc[r]);
    EXPECT_OK(ncclDevCommCreate(comms[r], (const ncclDevCommRequirements_t*)reqs, &dc[r]));
    EXPECT(dc[r].rank == r && dc[r].nRanks == N, "rank %d: the device communicator says rank %d of %d", r, dc[r].rank,
           dc[r].nRanks);
    ncclTeam_t t = ncclTeamWorld(comms[r]);
    EXPECT(t.nRanks == N && t.rank == r && t.stride == 1, "rank %d: ncclTeamWorld gave {%d, %d, %d}, want {%d, %d, 1}", r,
           t.nRanks, t.rank, t.stride, N, r);
  }
  EXPECT(log_count("DevCommCreate", NULL) == N, "the fake made %d device communicators", log_count("DevCommCreate", NULL));
  EXPECT(log_count("TeamWorld", NULL) == N, "the fake's ncclTeamWorld ran %d times", log_count("TeamWorld", NULL));
  for (int r = 0; r < N; r++) EXPECT_OK(ncclDevCommDestroy(comms[r], &dc[r]));
  EXPECT(log_count("DevCommDestroy", NULL) == N, "the fake destroyed %d device communicators",
         log_count("DevCommDestroy", NULL));

  set_case("device API: a function the fake lacks");
  ncclTeam_t (*team_lsa)(ncclComm_t);
  *(void**)&team_lsa = dlsym(RTLD_DEFAULT, "ncclTeamLsa");
  EXPECT(team_lsa != NULL, "cecoll does not export ncclTeamLsa");
  if (team_lsa != NULL) {
    ncclTeam_t t = team_lsa(comms[1]);
    EXPECT(t.nRanks == 0 && t.rank == 0 && t.stride == 0, "ncclTeamLsa refused: {%d, %d, %d}, want zeros", t.nRanks,
           t.rank, t.stride);
    EXPECT(strstr(ncclGetLastError(NULL), "ncclTeamLsa") != NULL, "the refusal does not name the call: %s",
           ncclGetLastError(NULL));
  }
}

static void check_mixed_groups(void) {
  set_case("mixed group");
  log_reset();
  for (int r = 0; r < N; r++) {
    fill(bufs[r][0], LARGE, (float)r);
    fill(bufs[r][2], SMALL, 1.0f);
  }
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    EXPECT_OK(ncclAllReduce(bufs[r][2], bufs[r][3], SMALL, ncclFloat32, ncclSum, comms[r], streams[r]));
    EXPECT_OK(ncclAllGather(bufs[r][0], bufs[r][1], LARGE, ncclFloat32, comms[r], streams[r]));
  }
  EXPECT_OK(ncclGroupEnd());
  sync_all();
  for (int r = 0; r < N; r++) {
    EXPECT(bufs[r][3][5] == 2.0f * (1.0f + 5.0f), "rank %d: the group's AllReduce", r);
    EXPECT(all_equal(bufs[r][1] + LARGE, LARGE, 1.0f), "rank %d: the group's AllGather", r);
  }
  EXPECT(log_count("AllReduce", NULL) == N && log_count("AllGather", NULL) == 0, "mixed group routed wrong");

  /* Data from the copy engines to the fake and back, on the same streams. */
  set_case("copy engines then forwarded, then back");
  for (int r = 0; r < N; r++) fill(bufs[r][0], LARGE, 1.0f + r);
  EXPECT_OK(grouped(AG, LARGE, 0, 1));    /* CE: 1 = [r0, r1] */
  EXPECT_OK(grouped(AR, N * LARGE, 1, 2)); /* fake: 2 = 2 * [r0, r1] */
  EXPECT_OK(grouped(AG, LARGE, 2, 3));    /* CE: 3 = [2 of r0, 2 of r1]: first halves */
  sync_all();
  for (int r = 0; r < N; r++) {
    EXPECT(bufs[r][2][LARGE + 7] == 2.0f * (2.0f + 7.0f), "rank %d: forwarded after CE: %g", r, bufs[r][2][LARGE + 7]);
    EXPECT(bufs[r][3][LARGE + 7] == 2.0f * (1.0f + 7.0f), "rank %d: CE after forwarded: %g", r, bufs[r][3][LARGE + 7]);
  }

  set_case("ncclGroupSimulateEnd");
  ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
  log_reset();
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclGroupSimulateEnd(&si));
  EXPECT(log_count("GroupSimulateEnd", NULL) == 1, "the fake did not simulate");
  EXPECT(si.estimatedTime == 1.0f, "the fake's estimate: %g", si.estimatedTime);
}

/* A child forked after cecoll loaded is refused every call on a
 * communicator, a routed and a forwarded one alike: nothing reaches the
 * fake, nothing hangs (export/fork.c). */
static int fork_child(void) {
  int v = 0;
  alarm(20);
  EXPECT_RES(ncclAllGather(bufs[0][0], bufs[0][1], LARGE, ncclFloat32, comms[0], streams[0]), ncclInvalidUsage);
  EXPECT_RES(ncclAllReduce(bufs[0][2], bufs[0][3], SMALL, ncclFloat32, ncclSum, comms[0], streams[0]),
             ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(NULL), "ncclAllReduce: ") == ncclGetLastError(NULL) &&
             strstr(ncclGetLastError(NULL), "forked") && strstr(ncclGetLastError(NULL), "spawn"),
         "the forwarded call's refusal: %s", ncclGetLastError(NULL));
  EXPECT_RES(ncclSend(bufs[0][2], SMALL, ncclFloat32, 1, comms[0], streams[0]), ncclInvalidUsage);
  EXPECT_RES(ncclGroupStart(), ncclInvalidUsage);
  EXPECT_RES(ncclCommDestroy(comms[1]), ncclInvalidUsage);
  EXPECT_OK(ncclGetVersion(&v));
  EXPECT(v == 23100, "the child's ncclGetVersion gave %d: not the real library's 23100", v);
  return failed;
}

static void check_fork(void) {
  set_case("forked child");
  log_reset();
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    EXPECT(0, "fork failed");
    return;
  }
  if (pid == 0) _exit(fork_child() == 0 ? 0 : 1);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child %s",
         WIFSIGNALED(st) ? "hung or died" : "saw failures (above)");
  EXPECT(log_count("", NULL) == 0, "the child's calls reached the fake: %d lines", log_count("", NULL));
  /* The parent's communicators still run both ways. */
  check_allgather(LARGE, 0);
  check_allgather(SMALL, 1);
}

static void finish_all(void) {
  set_case("finalize and destroy");
  log_reset();
  for (int r = 0; r < N; r++) EXPECT_OK(ncclCommFinalize(comms[r]));
  EXPECT(log_count("Finalize", NULL) == N, "the fake finalized %d", log_count("Finalize", NULL));
  for (int r = 0; r < N; r++) EXPECT_OK(ncclCommDestroy(comms[r]));
  EXPECT(log_count("Destroy", NULL) == N, "the fake destroyed %d", log_count("Destroy", NULL));
  for (int r = 0; r < N; r++) {
    REQUIRE_OK(cStreamDestroy(streams[r]));
    for (int b = 0; b < 4; b++) free(bufs[r][b]);
  }
}

/* ---- one thread per rank: config, split, errors, abort ----------------------------- */

static ncclUniqueId thread_id;
static pthread_barrier_t bar;

struct tres {
  ncclResult_t init, poll;
  int errs;
};

#define STEP(what) \
  do { if (getenv("CECOLL_TEST_VERBOSE")) fprintf(stderr, "rank %d: %s\n", r, what); } while (0)

static void* rank_thread(void* arg) {
  int r = (int)(intptr_t)arg;
  struct tres* res = calloc(1, sizeof *res);
  ncclComm_t c, child = NULL, none = NULL;
  cudaStream_t s;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  float* a = calloc(2 * LARGE, sizeof(float));
  float* b = calloc(2 * LARGE, sizeof(float));
  cSetDevice(r);
  cStreamCreate(&s);
  cfg.blocking = 0;
  cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  cfg.commName = "fwdtest";
  res->init = ncclCommInitRankConfig(&c, N, thread_id, r, &cfg);
  ncclResult_t st = ncclInProgress;
  for (int i = 0; i < 100000 && st == ncclInProgress && (res->init == ncclSuccess || res->init == ncclInProgress); i++)
    if (ncclCommGetAsyncError(c, &st) != ncclSuccess) break;
  res->poll = st;
  if (st != ncclSuccess) return res;
  STEP("barrier 1");
  pthread_barrier_wait(&bar);
  STEP("barrier 2");
  pthread_barrier_wait(&bar);
  /* A zero-SM communicator: small AllGathers take the copy engines. */
  fill(a, SMALL, 3.0f * r);
  if (ncclAllGather(a, b, SMALL, ncclFloat32, c, s) != ncclSuccess) res->errs++;
  cStreamSynchronize(s);
  if (!all_equal(b + SMALL, SMALL, 3.0f)) res->errs++;
  STEP("barrier 3");
  pthread_barrier_wait(&bar);
  if (r == 0 && log_count("AllGather", NULL) != 0) res->errs += 100;
  /* Split: one color, keys reversed. */
  if (ncclCommSplit(c, 0, N - r, &child, NULL) != ncclSuccess || child == NULL) res->errs += 1000;
  int cr = -1;
  if (child && (ncclCommUserRank(child, &cr) != ncclSuccess || cr != N - 1 - r)) res->errs += 1000;
  fill(a, SMALL, 1.0f);
  if (child && ncclAllReduce(a, b, SMALL, ncclFloat32, ncclSum, child, s) != ncclSuccess) res->errs += 1000;
  cStreamSynchronize(s);
  if (child && b[4] != 2.0f * 5.0f) res->errs += 1000;
  /* NCCL_SPLIT_NOCOLOR on rank 1: no communicator there. */
  if (ncclCommSplit(c, r == 1 ? NCCL_SPLIT_NOCOLOR : 1, 0, &none, NULL) != ncclSuccess) res->errs += 10000;
  if ((r == 1) != (none == NULL)) res->errs += 10000;
  if (none) ncclCommDestroy(none);
  STEP("barrier 4");
  pthread_barrier_wait(&bar);
  /* Abort reaches the fake. */
  if (child && ncclCommAbort(child) != ncclSuccess) res->errs += 100000;
  STEP("barrier 5");
  pthread_barrier_wait(&bar);
  /* Errors: the fake's, then cecoll's, then the fake's asynchronous one. */
  if (r == 0) setenv("FAKE_NCCL_FAIL", "AllReduce", 1);
  STEP("barrier 6");
  pthread_barrier_wait(&bar);
  if (ncclAllReduce(a, b, SMALL, ncclFloat32, ncclSum, c, s) != ncclInternalError) res->errs += 1 << 20;
  STEP("barrier 7");
  pthread_barrier_wait(&bar);
  if (r == 0) {
    if (!strstr(ncclGetLastError(c), "injected failure")) res->errs += 1 << 21;
    /* Then cecoll's own refusal is the last error. */
    if (ncclCommCount(c, NULL) != ncclInvalidArgument) res->errs += 1 << 22;
    if (!strstr(ncclGetLastError(NULL), "NULL count") || strstr(ncclGetLastError(NULL), "injected")) res->errs += 1 << 23;
  }
  STEP("barrier 8");
  pthread_barrier_wait(&bar);
  if (r == 0) setenv("FAKE_NCCL_FAIL", "AllReduce:async", 1);
  STEP("barrier 9");
  pthread_barrier_wait(&bar);
  if (ncclAllReduce(a, b, SMALL, ncclFloat32, ncclSum, c, s) != ncclSuccess) res->errs += 1 << 24;
  if (ncclCommGetAsyncError(c, &st) != ncclSuccess || st != ncclRemoteError) res->errs += 1 << 25;
  STEP("barrier 10");
  pthread_barrier_wait(&bar);
  if (r == 0) unsetenv("FAKE_NCCL_FAIL");
  ncclCommDestroy(c);
  cStreamDestroy(s);
  free(a);
  free(b);
  return res;
}

static void check_threads(void) {
  pthread_t t[N];
  set_case("threads: config, split, abort, errors");
  log_reset();
  REQUIRE_OK(ncclGetUniqueId(&thread_id));
  pthread_barrier_init(&bar, NULL, N);
  for (int r = 0; r < N; r++) pthread_create(&t[r], NULL, rank_thread, (void*)(intptr_t)r);
  for (int r = 0; r < N; r++) {
    struct tres* res;
    pthread_join(t[r], (void**)&res);
    EXPECT(res->init == ncclSuccess || res->init == ncclInProgress, "rank %d: init -> %d", r, (int)res->init);
    EXPECT(res->poll == ncclSuccess, "rank %d: async state -> %d", r, (int)res->poll);
    EXPECT(res->errs == 0, "rank %d: errors %#x (see rank_thread)", r, res->errs);
    free(res);
  }
  pthread_barrier_destroy(&bar);
  char want[128];
  snprintf(want, sizeof want, "cfgsize=%zu", sizeof(ncclConfig_t));
  EXPECT(log_count("InitRank", want, "blocking=0", "cta=2", "name=fwdtest", NULL) == N,
         "the config did not reach the fake unchanged (%s blocking=0 cta=2 name=fwdtest)", want);
  EXPECT(log_count("Split", "color=0", NULL) == N, "the fake split %d times", log_count("Split", "color=0", NULL));
  EXPECT(log_count("Abort", NULL) == N, "the fake aborted %d times", log_count("Abort", NULL));
}

/* ---- several processes ---------------------------------------------------------------- */

/* summary (CECOLL_DEBUG=INFO into a file per process): calls of each way
 * on c, which is destroyed (its summary then), and on c2, split from it,
 * which is never destroyed (its summary at exit). check_summary reads the
 * lines. */
static int child_summary(ncclComm_t c, cudaStream_t s, int r, int n) {
  float* a = calloc(n * LARGE, sizeof(float));
  float* b = calloc(n * LARGE, sizeof(float));
  ncclComm_t c2 = NULL;
  EXPECT_OK(ncclAllGather(a, b, LARGE, ncclFloat32, c, s)); /* the copy engines */
  EXPECT_OK(ncclAllGather(a, b, SMALL, ncclFloat32, c, s)); /* the fake */
  for (int i = 0; i < 3; i++) EXPECT_OK(ncclAllReduce(a, b, SMALL, ncclFloat32, ncclSum, c, s)); /* a stub */
  EXPECT_OK(ncclCommSplit(c, 0, r, &c2, NULL));
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclAllReduce(a, b, SMALL, ncclFloat32, ncclSum, c2, s));
  REQUIRE_OK(cStreamSynchronize(s));
  EXPECT_OK(ncclCommDestroy(c));
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0; /* c2 is left for the exit summary */
}

static int child_main(int argc, char** argv) {
  /* child <case> <hex id> <rank> <n> */
  ncclUniqueId id;
  const char* what = argv[2];
  int r = atoi(argv[4]), n = atoi(argv[5]);
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) sscanf(argv[3] + 2 * i, "%2hhx", (unsigned char*)&id.internal[i]);
  (void)argc;
  set_case(what);
  load_helpers();
  ncclComm_t c;
  cudaStream_t s;
  REQUIRE_OK(cSetDevice(0));
  REQUIRE_OK(cStreamCreate(&s));
  ncclResult_t ir = ncclCommInitRank(&c, n, id, r);
  if (strcmp(what, "mismatch") == 0) {
    EXPECT(ir == ncclInvalidUsage, "init -> %d: %s", (int)ir, ncclGetLastError(NULL));
    EXPECT(strstr(ncclGetLastError(NULL), "disagree on routing") != NULL, "text: %s", ncclGetLastError(NULL));
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
  }
  REQUIRE_OK(ir);
  if (strcmp(what, "summary") == 0) return child_summary(c, s, r, n);
  float* a = calloc(n * LARGE, sizeof(float));
  float* b = calloc(n * LARGE, sizeof(float));
  fill(a, LARGE, 1.0f + r);
  EXPECT_OK(ncclAllGather(a, b, LARGE, ncclFloat32, c, s)); /* the copy engines; queues: the fake */
  REQUIRE_OK(cStreamSynchronize(s));
  EXPECT(all_equal(b + LARGE, LARGE, 2.0f), "large AllGather from rank 1");
  EXPECT_OK(ncclAllGather(a, b, SMALL, ncclFloat32, c, s)); /* pair: the fake; onegpu: the copy engines */
  REQUIRE_OK(cStreamSynchronize(s));
  EXPECT(all_equal(b + SMALL, SMALL, 2.0f), "small AllGather from rank 1");
  if (strcmp(what, "pair") == 0 || strcmp(what, "queues") == 0) {
    EXPECT_OK(ncclAllReduce(a, b, SMALL, ncclFloat32, ncclSum, c, s));
    REQUIRE_OK(cStreamSynchronize(s));
    EXPECT(b[2] == 3.0f + 2.0f * 2.0f, "AllReduce between processes: %g", b[2]);
  } else { /* onegpu: the fake refused the layout; its calls are refused with its reason */
    EXPECT_RES(ncclAllReduce(a, b, SMALL, ncclFloat32, ncclSum, c, s), ncclInvalidUsage);
    EXPECT(strstr(ncclGetLastError(NULL), "Duplicate GPU") != NULL, "the refusal does not give the reason: %s",
           ncclGetLastError(NULL));
    /* but what copy engines run, runs: broadcast */
    EXPECT_OK(ncclBroadcast(a, b, SMALL, ncclFloat32, 0, c, s));
    REQUIRE_OK(cStreamSynchronize(s));
    EXPECT(all_equal(b, SMALL, 1.0f), "CE-only Broadcast from rank 0");
  }
  EXPECT_OK(ncclCommDestroy(c));
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}

/* Lines of the file holding every one of the NULL-ended words. */
static int file_count(const char* path, const char* first, ...) {
  FILE* f = fopen(path, "r");
  char line[4096];
  int n = 0;
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f)) {
    va_list ap;
    va_start(ap, first);
    int all = 1;
    for (const char* w = first; w != NULL; w = va_arg(ap, const char*)) all &= strstr(line, w) != NULL;
    va_end(ap);
    n += all;
  }
  fclose(f);
  return n;
}

static char summary_log[512]; /* CECOLL_DEBUG_FILE of the summary case, %p for the pid */

/* Each rank's INFO log: the stub's route once; the destroyed
 * communicator's summary, both ways with the bytes cecoll decoded; the
 * summary at exit of the one never destroyed, with the hint. */
static void check_summary(const pid_t* pids) {
  for (int r = 0; r < N; r++) {
    char path[600], destroyed[256], never[128];
    snprintf(path, sizeof path, "%.*s%d", (int)(strlen(summary_log) - 2), summary_log, (int)pids[r]);
    snprintf(destroyed, sizeof destroyed,
             " rank %d/%d: copy engines 1 calls, 8.0 KiB (89%% of the bytes cecoll routed) [AllGather 1, 8.0 KiB]; "
             "real library 4 calls [AllGather 1, 1.0 KiB; ncclAllReduce 3]\n",
             r, N);
    snprintf(never, sizeof never, " rank %d/%d: copy engines 0 calls, 0 B; real library 2 calls [ncclAllReduce 2]; nothing reached", r, N);
    int route = file_count(path, "route: ncclAllReduce -> the real library", NULL);
    EXPECT(route == 1, "rank %d: %d route lines for the ncclAllReduce stub, want 1 (%s)", r, route, path);
    EXPECT(file_count(path, "INFO summary comm ", destroyed, NULL) == 1, "rank %d: no summary of the destroyed communicator (%s)", r, path);
    EXPECT(file_count(path, "INFO summary comm ", never, NULL) == 1,
           "rank %d: no summary at exit of the communicator never destroyed (%s)", r, path);
    EXPECT(file_count(path, "INFO summary comm ", NULL) == 2, "rank %d: %d summaries, want 2", r,
           file_count(path, "INFO summary comm ", NULL));
    unlink(path);
  }
}

/* both: variables set in every rank's environment (NULL ended; NULL: none). */
static void check_processes(const char* what, const char* dev0, const char* dev1, const char* route1, char* const* both) {
  ncclUniqueId id;
  char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
  pid_t pids[N];
  set_case(what);
  log_reset();
  REQUIRE_OK(ncclGetUniqueId(&id));
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);
  for (int r = 0; r < N; r++) {
    char rank[8], n[8], dev[32], route[64];
    int ne = 0;
    while (environ[ne]) ne++;
    char** env = calloc(ne + 8, sizeof(char*));
    int k = 0;
    for (int i = 0; i < ne; i++)
      if (strncmp(environ[i], "FAKE_NCCL_DEV=", 14) != 0 && strncmp(environ[i], "CECOLL_ROUTE=", 13) != 0)
        env[k++] = environ[i];
    snprintf(dev, sizeof dev, "FAKE_NCCL_DEV=%s", r == 0 ? dev0 : dev1);
    env[k++] = dev;
    if (r == 1 && route1) {
      snprintf(route, sizeof route, "CECOLL_ROUTE=%s", route1);
      env[k++] = route;
    }
    for (int i = 0; both && both[i]; i++) env[k++] = both[i];
    snprintf(rank, sizeof rank, "%d", r);
    snprintf(n, sizeof n, "%d", N);
    char* args[] = {"test_forward", "child", (char*)what, hex, rank, n, NULL};
    EXPECT(posix_spawn(&pids[r], "/proc/self/exe", NULL, NULL, args, env) == 0, "spawn rank %d", r);
    free(env);
  }
  for (int r = 0; r < N; r++) {
    int st = 0;
    double deadline = time(NULL) + 60;
    while (waitpid(pids[r], &st, WNOHANG) == 0) {
      if (time(NULL) > deadline) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &st, 0);
        break;
      }
      usleep(10000);
    }
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: rank %d's process failed (status %#x)", what, r, st);
  }
  if (strcmp(what, "onegpu") == 0)
    EXPECT(log_count("Duplicate GPU", NULL) >= 1, "the fake did not refuse two processes on one device");
  if (strcmp(what, "pair") == 0)
    EXPECT(log_count("AllReduce", NULL) == N && log_count("AllGather", NULL) == N, "between processes: the fake ran %d AllReduce, %d AllGather",
           log_count("AllReduce", NULL), log_count("AllGather", NULL));
  if (strcmp(what, "summary") == 0) check_summary(pids);
  if (strcmp(what, "queues") == 0)
    EXPECT(log_count("AllReduce", NULL) == N && log_count("AllGather", NULL) == 2 * N,
           "one hardware queue: the fake ran %d AllReduce, %d AllGather (every call forwarded)", log_count("AllReduce", NULL),
           log_count("AllGather", NULL));
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    signal(SIGALRM, on_alarm);
    alarm(90);
    return child_main(argc, argv);
  }
  const char* lp = getenv("FAKE_NCCL_LOG");
  if (lp == NULL) {
    snprintf(log_path, sizeof log_path, "/tmp/test_forward.%d.log", (int)getpid());
    setenv("FAKE_NCCL_LOG", log_path, 1);
  } else {
    snprintf(log_path, sizeof log_path, "%s", lp);
  }
  signal(SIGALRM, on_alarm);
  alarm(300);
  load_helpers();
  check_version();
  init_all();
  check_routes();
  check_windows();
  check_device();
  check_mixed_groups();
  check_fork();
  finish_all();
  check_threads();
  check_processes("pair", "0", "1", NULL, NULL);
  check_processes("onegpu", "0", "0", NULL, NULL);
  check_processes("mismatch", "0", "1", "ce", NULL);
  /* One hardware queue per context (CUDA_DEVICE_MAX_CONNECTIONS=1 on a
   * GPU), CECOLL_ROUTE=ce: copy engines cannot run safely, so every rank
   * forwards every call; the init succeeds. */
  char* queues[] = {"CECOLL_HOST_QUEUES=1", "CECOLL_ROUTE=ce", NULL};
  check_processes("queues", "0", "1", NULL, queues);
  /* Where the calls went, at INFO: route lines and summaries. */
  char debug_file[600];
  snprintf(summary_log, sizeof summary_log, "/tmp/test_forward_summary.%d.%%p", (int)getpid());
  snprintf(debug_file, sizeof debug_file, "CECOLL_DEBUG_FILE=%s", summary_log);
  char* info[] = {"CECOLL_DEBUG=INFO", debug_file, NULL};
  check_processes("summary", "0", "1", NULL, info);
  if (lp == NULL) unlink(log_path);
  printf("test_forward: %d passed, %d failed\n", passed, failed);
  return failed != 0 || passed == 0;
}
