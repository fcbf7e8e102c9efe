/* mpi_coll_bench: the OpenMPI baseline of cecoll-perf (lab/mpi/compare.sh). Times
 * MPI_Allgather, MPI_Alltoall, MPI_Scatter and MPI_Gather with cecoll-perf's
 * sizes, table and %ceil (nccl-tests' format), so the two tables line up
 * row by row:
 *
 *   mpirun -np 4 mpi_coll_bench [allgather|alltoall|scatter|gather|all] -b 32 -e 256M -f 8 -n 20 -w 5 -c 1 [-r 0]
 *
 * -b/-e/-f total message sizes (all ranks' chunks, as cecoll-perf and
 * nccl-tests) from -b to -e by factor -f, -n timed iterations, -w warm-up
 * iterations at the largest and the smallest size, -c 1 check the data once
 * per size and placement, -r root. The data type is MPI_BYTE (uint8).
 *
 * Time: mean per collective over back-to-back iterations, the slowest
 * rank's (MPI_MAX; cecoll-perf -a 3); algbw = size/time; busbw = algbw *
 * (n-1)/n. In place is MPI_IN_PLACE (AllGather: own block of recv;
 * AlltoAll: recv; Scatter/Gather: the root's block).
 *
 * %ceil: cecoll-perf's definition with memcpy: each rank copies the bytes
 * it copies in the collective, timed as the collective right before and
 * right after its loop; the faster counts, '~' when they differ by more than
 * 10%. Only for sizes of at least 1 MiB. Buffers are malloc'd and touched
 * once before use. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* kCollNames[] = {"allgather", "alltoall", "scatter", "gather"};
static int nranks, rank, iters = 20, warmup = 5, check = 1, root = 0;
static size_t minBytes = 32, maxBytes = 256 << 20, factor = 8;
static unsigned char *sendb, *recvb;

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

static void mpiCheck(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* MPI counts are int: chunks above 2 GiB would need derived types. */
static void runOnce(int c, size_t chunk, int inPlace) {
  int n = (int)chunk;
  int isRoot = rank == root;
  switch (c) {
    case 0:
      mpiCheck(MPI_Allgather(inPlace ? MPI_IN_PLACE : sendb, n, MPI_BYTE, recvb, n, MPI_BYTE, MPI_COMM_WORLD),
               "MPI_Allgather");
      break;
    case 1:
      mpiCheck(MPI_Alltoall(inPlace ? MPI_IN_PLACE : sendb, n, MPI_BYTE, recvb, n, MPI_BYTE, MPI_COMM_WORLD),
               "MPI_Alltoall");
      break;
    case 2: /* in place (MPI's form): the root keeps its block in send */
      mpiCheck(MPI_Scatter(sendb, n, MPI_BYTE, (inPlace && isRoot) ? MPI_IN_PLACE : recvb, n, MPI_BYTE, root,
                           MPI_COMM_WORLD),
               "MPI_Scatter");
      break;
    case 3: /* in place: the root's input already sits at recv + root*chunk */
      mpiCheck(MPI_Gather((inPlace && isRoot) ? MPI_IN_PLACE : sendb, n, MPI_BYTE, recvb, n, MPI_BYTE, root,
                          MPI_COMM_WORLD),
               "MPI_Gather");
      break;
  }
}

static unsigned char pattern(int r, size_t i) { return (unsigned char)(r * 131 + i * 7 + 1); }

/* Fills inputs, poisons outputs, runs once, counts wrong bytes over every
 * rank (cecoll-perf's verify, for MPI's buffer placement). */
static long verify(int c, size_t chunk, int inPlace) {
  size_t total = chunk * (size_t)nranks;
  for (size_t i = 0; i < total; i++) sendb[i] = pattern(rank, i);
  memset(recvb, 0xA5, total);
  if (inPlace) {
    if (c == 0) memcpy(recvb + (size_t)rank * chunk, sendb + (size_t)rank * chunk, chunk);
    if (c == 1) memcpy(recvb, sendb, total);
    if (c == 3 && rank == root) memcpy(recvb + (size_t)rank * chunk, sendb + (size_t)rank * chunk, chunk);
  }
  runOnce(c, chunk, inPlace);
  long wrong = 0;
  const unsigned char* out = recvb;
  size_t n = (c == 0 || c == 1 || (c == 3 && rank == root)) ? total : (c == 2 ? chunk : 0);
  /* in-place Scatter: the root's block stays in send */
  if (c == 2 && inPlace && rank == root) out = sendb + (size_t)root * chunk;
  for (size_t i = 0; i < n; i++) {
    size_t blk = i / chunk, off = i % chunk;
    unsigned char want;
    switch (c) {
      case 0: want = pattern((int)blk, inPlace ? blk * chunk + off : off); break;
      case 1: want = pattern((int)blk, (size_t)rank * chunk + off); break;
      case 2: want = pattern(root, (size_t)rank * chunk + off); break;
      default: want = pattern((int)blk, (inPlace && (int)blk == root) ? blk * chunk + off : off);
    }
    if (out[i] != want) wrong++;
  }
  long sum = 0;
  MPI_Allreduce(&wrong, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return sum;
}

/* Bytes rank r copies in the collective (cecoll-perf's rankBytes). */
static size_t rankBytes(int c, size_t chunk, int inPlace, int r) {
  if (c <= 1) return (inPlace ? nranks - 1 : nranks) * chunk;
  return inPlace && r == root ? 0 : chunk;
}

/* The ceiling's round: one memcpy per rank of the bytes it copies in c. */
static void copyOnce(int c, size_t chunk, int inPlace) { memcpy(recvb, sendb, rankBytes(c, chunk, inPlace, rank)); }

/* Seconds per call of fn after one untimed call: the mean of -n calls, the
 * slowest rank's. */
static double timed(void (*fn)(int, size_t, int), int c, size_t chunk, int inPlace) {
  fn(c, chunk, inPlace);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) fn(c, chunk, inPlace);
  double t = (MPI_Wtime() - t0) / iters, tmax = 0;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return tmax;
}

/* nccl-tests' number cells: 2, 1 or 0 decimals, whichever fits width. */
static const char* num(double v, int width, char* buf, size_t n) {
  const char* fmts[] = {"%*.2f", "%*.1f", "%*.0f"};
  for (int i = 0; i < 3; i++)
    if (snprintf(buf, n, fmts[i], width, v) <= width) return buf;
  snprintf(buf, n, "%*.1e", width, v);
  return buf;
}

static void usage(const char* p) {
  if (rank == 0)
    fprintf(stderr, "usage: mpirun -np N %s [allgather|alltoall|scatter|gather|all] [-b min] [-e max] [-f factor] "
                    "[-n iters] [-w warmup] [-c 0|1] [-r root]\n", p);
  MPI_Finalize();
  exit(2);
}

static const char* kTestNames[] = {"all_gather_perf", "alltoall_perf", "scatter_perf", "gather_perf"};

int main(int argc, char** argv) {
  const char* only = "all";
  int opt;
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  while ((opt = getopt(argc, argv, "b:e:f:n:w:c:r:h")) != -1) {
    switch (opt) {
      case 'b': minBytes = parseSize(optarg); break;
      case 'e': maxBytes = parseSize(optarg); break;
      case 'f': factor = parseSize(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'c': check = atoi(optarg); break;
      case 'r': root = atoi(optarg); break;
      default: usage(argv[0]);
    }
  }
  if (optind < argc) only = argv[optind++];
  if (optind < argc || root < 0 || root >= nranks || factor < 2 || iters < 1 || minBytes < (size_t)nranks ||
      minBytes > maxBytes || maxBytes / nranks > (size_t)1 << 30)
    usage(argv[0]);
  size_t bufBytes = maxBytes;
  sendb = malloc(bufBytes);
  recvb = malloc(bufBytes);
  if (!sendb || !recvb) {
    fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", rank, 2 * bufBytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* first touch outside the timed loops */
  memset(sendb, 1, bufBytes);
  memset(recvb, 2, bufBytes);

  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int liblen = 0;
  MPI_Get_library_version(lib, &liblen);
  lib[strcspn(lib, ",\n")] = '\0';
  int failed = 0;
  for (int c = 0; c < 4; c++) {
    if (strcmp(only, "all") && strcmp(only, kCollNames[c])) continue;
    int wrongRows = 0, nbw = 0;
    double bwSum = 0;
    if (rank == 0) {
      printf("# mpi_coll_bench (nccl-tests' format): %s, %d ranks in as many processes, malloc buffers\n", lib, nranks);
      printf("# Collective test starting: %s\n", kTestNames[c]);
      printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d agg iters: 1 "
             "validation: %d graph: 0 unalign: 0\n#\n", minBytes, maxBytes, factor, warmup, iters, check);
      printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
             "", "", "");
      printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s  %7s  %7s\n", "size", "count",
             "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "", "%ceil",
             "%ceil");
      printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s  %7s  %7s\n", "(B)",
             "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "", "(out)",
             "(in)");
    }
    for (int pass = 0; pass < 2; pass++) /* warm-up at the largest size, then the smallest */
      for (int i = 0; i < warmup; i++) runOnce(c, (pass ? minBytes : maxBytes) / nranks, 0);
    for (size_t size = minBytes; size <= maxBytes; size *= factor) {
      size_t chunk = size / nranks;
      char cells[2][96], ceils[2][16];
      for (int inPlace = 0; inPlace < 2; inPlace++) {
        int ceil = chunk * nranks >= (1 << 20) && nranks > 1;
        double before = ceil ? timed(copyOnce, c, chunk, inPlace) : 0;
        double t = timed(runOnce, c, chunk, inPlace);
        double after = ceil ? timed(copyOnce, c, chunk, inPlace) : 0;
        long wrong = check ? verify(c, chunk, inPlace) : -1;
        double alg = chunk * nranks / t / 1e9, bus = alg * (nranks - 1) / nranks;
        char tb[32], ab[32], bb[32], wb[32];
        if (wrong < 0) snprintf(wb, sizeof wb, "   N/A");
        else snprintf(wb, sizeof wb, "%6ld", wrong);
        snprintf(cells[inPlace], sizeof cells[inPlace], "  %7s  %6s  %6s  %s", num(t * 1e6, 7, tb, sizeof tb),
                 num(alg, 6, ab, sizeof ab), num(bus, 6, bb, sizeof bb), wb);
        double best = before < after ? before : after;
        if (!ceil || best <= 0) snprintf(ceils[inPlace], sizeof ceils[inPlace], "-");
        else snprintf(ceils[inPlace], sizeof ceils[inPlace], "%.1f%s", 100 * best / t,
                      (before - after > 0.1 * best || after - before > 0.1 * best) ? "~" : "");
        wrongRows += wrong > 0;
        bwSum += bus;
        nbw++;
      }
      if (rank == 0) {
        printf("%12zu  %12zu  %8s  %6s  %6d%s%s   %7s  %7s\n", chunk * nranks, chunk, "uint8", "none",
               c >= 2 ? root : -1, cells[0], cells[1], ceils[0], ceils[1]);
        fflush(stdout);
      }
    }
    if (rank == 0) {
      printf("# %-20s : %d %s\n", "Out of bounds values", wrongRows, wrongRows ? "FAILED" : "OK");
      printf("# %-20s : %g \n#\n# Collective test concluded: %s\n#\n\n", "Avg bus bandwidth", nbw ? bwSum / nbw : 0,
             kTestNames[c]);
    }
    failed |= wrongRows > 0;
  }
  free(sendb);
  free(recvb);
  MPI_Finalize();
  return failed;
}
