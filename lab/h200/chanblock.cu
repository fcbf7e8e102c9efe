// lab/h200/chanblock.cu: can work queued on one stream block another stream of the same
// process and GPU behind a stream wait? The lead on the thread-per-rank hang (README, known
// limits): if the driver feeds the copies of several streams through one shared hardware queue,
// a copy of stream A that waits (by stream order) on a flag is a wall for every later item of
// that queue, and the flag write of stream B that would release it may be one of them.
//
// For each k in 1..K-1, with streams s[0..K-1] created in that order (non-blocking):
//   s[0]: wait(flag == 1), then op X
//   (1 ms later, so s[0]'s work is pushed first)
//   s[k]: op Y, then the flag write W
// B is "blocked" when s[k] has not finished 300 ms later. The flag is then set by a kernel on a
// fresh stream (or, if that is stuck too, the process exits 3 and the caller resumes at k+1).
//   X: copy (64 MiB device to device), small (4-byte copy), value (write-value), kernel, none
//   Y: copy, small, value, kernel, none
//   W: value (cuStreamWriteValue32), copy (4-byte copy from a device word holding 1)
// Usage: chanblock X Y W [K=40] [kstart=1]. Prints one line per k:
//   CHAN X= Y= W= k= blocked=0|1 released=kernel|stuck
// Build on the GPU machine: nvcc -O2 -o chanblock lab/h200/chanblock.cu -lcuda
#include <cstring>
#include <unistd.h>
#include "probe.h"

__global__ void setFlag(unsigned* f) { *f = 1; }
__global__ void spin(unsigned* p) { if (threadIdx.x == 0) atomicAdd(p, 1); }

static const size_t BIG = 64ull << 20;
static char *a0, *a1, *b0, *b1;
static unsigned *flag, *one, *scratch;

static void op(const char* kind, cudaStream_t s, char* dst, char* src) {
  if (!strcmp(kind, "copy")) CK(cudaMemcpyAsync(dst, src, BIG, cudaMemcpyDeviceToDevice, s));
  else if (!strcmp(kind, "small")) CK(cudaMemcpyAsync(dst, src, 4, cudaMemcpyDeviceToDevice, s));
  else if (!strcmp(kind, "value"))
    CU(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)scratch, 7, CU_STREAM_WRITE_VALUE_DEFAULT));
  else if (!strcmp(kind, "kernel")) spin<<<1, 32, 0, s>>>(scratch + 1);
  else if (strcmp(kind, "none")) { printf("unknown op %s\n", kind); exit(2); }
}

int main(int argc, char** argv) {
  if (argc < 4) { printf("usage: chanblock X Y W [K] [kstart]\n"); return 2; }
  const char *X = argv[1], *Y = argv[2], *W = argv[3];
  int K = argc > 4 ? atoi(argv[4]) : 40, k0 = argc > 5 ? atoi(argv[5]) : 1;
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  CK(cudaMalloc(&a0, BIG)); CK(cudaMalloc(&a1, BIG)); CK(cudaMalloc(&b0, BIG)); CK(cudaMalloc(&b1, BIG));
  CK(cudaMalloc(&flag, 64)); CK(cudaMalloc(&one, 64)); CK(cudaMalloc(&scratch, 64));
  unsigned h1 = 1;
  CK(cudaMemcpy(one, &h1, 4, cudaMemcpyHostToDevice));
  cudaStream_t* s = new cudaStream_t[K];
  for (int i = 0; i < K; i++) CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
  for (int k = k0; k < K; k++) {
    CK(cudaMemset(flag, 0, 4));
    CK(cudaDeviceSynchronize());
    CU(cuStreamWaitValue32((CUstream)s[0], (CUdeviceptr)flag, 1, CU_STREAM_WAIT_VALUE_GEQ));
    op(X, s[0], a1, a0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    op(Y, s[k], b1, b0);
    if (!strcmp(W, "value")) CU(cuStreamWriteValue32((CUstream)s[k], (CUdeviceptr)flag, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
    else CK(cudaMemcpyAsync(flag, one, 4, cudaMemcpyDeviceToDevice, s[k]));
    bool ok = finished(s[k], 300);
    const char* rel = "-";
    if (!ok) {
      cudaStream_t r;
      CK(cudaStreamCreateWithFlags(&r, cudaStreamNonBlocking));
      setFlag<<<1, 1, 0, r>>>(flag);
      rel = finished(r, 2000) ? "kernel" : "stuck";
      printf("CHAN X=%s Y=%s W=%s k=%d blocked=1 released=%s\n", X, Y, W, k, rel);
      fflush(stdout);
      if (!strcmp(rel, "stuck")) _exit(3);
      if (!finished(s[0], 2000) || !finished(s[k], 2000)) { printf("CHAN still stuck after release k=%d\n", k); fflush(stdout); _exit(3); }
      continue;
    }
    if (!finished(s[0], 2000)) { printf("CHAN s0 did not finish k=%d\n", k); fflush(stdout); _exit(3); }
    printf("CHAN X=%s Y=%s W=%s k=%d blocked=0\n", X, Y, W, k);
  }
  return 0;
}
