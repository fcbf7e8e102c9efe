// lab/h200/zerocopy.cu: why did captured waits that zero their word with a copy after the
// batch (instead of a write-value in it) hang on the H200 (docs/measurements.md, thirteenth
// session)? Two streams, a root A and a peer B, run K round trips of the hub's shape:
//   B: signal (4-byte copy of ones into A's word arr), wait for A's word out, reset out
//   A: wait for arr, reset arr, release (4-byte copy of ones into out)
// How a wait's word is reset, by MODE:
//   reset  a write-value of 0 in the wait's batch (the shipped engine)
//   zero   a batch of the wait alone, then a 4-byte copy of a zero word (the candidate)
//   zeroA  only A zeroes by copy, B resets in its batch
//   zeroB  only B zeroes by copy, A resets in its batch
//   flush  zero, the waits with CU_STREAM_WAIT_VALUE_FLUSH
// HOW: eager (enqueued directly, K round trips) or graph (each stream's K round trips captured
// once, replayed R times). Prints us per round trip, or HANG (exit 3) when the streams do not
// finish within 3 s. Build and run on the GPU machine:
//   nvcc -O2 -o /tmp/zerocopy lab/h200/zerocopy.cu -lcuda && /tmp/zerocopy zero graph
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>
#include "probe.h"

static const int K = 50, R = 20;
static std::string mode;
static CUdeviceptr arr, out, ones, zeros;

static CUstreamBatchMemOpParams op(bool wait, CUdeviceptr a, unsigned v, unsigned flags) {
  CUstreamBatchMemOpParams p;
  memset(&p, 0, sizeof p);
  if (wait) {
    p.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    p.waitValue.address = a;
    p.waitValue.value = v;
    p.waitValue.flags = flags;
  } else {
    p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    p.writeValue.address = a;
    p.writeValue.value = v;
  }
  return p;
}

// waitReset: wait for word w to be 1 and reset it, as mode says for this side.
static void waitReset(cudaStream_t s, CUdeviceptr w, bool root) {
  bool byCopy = mode == "zero" || mode == "flush" || (mode == "zeroA" && root) || (mode == "zeroB" && !root);
  unsigned f = CU_STREAM_WAIT_VALUE_GEQ | (mode == "flush" ? CU_STREAM_WAIT_VALUE_FLUSH : 0);
  std::vector<CUstreamBatchMemOpParams> ops{op(true, w, 1, f)};
  if (!byCopy) ops.push_back(op(false, w, 0, 0));
  CU(cuStreamBatchMemOp((CUstream)s, (unsigned)ops.size(), ops.data(), 0));
  if (byCopy) CU(cuMemcpyAsync(w, zeros, 4, (CUstream)s));
}

static void trips(cudaStream_t a, cudaStream_t b, bool root) {
  for (int k = 0; k < K; k++) {
    if (root) {
      waitReset(a, arr, true);
      CU(cuMemcpyAsync(out, ones, 4, (CUstream)a));
    } else {
      CU(cuMemcpyAsync(arr, ones, 4, (CUstream)b));
      waitReset(b, out, false);
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    printf("usage: zerocopy reset|zero|zeroA|zeroB|flush eager|graph\n");
    return 2;
  }
  mode = argv[1];
  bool graph = std::string(argv[2]) == "graph";
  CK(cudaSetDevice(0));
  CUdeviceptr base;
  CU(cuMemAlloc(&base, 4096));
  CU(cuMemsetD8(base, 0, 4096));
  arr = base, out = base + 128, ones = base + 256, zeros = base + 384;
  CU(cuMemsetD32(ones, 1, 1));
  cudaStream_t a, b;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaGraphExec_t ga = nullptr, gb = nullptr;
  if (graph) {
    for (int side = 0; side < 2; side++) {
      cudaStream_t s = side ? b : a;
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
      trips(a, b, side == 0);
      CK(cudaStreamEndCapture(s, &g));
      CK(cudaGraphInstantiate(side ? &gb : &ga, g, 0));
    }
  }
  int reps = graph ? R : 1;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; r++) {
    if (graph) {
      CK(cudaGraphLaunch(ga, a));
      CK(cudaGraphLaunch(gb, b));
    } else {
      trips(a, b, true);
      trips(a, b, false);
    }
  }
  if (!finished(a, 3000) || !finished(b, 3000)) {
    unsigned w[2];
    CU(cuMemcpyDtoH(&w[0], arr, 4));  // the default context stream is not blocked by a and b
    CU(cuMemcpyDtoH(&w[1], out, 4));
    printf("zerocopy %-5s %-5s HANG (arr %u, out %u)\n", argv[1], argv[2], w[0], w[1]);
    fflush(stdout);
    _exit(3);
  }
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  printf("zerocopy %-5s %-5s %7.2f us per round trip\n", argv[1], argv[2], us / (reps * K));
  return 0;
}
