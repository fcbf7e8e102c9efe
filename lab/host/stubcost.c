/* stubcost.c: what a generated stub (export/fwd_stubs.S) adds to a call
 * that cecoll forwards without entering Go. One rank, the host device, the
 * fake NCCL of ctests/fake-nccl as the real library (CECOLL_NCCL_LIB);
 * ncclRedOpDestroy, a stub, is called ITERS times on cecoll's
 * communicator (the stub translates it, counts the call, jumps) and on the
 * real one it owns (the stub finds a foreign handle and jumps). The
 * difference is the stub's own work; stubcost.sh runs it against a build
 * whose stubs do not count, for the counter's share. Prints ns per call. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nccl.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double per_call(ncclComm_t c, long iters) {
  double best = 1e9;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    for (long i = 0; i < iters; i++)
      if (ncclRedOpDestroy(ncclSum, c) != ncclSuccess) {
        fprintf(stderr, "ncclRedOpDestroy failed: %s\n", ncclGetLastError(c));
        exit(1);
      }
    double ns = (now() - t0) * 1e9 / iters;
    if (ns < best) best = ns;
  }
  return best;
}

int main(int argc, char** argv) {
  long iters = argc > 1 ? atol(argv[1]) : 2000000;
  ncclComm_t c;
  int dev = 0;
  if (ncclCommInitAll(&c, 1, &dev) != ncclSuccess) {
    fprintf(stderr, "init: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  ncclComm_t real = (ncclComm_t)((uintptr_t*)c)[2]; /* export/cshim.h: real at offset 16 */
  per_call(c, iters / 10);                         /* the first call fills the stub's entry */
  double own = per_call(c, iters), foreign = per_call(real, iters);
  printf("cecoll communicator %.2f ns/call, real communicator %.2f ns/call, difference %.2f ns\n", own, foreign,
         own - foreign);
  ncclCommDestroy(c);
  return 0;
}
