/*
 * fakenccl.c: a fake "real NCCL" for cecoll's forward-mode tests, built as
 * libnccl.so.2 at test time (ctests/run.sh). It stands where NVIDIA's
 * library stands: named by CECOLL_NCCL_LIB, linked by a program that
 * preloads cecoll, or found on the loader's path by cecoll installed in
 * its place.
 *
 * It implements, on the host (cecoll's host device: device memory is host
 * memory), the calls cecoll forwards: communicators (ncclCommInitRank*,
 * ncclCommInitAll, Split, Shrink, Finalize, Destroy, Abort, the queries),
 * AllReduce, Reduce, Broadcast, ReduceScatter, AllGather, AlltoAll,
 * Gather, Scatter, Send/Recv, groups, registrations and windows, the
 * device API's ncclDevCommCreate/Destroy and ncclTeamWorld, between
 * the ranks of one process and of several. The ranks of a communicator
 * meet in a POSIX shared-memory segment named by the unique id; a
 * collective syncs its stream (cecollStreamSynchronize, looked up at run
 * time), then runs on the host before it returns. Like NCCL it refuses two
 * ranks on one device ("Duplicate GPU"): a process's device is
 * FAKE_NCCL_DEV, or ncclCommInitAll's devlist.
 *
 * Like NCCL's, its ncclCommInitAll calls its own exported ncclGetUniqueId,
 * ncclGroupStart, ncclCommInitRank and ncclGroupEnd, through the PLT: with
 * cecoll preloaded those calls reach cecoll first, which must hand them
 * straight back (they are logged with via=InitAll).
 *
 * Its own environment: FAKE_NCCL_LOG, a file every call appends a line to
 * ("<pid> <call> key=value ..."); FAKE_NCCL_DEV; FAKE_NCCL_FAIL=<call>
 * (that call fails with ncclInternalError) or <call>:async (it succeeds,
 * then the communicator's async error is ncclRemoteError).
 *
 * NCCL's own: with NCCL_DEBUG=INFO its unique ids and inits write "NCCL
 * INFO" lines as NCCL's do, to NCCL_DEBUG_FILE (%h, %p) when set, opened
 * as NCCL opens it: fopen("w") at the first line, which empties the file,
 * and writes at its own offset (cecoll shares that file: test_ncclenv).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "devapi.h"

#define FAKE_VERSION 23100 /* NCCL 2.31.0: not cecoll's 2.28 */
#define MAXR 8
#define SLOT (256 << 10)
#define COMM_MAGIC 0x6b6166656e63636cULL /* "lccnefak" */
#define ID_MAGIC "FAKENCCL"
#define WAIT_S 60

struct shm {
  _Atomic int joined, mapped;
  int n, dev[MAXR];
  _Atomic uint64_t arrive[MAXR], done[MAXR];
  size_t bytes[MAXR];
  int color[MAXR], key[MAXR];
  char data[MAXR][SLOT];
  _Atomic int full[MAXR][MAXR]; /* Send/Recv mailbox from -> to */
  size_t mbytes[MAXR][MAXR];
  char mbox[MAXR][MAXR][SLOT / 4];
};

struct ncclComm {
  uint64_t magic;
  int rank, n, dev, state; /* state: 0 ready, 1 joining, 2 failed, 3 finalized */
  char token[64];
  struct shm* shm;
  uint64_t seq, splits;
  ncclResult_t async;
};

struct ncclWindow_vidmem {
  uint64_t magic;
  void* ptr;
  size_t size;
};

static char last_err[512];
static __thread int in_initall, cur_dev = -1;

/* ---- log and errors ---------------------------------------------------- */

static void flog(const char* fmt, ...) {
  const char* path = getenv("FAKE_NCCL_LOG");
  char line[1024];
  va_list ap;
  if (path == NULL) return;
  int n = snprintf(line, sizeof line, "%d ", (int)getpid());
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = sizeof line - 2;
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    if (write(fd, line, n) < 0) {
    }
    close(fd);
  }
}

/* An NCCL INFO line, as NCCL's debug.cc writes it. */
static void ninfo(const char* fmt, ...) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static FILE* out;
  const char* lvl = getenv("NCCL_DEBUG");
  char host[256] = "", name[PATH_MAX] = "";
  va_list ap;
  if (lvl == NULL || (strcasecmp(lvl, "INFO") != 0 && strcasecmp(lvl, "TRACE") != 0)) return;
  gethostname(host, sizeof host - 1);
  host[strcspn(host, ".")] = '\0';
  pthread_mutex_lock(&mu);
  if (out == NULL) {
    const char* f = getenv("NCCL_DEBUG_FILE");
    size_t n = 0;
    for (; f != NULL && *f != '\0' && n < sizeof name - 32; f++) {
      if (f[0] == '%' && f[1] == 'h') n += snprintf(name + n, sizeof name - n, "%.200s", host), f++;
      else if (f[0] == '%' && f[1] == 'p') n += snprintf(name + n, sizeof name - n, "%d", (int)getpid()), f++;
      else name[n++] = *f;
    }
    name[n] = '\0';
    out = n > 0 ? fopen(name, "w") : NULL; /* NCCL's mode: truncate, no O_APPEND */
    if (out != NULL) setlinebuf(out);
    else out = stdout;
  }
  fprintf(out, "%s:%d:%d [0] NCCL INFO ", host, (int)getpid(), (int)gettid());
  va_start(ap, fmt);
  vfprintf(out, fmt, ap);
  va_end(ap);
  fputc('\n', out);
  pthread_mutex_unlock(&mu);
}

static ncclResult_t fail(ncclResult_t r, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_err, sizeof last_err, fmt, ap);
  va_end(ap);
  flog("error %s", last_err);
  return r;
}

/* FAKE_NCCL_FAIL names call: 1 fail now, 2 fail asynchronously. */
static int injected(const char* call) {
  const char* f = getenv("FAKE_NCCL_FAIL");
  size_t l = strlen(call);
  if (f == NULL || strncmp(f, call, l) != 0) return 0;
  if (f[l] == '\0') return 1;
  return strcmp(f + l, ":async") == 0 ? 2 : 0;
}

#define CHECK_COMM(c)                                                                          \
  do {                                                                                         \
    if ((c) == NULL || (c)->magic != COMM_MAGIC)                                               \
      return fail(ncclInvalidArgument, "fake: %s: %p is not a fake communicator", __func__, (void*)(c)); \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Spins, then sleeps, until cond; 0 on timeout. */
#define WAIT_UNTIL(cond)                                      \
  ({                                                          \
    double dl_ = now() + WAIT_S;                              \
    int ok_ = 1;                                              \
    for (long i_ = 0; !(cond); i_++) {                        \
      if (now() > dl_) { ok_ = 0; break; }                    \
      if (i_ > 1000) usleep(50); else sched_yield();          \
    }                                                         \
    ok_;                                                      \
  })

/* ---- the stream ------------------------------------------------------------ */

/* cecoll's work on the stream comes first: the fake runs at the call. */
static void sync_stream(cudaStream_t s) {
  static ncclResult_t (*sync)(cudaStream_t);
  if (sync == NULL) sync = (ncclResult_t(*)(cudaStream_t))dlsym(RTLD_DEFAULT, "cecollStreamSynchronize");
  if (sync != NULL) sync(s);
}

/* ---- ids and joining ----------------------------------------------------------- */

ncclResult_t ncclGetVersion(int* v) {
  if (v == NULL) return fail(ncclInvalidArgument, "fake: NULL version");
  *v = FAKE_VERSION;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static _Atomic int counter;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, ID_MAGIC, 8);
  snprintf(id->internal + 8, 64, "fakenccl-%d-%d-%ld", (int)getpid(), atomic_fetch_add(&counter, 1), (long)time(NULL));
  flog("GetUniqueId %s via=%s", id->internal + 8, in_initall ? "InitAll" : "call");
  ninfo("fake NCCL version %d: unique id %s", FAKE_VERSION, id->internal + 8);
  return ncclSuccess;
}

static int my_dev(void) {
  if (cur_dev >= 0) return cur_dev;
  const char* d = getenv("FAKE_NCCL_DEV");
  return d ? atoi(d) : -1;
}

/* Maps the communicator's segment and announces this rank. */
static ncclResult_t join_post(struct ncclComm* c) {
  char name[80];
  snprintf(name, sizeof name, "/%s", c->token);
  int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
  if (fd < 0) return fail(ncclSystemError, "fake: shm_open %s: %s", name, strerror(errno));
  if (ftruncate(fd, sizeof(struct shm)) != 0) {
    close(fd);
    return fail(ncclSystemError, "fake: ftruncate: %s", strerror(errno));
  }
  c->shm = mmap(NULL, sizeof(struct shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (c->shm == MAP_FAILED) return fail(ncclSystemError, "fake: mmap: %s", strerror(errno));
  c->shm->dev[c->rank] = c->dev;
  c->shm->n = c->n;
  atomic_fetch_add(&c->shm->joined, 1);
  c->state = 1;
  return ncclSuccess;
}

/* Completes the join once every rank arrived; InProgress before when
 * !wait. Refuses two ranks on one device, as NCCL does. */
static ncclResult_t join_finish(struct ncclComm* c, int wait) {
  struct shm* s = c->shm;
  if (c->state != 1) return c->state == 2 ? ncclInvalidUsage : ncclSuccess;
  if (!wait && atomic_load(&s->joined) < c->n) return ncclInProgress;
  if (!WAIT_UNTIL(atomic_load(&s->joined) >= c->n)) {
    c->state = 2;
    return fail(ncclRemoteError, "fake: %d of %d ranks joined %s", atomic_load(&s->joined), c->n, c->token);
  }
  char name[80];
  snprintf(name, sizeof name, "/%s", c->token);
  if (atomic_fetch_add(&s->mapped, 1) == c->n - 1) shm_unlink(name);
  for (int a = 0; a < c->n; a++)
    for (int b = a + 1; b < c->n; b++)
      if (s->dev[a] >= 0 && s->dev[a] == s->dev[b]) {
        c->state = 2;
        return fail(ncclInvalidUsage, "fake: Duplicate GPU detected: rank %d and rank %d both on device %d", a, b, s->dev[a]);
      }
  c->state = 0;
  flog("Ready token=%s rank=%d", c->token, c->rank);
  return ncclSuccess;
}

/* ---- groups ---------------------------------------------------------------- */

typedef ncclResult_t (*op_fn)(struct ncclComm*, void*);
struct op {
  struct ncclComm* comm;
  int kind; /* 0 join, 1 collective */
  ncclResult_t (*post)(struct op*);
  ncclResult_t (*finish)(struct op*);
  const void* send;
  void* recv;
  size_t count, elt;
  ncclDataType_t dt;
  ncclRedOp_t red;
  int root, peer;
  cudaStream_t stream;
  uint64_t seq;
};
static __thread int depth;
static __thread struct op pending[64];
static __thread int npending;

static ncclResult_t run_ops(struct op* ops, int n) {
  ncclResult_t r = ncclSuccess, x;
  for (int i = 0; i < n; i++) {
    if (ops[i].kind == 1) sync_stream(ops[i].stream);
    if ((x = ops[i].post(&ops[i])) != ncclSuccess && r == ncclSuccess) r = x;
  }
  for (int i = 0; i < n; i++)
    if (ops[i].finish && (x = ops[i].finish(&ops[i])) != ncclSuccess && r == ncclSuccess) r = x;
  return r;
}

static ncclResult_t enqueue(struct op* o) {
  if (depth > 0) {
    if (npending == 64) return fail(ncclInvalidUsage, "fake: more than 64 calls in a group");
    pending[npending++] = *o;
    return ncclSuccess;
  }
  return run_ops(o, 1);
}

ncclResult_t ncclGroupStart(void) {
  flog("GroupStart depth=%d via=%s", depth, in_initall ? "InitAll" : "call");
  depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  flog("GroupEnd depth=%d ops=%d via=%s", depth, npending, in_initall ? "InitAll" : "call");
  if (depth == 0) return fail(ncclInvalidUsage, "fake: ncclGroupEnd without ncclGroupStart");
  if (--depth > 0) return ncclSuccess;
  int n = npending;
  npending = 0;
  return run_ops(pending, n);
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  flog("GroupSimulateEnd");
  if (depth > 0 && --depth == 0) npending = 0;
  if (info) info->estimatedTime = 1.0f;
  return ncclSuccess;
}

/* ---- communicators ----------------------------------------------------------- */

static ncclResult_t post_join(struct op* o) { return join_post(o->comm); }
static ncclResult_t finish_join(struct op* o) { return join_finish(o->comm, 1); }

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int n, ncclUniqueId id, int rank, ncclConfig_t* cfg) {
  int blocking = 1;
  if (out == NULL) return fail(ncclInvalidArgument, "fake: NULL comm");
  *out = NULL;
  if (memcmp(id.internal, ID_MAGIC, 8) != 0) return fail(ncclInvalidArgument, "fake: not a fake unique id");
  if (n < 1 || n > MAXR || rank < 0 || rank >= n) return fail(ncclInvalidArgument, "fake: rank %d of %d", rank, n);
  if (cfg != NULL && cfg->blocking != NCCL_CONFIG_UNDEF_INT) blocking = cfg->blocking;
  flog("InitRank token=%s rank=%d n=%d dev=%d via=%s cfgsize=%zu blocking=%d cta=%d name=%s", id.internal + 8, rank, n,
       my_dev(), in_initall ? "InitAll" : "call", cfg ? cfg->size : 0, cfg ? cfg->blocking : -1,
       cfg && cfg->size >= 64 ? cfg->CTAPolicy : -1, cfg && cfg->commName ? cfg->commName : "-");
  if (injected("InitRank") == 1) return fail(ncclInternalError, "fake: injected failure in InitRank");
  ninfo("comm rank %d nranks %d - Init START", rank, n);
  struct ncclComm* c = calloc(1, sizeof *c);
  c->magic = COMM_MAGIC;
  c->rank = rank;
  c->n = n;
  c->dev = my_dev();
  snprintf(c->token, sizeof c->token, "%.63s", id.internal + 8);
  *out = c;
  struct op o = {.comm = c, .kind = 0, .post = post_join, .finish = blocking ? finish_join : NULL};
  ncclResult_t r = enqueue(&o);
  if (r == ncclSuccess && !blocking) return ncclInProgress;
  return r;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int n, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(out, n, id, rank, NULL);
}

/* As NCCL's: one id, one group, ncclCommInitRank per device, each call
 * through the exported names. */
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int n, const int* devs) {
  ncclUniqueId id;
  ncclResult_t r;
  flog("InitAll n=%d", n);
  in_initall = 1;
  if ((r = ncclGetUniqueId(&id)) != ncclSuccess) goto out;
  if ((r = ncclGroupStart()) != ncclSuccess) goto out;
  for (int i = 0; i < n && r == ncclSuccess; i++) {
    cur_dev = devs ? devs[i] : i;
    r = ncclCommInitRank(&comms[i], n, id, i);
  }
  cur_dev = -1;
  ncclResult_t e = ncclGroupEnd();
  if (r == ncclSuccess) r = e;
out:
  in_initall = 0;
  return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* st) {
  CHECK_COMM(c);
  if (st == NULL) return fail(ncclInvalidArgument, "fake: NULL asyncError");
  *st = c->state == 1 ? join_finish(c, 0) : c->state == 2 ? ncclInvalidUsage : c->async;
  return ncclSuccess;
}

static ncclResult_t comm_end(ncclComm_t c, const char* what, int free_it) {
  CHECK_COMM(c);
  flog("%s token=%s rank=%d", what, c->token, c->rank);
  if (injected(what) == 1) return fail(ncclInternalError, "fake: injected failure in %s", what);
  if (!free_it) {
    c->state = 3;
    return ncclSuccess;
  }
  if (c->shm) munmap(c->shm, sizeof(struct shm));
  c->magic = 0;
  free(c);
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c) { return comm_end(c, "Finalize", 0); }
ncclResult_t ncclCommDestroy(ncclComm_t c) { return c == NULL ? ncclSuccess : comm_end(c, "Destroy", 1); }
ncclResult_t ncclCommAbort(ncclComm_t c) { return c == NULL ? ncclSuccess : comm_end(c, "Abort", 1); }

ncclResult_t ncclCommCount(const ncclComm_t c, int* v) { CHECK_COMM(c); *v = c->n; return ncclSuccess; }
ncclResult_t ncclCommUserRank(const ncclComm_t c, int* v) { CHECK_COMM(c); *v = c->rank; return ncclSuccess; }
ncclResult_t ncclCommCuDevice(const ncclComm_t c, int* v) { CHECK_COMM(c); *v = c->dev; return ncclSuccess; }

const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "fake: no error" : "fake: error"; }
const char* ncclGetLastError(ncclComm_t c) { (void)c; return last_err; }

/* ---- the collective protocol -------------------------------------------------- */

/* Posts this rank's bytes for its next collective, once every rank read
 * the previous one's. */
static ncclResult_t post_bytes(struct ncclComm* c, uint64_t* seq, const void* p, size_t bytes) {
  struct shm* s = c->shm;
  if (c->state != 0) return fail(ncclInvalidUsage, "fake: communicator not ready (state %d)", c->state);
  if (bytes > SLOT) return fail(ncclInvalidArgument, "fake: %zu bytes exceed its %d-byte slot", bytes, SLOT);
  *seq = ++c->seq;
  for (int r = 0; r < c->n; r++)
    if (!WAIT_UNTIL(atomic_load(&s->done[r]) >= *seq - 1)) return fail(ncclRemoteError, "fake: rank %d is late", r);
  if (bytes) memcpy(s->data[c->rank], p, bytes);
  s->bytes[c->rank] = bytes;
  atomic_store(&s->arrive[c->rank], *seq);
  return ncclSuccess;
}

static ncclResult_t wait_all(struct ncclComm* c, uint64_t seq) {
  for (int r = 0; r < c->n; r++)
    if (!WAIT_UNTIL(atomic_load(&c->shm->arrive[r]) >= seq)) return fail(ncclRemoteError, "fake: rank %d never came", r);
  return ncclSuccess;
}

static void done(struct ncclComm* c, uint64_t seq) { atomic_store(&c->shm->done[c->rank], seq); }

static size_t elt_size(ncclDataType_t t) {
  static const size_t sz[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return (unsigned)t < sizeof sz / sizeof sz[0] ? sz[t] : 0;
}

#define RED_CASE(T, dt)                                                          \
  case dt:                                                                       \
    for (size_t i = 0; i < count; i++) {                                         \
      T a = ((T*)acc)[i], b = ((const T*)in)[i];                                 \
      ((T*)acc)[i] = op == ncclSum || op == ncclAvg ? a + b : op == ncclProd ? a * b \
                     : op == ncclMax ? (a > b ? a : b) : (a < b ? a : b);        \
    }                                                                            \
    return 0;

static int reduce_into(void* acc, const void* in, size_t count, ncclDataType_t dt, ncclRedOp_t op) {
  switch (dt) {
    RED_CASE(int8_t, ncclInt8)
    RED_CASE(uint8_t, ncclUint8)
    RED_CASE(int32_t, ncclInt32)
    RED_CASE(uint32_t, ncclUint32)
    RED_CASE(int64_t, ncclInt64)
    RED_CASE(uint64_t, ncclUint64)
    RED_CASE(float, ncclFloat32)
    RED_CASE(double, ncclFloat64)
  default: return -1;
  }
}

/* Each collective: post the bytes it contributes, finish by reading its
 * peers'. Functions: 0 AllReduce, 1 Reduce, 2 Broadcast, 3 ReduceScatter,
 * 4 AllGather, 5 AlltoAll, 6 Gather, 7 Scatter. */
enum { F_ALLREDUCE, F_REDUCE, F_BCAST, F_REDSCAT, F_ALLGATHER, F_ALLTOALL, F_GATHER, F_SCATTER };
static const char* const fname[] = {"AllReduce", "Reduce", "Broadcast", "ReduceScatter", "AllGather", "AlltoAll", "Gather", "Scatter"};

static ncclResult_t coll_post(struct op* o) {
  struct ncclComm* c = o->comm;
  size_t chunk = o->count * o->elt, in = chunk;
  switch (o->peer) {
  case F_REDSCAT: case F_ALLTOALL: in = chunk * c->n; break;
  case F_BCAST: in = c->rank == o->root ? chunk : 0; break;
  case F_SCATTER: in = c->rank == o->root ? chunk * c->n : 0; break;
  }
  return post_bytes(c, &o->seq, o->send, in);
}

static ncclResult_t coll_finish(struct op* o) {
  struct ncclComm* c = o->comm;
  struct shm* s = c->shm;
  size_t chunk = o->count * o->elt;
  ncclResult_t r = wait_all(c, o->seq);
  if (r != ncclSuccess) return r;
  switch (o->peer) {
  case F_ALLREDUCE: case F_REDUCE: case F_REDSCAT: {
    size_t off = o->peer == F_REDSCAT ? c->rank * chunk : 0;
    if (o->peer == F_REDUCE && c->rank != o->root) break;
    memcpy(o->recv, s->data[0] + off, chunk);
    for (int p = 1; p < c->n; p++)
      if (reduce_into(o->recv, s->data[p] + off, o->count, o->dt, o->red) != 0) {
        done(c, o->seq);
        return fail(ncclInvalidArgument, "fake: datatype %d not reduced", o->dt);
      }
    if (o->red == ncclAvg && o->dt == ncclFloat32)
      for (size_t i = 0; i < o->count; i++) ((float*)o->recv)[i] /= c->n;
    break;
  }
  case F_BCAST: memmove(o->recv, s->data[o->root], chunk); break;
  case F_ALLGATHER:
    for (int p = 0; p < c->n; p++) memcpy((char*)o->recv + p * chunk, s->data[p], chunk);
    break;
  case F_ALLTOALL:
    for (int p = 0; p < c->n; p++) memcpy((char*)o->recv + p * chunk, s->data[p] + c->rank * chunk, chunk);
    break;
  case F_GATHER:
    if (c->rank == o->root)
      for (int p = 0; p < c->n; p++) memcpy((char*)o->recv + p * chunk, s->data[p], chunk);
    break;
  case F_SCATTER: memmove(o->recv, s->data[o->root] + c->rank * chunk, chunk); break;
  }
  done(c, o->seq);
  return ncclSuccess;
}

static ncclResult_t coll(int f, const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t red,
                         int root, ncclComm_t c, cudaStream_t st) {
  CHECK_COMM(c);
  flog("%s token=%s rank=%d count=%zu dt=%d root=%d", fname[f], c->token, c->rank, count, (int)dt, root);
  int inj = injected(fname[f]);
  if (inj == 1) return fail(ncclInternalError, "fake: injected failure in %s", fname[f]);
  if (elt_size(dt) == 0) return fail(ncclInvalidArgument, "fake: unknown datatype %d", (int)dt);
  if (root < 0 || root >= c->n) return fail(ncclInvalidArgument, "fake: root %d", root);
  struct op o = {.comm = c, .kind = 1, .post = coll_post, .finish = coll_finish, .send = send, .recv = recv,
                 .count = count, .elt = elt_size(dt), .dt = dt, .red = red, .root = root, .peer = f, .stream = st};
  ncclResult_t r = enqueue(&o);
  if (r == ncclSuccess && inj == 2) {
    c->async = ncclRemoteError;
    fail(ncclRemoteError, "fake: injected asynchronous failure after %s", fname[f]);
  }
  return r;
}

ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
  return coll(F_ALLREDUCE, s, r, n, t, op, 0, c, st);
}
ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t st) {
  return coll(F_REDUCE, s, r, n, t, op, root, c, st);
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st) {
  return coll(F_BCAST, s, r, n, t, ncclSum, root, c, st);
}
ncclResult_t ncclBcast(void* b, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st) {
  return coll(F_BCAST, b, b, n, t, ncclSum, root, c, st);
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
  return coll(F_REDSCAT, s, r, n, t, op, 0, c, st);
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  return coll(F_ALLGATHER, s, r, n, t, ncclSum, 0, c, st);
}
ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  return coll(F_ALLTOALL, s, r, n, t, ncclSum, 0, c, st);
}
ncclResult_t ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st) {
  return coll(F_GATHER, s, r, n, t, ncclSum, root, c, st);
}
ncclResult_t ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st) {
  return coll(F_SCATTER, s, r, n, t, ncclSum, root, c, st);
}

/* Send/Recv through one mailbox per ordered pair of ranks. */
static ncclResult_t p2p_post(struct op* o) {
  struct ncclComm* c = o->comm;
  size_t bytes = o->count * o->elt;
  if (o->send == NULL) return ncclSuccess; /* a Recv works at finish */
  if (bytes > sizeof c->shm->mbox[0][0]) return fail(ncclInvalidArgument, "fake: %zu bytes exceed the mailbox", bytes);
  if (!WAIT_UNTIL(atomic_load(&c->shm->full[c->rank][o->peer]) == 0)) return fail(ncclRemoteError, "fake: send stuck");
  memcpy(c->shm->mbox[c->rank][o->peer], o->send, bytes);
  c->shm->mbytes[c->rank][o->peer] = bytes;
  atomic_store(&c->shm->full[c->rank][o->peer], 1);
  return ncclSuccess;
}

static ncclResult_t p2p_finish(struct op* o) {
  struct ncclComm* c = o->comm;
  if (o->recv == NULL) return ncclSuccess;
  if (!WAIT_UNTIL(atomic_load(&c->shm->full[o->peer][c->rank]) == 1)) return fail(ncclRemoteError, "fake: recv stuck");
  memcpy(o->recv, c->shm->mbox[o->peer][c->rank], c->shm->mbytes[o->peer][c->rank]);
  atomic_store(&c->shm->full[o->peer][c->rank], 0);
  return ncclSuccess;
}

static ncclResult_t p2p(const char* what, const void* s, void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
                        cudaStream_t st) {
  CHECK_COMM(c);
  flog("%s token=%s rank=%d peer=%d count=%zu", what, c->token, c->rank, peer, n);
  if (peer < 0 || peer >= c->n || elt_size(t) == 0) return fail(ncclInvalidArgument, "fake: %s: peer %d", what, peer);
  struct op o = {.comm = c, .kind = 1, .post = p2p_post, .finish = p2p_finish, .send = s, .recv = r, .count = n,
                 .elt = elt_size(t), .dt = t, .peer = peer, .stream = st};
  return enqueue(&o);
}

ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
  return p2p("Send", s, NULL, n, t, peer, c, st);
}
ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
  return p2p("Recv", NULL, r, n, t, peer, c, st);
}

/* ---- split and shrink ---------------------------------------------------------- */

static ncclResult_t make_child(ncclComm_t c, const char* tag, int n, int rank, ncclComm_t* out, ncclConfig_t* cfg) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  memcpy(id.internal, ID_MAGIC, 8);
  snprintf(id.internal + 8, 64, "%.40s-%s", c->token, tag);
  cur_dev = c->dev;
  ncclResult_t r = ncclCommInitRankConfig(out, n, id, rank, cfg);
  cur_dev = -1;
  return r;
}

ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t* out, ncclConfig_t* cfg) {
  CHECK_COMM(c);
  *out = NULL;
  flog("Split token=%s rank=%d color=%d key=%d cfg=%s", c->token, c->rank, color, key, cfg ? "given" : "NULL");
  struct shm* s = c->shm;
  int ck[2] = {color, key};
  uint64_t seq;
  ncclResult_t r = post_bytes(c, &seq, ck, sizeof ck);
  if (r == ncclSuccess) r = wait_all(c, seq);
  if (r != ncclSuccess) return r;
  int n = 0, rank = 0;
  for (int p = 0; p < c->n; p++) {
    int pc = ((int*)s->data[p])[0], pk = ((int*)s->data[p])[1];
    if (pc != color) continue;
    if (pk < key || (pk == key && p < c->rank)) rank++;
    n++;
  }
  done(c, seq);
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  char tag[32];
  snprintf(tag, sizeof tag, "s%llu-%d", (unsigned long long)c->splits++, color);
  return make_child(c, tag, n, rank, out, cfg);
}

ncclResult_t ncclCommShrink(ncclComm_t c, int* excl, int nexcl, ncclComm_t* out, ncclConfig_t* cfg, int flags) {
  CHECK_COMM(c);
  *out = NULL;
  flog("Shrink token=%s rank=%d nexcl=%d flags=%d", c->token, c->rank, nexcl, flags);
  int n = 0, rank = 0;
  unsigned h = 5381;
  for (int p = 0; p < c->n; p++) {
    int x = 0;
    for (int i = 0; i < nexcl; i++) x |= excl[i] == p;
    if (x) {
      h = h * 33 + p;
      continue;
    }
    if (p < c->rank) rank++;
    n++;
  }
  char tag[32];
  snprintf(tag, sizeof tag, "k%u", h);
  return make_child(c, tag, n, rank, out, cfg);
}

/* ---- memory, registration, windows, operators --------------------------------- */

/* Never reached in front of cecoll (which allocates itself); a real NCCL
 * has them, so programs link. */
ncclResult_t ncclMemAlloc(void** p, size_t size) {
  flog("MemAlloc size=%zu", size);
  return posix_memalign(p, 4096, size) == 0 ? ncclSuccess : fail(ncclSystemError, "fake: out of memory");
}

ncclResult_t ncclMemFree(void* p) {
  free(p);
  return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t c, void* buf, size_t size, void** handle) {
  CHECK_COMM(c);
  flog("Register token=%s rank=%d size=%zu", c->token, c->rank, size);
  *handle = buf;
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t c, void* handle) {
  CHECK_COMM(c);
  flog("Deregister token=%s rank=%d", c->token, c->rank);
  (void)handle;
  return ncclSuccess;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t c, void* buf, size_t size, ncclWindow_t* win, int flags) {
  CHECK_COMM(c);
  flog("WindowRegister token=%s rank=%d size=%zu flags=%d", c->token, c->rank, size, flags);
  if (injected("WindowRegister") == 1) return fail(ncclInternalError, "fake: injected failure in WindowRegister");
  struct ncclWindow_vidmem* w = calloc(1, sizeof *w);
  w->magic = COMM_MAGIC;
  w->ptr = buf;
  w->size = size;
  *win = w;
  return ncclSuccess;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t c, ncclWindow_t w) {
  CHECK_COMM(c);
  flog("WindowDeregister token=%s rank=%d", c->token, c->rank);
  if (w == NULL || w->magic != COMM_MAGIC) return fail(ncclInvalidArgument, "fake: not a fake window");
  w->magic = 0;
  free(w);
  return ncclSuccess;
}

ncclResult_t ncclWinGetUserPtr(ncclComm_t c, ncclWindow_t w, void** out) {
  CHECK_COMM(c);
  if (w == NULL || w->magic != COMM_MAGIC) return fail(ncclInvalidArgument, "fake: not a fake window");
  flog("WinGetUserPtr token=%s rank=%d", c->token, c->rank);
  *out = w->ptr;
  return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t t, ncclScalarResidence_t res,
                                      ncclComm_t c) {
  CHECK_COMM(c);
  (void)scalar, (void)t, (void)res;
  flog("RedOpCreatePreMulSum token=%s rank=%d", c->token, c->rank);
  *op = (ncclRedOp_t)ncclNumOps;
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) {
  CHECK_COMM(c);
  flog("RedOpDestroy token=%s rank=%d op=%d", c->token, c->rank, (int)op);
  return ncclSuccess;
}

/* ---- the device API's host side (devapi.h) ------------------------------------- */

#define DEVCOMM_MAGIC 0x766564656b6166ULL /* "fakedev" */

ncclResult_t ncclDevCommCreate(ncclComm_t c, const ncclDevCommRequirements_t* reqs, ncclDevComm_t* out) {
  CHECK_COMM(c);
  if (reqs == NULL || out == NULL) return fail(ncclInvalidArgument, "fake: ncclDevCommCreate: NULL argument");
  flog("DevCommCreate token=%s rank=%d", c->token, c->rank);
  out->magic = DEVCOMM_MAGIC;
  out->rank = c->rank;
  out->nRanks = c->n;
  out->comm = c;
  return ncclSuccess;
}

ncclResult_t ncclDevCommDestroy(ncclComm_t c, const ncclDevComm_t* d) {
  CHECK_COMM(c);
  if (d == NULL || d->magic != DEVCOMM_MAGIC || d->comm != c)
    return fail(ncclInvalidArgument, "fake: ncclDevCommDestroy: not a device communicator of this communicator");
  flog("DevCommDestroy token=%s rank=%d", c->token, c->rank);
  return ncclSuccess;
}

/* A non-fake communicator gets a team that no real one has. */
ncclTeam_t ncclTeamWorld(ncclComm_t c) {
  ncclTeam_t t = {-1, -1, -1};
  if (c == NULL || c->magic != COMM_MAGIC) {
    flog("error fake: ncclTeamWorld: %p is not a fake communicator", (void*)c);
    return t;
  }
  flog("TeamWorld token=%s rank=%d", c->token, c->rank);
  t.nRanks = c->n;
  t.rank = c->rank;
  t.stride = 1;
  return t;
}

/* The pnccl twins NCCL exports too. */
#define TWIN(ret, name, params, args) \
  ret p##name params { return name args; }
TWIN(ncclResult_t, ncclGetVersion, (int* v), (v))
TWIN(ncclResult_t, ncclAllReduce, (const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st),
     (s, r, n, t, op, c, st))
