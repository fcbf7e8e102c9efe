// lab/h200/copyseq.cu: is a chain of large copies on one stream slower than one copy of the same bytes?
// (Scatter's and Gather's root copies its n blocks one after another.) Times, best of 7, with events:
// one 256 MiB copy; 4 x 64 MiB chained on one stream; the same as a captured graph (one launch);
// 2 streams x 2 x 64 MiB at once. Build and run on the GPU machine:
//   nvcc -O2 -o copyseq lab/h200/copyseq.cu && ./copyseq
#include <cstdio>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
static const size_t B = 64ull << 20;
int main() {
  char *src, *dst;
  CK(cudaMalloc(&src, 4 * B)); CK(cudaMalloc(&dst, 4 * B));
  CK(cudaMemset(src, 1, 4 * B)); CK(cudaMemset(dst, 2, 4 * B));
  cudaStream_t s, s2; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t t0, t1, f, j; CK(cudaEventCreate(&t0)); CK(cudaEventCreate(&t1));
  CK(cudaEventCreateWithFlags(&f, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&j, cudaEventDisableTiming));
  cudaGraph_t g; cudaGraphExec_t x;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 4; i++) CK(cudaMemcpyAsync(dst + i * B, src + i * B, B, cudaMemcpyDeviceToDevice, s));
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&x, g, 0));
  const char* names[] = {"one 256 MiB copy", "4 x 64 MiB chained", "4 x 64 MiB chained, graph", "2 streams x 2 x 64 MiB"};
  for (int m = 0; m < 4; m++) {
    float best = 1e30f;
    for (int it = 0; it < 8; it++) {
      CK(cudaEventRecord(t0, s));
      if (m == 0) CK(cudaMemcpyAsync(dst, src, 4 * B, cudaMemcpyDeviceToDevice, s));
      if (m == 1) for (int i = 0; i < 4; i++) CK(cudaMemcpyAsync(dst + i * B, src + i * B, B, cudaMemcpyDeviceToDevice, s));
      if (m == 2) CK(cudaGraphLaunch(x, s));
      if (m == 3) {
        CK(cudaEventRecord(f, s)); CK(cudaStreamWaitEvent(s2, f));
        for (int i = 0; i < 2; i++) CK(cudaMemcpyAsync(dst + i * B, src + i * B, B, cudaMemcpyDeviceToDevice, s));
        for (int i = 2; i < 4; i++) CK(cudaMemcpyAsync(dst + i * B, src + i * B, B, cudaMemcpyDeviceToDevice, s2));
        CK(cudaEventRecord(j, s2)); CK(cudaStreamWaitEvent(s, j));
      }
      CK(cudaEventRecord(t1, s)); CK(cudaEventSynchronize(t1));
      float ms; CK(cudaEventElapsedTime(&ms, t0, t1));
      if (it > 0 && ms < best) best = ms;
    }
    printf("copyseq %-28s %8.1f us  %7.1f GB/s\n", names[m], best * 1000, 4 * B / (best * 1e-3) / 1e9);
  }
  return 0;
}
