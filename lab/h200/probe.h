// lab/h200/probe.h: what the stream probes (chanblock.cu, chanpark.cu) share: error checks
// that exit 1 naming the call, and a bounded wait for a stream.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <cuda.h>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CU(x) do { CUresult e_ = (x); if (e_ != CUDA_SUCCESS) { const char* m; cuGetErrorString(e_, &m); printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, m); exit(1); } } while (0)

// finished polls s until its work is done (true) or ms milliseconds passed (false).
static bool finished(cudaStream_t s, int ms) {
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return true;
    if (q != cudaErrorNotReady) CK(q);
    if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(ms)) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}
