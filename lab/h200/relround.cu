// lab/h200/relround.cu: why does an eager 64 MiB Scatter in released rounds (the root releases,
// every rank copies its block on its own stream, the peers arrive) take about 10 us more per
// collective than graph replays of the same work at 4 ranks? One process, one stream per rank, the
// same ops as internal/ce, each chain variant timed eager and (where it can be captured) as one
// graph per rank per collective:
//   nosync    the copies alone (no order between collectives but stream order)
//   value     flags by write-value: the root writes every peer's release word, each peer waits
//             and resets it, copies, writes its arrival word; the root copies its own block,
//             waits for the arrivals and resets them (constant 1 and resets, as graphs need)
//   copy      the same, the flags written by 4-byte copies of a device word holding 1
//   event     eager only: CUDA events (root records, peers wait; peers record, root waits);
//             the host issues the root's release, the peers, then the root's waits
// Usage: relround [ranks=4] [KiB per block=65536] [iters=40]. Build and run on the GPU machine:
//   nvcc -O2 -o relround lab/h200/relround.cu -lcuda && ./relround 4 65536
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cuda.h>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)
#define CU(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char* m; cuGetErrorString(e, &m); printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, m); exit(1); } } while (0)

enum { NOSYNC, VALUE, COPY, EVENT, NMODES };
static const char* names[] = {"nosync", "value", "copy", "event"};
static int n;
static size_t B;
static char *src, *dst;           // the root's send (n blocks); every rank's recv (one block each)
static CUdeviceptr rel, arr, one;  // rel[p], arr[p]: u32 per rank; one: a word holding 1
static cudaStream_t st[16];
static cudaEvent_t evRel, evDone[16];

static void flag(int mode, cudaStream_t s, CUdeviceptr a) {
  if (mode == VALUE) CU(cuStreamWriteValue32((CUstream)s, a, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  else CK(cudaMemcpyAsync((void*)a, (void*)one, 4, cudaMemcpyDeviceToDevice, s));
}
static void waitReset(cudaStream_t s, CUdeviceptr a) {
  CU(cuStreamWaitValue32((CUstream)s, a, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU(cuStreamWriteValue32((CUstream)s, a, 0, CU_STREAM_WRITE_VALUE_DEFAULT));
}
static void copyBlock(int r, cudaStream_t s) {
  CK(cudaMemcpyAsync(dst + r * B, src + r * B, B, cudaMemcpyDeviceToDevice, s));
}

// One rank's part of one collective (not EVENT).
static void rankPart(int mode, int r, cudaStream_t s) {
  if (mode != NOSYNC && r == 0)
    for (int p = 1; p < n; p++) flag(mode, s, rel + 4 * p);
  if (mode != NOSYNC && r != 0) waitReset(s, rel + 4 * r);
  copyBlock(r, s);
  if (mode != NOSYNC && r != 0) flag(mode, s, arr + 4 * r);
  if (mode != NOSYNC && r == 0)
    for (int p = 1; p < n; p++) waitReset(s, arr + 4 * p);
}

static void eagerOnce(int mode) {
  if (mode != EVENT) {
    for (int r = 0; r < n; r++) rankPart(mode, r, st[r]);
    return;
  }
  CK(cudaEventRecord(evRel, st[0]));
  copyBlock(0, st[0]);
  for (int p = 1; p < n; p++) {
    CK(cudaStreamWaitEvent(st[p], evRel, 0));
    copyBlock(p, st[p]);
    CK(cudaEventRecord(evDone[p], st[p]));
  }
  for (int p = 1; p < n; p++) CK(cudaStreamWaitEvent(st[0], evDone[p], 0));
}

static double now() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static void syncAll() { for (int r = 0; r < n; r++) CK(cudaStreamSynchronize(st[r])); }

int main(int argc, char** argv) {
  n = argc > 1 ? atoi(argv[1]) : 4;
  B = (size_t)(argc > 2 ? atoi(argv[2]) : 65536) << 10;
  int iters = argc > 3 ? atoi(argv[3]) : 40;
  if (n < 2 || n > 16) return 2;
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&src, n * B)); CK(cudaMalloc(&dst, n * B));
  CK(cudaMemset(src, 1, n * B)); CK(cudaMemset(dst, 2, n * B));
  void* f;
  CK(cudaMalloc(&f, 4 * 64)); CK(cudaMemset(f, 0, 4 * 64));
  rel = (CUdeviceptr)f; arr = rel + 4 * 16; one = rel + 4 * 32;
  unsigned int v1 = 1;
  CK(cudaMemcpy((void*)one, &v1, 4, cudaMemcpyHostToDevice));
  for (int r = 0; r < n; r++) CK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&evRel, cudaEventDisableTiming));
  for (int r = 0; r < n; r++) CK(cudaEventCreateWithFlags(&evDone[r], cudaEventDisableTiming));
  // One graph per rank per mode: that rank's part of one collective.
  cudaGraphExec_t gx[NMODES][16] = {};
  for (int m = NOSYNC; m <= COPY; m++)
    for (int r = 0; r < n; r++) {
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(st[r], cudaStreamCaptureModeThreadLocal));
      rankPart(m, r, st[r]);
      CK(cudaStreamEndCapture(st[r], &g));
      CK(cudaGraphInstantiate(&gx[m][r], g, 0));
      CK(cudaGraphDestroy(g));
    }
  double ideal = n * B / 1e3;  // bytes / (GB/s) -> us, printed as a rate below
  printf("relround ranks=%d block=%zu KiB iters=%d (us per collective, best of 3 runs; GB/s of n blocks)\n", n, B >> 10, iters);
  for (int m = 0; m < NMODES; m++)
    for (int graph = 0; graph < 2; graph++) {
      if (graph && m == EVENT) continue;
      double best = 1e30;
      for (int run = 0; run < 4; run++) {
        for (int w = 0; w < 3; w++) {
          if (graph) for (int r = 0; r < n; r++) CK(cudaGraphLaunch(gx[m][r], st[r]));
          else eagerOnce(m);
        }
        syncAll();
        double t0 = now();
        for (int i = 0; i < iters; i++) {
          if (graph) for (int r = 0; r < n; r++) CK(cudaGraphLaunch(gx[m][r], st[r]));
          else eagerOnce(m);
        }
        syncAll();
        double us = (now() - t0) / iters;
        if (run > 0 && us < best) best = us;
      }
      printf("relround %-7s %-5s %9.1f us  %7.1f GB/s\n", names[m], graph ? "graph" : "eager", best, ideal / best);
    }
  return 0;
}
