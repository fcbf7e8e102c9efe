/* mpsinit.c: how long a process takes to reach a usable CUDA context, N at
 * once (as the matrix's rank processes do), with or without MPS. Each child
 * prints the seconds from its start to cuInit, primary context, first
 * cuMemAlloc and first stream. Build on the GPU machine:
 *   gcc -O2 -o /tmp/mpsinit lab/h200/mpsinit.c -ldl && /tmp/mpsinit 4
 * MPSINIT_HOLD=s: each child keeps its context s seconds before it exits, so
 * that all N are clients at once (how many an MPS server takes); the last line counts the children whose calls all succeeded. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef int (*fn_i)(unsigned);
typedef int (*fn_dev)(int*, int);
typedef int (*fn_ret)(void**, int);
typedef int (*fn_set)(void*);
typedef int (*fn_alloc)(unsigned long long*, size_t);
typedef int (*fn_stream)(void**, unsigned);

static void child(int id, double t0) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { printf("child %d: dlopen: %s\n", id, dlerror()); exit(1); }
  fn_i init = (fn_i)dlsym(h, "cuInit");
  fn_dev dev = (fn_dev)dlsym(h, "cuDeviceGet");
  fn_ret ret = (fn_ret)dlsym(h, "cuDevicePrimaryCtxRetain");
  fn_set set = (fn_set)dlsym(h, "cuCtxSetCurrent");
  fn_alloc alloc = (fn_alloc)dlsym(h, "cuMemAlloc_v2");
  fn_stream str = (fn_stream)dlsym(h, "cuStreamCreate");
  int d, rc;
  void* ctx;
  void* s;
  unsigned long long p;
  double a, b, c, e;
  rc = init(0);
  a = now() - t0;
  rc |= dev(&d, 0);
  rc |= ret(&ctx, d);
  rc |= set(ctx);
  b = now() - t0;
  rc |= alloc(&p, 1 << 20);
  c = now() - t0;
  rc |= str(&s, 1);
  e = now() - t0;
  printf("child %d: rc %d cuInit %.3f s, context %.3f s, alloc %.3f s, stream %.3f s\n", id, rc, a, b, c, e);
  fflush(stdout);
  if (getenv("MPSINIT_HOLD")) sleep((unsigned)atoi(getenv("MPSINIT_HOLD")));
  exit(rc != 0);
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  double t0 = now();
  for (int i = 0; i < n; i++)
    if (fork() == 0) child(i, t0);
  int ok = 0;
  for (int i = 0; i < n; i++) {
    int st;
    if (wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
  }
  printf("all %d in %.3f s: %d ok\n", n, now() - t0, ok);
  return 0;
}
