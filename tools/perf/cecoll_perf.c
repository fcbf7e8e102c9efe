/* cecoll-perf: times cecoll's operations as NVIDIA's nccl-tests times
 * NCCL's: the same options, the same table, the same footer, so that
 * scripts written for nccl-tests read its output. cecoll's extras (the %ceil
 * columns, --json, --plot, -P processes, -B bootstrap timing) come after
 * what nccl-tests prints. Built against the public headers only and
 * backend-neutral through the cecoll helpers, so one binary runs on the
 * host device and on a GPU. cecoll-perf -h describes every option. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <poll.h>
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
#include "nccl_ce.h"

#define CHECK(cmd)                                                              \
  do {                                                                          \
    ncclResult_t r_ = (cmd);                                                    \
    if (r_ != ncclSuccess) {                                                    \
      fprintf(stderr, "%s:%d %s: %s (%s)\n", __FILE__, __LINE__, #cmd,          \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                  \
      exit(4);                                                                  \
    }                                                                           \
  } while (0)

extern char** environ;

enum { MAXR = 64, MAXP = 64, MAXT = 64, NCOLL = 7 };
enum { C_ALLGATHER, C_ALLTOALL, C_SCATTER, C_GATHER, C_SENDRECV, C_BROADCAST, C_ALLTOALLV };
static const char* kCollNames[NCOLL] = {"allgather", "alltoall",  "scatter",  "gather",
                                        "sendrecv",  "broadcast", "alltoallv"};
/* nccl-tests' binary of each collective: its "Collective test starting" name
 * (alltoallv_perf: rccl-tests'). */
static const char* kTestNames[NCOLL] = {"all_gather_perf", "alltoall_perf",  "scatter_perf",  "gather_perf",
                                        "sendrecv_perf",   "broadcast_perf", "alltoallv_perf"};
static const struct { const char* name; ncclDataType_t t; size_t size; } kTypes[] = {
    {"int8", ncclInt8, 1},       {"uint8", ncclUint8, 1},     {"int32", ncclInt32, 4},
    {"uint32", ncclUint32, 4},   {"int64", ncclInt64, 8},     {"uint64", ncclUint64, 8},
    {"half", ncclFloat16, 2},    {"float", ncclFloat32, 4},   {"double", ncclFloat64, 8},
    {"bfloat16", ncclBfloat16, 2}, {"f8e4m3", ncclFloat8e4m3, 1}, {"f8e5m2", ncclFloat8e5m2, 1},
};
enum { NTYPES = sizeof kTypes / sizeof kTypes[0], TYPE_FLOAT = 7 };
/* -o: nccl-tests' reduction ops. None of these collectives reduces. */
static const char* kOps[] = {"none", "sum", "prod", "max", "min", "avg", "mulsum", "all"};

/* ---- Options (nccl-tests' names and defaults) ---------------------------- */

static int nThreads = 1, nGpus = 1, iters = 20, aggIters = 1, warmup = 5, cycles = 1, parallelInit = 0;
static int check = 1, typeIdx = TYPE_FLOAT, root = 0, blocking = 0, streamNull = 0, timeoutS = 0;
static int graphLaunches = 0, cpuTime = 0, average = 1, reg = 0;
static size_t minBytes = 32 << 20, maxBytes = 32 << 20, stepBytes = 1 << 20, stepFactor = 1;
static const char *minArg = "32M", *maxArg = "32M"; /* as given, for messages */
/* cecoll's extras */
static int collIdx = -1; /* -1: all four */
static double ceilTol = 0.10;
static const char *jsonPath = NULL, *plotPath = NULL;

/* ---- Ranks of this process ------------------------------------------------ */

static int nranks;                 /* ranks of the communicator */
static int nlocal;                 /* ranks driven here: nGpus * nThreads, or 1 (-P) */
static int first = 0;              /* global rank of local rank 0 */
static int multiproc = 0;          /* -P child */
static ncclUniqueId commId;
static ncclComm_t comms[MAXR];
static cudaStream_t streams[MAXR];
static int devs[MAXR];
static struct {
  void *send, *recv;               /* ncclMemAlloc, bufBytes each */
  ncclWindow_t sw, rw;             /* -R 2 */
  void *sh, *rh;                   /* -R 1 */
} B[MAXR];
static cecollGraph_t graphs[MAXR];
static size_t bufBytes;
static void *redSend, *redRecv;    /* -P: an AllGather of 8 bytes per rank combines values */

/* A thread drives local ranks l0 .. l0+n-1 (nccl-tests' -g ranks per -t thread). */
struct thr {
  int id, l0, n;
  pthread_t pt;
};
static struct thr thrs[MAXT];
static pthread_barrier_t bar;

/* One measured configuration. */
struct job {
  int c, type, root, inPlace;
  size_t count, chunk;             /* per rank: elements, bytes */
};

static int rooted(int c) { return c == C_SCATTER || c == C_GATHER || c == C_BROADCAST; }

/* sendrecv and broadcast size a job by one block (nccl-tests' meaning), the
 * others by a block per rank. */
static int oneBlock(int c) { return c == C_SENDRECV || c == C_BROADCAST; }

/* Bytes of a rank's buffers the job uses: a block per rank, or one block
 * (sendrecv: to rank+1, from rank-1; broadcast: the root's). */
static size_t span(const struct job* j) { return oneBlock(j->c) ? j->chunk : j->chunk * nranks; }

/* ncclAllToAllv has no in-place form (RCCL's neither): its rows have only
 * the out-of-place placement. */
static int hasInPlace(int c) { return c != C_ALLTOALLV; }

/* ---- AlltoAllv's split ---------------------------------------------------- */

/* alltoallv moves the bytes of the AlltoAll of its size (each rank sends and
 * receives size bytes, count elements per pair on average), split unevenly
 * by a fixed rule: pair (s, d) has weight k = 1 + (d - s) mod N (1 for a
 * rank's own pair, N for its pair to rank s-1) and moves F(k) - F(k-1)
 * elements, F(k) = floor(count x k(k+1) / (N+1)). Each rank's sends and
 * each rank's receives have the weights 1..N once each, so their counts
 * telescope to F(N) = N x count exactly, and a pair moves within one element
 * of 2k/(N+1) times the mean. Small counts round low weights down to zero
 * (the rule's own zero pairs). Sends are packed in receiver order, receives
 * in sender order. */
static size_t splitF(size_t count, size_t k) {
  size_t n1 = (size_t)nranks + 1, kk = k * (k + 1);
  return count / n1 * kk + count % n1 * kk / n1; /* floor(count*kk/n1) without overflow */
}

static size_t splitCount(size_t count, int s, int d) {
  size_t k = 1 + (size_t)((d - s + nranks) % nranks);
  return splitF(count, k) - splitF(count, k - 1);
}

/* A rank's four ncclAllToAllv arrays (elements), built when a size is set. */
struct split {
  size_t sc[MAXP], sd[MAXP], rc[MAXP], rd[MAXP];
};
static struct split V[MAXR]; /* per local rank, written by its thread only */

static void buildSplit(size_t count, int r, struct split* v) {
  size_t so = 0, ro = 0;
  for (int p = 0; p < nranks; p++) {
    v->sc[p] = splitCount(count, r, p);
    v->sd[p] = so;
    so += v->sc[p];
    v->rc[p] = splitCount(count, p, r);
    v->rd[p] = ro;
    ro += v->rc[p];
  }
}

/* ---- Errors and parsing --------------------------------------------------- */

static void usageError(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cecoll-perf: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(" (cecoll-perf -h lists the options)\n", stderr);
  va_end(ap);
  exit(2);
}

static long parseInt(char flag, const char* s, long lo, long hi) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (end == s || *end || errno || v < lo || v > hi) usageError("-%c %s: not an integer from %ld to %ld", flag, s, lo, hi);
  return v;
}

/* nccl-tests' sizes: a number of bytes with an optional K, M or G suffix. */
static size_t parseSize(char flag, const char* s) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (end != s && *end && !end[1]) {
    switch (*end) {
      case 'K': case 'k': v *= 1024; end++; break;
      case 'M': case 'm': v *= 1024.0 * 1024; end++; break;
      case 'G': case 'g': v *= 1024.0 * 1024 * 1024; end++; break;
    }
  }
  if (end == s || *end || errno || !(v >= 0) || v > 1e15)
    usageError("-%c %s: not a size (bytes, with an optional K, M or G suffix)", flag, s);
  return (size_t)v;
}

static int lookup(const char* s, const char* const* names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

/* CLOCK_MONOTONIC: one clock for every process of the host. */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- -T: a watchdog over stream waits ------------------------------------- */

static long long deadlineNs[MAXT]; /* per thread, 0: not waiting */

static void* watchdog(void* arg) {
  (void)arg;
  for (;;) {
    usleep(50000);
    long long t = (long long)(now() * 1e9);
    for (int i = 0; i < nThreads; i++) {
      long long d = __atomic_load_n(&deadlineNs[i], __ATOMIC_RELAXED);
      if (d && t > d) {
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        printf("%s: Test timeout (%ds): the ranks of thread %d did not complete\n", host, timeoutS, i);
        fflush(stdout);
        fprintf(stderr, "cecoll-perf: test timeout (-T %d) on rank(s) %d..%d\n", timeoutS, first + thrs[i].l0,
                first + thrs[i].l0 + thrs[i].n - 1);
        _exit(3);
      }
    }
  }
  return NULL;
}

static void arm(const struct thr* t) {
  if (timeoutS) __atomic_store_n(&deadlineNs[t->id], (long long)((now() + timeoutS) * 1e9), __ATOMIC_RELAXED);
}
static void disarm(const struct thr* t) {
  if (timeoutS) __atomic_store_n(&deadlineNs[t->id], 0, __ATOMIC_RELAXED);
}

/* ---- Combining values over threads and processes -------------------------- */

/* Every rank's 8 bytes, through the communicator (-P only): also a barrier. */
static void gather8(const void* mine, void* all) {
  CHECK(cecollMemcpy(redSend, mine, 8));
  CHECK(ncclAllGather(redSend, redRecv, 8, ncclUint8, comms[0], streams[0]));
  arm(&thrs[0]);
  CHECK(cecollStreamSynchronize(streams[0]));
  disarm(&thrs[0]);
  CHECK(cecollMemcpy(all, redRecv, 8 * (size_t)nranks));
}

enum { RANK0 = 0, AVG = 1, MIN = 2, MAX = 3, SUM = 4 }; /* -a's values, and a sum */

static double reduce(const double* v, int n, int how) {
  double r = v[0];
  for (int i = 1; i < n; i++) {
    if (how == AVG || how == SUM) r += v[i];
    if (how == MIN && v[i] < r) r = v[i];
    if (how == MAX && v[i] > r) r = v[i];
  }
  return how == AVG ? r / n : r;
}

/* v of every thread of every process, combined as how says. Also a barrier. */
static double combine(const struct thr* t, double v, int how) {
  static double vals[MAXT];
  vals[t->id] = v;
  pthread_barrier_wait(&bar);
  double r = reduce(vals, nThreads, how);
  pthread_barrier_wait(&bar); /* every thread read vals before its next write */
  if (multiproc) {
    double all[MAXP];
    gather8(&r, all);
    r = reduce(all, nranks, how);
  }
  return r;
}

static void barrierAll(const struct thr* t) { (void)combine(t, 0, SUM); }

/* ---- Issuing the collectives ---------------------------------------------- */

/* The buffers rank r (local index l) passes. In place is nccl-tests' (and
 * NCCL's) layout in one buffer: AllGather sends recv + r*chunk, Gather the
 * same into recv; Scatter sends recv and receives at recv + r*chunk;
 * AlltoAll sends and receives recv. */
static void args(const struct job* j, int r, int l, const void** s, void** d) {
  char* recv = B[l].recv;
  *s = B[l].send;
  *d = recv;
  if (!j->inPlace) return;
  switch (j->c) {
    case 0: case 3: *s = recv + (size_t)r * j->chunk; break;
    case 1: *s = recv; break;
    case 2: *s = recv; *d = recv + (size_t)r * j->chunk; break;
    case C_SENDRECV: case C_BROADCAST: *s = recv; break;
  }
}

static void issue(const struct thr* t, const struct job* j) {
  ncclDataType_t ty = kTypes[j->type].t;
  if (t->n > 1) CHECK(ncclGroupStart());
  for (int l = t->l0; l < t->l0 + t->n; l++) {
    const void* s;
    void* d;
    args(j, first + l, l, &s, &d);
    switch (j->c) {
      case 0: CHECK(ncclAllGather(s, d, j->count, ty, comms[l], streams[l])); break;
      case 1: CHECK(ncclAlltoAll(s, d, j->count, ty, comms[l], streams[l])); break;
      case 2: CHECK(ncclScatter(s, d, j->count, ty, j->root, comms[l], streams[l])); break;
      case 3: CHECK(ncclGather(s, d, j->count, ty, j->root, comms[l], streams[l])); break;
      case C_SENDRECV: /* each rank's pair in a group of its own (nested in the thread's) */
        CHECK(ncclGroupStart());
        CHECK(ncclSend(s, j->count, ty, (first + l + 1) % nranks, comms[l], streams[l]));
        CHECK(ncclRecv(d, j->count, ty, (first + l + nranks - 1) % nranks, comms[l], streams[l]));
        CHECK(ncclGroupEnd());
        break;
      case C_BROADCAST: CHECK(ncclBroadcast(s, d, j->count, ty, j->root, comms[l], streams[l])); break;
      case C_ALLTOALLV:
        CHECK(ncclAllToAllv(s, V[l].sc, V[l].sd, d, V[l].rc, V[l].rd, ty, comms[l], streams[l]));
        break;
    }
  }
  if (t->n > 1) CHECK(ncclGroupEnd());
}

/* Waits for every stream of the thread's ranks (under -T's watchdog). */
static void complete(const struct thr* t) {
  arm(t);
  for (int l = t->l0; l < t->l0 + t->n; l++) CHECK(cecollStreamSynchronize(streams[l]));
  disarm(t);
}

/* -z: wait and meet the other ranks after each collective. */
static void startColl(const struct thr* t, const struct job* j) {
  issue(t, j);
  if (blocking) {
    complete(t);
    barrierAll(t);
  }
}

/* One timed iteration: -m collectives, in one group when more than one. */
static void iteration(const struct thr* t, const struct job* j) {
  if (aggIters > 1) CHECK(ncclGroupStart());
  for (int a = 0; a < aggIters; a++) startColl(t, j);
  if (aggIters > 1) CHECK(ncclGroupEnd());
}

/* -G: calls of step (an iteration, or one collective) of every rank of the
 * thread captured, each rank's stream into its own graph (thread-local
 * capture mode). */
static void capture(const struct thr* t, const struct job* j, int calls,
                    void (*step)(const struct thr*, const struct job*)) {
  for (int l = t->l0; l < t->l0 + t->n; l++) {
    CHECK(cecollSetDevice(devs[l]));
    CHECK(cecollStreamBeginCapture(streams[l]));
  }
  for (int k = 0; k < calls; k++) step(t, j);
  for (int l = t->l0; l < t->l0 + t->n; l++) {
    CHECK(cecollSetDevice(devs[l]));
    CHECK(cecollStreamEndCapture(streams[l], &graphs[l]));
  }
}

static void replay(const struct thr* t) {
  for (int l = t->l0; l < t->l0 + t->n; l++) CHECK(cecollGraphLaunch(graphs[l], streams[l]));
}

static void dropGraphs(const struct thr* t) {
  for (int l = t->l0; l < t->l0 + t->n; l++) {
    CHECK(cecollGraphDestroy(graphs[l]));
    graphs[l] = NULL;
  }
}

/* ---- Checking the data ---------------------------------------------------- */

static unsigned char pattern(int rank, size_t i) { return (unsigned char)(rank * 131 + i * 7 + 1); }

/* Inputs of every rank of the thread: send holds pattern(r, i); recv is
 * poisoned except where the in-place form reads its input. */
static void fill(const struct thr* t, const struct job* j) {
  size_t total = span(j), cap = total ? total : 1;
  unsigned char* h = malloc(cap);
  unsigned char* g = malloc(cap);
  if (!h || !g) {
    fprintf(stderr, "cecoll-perf: out of host memory\n");
    exit(1);
  }
  memset(g, 0xA5, cap);
  for (int l = t->l0; l < t->l0 + t->n; l++) {
    int r = first + l;
    char* recv = B[l].recv;
    for (size_t i = 0; i < total; i++) h[i] = pattern(r, i);
    CHECK(cecollMemcpy(recv, g, total));
    CHECK(cecollMemcpy(B[l].send, h, total));
    if (!j->inPlace) continue;
    if (j->c == 0 || j->c == 3) CHECK(cecollMemcpy(recv + r * j->chunk, h + r * j->chunk, j->chunk));
    if (j->c == 1 || j->c == C_SENDRECV || ((j->c == 2 || j->c == C_BROADCAST) && r == j->root))
      CHECK(cecollMemcpy(recv, h, total));
  }
  free(h);
  free(g);
}

/* alltoallv: wrong elements of rank r's output g, every byte of it, the
 * layout worked out from the rule again rather than from the arrays passed:
 * the receives tile the buffer in sender order, sender s's pair holding s's
 * input from s's displacement for r. A split that leaves bytes uncovered
 * counts them all wrong. */
static long wrongSplit(const struct job* j, int r, const unsigned char* g) {
  size_t esz = kTypes[j->type].size, total = span(j), to = 0;
  long wrong = 0;
  for (int s = 0; s < nranks; s++) {
    size_t from = 0, n = splitCount(j->count, s, r);
    for (int d = 0; d < r; d++) from += splitCount(j->count, s, d);
    for (size_t e = 0; e < n && to + e < total / esz; e++) {
      int bad = 0;
      for (size_t b = 0; b < esz; b++) bad |= g[(to + e) * esz + b] != pattern(s, (from + e) * esz + b);
      wrong += bad;
    }
    to += n;
  }
  if (to * esz < total) wrong += (long)((total - to * esz) / esz);
  return wrong;
}

/* Wrong elements (of the job's type) in the outputs of the thread's ranks. */
static long countWrong(const struct thr* t, const struct job* j) {
  size_t total = span(j), esz = kTypes[j->type].size;
  unsigned char* g = malloc(total ? total : 1);
  long wrong = 0;
  for (int l = t->l0; l < t->l0 + t->n; l++) {
    int r = first + l;
    const void* s;
    void* d;
    args(j, r, l, &s, &d);
    size_t n = (j->c <= 1 || oneBlock(j->c) || j->c == C_ALLTOALLV || (j->c == 3 && r == j->root))
                   ? total
                   : (j->c == 2 ? j->chunk : 0);
    if (n == 0) continue;
    CHECK(cecollMemcpy(g, d, n));
    if (j->c == C_ALLTOALLV) {
      wrong += wrongSplit(j, r, g);
      continue;
    }
    for (size_t e = 0; e < n; e += esz) {
      int bad = 0;
      for (size_t i = e; i < e + esz; i++) {
        size_t blk = i / j->chunk, off = i % j->chunk;
        unsigned char want;
        switch (j->c) {
          case 0: case 3: /* block b: rank b's input (in place at b*chunk of its recv) */
            want = pattern((int)blk, j->inPlace ? blk * j->chunk + off : off);
            break;
          case 1: /* rank b's block meant for me */
            want = pattern((int)blk, (size_t)r * j->chunk + off);
            break;
          case C_SENDRECV: /* rank r-1's input */
            want = pattern((r + nranks - 1) % nranks, off);
            break;
          case C_BROADCAST: /* the root's input */
            want = pattern(j->root, off);
            break;
          default: /* the root's block r */
            want = pattern(j->root, (size_t)r * j->chunk + off);
        }
        bad |= g[i] != want;
      }
      wrong += bad;
    }
  }
  free(g);
  return wrong;
}

/* -c times: fill, run once (a graph of one call with -G), count wrong
 * elements over every rank; stops at the first check that finds some. */
static long verify(const struct thr* t, const struct job* j) {
  long wrong = 0;
  for (int k = 0; k < check && wrong == 0; k++) {
    fill(t, j);
    barrierAll(t);
    if (graphLaunches) {
      capture(t, j, 1, startColl);
      replay(t);
    } else {
      startColl(t, j);
    }
    complete(t);
    if (graphLaunches) dropGraphs(t);
    wrong = (long)combine(t, (double)countWrong(t, j), SUM);
  }
  return wrong;
}

/* ---- The copy ceiling ----------------------------------------------------- */

/* Bytes rank r copies in the collective: AllGather and AlltoAll one chunk
 * for every rank (in place not its own), Scatter, Gather and Broadcast one
 * chunk (in place none at the root: N-1 copies of the message for an
 * in-place Broadcast), AlltoAllv the bytes the split has it send (size). */
static size_t rankBytes(const struct job* j, int r) {
  if (j->c == C_SENDRECV) return j->chunk;
  if (j->c == C_ALLTOALLV) {
    size_t n = 0;
    for (int d = 0; d < nranks; d++) n += splitCount(j->count, r, d);
    return n * kTypes[j->type].size;
  }
  if (j->c <= 1) return (j->inPlace ? nranks - 1 : nranks) * j->chunk;
  return j->inPlace && r == j->root ? 0 : j->chunk;
}

static void issueCopies(const struct thr* t, const struct job* j) {
  for (int l = t->l0; l < t->l0 + t->n; l++) {
    size_t n = rankBytes(j, first + l);
    if (n) CHECK(cecollMemcpyAsync(B[l].recv, B[l].send, n, streams[l]));
  }
  if (blocking) {
    complete(t);
    barrierAll(t);
  }
}

/* Seconds per round of the ceiling's copies, one per rank on its stream:
 * the slowest rank's, whatever -a says. The copies wait for nothing, so a
 * rank with none to make (an in-place root) takes no time, and an average
 * over ranks would halve the ceiling's time. */
static double timeCopies(const struct thr* t, const struct job* j) {
  issueCopies(t, j);
  complete(t);
  barrierAll(t);
  double t0 = now();
  for (int i = 0; i < iters * aggIters; i++) issueCopies(t, j);
  complete(t);
  return combine(t, (now() - t0) / (iters * aggIters), MAX);
}

static const size_t kCeilMinSize = 1 << 20; /* %ceil from this size column on */

/* ---- Rows ----------------------------------------------------------------- */

struct row {
  int coll, type, root, inPlace;
  size_t size, count;
  double timeUs, algbw, busbw;
  double ceilFrac, ceilGBps;       /* ceilFrac < 0: not measured */
  int ceilMoved;
  long wrong;                      /* -1: not checked */
};
static struct row* rows;
static size_t nrows, caprows;

static void addRow(struct row r) {
  if (nrows == caprows) {
    caprows = caprows ? 2 * caprows : 64;
    rows = realloc(rows, caprows * sizeof *rows);
    if (!rows) {
      fprintf(stderr, "cecoll-perf: out of memory\n");
      exit(1);
    }
  }
  rows[nrows++] = r;
}

/* One placement of one size, as nccl-tests' BenchTime: an untimed call, the
 * timed loop (or graph replays), then the checks; the ceiling's copies are
 * timed right before and right after the loop. */
static struct row benchTime(const struct thr* t, const struct job* j) {
  struct row out = {j->c, j->type, j->root, j->inPlace, span(j), j->count, 0, 0, 0, -1, 0, 0, -1};
  int ceil = out.size >= kCeilMinSize && nranks > 1;
  double before = ceil ? timeCopies(t, j) : 0;
  startColl(t, j);
  complete(t);
  barrierAll(t);
  if (graphLaunches) {
    capture(t, j, iters, iteration);
    barrierAll(t);
  }
  double t0 = now();
  if (graphLaunches)
    for (int g = 0; g < graphLaunches; g++) replay(t);
  else
    for (int i = 0; i < iters; i++) iteration(t, j);
  double cpu = (now() - t0) / (iters * aggIters);
  complete(t);
  double sec = (now() - t0) / (iters * aggIters) / (graphLaunches ? graphLaunches : 1);
  if (graphLaunches) dropGraphs(t);
  sec = combine(t, sec, average);
  cpu = combine(t, cpu, average);
  double after = ceil ? timeCopies(t, j) : 0;
  out.wrong = check ? verify(t, j) : -1;
  out.timeUs = (cpuTime ? cpu : sec) * 1e6;
  out.algbw = out.size / sec / 1e9;
  out.busbw = oneBlock(j->c) ? out.algbw : out.algbw * (nranks - 1) / nranks; /* nccl-tests' factors */
  if (ceil && before > 0 && after > 0) {
    double best = before < after ? before : after;
    double copied = 0;
    for (int r = 0; r < nranks; r++) copied += rankBytes(j, r);
    out.ceilFrac = best / sec;
    out.ceilGBps = copied / best / 1e9;
    out.ceilMoved = fabs(before - after) > ceilTol * best;
  }
  return out;
}

/* ---- Output in nccl-tests' format ------------------------------------------ */

static int printer(const struct thr* t) { return first == 0 && t->id == 0; }

/* nccl-tests' number cells: 2, 1 or 0 decimals, whichever fits width. */
static const char* num(double v, int width, char* buf, size_t n) {
  const char* fmts[] = {"%*.2f", "%*.1f", "%*.0f"};
  for (int i = 0; i < 3; i++)
    if (snprintf(buf, n, fmts[i], width, v) <= width) return buf;
  snprintf(buf, n, width >= 7 ? "%*.1e" : "%*.0e", width, v);
  return buf;
}

static void printHeader(int c, const char* backend, int ndev) {
  char host[256] = "?";
  int version = 0;
  gethostname(host, sizeof host - 1);
  CHECK(ncclGetVersion(&version));
  printf("# cecoll-perf (nccl-tests' format) nccl-headers=%d nccl-library=%d backend=%s devices=%d\n", NCCL_VERSION_CODE,
         version, backend, ndev);
  printf("# Collective test starting: %s\n", kTestNames[c]);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
         "validation: %d graph: %d unalign: 0\n",
         nThreads, nGpus, minBytes, maxBytes, stepFactor > 1 ? stepFactor : stepBytes,
         stepFactor > 1 ? "factor" : "bytes", warmup, iters, aggIters, check, graphLaunches);
  if (blocking) printf("# Blocking Enabled: wait for completion and barrier after each collective\n");
  if (parallelInit) printf("# Parallel Init Enabled: threads call ncclCommInitRank concurrently\n");
  printf("# cecoll: %d rank(s) in %s, buffers %s; %%ceil: the time of the ceiling's copies over the collective's "
         "(cecoll-perf -h)\n",
         nranks, multiproc ? "as many processes" : "this process",
         reg == 2 ? "in symmetric windows" : reg == 1 ? "ncclCommRegister'd" : "unregistered");
  if (c == C_ALLTOALLV)
    printf("# alltoallv: pair (s,d) moves F(k)-F(k-1) elements, k = 1+(d-s) mod N, F(k) = floor(count k(k+1)/(N+1))\n"
           "# alltoallv: no in-place form (ncclAllToAllv has none): in-place columns N/A\n");
  printf("#\n# Using devices\n");
  if (multiproc) {
    int64_t mine = ((int64_t)getpid() << 8) | devs[0], all[MAXP];
    gather8(&mine, all);
    for (int r = 0; r < nranks; r++)
      printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] cecoll %s device\n", r, 0, (int)(all[r] >> 8), host,
             (int)(all[r] & 255), backend, backend);
  } else {
    for (int l = 0; l < nlocal; l++)
      printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] cecoll %s device\n", l, 0, (int)getpid(), host,
             devs[l], backend, backend);
  }
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
         "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s  %7s  %7s\n", "size", "count", "type",
         "redop", "root", cpuTime ? "cputime" : "time", "algbw", "busbw", "#wrong", cpuTime ? "cputime" : "time",
         "algbw", "busbw", "#wrong", "", "%ceil", "%ceil");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s  %7s  %7s\n", "(B)", "(elements)", "",
         "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "", "(out)", "(in)");
  fflush(stdout);
}

static void printPlacement(const struct row* r) {
  char tb[32], ab[32], bb[32];
  printf("  %7s  %6s  %6s", num(r->timeUs, 7, tb, sizeof tb), num(r->algbw, 6, ab, sizeof ab),
         num(r->busbw, 6, bb, sizeof bb));
  if (r->wrong < 0)
    printf("    N/A");
  else
    printf("  %6g", (double)r->wrong);
}

static void printCeil(const struct row* r) {
  char cell[32];
  if (r->ceilFrac < 0)
    snprintf(cell, sizeof cell, "-");
  else
    snprintf(cell, sizeof cell, "%.1f%s", 100 * r->ceilFrac, r->ceilMoved ? "~" : "");
  printf("  %7s", cell);
}

/* ---- The sweep ------------------------------------------------------------ */

/* The next size of the sweep; past any size when the step would not grow it. */
static size_t nextSize(size_t s) {
  if (stepFactor > 1) return s && s <= SIZE_MAX / stepFactor ? s * stepFactor : SIZE_MAX;
  return stepBytes && s <= SIZE_MAX - stepBytes ? s + stepBytes : SIZE_MAX;
}

static void setJob(const struct thr* t, struct job* j, size_t size) {
  size_t esz = kTypes[j->type].size;
  j->count = size / esz / (oneBlock(j->c) ? 1 : (size_t)nranks);
  j->chunk = j->count * esz;
  if (j->c == C_ALLTOALLV)
    for (int l = t->l0; l < t->l0 + t->n; l++) buildSplit(j->count, first + l, &V[l]);
}

struct block {          /* what thread 0 of rank 0 sums for the footer */
  int wrongRows;
  double bwSum;
  int bwCount;
};

/* One type and root of one collective: nccl-tests' TimeTest. */
static void timeTest(const struct thr* t, struct job* j, struct block* blk) {
  int progress = printer(t) && isatty(2);
  j->inPlace = 0;
  for (int pass = 0; pass < 2; pass++) { /* warm-up at the largest size, then the smallest */
    setJob(t, j, pass ? minBytes : maxBytes);
    for (int i = 0; i < warmup; i++) startColl(t, j);
    complete(t);
  }
  int nsizes = 0;
  for (size_t s = minBytes; s <= maxBytes; s = nextSize(s)) nsizes++;
  for (long cycle = 0; cycles == 0 || cycle < cycles; cycle++) {
    int si = 0;
    for (size_t s = minBytes; s <= maxBytes; s = nextSize(s)) {
      struct row r2[2];
      int placements = hasInPlace(j->c) ? 2 : 1;
      setJob(t, j, s);
      if (progress) fprintf(stderr, "\r[%s %d/%d sizes]", kCollNames[j->c], ++si, nsizes);
      for (int ip = 0; ip < placements; ip++) {
        j->inPlace = ip;
        r2[ip] = benchTime(t, j);
      }
      if (progress) fprintf(stderr, "\r\033[K");
      if (!printer(t)) continue;
      printf("%12zu  %12zu  %8s  %6s  %6d", r2[0].size, r2[0].count, kTypes[j->type].name, "none",
             rooted(j->c) ? j->root : -1);
      for (int ip = 0; ip < 2; ip++) {
        if (ip == placements) {
          printf("  %7s  %6s  %6s    N/A", "N/A", "N/A", "N/A"); /* no such placement */
          continue;
        }
        printPlacement(&r2[ip]);
        blk->wrongRows += r2[ip].wrong > 0;
        blk->bwSum += r2[ip].busbw;
        blk->bwCount++;
        addRow(r2[ip]);
      }
      printf(" ");
      for (int ip = 0; ip < 2; ip++) {
        if (ip == placements) printf("  %7s", "-");
        else printCeil(&r2[ip]);
      }
      printf("\n");
      fflush(stdout);
    }
  }
}

static int totalWrongRows;

/* Every selected collective, type and root, each collective one nccl-tests
 * block (header, rows, footer). */
static void runTests(const struct thr* t, const char* backend, int ndev) {
  for (int c = 0; c < NCOLL; c++) {
    if (collIdx >= 0 && c != collIdx) continue;
    struct block blk = {0, 0, 0};
    if (printer(t)) printHeader(c, backend, ndev);
    else if (multiproc) barrierAll(t); /* the device report's gather8 */
    for (int ty = 0; ty < NTYPES; ty++) {
      if (typeIdx >= 0 && ty != typeIdx) continue;
      for (int rt = 0; rt < nranks; rt++) {
        if (!rooted(c) ? rt > 0 : (root >= 0 && rt != root)) continue;
        struct job j = {c, ty, rooted(c) ? rt : 0, 0, 0, 0};
        timeTest(t, &j, &blk);
      }
    }
    if (!printer(t)) continue;
    printf("# %-20s : %d %s\n", "Out of bounds values", blk.wrongRows, blk.wrongRows ? "FAILED" : "OK");
    printf("# %-20s : %g %s\n", "Avg bus bandwidth", blk.bwCount ? blk.bwSum / blk.bwCount : 0, "");
    printf("#\n# Collective test concluded: %s\n#\n\n", kTestNames[c]);
    fflush(stdout);
    totalWrongRows += blk.wrongRows;
  }
}

/* ---- Set-up of a thread's ranks, and the thread itself --------------------- */

static const char* gBackend;
static int gNdev;

static void setupRanks(const struct thr* t) {
  if (parallelInit && !multiproc) {
    CHECK(ncclGroupStart());
    for (int l = t->l0; l < t->l0 + t->n; l++) {
      CHECK(cecollSetDevice(devs[l]));
      CHECK(ncclCommInitRank(&comms[l], nranks, commId, first + l));
    }
    CHECK(ncclGroupEnd());
  }
  if (reg == 2 && t->n > 1) CHECK(ncclGroupStart());
  for (int l = t->l0; l < t->l0 + t->n; l++) {
    CHECK(cecollSetDevice(devs[l]));
    if (streamNull)
      streams[l] = NULL;
    else
      CHECK(cecollStreamCreate(&streams[l]));
    CHECK(ncclMemAlloc(&B[l].send, bufBytes));
    CHECK(ncclMemAlloc(&B[l].recv, bufBytes));
    if (reg == 1) {
      CHECK(ncclCommRegister(comms[l], B[l].send, bufBytes, &B[l].sh));
      CHECK(ncclCommRegister(comms[l], B[l].recv, bufBytes, &B[l].rh));
    }
    if (reg == 2) {
      CHECK(ncclCommWindowRegister(comms[l], B[l].send, bufBytes, &B[l].sw, NCCL_WIN_COLL_SYMMETRIC));
      CHECK(ncclCommWindowRegister(comms[l], B[l].recv, bufBytes, &B[l].rw, NCCL_WIN_COLL_SYMMETRIC));
    }
  }
  if (reg == 2 && t->n > 1) CHECK(ncclGroupEnd());
  CHECK(cecollSetDevice(devs[t->l0]));
}

static void teardownRanks(const struct thr* t) {
  for (int l = t->l0; l < t->l0 + t->n; l++) {
    if (reg == 1) {
      CHECK(ncclCommDeregister(comms[l], B[l].sh));
      CHECK(ncclCommDeregister(comms[l], B[l].rh));
    }
    if (reg == 2) {
      CHECK(ncclCommWindowDeregister(comms[l], B[l].sw));
      CHECK(ncclCommWindowDeregister(comms[l], B[l].rw));
    }
    CHECK(ncclMemFree(B[l].send));
    CHECK(ncclMemFree(B[l].recv));
    if (!streamNull) CHECK(cecollStreamDestroy(streams[l]));
  }
}

static void* threadMain(void* arg) {
  const struct thr* t = arg;
  setupRanks(t);
  pthread_barrier_wait(&bar);
  runTests(t, gBackend, gNdev);
  pthread_barrier_wait(&bar);
  teardownRanks(t);
  return NULL;
}

/* ---- JSON and plot -------------------------------------------------------- */

/* Non-finite values (a zero time) become null: JSON has no inf or nan. */
static void jsonNum(FILE* f, double v, const char* fmt) {
  if (v != v || v > 1e300 || v < -1e300)
    fputs("null", f);
  else
    fprintf(f, fmt, v);
}

/* alltoallv rows: the split, sendcounts[s][d] elements from rank s to rank d. */
static void jsonSplit(FILE* f, const struct row* r) {
  if (r->coll != C_ALLTOALLV) return;
  fprintf(f, ", \"sendcounts\": [");
  for (int s = 0; s < nranks; s++) {
    fprintf(f, "%s[", s ? ", " : "");
    for (int d = 0; d < nranks; d++) fprintf(f, "%s%zu", d ? ", " : "", splitCount(r->count, s, d));
    fputc(']', f);
  }
  fputc(']', f);
}

static int writeJson(const char* path, const char* backend, int ndev, int procs) {
  FILE* f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cecoll-perf: %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"tool\": \"cecoll-perf\",\n  \"backend\": \"%s\",\n  \"devices\": %d,\n", backend, ndev);
  fprintf(f, "  \"nranks\": %d,\n  \"procs\": %d,\n  \"threads\": %d,\n  \"gpus_per_thread\": %d,\n", nranks, procs,
          multiproc ? 1 : nThreads, multiproc ? 1 : nGpus);
  fprintf(f, "  \"graph\": %s,\n  \"graph_launches\": %d,\n  \"register\": %d,\n", graphLaunches ? "true" : "false",
          graphLaunches, reg);
  fprintf(f, "  \"iters\": %d,\n  \"agg_iters\": %d,\n  \"warmup\": %d,\n  \"average\": %d,\n", iters, aggIters,
          warmup, average);
  fprintf(f, "  \"ceiling\": {\"method\": \"per row: one cecollMemcpyAsync per rank of the bytes the rank copies in "
             "the collective, timed as the collective (the slowest rank's) just before and just after its loop; the "
             "faster counts\", "
             "\"tolerance\": %.3f},\n",
          ceilTol);
  fprintf(f, "  \"rows\": [");
  for (size_t i = 0; i < nrows; i++) {
    const struct row* r = &rows[i];
    fprintf(f, "%s\n    {\"collective\": \"%s\", \"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"root\": %d, ",
            i ? "," : "", kCollNames[r->coll], r->size, r->count, kTypes[r->type].name, rooted(r->coll) ? r->root : -1);
    fprintf(f, "\"in_place\": %s, \"time_us\": ", r->inPlace ? "true" : "false");
    jsonNum(f, r->timeUs, "%.3f");
    fprintf(f, ", \"algbw\": ");
    jsonNum(f, r->algbw, "%.4f");
    fprintf(f, ", \"busbw\": ");
    jsonNum(f, r->busbw, "%.4f");
    if (r->wrong < 0)
      fprintf(f, ", \"wrong\": null");
    else
      fprintf(f, ", \"wrong\": %ld", r->wrong);
    if (r->ceilFrac < 0) {
      fprintf(f, ", \"ceil_fraction\": null, \"ceil_gbps\": null, \"ceil_moved\": null");
      jsonSplit(f, r);
      fputc('}', f);
      continue;
    }
    fprintf(f, ", \"ceil_fraction\": ");
    jsonNum(f, r->ceilFrac, "%.4f");
    fprintf(f, ", \"ceil_gbps\": ");
    jsonNum(f, r->ceilGBps, "%.4f");
    fprintf(f, ", \"ceil_moved\": %s", r->ceilMoved ? "true" : "false");
    jsonSplit(f, r);
    fputc('}', f);
  }
  fprintf(f, "\n  ]\n}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "cecoll-perf: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Runs cecoll-plot from this binary's directory on the JSON, with
 * posix_spawn (never a bare fork: the Go runtime runs here). */
static int runPlot(const char* json, const char* png) {
  char self[4096], tool[4200];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  pid_t pid;
  int st, rc;
  if (n <= 0) {
    fprintf(stderr, "cecoll-perf: /proc/self/exe: %s\n", strerror(errno));
    return -1;
  }
  self[n] = '\0';
  snprintf(tool, sizeof tool, "%s/cecoll-plot", dirname(self));
  if (access(tool, X_OK) != 0) {
    fprintf(stderr, "cecoll-perf: --plot needs %s (build it with: make build/cecoll-plot)\n", tool);
    return -1;
  }
  char* argv[] = {tool, "-in", (char*)json, "-out", (char*)png, NULL};
  fflush(stdout);
  rc = posix_spawn(&pid, tool, NULL, NULL, argv, environ);
  if (rc != 0) {
    fprintf(stderr, "cecoll-perf: posix_spawn %s: %s\n", tool, strerror(rc));
    return -1;
  }
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* ---- Help ----------------------------------------------------------------- */

static void help(const char* prog) {
  printf(
      "USAGE: %s [COLLECTIVE] [options]\n"
      "  COLLECTIVE: allgather, alltoall, scatter, gather, sendrecv, broadcast, alltoallv or all (default: all,\n"
      "  one nccl-tests block each). Run as all_gather_perf, alltoall_perf, scatter_perf, gather_perf,\n"
      "  sendrecv_perf, broadcast_perf or alltoallv_perf (a link), it times that one. sendrecv is nccl-tests':\n"
      "  each rank sends size bytes to rank+1 and receives size bytes from rank-1, each rank's pair in a group\n"
      "  of its own; broadcast moves size bytes from the root (-r) to every rank. Both size a run by the\n"
      "  message, and their busbw is their algbw (nccl-tests' factors).\n"
      "  alltoallv (ncclAllToAllv; nccl-tests has no such test) moves the bytes of the alltoall of its size,\n"
      "  split unevenly: each rank sends and receives size bytes, count (the column) elements per pair on\n"
      "  average. Pair (s, d), rank s to rank d of N, has weight k = 1 + (d - s) mod N and moves F(k) - F(k-1)\n"
      "  elements, F(k) = floor(count x k(k+1) / (N+1)): within one element of 2k/(N+1) x count, a rank's own\n"
      "  pair the least, its pair to rank s-1 the most. A rank's sends, and its receives, have each weight\n"
      "  once, so each totals N x count exactly; small counts round low weights down to empty pairs. Sends\n"
      "  are packed in receiver order, receives in sender order; -c checks every received byte. Its busbw is\n"
      "  alltoall's, algbw x (N-1)/N, so its rows compare with alltoall's; it has no in-place form (RCCL's\n"
      "  neither): its in-place columns are N/A, and --json has only its out-of-place rows, each with the\n"
      "  split (sendcounts[s][d]).\n"
      "\n"
      "nccl-tests' options, with nccl-tests' meanings and defaults:\n"
      "  -t,--nthreads <n>         threads in this process (1)\n"
      "  -g,--ngpus <n>            ranks per thread (1); ranks in this process = g x t, rank r on device r %% devices\n"
      "  -b,--minbytes <size>      smallest total message size (32M): the size column, all ranks' chunks;\n"
      "                            each rank's chunk is size / type size / ranks elements\n"
      "  -e,--maxbytes <size>      largest total message size (32M); sizes take K, M, G\n"
      "  -i,--stepbytes <size>     add this between sizes when -f is 1 (1M)\n"
      "  -f,--stepfactor <n>       multiply sizes by n (1: add -i instead)\n"
      "  -n,--iters <n>            timed iterations per size (20)\n"
      "  -m,--agg_iters <n>        collectives per iteration, in one group (1)\n"
      "  -w,--warmup_iters <n>     warm-up iterations at the largest and at the smallest size (5)\n"
      "  -N,--run_cycles <n>       run the sweep n times, printing each (1; 0: forever)\n"
      "  -p,--parallel_init <0/1>  each thread creates its ranks' communicators (1) instead of\n"
      "                            ncclCommInitAll on the main thread (0)\n"
      "  -c,--check <n>            check the data n times per size and placement (1; 0: #wrong is N/A)\n"
      "  -o,--op <op>              reduction op: none, sum, prod, max, min, avg, mulsum, all; these\n"
      "                            collectives reduce nothing, so any is printed as none\n"
      "  -d,--datatype <type>      int8 uint8 int32 uint32 int64 uint64 half float double bfloat16\n"
      "                            f8e4m3 f8e5m2, or all (float)\n"
      "  -r,--root <rank>          root of scatter and gather, or all (0)\n"
      "  -z,--blocking <0/1>       wait for completion and meet the other ranks after each collective (0)\n"
      "  -y,--stream_null <0/1>    issue on the NULL stream (0; one thread only, no -G)\n"
      "  -T,--timeout <seconds>    fail with exit code 3 when a wait for completion takes longer (0: none)\n"
      "  -G,--cudagraph <n>        capture -n iterations per rank into a graph and time n replays (0: eager)\n"
      "  -C,--report_cputime <0/1> time column: host time to issue the calls instead of time to complete (0)\n"
      "  -a,--average <0/1/2/3>    time of rank 0, mean, least or largest over threads and processes (1)\n"
      "  -R,--local_register <0/1/2> buffers (ncclMemAlloc) unregistered (0), ncclCommRegister'd (1) or in\n"
      "                            windows registered with NCCL_WIN_COLL_SYMMETRIC, zero-copy (2) (0)\n"
      "  -h,--help                 this text\n"
      "\n"
      "cecoll's additions:\n"
      "  -P,--procs <n>            n processes with one rank each (posix_spawn of this binary; not with -g or -t)\n"
      "  -B,--bootstrap            time the bootstrap of 2..8 processes (or the -P list, e.g. -P 2,4,8), -n\n"
      "                            repetitions (default 5)\n"
      "  --json FILE               every row, as JSON (the input of cecoll-plot)\n"
      "  --plot FILE.png           run cecoll-plot (next to this binary) on the JSON (FILE.png.json without --json)\n"
      "  --ceil-tol <percent>      how far the ceiling may move during a row before the row is marked (10)\n"
      "\n"
      "Output: nccl-tests' table: size, count (elements per rank; alltoallv: the mean per pair), type, redop,\n"
      "root (-1: none), then out of place and in place each time (us), algbw = size / time and busbw = algbw\n"
      "x (ranks-1)/ranks (GB/s), #wrong (wrong elements over every rank; N/A with -c 0); '# Out of bounds\n"
      "values' (rows with wrong elements) and '# Avg bus bandwidth' (the mean busbw of the rows) close each\n"
      "block. Exit status 1 when an element was wrong, 2 for a bad option, 3 on -T's timeout, 4 when a call\n"
      "failed.\n"
      "Unlike nccl-tests, chunks are not rounded down to 16 bytes (8 B per rank can be measured) and the\n"
      "in-place AlltoAll is checked.\n"
      "\n"
      "%%ceil (two columns after the in-place ones: out of place, in place; rows of at least 1 MiB): the copy\n"
      "ceiling's time over the collective's time, in percent. The ceiling is the same bytes moved by plain\n"
      "copies: N concurrent copies, one per rank on the rank's stream, each of the bytes that rank copies in\n"
      "the collective (AllGather and AlltoAll: a chunk for every rank, in place not its own; Scatter, Gather\n"
      "and Broadcast: one chunk, in place none at the root; sendrecv: one chunk; alltoallv: the bytes the\n"
      "split has the rank send, size), device-to-device within the rank's device, timed as the collective\n"
      "is (-n x -m rounds, completion time) but always the slowest rank's, since the copies wait for\n"
      "nothing. It is measured right before and right after each row's timed loop and the faster of the\n"
      "two counts; a row whose two measurements differ by more than --ceil-tol is marked with '~' (the\n"
      "machine's speed moved during the row).\n",
      prog);
}

/* ---- Processes (-P and -B) ------------------------------------------------- */

static void idToHex(const ncclUniqueId* id, char* out) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
    unsigned char b = (unsigned char)id->internal[i];
    out[2 * i] = digits[b >> 4];
    out[2 * i + 1] = digits[b & 15];
  }
  out[2 * NCCL_UNIQUE_ID_BYTES] = '\0';
}

static int idFromHex(const char* hex, ncclUniqueId* id) {
  if (!hex || strlen(hex) != 2 * NCCL_UNIQUE_ID_BYTES) return -1;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
    id->internal[i] = (char)v;
  }
  return 0;
}

struct child {
  pid_t pid;
  int fd;      /* read end of the child's fd 3 (-B), or -1 */
  int status;
  int done;
};

/* Starts this program again (/proc/self/exe) with argv and the environment
 * plus extra ("K=V"), never a bare fork: the Go runtime already runs. With
 * wantPipe the child's fd 3 is a pipe to c->fd. */
static int spawnChild(struct child* c, char** argv, char* const extra[], int wantPipe) {
  size_t ne = 0, nx = 0;
  char** env;
  int p[2] = {-1, -1}, rc;
  posix_spawn_file_actions_t fa;
  while (environ[ne]) ne++;
  while (extra[nx]) nx++;
  env = calloc(ne + nx + 1, sizeof *env);
  if (!env) return -1;
  for (size_t i = 0; i < nx; i++) env[i] = extra[i];
  for (size_t i = 0, k = nx; i < ne; i++) {
    int dup = 0;
    for (size_t j = 0; j < nx && !dup; j++) dup = strncmp(environ[i], extra[j], strcspn(extra[j], "=") + 1) == 0;
    if (!dup) env[k++] = environ[i];
  }
  posix_spawn_file_actions_init(&fa);
  if (wantPipe) {
    int q[2];
    if (pipe2(q, O_CLOEXEC) != 0) return -1;
    /* Above 3, so the dup2 onto 3 never clobbers the other end. */
    p[0] = fcntl(q[0], F_DUPFD_CLOEXEC, 10);
    p[1] = fcntl(q[1], F_DUPFD_CLOEXEC, 10);
    close(q[0]);
    close(q[1]);
    posix_spawn_file_actions_adddup2(&fa, p[1], 3);
  }
  rc = posix_spawn(&c->pid, "/proc/self/exe", &fa, NULL, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  if (p[1] >= 0) close(p[1]);
  c->fd = p[0];
  c->done = 0;
  if (rc != 0) {
    fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
    if (p[0] >= 0) close(p[0]);
    c->pid = 0;
    return -1;
  }
  return 0;
}

/* Waits for every child; the first one to fail gets the others killed (they
 * would wait for it forever). Returns the number that failed; *wrong tells
 * whether one exited with 1 (wrong elements) rather than crashing. */
static int waitChildren(struct child* ch, int n, int* wrongOnly) {
  int failed = 0, left = n;
  if (wrongOnly) *wrongOnly = 1;
  while (left > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; i++) {
      if (ch[i].pid != pid || ch[i].done) continue;
      ch[i].done = 1;
      ch[i].status = st;
      left--;
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
      if (wrongOnly && !(WIFEXITED(st) && WEXITSTATUS(st) == 1)) *wrongOnly = 0;
      if (failed++ == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 1)) {
        fprintf(stderr, "cecoll-perf: rank %d failed (%s %d): stopping the others\n", i,
                WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        for (int k = 0; k < n; k++)
          if (!ch[k].done && ch[k].pid) kill(ch[k].pid, SIGKILL);
      }
    }
  }
  return failed;
}

/* -P parent: the id, then procs copies of this program, one rank each.
 * Exit status: the children's (1 for wrong elements). */
static int runProcs(int procs, char** argv) {
  struct child ch[MAXP];
  ncclUniqueId id;
  char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
  char envId[sizeof hex + 32], envRank[48], envN[48];
  char* extra[] = {envId, envRank, envN, NULL};
  int wrongOnly;
  CHECK(ncclGetUniqueId(&id));
  idToHex(&id, hex);
  snprintf(envId, sizeof envId, "CECOLL_PERF_ID=%s", hex);
  snprintf(envN, sizeof envN, "CECOLL_PERF_NRANKS=%d", procs);
  fflush(stdout);
  memset(ch, 0, sizeof ch);
  for (int r = 0; r < procs; r++) {
    snprintf(envRank, sizeof envRank, "CECOLL_PERF_RANK=%d", r);
    if (spawnChild(&ch[r], argv, extra, 0) != 0) {
      for (int k = 0; k < r; k++) kill(ch[k].pid, SIGKILL);
      waitChildren(ch, r, NULL);
      return 1;
    }
  }
  if (waitChildren(ch, procs, &wrongOnly) == 0) return 0;
  return wrongOnly ? 1 : 4;
}

/* -B child: init, report the stamps, leave. */
static int bootChild(int rank, int n, const ncclUniqueId* id, double tMain) {
  ncclComm_t comm;
  int ndev;
  char line[128];
  CHECK(cecollGetDeviceCount(&ndev));
  CHECK(cecollSetDevice(rank % ndev));
  CHECK(ncclCommInitRank(&comm, n, *id, rank));
  double tInit = now();
  int len = snprintf(line, sizeof line, "%d %.9f %.9f\n", rank, tMain, tInit);
  if (write(3, line, (size_t)len) != len) return 1;
  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
  return 0;
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Reads one stamp line from each child, until deadline. */
static int readStamps(struct child* ch, int n, double* lastMain, double* lastInit, double deadline) {
  char buf[MAXP][128];
  size_t len[MAXP] = {0};
  int got = 0, have[MAXP] = {0};
  *lastMain = *lastInit = 0;
  while (got < n && now() < deadline) {
    struct pollfd p[MAXP];
    for (int i = 0; i < n; i++) p[i] = (struct pollfd){have[i] ? -1 : ch[i].fd, POLLIN, 0};
    if (poll(p, (nfds_t)n, 100) <= 0) continue;
    for (int i = 0; i < n; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t r = read(ch[i].fd, buf[i] + len[i], sizeof buf[i] - 1 - len[i]);
      if (r <= 0) return -1; /* the child left without its stamps */
      len[i] += (size_t)r;
      buf[i][len[i]] = '\0';
      if (!strchr(buf[i], '\n')) continue;
      int rank;
      double tm, ti;
      if (sscanf(buf[i], "%d %lf %lf", &rank, &tm, &ti) != 3) return -1;
      if (tm > *lastMain) *lastMain = tm;
      if (ti > *lastInit) *lastInit = ti;
      have[i] = 1;
      got++;
    }
  }
  return got == n ? 0 : -1;
}

/* -B parent. */
static int runBoot(const int* counts, int ncounts, int reps, char** argv) {
  const char* backend;
  int failed = 0;
  CHECK(cecollGetBackend(&backend));
  printf("# cecoll-perf -B: bootstrap time, backend %s, %d repetitions; median (min..max) in ms\n", backend, reps);
  printf("# %5s %22s %22s %22s %10s\n", "procs", "spawn->all in main", "spawn->all initialised", "bootstrap",
         "getId");
  for (int ci = 0; ci < ncounts && !failed; ci++) {
    int n = counts[ci];
    double tMain[64], tInit[64], tBoot[64], tId[64];
    int ok = 0;
    for (int rep = 0; rep < reps && rep < 64; rep++) {
      struct child ch[MAXP];
      ncclUniqueId id;
      char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
      char envId[sizeof hex + 32], envRank[48], envN[48], envBoot[] = "CECOLL_PERF_BOOT=1";
      char* extra[] = {envId, envRank, envN, envBoot, NULL};
      double lastMain, lastInit, t0;
      t0 = now();
      CHECK(ncclGetUniqueId(&id));
      tId[ok] = now() - t0;
      idToHex(&id, hex);
      snprintf(envId, sizeof envId, "CECOLL_PERF_ID=%s", hex);
      snprintf(envN, sizeof envN, "CECOLL_PERF_NRANKS=%d", n);
      memset(ch, 0, sizeof ch);
      fflush(stdout);
      t0 = now();
      for (int r = 0; r < n; r++) {
        snprintf(envRank, sizeof envRank, "CECOLL_PERF_RANK=%d", r);
        if (spawnChild(&ch[r], argv, extra, 1) != 0) {
          n = r;
          failed = 1;
          break;
        }
      }
      if (!failed && readStamps(ch, n, &lastMain, &lastInit, t0 + 120) != 0) {
        fprintf(stderr, "cecoll-perf -B: %d processes: not every rank reported its init\n", n);
        for (int r = 0; r < n; r++) kill(ch[r].pid, SIGKILL);
        failed = 1;
      }
      if (waitChildren(ch, n, NULL)) failed = 1;
      for (int r = 0; r < n; r++)
        if (ch[r].fd >= 0) close(ch[r].fd);
      if (failed) break;
      tMain[ok] = (lastMain - t0) * 1e3;
      tInit[ok] = (lastInit - t0) * 1e3;
      tBoot[ok] = (lastInit - lastMain) * 1e3;
      tId[ok] *= 1e3;
      ok++;
    }
    if (failed) break;
    double* cols[] = {tMain, tInit, tBoot};
    printf("  %5d", n);
    for (int k = 0; k < 3; k++) {
      char cell[40];
      qsort(cols[k], (size_t)ok, sizeof(double), cmpDouble);
      snprintf(cell, sizeof cell, "%.1f (%.1f..%.1f)", cols[k][ok / 2], cols[k][0], cols[k][ok - 1]);
      printf(" %22s", cell);
    }
    qsort(tId, (size_t)ok, sizeof(double), cmpDouble);
    printf(" %10.3f\n", tId[ok / 2]);
    fflush(stdout);
  }
  return failed;
}

static int parseList(const char* s, int* out, int max) {
  int n = 0;
  while (*s) {
    char* end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > MAXP || n == max) return -1;
    out[n++] = (int)v;
    if (*end && *end != ',') return -1;
    s = *end ? end + 1 : end;
  }
  return n;
}

/* ---- main ----------------------------------------------------------------- */

static int optGiven[128];

int main(int argc, char** argv) {
  double tMain = now();
  const char* procsArg = NULL;
  int opt, boot = 0;
  enum { OPT_JSON = 1000, OPT_PLOT, OPT_CEILTOL };
  static const struct option longOpts[] = {
      {"nthreads", required_argument, NULL, 't'},      {"ngpus", required_argument, NULL, 'g'},
      {"minbytes", required_argument, NULL, 'b'},      {"maxbytes", required_argument, NULL, 'e'},
      {"stepbytes", required_argument, NULL, 'i'},     {"stepfactor", required_argument, NULL, 'f'},
      {"iters", required_argument, NULL, 'n'},         {"agg_iters", required_argument, NULL, 'm'},
      {"warmup_iters", required_argument, NULL, 'w'},  {"run_cycles", required_argument, NULL, 'N'},
      {"parallel_init", required_argument, NULL, 'p'}, {"check", required_argument, NULL, 'c'},
      {"op", required_argument, NULL, 'o'},            {"datatype", required_argument, NULL, 'd'},
      {"root", required_argument, NULL, 'r'},          {"blocking", required_argument, NULL, 'z'},
      {"stream_null", required_argument, NULL, 'y'},   {"timeout", required_argument, NULL, 'T'},
      {"cudagraph", required_argument, NULL, 'G'},     {"report_cputime", required_argument, NULL, 'C'},
      {"average", required_argument, NULL, 'a'},       {"local_register", required_argument, NULL, 'R'},
      {"procs", required_argument, NULL, 'P'},         {"bootstrap", no_argument, NULL, 'B'},
      {"json", required_argument, NULL, OPT_JSON},     {"plot", required_argument, NULL, OPT_PLOT},
      {"ceil-tol", required_argument, NULL, OPT_CEILTOL}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char* prog = basename(argv[0]);
  for (int c = 0; c < NCOLL; c++)
    if (!strcmp(prog, kTestNames[c])) collIdx = c;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:G:C:a:R:P:Bh", longOpts, NULL)) != -1) {
    if (opt > 0 && opt < 128) optGiven[opt] = 1;
    switch (opt) {
      case 't': nThreads = (int)parseInt('t', optarg, 1, MAXT); break;
      case 'g': nGpus = (int)parseInt('g', optarg, 1, MAXR); break;
      case 'b': minBytes = parseSize('b', minArg = optarg); break;
      case 'e': maxBytes = parseSize('e', maxArg = optarg); break;
      case 'i': stepBytes = parseSize('i', optarg); break;
      case 'f': stepFactor = (size_t)parseInt('f', optarg, 1, 1L << 40); break;
      case 'n': iters = (int)parseInt('n', optarg, 1, 100000000); break;
      case 'm': aggIters = (int)parseInt('m', optarg, 1, 100000); break;
      case 'w': warmup = (int)parseInt('w', optarg, 0, 100000000); break;
      case 'N': cycles = (int)parseInt('N', optarg, 0, 1000000); break;
      case 'p': parallelInit = (int)parseInt('p', optarg, 0, 1); break;
      case 'c': check = (int)parseInt('c', optarg, 0, 1000000); break;
      case 'z': blocking = (int)parseInt('z', optarg, 0, 1); break;
      case 'y': streamNull = (int)parseInt('y', optarg, 0, 1); break;
      case 'T': timeoutS = (int)parseInt('T', optarg, 0, 1000000); break;
      case 'G': graphLaunches = (int)parseInt('G', optarg, 0, 100000000); break;
      case 'C': cpuTime = (int)parseInt('C', optarg, 0, 1); break;
      case 'a': average = (int)parseInt('a', optarg, 0, 3); break;
      case 'R': reg = (int)parseInt('R', optarg, 0, 2); break;
      case 'o':
        if (lookup(optarg, kOps, (int)(sizeof kOps / sizeof kOps[0])) < 0)
          usageError("-o %s: not a reduction op (none, sum, prod, max, min, avg, mulsum, all)%s", optarg,
                     lookup(optarg, kCollNames, NCOLL) >= 0 ? "; the collective is the first argument: cecoll-perf "
                                                              "allgather ..."
                                                            : "");
        break;
      case 'd': {
        static const char* names[NTYPES];
        for (int i = 0; i < NTYPES; i++) names[i] = kTypes[i].name;
        typeIdx = strcmp(optarg, "all") ? lookup(optarg, names, NTYPES) : -1;
        if (typeIdx < 0 && strcmp(optarg, "all"))
          usageError("-d %s: not a datatype (int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 "
                     "f8e4m3 f8e5m2 all)", optarg);
        break;
      }
      case 'r': root = strcmp(optarg, "all") ? (int)parseInt('r', optarg, 0, MAXR - 1) : -1; break;
      case 'P': procsArg = optarg; break;
      case 'B': boot = 1; break;
      case OPT_JSON: jsonPath = optarg; break;
      case OPT_PLOT: plotPath = optarg; break;
      case OPT_CEILTOL: {
        char* end;
        ceilTol = strtod(optarg, &end) / 100;
        if (end == optarg || *end || !(ceilTol >= 0) || ceilTol > 10) usageError("--ceil-tol %s: not a percentage", optarg);
        break;
      }
      case 'h': help(prog); return 0;
      case ':': usageError("%s needs a value", argv[optind - 1]);
      default: usageError("%s: not an option", argv[optind - 1]);
    }
  }
  for (; optind < argc; optind++) {
    const char* a = argv[optind];
    int c = strcmp(a, "all") ? lookup(a, kCollNames, NCOLL) : -1;
    if (c < 0 && strcmp(a, "all"))
      usageError("%s: not a collective (allgather, alltoall, scatter, gather, sendrecv, broadcast, alltoallv, all)", a);
    collIdx = c;
  }

  /* A child of -P or -B: its rank and the id come in the environment. */
  const char* envRank = getenv("CECOLL_PERF_RANK");
  if (envRank) {
    const char* envN = getenv("CECOLL_PERF_NRANKS");
    if (!envN || idFromHex(getenv("CECOLL_PERF_ID"), &commId) != 0) {
      fprintf(stderr, "cecoll-perf: CECOLL_PERF_RANK without CECOLL_PERF_NRANKS and CECOLL_PERF_ID\n");
      return 2;
    }
    nranks = atoi(envN);
    first = atoi(envRank);
    if (nranks < 1 || nranks > MAXP || first < 0 || first >= nranks) usageError("bad CECOLL_PERF_RANK/NRANKS");
    if (getenv("CECOLL_PERF_BOOT")) return bootChild(first, nranks, &commId, tMain);
  }

  if (boot) {
    int counts[MAXP], nc = 7;
    for (int i = 0; i < nc; i++) counts[i] = i + 2;
    if (procsArg && (nc = parseList(procsArg, counts, MAXP)) <= 0)
      usageError("-P %s: not a list of process counts from 1 to %d", procsArg, MAXP);
    return runBoot(counts, nc, optGiven['n'] ? iters : 5, argv);
  }

  /* Combinations nccl-tests would run into trouble with, refused up front. */
  int procs = procsArg ? (int)parseInt('P', procsArg, 1, MAXP) : 0;
  if (procs && (nGpus > 1 || nThreads > 1))
    usageError("-P %d runs one rank per process: -g %d -t %d asks for %d per process", procs, nGpus, nThreads,
               nGpus * nThreads);
  if (minBytes > maxBytes) usageError("-b %s is above -e %s", minArg, maxArg);
  if (nGpus * nThreads > MAXR) usageError("-g %d x -t %d: at most %d ranks in one process", nGpus, nThreads, MAXR);
  if (streamNull && nThreads > 1) usageError("-y 1 with -t %d: ranks of different threads cannot share the NULL stream", nThreads);
  if (streamNull && graphLaunches) usageError("-y 1 with -G %d: the NULL stream cannot be captured", graphLaunches);
  if (blocking && graphLaunches) usageError("-z 1 with -G %d: a captured call cannot be waited for", graphLaunches);
  nranks = envRank ? nranks : procs ? procs : nGpus * nThreads;
  if (root >= nranks) usageError("-r %d: not a rank of %d", root, nranks);

  if (procs && !envRank) return runProcs(procs, argv);
  if (envRank) {
    nlocal = 1;
    multiproc = 1;
    nThreads = nGpus = 1;
  } else {
    nlocal = nranks;
  }
  if (plotPath && !jsonPath) {
    static char derived[4200];
    snprintf(derived, sizeof derived, "%s.json", plotPath);
    jsonPath = derived;
  }

  CHECK(cecollGetBackend(&gBackend));
  CHECK(cecollGetDeviceCount(&gNdev));
  for (int l = 0; l < nlocal; l++) devs[l] = (first + l) % gNdev;
  for (int i = 0; i < nThreads; i++) thrs[i] = (struct thr){i, i * nGpus, multiproc ? 1 : nGpus, 0};
  bufBytes = maxBytes < 4096 ? 4096 : maxBytes;
  if (multiproc) {
    CHECK(cecollSetDevice(devs[0]));
    CHECK(ncclCommInitRank(&comms[0], nranks, commId, first));
    CHECK(ncclMemAlloc(&redSend, 8));
    CHECK(ncclMemAlloc(&redRecv, 8 * (size_t)nranks));
  } else if (parallelInit) {
    CHECK(ncclGetUniqueId(&commId));
  } else {
    CHECK(ncclCommInitAll(comms, nranks, devs));
  }
  pthread_barrier_init(&bar, NULL, (unsigned)nThreads);
  pthread_t wd;
  if (timeoutS) pthread_create(&wd, NULL, watchdog, NULL);
  for (int i = 1; i < nThreads; i++) pthread_create(&thrs[i].pt, NULL, threadMain, &thrs[i]);
  threadMain(&thrs[0]);
  for (int i = 1; i < nThreads; i++) pthread_join(thrs[i].pt, NULL);

  if (multiproc) {
    CHECK(ncclMemFree(redSend));
    CHECK(ncclMemFree(redRecv));
    CHECK(ncclCommFinalize(comms[0]));
  }
  for (int l = 0; l < nlocal; l++) CHECK(ncclCommDestroy(comms[l]));
  int outErr = 0;
  if (first == 0 && jsonPath) {
    outErr = writeJson(jsonPath, gBackend, gNdev, multiproc ? nranks : 1) != 0;
    if (!outErr && plotPath) outErr = runPlot(jsonPath, plotPath) != 0;
  }
  free(rows);
  return totalWrongRows ? 1 : outErr ? 4 : 0;
}
