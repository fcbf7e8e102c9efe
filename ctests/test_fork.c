/* test_fork.c: a child forked after cecoll loaded cannot use it (its Go
 * runtime stays in the parent), so every entry point that touches a
 * communicator or the device must refuse at once with ncclInvalidUsage
 * and a last-error text that names the fork and the way out (spawn), not
 * hang or succeed. ncclGetErrorString, ncclGetVersion and ncclGetLastError
 * still answer. The parent, whose communicators were live at the fork,
 * goes on working. Each child runs under an alarm: a hang is a failure. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl.h"
#include "nccl_ce.h"

#define N 2
#define COUNT 1024

static int passed, failed;

#define EXPECT(cond, ...)                                   \
  do {                                                      \
    if (cond) {                                             \
      passed++;                                             \
    } else {                                                \
      failed++;                                             \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);  \
      fprintf(stderr, __VA_ARGS__);                         \
      fprintf(stderr, "\n");                                \
    }                                                       \
  } while (0)

#define REQUIRE_OK(call)                                                                                 \
  do {                                                                                                   \
    ncclResult_t r_ = (call);                                                                            \
    if (r_ != ncclSuccess) {                                                                             \
      fprintf(stderr, "FATAL %s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call, (int)r_, ncclGetLastError(NULL)); \
      exit(2);                                                                                           \
    }                                                                                                    \
  } while (0)

/* In the child: call must be refused with the fork's text naming fn. */
#define REFUSED(fn, call)                                                                              \
  do {                                                                                                 \
    ncclResult_t r_ = (call);                                                                          \
    const char* t_ = ncclGetLastError(NULL);                                                           \
    EXPECT(r_ == ncclInvalidUsage, "child: %s -> %d (%s), want ncclInvalidUsage; last error: %s", #call, \
           (int)r_, ncclGetErrorString(r_), t_);                                                       \
    EXPECT(t_ && strncmp(t_, fn ": ", strlen(fn) + 2) == 0 && strstr(t_, "forked") && strstr(t_, "spawn"), \
           "child: %s: last error does not name %s, the fork and spawn: %s", #call, fn, t_ ? t_ : "(null)"); \
  } while (0)

static ncclComm_t comms[N];
static cudaStream_t streams[N];
static float* bufs[N][2];

static ncclResult_t allgather_all(void) {
  ncclResult_t r = ncclGroupStart(), x;
  for (int k = 0; k < N; k++) {
    x = ncclAllGather(bufs[k][0], bufs[k][1], COUNT, ncclFloat32, comms[k], streams[k]);
    if (r == ncclSuccess) r = x;
  }
  x = ncclGroupEnd();
  return r == ncclSuccess ? x : r;
}

static void check_allgather(const char* when) {
  for (int r = 0; r < N; r++)
    for (int i = 0; i < COUNT; i++) bufs[r][0][i] = (float)(r * COUNT + i);
  EXPECT(allgather_all() == ncclSuccess, "parent %s: AllGather: %s", when, ncclGetLastError(NULL));
  for (int r = 0; r < N; r++) REQUIRE_OK(cecollStreamSynchronize(streams[r]));
  for (int r = 0; r < N; r++) {
    int ok = 1;
    for (int i = 0; i < N * COUNT; i++) ok &= bufs[r][1][i] == (float)i;
    EXPECT(ok, "parent %s: rank %d has wrong AllGather data", when, r);
  }
}

/* Everything a forked child might try; returns its failure count. */
static int child(void) {
  alarm(20);
  ncclUniqueId id;
  ncclComm_t c = NULL;
  int devs[N] = {0, 0}, v = 0;
  void* p = NULL;
  const char* name = NULL;
  cudaStream_t s = NULL;
  struct ncclCeCollArgs args;
  memset(&args, 0, sizeof args);
  args.func = ncclFuncAllGather;
  args.datatype = ncclFloat32;
  args.nElts = COUNT;
  args.eltSize = sizeof(float);
  args.sendBuff = bufs[0][0];
  args.recvBuff = bufs[0][1];

  REFUSED("ncclAllGather", ncclAllGather(bufs[0][0], bufs[0][1], COUNT, ncclFloat32, comms[0], streams[0]));
  REFUSED("ncclAlltoAll", ncclAlltoAll(bufs[0][0], bufs[0][1], COUNT / N, ncclFloat32, comms[0], streams[0]));
  REFUSED("ncclScatter", ncclScatter(bufs[0][0], bufs[0][1], COUNT / N, ncclFloat32, 0, comms[0], streams[0]));
  REFUSED("ncclGather", ncclGather(bufs[0][0], bufs[0][1], COUNT / N, ncclFloat32, 0, comms[0], streams[0]));
  /* Refused by name in CE-only mode too: the stubs' path. */
  REFUSED("ncclAllReduce",
          ncclAllReduce(bufs[0][0], bufs[0][1], COUNT, ncclFloat32, ncclSum, comms[0], streams[0]));
  REFUSED("ncclGroupStart", ncclGroupStart());
  REFUSED("ncclGroupEnd", ncclGroupEnd());
  REFUSED("ncclGetUniqueId", ncclGetUniqueId(&id));
  memset(&id, 0, sizeof id);
  REFUSED("ncclCommInitRank", ncclCommInitRank(&c, N, id, 0));
  REFUSED("ncclCommInitAll", ncclCommInitAll(&c, N, devs));
  REFUSED("ncclCommCount", ncclCommCount(comms[0], &v));
  REFUSED("ncclCommGetAsyncError", ncclCommGetAsyncError(comms[0], (ncclResult_t*)&v));
  REFUSED("ncclMemAlloc", ncclMemAlloc(&p, 4096));
  REFUSED("ncclCeInit", ncclCeInit(comms[0]));
  REFUSED("ncclLaunchCeColl", ncclLaunchCeColl(comms[0], &args, streams[0]));
  REFUSED("cecollGetBackend", cecollGetBackend(&name));
  REFUSED("cecollSetDevice", cecollSetDevice(0));
  REFUSED("cecollStreamCreate", cecollStreamCreate(&s));
  REFUSED("cecollStreamSynchronize", cecollStreamSynchronize(streams[0]));
  REFUSED("ncclCommAbort", ncclCommAbort(comms[1]));
  REFUSED("ncclCommDestroy", ncclCommDestroy(comms[0]));
  EXPECT(ncclCeImplemented(ncclFuncAllGather, 0, ncclFloat32) == 0, "child: ncclCeImplemented is not 0");
  EXPECT(strstr(ncclGetLastError(NULL), "forked") != NULL, "child: ncclCeImplemented set no fork text");

  /* What answers from C. */
  EXPECT(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE, "child: ncclGetVersion -> %d", v);
  EXPECT(strstr(ncclGetErrorString(ncclInvalidUsage), "invalid usage") != NULL, "child: ncclGetErrorString");
  EXPECT(strstr(ncclGetLastError(comms[0]), "forked") != NULL, "child: ncclGetLastError(comm): %s",
         ncclGetLastError(comms[0]));
  fprintf(stderr, "child: %d passed, %d failed\n", passed, failed);
  return failed;
}

/* Forks, runs child() there, and counts the child's verdict. */
static void fork_and_check(const char* what) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  if (pid == 0) _exit(child() == 0 ? 0 : 1);
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) {
    perror("waitpid");
    exit(2);
  }
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child %s", what,
         WIFSIGNALED(st) ? (WTERMSIG(st) == SIGALRM ? "hung (alarm)" : "died of a signal") : "saw failures (above)");
}

int main(void) {
  alarm(120);
  int devs[N] = {0, 0};
  REQUIRE_OK(ncclCommInitAll(comms, N, devs));
  for (int r = 0; r < N; r++) {
    REQUIRE_OK(cecollStreamCreate(&streams[r]));
    for (int b = 0; b < 2; b++) bufs[r][b] = calloc(N * COUNT, sizeof(float));
  }
  check_allgather("before the fork");
  fork_and_check("communicators live");
  /* The parent's communicators and streams are unharmed. */
  check_allgather("after the fork");
  for (int r = 0; r < N; r++) EXPECT(ncclCommDestroy(comms[r]) == ncclSuccess, "parent: destroy rank %d", r);
  for (int r = 0; r < N; r++) {
    REQUIRE_OK(cecollStreamDestroy(streams[r]));
    for (int b = 0; b < 2; b++) free(bufs[r][b]);
  }
  printf("test_fork: %d passed, %d failed\n", passed, failed);
  return failed != 0 || passed == 0;
}
