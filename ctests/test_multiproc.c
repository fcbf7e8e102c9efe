/*
 * test_multiproc.c: communicators across processes on one node.
 *
 * The parent makes a bootstrap id (ncclGetUniqueId), starts children with
 * posix_spawn (never a bare fork: the Go runtime already runs), hands them
 * the id in hex on their command line, and collects their exit codes. Each
 * child is one or more ranks, checks its own results, and exits non-zero on
 * a mismatch. Every wait, in the parent and in the children, has a deadline.
 *
 * Scenarios (-X a,b runs only those; CECOLL_TEST_SKIP=a,b skips some):
 *   data_n<N>       N processes, one rank each: AllGather, AlltoAll, Scatter,
 *                   Gather; windows (zero-copy) and plain ncclMemAlloc
 *                   (staged); in and out of place; each count of -c; random
 *                   data, poisoned outputs, guard bytes; NULL unused
 *                   buffers; graph capture replayed with new inputs
 *   data_2x2        2 processes of 2 ranks each, issued in groups
 *   control_1x3     the same sweep, 3 ranks in one process: a failure here
 *                   is the test's or the in-process path's, not the bootstrap's
 *   id_from_rank0   rank 0's process makes the id and passes it up a pipe
 *   stranger        TCP connections to the id's address sending garbage
 *                   while the real ranks initialise
 *   garbage_id      random bytes, zeros, and a real id with a bad magic,
 *                   and a real id with nranks INT_MAX, 65537 or 2^30:
 *                   ncclInvalidArgument from ncclCommInitRank, at once
 *   missing_rank    nranks 3, 2 processes: both fail, no hang
 *   duplicate_rank  two processes claiming rank 0 (and 1,1 of 3): errors
 *   settings_differ 4 processes, CECOLL_INTRA_BATCH_SYNC_FREQ set in one:
 *                   every init fails, naming the variable
 *   kill_rank<R>    rank R SIGKILLed while every rank loops on collectives:
 *                   the survivors see ncclRemoteError or a failed call
 *                   within 15 s (CECOLL_TIMEOUT=10); every later call
 *                   returns it and ncclGetLastError(comm) names it; and
 *                   ncclCommAbort returns promptly and releases their streams
 *   kill_parked     the same, the victim having stopped calling first, so
 *                   the survivors' streams wait on it when it dies
 *   abort_parked    the same, but the victim calls ncclCommAbort and lives
 *                   on: the abort reaches the peers (cecoll's bootstrap
 *                   promise: an aborted peer never hangs the rest)
 *   kill_sendrecv   kill_rank<R> for point-to-point, rank 1 of 3: every rank loops
 *                   on a ring exchange (a group of ncclSend to rank+1 and
 *                   ncclRecv from rank-1) of 1 MiB, staged in pieces
 *                   (CECOLL_STAGING_BYTES=65536); the same checks, and a
 *                   later ncclSend/ncclRecv group returns the failure too
 *   sendrecv_timeout 2 processes, CECOLL_TIMEOUT=2: rank 0 sends 1 MiB
 *                   (staged) and rank 1 never posts the receive; rank 0
 *                   sees ncclRemoteError within 10 s (async error or a
 *                   failed call), its stream is released, later calls
 *                   return it, ncclCommAbort returns promptly on both
 * After each scenario no new entry may be left in /dev/shm.
 *
 * Options: -n 2,3,4,8 process counts; -c 0,1,7,1M counts (elements; "<k>M"
 * is k MiB per rank's chunk); -G 0 leaves out data_2x2; -q a reduced set;
 * -X names; -t seconds a scenario may take at most (default 60).
 * Children: -W ROLE key=value... (internal).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "mp_common.h"

#define MAX_PROCS 16
#define MAX_LOCAL 4

/* ---- Options ------------------------------------------------------------- */

typedef struct {
  int procs[T_MAX_LIST];
  int nprocs;
  char counts[256]; /* as given: children parse it again */
  int group_variant;
  int quick;
  const char* only;
  double scenario_s;
} mp_opts;

static mp_opts opts;
static const char* self_path;

static int listed(const char* list, const char* name) {
  size_t n = strlen(name);
  while (list && *list) {
    size_t m = strcspn(list, ",");
    if (m == n && strncmp(list, name, n) == 0) return 1;
    list += m + (list[m] == ',');
  }
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: %s [-n 2,3,4,8] [-c 0,1,7,1M] [-G 0|1] [-q] [-X scenario,...] [-t seconds]\n"
          "  env: CECOLL_TEST_PROCS, CECOLL_TEST_MP_COUNTS, CECOLL_TEST_QUICK=1\n",
          self_path);
  exit(2);
}

static void set_procs(const char* s) {
  opts.nprocs = 0;
  while (s && *s) {
    char* end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > MAX_PROCS || opts.nprocs == T_MAX_LIST) usage();
    opts.procs[opts.nprocs++] = (int)v;
    if (*end && *end != ',') usage();
    s = *end ? end + 1 : end;
  }
}

/* Counts: elements, or "<k>M" for k MiB of bytes per chunk. */
static int parse_counts(const char* s, size_t esz, size_t* out, int max) {
  int n = 0;
  while (s && *s) {
    char* end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || n == max) return -1;
    if (*end == 'M') {
      v = (v << 20) / esz;
      end++;
    }
    out[n++] = (size_t)v;
    if (*end && *end != ',') return -1;
    s = *end ? end + 1 : end;
  }
  return n;
}

static void parse_parent(int argc, char** argv) {
  const char* v;
  int opt;
  size_t tmp[T_MAX_LIST];
  set_procs("2,3,4,8");
  snprintf(opts.counts, sizeof opts.counts, "0,1,7,1M");
  opts.group_variant = 1;
  opts.scenario_s = 60;
  if ((v = getenv("CECOLL_TEST_PROCS")) && *v) set_procs(v);
  if ((v = getenv("CECOLL_TEST_MP_COUNTS")) && *v) snprintf(opts.counts, sizeof opts.counts, "%s", v);
  if ((v = getenv("CECOLL_TEST_QUICK")) && *v && strcmp(v, "0") != 0) opts.quick = 1;
  while ((opt = getopt(argc, argv, "n:c:G:qX:t:")) != -1) {
    switch (opt) {
      case 'n': set_procs(optarg); break;
      case 'c': snprintf(opts.counts, sizeof opts.counts, "%s", optarg); break;
      case 'G': opts.group_variant = atoi(optarg); break;
      case 'q': opts.quick = 1; break;
      case 'X': opts.only = optarg; break;
      case 't': opts.scenario_s = atof(optarg); break;
      default: usage();
    }
  }
  if (parse_counts(opts.counts, 1, tmp, T_MAX_LIST) < 0) usage();
}

/* ---- Child configuration -------------------------------------------------- */

typedef struct {
  const char* role;
  int n;       /* nranks of the communicator */
  int first;   /* this process's first rank */
  int nlocal;  /* ranks in this process */
  ncclUniqueId id;
  int have_id;
  int make_id; /* make the id here and tell the parent (rank 0) */
  uint64_t seed;
  const char* counts;
  int quick;
  int victim;  /* kill: the rank the parent kills */
  int park;    /* kill: 1 the victim stops calling first, so the survivors' streams block on it;
                * 2 the same, then it calls ncclCommAbort and stays alive */
  int sendrecv; /* kill: loop on a ring of ncclSend/ncclRecv instead of AllGathers (op=sendrecv) */
  const char* want; /* init_error: a text the last error must hold */
} child_cfg;

static int child_arg(const char* a, const char* key, const char** val) {
  size_t k = strlen(key);
  if (strncmp(a, key, k) == 0 && a[k] == '=') {
    *val = a + k + 1;
    return 1;
  }
  return 0;
}

static void parse_child(int argc, char** argv, child_cfg* c) {
  memset(c, 0, sizeof *c);
  c->role = argv[2];
  c->nlocal = 1;
  c->counts = "7";
  c->victim = -1;
  for (int i = 3; i < argc; i++) {
    const char* v;
    if (child_arg(argv[i], "n", &v))
      c->n = atoi(v);
    else if (child_arg(argv[i], "first", &v))
      c->first = atoi(v);
    else if (child_arg(argv[i], "local", &v))
      c->nlocal = atoi(v);
    else if (child_arg(argv[i], "id", &v)) {
      if (strcmp(v, "make") == 0)
        c->make_id = 1;
      else if (mp_id_from_hex(v, &c->id) == 0)
        c->have_id = 1;
      else
        t_fatal_at(__FILE__, __LINE__, "bad id argument");
    } else if (child_arg(argv[i], "seed", &v))
      c->seed = strtoull(v, NULL, 0);
    else if (child_arg(argv[i], "counts", &v))
      c->counts = v;
    else if (child_arg(argv[i], "quick", &v))
      c->quick = atoi(v);
    else if (child_arg(argv[i], "victim", &v))
      c->victim = atoi(v);
    else if (child_arg(argv[i], "park", &v))
      c->park = atoi(v);
    else if (child_arg(argv[i], "want", &v))
      c->want = v;
    else if (child_arg(argv[i], "op", &v)) {
      if (strcmp(v, "sendrecv") == 0)
        c->sendrecv = 1;
      else if (strcmp(v, "allgather") != 0)
        t_fatal_at(__FILE__, __LINE__, "unknown op %s", v);
    }
    else
      t_fatal_at(__FILE__, __LINE__, "unknown child argument %s", argv[i]);
  }
  REQUIRE(c->nlocal >= 1 && c->nlocal <= MAX_LOCAL);
}

/* ---- The ranks of this process ---------------------------------------------- */

typedef struct {
  int n, first, nlocal;
  int dev[MAX_LOCAL];
  ncclComm_t comm[MAX_LOCAL];
  cudaStream_t stream[MAX_LOCAL];
} local_world;

static int device_for(int rank) {
  int count = 0;
  CHECK(cecollGetDeviceCount(&count));
  REQUIRE(count > 0);
  return rank % count; /* device numbers are process-local */
}

/* One rank: a plain ncclCommInitRank. Several: one thread, in a group. */
static ncclResult_t local_init(local_world* w, const child_cfg* c) {
  ncclResult_t r = ncclSuccess;
  memset(w, 0, sizeof *w);
  w->n = c->n;
  w->first = c->first;
  w->nlocal = c->nlocal;
  for (int l = 0; l < w->nlocal; l++) w->dev[l] = device_for(w->first + l);
  if (w->nlocal == 1) {
    CHECK(cecollSetDevice(w->dev[0]));
    r = ncclCommInitRank(&w->comm[0], w->n, c->id, w->first);
  } else {
    CHECK(ncclGroupStart());
    for (int l = 0; l < w->nlocal && r == ncclSuccess; l++) {
      CHECK(cecollSetDevice(w->dev[l]));
      r = ncclCommInitRank(&w->comm[l], w->n, c->id, w->first + l);
    }
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess) r = e;
  }
  if (r != ncclSuccess) return r;
  for (int l = 0; l < w->nlocal; l++) {
    CHECK(cecollSetDevice(w->dev[l]));
    CHECK(cecollStreamCreate(&w->stream[l]));
  }
  return ncclSuccess;
}

static void local_destroy(local_world* w) {
  for (int l = 0; l < w->nlocal; l++) {
    CHECK(cecollStreamSynchronize(w->stream[l]));
    CHECK(cecollStreamDestroy(w->stream[l]));
  }
  if (w->nlocal > 1) CHECK(ncclGroupStart());
  for (int l = 0; l < w->nlocal; l++) CHECK(ncclCommFinalize(w->comm[l]));
  if (w->nlocal > 1) CHECK(ncclGroupEnd());
  for (int l = 0; l < w->nlocal; l++) CHECK(ncclCommDestroy(w->comm[l]));
}

/* ---- One collective case across processes ------------------------------------ */

enum { BUF_R = 0, BUF_S = 1, BUF_NONE = -1 };

typedef struct {
  int buf;
  size_t off;
} ref;

typedef struct {
  ncclFunc_t func;
  ncclDataType_t dtype;
  size_t count;
  int root;
  int inplace; /* AllGather/AlltoAll: every rank; Scatter/Gather: the root */
  int registered;
  int null_unused; /* non-roots pass NULL for the buffer they do not use */
  int replays;     /* >0: capture the call once, replay it with new inputs */
  uint64_t seed;
} mcase;

/* Inputs are a function of (seed, rank, byte position), so every process
 * computes every peer's input, and so every expected output, by itself. */
static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static void gen_input(unsigned char* dst, uint64_t seed, int rank, size_t off, size_t len) {
  size_t cur = (size_t)-1;
  uint64_t w = 0;
  for (size_t i = 0; i < len; i++) {
    size_t p = off + i;
    if ((p >> 3) != cur) {
      cur = p >> 3;
      w = mix64(seed * 0x100000001B3ull ^ ((uint64_t)rank << 52) ^ (uint64_t)cur);
    }
    dst[i] = (unsigned char)(w >> (8 * (p & 7)));
  }
}

typedef struct {
  size_t cb;
  size_t size[2], alloc[2];
} shape;

static void case_shape(const mcase* c, int n, shape* s) {
  size_t cb = c->count * t_type_size(c->dtype);
  s->cb = cb;
  switch (c->func) {
    case ncclFuncAllGather: s->size[BUF_R] = n * cb, s->size[BUF_S] = cb; break;
    case ncclFuncAlltoAll: s->size[BUF_R] = n * cb, s->size[BUF_S] = n * cb; break;
    case ncclFuncScatter: s->size[BUF_R] = cb, s->size[BUF_S] = n * cb; break;
    case ncclFuncGather: s->size[BUF_R] = n * cb, s->size[BUF_S] = cb; break;
    default: t_fatal_at(__FILE__, __LINE__, "not a CE collective");
  }
  /* 64+ guard bytes; the same size on every rank keeps windows symmetric. */
  for (int b = 0; b < 2; b++)
    s->alloc[b] = (s->size[b] + 64 + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT *
                  NCCL_WIN_REQUIRED_ALIGNMENT;
}

/* Rank r's buffers and how many input bytes it sends. Windows are
 * symmetric (NCCL's contract): every rank passes its buffer at the same
 * offset of the same window. The rooted in-place forms use NCCL's layout
 * (docs/protocol.md#the-in-place-rooted-layout) on windows: one buffer per
 * rank; Scatter passes send = buf, recv = buf + rank*count on every rank,
 * Gather recv = buf, send = buf + rank*count. */
static void case_refs(const mcase* c, int n, const shape* s, int r, ref* send, ref* recv, size_t* in_bytes) {
  size_t cb = s->cb;
  int root_ip = c->inplace && (c->func == ncclFuncScatter || c->func == ncclFuncGather);
  send->buf = BUF_S, send->off = 0;
  recv->buf = BUF_R, recv->off = 0;
  switch (c->func) {
    case ncclFuncAllGather:
      if (c->inplace) send->buf = BUF_R, send->off = (size_t)r * cb;
      *in_bytes = cb;
      break;
    case ncclFuncAlltoAll:
      if (c->inplace) send->buf = BUF_R;
      *in_bytes = (size_t)n * cb;
      break;
    case ncclFuncScatter:
      if (root_ip && (r == c->root || c->registered)) recv->buf = BUF_S, recv->off = (size_t)r * cb;
      if (c->null_unused && r != c->root) send->buf = BUF_NONE;
      *in_bytes = r == c->root ? (size_t)n * cb : 0;
      break;
    case ncclFuncGather:
      if (root_ip && (r == c->root || c->registered)) send->buf = BUF_R, send->off = (size_t)r * cb;
      if (c->null_unused && r != c->root) recv->buf = BUF_NONE;
      *in_bytes = cb;
      break;
    default: break;
  }
}

static ncclResult_t issue(const mcase* c, ncclComm_t comm, cudaStream_t st, const void* send, void* recv) {
  switch (c->func) {
    case ncclFuncAllGather: return ncclAllGather(send, recv, c->count, c->dtype, comm, st);
    case ncclFuncAlltoAll: return ncclAlltoAll(send, recv, c->count, c->dtype, comm, st);
    case ncclFuncScatter: return ncclScatter(send, recv, c->count, c->dtype, c->root, comm, st);
    case ncclFuncGather: return ncclGather(send, recv, c->count, c->dtype, c->root, comm, st);
    default: return ncclInternalError;
  }
}

/* The buffers of one case on this process's ranks. */
typedef struct {
  const mcase* c;
  local_world* w;
  shape s;
  void* dev[MAX_LOCAL][2];
  ncclWindow_t win[MAX_LOCAL][2];
  unsigned char* host[MAX_LOCAL][2]; /* what was uploaded, then what must be there */
  ref send[MAX_LOCAL], recv[MAX_LOCAL];
  size_t in_bytes[MAX_LOCAL];
  cecollGraph_t graph[MAX_LOCAL];
} mstate;

static void* mptr(mstate* m, int l, ref x) {
  return x.buf == BUF_NONE ? NULL : (unsigned char*)m->dev[l][x.buf] + x.off;
}

/* Poison, this rank's inputs for seed, upload; then the expected contents
 * (every peer's input is a function of seed and its rank). */
static void mprepare(mstate* m, uint64_t seed) {
  const mcase* c = m->c;
  int n = m->w->n;
  size_t cb = m->s.cb;
  for (int l = 0; l < m->w->nlocal; l++) {
    int r = m->w->first + l;
    unsigned char* out;
    for (int b = 0; b < 2; b++) memset(m->host[l][b], T_POISON, m->s.alloc[b]);
    if (m->in_bytes[l] && m->send[l].buf != BUF_NONE)
      gen_input(m->host[l][m->send[l].buf] + m->send[l].off, seed, r, 0, m->in_bytes[l]);
    for (int b = 0; b < 2; b++) CHECK(cecollMemcpy(m->dev[l][b], m->host[l][b], m->s.alloc[b]));
    if (m->recv[l].buf == BUF_NONE) continue;
    out = m->host[l][m->recv[l].buf] + m->recv[l].off;
    switch (c->func) {
      case ncclFuncAllGather:
        for (int i = 0; i < n; i++) gen_input(out + i * cb, seed, i, 0, cb);
        break;
      case ncclFuncAlltoAll:
        for (int i = 0; i < n; i++) gen_input(out + i * cb, seed, i, (size_t)r * cb, cb);
        break;
      case ncclFuncScatter: gen_input(out, seed, c->root, (size_t)r * cb, cb); break;
      case ncclFuncGather:
        if (r == c->root)
          for (int i = 0; i < n; i++) gen_input(out + i * cb, seed, i, 0, cb);
        break;
      default: break;
    }
  }
}

/* Every collective call either queues or ends the process: peers of a rank
 * that gave up would wait for it until their own watchdogs. */
static void missue(mstate* m) {
  local_world* w = m->w;
  if (w->nlocal > 1) CHECK(ncclGroupStart());
  for (int l = 0; l < w->nlocal; l++) {
    ncclResult_t res;
    CHECK(cecollSetDevice(w->dev[l]));
    res = issue(m->c, w->comm[l], w->stream[l], mptr(m, l, m->send[l]), mptr(m, l, m->recv[l]));
    if (res != ncclSuccess)
      t_fatal_at(__FILE__, __LINE__, "rank %d: %s -> %d (%s): %s", w->first + l, t_func_name(m->c->func), (int)res,
                 ncclGetErrorString(res), ncclGetLastError(w->comm[l]));
  }
  if (w->nlocal > 1) CHECK(ncclGroupEnd());
}

/* Reads every allocation back, guard bytes included; returns wrong bytes. */
static size_t mverify(mstate* m, unsigned char* scratch, const char* when) {
  size_t bad = 0;
  for (int l = 0; l < m->w->nlocal; l++) CHECK(cecollStreamSynchronize(m->w->stream[l]));
  for (int l = 0; l < m->w->nlocal; l++) {
    for (int b = 0; b < 2; b++) {
      char what[128];
      CHECK(cecollMemcpy(scratch, m->dev[l][b], m->s.alloc[b]));
      snprintf(what, sizeof what, "%s rank %d %s buffer", when, m->w->first + l,
               b == BUF_R ? "recv-side" : "send-side");
      bad += t_compare(scratch, m->host[l][b], m->s.alloc[b], what);
    }
  }
  return bad;
}

/* Runs one case (eagerly, or captured once and replayed) and returns the
 * number of wrong bytes over the local ranks. */
static size_t run_mcase(local_world* w, const mcase* c) {
  mstate m;
  unsigned char* scratch;
  size_t bad = 0;
  memset(&m, 0, sizeof m);
  m.c = c;
  m.w = w;
  case_shape(c, w->n, &m.s);
  scratch = (unsigned char*)malloc(m.s.alloc[0] > m.s.alloc[1] ? m.s.alloc[0] : m.s.alloc[1]);
  REQUIRE(scratch != NULL);
  for (int l = 0; l < w->nlocal; l++) {
    case_refs(c, w->n, &m.s, w->first + l, &m.send[l], &m.recv[l], &m.in_bytes[l]);
    CHECK(cecollSetDevice(w->dev[l]));
    for (int b = 0; b < 2; b++) {
      CHECK(ncclMemAlloc(&m.dev[l][b], m.s.alloc[b]));
      m.host[l][b] = (unsigned char*)malloc(m.s.alloc[b]);
      REQUIRE(m.host[l][b] != NULL);
    }
  }
  if (c->registered) {
    /* Collective across every rank of every process, in one order; both
     * buffers, used or not, so registration stays symmetric. */
    for (int b = 0; b < 2; b++) {
      if (w->nlocal > 1) CHECK(ncclGroupStart());
      for (int l = 0; l < w->nlocal; l++)
        CHECK(ncclCommWindowRegister(w->comm[l], m.dev[l][b], m.s.alloc[b], &m.win[l][b], NCCL_WIN_COLL_SYMMETRIC));
      if (w->nlocal > 1) CHECK(ncclGroupEnd());
    }
  }
  if (c->replays > 0) {
    for (int l = 0; l < w->nlocal; l++) {
      CHECK(cecollSetDevice(w->dev[l]));
      CHECK(cecollStreamBeginCapture(w->stream[l]));
    }
    missue(&m);
    for (int l = 0; l < w->nlocal; l++) {
      CHECK(cecollSetDevice(w->dev[l]));
      CHECK(cecollStreamEndCapture(w->stream[l], &m.graph[l]));
    }
    for (int it = 0; it < c->replays; it++) {
      char when[32];
      /* A rank uploads its next inputs only after its previous replay
       * ended, and a replay's first sync waits for every rank's upload. */
      mprepare(&m, c->seed + 7919ull * (uint64_t)it);
      for (int l = 0; l < w->nlocal; l++) {
        CHECK(cecollSetDevice(w->dev[l]));
        CHECK(cecollGraphLaunch(m.graph[l], w->stream[l]));
      }
      snprintf(when, sizeof when, "replay %d:", it);
      bad += mverify(&m, scratch, when);
    }
    for (int l = 0; l < w->nlocal; l++) CHECK(cecollGraphDestroy(m.graph[l]));
  } else {
    mprepare(&m, c->seed);
    missue(&m);
    bad += mverify(&m, scratch, "");
  }
  for (int l = 0; l < w->nlocal; l++) {
    for (int b = 0; b < 2; b++) {
      if (m.win[l][b]) CHECK(ncclCommWindowDeregister(w->comm[l], m.win[l][b]));
      CHECK(cecollSetDevice(w->dev[l]));
      CHECK(ncclMemFree(m.dev[l][b]));
      free(m.host[l][b]);
    }
  }
  free(scratch);
  return bad;
}

static const ncclFunc_t kFuncs[] = {ncclFuncAllGather, ncclFuncAlltoAll, ncclFuncScatter, ncclFuncGather};
static const ncclDataType_t kTypes[] = {ncclFloat32, ncclInt8, ncclFloat64, ncclBfloat16, ncclUint32};

/* The sweep every process of a data scenario runs, in the same order: the
 * four collectives x counts x in/out of place x registered or not. */
static int is_rooted(ncclFunc_t f) { return f == ncclFuncScatter || f == ncclFuncGather; }

static void one_case(local_world* w, const mcase* c, const char* what) {
  size_t bad;
  t_set_case("ranks %d-%d of %d: %s%s %s count=%zu root=%d inplace=%d reg=%d null=%d replays=%d", w->first,
             w->first + w->nlocal - 1, w->n, what, t_func_name(c->func), t_type_name(c->dtype), c->count,
             is_rooted(c->func) ? c->root : -1, c->inplace, c->registered, c->null_unused, c->replays);
  bad = run_mcase(w, c);
  EXPECT(bad == 0, "%zu bytes wrong", bad);
}

static void data_sweep(local_world* w, const child_cfg* cfg) {
  int k = 0;
  for (size_t f = 0; f < sizeof kFuncs / sizeof kFuncs[0]; f++) {
    for (int ci = 0;; ci++) {
      size_t counts[T_MAX_LIST];
      ncclDataType_t dt = kTypes[(f + (size_t)ci) % (sizeof kTypes / sizeof kTypes[0])];
      int nc = parse_counts(cfg->counts, t_type_size(dt), counts, T_MAX_LIST);
      REQUIRE(nc >= 0);
      if (ci >= nc) break;
      for (int ip = 0; ip < 2; ip++) {
        for (int reg = 0; reg < 2; reg++, k++) {
          mcase c;
          if (cfg->quick && ((ip + reg + ci) % 2)) continue;
          memset(&c, 0, sizeof c);
          c.func = kFuncs[f];
          c.dtype = dt;
          c.count = counts[ci];
          c.root = k % w->n;
          c.inplace = ip;
          c.registered = reg;
          c.seed = cfg->seed * 1000003ull + (uint64_t)k;
          one_case(w, &c, "");
        }
      }
    }
  }
  for (size_t f = 0; f < sizeof kFuncs / sizeof kFuncs[0]; f++) {
    mcase c;
    /* Non-roots pass NULL for the buffer they do not use (B11). */
    for (int reg = 0; reg < 2 && is_rooted(kFuncs[f]); reg++, k++) {
      if (cfg->quick && reg != (int)(f % 2)) continue;
      memset(&c, 0, sizeof c);
      c.func = kFuncs[f];
      c.dtype = ncclInt8;
      c.count = 7;
      c.root = w->n - 1;
      c.registered = reg;
      c.null_unused = 1;
      c.seed = cfg->seed * 1000003ull + (uint64_t)k;
      one_case(w, &c, "NULL unused: ");
    }
    /* Captured once on every rank's stream, replayed with new inputs. */
    memset(&c, 0, sizeof c);
    c.func = kFuncs[f];
    c.dtype = ncclFloat32;
    c.count = 13;
    c.root = (int)f % w->n;
    c.inplace = f % 2 == 0;
    c.registered = f >= 2;
    c.replays = cfg->quick ? 2 : 3;
    c.seed = cfg->seed * 1000003ull + (uint64_t)k++;
    one_case(w, &c, "graph: ");
  }
}

/* ---- Children ------------------------------------------------------------------ */

static int child_data(const child_cfg* cfg, const char* prog) {
  local_world w;
  child_cfg c = *cfg;
  ncclResult_t r;
  double t0;
  if (c.make_id) {
    char hex[MP_ID_HEX];
    t_set_case("rank %d: ncclGetUniqueId", c.first);
    CHECK(ncclGetUniqueId(&c.id));
    mp_id_to_hex(&c.id, hex);
    mp_tell_parent("ID %s", hex);
  }
  REQUIRE(c.make_id || c.have_id);
  t_set_case("ranks %d-%d of %d: ncclCommInitRank", c.first, c.first + c.nlocal - 1, c.n);
  t0 = mp_now();
  r = local_init(&w, &c);
  if (r != ncclSuccess)
    t_fatal_at(__FILE__, __LINE__, "ncclCommInitRank -> %d (%s) after %.1f s: %s", (int)r, ncclGetErrorString(r),
               mp_now() - t0, ncclGetLastError(NULL));
  t_passed++;
  data_sweep(&w, &c);
  t_set_case("ranks %d-%d of %d: finalize and destroy", c.first, c.first + c.nlocal - 1, c.n);
  local_destroy(&w);
  return t_report(prog);
}

/* ncclCommInitRank must fail, within bound seconds. */
static int child_init_error(const child_cfg* c, const char* prog, double bound) {
  local_world w;
  double t0 = mp_now(), dt;
  ncclResult_t r;
  t_set_case("rank %d of %d: ncclCommInitRank must fail", c->first, c->n);
  r = local_init(&w, c);
  dt = mp_now() - t0;
  printf("rank %d of %d: ncclCommInitRank -> %d (%s) after %.2f s: %s\n", c->first, c->n, (int)r,
         ncclGetErrorString(r), dt, r == ncclSuccess ? "" : ncclGetLastError(NULL));
  EXPECT(r != ncclSuccess, "ncclCommInitRank succeeded");
  EXPECT(dt < bound, "ncclCommInitRank took %.2f s, bound %.0f s", dt, bound);
  if (c->want && r != ncclSuccess)
    EXPECT(strstr(ncclGetLastError(NULL), c->want) != NULL, "the last error \"%s\" lacks \"%s\"",
           ncclGetLastError(NULL), c->want);
  if (r == ncclSuccess) {
    for (int l = 0; l < w.nlocal; l++) (void)ncclCommAbort(w.comm[l]);
  }
  return t_report(prog);
}

/* A foreign id is refused at once with ncclInvalidArgument. */
static int child_garbage(const child_cfg* c, const char* prog) {
  ncclUniqueId ids[3];
  const char* what[3] = {"random bytes", "all zeros", "a real id with a bad magic"};
  uint64_t rng = c->seed ? c->seed : 7;
  t_fill_random(&ids[0], sizeof ids[0], &rng);
  memset(&ids[1], 0, sizeof ids[1]);
  REQUIRE(c->have_id);
  ids[2] = c->id;
  ids[2].internal[0] ^= 0x5a;
  CHECK(cecollSetDevice(device_for(0)));
  for (int i = 0; i < 3; i++) {
    ncclComm_t comm = NULL;
    double t0 = mp_now();
    ncclResult_t r;
    t_set_case("ncclCommInitRank with %s", what[i]);
    r = ncclCommInitRank(&comm, 2, ids[i], 0);
    EXPECT(r == ncclInvalidArgument, "ncclCommInitRank(%s) -> %d (%s), want ncclInvalidArgument: %s", what[i],
           (int)r, ncclGetErrorString(r), ncclGetLastError(NULL));
    EXPECT(mp_now() - t0 < 5, "ncclCommInitRank(%s) took %.1f s", what[i], mp_now() - t0);
    if (r == ncclSuccess) (void)ncclCommAbort(comm);
  }
  {
    /* An absurd nranks with a real id: refused at once, nothing reserved. */
    const int huge[3] = {INT_MAX, 65537, 1 << 30};
    for (int i = 0; i < 3; i++) {
      ncclComm_t comm = NULL;
      double t0 = mp_now();
      ncclResult_t r;
      t_set_case("ncclCommInitRank with nranks %d", huge[i]);
      r = ncclCommInitRank(&comm, huge[i], c->id, 0);
      EXPECT(r == ncclInvalidArgument, "ncclCommInitRank(nranks %d) -> %d (%s), want ncclInvalidArgument: %s", huge[i],
             (int)r, ncclGetErrorString(r), ncclGetLastError(NULL));
      EXPECT(mp_now() - t0 < 1, "ncclCommInitRank(nranks %d) took %.2f s", huge[i], mp_now() - t0);
      if (r == ncclSuccess) (void)ncclCommAbort(comm);
    }
  }
  return t_report(prog);
}

/* kill: every rank loops on AllGathers (or ring exchanges); the parent
 * kills the victim. */
typedef struct {
  ncclComm_t comm;
  cudaStream_t stream;
  void *send, *recv;
  size_t count;
  int sendrecv, rank, n; /* sendrecv: a group of ncclSend to rank+1 and ncclRecv from rank-1 */
  atomic_int stop;
  atomic_int failed;    /* a call or a synchronize returned an error */
  atomic_int finished;  /* the loop ended */
  atomic_long iters;
  long park_at; /* >0: the victim stops calling after this many loops */
  ncclResult_t call_res, sync_res;
} loop_state;

/* One call of the loop on stream: an AllGather, or the ring exchange. */
static ncclResult_t loop_call(const loop_state* s, size_t count, cudaStream_t stream) {
  ncclResult_t r, e;
  if (!s->sendrecv) return ncclAllGather(s->send, s->recv, count, ncclInt8, s->comm, stream);
  r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  r = ncclSend(s->send, count, ncclInt8, (s->rank + 1) % s->n, s->comm, stream);
  if (r == ncclSuccess) r = ncclRecv(s->recv, count, ncclInt8, (s->rank + s->n - 1) % s->n, s->comm, stream);
  e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

static void* loop_main(void* p) {
  loop_state* s = (loop_state*)p;
  while (!atomic_load(&s->stop)) {
    ncclResult_t r = loop_call(s, s->count, s->stream);
    if (r != ncclSuccess) {
      s->call_res = r;
      atomic_store(&s->failed, 1);
      break;
    }
    r = cecollStreamSynchronize(s->stream);
    if (r != ncclSuccess) {
      s->sync_res = r;
      atomic_store(&s->failed, 1);
      break;
    }
    long it = atomic_fetch_add(&s->iters, 1);
    if (it == 3) mp_tell_parent("LOOPING");
    if (s->park_at > 0 && it + 1 == s->park_at) {
      /* The peers' next collective waits for this rank, which never comes. */
      mp_tell_parent("PARKED");
      for (;;) pause();
    }
  }
  atomic_store(&s->finished, 1);
  return NULL;
}

static int child_kill(const child_cfg* cfg, const char* prog) {
  local_world w;
  loop_state s;
  pthread_t th;
  char line[256];
  ncclResult_t r, ae = ncclSuccess;
  double t_kill = 0, t_detect = 0, t0;
  int rank = cfg->first, detected = 0, joined = 0;
  const char* how = "nothing";
  REQUIRE(cfg->nlocal == 1);
  t_set_case("kill: rank %d of %d: ncclCommInitRank", rank, cfg->n);
  r = local_init(&w, cfg);
  if (r != ncclSuccess)
    t_fatal_at(__FILE__, __LINE__, "ncclCommInitRank -> %d (%s): %s", (int)r, ncclGetErrorString(r),
               ncclGetLastError(NULL));
  {
    /* One checked collective first: the communicator works. */
    mcase c;
    size_t bad;
    memset(&c, 0, sizeof c);
    c.func = ncclFuncAllGather;
    c.dtype = ncclFloat32;
    c.count = 7;
    c.seed = 4242; /* the same on every rank: each computes every input */
    t_set_case("kill: rank %d of %d: a first AllGather", rank, cfg->n);
    bad = run_mcase(&w, &c);
    EXPECT(bad == 0, "%zu bytes wrong", bad);
  }
  memset(&s, 0, sizeof s);
  s.comm = w.comm[0];
  s.stream = w.stream[0];
  s.sendrecv = cfg->sendrecv;
  s.rank = rank;
  s.n = cfg->n;
  /* The ring's 1 MiB is many staged pieces (the parent sets the window). */
  s.count = cfg->sendrecv ? (size_t)1 << 20 : 64 << 10;
  if (rank == cfg->victim && cfg->park) s.park_at = 8; /* the check after KILLED relies on 8 */
  CHECK(ncclMemAlloc(&s.send, s.count));
  CHECK(ncclMemAlloc(&s.recv, s.count * (size_t)(cfg->sendrecv ? 1 : cfg->n)));
  if (cfg->sendrecv) {
    /* One checked ring exchange first: each rank's bytes are its own. */
    unsigned char* host = malloc(s.count);
    size_t bad = 0;
    int from = (rank + cfg->n - 1) % cfg->n;
    REQUIRE(host != NULL);
    t_set_case("kill: rank %d of %d: a first ring exchange", rank, cfg->n);
    for (size_t i = 0; i < s.count; i++) host[i] = (unsigned char)(rank * 131 + i * 7 + (i >> 12));
    CHECK(cecollMemcpy(s.send, host, s.count));
    CHECK(cecollMemset(s.recv, 0xa5, s.count));
    r = loop_call(&s, s.count, s.stream);
    EXPECT(r == ncclSuccess, "the ring exchange -> %d (%s): %s", (int)r, ncclGetErrorString(r),
           ncclGetLastError(s.comm));
    CHECK(cecollStreamSynchronize(s.stream));
    CHECK(cecollMemcpy(host, s.recv, s.count));
    for (size_t i = 0; i < s.count; i++) bad += host[i] != (unsigned char)(from * 131 + i * 7 + (i >> 12));
    EXPECT(bad == 0, "%zu of %zu bytes from rank %d wrong", bad, s.count, from);
    free(host);
  }
  t_set_case("kill: rank %d of %d: looping", rank, cfg->n);
  REQUIRE(pthread_create(&th, NULL, loop_main, &s) == 0);
  if (rank == cfg->victim && cfg->park == 2) {
    /* Abort while parked; stay alive until the survivors are done, so they
     * learn of it from the abort, not from a closed connection. */
    if (mp_hear_parent(line, sizeof line, mp_now() + 60) != 1 || strcmp(line, "ABORT") != 0)
      t_fatal_at(__FILE__, __LINE__, "no ABORT line from the parent");
    t0 = mp_now();
    r = ncclCommAbort(s.comm);
    EXPECT(r == ncclSuccess, "ncclCommAbort -> %d (%s)", (int)r, ncclGetErrorString(r));
    mp_tell_parent("ABORTED %.6f", t0);
    if (mp_hear_parent(line, sizeof line, mp_now() + 60) != 1 || strcmp(line, "EXIT") != 0)
      t_fatal_at(__FILE__, __LINE__, "no EXIT line from the parent");
    /* The loop thread sits parked in pause(): leave without joining it. */
    fflush(stdout);
    return t_report(prog);
  }
  if (rank == cfg->victim) {
    /* The parent kills this process; the watchdog ends it otherwise. */
    for (;;) pause();
  }
  if (cfg->park) {
    /* The victim made 8 calls and parked: before it fails, a 9th
     * collective cannot have completed here. */
    long done;
    if (mp_hear_parent(line, sizeof line, mp_now() + 60) != 1 || strcmp(line, "PRE") != 0)
      t_fatal_at(__FILE__, __LINE__, "no PRE line from the parent");
    done = atomic_load(&s.iters);
    EXPECT(done <= 8, "%ld collectives completed; rank %d made only 8 calls", done, cfg->victim);
    mp_tell_parent("PRE_OK");
  }
  if (mp_hear_parent(line, sizeof line, mp_now() + 60) != 1 || sscanf(line, "KILLED %lf", &t_kill) != 1)
    t_fatal_at(__FILE__, __LINE__, "no KILLED line from the parent");
  t_set_case("kill: rank %d of %d: waiting to see rank %d gone", rank, cfg->n, cfg->victim);
  while (mp_now() < t_kill + 20) {
    CHECK(ncclCommGetAsyncError(s.comm, &ae));
    if (ae != ncclSuccess && ae != ncclInProgress) {
      how = "ncclCommGetAsyncError";
      detected = 1;
      break;
    }
    if (atomic_load(&s.failed)) {
      how = s.call_res != ncclSuccess ? "the collective call failed" : "the stream synchronize failed";
      detected = 1;
      break;
    }
    usleep(10000);
  }
  t_detect = mp_now();
  printf("rank %d: saw rank %d fail (killed or aborted) after %.2f s through %s (async error %d %s; call %d, sync %d; %ld loops)\n",
         rank, cfg->victim, t_detect - t_kill, how, (int)ae, ncclGetErrorString(ae), (int)s.call_res,
         (int)s.sync_res, (long)atomic_load(&s.iters));
  EXPECT(detected, "rank %d's failure not seen within 20 s", cfg->victim);
  EXPECT(t_detect - t_kill < 15, "rank %d's failure seen after %.2f s (CECOLL_TIMEOUT=10; want < 15 s)", cfg->victim,
         t_detect - t_kill);
  if (ae != ncclSuccess && ae != ncclInProgress)
    EXPECT(ae == ncclRemoteError, "ncclCommGetAsyncError gave %d (%s), want ncclRemoteError", (int)ae,
           ncclGetErrorString(ae));
  {
    /* Every later call returns the failure, and ncclGetLastError(comm)
     * says what happened and on which rank. */
    ncclResult_t now = ncclSuccess;
    ncclWindow_t win = NULL;
    cudaStream_t other = NULL;
    const char* text;
    char self[48];
    t_set_case("kill: rank %d of %d: calls after the failure", rank, cfg->n);
    for (double t = mp_now(); mp_now() < t + 10; usleep(10000)) {
      CHECK(ncclCommGetAsyncError(s.comm, &now));
      if (now != ncclSuccess && now != ncclInProgress) break;
    }
    EXPECT(now == ncclRemoteError, "ncclCommGetAsyncError gave %d (%s), want ncclRemoteError", (int)now,
           ncclGetErrorString(now));
    text = ncclGetLastError(s.comm);
    snprintf(self, sizeof self, "rank %d of %d", rank, cfg->n);
    EXPECT(strstr(text, self) != NULL && strstr(text, "failed asynchronously") != NULL,
           "ncclGetLastError(comm) is \"%s\"", text);
    CHECK(cecollStreamCreate(&other));
    r = ncclAllGather(s.send, s.recv, 1, ncclInt8, s.comm, other);
    EXPECT(r == now, "ncclAllGather after the failure -> %d (%s), want %d", (int)r, ncclGetErrorString(r), (int)now);
    if (s.sendrecv) {
      r = loop_call(&s, s.count, other);
      EXPECT(r == now, "ncclSend/ncclRecv after the failure -> %d (%s), want %d", (int)r, ncclGetErrorString(r),
             (int)now);
    }
    r = ncclCommWindowRegister(s.comm, s.recv, s.count, &win, NCCL_WIN_COLL_SYMMETRIC);
    EXPECT(r == now && win == NULL, "ncclCommWindowRegister after the failure -> %d (%s), want %d", (int)r,
           ncclGetErrorString(r), (int)now);
    CHECK(cecollStreamDestroy(other));
    printf("rank %d: after the failure: %s\n", rank, text);
  }
  t_set_case("kill: rank %d of %d: ncclCommAbort", rank, cfg->n);
  atomic_store(&s.stop, 1);
  t0 = mp_now();
  r = ncclCommAbort(s.comm);
  EXPECT(r == ncclSuccess, "ncclCommAbort -> %d (%s): %s", (int)r, ncclGetErrorString(r), ncclGetLastError(NULL));
  EXPECT(mp_now() - t0 < 8, "ncclCommAbort took %.2f s", mp_now() - t0);
  printf("rank %d: ncclCommAbort returned after %.2f s\n", rank, mp_now() - t0);
  /* Abort releases the stream's pending waits: the loop ends. */
  {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    joined = pthread_timedjoin_np(th, NULL, &ts) == 0;
  }
  EXPECT(joined, "the looping thread is still blocked 10 s after ncclCommAbort (stream not released)");
  if (joined) {
    CHECK(cecollStreamDestroy(s.stream));
    CHECK(ncclMemFree(s.send));
    CHECK(ncclMemFree(s.recv));
  }
  fflush(stdout);
  return t_report(prog);
}

/* sendrecv_timeout: rank 0 sends and rank 1 never posts the receive. */
static void* send_main(void* p) {
  loop_state* s = (loop_state*)p;
  ncclResult_t r = ncclSend(s->send, s->count, ncclInt8, 1, s->comm, s->stream);
  if (r != ncclSuccess) {
    s->call_res = r;
    atomic_store(&s->failed, 1);
  } else {
    r = cecollStreamSynchronize(s->stream);
    s->sync_res = r;
    if (r != ncclSuccess) atomic_store(&s->failed, 1);
  }
  atomic_store(&s->finished, 1);
  return NULL;
}

static int child_sr_timeout(const child_cfg* cfg, const char* prog) {
  local_world w;
  loop_state s;
  pthread_t th;
  char line[64], self[48];
  ncclResult_t r, ae = ncclSuccess;
  double t0, t_detect, t_abort;
  int rank = cfg->first, joined = 0;
  const char* text;
  REQUIRE(cfg->nlocal == 1 && cfg->n == 2);
  t_set_case("sendrecv_timeout: rank %d: ncclCommInitRank", rank);
  r = local_init(&w, cfg);
  if (r != ncclSuccess)
    t_fatal_at(__FILE__, __LINE__, "ncclCommInitRank -> %d (%s): %s", (int)r, ncclGetErrorString(r),
               ncclGetLastError(NULL));
  if (rank != 0) {
    /* Never posts the receive; leaves when rank 0 is done. */
    t_set_case("sendrecv_timeout: rank 1: idle");
    if (mp_hear_parent(line, sizeof line, mp_now() + 60) != 1 || strcmp(line, "DONE") != 0)
      t_fatal_at(__FILE__, __LINE__, "no DONE line from the parent");
    CHECK(ncclCommGetAsyncError(w.comm[0], &ae));
    t_set_case("sendrecv_timeout: rank 1: ncclCommAbort");
    t0 = mp_now();
    r = ncclCommAbort(w.comm[0]);
    EXPECT(r == ncclSuccess, "ncclCommAbort -> %d (%s)", (int)r, ncclGetErrorString(r));
    EXPECT(mp_now() - t0 < 8, "ncclCommAbort took %.2f s", mp_now() - t0);
    printf("rank 1: async error %d (%s) when rank 0 was done; ncclCommAbort returned after %.2f s\n", (int)ae,
           ncclGetErrorString(ae), mp_now() - t0);
    CHECK(cecollStreamDestroy(w.stream[0]));
    fflush(stdout);
    return t_report(prog);
  }
  memset(&s, 0, sizeof s);
  s.comm = w.comm[0];
  s.stream = w.stream[0];
  s.count = (size_t)1 << 20; /* many staged pieces: more than one in flight */
  CHECK(ncclMemAlloc(&s.send, s.count));
  CHECK(cecollMemset(s.send, 0x5a, s.count));
  t_set_case("sendrecv_timeout: rank 0: ncclSend with no receiver");
  t0 = mp_now();
  REQUIRE(pthread_create(&th, NULL, send_main, &s) == 0);
  /* The failure, and the stream released: both within 10 s. */
  while (mp_now() < t0 + 20) {
    CHECK(ncclCommGetAsyncError(s.comm, &ae));
    if ((ae != ncclSuccess && ae != ncclInProgress && atomic_load(&s.finished)) || atomic_load(&s.failed)) break;
    usleep(10000);
  }
  t_detect = mp_now();
  printf("rank 0: after %.2f s: async error %d (%s); send %d, sync %d, %s\n", t_detect - t0, (int)ae,
         ncclGetErrorString(ae), (int)s.call_res, (int)s.sync_res,
         atomic_load(&s.finished) ? "stream drained" : "stream still waiting");
  EXPECT((ae != ncclSuccess && ae != ncclInProgress) || atomic_load(&s.failed),
         "no error within %.0f s of a send nobody receives (CECOLL_TIMEOUT=2)", t_detect - t0);
  EXPECT(t_detect - t0 < 10, "the failure seen after %.2f s (CECOLL_TIMEOUT=2; want < 10 s)", t_detect - t0);
  EXPECT(ae == ncclSuccess || ae == ncclInProgress || ae == ncclRemoteError,
         "ncclCommGetAsyncError gave %d (%s), want ncclRemoteError", (int)ae, ncclGetErrorString(ae));
  {
    /* Every later call returns the failure, named in ncclGetLastError. */
    ncclResult_t now = ncclSuccess;
    cudaStream_t other = NULL;
    t_set_case("sendrecv_timeout: rank 0: calls after the failure");
    for (double t = mp_now(); mp_now() < t + 10; usleep(10000)) {
      CHECK(ncclCommGetAsyncError(s.comm, &now));
      if (now != ncclSuccess && now != ncclInProgress) break;
    }
    EXPECT(now == ncclRemoteError, "ncclCommGetAsyncError gave %d (%s), want ncclRemoteError", (int)now,
           ncclGetErrorString(now));
    text = ncclGetLastError(s.comm);
    snprintf(self, sizeof self, "rank 0 of 2");
    EXPECT(strstr(text, self) != NULL && strstr(text, "failed asynchronously") != NULL,
           "ncclGetLastError(comm) is \"%s\"", text);
    CHECK(cecollStreamCreate(&other));
    r = ncclSend(s.send, 1, ncclInt8, 1, s.comm, other);
    EXPECT(r == now, "ncclSend after the failure -> %d (%s), want %d", (int)r, ncclGetErrorString(r), (int)now);
    CHECK(cecollStreamDestroy(other));
    printf("rank 0: after the failure: %s\n", text);
  }
  t_set_case("sendrecv_timeout: rank 0: ncclCommAbort");
  t_abort = mp_now();
  r = ncclCommAbort(s.comm);
  EXPECT(r == ncclSuccess, "ncclCommAbort -> %d (%s): %s", (int)r, ncclGetErrorString(r), ncclGetLastError(NULL));
  EXPECT(mp_now() - t_abort < 8, "ncclCommAbort took %.2f s", mp_now() - t_abort);
  printf("rank 0: ncclCommAbort returned after %.2f s\n", mp_now() - t_abort);
  {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    joined = pthread_timedjoin_np(th, NULL, &ts) == 0;
  }
  EXPECT(joined, "the sending thread is still blocked 10 s after ncclCommAbort (stream not released)");
  if (joined) {
    CHECK(cecollStreamDestroy(s.stream));
    CHECK(ncclMemFree(s.send));
  }
  fflush(stdout);
  return t_report(prog);
}

static int child_main(int argc, char** argv) {
  child_cfg c;
  char tag[64];
  if (argc < 3) usage();
  parse_child(argc, argv, &c);
  snprintf(tag, sizeof tag, "%s[%s rank %d]", argv[0], c.role, c.first);
  t_watchdog(120); /* the parent sets CECOLL_TEST_WATCHDOG */
  if (strcmp(c.role, "data") == 0) return child_data(&c, tag);
  if (strcmp(c.role, "init_error") == 0) return child_init_error(&c, tag, 10);
  if (strcmp(c.role, "garbage") == 0) return child_garbage(&c, tag);
  if (strcmp(c.role, "kill") == 0) return child_kill(&c, tag);
  if (strcmp(c.role, "sr_timeout") == 0) return child_sr_timeout(&c, tag);
  t_fatal_at(__FILE__, __LINE__, "unknown role %s", c.role);
}

/* ---- The parent ------------------------------------------------------------------ */

/* Child arguments are built in one of these. */
typedef struct {
  char buf[16][MP_ID_HEX + 32];
  char* argv[20];
  int n;
} argbuf;

static void arg_add(argbuf* a, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg_add(argbuf* a, const char* fmt, ...) {
  va_list ap;
  REQUIRE(a->n < 16);
  va_start(ap, fmt);
  vsnprintf(a->buf[a->n], sizeof a->buf[a->n], fmt, ap);
  va_end(ap);
  a->argv[a->n] = a->buf[a->n];
  a->argv[++a->n] = NULL;
}

static int child_watchdog_s(void) { return (int)opts.scenario_s; }

/* Environment of every child: its own watchdog, and bootstrap waits short
 * enough that an init that cannot complete fails inside the scenario. */
static char env_watchdog[64], env_boot[64];
static char* base_env[] = {env_watchdog, env_boot, NULL};

static void set_child_env(double boot_s) {
  snprintf(env_watchdog, sizeof env_watchdog, "CECOLL_TEST_WATCHDOG=%d", child_watchdog_s());
  snprintf(env_boot, sizeof env_boot, "CECOLL_BOOTSTRAP_TIMEOUT=%g", boot_s);
}

/* Starts a child in role for ranks first..first+nlocal-1 of n; extra,
 * extra2: more key=value arguments or NULL. */
static int spawn_role2(mp_child* ch, const char* role, int n, int first, int nlocal, const char* idhex,
                       const char* counts, int quick, uint64_t seed, char* const* env, const char* extra,
                       const char* extra2) {
  argbuf a;
  memset(&a, 0, sizeof a);
  arg_add(&a, "-W");
  arg_add(&a, "%s", role);
  arg_add(&a, "n=%d", n);
  arg_add(&a, "first=%d", first);
  arg_add(&a, "local=%d", nlocal);
  arg_add(&a, "id=%s", idhex);
  arg_add(&a, "seed=%llu", (unsigned long long)seed);
  arg_add(&a, "counts=%s", counts);
  arg_add(&a, "quick=%d", quick);
  if (extra) arg_add(&a, "%s", extra);
  if (extra2) arg_add(&a, "%s", extra2);
  fflush(stdout);
  fflush(stderr);
  return mp_spawn(ch, self_path, a.argv, env ? env : base_env);
}

static int spawn_role(mp_child* ch, const char* role, int n, int first, int nlocal, const char* idhex,
                      const char* counts, int quick, uint64_t seed, char* const* env, const char* extra) {
  return spawn_role2(ch, role, n, first, nlocal, idhex, counts, quick, seed, env, extra, NULL);
}

static void new_id(char hex[MP_ID_HEX], ncclUniqueId* out) {
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  mp_id_to_hex(&id, hex);
  if (out) *out = id;
}

/* Expects every child to have exited 0. */
static void expect_children_ok(const char* scen, mp_child* ch, int n) {
  for (int i = 0; i < n; i++) {
    char st[64];
    EXPECT(mp_ok(&ch[i]), "%s: child %d: %s", scen, i, mp_status_string(&ch[i], st, sizeof st));
  }
}

static double deadline_for(double seconds) {
  double d = seconds < opts.scenario_s ? seconds : opts.scenario_s;
  return mp_now() + d;
}

/* data_n<N> and data_2x2: procs processes of nlocal ranks each. */
static void scen_data(const char* name, int procs, int nlocal, const char* counts, int quick, int id_from_rank0) {
  mp_child ch[MAX_PROCS];
  char hex[MP_ID_HEX];
  int n = procs * nlocal, started = 0;
  uint64_t seed = 0xC0FFEEull + (uint64_t)n * 7919u + (uint64_t)nlocal;
  memset(ch, 0, sizeof ch);
  set_child_env(10);
  if (id_from_rank0) {
    char line[MP_ID_HEX + 16];
    if (spawn_role(&ch[0], "data", n, 0, nlocal, "make", counts, quick, seed, NULL, NULL) == 0) started = 1;
    ncclUniqueId id;
    if (started && mp_recv_line(&ch[0], line, sizeof line, mp_now() + 20) == 1 && strncmp(line, "ID ", 3) == 0 &&
        mp_id_from_hex(line + 3, &id) == 0) {
      mp_id_to_hex(&id, hex);
    } else {
      EXPECT(0, "%s: no id from rank 0's process", name);
      mp_kill_all(ch, 1);
      mp_close(ch, 1);
      return;
    }
  } else {
    new_id(hex, NULL);
  }
  for (int p = started; p < procs; p++) {
    if (spawn_role(&ch[p], "data", n, p * nlocal, nlocal, hex, counts, quick, seed, NULL, NULL) != 0) {
      EXPECT(0, "%s: could not start process %d", name, p);
      break;
    }
  }
  mp_wait_all(ch, procs, deadline_for(opts.scenario_s), name);
  expect_children_ok(name, ch, procs);
  mp_close(ch, procs);
}

/* Random bytes at the root's listener must not disturb a real init. */
static void scen_stranger(const char* name) {
  ncclUniqueId id;
  char hex[MP_ID_HEX], addr[80];
  struct sockaddr_storage ss;
  socklen_t len;
  int fds[3] = {-1, -1, -1};
  mp_child ch[3];
  uint64_t rng = 99;
  new_id(hex, &id);
  if (mp_id_addr(&id, &ss, &len) != 0) {
    EXPECT(0, "%s: the id holds no listener address (bytes 16.. are no sockaddr_in/in6)", name);
    return;
  }
  mp_addr_string(&ss, addr, sizeof addr);
  printf("%s: the id's root listener is %s\n", name, addr);
  for (int i = 0; i < 3; i++) {
    unsigned char junk[300];
    fds[i] = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fds[i] >= 0);
    if (connect(fds[i], (struct sockaddr*)&ss, len) != 0) {
      EXPECT(0, "%s: connect to %s: %s", name, addr, strerror(errno));
      continue;
    }
    t_fill_random(junk, sizeof junk, &rng);
    if (i == 1) memset(junk, 0xff, 16); /* a huge length, if read as one */
    if (i < 2) (void)send(fds[i], junk, sizeof junk, MSG_NOSIGNAL);
    if (i == 2) { /* connect and hang up at once */
      close(fds[i]);
      fds[i] = -1;
    }
  }
  set_child_env(10);
  memset(ch, 0, sizeof ch);
  for (int p = 0; p < 3; p++)
    if (spawn_role(&ch[p], "data", 3, p, 1, hex, "7", 1, 4242, NULL, NULL) != 0) EXPECT(0, "%s: spawn", name);
  mp_wait_all(ch, 3, deadline_for(opts.scenario_s), name);
  expect_children_ok(name, ch, 3);
  mp_close(ch, 3);
  for (int i = 0; i < 3; i++)
    if (fds[i] >= 0) close(fds[i]);
}

static void scen_garbage(const char* name) {
  mp_child ch;
  char hex[MP_ID_HEX];
  new_id(hex, NULL);
  set_child_env(10);
  if (spawn_role(&ch, "garbage", 2, 0, 1, hex, "0", 0, 1234, NULL, NULL) != 0) {
    EXPECT(0, "%s: spawn", name);
    return;
  }
  mp_wait_all(&ch, 1, deadline_for(30), name);
  expect_children_ok(name, &ch, 1);
  mp_close(&ch, 1);
}

/* Every process must see ncclCommInitRank fail, within the bound. */
static void scen_init_error(const char* name, int n, const int* ranks, int procs) {
  mp_child ch[MAX_PROCS];
  char hex[MP_ID_HEX];
  new_id(hex, NULL);
  set_child_env(2);
  memset(ch, 0, sizeof ch);
  for (int p = 0; p < procs; p++)
    if (spawn_role(&ch[p], "init_error", n, ranks[p], 1, hex, "0", 0, 1, NULL, NULL) != 0) EXPECT(0, "%s: spawn", name);
  mp_wait_all(ch, procs, deadline_for(30), name);
  expect_children_ok(name, ch, procs);
  mp_close(ch, procs);
}

/* settings_differ: 4 processes, the engine's sub-batch frequency set in
 * rank 0's alone (the threshold alike in all), which made their first
 * AllGather move wrong bytes: every rank's init fails, naming it. */
static void scen_settings(const char* name) {
  enum { N = 4 };
  mp_child ch[N];
  char hex[MP_ID_HEX];
  char thr[] = "CECOLL_INTRA_BATCH_SYNC_THRESHOLD=4096", freq[] = "CECOLL_INTRA_BATCH_SYNC_FREQ=1";
  char* env0[] = {env_watchdog, env_boot, thr, freq, NULL};
  char* env[] = {env_watchdog, env_boot, thr, NULL};
  new_id(hex, NULL);
  set_child_env(5);
  memset(ch, 0, sizeof ch);
  for (int p = 0; p < N; p++)
    if (spawn_role(&ch[p], "init_error", N, p, 1, hex, "0", 0, 1, p == 0 ? env0 : env,
                   "want=ranks disagree on CECOLL_INTRA_BATCH_SYNC_FREQ") != 0)
      EXPECT(0, "%s: spawn", name);
  mp_wait_all(ch, N, deadline_for(30), name);
  expect_children_ok(name, ch, N);
  mp_close(ch, N);
}

/* sendrecv: the ring exchange of 1 MiB in a small staging window (many pieces). */
static void scen_kill(const char* name, int n, int victim, int park, int sendrecv) {
  mp_child ch[MAX_PROCS];
  char hex[MP_ID_HEX], line[128], st[64], vflag[32], pflag[32];
  char env_timeout[] = "CECOLL_TIMEOUT=10", env_staging[] = "CECOLL_STAGING_BYTES=65536";
  char* env[] = {env_watchdog, env_boot, env_timeout, sendrecv ? env_staging : NULL, NULL};
  double t_kill;
  int looping = 0;
  new_id(hex, NULL);
  set_child_env(10);
  memset(ch, 0, sizeof ch);
  snprintf(vflag, sizeof vflag, "victim=%d", victim);
  snprintf(pflag, sizeof pflag, "park=%d", park);
  for (int p = 0; p < n; p++) {
    if (spawn_role2(&ch[p], "kill", n, p, 1, hex, "0", 0, 77 + (uint64_t)p, env, vflag,
                    park ? pflag : sendrecv ? "op=sendrecv" : NULL) != 0)
      EXPECT(0, "%s: spawn", name);
  }
  /* Every rank loops before the victim dies, so it dies mid-collective. */
  for (int p = 0; p < n; p++) {
    int rc = mp_recv_line(&ch[p], line, sizeof line, mp_now() + 30);
    if (rc == 1 && strcmp(line, "LOOPING") == 0) looping++;
  }
  if (looping != n) {
    EXPECT(0, "%s: only %d of %d ranks reached the collective loop", name, looping, n);
    mp_kill_all(ch, n);
    for (int p = 0; p < n; p++) printf("%s: child %d: %s\n", name, p, mp_status_string(&ch[p], st, sizeof st));
    mp_close(ch, n);
    return;
  }
  if (park) {
    /* The victim stopped calling: the survivors' next collective parks
     * their streams on flags it will never write. */
    int rc = mp_recv_line(&ch[victim], line, sizeof line, mp_now() + 30);
    if (rc != 1 || strcmp(line, "PARKED") != 0) {
      EXPECT(0, "%s: the victim did not park", name);
      mp_kill_all(ch, n);
      mp_close(ch, n);
      return;
    }
    usleep(300000);
    /* Each survivor checks its count while the victim is still there. */
    for (int p = 0; p < n; p++) {
      if (p == victim) continue;
      mp_send_line(&ch[p], "PRE");
      if (mp_recv_line(&ch[p], line, sizeof line, mp_now() + 30) != 1 || strcmp(line, "PRE_OK") != 0) {
        EXPECT(0, "%s: survivor %d did not answer PRE", name, p);
        mp_kill_all(ch, n);
        mp_close(ch, n);
        return;
      }
    }
  } else {
    usleep(100000);
  }
  if (park == 2) {
    /* The survivors' clock starts at the victim's ncclCommAbort. */
    mp_send_line(&ch[victim], "ABORT");
    if (mp_recv_line(&ch[victim], line, sizeof line, mp_now() + 30) != 1 ||
        sscanf(line, "ABORTED %lf", &t_kill) != 1) {
      EXPECT(0, "%s: the victim did not abort", name);
      mp_kill_all(ch, n);
      mp_close(ch, n);
      return;
    }
  } else {
    t_kill = mp_now();
    kill(ch[victim].pid, SIGKILL);
  }
  for (int p = 0; p < n; p++)
    if (p != victim) mp_send_line(&ch[p], "KILLED %.6f", t_kill);
  if (park == 2) {
    /* Every survivor first, then the victim may leave. */
    mp_child* surv[MAX_PROCS];
    int ns = 0;
    for (int p = 0; p < n; p++)
      if (p != victim) surv[ns++] = &ch[p];
    for (int i = 0; i < ns; i++) mp_wait_all(surv[i], 1, deadline_for(45), name);
    mp_send_line(&ch[victim], "EXIT");
    mp_wait_all(ch, n, deadline_for(45), name);
    EXPECT(mp_ok(&ch[victim]), "%s: the aborting rank: %s", name, mp_status_string(&ch[victim], st, sizeof st));
  } else {
    mp_wait_all(ch, n, deadline_for(45), name);
    EXPECT(ch[victim].done && WIFSIGNALED(ch[victim].status) && WTERMSIG(ch[victim].status) == SIGKILL,
           "%s: the victim: %s", name, mp_status_string(&ch[victim], st, sizeof st));
  }
  for (int p = 0; p < n; p++)
    if (p != victim)
      EXPECT(mp_ok(&ch[p]), "%s: survivor %d: %s", name, p, mp_status_string(&ch[p], st, sizeof st));
  mp_close(ch, n);
}

/* sendrecv_timeout: rank 0 sends, rank 1 never receives; CECOLL_TIMEOUT=2. */
static void scen_sr_timeout(const char* name) {
  mp_child ch[2];
  char hex[MP_ID_HEX], st[64];
  char env_timeout[] = "CECOLL_TIMEOUT=2", env_staging[] = "CECOLL_STAGING_BYTES=65536";
  char* env[] = {env_watchdog, env_boot, env_timeout, env_staging, NULL};
  new_id(hex, NULL);
  set_child_env(10);
  memset(ch, 0, sizeof ch);
  for (int p = 0; p < 2; p++)
    if (spawn_role(&ch[p], "sr_timeout", 2, p, 1, hex, "0", 0, 91 + (uint64_t)p, env, NULL) != 0)
      EXPECT(0, "%s: spawn", name);
  /* Rank 0 first: it must finish (error seen, abort returned) on its own. */
  mp_wait_all(&ch[0], 1, deadline_for(40), name);
  EXPECT(mp_ok(&ch[0]), "%s: the sender: %s", name, mp_status_string(&ch[0], st, sizeof st));
  mp_send_line(&ch[1], "DONE");
  mp_wait_all(ch, 2, deadline_for(30), name);
  EXPECT(mp_ok(&ch[1]), "%s: the idle receiver: %s", name, mp_status_string(&ch[1], st, sizeof st));
  mp_close(ch, 2);
}

typedef struct {
  char name[32];
  int kind, procs, nlocal, victim, park, sendrecv;
} scenario;

enum { S_DATA, S_ID0, S_STRANGER, S_GARBAGE, S_MISSING, S_DUP, S_SETTINGS, S_KILL, S_SR_TIMEOUT };

static int build_scenarios(scenario* s, int max) {
  int k = 0;
#define ADD(nm, kd, pr, nl, vi)                                                      \
  do {                                                                               \
    REQUIRE(k < max);                                                                \
    snprintf(s[k].name, sizeof s[k].name, "%s", nm);                                 \
    s[k].kind = kd, s[k].procs = pr, s[k].nlocal = nl, s[k].victim = vi, s[k].park = 0; \
    s[k].sendrecv = 0;                                                               \
    k++;                                                                             \
  } while (0)
  for (int i = 0; i < opts.nprocs; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "data_n%d", opts.procs[i]);
    ADD(nm, S_DATA, opts.procs[i], 1, -1);
  }
  if (opts.group_variant) ADD("data_2x2", S_DATA, 2, 2, -1);
  /* The control: the same sweep with every rank in one process (the
   * in-process bootstrap), telling a cross-process fault from a test bug. */
  ADD("control_1x3", S_DATA, 1, 3, -1);
  ADD("id_from_rank0", S_ID0, 2, 1, -1);
  ADD("stranger", S_STRANGER, 3, 1, -1);
  ADD("garbage_id", S_GARBAGE, 1, 1, -1);
  ADD("missing_rank", S_MISSING, 2, 1, -1);
  ADD("duplicate_rank", S_DUP, 2, 1, -1);
  ADD("settings_differ", S_SETTINGS, 4, 1, -1);
  ADD("kill_rank2", S_KILL, 3, 1, 2);
  if (!opts.quick) ADD("kill_rank0", S_KILL, 2, 1, 0);
  ADD("kill_parked", S_KILL, 3, 1, 1);
  s[k - 1].park = 1;
  ADD("abort_parked", S_KILL, 3, 1, 0);
  s[k - 1].park = 2;
  ADD("kill_sendrecv", S_KILL, 3, 1, 1);
  s[k - 1].sendrecv = 1;
  ADD("sendrecv_timeout", S_SR_TIMEOUT, 2, 1, -1);
#undef ADD
  return k;
}

static void run_scenario(const scenario* s) {
  mp_dir before, after;
  char fresh[512];
  double t0 = mp_now();
  int f0 = t_failed, p0 = t_passed, nnew;
  printf("== %s\n", s->name);
  fflush(stdout);
  t_set_case("%s", s->name);
  mp_dir_snapshot("/dev/shm", &before);
  switch (s->kind) {
    case S_DATA: scen_data(s->name, s->procs, s->nlocal, opts.counts, opts.quick, 0); break;
    case S_ID0: scen_data(s->name, s->procs, s->nlocal, "0,7", 1, 1); break;
    case S_STRANGER: scen_stranger(s->name); break;
    case S_GARBAGE: scen_garbage(s->name); break;
    case S_MISSING: {
      int ranks[] = {0, 1};
      scen_init_error(s->name, 3, ranks, 2);
      break;
    }
    case S_DUP: {
      int r00[] = {0, 0}, r011[] = {0, 1, 1};
      scen_init_error(s->name, 2, r00, 2);
      scen_init_error(s->name, 3, r011, 3);
      break;
    }
    case S_SETTINGS: scen_settings(s->name); break;
    case S_KILL: scen_kill(s->name, s->procs, s->victim, s->park, s->sendrecv); break;
    case S_SR_TIMEOUT: scen_sr_timeout(s->name); break;
  }
  mp_dir_snapshot("/dev/shm", &after);
  nnew = mp_dir_new(&before, &after, fresh, sizeof fresh);
  if (nnew > 0) {
    /* Another program's short-lived entry is gone again after a while;
     * a leak stays. */
    usleep(500000);
    mp_dir_free(&after);
    mp_dir_snapshot("/dev/shm", &after);
    nnew = mp_dir_new(&before, &after, fresh, sizeof fresh);
  }
  EXPECT(nnew == 0, "%s: %d new entries in /dev/shm: %s", s->name, nnew, fresh);
  mp_dir_free(&before);
  mp_dir_free(&after);
  printf("== %s: %s (%.1f s, %d checks passed, %d failed)\n", s->name, t_failed == f0 ? "PASS" : "FAIL",
         mp_now() - t0, t_passed - p0, t_failed - f0);
  fflush(stdout);
}

int main(int argc, char** argv) {
  scenario sc[32];
  int ns;
  const char* backend = "?";
  int ndev = 0;
  self_path = argv[0];
  if (argc >= 2 && strcmp(argv[1], "-W") == 0) return child_main(argc, argv);
  /* A child that died must not kill the parent through a pipe write. */
  signal(SIGPIPE, SIG_IGN);
  parse_parent(argc, argv);
  t_watchdog(600);
  CHECK(cecollGetBackend(&backend));
  CHECK(cecollGetDeviceCount(&ndev));
  printf("%s: multi-process on backend %s, %d device(s)%s\n", argv[0], backend, ndev, opts.quick ? ", quick" : "");
  ns = build_scenarios(sc, 32);
  for (int i = 0; i < ns; i++) {
    if (opts.only && !listed(opts.only, sc[i].name)) continue;
    if (t_skipped(sc[i].name)) continue;
    run_scenario(&sc[i]);
  }
  return t_report(argv[0]);
}
