/* smoke.c: export/'s own check of libcecoll.so. It creates N ranks on at
 * most two devices (ncclCommInitAll with a repeated device, and
 * ncclCommInitRank inside one group), runs each of the four collectives (grouped from one thread, and
 * ncclLaunchCeColl), checks the bytes, and checks the handle registry and
 * the error texts. Built with -Wall -Werror against include/ only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"
#include "nccl_ce.h"

#define N 3
#define COUNT 1000 /* int32 elements per rank block */

static int failures;

#define CHECK(cond, ...)                                 \
  do {                                                   \
    if (!(cond)) {                                       \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                      \
      fprintf(stderr, " (last error: %s)\n", ncclGetLastError(NULL)); \
      failures++;                                        \
    }                                                    \
  } while (0)

#define OK(call)                                                              \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess) {                                                  \
      fprintf(stderr, "FAIL %s:%d: %s = %d: %s\n", __FILE__, __LINE__, #call, \
              r_, ncclGetLastError(NULL));                                    \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static ncclComm_t comms[N];
static cudaStream_t streams[N];
static int32_t* sendb[N];
static int32_t* recvb[N];
static int32_t host[N * N * COUNT];
static int ndevs = 1; /* ranks use devices r % ndevs (at most 2) */

static void fill(void) {
  for (int r = 0; r < N; r++) {
    for (int i = 0; i < N * COUNT; i++) host[i] = r * 1000000 + i;
    OK(cecollSetDevice(r % ndevs));
    OK(cecollMemcpy(sendb[r], host, sizeof(int32_t) * N * COUNT));
    OK(cecollMemset(recvb[r], 0xff, sizeof(int32_t) * N * COUNT));
  }
}

static void sync_all(void) {
  for (int r = 0; r < N; r++) OK(cecollStreamSynchronize(streams[r]));
}

static void fetch(int r) { OK(cecollMemcpy(host, recvb[r], sizeof(int32_t) * N * COUNT)); }

static void run_collectives(const char* how) {
  /* AllGather: block s of every recv is rank s's first COUNT elements. */
  fill();
  OK(ncclGroupStart());
  for (int r = 0; r < N; r++) OK(ncclAllGather(sendb[r], recvb[r], COUNT, ncclInt32, comms[r], streams[r]));
  OK(ncclGroupEnd());
  sync_all();
  for (int r = 0; r < N; r++) {
    fetch(r);
    for (int s = 0; s < N; s++)
      for (int i = 0; i < COUNT; i++)
        if (host[s * COUNT + i] != s * 1000000 + i) {
          CHECK(0, "%s AllGather rank %d block %d elt %d = %d", how, r, s, i, host[s * COUNT + i]);
          s = N;
          break;
        }
  }

  /* AlltoAll: rank r's block s is rank s's block r. */
  fill();
  OK(ncclGroupStart());
  for (int r = 0; r < N; r++) OK(ncclAlltoAll(sendb[r], recvb[r], COUNT, ncclInt32, comms[r], streams[r]));
  OK(ncclGroupEnd());
  sync_all();
  for (int r = 0; r < N; r++) {
    fetch(r);
    for (int s = 0; s < N; s++)
      if (host[s * COUNT + 7] != s * 1000000 + r * COUNT + 7)
        CHECK(0, "%s AlltoAll rank %d block %d = %d", how, r, s, host[s * COUNT + 7]);
  }

  /* Scatter from root 1: rank r gets root's block r. */
  fill();
  OK(ncclGroupStart());
  for (int r = 0; r < N; r++) OK(ncclScatter(sendb[r], recvb[r], COUNT, ncclInt32, 1, comms[r], streams[r]));
  OK(ncclGroupEnd());
  sync_all();
  for (int r = 0; r < N; r++) {
    fetch(r);
    CHECK(host[5] == 1 * 1000000 + r * COUNT + 5, "%s Scatter rank %d = %d", how, r, host[5]);
  }

  /* Gather to root 2 through ncclLaunchCeColl. */
  fill();
  OK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    struct ncclCeCollArgs a;
    memset(&a, 0, sizeof(a));
    a.func = ncclFuncGather;
    a.rootRank = 2;
    a.datatype = ncclInt32;
    a.nElts = COUNT;
    a.eltSize = sizeof(int32_t);
    a.sendBuff = sendb[r];
    a.recvBuff = r == 2 ? recvb[r] : NULL;
    OK(ncclLaunchCeColl(comms[r], &a, streams[r]));
  }
  OK(ncclGroupEnd());
  sync_all();
  fetch(2);
  for (int s = 0; s < N; s++)
    CHECK(host[s * COUNT + 3] == s * 1000000 + 3, "%s Gather block %d = %d", how, s, host[s * COUNT + 3]);
}

/* One thread captures every rank's stream around a grouped AllGather (the
 * first cecollStreamEndCapture runs while the other captures are open),
 * then replays the graphs; bad graph handles are refused. */
static void run_graphs(void) {
  cecollGraph_t g[N];
  fill();
  for (int r = 0; r < N; r++) OK(cecollStreamBeginCapture(streams[r]));
  OK(ncclGroupStart());
  for (int r = 0; r < N; r++) OK(ncclAllGather(sendb[r], recvb[r], COUNT, ncclInt32, comms[r], streams[r]));
  OK(ncclGroupEnd());
  for (int r = 0; r < N; r++) OK(cecollStreamEndCapture(streams[r], &g[r]));
  for (int k = 0; k < 2; k++)
    for (int r = 0; r < N; r++) OK(cecollGraphLaunch(g[r], streams[r]));
  sync_all();
  for (int r = 0; r < N; r++) {
    fetch(r);
    for (int s = 0; s < N; s++)
      CHECK(host[s * COUNT + 11] == s * 1000000 + 11, "graph AllGather rank %d block %d = %d", r, s,
            host[s * COUNT + 11]);
  }
  for (int r = 0; r < N; r++) OK(cecollGraphDestroy(g[r]));
  CHECK(cecollGraphDestroy(g[0]) == ncclInvalidArgument, "second graph destroy");
  CHECK(cecollGraphLaunch(g[1], streams[1]) == ncclInvalidArgument, "launch of a destroyed graph");
  char garbage[64];
  memset(garbage, 0x5a, sizeof(garbage));
  CHECK(cecollGraphLaunch((cecollGraph_t)garbage, streams[0]) == ncclInvalidArgument, "garbage graph");
  CHECK(cecollGraphDestroy(NULL) == ncclInvalidArgument, "NULL graph");
}

static void setup_buffers(void) {
  for (int r = 0; r < N; r++) {
    OK(cecollSetDevice(r % ndevs));
    OK(cecollStreamCreate(&streams[r]));
    OK(ncclMemAlloc((void**)&sendb[r], sizeof(int32_t) * N * COUNT));
    OK(ncclMemAlloc((void**)&recvb[r], sizeof(int32_t) * N * COUNT));
  }
}

static void free_buffers(void) {
  for (int r = 0; r < N; r++) {
    OK(cecollStreamDestroy(streams[r]));
    OK(ncclMemFree(sendb[r]));
    OK(ncclMemFree(recvb[r]));
  }
}

int main(void) {
  int v = 0, ndev = 0;
  const char* backend = NULL;
  OK(ncclGetVersion(&v));
  CHECK(v == 22809, "version %d", v);
  OK(cecollGetBackend(&backend));
  OK(cecollGetDeviceCount(&ndev));
  printf("smoke: backend %s, %d devices, %d ranks\n", backend, ndev, N);
  if (ndev < 1) {
    printf("smoke: no device\n");
    return 1;
  }
  ndevs = ndev < 2 ? ndev : 2;
  setup_buffers();

  /* ncclCommInitAll, devices repeated. */
  int devs[N];
  for (int r = 0; r < N; r++) devs[r] = r % ndevs;
  OK(ncclCommInitAll(comms, N, devs));
  for (int r = 0; r < N; r++) {
    int x;
    OK(ncclCommUserRank(comms[r], &x));
    CHECK(x == r, "rank %d", x);
    OK(ncclCommCount(comms[r], &x));
    CHECK(x == N, "count %d", x);
    OK(ncclCommCuDevice(comms[r], &x));
    CHECK(x == r % ndevs, "device %d", x);
    ncclResult_t ae;
    OK(ncclCommGetAsyncError(comms[r], &ae));
    CHECK(ae == ncclSuccess, "async %d", ae);
  }
  run_collectives("InitAll");
  run_graphs();

  /* Windows: aligned is fine, misaligned is refused on every rank. */
  ncclWindow_t wins[N];
  OK(ncclGroupStart());
  for (int r = 0; r < N; r++) OK(ncclCommWindowRegister(comms[r], recvb[r], sizeof(int32_t) * N * COUNT, &wins[r], 0));
  OK(ncclGroupEnd());
  run_collectives("windows");
  for (int r = 0; r < N; r++) OK(ncclCommWindowDeregister(comms[r], wins[r]));
  OK(ncclGroupStart());
  for (int r = 0; r < N; r++) ncclCommWindowRegister(comms[r], (char*)recvb[r] + 64, 4096, &wins[r], 0);
  CHECK(ncclGroupEnd() == ncclInvalidArgument, "misaligned window");
  for (int r = 0; r < N; r++) ncclCommWindowDeregister(comms[r], wins[r]);

  /* Errors. A reduction is refused alike on every rank: the communicator
   * stays usable. */
  CHECK(ncclAllReduce(sendb[0], recvb[0], 1, ncclFloat, ncclSum, comms[0], streams[0]) == ncclInvalidUsage,
        "AllReduce");
  CHECK(strstr(ncclGetLastError(NULL), "reductions need compute") != NULL, "text: %s", ncclGetLastError(NULL));
  ncclResult_t ae;
  OK(ncclCommGetAsyncError(comms[1], &ae));
  CHECK(ae == ncclSuccess, "async %d after a reduction's refusal", ae);
  CHECK(ncclAllGather(sendb[0], recvb[0], 1, ncclInt8, NULL, streams[0]) == ncclInvalidArgument, "NULL comm");
  char garbage[64];
  memset(garbage, 0x5a, sizeof(garbage));
  CHECK(ncclCommDestroy((ncclComm_t)garbage) == ncclInvalidArgument, "garbage comm");
  for (int k = 0; k < ncclNumResults; k++) CHECK(ncclGetErrorString((ncclResult_t)k)[0] != 0, "string %d", k);
  /* A bad argument on one rank: refused, and the communicator fails on
   * every rank (its peers would pair their parts with its next call). */
  CHECK(ncclAllGather(sendb[0], recvb[0], 1, (ncclDataType_t)99, comms[0], streams[0]) == ncclInvalidArgument,
        "datatype");
  OK(ncclCommGetAsyncError(comms[1], &ae));
  CHECK(ae != ncclSuccess, "rank 1 did not fail after rank 0's refusal");
  CHECK(ncclScatter(sendb[1], recvb[1], 1, ncclInt8, 0, comms[1], streams[1]) != ncclSuccess, "a call after the failure");

  OK(ncclCommFinalize(comms[0]));
  CHECK(ncclAllGather(sendb[0], recvb[0], 1, ncclInt8, comms[0], streams[0]) == ncclInvalidUsage, "finalized");
  OK(ncclCommAbort(comms[1]));
  CHECK(ncclAllGather(sendb[1], recvb[1], 1, ncclInt8, comms[1], streams[1]) == ncclInvalidUsage, "aborted");
  for (int r = 0; r < N; r++) OK(ncclCommDestroy(comms[r]));
  CHECK(ncclCommDestroy(comms[0]) == ncclInvalidArgument, "second destroy");

  /* ncclCommInitRank for every rank from one thread, in one group. */
  ncclUniqueId id;
  OK(ncclGetUniqueId(&id));
  OK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    OK(cecollSetDevice(r % ndevs));
    OK(ncclCommInitRank(&comms[r], N, id, r));
  }
  OK(ncclGroupEnd());
  run_collectives("InitRank group");
  for (int r = 0; r < N; r++) OK(ncclCommDestroy(comms[r]));

  free_buffers();
  if (failures) {
    printf("smoke: %d failures\n", failures);
    return 1;
  }
  printf("smoke: all passed\n");
  return 0;
}
