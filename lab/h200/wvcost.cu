// lab/h200/wvcost.cu: what a flag operation costs inside a graph replay (the 8 B floor).
//   chain KIND   a graph of K nodes of one kind on one stream, replayed; us per node
//   hop SIGNAL   two streams, each a graph of K round trips (signal the other, wait for
//                its signal, reset the word); us per hop (half a round trip)
// Kinds: wv (batch: one write-value), wvnb (one write-value, no memory barrier), wv3
// (three), wv3nb (the first with a barrier, two without), wr (wait that holds + reset),
// wrnb (the reset without barrier), w3r3 (three waits, three resets), cp4 (a 4-byte copy).
// Signals: wv, wvnb, cp4 (a 4-byte copy of a device word holding 1).
// Build on the GPU machine: nvcc -O2 -o /tmp/wvcost lab/h200/wvcost.cu -lcuda
#include <cstring>
#include <string>
#include <vector>
#include "probe.h"

static const int K = 200, R = 20;

static CUstreamBatchMemOpParams wr(CUdeviceptr a, unsigned v, bool nb) {
  CUstreamBatchMemOpParams p;
  memset(&p, 0, sizeof p);
  p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  p.writeValue.address = a;
  p.writeValue.value = v;
  p.writeValue.flags = nb ? CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER : CU_STREAM_WRITE_VALUE_DEFAULT;
  return p;
}

static CUstreamBatchMemOpParams wt(CUdeviceptr a, unsigned v, unsigned cond) {
  CUstreamBatchMemOpParams p;
  memset(&p, 0, sizeof p);
  p.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  p.waitValue.address = a;
  p.waitValue.value = v;
  p.waitValue.flags = cond;
  return p;
}

static void batch(cudaStream_t s, std::vector<CUstreamBatchMemOpParams> ops) {
  CU(cuStreamBatchMemOp((CUstream)s, (unsigned)ops.size(), ops.data(), 0));
}

static double replay(std::vector<cudaGraphExec_t> gs, std::vector<cudaStream_t> ss) {
  for (size_t i = 0; i < gs.size(); i++) CK(cudaGraphLaunch(gs[i], ss[i]));  // warm-up
  CK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < R; r++)
    for (size_t i = 0; i < gs.size(); i++) CK(cudaGraphLaunch(gs[i], ss[i]));
  CK(cudaDeviceSynchronize());
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / R;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    printf("usage: wvcost chain|hop KIND\n");
    return 2;
  }
  std::string mode = argv[1], kind = argv[2];
  CK(cudaSetDevice(0));
  CUdeviceptr w;
  CU(cuMemAlloc(&w, 4096));
  CU(cuMemsetD8(w, 0, 4096));
  CUdeviceptr one = w + 1024, dst = w + 2048;
  unsigned v1 = 1;
  CU(cuMemcpyHtoD(one, &v1, 4));
  cudaStream_t a, b;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t x, y;
  if (mode == "chain") {
    CK(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < K; i++) {
      CUdeviceptr p = w + 4 * (i % 16);
      if (kind == "wv") batch(a, {wr(p, 0, false)});
      else if (kind == "wvnb") batch(a, {wr(p, 0, true)});
      else if (kind == "wv3") batch(a, {wr(p, 0, false), wr(p + 64, 0, false), wr(p + 128, 0, false)});
      else if (kind == "wv3nb") batch(a, {wr(p, 0, false), wr(p + 64, 0, true), wr(p + 128, 0, true)});
      else if (kind == "wr") batch(a, {wt(p, 0, CU_STREAM_WAIT_VALUE_GEQ), wr(p, 0, false)});
      else if (kind == "wrnb") batch(a, {wt(p, 0, CU_STREAM_WAIT_VALUE_GEQ), wr(p, 0, true)});
      else if (kind == "w3r3")
        batch(a, {wt(p, 0, CU_STREAM_WAIT_VALUE_GEQ), wt(p + 64, 0, CU_STREAM_WAIT_VALUE_GEQ),
                  wt(p + 128, 0, CU_STREAM_WAIT_VALUE_GEQ), wr(p, 0, false), wr(p + 64, 0, false), wr(p + 128, 0, false)});
      else if (kind == "cp4") CU(cuMemcpyAsync(dst + 4 * (i % 16), one, 4, (CUstream)a));
      else { printf("unknown kind %s\n", kind.c_str()); return 2; }
    }
    CK(cudaStreamEndCapture(a, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    printf("chain %-6s %.2f us per node\n", kind.c_str(), replay({x}, {a}) / K);
    return 0;
  }
  // hop: A's word at w, B's at w+64 (each waits on its own, the peer writes it).
  CUdeviceptr wa = w, wb = w + 64;
  auto sig = [&](cudaStream_t s, CUdeviceptr to) {
    if (kind == "wv") batch(s, {wr(to, 1, false)});
    else if (kind == "wvnb") batch(s, {wr(to, 1, true)});
    else CU(cuMemcpyAsync(to, one, 4, (CUstream)s));
  };
  auto await = [&](cudaStream_t s, CUdeviceptr mine) {
    batch(s, {wt(mine, 1, CU_STREAM_WAIT_VALUE_EQ), wr(mine, 0, kind == "wvnb")});
  };
  CK(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < K; i++) {
    sig(a, wb);
    await(a, wa);
  }
  CK(cudaStreamEndCapture(a, &g));
  CK(cudaGraphInstantiate(&x, g, 0));
  CK(cudaStreamBeginCapture(b, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < K; i++) {
    await(b, wb);
    sig(b, wa);
  }
  CK(cudaStreamEndCapture(b, &g));
  CK(cudaGraphInstantiate(&y, g, 0));
  printf("hop %-6s %.2f us per hop\n", kind.c_str(), replay({x, y}, {a, b}) / (2 * K));
  return 0;
}
