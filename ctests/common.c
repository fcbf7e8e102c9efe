/* common.c: the helpers declared in common.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

int t_passed;
int t_failed;

static char case_name[512] = "(setup)";
static int verbose = -1;

void t_set_case(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(case_name, sizeof case_name, fmt, ap);
  va_end(ap);
  /* CECOLL_TEST_VERBOSE=1 names each case as it starts, which locates a
   * crash inside the library. */
  if (verbose < 0) verbose = getenv("CECOLL_TEST_VERBOSE") && strcmp(getenv("CECOLL_TEST_VERBOSE"), "0") != 0;
  if (verbose) {
    fprintf(stderr, "case: %s\n", case_name);
    fflush(stderr);
  }
}

const char* t_case(void) { return case_name; }

static pthread_mutex_t report_mu = PTHREAD_MUTEX_INITIALIZER;

void t_fail_at(const char* file, int line, const char* fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&report_mu);
  t_failed++;
  fprintf(stderr, "FAIL %s:%d [%s]: ", file, line, case_name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  pthread_mutex_unlock(&report_mu);
}

void t_fatal_at(const char* file, int line, const char* fmt, ...) {
  va_list ap;
  fprintf(stderr, "FATAL %s:%d [%s]: ", file, line, case_name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  printf("%d passed, %d failed (stopped by a fatal error)\n", t_passed, t_failed + 1);
  fflush(stdout);
  fflush(stderr);
  _exit(1);
}

int t_skipped(const char* call) {
  const char* list = getenv("CECOLL_TEST_SKIP");
  size_t n = strcspn(call, "(");
  while (list && *list) {
    size_t m = strcspn(list, ",");
    if (m == n && strncmp(list, call, n) == 0) {
      fprintf(stderr, "SKIPPED %.*s (CECOLL_TEST_SKIP)\n", (int)n, call);
      return 1;
    }
    list += m + (list[m] == ',');
  }
  return 0;
}

int t_report(const char* prog) {
  const char* base = strrchr(prog, '/');
  printf("%s: %d passed, %d failed\n", base ? base + 1 : prog, t_passed, t_failed);
  fflush(stdout);
  return (t_failed == 0 && t_passed > 0) ? 0 : 1;
}

static void on_alarm(int sig) {
  static const char pre[] = "FATAL watchdog: test timed out in case [";
  (void)sig;
  if (write(2, pre, sizeof pre - 1) < 0) _exit(3);
  if (write(2, case_name, strnlen(case_name, sizeof case_name)) < 0) _exit(3);
  if (write(2, "]\n", 2) < 0) _exit(3);
  _exit(3);
}

void t_watchdog(int seconds) {
  const char* v = getenv("CECOLL_TEST_WATCHDOG");
  struct sigaction sa;
  if (v && *v) seconds = atoi(v);
  if (seconds <= 0) return;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  /* The Go runtime requires SA_ONSTACK for handlers that may run on its threads. */
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  alarm((unsigned)seconds);
}

/* ---- Data --------------------------------------------------------------- */

void t_fill_random(void* buf, size_t bytes, uint64_t* state) {
  unsigned char* p = (unsigned char*)buf;
  uint64_t x = *state ? *state : 0x9E3779B97F4A7C15ull;
  size_t i = 0;
  while (i < bytes) {
    uint64_t v;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    v = x * 0x2545F4914F6CDD1Dull;
    if (bytes - i >= 8) {
      memcpy(p + i, &v, 8);
      i += 8;
    } else {
      while (i < bytes) {
        p[i++] = (unsigned char)v;
        v >>= 8;
      }
    }
  }
  *state = x;
}

size_t t_compare(const void* got, const void* want, size_t bytes, const char* what) {
  const unsigned char* g = (const unsigned char*)got;
  const unsigned char* w = (const unsigned char*)want;
  size_t bad = 0, first = 0;
  int shown = 0;
  if (memcmp(got, want, bytes) == 0) return 0;
  for (size_t i = 0; i < bytes; i++) {
    if (g[i] == w[i]) continue;
    if (bad == 0) first = i;
    bad++;
    if (shown < 4) {
      fprintf(stderr, "  %s: byte %zu is 0x%02x, want 0x%02x%s\n", what, i, g[i], w[i],
              g[i] == T_POISON ? " (never written)" : "");
      shown++;
    }
  }
  fprintf(stderr, "  %s: %zu of %zu bytes wrong, first at %zu\n", what, bad, bytes, first);
  return bad;
}

size_t t_type_size(ncclDataType_t t) {
  static const size_t sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  if ((int)t < 0 || (int)t >= ncclNumTypes) return 0;
  return sizes[t];
}

const char* t_type_name(ncclDataType_t t) {
  static const char* names[ncclNumTypes] = {"int8",    "uint8",   "int32",   "uint32",
                                            "int64",   "uint64",  "float16", "float32",
                                            "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  if ((int)t < 0 || (int)t >= ncclNumTypes) return "?";
  return names[t];
}

const char* t_func_name(ncclFunc_t f) {
  static const char* names[ncclNumFuncs] = {
      "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv",
      "Send",      "Recv",   "AlltoAll",  "Scatter",       "Gather"};
  if ((int)f < 0 || (int)f >= ncclNumFuncs) return "?";
  return names[f];
}

/* ---- Options ------------------------------------------------------------ */

static int parse_list(const char* s, size_t* out, int max) {
  int n = 0;
  while (s && *s) {
    char* end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || n == max) return -1;
    out[n++] = (size_t)v;
    s = (*end == ',') ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

static void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [-r RANKS] [-c COUNTS] [-l LARGE_MIB] [-m group|threads|both] [-g REPLAYS] [-q]\n"
          "  env: CECOLL_TEST_RANKS, CECOLL_TEST_COUNTS, CECOLL_TEST_LARGE_MB,\n"
          "       CECOLL_TEST_MODE, CECOLL_TEST_REPLAYS, CECOLL_TEST_QUICK=1\n",
          prog);
  exit(2);
}

static void set_ranks(t_opts* o, const char* s, const char* prog) {
  size_t v[T_MAX_LIST];
  int n = parse_list(s, v, T_MAX_LIST);
  if (n <= 0) usage(prog);
  for (int i = 0; i < n; i++) {
    if (v[i] < 1 || v[i] > T_MAX_RANKS) usage(prog);
    o->ranks[i] = (int)v[i];
  }
  o->nranks = n;
}

static void set_counts(t_opts* o, const char* s, const char* prog) {
  int n = parse_list(s, o->counts, T_MAX_LIST);
  if (n < 0) usage(prog);
  o->ncounts = n;
}

static void set_mode(t_opts* o, const char* s, const char* prog) {
  if (strcmp(s, "group") == 0) {
    o->group = 1, o->threads = 0;
  } else if (strcmp(s, "threads") == 0) {
    o->group = 0, o->threads = 1;
  } else if (strcmp(s, "both") == 0) {
    o->group = 1, o->threads = 1;
  } else {
    usage(prog);
  }
}

void t_parse(t_opts* o, int argc, char** argv) {
  const char* v;
  int opt;
  memset(o, 0, sizeof *o);
  set_ranks(o, "1,2,3,4,8,9", argv[0]);
  set_counts(o, "0,1,7,1001", argv[0]);
  o->large_mib = 64;
  o->group = o->threads = 1;
  o->replays = 3;
  if ((v = getenv("CECOLL_TEST_RANKS")) && *v) set_ranks(o, v, argv[0]);
  if ((v = getenv("CECOLL_TEST_COUNTS")) && *v) set_counts(o, v, argv[0]);
  if ((v = getenv("CECOLL_TEST_LARGE_MB")) && *v) o->large_mib = strtoull(v, NULL, 10);
  if ((v = getenv("CECOLL_TEST_MODE")) && *v) set_mode(o, v, argv[0]);
  if ((v = getenv("CECOLL_TEST_REPLAYS")) && *v) o->replays = atoi(v);
  if ((v = getenv("CECOLL_TEST_QUICK")) && *v && strcmp(v, "0") != 0) o->quick = 1;
  while ((opt = getopt(argc, argv, "r:c:l:m:g:qBX:")) != -1) {
    switch (opt) {
      case 'r': set_ranks(o, optarg, argv[0]); break;
      case 'c': set_counts(o, optarg, argv[0]); break;
      case 'l': o->large_mib = strtoull(optarg, NULL, 10); break;
      case 'm': set_mode(o, optarg, argv[0]); break;
      case 'g': o->replays = atoi(optarg); break;
      case 'q': o->quick = 1; break;
      case 'B': /* read by the tests that spawn themselves */
      case 'X': break;
      default: usage(argv[0]);
    }
  }
}

int t_has_rank(const t_opts* o, int n) {
  for (int i = 0; i < o->nranks; i++)
    if (o->ranks[i] == n) return 1;
  return 0;
}

/* ---- Ranks -------------------------------------------------------------- */

int t_device_for(int r) {
  int count = 0;
  CHECK(cecollGetDeviceCount(&count));
  REQUIRE(count > 0);
  return r % count;
}

void t_world_init_all(t_world* w, int n, const int* devlist) {
  REQUIRE(n >= 1 && n <= T_MAX_RANKS);
  memset(w, 0, sizeof *w);
  w->n = n;
  for (int r = 0; r < n; r++) w->dev[r] = devlist ? devlist[r] : t_device_for(r);
  CHECK(ncclCommInitAll(w->comm, n, w->dev));
  for (int r = 0; r < n; r++) {
    CHECK(cecollSetDevice(w->dev[r]));
    CHECK(cecollStreamCreate(&w->stream[r]));
  }
}

typedef struct {
  t_world* w;
  ncclUniqueId id;
} init_arg;

static void init_rank(int r, void* p) {
  init_arg* a = (init_arg*)p;
  CHECK(ncclCommInitRank(&a->w->comm[r], a->w->n, a->id, r));
  CHECK(cecollStreamCreate(&a->w->stream[r]));
}

void t_world_init_threads(t_world* w, int n) {
  init_arg a;
  REQUIRE(n >= 1 && n <= T_MAX_RANKS);
  memset(w, 0, sizeof *w);
  w->n = n;
  w->threaded = 1;
  for (int r = 0; r < n; r++) w->dev[r] = t_device_for(r);
  a.w = w;
  CHECK(ncclGetUniqueId(&a.id));
  t_run_threads(w, init_rank, &a);
}

static void finalize_rank(int r, void* p) {
  t_world* w = (t_world*)p;
  CHECK(ncclCommFinalize(w->comm[r]));
}

void t_world_destroy(t_world* w) {
  for (int r = 0; r < w->n; r++) {
    CHECK(cecollStreamSynchronize(w->stream[r]));
    CHECK(cecollStreamDestroy(w->stream[r]));
  }
  if (w->threaded) {
    t_run_threads(w, finalize_rank, w);
  } else {
    /* One thread finalizing several ranks groups the calls, as in NCCL. */
    CHECK(ncclGroupStart());
    for (int r = 0; r < w->n; r++) CHECK(ncclCommFinalize(w->comm[r]));
    CHECK(ncclGroupEnd());
  }
  for (int r = 0; r < w->n; r++) CHECK(ncclCommDestroy(w->comm[r]));
  memset(w, 0, sizeof *w);
}

typedef struct {
  const t_world* w;
  t_rank_fn fn;
  void* arg;
  int rank;
} thread_arg;

static void* thread_main(void* p) {
  thread_arg* a = (thread_arg*)p;
  CHECK(cecollSetDevice(a->w->dev[a->rank]));
  a->fn(a->rank, a->arg);
  return NULL;
}

void t_run_threads(const t_world* w, t_rank_fn fn, void* arg) {
  pthread_t th[T_MAX_RANKS];
  thread_arg ta[T_MAX_RANKS];
  for (int r = 0; r < w->n; r++) {
    ta[r].w = w;
    ta[r].fn = fn;
    ta[r].arg = arg;
    ta[r].rank = r;
    REQUIRE(pthread_create(&th[r], NULL, thread_main, &ta[r]) == 0);
  }
  for (int r = 0; r < w->n; r++) REQUIRE(pthread_join(th[r], NULL) == 0);
}

struct t_barrier {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, waiting;
  unsigned long gen;
};

t_barrier* t_barrier_new(int n) {
  t_barrier* b = (t_barrier*)calloc(1, sizeof *b);
  REQUIRE(b != NULL);
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  b->n = n;
  return b;
}

void t_barrier_wait(t_barrier* b) {
  pthread_mutex_lock(&b->mu);
  unsigned long gen = b->gen;
  if (++b->waiting == b->n) {
    b->waiting = 0;
    b->gen++;
    pthread_cond_broadcast(&b->cv);
  } else {
    while (gen == b->gen) pthread_cond_wait(&b->cv, &b->mu);
  }
  pthread_mutex_unlock(&b->mu);
}

void t_barrier_free(t_barrier* b) {
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  free(b);
}

/* ---- Collective cases ----------------------------------------------------- */

enum { BUF_R = 0, BUF_S = 1, BUF_NONE = -1 };

/* A pointer into one of a rank's two allocations. */
typedef struct {
  int buf;
  size_t off;
} t_ref;

typedef struct {
  const t_coll* c;
  t_world* w;
  size_t cb;          /* chunk bytes: count * element size */
  size_t size[2];     /* region bytes of R and S */
  size_t alloc[2];    /* allocation bytes (region, guard, page rounding) */
  void* dev[2][T_MAX_RANKS];
  ncclWindow_t win[2][T_MAX_RANKS];
  unsigned char* host[2][T_MAX_RANKS]; /* initial contents, then the expected ones */
  unsigned char* input[T_MAX_RANKS];   /* snapshot of each rank's input region */
  unsigned char* scratch;              /* read-back */
  t_ref send[T_MAX_RANKS], recv[T_MAX_RANKS];
  size_t in_bytes[T_MAX_RANKS];
  cecollGraph_t graph[T_MAX_RANKS];
  int capturing;
} coll_state;

static int is_inplace(const t_coll* c, int r) { return (int)((c->inplace_ranks >> r) & 1u); }

/* Buffer shapes and pointers of each collective; see docs/protocol.md#buffers-and-blocks. */
static void coll_layout(coll_state* s) {
  const t_coll* c = s->c;
  int n = s->w->n;
  size_t cb = s->cb;
  switch (c->func) {
    case ncclFuncAllGather:
      s->size[BUF_R] = n * cb, s->size[BUF_S] = cb;
      break;
    case ncclFuncAlltoAll:
      s->size[BUF_R] = n * cb, s->size[BUF_S] = n * cb;
      break;
    case ncclFuncScatter:
      s->size[BUF_R] = cb, s->size[BUF_S] = n * cb;
      break;
    case ncclFuncGather:
      s->size[BUF_R] = n * cb, s->size[BUF_S] = cb;
      break;
    default:
      t_fatal_at(__FILE__, __LINE__, "t_coll_run: %s is not a CE collective", t_func_name(c->func));
  }
  for (int b = 0; b < 2; b++) {
    /* At least 64 guard bytes after the region, the whole rounded to the
     * window alignment so registered and plain buffers look alike. */
    size_t a = s->size[b] + 64;
    s->alloc[b] = (a + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
  }
  for (int r = 0; r < n; r++) {
    int ip = is_inplace(c, r);
    t_ref none = {BUF_NONE, 0};
    t_ref send = {BUF_S, 0}, recv = {BUF_R, 0};
    switch (c->func) {
      case ncclFuncAllGather:
        if (ip) send.buf = BUF_R, send.off = (size_t)r * cb;
        s->in_bytes[r] = cb;
        break;
      case ncclFuncAlltoAll:
        if (ip) send.buf = BUF_R;
        s->in_bytes[r] = n * cb;
        break;
      case ncclFuncScatter:
        if (r == c->root) {
          if (ip) recv.buf = BUF_S, recv.off = (size_t)c->root * cb;
          s->in_bytes[r] = n * cb;
        } else {
          if (c->null_unused) send = none;
          s->in_bytes[r] = 0;
        }
        break;
      case ncclFuncGather:
        if (r == c->root) {
          if (ip) send.buf = BUF_R, send.off = (size_t)c->root * cb;
        } else if (c->null_unused) {
          recv = none;
        }
        s->in_bytes[r] = cb;
        break;
      default:
        break;
    }
    s->send[r] = send;
    s->recv[r] = recv;
  }
  /* Windows are symmetric (NCCL's contract): every rank passes its buffer
   * at the same offset of the same window, and cecoll relies on it to find
   * peers' buffers without asking them. The rooted in-place forms use the
   * layout NCCL's own CE code and nccl-tests use
   * (docs/protocol.md#the-in-place-rooted-layout): one
   * buffer per rank; Scatter passes send = buf, recv = buf + rank*count on
   * every rank, Gather recv = buf, send = buf + rank*count. Unregistered
   * buffers, and any buffers when one thread issues every rank's call in one
   * group (all addresses are known at ncclGroupEnd), may be laid out freely,
   * and are. */
  if (c->registered && s->w->threaded && (c->func == ncclFuncScatter || c->func == ncclFuncGather) && is_inplace(c, c->root)) {
    for (int r = 0; r < n; r++) {
      t_ref buf = {c->func == ncclFuncScatter ? BUF_S : BUF_R, 0};
      t_ref mine = {buf.buf, (size_t)r * cb};
      if (c->func == ncclFuncScatter)
        s->send[r] = buf, s->recv[r] = mine;
      else
        s->recv[r] = buf, s->send[r] = mine;
    }
  }
}

static void* dev_ptr(coll_state* s, t_ref ref, int r) {
  if (ref.buf == BUF_NONE) return NULL;
  return (unsigned char*)s->dev[ref.buf][r] + ref.off;
}

static unsigned char* host_ptr(coll_state* s, t_ref ref, int r) {
  return s->host[ref.buf][r] + ref.off;
}

typedef struct {
  coll_state* s;
  int buf;
} reg_arg;

static void register_rank(int r, void* p) {
  reg_arg* a = (reg_arg*)p;
  CHECK(ncclCommWindowRegister(a->s->w->comm[r], a->s->dev[a->buf][r], a->s->alloc[a->buf],
                               &a->s->win[a->buf][r], NCCL_WIN_COLL_SYMMETRIC));
}

static void coll_alloc(coll_state* s) {
  t_world* w = s->w;
  size_t maxa = s->alloc[0] > s->alloc[1] ? s->alloc[0] : s->alloc[1];
  for (int r = 0; r < w->n; r++) {
    CHECK(cecollSetDevice(w->dev[r]));
    for (int b = 0; b < 2; b++) {
      CHECK(ncclMemAlloc(&s->dev[b][r], s->alloc[b]));
      s->host[b][r] = (unsigned char*)malloc(s->alloc[b]);
      REQUIRE(s->host[b][r] != NULL);
    }
    s->input[r] = (unsigned char*)malloc(s->in_bytes[r] ? s->in_bytes[r] : 1);
    REQUIRE(s->input[r] != NULL);
  }
  s->scratch = (unsigned char*)malloc(maxa);
  REQUIRE(s->scratch != NULL);
  if (!s->c->registered) return;
  /* Window registration is collective: grouped on one thread, or one
   * thread per rank. Every rank registers both buffers, used or not, so
   * registration stays symmetric. */
  for (int b = 0; b < 2; b++) {
    reg_arg a = {s, b};
    if (w->threaded) {
      t_run_threads(w, register_rank, &a);
    } else {
      CHECK(ncclGroupStart());
      for (int r = 0; r < w->n; r++) register_rank(r, &a);
      CHECK(ncclGroupEnd());
    }
  }
}

static void coll_free(coll_state* s) {
  t_world* w = s->w;
  for (int r = 0; r < w->n; r++) {
    for (int b = 0; b < 2; b++) {
      if (s->win[b][r]) CHECK(ncclCommWindowDeregister(w->comm[r], s->win[b][r]));
      CHECK(cecollSetDevice(w->dev[r]));
      CHECK(ncclMemFree(s->dev[b][r]));
      free(s->host[b][r]);
    }
    free(s->input[r]);
  }
  free(s->scratch);
}

/* New random inputs, poison everywhere else; uploads, then computes the
 * expected contents into the host mirrors. */
static void coll_prepare(coll_state* s, uint64_t* rng) {
  const t_coll* c = s->c;
  int n = s->w->n;
  size_t cb = s->cb;
  for (int r = 0; r < n; r++) {
    for (int b = 0; b < 2; b++) memset(s->host[b][r], T_POISON, s->alloc[b]);
    if (s->in_bytes[r] && s->send[r].buf != BUF_NONE) t_fill_random(host_ptr(s, s->send[r], r), s->in_bytes[r], rng);
  }
  for (int r = 0; r < n; r++) {
    for (int b = 0; b < 2; b++) CHECK(cecollMemcpy(s->dev[b][r], s->host[b][r], s->alloc[b]));
    if (s->in_bytes[r] && s->send[r].buf != BUF_NONE) memcpy(s->input[r], host_ptr(s, s->send[r], r), s->in_bytes[r]);
  }
  for (int r = 0; r < n; r++) {
    switch (c->func) {
      case ncclFuncAllGather:
        for (int i = 0; i < n; i++) memcpy(host_ptr(s, s->recv[r], r) + i * cb, s->input[i], cb);
        break;
      case ncclFuncAlltoAll:
        for (int i = 0; i < n; i++) memcpy(host_ptr(s, s->recv[r], r) + i * cb, s->input[i] + r * cb, cb);
        break;
      case ncclFuncScatter:
        memcpy(host_ptr(s, s->recv[r], r), s->input[c->root] + r * cb, cb);
        break;
      case ncclFuncGather:
        if (r == c->root)
          for (int i = 0; i < n; i++) memcpy(host_ptr(s, s->recv[r], r) + i * cb, s->input[i], cb);
        break;
      default:
        break;
    }
  }
}

static ncclResult_t coll_call(coll_state* s, int r) {
  const t_coll* c = s->c;
  t_world* w = s->w;
  const void* send = dev_ptr(s, s->send[r], r);
  void* recv = dev_ptr(s, s->recv[r], r);
  if (c->use_launch) {
    struct ncclCeCollArgs a;
    memset(&a, 0, sizeof a);
    a.func = c->func;
    a.rootRank = c->root;
    a.datatype = c->dtype;
    a.nElts = c->count;
    a.eltSize = t_type_size(c->dtype);
    a.sendBuff = send;
    a.recvBuff = recv;
    /* use_launch 1 names the windows; 2 leaves them NULL for lookup. */
    if (c->use_launch == 1 && c->registered) {
      if (s->send[r].buf != BUF_NONE) a.sendWin = s->win[s->send[r].buf][r];
      if (s->recv[r].buf != BUF_NONE) a.recvWin = s->win[s->recv[r].buf][r];
    }
    return ncclLaunchCeColl(w->comm[r], &a, w->stream[r]);
  }
  switch (c->func) {
    case ncclFuncAllGather: return ncclAllGather(send, recv, c->count, c->dtype, w->comm[r], w->stream[r]);
    case ncclFuncAlltoAll: return ncclAlltoAll(send, recv, c->count, c->dtype, w->comm[r], w->stream[r]);
    case ncclFuncScatter: return ncclScatter(send, recv, c->count, c->dtype, c->root, w->comm[r], w->stream[r]);
    case ncclFuncGather: return ncclGather(send, recv, c->count, c->dtype, c->root, w->comm[r], w->stream[r]);
    default: return ncclInternalError;
  }
}

static void call_or_die(coll_state* s, int r) {
  ncclResult_t res = coll_call(s, r);
  /* Peers of a rank whose call failed would wait for it forever: stop. */
  if (res != ncclSuccess)
    t_fatal_at(__FILE__, __LINE__, "rank %d: %s -> %d (%s): %s", r, t_func_name(s->c->func), (int)res,
               ncclGetErrorString(res), ncclGetLastError(s->w->comm[r]));
}

static void rank_eager(int r, void* p) {
  coll_state* s = (coll_state*)p;
  call_or_die(s, r);
  CHECK(cecollStreamSynchronize(s->w->stream[r]));
}

static void rank_capture(int r, void* p) {
  coll_state* s = (coll_state*)p;
  CHECK(cecollStreamBeginCapture(s->w->stream[r]));
  call_or_die(s, r);
  CHECK(cecollStreamEndCapture(s->w->stream[r], &s->graph[r]));
}

static void coll_issue_group(coll_state* s) {
  t_world* w = s->w;
  CHECK(ncclGroupStart());
  for (int r = 0; r < w->n; r++) {
    CHECK(cecollSetDevice(w->dev[r]));
    call_or_die(s, r);
  }
  CHECK(ncclGroupEnd());
}

static void coll_sync_all(coll_state* s) {
  for (int r = 0; r < s->w->n; r++) CHECK(cecollStreamSynchronize(s->w->stream[r]));
}

/* Reads every allocation back and compares it with the mirror. */
static int coll_verify(coll_state* s, const char* when) {
  size_t bad = 0;
  char what[160];
  for (int r = 0; r < s->w->n; r++) {
    for (int b = 0; b < 2; b++) {
      CHECK(cecollMemcpy(s->scratch, s->dev[b][r], s->alloc[b]));
      snprintf(what, sizeof what, "%s rank %d %s buffer", when, r, b == BUF_R ? "recv-side" : "send-side");
      bad += t_compare(s->scratch, s->host[b][r], s->alloc[b], what);
    }
  }
  EXPECT(bad == 0, "%s: %zu bytes wrong", when, bad);
  return bad != 0;
}

int t_coll_run(t_world* w, const t_coll* c) {
  coll_state s;
  uint64_t rng = c->seed ? c->seed : 1;
  int failed = 0;
  char when[64];
  memset(&s, 0, sizeof s);
  s.c = c;
  s.w = w;
  s.cb = c->count * t_type_size(c->dtype);
  REQUIRE(t_type_size(c->dtype) != 0);
  coll_layout(&s);
  coll_alloc(&s);
  if (c->replays > 0) {
    /* Capture once on every rank's stream, then replay with new inputs. */
    if (w->threaded) {
      t_run_threads(w, rank_capture, &s);
    } else {
      for (int r = 0; r < w->n; r++) {
        CHECK(cecollSetDevice(w->dev[r]));
        CHECK(cecollStreamBeginCapture(w->stream[r]));
      }
      coll_issue_group(&s);
      for (int r = 0; r < w->n; r++) {
        CHECK(cecollSetDevice(w->dev[r]));
        CHECK(cecollStreamEndCapture(w->stream[r], &s.graph[r]));
      }
    }
    for (int it = 0; it < c->replays; it++) {
      coll_prepare(&s, &rng);
      for (int r = 0; r < w->n; r++) {
        CHECK(cecollSetDevice(w->dev[r]));
        CHECK(cecollGraphLaunch(s.graph[r], w->stream[r]));
      }
      coll_sync_all(&s);
      snprintf(when, sizeof when, "replay %d", it);
      failed += coll_verify(&s, when);
    }
    for (int r = 0; r < w->n; r++) CHECK(cecollGraphDestroy(s.graph[r]));
  } else {
    int iters = c->iters > 0 ? c->iters : 1;
    for (int it = 0; it < iters; it++) {
      coll_prepare(&s, &rng);
      if (w->threaded) {
        t_run_threads(w, rank_eager, &s);
      } else {
        coll_issue_group(&s);
        coll_sync_all(&s);
      }
      snprintf(when, sizeof when, "call %d", it);
      failed += coll_verify(&s, when);
    }
  }
  coll_free(&s);
  return failed;
}

int t_spawn_vectors(const char* self, char* const extra_env[], char* const args[], char*** argvp, char*** envp) {
  size_t ne = 0, nx = 0, na = 0;
  char** env;
  char** argv;
  while (environ[ne]) ne++;
  while (extra_env && extra_env[nx]) nx++;
  while (args && args[na]) na++;
  env = (char**)calloc(ne + nx + 1, sizeof *env);
  argv = (char**)calloc(na + 2, sizeof *argv);
  if (!env || !argv) {
    free(env);
    free(argv);
    return -1;
  }
  /* Extra entries replace inherited ones of the same name. */
  for (size_t i = 0; i < nx; i++) env[i] = extra_env[i];
  for (size_t i = 0, k = nx; i < ne; i++) {
    int dup = 0;
    for (size_t j = 0; j < nx && !dup; j++) {
      const char* eq = strchr(extra_env[j], '=');
      size_t kl = eq ? (size_t)(eq - extra_env[j]) + 1 : strlen(extra_env[j]);
      dup = strncmp(environ[i], extra_env[j], kl) == 0;
    }
    if (!dup) env[k++] = environ[i];
  }
  argv[0] = (char*)self;
  for (size_t i = 0; i < na; i++) argv[1 + i] = args[i];
  *argvp = argv;
  *envp = env;
  return 0;
}

int t_spawn_self(const char* self, char* const extra_env[], char* const args[]) {
  char** env;
  char** argv;
  pid_t pid;
  int status, rc;
  REQUIRE(t_spawn_vectors(self, extra_env, args, &argv, &env) == 0);
  rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env);
  free(env);
  free(argv);
  if (rc != 0) {
    fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
    return -1;
  }
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  fprintf(stderr, "child %d died from signal %d\n", (int)pid, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return -1;
}

/* ---- The standard sweep ---------------------------------------------------- */

static ncclFunc_t sweep_func;

static int is_rooted(ncclFunc_t f) { return f == ncclFuncScatter || f == ncclFuncGather; }

static uint64_t all_ranks(int n) { return n >= 64 ? ~0ull : ((1ull << n) - 1); }

static const char* mode_name(const t_world* w) { return w->threaded ? "threads" : "group"; }

static void run_case(t_world* w, t_coll* c, uint64_t* seed, const char* what) {
  c->func = sweep_func;
  c->seed = ++*seed;
  t_set_case("%s %s n=%d %s: %s count=%zu root=%d inplace=0x%llx reg=%d null=%d launch=%d iters=%d replays=%d",
             t_func_name(c->func), mode_name(w), w->n, what, t_type_name(c->dtype), c->count, c->root,
             (unsigned long long)c->inplace_ranks, c->registered, c->null_unused, c->use_launch, c->iters,
             c->replays);
  t_coll_run(w, c);
}

static t_coll base_case(void) {
  t_coll c;
  memset(&c, 0, sizeof c);
  c.dtype = ncclFloat32;
  c.count = 7;
  c.iters = 1;
  return c;
}

static void sweep_world(t_world* w, const t_opts* o, uint64_t* seed, t_extra_fn extra) {
  int n = w->n;
  int rooted = is_rooted(sweep_func);
  t_coll c;

  /* Every datatype, odd count, out of place; the root moves with it. */
  for (int t = 0; t < ncclNumTypes; t++) {
    c = base_case();
    c.dtype = (ncclDataType_t)t;
    c.root = rooted ? t % n : 0;
    run_case(w, &c, seed, "datatype");
  }

  /* Every count, in and out of place, registered and not. */
  for (int i = 0; i < o->ncounts; i++) {
    for (int ip = 0; ip < 2; ip++) {
      for (int reg = 0; reg < 2; reg++) {
        c = base_case();
        c.count = o->counts[i];
        c.root = rooted ? n - 1 : 0;
        c.inplace_ranks = ip ? all_ranks(n) : 0;
        c.registered = reg;
        run_case(w, &c, seed, "count");
      }
    }
  }

  if (rooted) {
    /* Every root, in place (B12) and out of place, then with the buffers
     * the non-roots do not use passed as NULL (B11). */
    for (int root = 0; root < n; root++) {
      for (int v = 0; v < 3; v++) {
        if (o->quick && v == 1 && root % 2) continue;
        c = base_case();
        c.dtype = ncclInt8;
        c.count = 5;
        c.root = root;
        c.inplace_ranks = v == 0 ? all_ranks(n) : 0;
        c.null_unused = v == 2;
        c.registered = v == 2 && root % 2;
        run_case(w, &c, seed, "root");
      }
    }
  } else if (n > 1) {
    /* Ranks mixing in-place and out-of-place calls of one collective. An
     * in-place AlltoAll runs another plan than an out-of-place one, so on
     * symmetric windows, where no rank sees another's form, every rank must
     * call it in place or none (the contract CECOLL_CHECK verifies); in a
     * group or staged, any mix works. */
    for (int reg = 0; reg < 2; reg++) {
      if (reg && w->threaded && sweep_func == ncclFuncAlltoAll) continue;
      c = base_case();
      c.count = 33;
      c.inplace_ranks = 0x5555555555555555ull & all_ranks(n);
      c.registered = reg;
      run_case(w, &c, seed, "mixed in-place");
    }
  }

  /* ncclLaunchCeColl: windows named, windows looked up, no windows. The
   * root of AllGather and AlltoAll is ignored, so pass a bad one. */
  for (int v = 0; v < 3; v++) {
    c = base_case();
    c.count = 9;
    c.use_launch = v == 1 ? 2 : 1;
    c.registered = v < 2;
    c.root = rooted ? n / 2 : -7;
    c.inplace_ranks = v == 2 ? 1 : 0;
    run_case(w, &c, seed, "ncclLaunchCeColl");
  }

  /* Back-to-back calls on the same buffers, new inputs each time. */
  c = base_case();
  c.count = 100;
  c.iters = o->quick ? 2 : 3;
  c.root = rooted ? n / 2 : 0;
  run_case(w, &c, seed, "repeated");

  /* Graph capture, replayed with new inputs. */
  if (o->replays > 0) {
    for (int v = 0; v < (o->quick ? 1 : 3); v++) {
      c = base_case();
      c.count = 13;
      c.replays = o->replays;
      c.registered = v == 1;
      c.root = rooted ? (n - 1) / 2 : 0;
      c.inplace_ranks = v == 2 ? (rooted ? all_ranks(n) : 0x5555555555555555ull & all_ranks(n)) : 0;
      run_case(w, &c, seed, "graph");
    }
  }

  if (extra) extra(w, o, seed);
}

static int has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], flag) == 0) return 1;
  return 0;
}

/* Run in the child with the intra-batch sync forced on: ranks differ in
 * whether they copy locally, so their copy counts differ (B9). */
static void b9_cases(const t_opts* o, uint64_t* seed) {
  static const int ranks[] = {3, 9};
  int nr = o->quick ? 1 : 2;
  for (int m = 0; m < 2; m++) {
    if ((m == 0 && !o->group) || (m == 1 && !o->threads)) continue;
    for (int i = 0; i < nr; i++) {
      t_world w;
      int n = ranks[i];
      if (m == 0)
        t_world_init_all(&w, n, NULL);
      else
        t_world_init_threads(&w, n);
      for (int v = 0; v < 3; v++) {
        t_coll c = base_case();
        c.count = 1000;
        c.dtype = ncclInt32;
        c.root = is_rooted(sweep_func) ? 1 : 0;
        c.inplace_ranks = is_rooted(sweep_func) ? all_ranks(n) : 0x5555555555555555ull & all_ranks(n);
        c.registered = v == 1;
        if (c.registered && m == 1 && sweep_func == ncclFuncAlltoAll) c.inplace_ranks = all_ranks(n); /* see "mixed in-place" */
        c.replays = v == 2 ? 3 : 0;
        run_case(&w, &c, seed, "B9 intra-batch sync, mixed in-place");
      }
      t_world_destroy(&w);
    }
  }
}

int t_coll_main(ncclFunc_t func, int argc, char** argv, t_extra_fn extra) {
  t_opts o;
  uint64_t seed = 0x5eed0000ull + (uint64_t)func * 1000003ull;
  const char* backend = "?";
  int ndev = 0;
  t_parse(&o, argc, argv);
  t_watchdog(600);
  sweep_func = func;
  CHECK(cecollGetBackend(&backend));
  CHECK(cecollGetDeviceCount(&ndev));
  printf("%s: %s on backend %s, %d device(s)%s\n", argv[0], t_func_name(func), backend, ndev,
         o.quick ? ", quick" : "");
  fflush(stdout);

  if (has_flag(argc, argv, "-B")) {
    b9_cases(&o, &seed);
    return t_report(argv[0]);
  }

  for (int m = 0; m < 2; m++) {
    if ((m == 0 && !o.group) || (m == 1 && !o.threads)) continue;
    for (int i = 0; i < o.nranks; i++) {
      t_world w;
      t_set_case("%s: create %d ranks (%s)", t_func_name(func), o.ranks[i], m ? "threads" : "group");
      if (m == 0)
        t_world_init_all(&w, o.ranks[i], NULL);
      else
        t_world_init_threads(&w, o.ranks[i]);
      sweep_world(&w, &o, &seed, extra);
      t_world_destroy(&w);
    }
  }

  /* A devlist naming one device for several ranks. */
  if (o.group) {
    t_world w;
    int devlist[3];
    t_coll c = base_case();
    devlist[0] = devlist[1] = t_device_for(1);
    devlist[2] = t_device_for(0);
    t_world_init_all(&w, 3, devlist);
    c.count = 64;
    c.root = 1;
    run_case(&w, &c, &seed, "devlist repeating a device");
    t_world_destroy(&w);
  }

  /* The large case: >= large_mib MiB in the biggest buffer of each rank. */
  if (o.large_mib > 0) {
    int n = 2;
    for (int m = 0; m < 2; m++) {
      t_world w;
      t_coll c = base_case();
      if ((m == 0 && !o.group) || (m == 1 && !o.threads)) continue;
      if (m == 0)
        t_world_init_all(&w, n, NULL);
      else
        t_world_init_threads(&w, n);
      c.count = o.large_mib * (1u << 20) / (size_t)n / sizeof(float);
      c.root = 1;
      c.registered = m == 0; /* zero-copy in group mode, staged across threads */
      run_case(&w, &c, &seed, "large");
      t_world_destroy(&w);
    }
  }

  /* B9: the library reads the thresholds at load, so run the program again. */
  if (!getenv("CECOLL_TEST_NO_SPAWN")) {
    char* env[] = {"CECOLL_INTRA_BATCH_SYNC_THRESHOLD=1", "CECOLL_INTRA_BATCH_SYNC_FREQ=2", NULL};
    char* args[] = {"-B", NULL};
    char* qargs[] = {"-B", "-q", NULL};
    int rc;
    t_set_case("%s: B9 child process", t_func_name(func));
    fflush(stdout);
    rc = t_spawn_self(argv[0], env, o.quick ? qargs : args);
    EXPECT(rc == 0, "B9 child (CECOLL_INTRA_BATCH_SYNC_THRESHOLD=1) exited with %d", rc);
  }
  return t_report(argv[0]);
}
