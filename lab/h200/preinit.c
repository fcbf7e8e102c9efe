/* lab/h200/preinit.c: cecoll's hardware-queue check (hip.Caps.StreamQueues) where the process
 * made its CUDA context before cecoll. It runs cuInit and retains device 0's primary context
 * (as torch or cuBLAS would), then ncclCommInitAll with N ranks all on device 0 and, if that
 * worked, one AllGather of 4 bytes per rank in a group, synchronised. Prints
 *   PREINIT n= init=<ncclResult> err="<ncclGetLastError>" allgather=<ncclResult|->
 * Usage: preinit N [early]   (early: no CUDA call before cecoll's).
 * Build: gcc -O2 -I include -o preinit lab/h200/preinit.c -Lbuild -lcecoll -ldl */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nccl.h"

typedef int (*cuInit_t)(unsigned);
typedef int (*cuRetain_t)(void**, int);
typedef int (*cuSetCur_t)(void*);

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 8, early = argc > 2 && !strcmp(argv[2], "early");
  if (n < 1 || n > 64) return 2;
  if (!early) {
    void* h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { printf("PREINIT no libcuda: %s\n", dlerror()); return 2; }
    void* ctx = NULL;
    cuInit_t init = (cuInit_t)dlsym(h, "cuInit");
    cuRetain_t retain = (cuRetain_t)dlsym(h, "cuDevicePrimaryCtxRetain");
    cuSetCur_t setCur = (cuSetCur_t)dlsym(h, "cuCtxSetCurrent");
    if (!init || !retain || !setCur || init(0) || retain(&ctx, 0) || setCur(ctx)) { printf("PREINIT cuda setup failed\n"); return 2; }
  }
  ncclComm_t comms[64];
  int devs[64] = {0};
  ncclResult_t r = ncclCommInitAll(comms, n, devs);
  const char* ag = "-";
  if (r == ncclSuccess) {
    void* buf[64] = {0};
    cudaStream_t s[64];
    ncclResult_t a = ncclSuccess;
    for (int i = 0; i < n && a == ncclSuccess; i++) a = ncclMemAlloc(&buf[i], 4 * (size_t)n);
    ncclGroupStart();
    for (int i = 0; i < n && a == ncclSuccess; i++) {
      s[i] = NULL; /* the legacy stream of the rank's device */
      a = ncclAllGather((char*)buf[i] + 4 * i, buf[i], 4, ncclUint8, comms[i], s[i]); /* in place */
    }
    if (ncclGroupEnd() != ncclSuccess && a == ncclSuccess) a = ncclInternalError;
    ag = ncclGetErrorString(a);
    for (int i = 0; i < n; i++) ncclCommDestroy(comms[i]);
    for (int i = 0; i < n; i++) ncclMemFree(buf[i]);
  }
  printf("PREINIT n=%d %s init=%s err=\"%s\" allgather=%s\n", n, early ? "early" : "ctx-first", ncclGetErrorString(r),
         ncclGetLastError(NULL), ag);
  return 0;
}
