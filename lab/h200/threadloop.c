/* lab/h200/threadloop.c: a loop of one collective with one thread per rank
 * (or one thread issuing every rank in a group), to count hangs fast.
 *
 * threadloop -f scatter|gather|allgather|alltoall [-r RANKS] [-c COUNT]
 *            [-i ITERS] [-m threads|persist|group] [-t SECONDS] [-w]
 *
 * -m threads: new threads every iteration, as ctests' -m threads does;
 * persist: the same threads all along, meeting at a barrier; group: the
 * main thread issues every rank inside ncclGroupStart/End.
 * -w: buffers from ncclMemAlloc registered as symmetric windows.
 * Each iteration uploads new inputs (synchronous copies), runs the
 * collective, synchronizes every stream and checks every result. A
 * watchdog prints "HANG iter=I" with each rank's state (1: inside the
 * collective call, 2: in its stream synchronize, 3: done) and exits 3 when
 * no iteration finished for -t seconds (default 10; with -H it sleeps a
 * minute first, for a debugger to attach); "OK iters=I" and exit 0
 * otherwise, "WRONG" and exit 1 on a wrong byte. -W: one grouped
 * collective from the main thread before the loop (a warm-up).
 * Build: gcc -O2 -Iinclude -o build/threadloop lab/h200/threadloop.c -Lbuild -lcecoll -lpthread */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "nccl_ce.h"

#define MAXR 32
#define CK(x)                                                                                      \
  do {                                                                                             \
    ncclResult_t r_ = (x);                                                                         \
    if (r_ != ncclSuccess) {                                                                       \
      printf("FAIL %s:%d %s -> %d: %s\n", __FILE__, __LINE__, #x, (int)r_, ncclGetLastError(NULL)); \
      fflush(stdout);                                                                              \
      _exit(2);                                                                                    \
    }                                                                                              \
  } while (0)

static int n = 4, iters = 200, timeout_s = 10, win = 0, hold = 0, warm = 0;
static atomic_int state[MAXR];
static size_t count = 1024;
static const char* fname = "scatter";
static const char* mode = "threads";
static ncclComm_t comm[MAXR];
static cudaStream_t stream[MAXR];
static void *sendb[MAXR], *recvb[MAXR];
static ncclWindow_t sw[MAXR], rw[MAXR];
static size_t sendsz, recvsz;
static unsigned char *hin[MAXR], *hout;
static atomic_int progress;
static pthread_barrier_t bar;
static ncclUniqueId uid;

static ncclResult_t call(int r) {
  if (!strcmp(fname, "scatter")) return ncclScatter(sendb[r], recvb[r], count, ncclUint8, 0, comm[r], stream[r]);
  if (!strcmp(fname, "gather")) return ncclGather(sendb[r], recvb[r], count, ncclUint8, 0, comm[r], stream[r]);
  if (!strcmp(fname, "allgather")) return ncclAllGather(sendb[r], recvb[r], count, ncclUint8, comm[r], stream[r]);
  return ncclAlltoAll(sendb[r], recvb[r], count, ncclUint8, comm[r], stream[r]);
}

static unsigned char expect(int r, size_t i) { /* byte i of rank r's recv */
  size_t blk = i / count, j = i % count;
  if (!strcmp(fname, "scatter")) return (unsigned char)(0 * 7 + r * 3 + j); /* root 0, block r */
  if (!strcmp(fname, "gather")) return (unsigned char)(blk * 7 + j);
  if (!strcmp(fname, "allgather")) return (unsigned char)(blk * 7 + j);
  return (unsigned char)(blk * 7 + r * 3 + j); /* alltoall: block r of sender blk */
}

static void fill(int r, int it) {
  for (size_t i = 0; i < sendsz; i++) {
    size_t blk = i / count, j = i % count;
    hin[r][i] = (unsigned char)(r * 7 + blk * 3 + j + it);
  }
  CK(cecollMemcpy(sendb[r], hin[r], sendsz));
}

static int check(int r, int it, unsigned char* buf) {
  if (!strcmp(fname, "gather") && r != 0) return 0;
  CK(cecollMemcpy(buf, recvb[r], recvsz));
  for (size_t i = 0; i < recvsz; i++)
    if (buf[i] != (unsigned char)(expect(r, i) + it)) {
      printf("WRONG iter=%d rank=%d byte=%zu got=%d want=%d\n", it, r, i, buf[i], (unsigned char)(expect(r, i) + it));
      fflush(stdout);
      return 1;
    }
  return 0;
}

static void* rank_once(void* p) {
  int r = (int)(intptr_t)p;
  CK(cecollSetDevice(0));
  atomic_store(&state[r], 1);
  CK(call(r));
  atomic_store(&state[r], 2);
  CK(cecollStreamSynchronize(stream[r]));
  atomic_store(&state[r], 3);
  return NULL;
}

static void* rank_persist(void* p) {
  int r = (int)(intptr_t)p;
  unsigned char* buf = malloc(recvsz);
  CK(cecollSetDevice(0));
  for (int it = 0; it < iters; it++) {
    fill(r, it);
    pthread_barrier_wait(&bar);
    atomic_store(&state[r], 1);
    CK(call(r));
    atomic_store(&state[r], 2);
    CK(cecollStreamSynchronize(stream[r]));
    atomic_store(&state[r], 3);
    pthread_barrier_wait(&bar);
    if (check(r, it, buf)) _exit(1);
    if (r == 0) atomic_store(&progress, it + 1);
  }
  free(buf);
  return NULL;
}

static void* init_rank(void* p) {
  int r = (int)(intptr_t)p;
  CK(cecollSetDevice(0));
  CK(ncclCommInitRank(&comm[r], n, uid, r));
  CK(cecollStreamCreate(&stream[r]));
  return NULL;
}

static void* reg_rank(void* p) {
  int r = (int)(intptr_t)p;
  CK(cecollSetDevice(0));
  CK(ncclCommWindowRegister(comm[r], sendb[r], sendsz < 4096 ? 4096 : sendsz, &sw[r], NCCL_WIN_COLL_SYMMETRIC));
  CK(ncclCommWindowRegister(comm[r], recvb[r], recvsz < 4096 ? 4096 : recvsz, &rw[r], NCCL_WIN_COLL_SYMMETRIC));
  return NULL;
}

static void on_threads(void* (*f)(void*)) {
  pthread_t th[MAXR];
  for (int r = 0; r < n; r++) pthread_create(&th[r], NULL, f, (void*)(intptr_t)r);
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
}

static void* watchdog(void* p) {
  (void)p;
  int last = -1, same = 0;
  for (;;) {
    sleep(1);
    int cur = atomic_load(&progress);
    if (cur == last) {
      if (++same >= timeout_s) {
        printf("HANG iter=%d f=%s n=%d mode=%s count=%zu states", cur, fname, n, mode, count);
        for (int r = 0; r < n; r++) printf(" %d", atomic_load(&state[r]));
        printf(" pid=%d\n", (int)getpid());
        fflush(stdout);
        if (hold) sleep(60);
        _exit(3);
      }
    } else {
      last = cur, same = 0;
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  int o;
  while ((o = getopt(argc, argv, "f:r:c:i:m:t:wHW")) != -1) {
    switch (o) {
      case 'f': fname = optarg; break;
      case 'r': n = atoi(optarg); break;
      case 'c': count = strtoull(optarg, NULL, 0); break;
      case 'i': iters = atoi(optarg); break;
      case 'm': mode = optarg; break;
      case 't': timeout_s = atoi(optarg); break;
      case 'w': win = 1; break;
      case 'H': hold = 1; break;
      case 'W': warm = 1; break;
      default: fprintf(stderr, "usage: see the header\n"); return 2;
    }
  }
  if (n < 1 || n > MAXR) return 2;
  int rooted = !strcmp(fname, "scatter") || !strcmp(fname, "gather");
  sendsz = (!strcmp(fname, "scatter") || !strcmp(fname, "alltoall")) ? n * count : count;
  recvsz = (!strcmp(fname, "scatter")) ? count : n * count;
  (void)rooted;
  CK(cecollSetDevice(0));
  if (!strcmp(mode, "group")) {
    int devs[MAXR] = {0};
    CK(ncclCommInitAll(comm, n, devs));
    for (int r = 0; r < n; r++) CK(cecollStreamCreate(&stream[r]));
  } else {
    CK(ncclGetUniqueId(&uid));
    on_threads(init_rank);
  }
  for (int r = 0; r < n; r++) {
    size_t a = sendsz < 4096 ? 4096 : sendsz, b = recvsz < 4096 ? 4096 : recvsz;
    CK(ncclMemAlloc(&sendb[r], a));
    CK(ncclMemAlloc(&recvb[r], b));
    hin[r] = malloc(sendsz);
  }
  if (win) {
    if (!strcmp(mode, "group")) {
      CK(ncclGroupStart());
      for (int r = 0; r < n; r++) reg_rank((void*)(intptr_t)r);
      CK(ncclGroupEnd());
    } else {
      on_threads(reg_rank);
    }
  }
  hout = malloc(recvsz);
  if (warm) {
    for (int r = 0; r < n; r++) fill(r, 0);
    CK(ncclGroupStart());
    for (int r = 0; r < n; r++) CK(call(r));
    CK(ncclGroupEnd());
    for (int r = 0; r < n; r++) CK(cecollStreamSynchronize(stream[r]));
  }
  pthread_t wd;
  pthread_create(&wd, NULL, watchdog, NULL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!strcmp(mode, "persist")) {
    pthread_barrier_init(&bar, NULL, n);
    on_threads(rank_persist);
  } else {
    for (int it = 0; it < iters; it++) {
      for (int r = 0; r < n; r++) fill(r, it);
      if (!strcmp(mode, "group")) {
        CK(ncclGroupStart());
        for (int r = 0; r < n; r++) CK(call(r));
        CK(ncclGroupEnd());
        for (int r = 0; r < n; r++) CK(cecollStreamSynchronize(stream[r]));
      } else {
        on_threads(rank_once);
      }
      for (int r = 0; r < n; r++)
        if (check(r, it, hout)) return 1;
      atomic_store(&progress, it + 1);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / iters;
  printf("OK iters=%d f=%s n=%d mode=%s count=%zu win=%d us/iter=%.1f\n", iters, fname, n, mode, count, win, us);
  for (int r = 0; r < n; r++) {
    if (win) {
      CK(ncclCommWindowDeregister(comm[r], sw[r]));
      CK(ncclCommWindowDeregister(comm[r], rw[r]));
    }
    CK(ncclCommDestroy(comm[r]));
  }
  return 0;
}
