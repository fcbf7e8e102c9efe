/* cecoll-perf: times cecoll's four collectives in the table format of
 * nccl-tests. Built against the public headers only and backend-neutral
 * through the cecoll helpers, so the same binary runs on the host device
 * and on a GPU.
 *
 *   cecoll-perf -N 4 -b 8 -e 64M -f 8 -n 20 -w 5 -c 1 [-o allgather] [-d uint8] [-r 0] [-R 1]
 *
 * -N ranks (one process, one thread driving all ranks inside groups), -b/-e/-f
 * per-rank chunk sizes from -b to -e by factor -f, -n iterations, -w warm-up,
 * -c check data, -o one collective (allgather|alltoall|scatter|gather|all),
 * -d datatype, -r root, -R 1 = buffers from ncclMemAlloc in registered windows
 * (zero-copy), 0 = unregistered ncclMemAlloc buffers (staged path).
 *
 * Size column: the larger of one rank's send and recv bytes (as nccl-tests);
 * time: mean per collective over back-to-back iterations; algbw = size/time;
 * busbw = algbw * (n-1)/n. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "nccl_ce.h"

#define CHECK(cmd)                                                              \
  do {                                                                          \
    ncclResult_t r_ = (cmd);                                                    \
    if (r_ != ncclSuccess) {                                                    \
      fprintf(stderr, "%s:%d %s: %s (%s)\n", __FILE__, __LINE__, #cmd,          \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                  \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

enum { MAXR = 64 };
static const char* kCollNames[] = {"allgather", "alltoall", "scatter", "gather"};
static const struct { const char* name; ncclDataType_t t; size_t size; } kTypes[] = {
    {"int8", ncclInt8, 1},       {"uint8", ncclUint8, 1},     {"int32", ncclInt32, 4},
    {"uint32", ncclUint32, 4},   {"int64", ncclInt64, 8},     {"uint64", ncclUint64, 8},
    {"half", ncclFloat16, 2},    {"float", ncclFloat32, 4},   {"double", ncclFloat64, 8},
    {"bfloat16", ncclBfloat16, 2}, {"f8e4m3", ncclFloat8e4m3, 1}, {"f8e5m2", ncclFloat8e5m2, 1},
};

static int nranks = 4, iters = 20, warmup = 5, check = 1, root = 0, registered = 1;
static size_t minBytes = 8, maxBytes = 64 << 20, factor = 8;
static int typeIdx = 1;
static ncclComm_t comms[MAXR];
static cudaStream_t streams[MAXR];

struct bufs {
  void *send, *recv;        /* device buffers (ncclMemAlloc) */
  ncclWindow_t sw, rw;      /* windows when registered */
};
static struct bufs B[MAXR];
static size_t bufBytes;     /* bytes of each of send and recv per rank */

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return (size_t)v;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The buffers one rank passes for collective c, in place or not. */
static void args(int c, int r, int inPlace, size_t chunk, const void** s, void** d) {
  char* send = B[r].send;
  char* recv = B[r].recv;
  *s = send;
  *d = recv;
  if (!inPlace) return;
  switch (c) {
    case 0: *s = recv + (size_t)r * chunk; break;                 /* allgather */
    case 1: *s = recv; break;                                     /* alltoall (cecoll stages it) */
    case 2: if (r == root) *d = send + (size_t)root * chunk; break; /* scatter */
    case 3: if (r == root) *s = recv + (size_t)root * chunk; break; /* gather */
  }
}

static void launch(int c, size_t count, size_t chunk, int inPlace) {
  CHECK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) {
    const void* s;
    void* d;
    args(c, r, inPlace, chunk, &s, &d);
    ncclDataType_t t = kTypes[typeIdx].t;
    switch (c) {
      case 0: CHECK(ncclAllGather(s, d, count, t, comms[r], streams[r])); break;
      case 1: CHECK(ncclAlltoAll(s, d, count, t, comms[r], streams[r])); break;
      case 2: CHECK(ncclScatter(s, d, count, t, root, comms[r], streams[r])); break;
      case 3: CHECK(ncclGather(s, d, count, t, root, comms[r], streams[r])); break;
    }
  }
  CHECK(ncclGroupEnd());
}

static void syncAll(void) {
  for (int r = 0; r < nranks; r++) CHECK(cecollStreamSynchronize(streams[r]));
}

static unsigned char pattern(int rank, size_t i) { return (unsigned char)(rank * 131 + i * 7 + 1); }

/* Fills inputs, poisons outputs, runs once, and counts wrong bytes. */
static long verify(int c, size_t count, size_t chunk, int inPlace) {
  size_t total = chunk * nranks;
  unsigned char* h = malloc(total ? total : 1);
  unsigned char* g = malloc(total ? total : 1);
  for (int r = 0; r < nranks; r++) {
    /* every rank's send region holds pattern(r, i); recv is poisoned */
    for (size_t i = 0; i < total; i++) h[i] = pattern(r, i);
    memset(g, 0xA5, total);
    CHECK(cecollMemcpy(B[r].recv, g, total));
    CHECK(cecollMemcpy(B[r].send, h, total));
    if (inPlace) {
      /* in-place inputs live in recv at the place the collective reads them */
      if (c == 0) CHECK(cecollMemcpy((char*)B[r].recv + r * chunk, h + r * chunk, chunk));
      if (c == 1) CHECK(cecollMemcpy(B[r].recv, h, total));
      if (c == 3 && r == root) CHECK(cecollMemcpy((char*)B[r].recv + r * chunk, h + r * chunk, chunk));
    }
  }
  launch(c, count, chunk, inPlace);
  syncAll();
  long wrong = 0;
  for (int r = 0; r < nranks; r++) {
    const void* s;
    void* d;
    args(c, r, inPlace, chunk, &s, &d);
    size_t n = (c == 0 || c == 1 || (c == 3 && r == root)) ? total : (c == 2 ? chunk : 0);
    if (n == 0) continue;
    CHECK(cecollMemcpy(g, d, n));
    for (size_t i = 0; i < n; i++) {
      size_t blk = i / chunk, off = i % chunk;
      unsigned char want;
      switch (c) {
        case 0: /* block b comes from rank b's input: send, or recv's block b in place */
          want = pattern((int)blk, inPlace ? blk * chunk + off : off);
          break;
        case 1: /* rank b's block meant for me */
          want = pattern((int)blk, (size_t)r * chunk + off);
          break;
        case 2: /* root's block r */
          want = pattern(root, (size_t)r * chunk + off);
          break;
        default: /* gather at the root: rank b's send; the root's own block in place */
          want = pattern((int)blk, (inPlace && (int)blk == root) ? blk * chunk + off : off);
      }
      if (g[i] != want) wrong++;
    }
  }
  free(h);
  free(g);
  return wrong;
}

static double timeColl(int c, size_t count, size_t chunk, int inPlace) {
  for (int i = 0; i < warmup; i++) launch(c, count, chunk, inPlace);
  syncAll();
  double t0 = now();
  for (int i = 0; i < iters; i++) launch(c, count, chunk, inPlace);
  syncAll();
  return (now() - t0) / iters;
}

static void usage(const char* p) {
  fprintf(stderr, "usage: %s [-N ranks] [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-c 0|1] "
                  "[-o allgather|alltoall|scatter|gather|all] [-d type] [-r root] [-R 0|1]\n", p);
  exit(2);
}

int main(int argc, char** argv) {
  const char* only = "all";
  int opt;
  while ((opt = getopt(argc, argv, "N:b:e:f:n:w:c:o:d:r:R:h")) != -1) {
    switch (opt) {
      case 'N': nranks = atoi(optarg); break;
      case 'b': minBytes = parseSize(optarg); break;
      case 'e': maxBytes = parseSize(optarg); break;
      case 'f': factor = parseSize(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'c': check = atoi(optarg); break;
      case 'o': only = optarg; break;
      case 'r': root = atoi(optarg); break;
      case 'R': registered = atoi(optarg); break;
      case 'd':
        typeIdx = -1;
        for (int i = 0; i < (int)(sizeof kTypes / sizeof kTypes[0]); i++)
          if (!strcmp(optarg, kTypes[i].name)) typeIdx = i;
        if (typeIdx < 0) usage(argv[0]);
        break;
      default: usage(argv[0]);
    }
  }
  if (nranks < 1 || nranks > MAXR || root < 0 || root >= nranks || factor < 2 || iters < 1) usage(argv[0]);

  const char* backend;
  int ndev;
  CHECK(cecollGetBackend(&backend));
  CHECK(cecollGetDeviceCount(&ndev));
  int devs[MAXR];
  for (int r = 0; r < nranks; r++) devs[r] = r % ndev;
  CHECK(ncclCommInitAll(comms, nranks, devs));

  size_t esz = kTypes[typeIdx].size;
  bufBytes = ((maxBytes + esz - 1) / esz * esz) * nranks;
  if (registered) CHECK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) {
    CHECK(cecollSetDevice(devs[r]));
    CHECK(cecollStreamCreate(&streams[r]));
    CHECK(ncclMemAlloc(&B[r].send, bufBytes));
    CHECK(ncclMemAlloc(&B[r].recv, bufBytes));
    if (registered) {
      CHECK(ncclCommWindowRegister(comms[r], B[r].send, bufBytes, &B[r].sw, NCCL_WIN_COLL_SYMMETRIC));
      CHECK(ncclCommWindowRegister(comms[r], B[r].recv, bufBytes, &B[r].rw, NCCL_WIN_COLL_SYMMETRIC));
    }
  }
  if (registered) CHECK(ncclGroupEnd());

  printf("# cecoll-perf: backend %s, %d ranks on %d device(s), %s buffers, type %s, root %d, iters %d, warmup %d\n",
         backend, nranks, ndev, registered ? "registered" : "unregistered", kTypes[typeIdx].name, root, iters, warmup);
  long totalWrong = 0;
  for (int c = 0; c < 4; c++) {
    if (strcmp(only, "all") && strcmp(only, kCollNames[c])) continue;
    printf("#\n# %s\n", kCollNames[c]);
    printf("# %10s %12s %8s %6s %5s   %9s %8s %8s %6s   %9s %8s %8s %6s\n", "size", "count", "type", "redop",
           "root", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw", "#wrong");
    for (size_t chunk = minBytes; chunk <= maxBytes; chunk *= factor) {
      size_t count = chunk / esz;
      size_t bytes = count * esz;
      size_t size = bytes * nranks;
      printf("  %10zu %12zu %8s %6s %5d", size, count, kTypes[typeIdx].name, "none", (c >= 2) ? root : -1);
      for (int inPlace = 0; inPlace < 2; inPlace++) {
        long wrong = check ? verify(c, count, bytes, inPlace) : -1;
        double t = timeColl(c, count, bytes, inPlace);
        double algbw = size / t / 1e9;
        double busbw = algbw * (nranks - 1) / nranks;
        printf("   %9.2f %8.2f %8.2f %6ld", t * 1e6, algbw, busbw, wrong);
        if (wrong > 0) totalWrong += wrong;
      }
      printf("\n");
      fflush(stdout);
    }
  }
  for (int r = 0; r < nranks; r++) {
    if (registered) {
      CHECK(ncclCommWindowDeregister(comms[r], B[r].sw));
      CHECK(ncclCommWindowDeregister(comms[r], B[r].rw));
    }
    CHECK(ncclMemFree(B[r].send));
    CHECK(ncclMemFree(B[r].recv));
    CHECK(cecollStreamDestroy(streams[r]));
    CHECK(ncclCommDestroy(comms[r]));
  }
  printf("# out of bounds values: %ld %s\n", totalWrong, totalWrong ? "FAILED" : "OK");
  return totalWrong ? 1 : 0;
}
