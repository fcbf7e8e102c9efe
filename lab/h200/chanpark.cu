// lab/h200/chanpark.cu: how many streams of one process can be parked on stream waits before
// other work of the GPU stalls? internal/hip/nvidia's raiseConnections rests on the finding that
// once about CUDA_DEVICE_MAX_CONNECTIONS streams are parked, a peer's releasing write stalls too
// (a single parked stream blocks nobody: chanblock.cu). This maps the threshold.
//
// chanpark P Q W [probe=P]: creates P+1 non-blocking streams in order; every stream but index
// `probe` gets Q times "wait(its own flag word >= 1), then W" (W: none, copy = a 4-byte copy,
// value = a write-value); 5 ms later the probe stream writes a word (write-value). Prints
//   PARK P= Q= W= probe= stalled=0|1
// stalled=1 when the probe's write has not finished 500 ms later; the process then exits 3
// without releasing (run it under timeout). Otherwise the probe stream releases every flag.
// CHANPARK_LATE=1: cuInit first, then set CUDA_DEVICE_MAX_CONNECTIONS=32, then make the context
// (stalls from P=8 mean the driver read the variable at cuInit). CHANPARK_GRAPH=1: each parked
// stream's work is captured into a graph and launched on it (CHANPARK_REPLAYS=R: R times);
// CHANPARK_TRACE=1 prints a line per launch (a launch can block on the host).
// Which resource does a parked graph hold? CHANPARK_PREINST=1 instantiates every
// graph before the first launch; CHANPARK_UPLOAD=1 also uploads each (cudaGraphUpload, then a
// sync) before the first launch; CHANPARK_IDLE=X creates X more streams that never get work.
// Build on the GPU machine: nvcc -O2 -o chanpark lab/h200/chanpark.cu -lcuda
#include <cstring>
#include <unistd.h>
#include "probe.h"

static void launch(cudaGraphExec_t x, cudaStream_t s, int i, int reps) {
  for (int k = 0; k < reps; k++) {
    if (cudaGraphLaunch(x, s) != cudaSuccess) { printf("PARK launch %d failed\n", i); fflush(stdout); _exit(4); }
    if (getenv("CHANPARK_TRACE")) { printf("launched %d\n", i); fflush(stdout); }
  }
}

int main(int argc, char** argv) {
  if (argc < 4) { printf("usage: chanpark P Q W [probe]\n"); return 2; }
  int P = atoi(argv[1]), Q = atoi(argv[2]);
  const char* W = argv[3];
  int probe = argc > 4 ? atoi(argv[4]) : P;
  if (getenv("CHANPARK_LATE")) {  // does the driver read the variable at cuInit or at context creation?
    CU(cuInit(0));
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  }
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  unsigned *flags, *scratch;
  CK(cudaMalloc(&flags, 4 * (P + 1) * Q));
  CK(cudaMalloc(&scratch, 4 * 64));
  CK(cudaMemset(flags, 0, 4 * (P + 1) * Q));
  CK(cudaMemset(scratch, 0, 4 * 64));
  CK(cudaDeviceSynchronize());
  cudaStream_t* s = new cudaStream_t[P + 1];
  for (int i = 0; i <= P; i++) CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
  bool graph = getenv("CHANPARK_GRAPH") != nullptr;
  bool preinst = getenv("CHANPARK_PREINST") || getenv("CHANPARK_UPLOAD"), upload = getenv("CHANPARK_UPLOAD");
  int idle = getenv("CHANPARK_IDLE") ? atoi(getenv("CHANPARK_IDLE")) : 0;
  for (int i = 0; i < idle; i++) {
    cudaStream_t x;
    CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  }
  int reps = getenv("CHANPARK_REPLAYS") ? atoi(getenv("CHANPARK_REPLAYS")) : 1;
  cudaGraphExec_t* xs = new cudaGraphExec_t[P + 1];
  for (int i = 0; i <= P; i++) {
    if (i == probe) continue;
    if (graph) CK(cudaStreamBeginCapture(s[i], cudaStreamCaptureModeThreadLocal));
    for (int q = 0; q < Q; q++) {
      CU(cuStreamWaitValue32((CUstream)s[i], (CUdeviceptr)(flags + i * Q + q), 1, CU_STREAM_WAIT_VALUE_GEQ));
      if (!strcmp(W, "copy")) CK(cudaMemcpyAsync(scratch + 1, scratch + 2, 4, cudaMemcpyDeviceToDevice, s[i]));
      else if (!strcmp(W, "value"))
        CU(cuStreamWriteValue32((CUstream)s[i], (CUdeviceptr)(scratch + 3), 1, CU_STREAM_WRITE_VALUE_DEFAULT));
    }
    if (graph) {
      cudaGraph_t g;
      CK(cudaStreamEndCapture(s[i], &g));
      CK(cudaGraphInstantiate(&xs[i], g, 0));
      if (upload) {
        CK(cudaGraphUpload(xs[i], s[i]));
        CK(cudaStreamSynchronize(s[i]));
      }
      if (!preinst) launch(xs[i], s[i], i, reps);
    }
  }
  if (graph && preinst)
    for (int i = 0; i <= P; i++)
      if (i != probe) launch(xs[i], s[i], i, reps);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CU(cuStreamWriteValue32((CUstream)s[probe], (CUdeviceptr)scratch, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  bool ok = finished(s[probe], 500);
  printf("PARK P=%d Q=%d W=%s probe=%d stalled=%d\n", P, Q, W, probe, ok ? 0 : 1);
  fflush(stdout);
  if (!ok) _exit(3);
  for (int j = 0; j < (P + 1) * Q; j++)
    CU(cuStreamWriteValue32((CUstream)s[probe], (CUdeviceptr)(flags + j), 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  for (int i = 0; i <= P; i++)
    if (!finished(s[i], 2000)) { printf("PARK stream %d did not finish after release\n", i); fflush(stdout); _exit(3); }
  return 0;
}
