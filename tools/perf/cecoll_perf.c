/* cecoll-perf: times cecoll's four collectives in the table format of
 * nccl-tests. Built against the public headers only and backend-neutral
 * through the cecoll helpers, so the same binary runs on the host device
 * and on a GPU.
 *
 *   cecoll-perf -N 4 -b 8 -e 64M -f 8 -n 20 -w 5 -c 1 [-o allgather] [-d uint8] [-r 0] [-R 1]
 *   cecoll-perf -P 4 -b 8 -e 64M ...     the same with 4 processes, one rank each
 *   cecoll-perf -B [-P 2,4,8] [-n 5]      bootstrap time of 2..8 processes
 *   cecoll-perf -N 4 -G ...               time graph replays instead of calls
 *   cecoll-perf ... --json FILE [--plot FILE.png]
 *
 * -N ranks (one process, one thread driving all ranks inside groups), -b/-e/-f
 * per-rank chunk sizes from -b to -e by factor -f, -n iterations, -w warm-up,
 * -c check data, -o one collective (allgather|alltoall|scatter|gather|all),
 * -d datatype, -r root, -R 1 = buffers from ncclMemAlloc in registered windows
 * (zero-copy), 0 = unregistered ncclMemAlloc buffers (staged path).
 *
 * -G: for each size and placement, every local rank's stream is captured
 * once (cecollStreamBeginCapture/EndCapture around -K calls of every rank,
 * default 1, each in one group), and the replays (cecollGraphLaunch) are
 * checked and timed; the time is per collective (replay time / K), so -K
 * 20 takes the graph launch's own cost out of small-message figures. (The
 * check of an in-place AlltoAll with -K > 1 is made on an eager call: K
 * in-place AlltoAlls transpose K times.)
 *
 * Copy ceiling: before the sweep, one process times cecollMemcpyAsync between
 * two ncclMemAlloc buffers on device 0 (the largest per-rank buffer of the
 * sweep, clamped to 64..256 MiB; one warm-up, best of 5, timed with events
 * on its stream). It counts bytes copied, not bytes read plus written. For each size of at
 * least 1 MiB the column %ceil is the rate at which all ranks together copy
 * (AllGather and AlltoAll n*n*chunk, Scatter and Gather n*chunk; in place the
 * n resp. 1 local chunks that stay put are not counted) over that ceiling.
 *
 * A progress line ("[allgather 3/8 sizes]") goes to stderr while a sweep
 * runs, only when stderr is a terminal.
 *
 * --json FILE writes every row, the ceiling and the backend as JSON (the
 * input of tools/plot). --plot FILE.png then runs cecoll-plot, looked up next
 * to this binary (make builds it as build/cecoll-plot), on that JSON; without
 * --json the JSON goes to FILE.png.json.
 *
 * -P procs: the parent makes the bootstrap id (ncclGetUniqueId) and starts
 * procs copies of this program with posix_spawn (never a bare fork: the Go
 * runtime already runs), each one rank on device rank % deviceCount; the id
 * travels in the environment (CECOLL_PERF_ID, hex). Rank 0 prints the table;
 * times are the slowest rank's, wrong bytes the sum over ranks (both
 * gathered with an AllGather on the communicator). A child that fails makes
 * the parent kill the others.
 *
 * -B: for each process count (2..8, or the list of -P), -n repetitions
 * (default 5) of: spawn the processes, each calls ncclCommInitRank, reports
 * CLOCK_MONOTONIC stamps (one clock for the whole host) up a pipe, and
 * exits. Printed: median (min..max) of the time from the first spawn to the
 * last process entering main, to the last ncclCommInitRank returning, and
 * the difference (the bootstrap proper).
 *
 * Size column: the larger of one rank's send and recv bytes (as nccl-tests);
 * time: mean per collective over back-to-back iterations; algbw = size/time;
 * busbw = algbw * (n-1)/n. With -G, time is per replay of every rank's graph. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
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
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

extern char** environ;

enum { MAXR = 64, MAXP = 64 };
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
static int graphMode = 0;
static int graphCalls = 1; /* -K: collectives captured in each graph */
static const char *jsonPath = NULL, *plotPath = NULL;
static int procsCount = 1; /* processes of the run, for the JSON */

/* The ranks this process drives: first..first+nlocal-1 of nranks. One
 * process: all of them. -P: one each. */
static int first = 0, nlocal = 4, multiproc = 0;
static ncclComm_t comms[MAXR];
static cudaStream_t streams[MAXR];
static int devs[MAXR];

struct bufs {
  void *send, *recv;        /* device buffers (ncclMemAlloc) */
  ncclWindow_t sw, rw;      /* windows when registered */
};
static struct bufs B[MAXR]; /* by local index */
static cecollGraph_t graphs[MAXR]; /* -G: the captured call of each local rank */
static size_t bufBytes;     /* bytes of each of send and recv per rank */

/* -P: a small AllGather on the communicator reduces values across ranks. */
static void *redSend, *redRecv;

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

/* CLOCK_MONOTONIC: one clock for every process of the host. */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Windows are symmetric (NCCL's contract): with an in-place root, the
 * other ranks pass their buffer where the root's is (Scatter is placed by
 * recv, Gather by send). Needed when the ranks' calls do not all meet in
 * one group, i.e. with -P. */
static int symmetricRoot(int c, int inPlace) { return multiproc && registered && inPlace && (c == 2 || c == 3); }

/* The buffers global rank r (local index l) passes for collective c. */
static void args(int c, int r, int l, int inPlace, size_t chunk, const void** s, void** d) {
  char* send = B[l].send;
  char* recv = B[l].recv;
  int here = r == root || symmetricRoot(c, inPlace);
  *s = send;
  *d = recv;
  if (!inPlace) return;
  switch (c) {
    case 0: *s = recv + (size_t)r * chunk; break;                 /* allgather */
    case 1: *s = recv; break;                                     /* alltoall (cecoll stages it) */
    case 2: if (here) *d = send + (size_t)root * chunk; break;    /* scatter */
    case 3: if (here) *s = recv + (size_t)root * chunk; break;    /* gather */
  }
}

static void launch(int c, size_t count, size_t chunk, int inPlace) {
  if (nlocal > 1) CHECK(ncclGroupStart());
  for (int l = 0; l < nlocal; l++) {
    int r = first + l;
    const void* s;
    void* d;
    args(c, r, l, inPlace, chunk, &s, &d);
    ncclDataType_t t = kTypes[typeIdx].t;
    switch (c) {
      case 0: CHECK(ncclAllGather(s, d, count, t, comms[l], streams[l])); break;
      case 1: CHECK(ncclAlltoAll(s, d, count, t, comms[l], streams[l])); break;
      case 2: CHECK(ncclScatter(s, d, count, t, root, comms[l], streams[l])); break;
      case 3: CHECK(ncclGather(s, d, count, t, root, comms[l], streams[l])); break;
    }
  }
  if (nlocal > 1) CHECK(ncclGroupEnd());
}

/* -G: graphCalls calls of every local rank captured, each rank on its own
 * stream; each call still meets in one group, as launch issues them. */
static void capture(int c, size_t count, size_t chunk, int inPlace) {
  for (int l = 0; l < nlocal; l++) {
    CHECK(cecollSetDevice(devs[l]));
    CHECK(cecollStreamBeginCapture(streams[l]));
  }
  for (int k = 0; k < graphCalls; k++) launch(c, count, chunk, inPlace);
  for (int l = 0; l < nlocal; l++) {
    CHECK(cecollSetDevice(devs[l]));
    CHECK(cecollStreamEndCapture(streams[l], &graphs[l]));
  }
}

static void dropGraphs(void) {
  for (int l = 0; l < nlocal; l++) {
    CHECK(cecollGraphDestroy(graphs[l]));
    graphs[l] = NULL;
  }
}

/* One collective: a call of every local rank, or with -G a replay of each
 * rank's captured graph. */
static void runOnce(int c, size_t count, size_t chunk, int inPlace) {
  if (!graphMode) {
    launch(c, count, chunk, inPlace);
    return;
  }
  for (int l = 0; l < nlocal; l++) {
    CHECK(cecollSetDevice(devs[l]));
    CHECK(cecollGraphLaunch(graphs[l], streams[l]));
  }
}

static void syncAll(void) {
  for (int l = 0; l < nlocal; l++) CHECK(cecollStreamSynchronize(streams[l]));
}

/* Every rank's 8 bytes, through the communicator (-P only): also a barrier. */
static void gather8(const void* mine, void* all) {
  CHECK(cecollMemcpy(redSend, mine, 8));
  CHECK(ncclAllGather(redSend, redRecv, 8, ncclUint8, comms[0], streams[0]));
  CHECK(cecollStreamSynchronize(streams[0]));
  CHECK(cecollMemcpy(all, redRecv, 8 * (size_t)nranks));
}

static long sumAcross(long v) {
  int64_t mine = v, all[MAXP];
  long sum = 0;
  if (!multiproc) return v;
  gather8(&mine, all);
  for (int r = 0; r < nranks; r++) sum += (long)all[r];
  return sum;
}

static double maxAcross(double v) {
  double all[MAXP], m = v;
  if (!multiproc) return v;
  gather8(&v, all);
  for (int r = 0; r < nranks; r++)
    if (all[r] > m) m = all[r];
  return m;
}

static unsigned char pattern(int rank, size_t i) { return (unsigned char)(rank * 131 + i * 7 + 1); }

/* Fills inputs, poisons outputs, runs once, and counts wrong bytes over
 * every rank. */
static long verify(int c, size_t count, size_t chunk, int inPlace) {
  size_t total = chunk * nranks;
  unsigned char* h = malloc(total ? total : 1);
  unsigned char* g = malloc(total ? total : 1);
  for (int l = 0; l < nlocal; l++) {
    int r = first + l;
    /* every rank's send region holds pattern(r, i); recv is poisoned */
    for (size_t i = 0; i < total; i++) h[i] = pattern(r, i);
    memset(g, 0xA5, total);
    CHECK(cecollMemcpy(B[l].recv, g, total));
    CHECK(cecollMemcpy(B[l].send, h, total));
    if (inPlace) {
      /* in-place inputs live in recv at the place the collective reads them */
      if (c == 0) CHECK(cecollMemcpy((char*)B[l].recv + r * chunk, h + r * chunk, chunk));
      if (c == 1) CHECK(cecollMemcpy(B[l].recv, h, total));
      if (c == 3 && r == root) CHECK(cecollMemcpy((char*)B[l].recv + r * chunk, h + r * chunk, chunk));
      /* a non-root's Gather input where the root's is: its usual bytes;
       * its Scatter output there: poisoned */
      if (c == 3 && r != root && symmetricRoot(c, inPlace))
        CHECK(cecollMemcpy((char*)B[l].recv + (size_t)root * chunk, h, chunk));
      if (c == 2 && r != root && symmetricRoot(c, inPlace))
        CHECK(cecollMemcpy((char*)B[l].send + (size_t)root * chunk, g, chunk));
    }
  }
  if (graphCalls > 1 && c == 1 && inPlace)
    launch(c, count, chunk, inPlace); /* K in-place AlltoAlls transpose K times */
  else
    runOnce(c, count, chunk, inPlace);
  syncAll();
  long wrong = 0;
  for (int l = 0; l < nlocal; l++) {
    int r = first + l;
    const void* s;
    void* d;
    args(c, r, l, inPlace, chunk, &s, &d);
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
  return sumAcross(wrong);
}

static double timeColl(int c, size_t count, size_t chunk, int inPlace) {
  for (int i = 0; i < warmup; i++) runOnce(c, count, chunk, inPlace);
  syncAll();
  (void)sumAcross(0); /* -P: every rank starts the clock together */
  double t0 = now();
  for (int i = 0; i < iters; i++) runOnce(c, count, chunk, inPlace);
  syncAll();
  return maxAcross((now() - t0) / iters / (graphMode ? graphCalls : 1));
}

/* ---- Copy ceiling, rows, JSON, plot --------------------------------------- */

static double ceilBps = 0;   /* bytes copied per second by one large copy */
static size_t ceilBytes = 0; /* bytes of that copy */

/* One large device-to-device cecollMemcpyAsync on a stream of the calling
 * thread's device (the kind of copy the collectives make), timed with
 * events: one warm-up (first touch of the pages), then the best of 5. (A
 * synchronous cecollMemcpy is no ceiling: on the H200 cuMemcpy between
 * two ncclMemAlloc buffers ran at 127 GB/s, a sixteenth of this.) */
static void measureCeiling(size_t want) {
  const size_t lo = (size_t)64 << 20, hi = (size_t)256 << 20;
  void *a, *b;
  cudaStream_t s;
  cecollEvent_t e0, e1;
  double best = 0;
  ceilBytes = want < lo ? lo : want > hi ? hi : want;
  CHECK(ncclMemAlloc(&a, ceilBytes));
  CHECK(ncclMemAlloc(&b, ceilBytes));
  CHECK(cecollMemset(a, 1, ceilBytes));
  CHECK(cecollMemset(b, 2, ceilBytes));
  CHECK(cecollStreamCreate(&s));
  CHECK(cecollEventCreate(&e0));
  CHECK(cecollEventCreate(&e1));
  CHECK(cecollMemcpyAsync(b, a, ceilBytes, s));
  for (int i = 0; i < 5; i++) {
    float ms = 0;
    CHECK(cecollEventRecord(e0, s));
    CHECK(cecollMemcpyAsync(b, a, ceilBytes, s));
    CHECK(cecollEventRecord(e1, s));
    CHECK(cecollEventSynchronize(e1));
    CHECK(cecollEventElapsedTime(&ms, e0, e1));
    if (ms > 0 && ceilBytes / (ms * 1e-3) > best) best = ceilBytes / (ms * 1e-3);
  }
  CHECK(cecollEventDestroy(e0));
  CHECK(cecollEventDestroy(e1));
  CHECK(cecollStreamDestroy(s));
  CHECK(ncclMemFree(a));
  CHECK(ncclMemFree(b));
  ceilBps = best;
}

/* Bytes that all ranks of collective c copy together, per the copies the
 * engine issues: in place the chunks already where they belong are not
 * copied (AllGather's and AlltoAll's own chunk on every rank, the root's
 * own chunk of Scatter and Gather). */
static double copiedBytes(int c, size_t chunk, int inPlace) {
  double n = nranks, k = (double)chunk;
  if (c <= 1) return (inPlace ? n * (n - 1) : n * n) * k;
  return (inPlace ? n - 1 : n) * k;
}

static const size_t kCeilMinSize = 1 << 20; /* %ceil from this size column on */

struct row {
  int coll, inPlace;
  size_t size, count;
  double timeUs, algbw, busbw, ceilFrac; /* ceilFrac < 0: not given */
  long wrong;                            /* -1: not checked */
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

/* Non-finite values (a zero time) become null: JSON has no inf or nan. */
static void jsonNum(FILE* f, double v, const char* fmt) {
  if (v != v || v > 1e300 || v < -1e300)
    fputs("null", f);
  else
    fprintf(f, fmt, v);
}

static int writeJson(const char* path, const char* backend, int ndev) {
  FILE* f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cecoll-perf: %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"tool\": \"cecoll-perf\",\n  \"backend\": \"%s\",\n  \"devices\": %d,\n", backend, ndev);
  fprintf(f, "  \"nranks\": %d,\n  \"procs\": %d,\n  \"graph\": %s,\n  \"registered\": %s,\n", nranks, procsCount,
          graphMode ? "true" : "false", registered ? "true" : "false");
  fprintf(f, "  \"type\": \"%s\",\n  \"iters\": %d,\n  \"warmup\": %d,\n", kTypes[typeIdx].name, iters, warmup);
  fprintf(f, "  \"ceiling\": {\"bytes_per_s\": ");
  jsonNum(f, ceilBps, "%.6g");
  fprintf(f, ", \"gbps\": ");
  jsonNum(f, ceilBps / 1e9, "%.4f");
  fprintf(f, ", \"copy_bytes\": %zu, \"method\": \"cecollMemcpyAsync device-to-device, events, best of 5\"},\n", ceilBytes);
  fprintf(f, "  \"rows\": [");
  for (size_t i = 0; i < nrows; i++) {
    const struct row* r = &rows[i];
    fprintf(f, "%s\n    {\"collective\": \"%s\", \"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"root\": %d, ",
            i ? "," : "", kCollNames[r->coll], r->size, r->count, kTypes[typeIdx].name, r->coll >= 2 ? root : -1);
    fprintf(f, "\"nranks\": %d, \"procs\": %d, \"in_place\": %s, \"time_us\": ", nranks, procsCount,
            r->inPlace ? "true" : "false");
    jsonNum(f, r->timeUs, "%.3f");
    fprintf(f, ", \"algbw\": ");
    jsonNum(f, r->algbw, "%.4f");
    fprintf(f, ", \"busbw\": ");
    jsonNum(f, r->busbw, "%.4f");
    if (r->wrong < 0)
      fprintf(f, ", \"wrong\": null");
    else
      fprintf(f, ", \"wrong\": %ld", r->wrong);
    fprintf(f, ", \"ceil_fraction\": ");
    if (r->ceilFrac < 0)
      fputs("null", f);
    else
      jsonNum(f, r->ceilFrac, "%.4f");
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

static void usage(const char* p) {
  fprintf(stderr, "usage: %s [-N ranks | -P procs] [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-c 0|1] "
                  "[-o allgather|alltoall|scatter|gather|all] [-d type] [-r root] [-R 0|1] [-G [-K calls]]\n"
                  "       [--json FILE] [--plot FILE.png]\n"
                  "       %s -B [-P 2,3,...] [-n repetitions]\n", p, p);
  exit(2);
}

/* ---- Processes ------------------------------------------------------------ */

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
 * would wait for it forever). Returns the number that failed. */
static int waitChildren(struct child* ch, int n) {
  int failed = 0, left = n;
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
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (failed++ == 0) {
          fprintf(stderr, "cecoll-perf: rank %d failed (%s %d): stopping the others\n", i,
                  WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
          for (int k = 0; k < n; k++)
            if (!ch[k].done && ch[k].pid) kill(ch[k].pid, SIGKILL);
        }
      }
    }
  }
  return failed;
}

/* -P parent: the id, then procs copies of this program, one rank each. */
static int runProcs(int procs, char** argv) {
  struct child ch[MAXP];
  ncclUniqueId id;
  char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
  char envId[sizeof hex + 32], envRank[48], envN[48], envCeil[96];
  char* extra[] = {envId, envRank, envN, envCeil, NULL};
  /* The ceiling is measured here, before any rank runs, and handed down. */
  measureCeiling(bufBytes);
  snprintf(envCeil, sizeof envCeil, "CECOLL_PERF_CEIL=%.17g %zu", ceilBps, ceilBytes);
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
      waitChildren(ch, r);
      return 1;
    }
  }
  return waitChildren(ch, procs) ? 1 : 0;
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
      if (waitChildren(ch, n)) failed = 1;
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

int main(int argc, char** argv) {
  double tMain = now();
  const char* only = "all";
  const char* procsArg = NULL;
  int opt, boot = 0, itersGiven = 0;
  static const struct option longOpts[] = {
      {"json", required_argument, NULL, 'J'}, {"plot", required_argument, NULL, 'p'}, {NULL, 0, NULL, 0}};
  while ((opt = getopt_long(argc, argv, "N:P:Bb:e:f:n:w:c:o:d:r:R:GK:h", longOpts, NULL)) != -1) {
    switch (opt) {
      case 'G': graphMode = 1; break;
      case 'K':
        graphCalls = atoi(optarg);
        if (graphCalls < 1 || graphCalls > 1000) usage(argv[0]);
        break;
      case 'J': jsonPath = optarg; break;
      case 'p': plotPath = optarg; break;
      case 'N': nranks = atoi(optarg); break;
      case 'P': procsArg = optarg; break;
      case 'B': boot = 1; break;
      case 'b': minBytes = parseSize(optarg); break;
      case 'e': maxBytes = parseSize(optarg); break;
      case 'f': factor = parseSize(optarg); break;
      case 'n': iters = atoi(optarg); itersGiven = 1; break;
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

  /* A child of -P or -B: its rank and the id come in the environment. */
  const char* envRank = getenv("CECOLL_PERF_RANK");
  ncclUniqueId id;
  if (envRank) {
    const char* envN = getenv("CECOLL_PERF_NRANKS");
    if (!envN || idFromHex(getenv("CECOLL_PERF_ID"), &id) != 0) {
      fprintf(stderr, "cecoll-perf: CECOLL_PERF_RANK without CECOLL_PERF_NRANKS and CECOLL_PERF_ID\n");
      return 2;
    }
    nranks = atoi(envN);
    first = atoi(envRank);
    if (nranks < 1 || nranks > MAXP || first < 0 || first >= nranks) usage(argv[0]);
    if (getenv("CECOLL_PERF_BOOT")) return bootChild(first, nranks, &id, tMain);
    nlocal = 1;
    multiproc = 1;
    procsCount = nranks;
    const char* envCeil = getenv("CECOLL_PERF_CEIL");
    if (!envCeil || sscanf(envCeil, "%lf %zu", &ceilBps, &ceilBytes) != 2) {
      fprintf(stderr, "cecoll-perf: CECOLL_PERF_CEIL missing or malformed\n");
      return 2;
    }
  } else if (boot) {
    int counts[MAXP], nc = 7;
    for (int i = 0; i < nc; i++) counts[i] = i + 2;
    if (procsArg && (nc = parseList(procsArg, counts, MAXP)) <= 0) usage(argv[0]);
    return runBoot(counts, nc, itersGiven ? iters : 5, argv);
  } else if (procsArg) {
    int procs = atoi(procsArg);
    if (procs < 1 || procs > MAXP || root < 0 || root >= procs || factor < 2 || iters < 1) usage(argv[0]);
    size_t esz = kTypes[typeIdx].size;
    bufBytes = ((maxBytes + esz - 1) / esz * esz) * (size_t)procs;
    return runProcs(procs, argv);
  } else {
    nlocal = nranks;
  }
  if (nranks < 1 || nranks > MAXR || root < 0 || root >= nranks || factor < 2 || iters < 1) usage(argv[0]);
  int quiet = first != 0; /* -P: rank 0 prints */

  const char* backend;
  int ndev;
  CHECK(cecollGetBackend(&backend));
  CHECK(cecollGetDeviceCount(&ndev));
  for (int l = 0; l < nlocal; l++) devs[l] = (first + l) % ndev;
  if (multiproc) {
    CHECK(cecollSetDevice(devs[0]));
    CHECK(ncclCommInitRank(&comms[0], nranks, id, first));
  } else {
    CHECK(ncclCommInitAll(comms, nranks, devs));
  }

  size_t esz = kTypes[typeIdx].size;
  bufBytes = ((maxBytes + esz - 1) / esz * esz) * nranks;
  if (registered && nlocal > 1) CHECK(ncclGroupStart());
  for (int l = 0; l < nlocal; l++) {
    CHECK(cecollSetDevice(devs[l]));
    CHECK(cecollStreamCreate(&streams[l]));
    CHECK(ncclMemAlloc(&B[l].send, bufBytes));
    CHECK(ncclMemAlloc(&B[l].recv, bufBytes));
    if (registered) {
      CHECK(ncclCommWindowRegister(comms[l], B[l].send, bufBytes, &B[l].sw, NCCL_WIN_COLL_SYMMETRIC));
      CHECK(ncclCommWindowRegister(comms[l], B[l].recv, bufBytes, &B[l].rw, NCCL_WIN_COLL_SYMMETRIC));
    }
  }
  if (registered && nlocal > 1) CHECK(ncclGroupEnd());
  if (multiproc) {
    CHECK(ncclMemAlloc(&redSend, 8));
    CHECK(ncclMemAlloc(&redRecv, 8 * (size_t)nranks));
  } else {
    CHECK(cecollSetDevice(devs[0]));
    measureCeiling(bufBytes);
  }
  if (plotPath && !jsonPath) {
    static char derived[4200];
    snprintf(derived, sizeof derived, "%s.json", plotPath);
    jsonPath = derived;
  }
  int progress = !quiet && isatty(2);

  if (!quiet)
    printf("# cecoll-perf: backend %s, %d ranks %s on %d device(s), %s buffers, type %s, root %d, iters %d, warmup %d\n",
           backend, nranks, multiproc ? "in as many processes" : "in one process", ndev,
           registered ? "registered" : "unregistered", kTypes[typeIdx].name, root, iters, warmup);
  if (!quiet)
    printf("# copy ceiling: %.2f GB/s (one %zu MiB device-to-device cecollMemcpyAsync on device %d, best of 5; bytes "
           "copied, not read+written)\n",
           ceilBps / 1e9, ceilBytes >> 20, multiproc ? 0 : devs[0]);
  if (!quiet && graphMode)
    printf("# -G: times are graph replays, %d collective(s) per graph, per collective\n", graphCalls);
  long totalWrong = 0;
  int nsizes = 0;
  for (size_t chunk = minBytes; chunk <= maxBytes; chunk *= factor) nsizes++;
  for (int c = 0; c < 4; c++) {
    if (strcmp(only, "all") && strcmp(only, kCollNames[c])) continue;
    if (!quiet) {
      printf("#\n# %s\n", kCollNames[c]);
      printf("# %10s %12s %8s %6s %5s   %9s %8s %8s %6s %6s   %9s %8s %8s %6s %6s\n", "size", "count", "type",
             "redop", "root", "time(us)", "algbw", "busbw", "#wrong", "%ceil", "time(us)", "algbw", "busbw",
             "#wrong", "%ceil");
    }
    int si = 0;
    for (size_t chunk = minBytes; chunk <= maxBytes; chunk *= factor) {
      size_t count = chunk / esz;
      size_t bytes = count * esz;
      size_t size = bytes * nranks;
      struct row r2[2];
      if (progress) fprintf(stderr, "\r[%s %d/%d sizes]", kCollNames[c], ++si, nsizes);
      for (int inPlace = 0; inPlace < 2; inPlace++) {
        if (graphMode) capture(c, count, bytes, inPlace);
        long wrong = check ? verify(c, count, bytes, inPlace) : -1;
        double t = timeColl(c, count, bytes, inPlace);
        if (graphMode) dropGraphs();
        double algbw = size / t / 1e9;
        double frac = size >= kCeilMinSize && ceilBps > 0 ? copiedBytes(c, bytes, inPlace) / t / ceilBps : -1;
        r2[inPlace] = (struct row){c, inPlace, size, count, t * 1e6, algbw, algbw * (nranks - 1) / nranks, frac, wrong};
        if (wrong > 0) totalWrong += wrong;
      }
      if (progress) fprintf(stderr, "\r\033[K");
      if (!quiet) {
        printf("  %10zu %12zu %8s %6s %5d", size, count, kTypes[typeIdx].name, "none", (c >= 2) ? root : -1);
        for (int k = 0; k < 2; k++) {
          printf("   %9.2f %8.2f %8.2f %6ld", r2[k].timeUs, r2[k].algbw, r2[k].busbw, r2[k].wrong);
          if (r2[k].ceilFrac < 0)
            printf(" %6s", "-");
          else
            printf(" %6.1f", 100 * r2[k].ceilFrac);
          addRow(r2[k]);
        }
        printf("\n");
      }
      fflush(stdout);
    }
  }
  for (int l = 0; l < nlocal; l++) {
    if (registered) {
      CHECK(ncclCommWindowDeregister(comms[l], B[l].sw));
      CHECK(ncclCommWindowDeregister(comms[l], B[l].rw));
    }
    CHECK(ncclMemFree(B[l].send));
    CHECK(ncclMemFree(B[l].recv));
    CHECK(cecollStreamDestroy(streams[l]));
  }
  if (multiproc) {
    CHECK(ncclMemFree(redSend));
    CHECK(ncclMemFree(redRecv));
    CHECK(ncclCommFinalize(comms[0]));
  }
  for (int l = 0; l < nlocal; l++) CHECK(ncclCommDestroy(comms[l]));
  if (!quiet) printf("# out of bounds values: %ld %s\n", totalWrong, totalWrong ? "FAILED" : "OK");
  int outErr = 0;
  if (!quiet && jsonPath) {
    outErr = writeJson(jsonPath, backend, ndev) != 0;
    if (!outErr && plotPath) outErr = runPlot(jsonPath, plotPath) != 0;
  }
  free(rows);
  return totalWrong || outErr ? 1 : 0;
}
