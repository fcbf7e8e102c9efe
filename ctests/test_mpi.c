/*
 * test_mpi.c: cecoll as an MPI+NCCL application sees it. One MPI rank per
 * GPU, built with mpicc and linked with -lnccl against cecoll's drop-in
 * (build/dropin/libnccl.so.2, SONAME libnccl.so.2), so the program loads
 * cecoll where it would load NVIDIA's library. Rank 0 makes the unique id,
 * MPI_Bcast hands it to the others, and each rank calls ncclCommInitRank on
 * device rank % cecollGetDeviceCount.
 *
 * Every operation cecoll runs on the copy engines: ncclAllGather,
 * ncclAlltoAll, ncclAllToAll (RCCL's spelling), ncclAllToAllv, ncclScatter,
 * ncclGather, ncclBroadcast, ncclBcast, and ncclSend/ncclRecv as a ring (to
 * rank+1, from rank-1, one group) and as all pairs (every rank to every
 * rank, itself included, in one group). Forms:
 *   out-of-place  separate send and receive allocations
 *   in-place      NCCL's in-place forms and cecoll's conventions (as
 *                 ctests/matrix.c): AllGather send = recv + rank*count;
 *                 AlltoAll (both spellings), Broadcast and the ring
 *                 send == recv; Scatter and Gather the in-place rooted
 *                 layout (docs/protocol.md) on every rank: Scatter
 *                 send = buf, recv = buf + rank*count, Gather recv = buf,
 *                 send = buf + rank*count; ncclBcast has only this form,
 *                 ncclAllToAllv and the all-pairs group only the other.
 * Buffer kinds: ncclMemAlloc unregistered (cecoll's staging), registered
 * with ncclCommRegister, and in a symmetric window (ncclCommWindowRegister
 * with NCCL_WIN_COLL_SYMMETRIC; every rank passes its buffers at the same
 * offsets, as NCCL requires). Sizes: 0 elements and counts whose bytes are
 * not a multiple of 4, in several datatypes, up to 4 MiB + 1 byte per
 * block; roots rotate with the size.
 *
 * Each case poisons both allocations, fills the send region with random
 * bytes that every rank can compute for every peer, runs the call on the
 * rank's stream, reads both allocations back whole (128 guard bytes before
 * the regions, 64+ after) and compares every byte with a reference
 * computed on the host; MPI_Allreduce adds the wrong bytes of every rank.
 * Rank 0 prints one PASS/FAIL line per (operation, form, buffer kind) and
 * a summary; the exit status is non-zero on any failure. A watchdog
 * (alarm; -w seconds, CECOLL_TEST_WATCHDOG overrides, default 120) ends a
 * rank that hangs, naming its case, and mpirun then ends the rest.
 *
 *   mpirun -np 4 -x LD_LIBRARY_PATH=build/dropin ./test_mpi [-w 120]
 *
 * On the host device (CECOLL_BACKEND=host) each process has its own
 * CECOLL_HOST_DEVICES virtual devices (device numbers are process-local)
 * and device memory is memfd shared between the processes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { OP_ALLGATHER, OP_ALLTOALL, OP_ALLTOALL_RCCL, OP_ALLTOALLV, OP_SCATTER, OP_GATHER,
       OP_BROADCAST, OP_BCAST, OP_RING, OP_PAIRS, NOP };
enum { F_OOP, F_INPLACE, NF };
enum { K_UNREG, K_REG, K_SYM, NK };
enum { A_RECV, A_SEND, NA }; /* a rank's two allocations: receive side, send side */

static const char* const op_names[NOP] = {"ncclAllGather", "ncclAlltoAll", "ncclAllToAll", "ncclAllToAllv",
                                          "ncclScatter",   "ncclGather",   "ncclBroadcast", "ncclBcast",
                                          "ncclSend/Recv-ring", "ncclSend/Recv-allpairs"};
static const char* const form_names[NF] = {"out-of-place", "in-place"};
static const char* const kind_names[NK] = {"unregistered", "ncclCommRegister", "symmetric-window"};

#define GUARD 128 /* poison before every region */
#define TAIL 64   /* and at least this much after the largest */
#define V_GAP 5   /* AllToAllv: elements of poison between blocks */

typedef struct {
  size_t count;
  ncclDataType_t dt;
} size_case;

/* 0 elements; byte counts not a multiple of 4 (1, 3, 1001, 65537, 4 MiB + 1)
 * and others (14, 4004, 8198, 1 MiB + 12), in several datatypes. */
static const size_case full_sizes[] = {
    {0, ncclInt8},     {1, ncclInt8},        {3, ncclUint8},      {7, ncclFloat16},    {1001, ncclInt8},
    {1001, ncclFloat32}, {4099, ncclBfloat16}, {65537, ncclUint8}, {262147, ncclFloat32}, {4194305, ncclInt8},
};

/* ---- This rank -------------------------------------------------------------------- */

static int me, n, dev;
static ncclComm_t comm;
static cudaStream_t stream;

/* The current (kind, size): allocations, their references and scratch. */
static size_t count, esz, cb, alloc;
static ncclDataType_t dt;
static void* mem[NA];
static unsigned char* want[NA];
static unsigned char *scratch, *tmp;
static size_t tmp_bytes;

typedef struct {
  int buf; /* A_RECV, A_SEND */
  size_t off;
} ref;

/* One line of the report per (operation, form, kind). */
typedef struct {
  int cases;
  long long bad;  /* wrong bytes, every rank */
  int errors;     /* calls that returned an error, every rank */
  int ran;
} cell;
static cell table[NOP][NF][NK];

static int valid(int op, int form) {
  if (op == OP_ALLTOALLV || op == OP_PAIRS) return form == F_OOP; /* no in-place form */
  if (op == OP_BCAST) return form == F_INPLACE;                  /* one buffer */
  return 1;
}

static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* AllToAllv: pair (s, d) moves ((s + 2d + n) mod 3) * count / 2 elements,
 * an uneven split with zero pairs; rank s packs its send blocks by falling
 * peer, its receive blocks by rising peer, V_GAP elements apart. */
static size_t v_count(int s, int d) { return (size_t)((s + 2 * d + n) % 3) * count / 2; }
static size_t v_sdispl(int s, int d) {
  size_t at = 0;
  for (int p = n - 1; p > d; p--) at += v_count(s, p) + V_GAP;
  return at;
}
static size_t v_rdispl(int r, int s) {
  size_t at = 0;
  for (int p = 0; p < s; p++) at += v_count(p, r) + V_GAP;
  return at;
}

/* Bytes of rank s's input (its send region). */
static size_t in_bytes(int op, int s, int root) {
  switch (op) {
    case OP_ALLTOALL: case OP_ALLTOALL_RCCL: case OP_PAIRS: return (size_t)n * cb;
    case OP_ALLTOALLV: return (v_sdispl(s, 0) + v_count(s, 0)) * esz;
    case OP_SCATTER: return s == root ? (size_t)n * cb : 0;
    case OP_BROADCAST: case OP_BCAST: return s == root ? cb : 0;
    default: return cb; /* AllGather, Gather, the ring */
  }
}

/* Rank s's input of the case into out (in_bytes of it); every rank makes
 * every peer's from the same seed. AllToAllv's gaps are poison. */
static void gen_input(int op, int s, int root, uint64_t seed, unsigned char* out) {
  uint64_t st = mix64(seed ^ mix64((uint64_t)s * 1000003u + 17));
  size_t b = in_bytes(op, s, root);
  t_fill_random(out, b, &st);
  if (op == OP_ALLTOALLV) {
    unsigned char* keep = (unsigned char*)malloc(b + 1);
    REQUIRE(keep != NULL);
    memcpy(keep, out, b);
    memset(out, T_POISON, b);
    for (int d = 0; d < n; d++) memcpy(out + v_sdispl(s, d) * esz, keep + v_sdispl(s, d) * esz, v_count(s, d) * esz);
    free(keep);
  }
}

/* Where rank r's send and receive regions are. */
static void regions(int op, int form, int r, ref* send, ref* recv) {
  send->buf = A_SEND, send->off = GUARD;
  recv->buf = A_RECV, recv->off = GUARD;
  if (form == F_OOP && op != OP_BCAST) return;
  send->buf = A_RECV;
  switch (op) {
    case OP_ALLGATHER: send->off = GUARD + (size_t)r * cb; break;
    case OP_SCATTER: recv->off = GUARD + (size_t)r * cb; break; /* send = buf, recv = buf + r*count */
    case OP_GATHER: send->off = GUARD + (size_t)r * cb; break;  /* recv = buf, send = buf + r*count */
    default: break;                                             /* send == recv */
  }
}

/* What rank r's receive region must hold afterwards (out). */
static void expected(int op, int r, int root, uint64_t seed, unsigned char* out) {
  switch (op) {
    case OP_ALLGATHER:
      for (int i = 0; i < n; i++) gen_input(op, i, root, seed, out + (size_t)i * cb);
      break;
    case OP_ALLTOALL: case OP_ALLTOALL_RCCL: case OP_PAIRS:
      for (int i = 0; i < n; i++) {
        gen_input(op, i, root, seed, tmp);
        memcpy(out + (size_t)i * cb, tmp + (size_t)r * cb, cb);
      }
      break;
    case OP_ALLTOALLV:
      for (int i = 0; i < n; i++) {
        gen_input(op, i, root, seed, tmp);
        memcpy(out + v_rdispl(r, i) * esz, tmp + v_sdispl(i, r) * esz, v_count(i, r) * esz);
      }
      break;
    case OP_SCATTER:
      gen_input(op, root, root, seed, tmp);
      memcpy(out, tmp + (size_t)r * cb, cb);
      break;
    case OP_GATHER:
      if (r == root)
        for (int i = 0; i < n; i++) gen_input(op, i, root, seed, out + (size_t)i * cb);
      break;
    case OP_BROADCAST: case OP_BCAST: gen_input(op, root, root, seed, out); break;
    case OP_RING: gen_input(op, (r + n - 1) % n, root, seed, out); break;
    default: break;
  }
}

static ncclResult_t issue(int op, int root, const void* send, void* recv) {
  ncclResult_t res, end;
  switch (op) {
    case OP_ALLGATHER: return ncclAllGather(send, recv, count, dt, comm, stream);
    case OP_ALLTOALL: return ncclAlltoAll(send, recv, count, dt, comm, stream);
    case OP_ALLTOALL_RCCL: return ncclAllToAll(send, recv, count, dt, comm, stream);
    case OP_ALLTOALLV: {
      size_t sc[64], sd[64], rc[64], rd[64];
      REQUIRE(n <= 64);
      for (int p = 0; p < n; p++) sc[p] = v_count(me, p), sd[p] = v_sdispl(me, p), rc[p] = v_count(p, me), rd[p] = v_rdispl(me, p);
      return ncclAllToAllv(send, sc, sd, recv, rc, rd, dt, comm, stream);
    }
    case OP_SCATTER: return ncclScatter(send, recv, count, dt, root, comm, stream);
    case OP_GATHER: return ncclGather(send, recv, count, dt, root, comm, stream);
    case OP_BROADCAST: return ncclBroadcast(send, recv, count, dt, root, comm, stream);
    case OP_BCAST: return ncclBcast(recv, count, dt, root, comm, stream);
    case OP_RING:
      if ((res = ncclGroupStart()) != ncclSuccess) return res;
      res = ncclSend(send, count, dt, (me + 1) % n, comm, stream);
      if (res == ncclSuccess) res = ncclRecv(recv, count, dt, (me + n - 1) % n, comm, stream);
      end = ncclGroupEnd();
      return res != ncclSuccess ? res : end;
    default: /* OP_PAIRS */
      if ((res = ncclGroupStart()) != ncclSuccess) return res;
      for (int p = 0; p < n && res == ncclSuccess; p++) {
        res = ncclSend((const unsigned char*)send + (size_t)p * cb, count, dt, p, comm, stream);
        if (res == ncclSuccess) res = ncclRecv((unsigned char*)recv + (size_t)p * cb, count, dt, p, comm, stream);
      }
      end = ncclGroupEnd();
      return res != ncclSuccess ? res : end;
  }
}

/* One case on every rank: returns this rank's wrong bytes (errors counted
 * in *err). A call refused on some ranks but queued on others leaves those
 * waiting for good: the job ends there. */
static size_t run_case(int op, int form, int kind, int root, uint64_t seed, int* err) {
  ref s, r;
  size_t bad = 0;
  int mine = 0, any = 0, all = 0;
  ncclResult_t res, ae = ncclSuccess;
  regions(op, form, me, &s, &r);
  t_set_case("rank %d of %d: %s %s %s count=%zu %s root=%d", me, n, op_names[op], form_names[form], kind_names[kind],
             count, t_type_name(dt), root);
  for (int a = 0; a < NA; a++) memset(want[a], T_POISON, alloc);
  if (in_bytes(op, me, root)) gen_input(op, me, root, seed, want[s.buf] + s.off);
  for (int a = 0; a < NA; a++) CHECK(cecollMemcpy(mem[a], want[a], alloc));
  expected(op, me, root, seed, want[r.buf] + r.off);

  res = issue(op, root, (unsigned char*)mem[s.buf] + s.off, (unsigned char*)mem[r.buf] + r.off);
  if (res != ncclSuccess) {
    mine = 1;
    fprintf(stderr, "FAIL [%s]: the call returned %d (%s): %s\n", t_case(), (int)res, ncclGetErrorString(res),
            ncclGetLastError(comm));
  }
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (any && !all) {
    fprintf(stderr, "FATAL [%s]: the call failed on some ranks only; the others' streams would wait forever\n",
            t_case());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  *err = mine;
  if (mine) return 0;
  res = cecollStreamSynchronize(stream);
  if (res != ncclSuccess) {
    *err = 1;
    fprintf(stderr, "FAIL [%s]: cecollStreamSynchronize -> %d (%s): %s\n", t_case(), (int)res,
            ncclGetErrorString(res), ncclGetLastError(NULL));
  }
  if (ncclCommGetAsyncError(comm, &ae) != ncclSuccess || ae != ncclSuccess) {
    *err = 1;
    fprintf(stderr, "FAIL [%s]: ncclCommGetAsyncError gives %d (%s): %s\n", t_case(), (int)ae,
            ncclGetErrorString(ae), ncclGetLastError(comm));
  }
  for (int a = 0; a < NA; a++) {
    char what[320];
    CHECK(cecollMemcpy(scratch, mem[a], alloc));
    snprintf(what, sizeof what, "[%s] %s allocation", t_case(), a == A_RECV ? "receive-side" : "send-side");
    bad += t_compare(scratch, want[a], alloc, what);
  }
  return bad;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(const char* prog) {
  fprintf(stderr, "usage: %s [-w watchdog_seconds]\n", prog);
  exit(2);
}

int main(int argc, char** argv) {
  const size_case* sizes = full_sizes;
  int nsizes = (int)(sizeof full_sizes / sizeof full_sizes[0]);
  int watchdog = 120, ndev = 0, opt;
  int lines = 0, failed_lines = 0;
  ncclUniqueId id;
  const char *backend = "?", *version = "?";
  double t0;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  while ((opt = getopt(argc, argv, "w:")) != -1) {
    if (opt == 'w') watchdog = atoi(optarg);
    else usage(argv[0]);
  }
  t_watchdog(watchdog);
  t0 = now_s();

  t_set_case("rank %d of %d: setup", me, n);
  CHECK(cecollGetBackend(&backend));
  CHECK(cecollGetVersion(&version));
  CHECK(cecollGetDeviceCount(&ndev));
  REQUIRE(ndev > 0);
  dev = me % ndev;
  CHECK(cecollSetDevice(dev));
  if (me == 0) CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  t_set_case("rank %d of %d: ncclCommInitRank", me, n);
  CHECK(ncclCommInitRank(&comm, n, id, me));
  CHECK(cecollStreamCreate(&stream));
  {
    int nv = 0, cu = -1, rk = -1, cnt = 0;
    int* devs = me == 0 ? (int*)malloc(sizeof(int) * (size_t)n) : NULL;
    CHECK(ncclGetVersion(&nv));
    CHECK(ncclCommCuDevice(comm, &cu));
    CHECK(ncclCommUserRank(comm, &rk));
    CHECK(ncclCommCount(comm, &cnt));
    REQUIRE(cu == dev && rk == me && cnt == n);
    MPI_Gather(&dev, 1, MPI_INT, devs, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (me == 0) {
      printf("test_mpi: %d ranks, cecoll %s (NCCL API %d), backend %s, %d devices; rank r on device r %% %d:", n,
             version, nv, backend, ndev, ndev);
      for (int i = 0; i < n; i++) printf(" %d", devs[i]);
      printf("\n");
      fflush(stdout);
      free(devs);
    }
  }

  for (int kind = 0; kind < NK; kind++)
    for (int si = 0; si < nsizes; si++) {
      void* handle[NA] = {NULL, NULL};
      ncclWindow_t win[NA] = {NULL, NULL};
      size_t span;
      count = sizes[si].count;
      dt = sizes[si].dt;
      esz = t_type_size(dt);
      cb = count * esz;
      span = ((size_t)n * count + (size_t)(n - 1) * V_GAP) * esz; /* >= n*cb and AllToAllv's blocks and gaps */
      alloc = (GUARD + span + TAIL + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT *
              NCCL_WIN_REQUIRED_ALIGNMENT;
      tmp_bytes = span + 1;
      t_set_case("rank %d of %d: %s buffers of %zu bytes", me, n, kind_names[kind], alloc);
      for (int a = 0; a < NA; a++) {
        CHECK(ncclMemAlloc(&mem[a], alloc));
        want[a] = (unsigned char*)malloc(alloc);
        REQUIRE(want[a] != NULL);
      }
      scratch = (unsigned char*)malloc(alloc);
      tmp = (unsigned char*)malloc(tmp_bytes);
      REQUIRE(scratch && tmp);
      /* Window registration is collective: every rank, in one order. */
      for (int a = 0; a < NA; a++) {
        if (kind == K_REG) CHECK(ncclCommRegister(comm, mem[a], alloc, &handle[a]));
        if (kind == K_SYM) CHECK(ncclCommWindowRegister(comm, mem[a], alloc, &win[a], NCCL_WIN_COLL_SYMMETRIC));
      }
      for (int op = 0; op < NOP; op++)
        for (int form = 0; form < NF; form++) {
          int root = (si + kind + op) % n, err = 0, errs = 0;
          uint64_t seed = mix64(((uint64_t)kind << 40) ^ ((uint64_t)si << 24) ^ ((uint64_t)op << 8) ^ (uint64_t)form);
          long long bad, total = 0;
          if (!valid(op, form)) continue;
          bad = (long long)run_case(op, form, kind, root, seed, &err);
          MPI_Allreduce(&bad, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
          MPI_Allreduce(&err, &errs, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
          table[op][form][kind].ran = 1;
          table[op][form][kind].cases++;
          table[op][form][kind].bad += total;
          table[op][form][kind].errors += errs;
        }
      t_set_case("rank %d of %d: %s buffers of %zu bytes: release", me, n, kind_names[kind], alloc);
      for (int a = 0; a < NA; a++) {
        if (handle[a]) CHECK(ncclCommDeregister(comm, handle[a]));
        if (win[a]) CHECK(ncclCommWindowDeregister(comm, win[a]));
      }
      CHECK(cecollStreamSynchronize(stream));
      for (int a = 0; a < NA; a++) {
        CHECK(ncclMemFree(mem[a]));
        free(want[a]);
      }
      free(scratch);
      free(tmp);
    }

  t_set_case("rank %d of %d: teardown", me, n);
  CHECK(cecollStreamDestroy(stream));
  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
  MPI_Barrier(MPI_COMM_WORLD);

  if (me == 0) {
    char sz[256];
    size_t at = 0;
    for (int si = 0; si < nsizes && at < sizeof sz; si++)
      at += (size_t)snprintf(sz + at, sizeof sz - at, "%s%zu %s", si ? ", " : "", sizes[si].count,
                             t_type_name(sizes[si].dt));
    for (int op = 0; op < NOP; op++)
      for (int form = 0; form < NF; form++)
        for (int kind = 0; kind < NK; kind++) {
          const cell* c = &table[op][form][kind];
          int ok = c->ran && c->bad == 0 && c->errors == 0;
          if (!valid(op, form)) continue;
          lines++;
          failed_lines += !ok;
          printf("%s  %-24s %-13s %-17s %d sizes x %d ranks: %lld wrong bytes, %d errors\n", ok ? "PASS" : "FAIL",
                 op_names[op], form_names[form], kind_names[kind], c->cases, n, c->bad, c->errors);
        }
    printf("sizes (elements): %s\n", sz);
    printf("test_mpi: %d ranks, %d lines: %d passed, %d failed, %.1f s\n", n, lines, lines - failed_lines,
           failed_lines, now_s() - t0);
    fflush(stdout);
  }
  MPI_Bcast(&failed_lines, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed_lines ? 1 : 0;
}
