/* test_errors.c: every refusal returns the right ncclResult_t, sets a
 * last-error text, and leaves the library usable.
 *
 * ncclInvalidArgument: NULL, garbage and destroyed communicators (a second
 * ncclCommDestroy included), unknown datatypes and functions, roots out of
 * range, byte sizes that overflow, NULL buffers where the call uses them,
 * bad ncclCeCollArgs, bad configs and init arguments, misaligned and
 * overlapping windows, NULL output pointers.
 * ncclInvalidUsage: collectives on an aborted or finalized communicator or
 * after ncclCeFinalize, and reductions (copy engines cannot reduce).
 * Also ncclGetErrorString for every code, and the texts: the call named
 * once, the datatype by name, advice that holds at cecoll's default level.
 * "Leaves the library usable" holds for a communicator of one rank; on two
 * or more, a collective refused on one rank fails the communicator on every
 * rank (its peers would pair their parts with its next call). */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* The last-error text must say something. */
#define EXPECT_ERROR_TEXT(comm)                                                             \
  do {                                                                                      \
    const char* et_ = ncclGetLastError(comm);                                               \
    EXPECT(et_ != NULL && et_[0] != '\0', "ncclGetLastError(%s) is empty", #comm);          \
  } while (0)

/* A refused call: the code, then a last-error text. */
#define EXPECT_REFUSED(call, want)        \
  do {                                    \
    EXPECT_RESULT(call, want);            \
    EXPECT_ERROR_TEXT(NULL);              \
  } while (0)

/* The last-error text starts with prefix, then says what; it names the
 * call once (no "ncclAllGather: AllGather: "). */
#define EXPECT_TEXT(prefix, what)                                                                      \
  do {                                                                                                 \
    const char* tx_ = ncclGetLastError(NULL);                                                          \
    EXPECT(strncmp(tx_, prefix, strlen(prefix)) == 0 && strstr(tx_, what) != NULL,                    \
           "last error \"%s\": want \"%s...%s\"", tx_, prefix, what);                                   \
  } while (0)

static int contains_ci(const char* hay, const char* needle) {
  size_t n = strlen(needle);
  for (; hay && *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return 1;
  }
  return 0;
}

static ncclComm_t new_comm(void) {
  ncclComm_t comm = NULL;
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRank(&comm, 1, id, 0));
  return comm;
}

static void check_error_strings(void) {
  const char* seen[ncclNumResults];
  t_set_case("ncclGetErrorString");
  for (int r = 0; r < ncclNumResults; r++) {
    const char* s = ncclGetErrorString((ncclResult_t)r);
    seen[r] = s;
    EXPECT(s != NULL && s[0] != '\0', "ncclGetErrorString(%d) empty", r);
    for (int q = 0; q < r && s; q++) EXPECT(seen[q] == NULL || strcmp(seen[q], s) != 0, "codes %d and %d share \"%s\"", q, r, s);
    EXPECT(pncclGetErrorString((ncclResult_t)r) != NULL, "pncclGetErrorString(%d)", r);
  }
  EXPECT(ncclGetErrorString(ncclNumResults) != NULL, "ncclGetErrorString(ncclNumResults) is NULL");
  EXPECT(ncclGetErrorString((ncclResult_t)99) != NULL, "ncclGetErrorString(99) is NULL");
  EXPECT(ncclGetErrorString((ncclResult_t)-1) != NULL, "ncclGetErrorString(-1) is NULL");
  EXPECT(ncclGetLastError(NULL) != NULL, "ncclGetLastError(NULL) is NULL");
  /* WARN is cecoll's default level: no advice to set it, or another. */
  for (int r = 1; r < ncclNumResults; r++) {
    const char* s = ncclGetErrorString((ncclResult_t)r);
    EXPECT(strstr(s, "DEBUG=") == NULL, "ncclGetErrorString(%d) advises a level: \"%s\"", r, s);
  }
  EXPECT(strstr(ncclGetErrorString(ncclInvalidArgument), "ncclGetLastError") != NULL, "invalid argument: where the details are");
  EXPECT(strstr(ncclGetErrorString(ncclInvalidUsage), "ncclGetLastError") != NULL, "invalid usage: where the details are");
}

/* Every call that takes a communicator refuses a bad one. */
static void check_bad_comm(ncclComm_t bad, const char* what, void* dev, cudaStream_t s) {
  int v;
  ncclResult_t st;
  ncclWindow_t win;
  struct ncclCeCollArgs a;
  memset(&a, 0, sizeof a);
  a.func = ncclFuncAllGather;
  a.datatype = ncclInt8;
  a.nElts = 1;
  a.eltSize = 1;
  a.sendBuff = dev;
  a.recvBuff = dev;
  t_set_case("%s communicator", what);
  EXPECT_REFUSED(ncclCommCount(bad, &v), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommUserRank(bad, &v), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommCuDevice(bad, &v), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommGetAsyncError(bad, &st), ncclInvalidArgument);
  EXPECT_REFUSED(ncclAllGather(dev, dev, 1, ncclInt8, bad, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclAlltoAll(dev, dev, 1, ncclInt8, bad, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclScatter(dev, dev, 1, ncclInt8, 0, bad, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclGather(dev, dev, 1, ncclInt8, 0, bad, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclLaunchCeColl(bad, &a, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCeInit(bad), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCeFinalize(bad), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommWindowRegister(bad, dev, 4096, &win, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommFinalize(bad), ncclInvalidArgument);
  if (bad == NULL) {
    /* NCCL makes destroying or aborting NULL a no-op; cleanup code relies on it. */
    EXPECT_RESULT(ncclCommDestroy(bad), ncclSuccess);
    EXPECT_RESULT(ncclCommAbort(bad), ncclSuccess);
  } else {
    EXPECT_REFUSED(ncclCommDestroy(bad), ncclInvalidArgument);
    EXPECT_REFUSED(ncclCommAbort(bad), ncclInvalidArgument);
  }
  EXPECT(ncclGetLastError(bad) != NULL, "ncclGetLastError(bad comm) is NULL");
}

static void check_comm_handles(void* dev, cudaStream_t s) {
  unsigned char* garbage = (unsigned char*)malloc(4096);
  uint64_t rng = 5;
  ncclComm_t comm;
  REQUIRE(garbage != NULL);
  t_fill_random(garbage, 4096, &rng);
  check_bad_comm(NULL, "NULL", dev, s);
  check_bad_comm((ncclComm_t)(void*)garbage, "garbage", dev, s);
  memset(garbage, 0, 4096);
  check_bad_comm((ncclComm_t)(void*)garbage, "zeroed", dev, s);

  comm = new_comm();
  t_set_case("destroy");
  EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);
  check_bad_comm(comm, "destroyed", dev, s);
  free(garbage);
}

static void check_collective_args(void* dev, cudaStream_t s) {
  ncclComm_t comm = new_comm();
  const size_t huge = SIZE_MAX / 8 + 1; /* huge * 8 bytes wraps */
  struct ncclCeCollArgs a;

  t_set_case("unknown datatype");
  EXPECT_REFUSED(ncclAllGather(dev, dev, 1, ncclNumTypes, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclAllGather(dev, dev, 1, (ncclDataType_t)-1, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclAlltoAll(dev, dev, 1, (ncclDataType_t)1000, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclScatter(dev, dev, 1, ncclNumTypes, 0, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclGather(dev, dev, 1, ncclNumTypes, 0, comm, s), ncclInvalidArgument);
  EXPECT_ERROR_TEXT(comm);

  t_set_case("texts: the call once, the datatype by name");
  EXPECT_REFUSED(ncclAllGather(NULL, dev, 4, ncclInt8, comm, s), ncclInvalidArgument);
  EXPECT_TEXT("ncclAllGather: sendbuff is NULL", "");
  EXPECT_REFUSED(ncclAllToAll(dev, NULL, 4, ncclInt8, comm, s), ncclInvalidArgument);
  EXPECT_TEXT("ncclAllToAll: recvbuff is NULL", "");
  EXPECT_REFUSED(ncclAlltoAll(dev, dev, huge, ncclFloat64, comm, s), ncclInvalidArgument);
  EXPECT_TEXT("ncclAlltoAll: count ", "ncclFloat64");
  EXPECT_REFUSED(ncclScatter(dev, dev, 1, ncclInt8, 1, comm, s), ncclInvalidArgument);
  EXPECT_TEXT("ncclScatter: root 1 ", "");
  EXPECT_REFUSED(ncclGather(dev, dev, 1, ncclNumTypes, 0, comm, s), ncclInvalidArgument);
  EXPECT_TEXT("ncclGather: unknown datatype 12", "");
  memset(&a, 0, sizeof a);
  a.func = ncclFuncAllGather;
  a.datatype = ncclFloat32;
  a.nElts = 4;
  a.eltSize = 8;
  a.sendBuff = dev;
  a.recvBuff = dev;
  EXPECT_REFUSED(ncclLaunchCeColl(comm, &a, s), ncclInvalidArgument);
  EXPECT_TEXT("ncclLaunchCeColl: AllGather: ", "ncclFloat32"); /* this call names the collective */

  t_set_case("root out of range");
  EXPECT_REFUSED(ncclScatter(dev, dev, 1, ncclInt8, 1, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclScatter(dev, dev, 1, ncclInt8, -1, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclGather(dev, dev, 1, ncclInt8, 1, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclGather(dev, dev, 1, ncclInt8, INT32_MIN, comm, s), ncclInvalidArgument);

  t_set_case("byte size overflow");
  EXPECT_REFUSED(ncclAllGather(dev, dev, huge, ncclInt64, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclAlltoAll(dev, dev, huge, ncclFloat64, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclScatter(dev, dev, huge, ncclUint64, 0, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclGather(dev, dev, SIZE_MAX, ncclInt32, 0, comm, s), ncclInvalidArgument);

  t_set_case("NULL buffer where used");
  EXPECT_REFUSED(ncclAllGather(NULL, dev, 4, ncclInt8, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclAllGather(dev, NULL, 4, ncclInt8, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclAlltoAll(NULL, dev, 4, ncclInt8, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclAlltoAll(dev, NULL, 4, ncclInt8, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclScatter(NULL, dev, 4, ncclInt8, 0, comm, s), ncclInvalidArgument); /* root's send */
  EXPECT_REFUSED(ncclScatter(dev, NULL, 4, ncclInt8, 0, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclGather(NULL, dev, 4, ncclInt8, 0, comm, s), ncclInvalidArgument);
  EXPECT_REFUSED(ncclGather(dev, NULL, 4, ncclInt8, 0, comm, s), ncclInvalidArgument); /* root's recv */

  t_set_case("ncclLaunchCeColl arguments");
  memset(&a, 0, sizeof a);
  a.func = ncclFuncAllGather;
  a.datatype = ncclInt32;
  a.nElts = 4;
  a.eltSize = 4;
  a.sendBuff = dev;
  a.recvBuff = (char*)dev + 4096;
  EXPECT_REFUSED(ncclLaunchCeColl(comm, NULL, s), ncclInvalidArgument);
  a.eltSize = 8; /* not the size of ncclInt32 */
  EXPECT_REFUSED(ncclLaunchCeColl(comm, &a, s), ncclInvalidArgument);
  a.eltSize = 0;
  EXPECT_REFUSED(ncclLaunchCeColl(comm, &a, s), ncclInvalidArgument);
  a.eltSize = 4;
  a.func = ncclNumFuncs;
  EXPECT_REFUSED(ncclLaunchCeColl(comm, &a, s), ncclInvalidArgument);
  a.func = (ncclFunc_t)-3;
  EXPECT_REFUSED(ncclLaunchCeColl(comm, &a, s), ncclInvalidArgument);
  a.func = ncclFuncScatter;
  a.rootRank = 1;
  EXPECT_REFUSED(ncclLaunchCeColl(comm, &a, s), ncclInvalidArgument);
  a.func = ncclFuncAllGather;
  a.rootRank = 0;
  a.datatype = ncclNumTypes;
  EXPECT_REFUSED(ncclLaunchCeColl(comm, &a, s), ncclInvalidArgument);
  a.datatype = ncclInt32;
  a.nElts = huge;
  EXPECT_REFUSED(ncclLaunchCeColl(comm, &a, s), ncclInvalidArgument);

  /* The communicator still works after all those refusals. */
  t_set_case("usable after refusals");
  a.nElts = 4;
  EXPECT_RESULT(ncclLaunchCeColl(comm, &a, s), ncclSuccess);
  EXPECT_RESULT(ncclAllGather(dev, (char*)dev + 4096, 4, ncclInt32, comm, s), ncclSuccess);
  EXPECT_RESULT(cecollStreamSynchronize(s), ncclSuccess);
  CHECK(ncclCommDestroy(comm));
}

static void check_reductions(void* dev, cudaStream_t s) {
  ncclComm_t comm = new_comm();
  ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  struct ncclCeCollArgs a;
  t_set_case("reductions");
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    EXPECT_RESULT(ncclAllReduce(dev, dev, 4, ncclFloat32, ops[i], comm, s), ncclInvalidUsage);
    EXPECT(contains_ci(ncclGetLastError(comm), "reduc"), "AllReduce last error \"%s\" does not say why",
           ncclGetLastError(comm));
    EXPECT_RESULT(ncclReduce(dev, dev, 4, ncclFloat32, ops[i], 0, comm, s), ncclInvalidUsage);
    EXPECT_RESULT(ncclReduceScatter(dev, dev, 4, ncclFloat32, ops[i], comm, s), ncclInvalidUsage);
    EXPECT(contains_ci(ncclGetLastError(NULL), "reduc"), "ReduceScatter last error \"%s\" does not say why",
           ncclGetLastError(NULL));
  }
  EXPECT_RESULT(pncclAllReduce(dev, dev, 4, ncclFloat32, ncclSum, comm, s), ncclInvalidUsage);
  memset(&a, 0, sizeof a);
  a.func = ncclFuncAllReduce;
  a.datatype = ncclFloat32;
  a.nElts = 4;
  a.eltSize = 4;
  a.sendBuff = dev;
  a.recvBuff = dev;
  EXPECT_REFUSED(ncclLaunchCeColl(comm, &a, s), ncclInvalidUsage);
  /* Refused reductions leave nothing queued. */
  EXPECT_RESULT(cecollStreamSynchronize(s), ncclSuccess);
  CHECK(ncclCommDestroy(comm));
}

static void check_dead_comms(void* dev, cudaStream_t s) {
  ncclComm_t comm;

  t_set_case("collective after ncclCeFinalize");
  comm = new_comm();
  CHECK(ncclCeFinalize(comm));
  EXPECT_REFUSED(ncclAllGather(dev, (char*)dev + 4096, 4, ncclInt8, comm, s), ncclInvalidUsage);
  EXPECT_ERROR_TEXT(comm);
  CHECK(ncclCeInit(comm)); /* one rank: not waiting for anybody */
  EXPECT_RESULT(ncclAllGather(dev, (char*)dev + 4096, 4, ncclInt8, comm, s), ncclSuccess);
  CHECK(cecollStreamSynchronize(s));
  CHECK(ncclCommDestroy(comm));

  t_set_case("collective on a finalized communicator");
  comm = new_comm();
  EXPECT_RESULT(ncclCommFinalize(comm), ncclSuccess);
  EXPECT_REFUSED(ncclAllGather(dev, (char*)dev + 4096, 4, ncclInt8, comm, s), ncclInvalidUsage);
  EXPECT_REFUSED(ncclGather(dev, (char*)dev + 4096, 4, ncclInt8, 0, comm, s), ncclInvalidUsage);
  EXPECT_RESULT(ncclCommDestroy(comm), ncclSuccess);

  t_set_case("collective on an aborted communicator");
  comm = new_comm();
  EXPECT_RESULT(ncclCommAbort(comm), ncclSuccess);
  EXPECT_REFUSED(ncclAllGather(dev, (char*)dev + 4096, 4, ncclInt8, comm, s), ncclInvalidUsage);
  EXPECT_REFUSED(ncclScatter(dev, (char*)dev + 4096, 4, ncclInt8, 0, comm, s), ncclInvalidUsage);
}

/* A refusal on one rank of two fails the communicator on both: rank 0's
 * AllGather has a NULL recvbuff, rank 1's is fine. Without the failure rank
 * 1's call would wait for rank 0's next AllGather and pair with it, both
 * returning success with the other call's data, or wait out CECOLL_TIMEOUT. */
typedef struct {
  t_world* w;
  t_barrier* bar;
  void* buf[2];
  ncclResult_t first[2], later[2];
} refusal_arg;

/* Rank 1's call is enqueued before rank 0's is refused. */
static void refusal_rank(int r, void* p) {
  refusal_arg* a = (refusal_arg*)p;
  char* b = (char*)a->buf[r];
  if (r == 0) t_barrier_wait(a->bar);
  a->first[r] = ncclAllGather(b, r == 0 ? NULL : b + 4096, 4, ncclInt32, a->w->comm[r], a->w->stream[r]);
  if (r == 1) t_barrier_wait(a->bar);
}

static void refusal_later(int r, void* p) {
  refusal_arg* a = (refusal_arg*)p;
  char* b = (char*)a->buf[r];
  a->later[r] = ncclAllGather(b, b + 4096, 4, ncclInt32, a->w->comm[r], a->w->stream[r]);
}

static void check_one_rank_refusal(void) {
  t_world w;
  refusal_arg a;
  t_set_case("a refusal on one rank fails every rank");
  memset(&a, 0, sizeof a);
  t_world_init_threads(&w, 2);
  a.w = &w;
  a.bar = t_barrier_new(2);
  for (int r = 0; r < 2; r++) {
    CHECK(cecollSetDevice(w.dev[r]));
    CHECK(ncclMemAlloc(&a.buf[r], 2 * 4096));
  }
  t_run_threads(&w, refusal_rank, &a);
  EXPECT(a.first[0] == ncclInvalidArgument, "rank 0's AllGather with recvbuff NULL -> %d, want ncclInvalidArgument",
         (int)a.first[0]);
  EXPECT(a.first[1] == ncclSuccess, "rank 1's AllGather -> %d, want ncclSuccess (it is enqueued)", (int)a.first[1]);
  for (int r = 0; r < 2; r++) {
    ncclResult_t st = ncclSuccess;
    /* Promptly: 10 s, against CECOLL_TIMEOUT's 600. */
    for (int i = 0; i < 10000 && st == ncclSuccess; i++) {
      CHECK(ncclCommGetAsyncError(w.comm[r], &st));
      if (st == ncclSuccess) usleep(1000);
    }
    EXPECT(st != ncclSuccess && st != ncclInProgress, "rank %d: no asynchronous error after rank 0's refusal", r);
    CHECK(cecollSetDevice(w.dev[r]));
    EXPECT_RESULT(cecollStreamSynchronize(w.stream[r]), ncclSuccess);
  }
  t_run_threads(&w, refusal_later, &a);
  for (int r = 0; r < 2; r++) {
    EXPECT(a.later[r] != ncclSuccess, "rank %d's AllGather after the refusal succeeded", r);
    EXPECT(strstr(ncclGetLastError(w.comm[r]), "refused") != NULL, "rank %d's last error \"%s\" does not name the refusal",
           r, ncclGetLastError(w.comm[r]));
  }
  for (int r = 0; r < 2; r++) {
    CHECK(cecollSetDevice(w.dev[r]));
    CHECK(cecollStreamDestroy(w.stream[r]));
    CHECK(ncclCommDestroy(w.comm[r]));
    CHECK(ncclMemFree(a.buf[r]));
  }
  t_barrier_free(a.bar);
}

/* CECOLL_CHECK compares only what NCCL's contract makes every rank agree
 * on: in-place Gather and Scatter (the in-place rooted layout, root 1 of 2)
 * whose non-root passes NULL for the buffer it does not use are valid, and
 * the check reports nothing. The library reads CECOLL_CHECK at load: this
 * runs in a child started with it (check_rooted_child). */
typedef struct {
  t_world* w;
  void* buf[2];
  ncclWindow_t win[2];
  ncclResult_t res[2][2];
} rooted_arg;

enum { ROOTED_COUNT = 256 };

static void rooted_register(int r, void* p) {
  rooted_arg* a = (rooted_arg*)p;
  CHECK(ncclMemAlloc(&a->buf[r], 4096));
  CHECK(ncclCommWindowRegister(a->w->comm[r], a->buf[r], 4096, &a->win[r], NCCL_WIN_COLL_SYMMETRIC));
}

static void rooted_rank(int r, void* p) {
  rooted_arg* a = (rooted_arg*)p;
  char* buf = (char*)a->buf[r];
  char* block = buf + r * ROOTED_COUNT;
  ncclComm_t c = a->w->comm[r];
  cudaStream_t s = a->w->stream[r];
  /* Gather: sendbuff = buf + rank*count, the root's recvbuff = buf. */
  a->res[r][0] = ncclGather(block, r == 1 ? buf : NULL, ROOTED_COUNT, ncclInt8, 1, c, s);
  /* Scatter: recvbuff = buf + rank*count, the root's sendbuff = buf. */
  a->res[r][1] = ncclScatter(r == 1 ? buf : NULL, block, ROOTED_COUNT, ncclInt8, 1, c, s);
}

static void check_rooted_child(void) {
  t_world w;
  rooted_arg a;
  unsigned char host[2 * ROOTED_COUNT];
  t_set_case("CECOLL_CHECK=1: in-place rooted calls, non-root buffers NULL");
  memset(&a, 0, sizeof a);
  t_world_init_threads(&w, 2);
  a.w = &w;
  t_run_threads(&w, rooted_register, &a);
  for (int r = 0; r < 2; r++) {
    for (int i = 0; i < 2 * ROOTED_COUNT; i++) host[i] = (unsigned char)(r * 100 + i);
    CHECK(cecollSetDevice(w.dev[r]));
    CHECK(cecollMemcpy(a.buf[r], host, sizeof host));
  }
  t_run_threads(&w, rooted_rank, &a);
  for (int r = 0; r < 2; r++) {
    EXPECT(a.res[r][0] == ncclSuccess && a.res[r][1] == ncclSuccess, "rank %d: Gather -> %d, Scatter -> %d", r,
           (int)a.res[r][0], (int)a.res[r][1]);
    CHECK(cecollSetDevice(w.dev[r]));
    CHECK(cecollStreamSynchronize(w.stream[r]));
  }
  usleep(100 * 1000); /* the check's watchers scan every 2 ms */
  for (int r = 0; r < 2; r++) {
    ncclResult_t st;
    CHECK(ncclCommGetAsyncError(w.comm[r], &st));
    EXPECT(st == ncclSuccess, "rank %d: CECOLL_CHECK reported a valid program: %s", r, ncclGetLastError(w.comm[r]));
  }
  /* Gather put rank 0's block before the root's; Scatter then gave rank 0
   * the root's first block, which is rank 0's. */
  CHECK(cecollMemcpy(host, a.buf[0], ROOTED_COUNT));
  for (int i = 0; i < ROOTED_COUNT; i++)
    if (host[i] != (unsigned char)i) {
      EXPECT(0, "rank 0's block byte %d is %d, want %d", i, host[i], i);
      break;
    }
  for (int r = 0; r < 2; r++) {
    CHECK(cecollSetDevice(w.dev[r]));
    CHECK(ncclCommWindowDeregister(w.comm[r], a.win[r]));
    CHECK(ncclMemFree(a.buf[r]));
  }
  t_world_destroy(&w);
}

static void check_rooted_under_check(const char* self) {
  char* env[] = {"CECOLL_CHECK=1", "CECOLL_TEST_CHILD=check-rooted", NULL};
  char* args[] = {NULL};
  t_set_case("CECOLL_CHECK=1: in-place rooted calls, non-root buffers NULL (child)");
  fflush(stdout);
  EXPECT(t_spawn_self(self, env, args) == 0, "the CECOLL_CHECK child failed");
}

static void check_windows(void) {
  ncclComm_t comm = new_comm();
  void* buf;
  ncclWindow_t w1 = NULL, w2 = NULL;
  CHECK(ncclMemAlloc(&buf, 4 * 4096));

  t_set_case("misaligned window");
  EXPECT_REFUSED(ncclCommWindowRegister(comm, (char*)buf + 1, 4096, &w2, NCCL_WIN_COLL_SYMMETRIC),
                 ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommWindowRegister(comm, (char*)buf + 64, 4096, &w2, NCCL_WIN_COLL_SYMMETRIC),
                 ncclInvalidArgument);
  t_set_case("window arguments");
  EXPECT_REFUSED(ncclCommWindowRegister(comm, NULL, 4096, &w2, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommWindowRegister(comm, buf, 4096, NULL, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument);

  t_set_case("overlapping window");
  EXPECT_RESULT(ncclCommWindowRegister(comm, buf, 2 * 4096, &w1, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_REFUSED(ncclCommWindowRegister(comm, buf, 2 * 4096, &w2, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommWindowRegister(comm, (char*)buf + 4096, 2 * 4096, &w2, NCCL_WIN_COLL_SYMMETRIC),
                 ncclInvalidArgument);
  /* Adjacent, not overlapping: accepted. */
  EXPECT_RESULT(ncclCommWindowRegister(comm, (char*)buf + 2 * 4096, 4096, &w2, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_RESULT(ncclCommWindowDeregister(comm, w2), ncclSuccess);
  EXPECT_RESULT(ncclCommWindowDeregister(comm, w1), ncclSuccess);

  t_set_case("deregister twice");
  EXPECT_REFUSED(ncclCommWindowDeregister(comm, w1), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommWindowDeregister(comm, NULL), ncclInvalidArgument);
  CHECK(ncclMemFree(buf));
  CHECK(ncclCommDestroy(comm));
}

static void check_init_args(void) {
  ncclComm_t comm = NULL, comms[2];
  ncclUniqueId id;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  int count = 0, devlist[2];
  CHECK(ncclGetUniqueId(&id));
  CHECK(cecollGetDeviceCount(&count));

  t_set_case("init arguments");
  EXPECT_REFUSED(ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommInitRank(&comm, 1, id, 1), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommInitRank(&comm, 1, id, -1), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommInitAll(comms, 0, NULL), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommInitAll(NULL, 2, NULL), ncclInvalidArgument);
  devlist[0] = 0;
  devlist[1] = count; /* no such device */
  EXPECT_REFUSED(ncclCommInitAll(comms, 2, devlist), ncclInvalidArgument);
  devlist[1] = -1;
  EXPECT_REFUSED(ncclCommInitAll(comms, 2, devlist), ncclInvalidArgument);

  t_set_case("config with a bad magic");
  c.magic = 0x12345678u;
  EXPECT_REFUSED(ncclCommInitRankConfig(&comm, 1, id, 0, &c), ncclInvalidArgument);
  c = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  c.size = 4; /* smaller than the fields every header has */
  EXPECT_REFUSED(ncclCommInitRankConfig(&comm, 1, id, 0, &c), ncclInvalidArgument);

  t_set_case("NULL outputs");
  EXPECT_REFUSED(ncclGetVersion(NULL), ncclInvalidArgument);
  EXPECT_REFUSED(ncclGetUniqueId(NULL), ncclInvalidArgument);
  EXPECT_REFUSED(ncclMemAlloc(NULL, 4096), ncclInvalidArgument);
  EXPECT_REFUSED(cecollGetBackend(NULL), ncclInvalidArgument);
  EXPECT_REFUSED(cecollGetDeviceCount(NULL), ncclInvalidArgument);
  EXPECT_REFUSED(cecollStreamCreate(NULL), ncclInvalidArgument);
  EXPECT_REFUSED(cecollEventCreate(NULL), ncclInvalidArgument);
  comm = new_comm();
  EXPECT_REFUSED(ncclCommCount(comm, NULL), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommUserRank(comm, NULL), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommCuDevice(comm, NULL), ncclInvalidArgument);
  EXPECT_REFUSED(ncclCommGetAsyncError(comm, NULL), ncclInvalidArgument);
  CHECK(ncclCommDestroy(comm));
}

/* The entry points beyond the four collectives exist for NCCL programs to
 * link; each answers with ncclSuccess or a defined refusal with a reason,
 * never a crash. */
static void check_other_entry_points(void* dev, cudaStream_t s) {
  ncclComm_t comm = new_comm(), sub = NULL;
  ncclRedOp_t op;
  float scalar = 2.0f;
  void* handle = NULL;
  ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
  ncclResult_t r;
#define EXPECT_DEFINED(call)                                                                              \
  do {                                                                                                    \
    r = (call);                                                                                           \
    EXPECT(r == ncclSuccess || r == ncclInvalidUsage, "%s -> %d (%s)", #call, (int)r, ncclGetErrorString(r)); \
    if (r == ncclInvalidUsage) EXPECT_ERROR_TEXT(NULL);                                                   \
  } while (0)
  t_set_case("other entry points");
  EXPECT_DEFINED(ncclBroadcast(dev, (char*)dev + 4096, 16, ncclInt8, 0, comm, s));
  EXPECT_DEFINED(ncclBcast(dev, 16, ncclInt8, 0, comm, s));
  EXPECT_DEFINED(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
  if (r == ncclSuccess) EXPECT_DEFINED(ncclRedOpDestroy(op, comm));
  EXPECT_DEFINED(ncclCommRegister(comm, dev, 4096, &handle));
  if (r == ncclSuccess) EXPECT_DEFINED(ncclCommDeregister(comm, handle));
  /* Like ncclGroupEnd, ncclGroupSimulateEnd closes the group, whatever it
   * returns; a ncclGroupEnd after it has no group to end (NCCL: invalid usage). */
  CHECK(ncclGroupStart());
  EXPECT_DEFINED(ncclGroupSimulateEnd(&si));
  EXPECT_RESULT(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_DEFINED(ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &sub, NULL));
  EXPECT(r != ncclSuccess || sub == NULL, "NCCL_SPLIT_NOCOLOR gave a communicator");
  CHECK(cecollStreamSynchronize(s));
  CHECK(ncclCommDestroy(comm));
#undef EXPECT_DEFINED
}

int main(int argc, char** argv) {
  t_opts o;
  void* dev;
  cudaStream_t s;
  t_parse(&o, argc, argv);
  t_watchdog(300);
  if (getenv("CECOLL_TEST_CHILD") && strcmp(getenv("CECOLL_TEST_CHILD"), "check-rooted") == 0) {
    RUN(check_rooted_child());
    return t_report(argv[0]);
  }
  CHECK(cecollSetDevice(0));
  CHECK(cecollStreamCreate(&s));
  CHECK(ncclMemAlloc(&dev, 2 * 4096));
  CHECK(cecollMemset(dev, 0, 2 * 4096));

  RUN(check_error_strings());
  RUN(check_comm_handles(dev, s));
  RUN(check_collective_args(dev, s));
  RUN(check_reductions(dev, s));
  RUN(check_dead_comms(dev, s));
  RUN(check_one_rank_refusal());
  RUN(check_rooted_under_check(argv[0]));
  RUN(check_windows());
  RUN(check_init_args());
  RUN(check_other_entry_points(dev, s));

  CHECK(cecollStreamSynchronize(s));
  CHECK(cecollStreamDestroy(s));
  CHECK(ncclMemFree(dev));
  return t_report(argv[0]);
}
