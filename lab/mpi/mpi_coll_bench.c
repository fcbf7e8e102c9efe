/* mpi_coll_bench: the OpenMPI baseline of cecoll-perf (issue 5). Times
 * MPI_Allgather, MPI_Alltoall, MPI_Scatter and MPI_Gather with the per-rank
 * chunk sizes and the table columns of cecoll-perf, so the two tables line
 * up row by row:
 *
 *   mpirun -np 4 mpi_coll_bench -b 8 -e 64M -f 8 -n 20 -w 5 -c 1 [-o allgather] [-r 0]
 *
 * -b/-e/-f per-rank chunk bytes from -b to -e by factor -f, -n timed
 * iterations, -w warm-up, -c 1 check the data once before timing, -o one
 * collective (allgather|alltoall|scatter|gather|all), -r root. The data type
 * is MPI_BYTE (cecoll-perf's default uint8).
 *
 * Size column: the larger of one rank's send and recv bytes (n * chunk, as
 * cecoll-perf and nccl-tests); time: mean per collective over back-to-back
 * iterations, the slowest rank's (MPI_MAX); algbw = size/time; busbw =
 * algbw * (n-1)/n. In place is MPI_IN_PLACE at the position cecoll-perf
 * uses (AllGather: own block of recv; AlltoAll: recv; Scatter/Gather: the
 * root's block).
 *
 * %ceil: as cecoll-perf, the bytes all ranks copy together (AllGather and
 * AlltoAll n*n*chunk, Scatter and Gather n*chunk; in place without the
 * chunks that stay put) per second over a copy ceiling, here one memcpy of
 * 64..256 MiB timed by rank 0 before the sweep (best of 5). Only for sizes
 * of at least 1 MiB. Buffers are malloc'd and touched once before use. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* kCollNames[] = {"allgather", "alltoall", "scatter", "gather"};
static int nranks, rank, iters = 20, warmup = 5, check = 1, root = 0;
static size_t minBytes = 8, maxBytes = 64 << 20, factor = 8;
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
    case 2: /* in place: the root keeps its block in send, as cecoll-perf's send + root*chunk */
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

static double timeColl(int c, size_t chunk, int inPlace) {
  for (int i = 0; i < warmup; i++) runOnce(c, chunk, inPlace);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) runOnce(c, chunk, inPlace);
  double t = (MPI_Wtime() - t0) / iters, tmax = 0;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return tmax;
}

/* One large memcpy, one warm-up, best of 5: the copy ceiling of %ceil. */
static double measureCeiling(size_t want, size_t* bytesOut) {
  const size_t lo = (size_t)64 << 20, hi = (size_t)256 << 20;
  size_t bytes = want < lo ? lo : want > hi ? hi : want;
  unsigned char* a = malloc(bytes);
  unsigned char* b = malloc(bytes);
  double best = 0;
  if (!a || !b) {
    fprintf(stderr, "mpi_coll_bench: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  memcpy(b, a, bytes);
  for (int i = 0; i < 5; i++) {
    double t0 = MPI_Wtime();
    memcpy(b, a, bytes);
    double bps = bytes / (MPI_Wtime() - t0);
    if (bps > best) best = bps;
  }
  free(a);
  free(b);
  *bytesOut = bytes;
  return best;
}

static double copiedBytes(int c, size_t chunk, int inPlace) {
  double n = nranks, k = (double)chunk;
  if (c <= 1) return (inPlace ? n * (n - 1) : n * n) * k;
  return (inPlace ? n - 1 : n) * k;
}

static void usage(const char* p) {
  if (rank == 0)
    fprintf(stderr, "usage: mpirun -np N %s [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-c 0|1] "
                    "[-o allgather|alltoall|scatter|gather|all] [-r root]\n", p);
  MPI_Finalize();
  exit(2);
}

int main(int argc, char** argv) {
  const char* only = "all";
  int opt;
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  while ((opt = getopt(argc, argv, "b:e:f:n:w:c:o:r:h")) != -1) {
    switch (opt) {
      case 'b': minBytes = parseSize(optarg); break;
      case 'e': maxBytes = parseSize(optarg); break;
      case 'f': factor = parseSize(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'c': check = atoi(optarg); break;
      case 'o': only = optarg; break;
      case 'r': root = atoi(optarg); break;
      default: usage(argv[0]);
    }
  }
  if (root < 0 || root >= nranks || factor < 2 || iters < 1 || minBytes < 1 || maxBytes > (size_t)1 << 30)
    usage(argv[0]);
  size_t bufBytes = maxBytes * (size_t)nranks;
  sendb = malloc(bufBytes);
  recvb = malloc(bufBytes);
  if (!sendb || !recvb) {
    fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", rank, 2 * bufBytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* first touch outside the timed loops */
  memset(sendb, 1, bufBytes);
  memset(recvb, 2, bufBytes);

  double ceilBps = 0;
  size_t ceilBytes = 0;
  if (rank == 0) ceilBps = measureCeiling(bufBytes, &ceilBytes);
  MPI_Bcast(&ceilBps, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int liblen = 0;
  MPI_Get_library_version(lib, &liblen);
  lib[strcspn(lib, ",\n")] = '\0';
  if (rank == 0) {
    printf("# mpi_coll_bench: %s, %d ranks in as many processes, malloc buffers, type uint8 (MPI_BYTE), root %d, "
           "iters %d, warmup %d\n", lib, nranks, root, iters, warmup);
    printf("# copy ceiling: %.2f GB/s (one %zu MiB memcpy on rank 0, best of 5; bytes copied, not read+written)\n",
           ceilBps / 1e9, ceilBytes >> 20);
  }
  long totalWrong = 0;
  for (int c = 0; c < 4; c++) {
    if (strcmp(only, "all") && strcmp(only, kCollNames[c])) continue;
    if (rank == 0) {
      printf("#\n# %s\n", kCollNames[c]);
      printf("# %10s %12s %8s %6s %5s   %9s %8s %8s %6s %6s   %9s %8s %8s %6s %6s\n", "size", "count", "type",
             "redop", "root", "time(us)", "algbw", "busbw", "#wrong", "%ceil", "time(us)", "algbw", "busbw",
             "#wrong", "%ceil");
    }
    for (size_t chunk = minBytes; chunk <= maxBytes; chunk *= factor) {
      size_t size = chunk * (size_t)nranks;
      double tm[2], alg[2], bus[2], frac[2];
      long wrong[2];
      for (int inPlace = 0; inPlace < 2; inPlace++) {
        wrong[inPlace] = check ? verify(c, chunk, inPlace) : -1;
        double t = timeColl(c, chunk, inPlace);
        tm[inPlace] = t * 1e6;
        alg[inPlace] = size / t / 1e9;
        bus[inPlace] = alg[inPlace] * (nranks - 1) / nranks;
        frac[inPlace] = size >= (1 << 20) && ceilBps > 0 ? copiedBytes(c, chunk, inPlace) / t / ceilBps : -1;
        if (wrong[inPlace] > 0) totalWrong += wrong[inPlace];
      }
      if (rank == 0) {
        printf("  %10zu %12zu %8s %6s %5d", size, chunk, "uint8", "none", c >= 2 ? root : -1);
        for (int k = 0; k < 2; k++) {
          printf("   %9.2f %8.2f %8.2f %6ld", tm[k], alg[k], bus[k], wrong[k]);
          if (frac[k] < 0)
            printf(" %6s", "-");
          else
            printf(" %6.1f", 100 * frac[k]);
        }
        printf("\n");
        fflush(stdout);
      }
    }
  }
  if (rank == 0) printf("# out of bounds values: %ld %s\n", totalWrong, totalWrong ? "FAILED" : "OK");
  free(sendb);
  free(recvb);
  MPI_Finalize();
  return totalWrong ? 1 : 0;
}
