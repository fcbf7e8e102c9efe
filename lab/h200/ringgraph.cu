// lab/h200/ringgraph.cu: cecoll's captured point-to-point ring without cecoll, to see whether
// graphs of many such calls hang on one device by themselves (docs/performance.md, "Graphs of
// many captured calls"). N rank streams on one device; a call of rank r, as the engine captures
// an 8 B grouped sendrecv (send to r+1, receive from r-1), on the graph words of array a (the
// calls alternate arrays):
//   credit: r tells r-1 it may send (SIG: a 4-byte copy of 1 into r-1's credit word, or a
//           write-value); a batch: wait for r's own credit word, reset it; the 8-byte data copy
//           into r+1's buffer; data: the same signal into r+1's data word; a batch: wait for
//           r's data word, reset it.
// LAUNCH: one (one thread captures every rank's stream into a graph of its own and launches
//   them one after another, as cecoll-perf -g), threads (a thread per rank captures and
//   launches its own, after a barrier, as -t), all (one graph holding every rank: a capture
//   forked from an origin stream into the rank streams and joined back, one launch).
// UPLOAD=1: every graph uploaded (cudaGraphUpload) and its stream synchronised before any launch.
// JOIN=1: each call runs on a second stream of the rank, forked from the rank's stream before it
//   and joined back after it by events (as the engine runs a call on its own stream).
// Prints "PASS us/call" or "HANG" (exit 3) when the streams have not finished after 4 s.
// Build and run on the GPU machine:
//   nvcc -O2 -o /tmp/ringgraph lab/h200/ringgraph.cu -lcuda -lpthread && /tmp/ringgraph copy one 3 20
#include <cstring>
#include <pthread.h>
#include <string>
#include <unistd.h>
#include <vector>
#include "probe.h"

static int N, K;
static std::string sig, launch;
static CUdeviceptr words, ones, bufs; // words: [2 arrays][credit, data][N]; bufs: 64 B per rank
static std::vector<cudaStream_t> st, es;
static std::vector<cudaEvent_t> evIn, evOut;
static bool upload, join;
static std::vector<cudaGraphExec_t> ex;
static pthread_barrier_t bar;

static CUdeviceptr word(int arr, int kind, int r) { return words + 4 * ((arr * 2 + kind) * N + r); }

static void sendSignal(CUstream s, CUdeviceptr w) {
  if (sig == "copy") {
    CU(cuMemcpyDtoDAsync(w, ones, 4, s));
    return;
  }
  CUstreamBatchMemOpParams p;
  memset(&p, 0, sizeof p);
  p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  p.writeValue.address = w;
  p.writeValue.value = 1;
  CU(cuStreamBatchMemOp(s, 1, &p, 0));
}

static void waitReset(CUstream s, CUdeviceptr w) {
  CUstreamBatchMemOpParams p[2];
  memset(p, 0, sizeof p);
  p[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  p[0].waitValue.address = w;
  p[0].waitValue.value = 1;
  p[0].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  p[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  p[1].writeValue.address = w;
  p[1].writeValue.value = 0;
  CU(cuStreamBatchMemOp(s, 2, p, 0));
}

// calls enqueues rank r's K calls on its stream.
static void calls(int r) {
  CUstream s = (CUstream)(join ? es[r] : st[r]);
  int prev = (r + N - 1) % N, next = (r + 1) % N;
  for (int k = 0; k < K; k++) {
    int a = k % 2;
    if (join) {
      CK(cudaEventRecord(evIn[r], st[r]));
      CK(cudaStreamWaitEvent(es[r], evIn[r], 0));
    }
    sendSignal(s, word(a, 0, prev));
    waitReset(s, word(a, 0, r));
    CU(cuMemcpyDtoDAsync(bufs + 64 * next + 8 * (a + 2), bufs + 64 * r, 8, s));
    sendSignal(s, word(a, 1, next));
    waitReset(s, word(a, 1, r));
    if (join) {
      CK(cudaEventRecord(evOut[r], es[r]));
      CK(cudaStreamWaitEvent(st[r], evOut[r], 0));
    }
  }
}

// ready uploads rank r's graph where UPLOAD asks it.
static void ready(int r) {
  if (!upload) return;
  CK(cudaGraphUpload(ex[r], st[r]));
  CK(cudaStreamSynchronize(st[r]));
}

static void captureOne(int r) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(st[r], cudaStreamCaptureModeThreadLocal));
  calls(r);
  CK(cudaStreamEndCapture(st[r], &g));
  CK(cudaGraphInstantiate(&ex[r], g, 0));
  ready(r);
}

static void* rankThread(void* arg) {
  int r = (int)(long)arg;
  CK(cudaSetDevice(0));
  captureOne(r);
  pthread_barrier_wait(&bar);
  CK(cudaGraphLaunch(ex[r], st[r]));
  return nullptr;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    printf("usage: ringgraph copy|wv one|threads|all N K\n");
    return 2;
  }
  sig = argv[1], launch = argv[2], N = atoi(argv[3]), K = atoi(argv[4]);
  CK(cudaSetDevice(0));
  CU(cuMemAlloc(&words, 4 * 4 * N));
  CU(cuMemsetD8(words, 0, 4 * 4 * N));
  CU(cuMemAlloc(&ones, 4));
  CU(cuMemsetD32(ones, 1, 1));
  CU(cuMemAlloc(&bufs, 64 * N));
  upload = getenv("UPLOAD") && atoi(getenv("UPLOAD"));
  join = getenv("JOIN") && atoi(getenv("JOIN"));
  st.resize(N), es.resize(N), evIn.resize(N), evOut.resize(N);
  ex.resize(N);
  for (int r = 0; r < N; r++) {
    CK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&es[r], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&evIn[r], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&evOut[r], cudaEventDisableTiming));
  }
  auto t0 = std::chrono::steady_clock::now();
  if (launch == "one") {
    for (int r = 0; r < N; r++) CK(cudaStreamBeginCapture(st[r], cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < N; r++) calls(r);
    std::vector<cudaGraph_t> g(N);
    for (int r = 0; r < N; r++) CK(cudaStreamEndCapture(st[r], &g[r]));
    for (int r = 0; r < N; r++) CK(cudaGraphInstantiate(&ex[r], g[r], 0)); // after the last capture ends
    for (int r = 0; r < N; r++) ready(r);
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < N; r++) CK(cudaGraphLaunch(ex[r], st[r]));
  } else if (launch == "threads") {
    pthread_barrier_init(&bar, nullptr, N);
    std::vector<pthread_t> th(N);
    for (int r = 0; r < N; r++) pthread_create(&th[r], nullptr, rankThread, (void*)(long)r);
    for (int r = 0; r < N; r++) pthread_join(th[r], nullptr);
  } else {
    cudaStream_t o;
    cudaEvent_t fork, join[64];
    CK(cudaStreamCreateWithFlags(&o, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaStreamBeginCapture(o, cudaStreamCaptureModeThreadLocal));
    CK(cudaEventRecord(fork, o));
    for (int r = 0; r < N; r++) CK(cudaStreamWaitEvent(st[r], fork, 0));
    for (int r = 0; r < N; r++) calls(r);
    for (int r = 0; r < N; r++) {
      CK(cudaEventCreateWithFlags(&join[r], cudaEventDisableTiming));
      CK(cudaEventRecord(join[r], st[r]));
      CK(cudaStreamWaitEvent(o, join[r], 0));
    }
    cudaGraph_t g;
    CK(cudaStreamEndCapture(o, &g));
    CK(cudaGraphInstantiate(&ex[0], g, 0));
    if (upload) {
      CK(cudaGraphUpload(ex[0], o));
      CK(cudaStreamSynchronize(o));
    }
    t0 = std::chrono::steady_clock::now();
    CK(cudaGraphLaunch(ex[0], o));
    st[0] = o; // the one stream to wait for
    N = 1;
  }
  for (int r = 0; r < N; r++)
    if (!finished(st[r], 4000)) {
      printf("HANG %s %s %s K=%d (stream %d not done after 4 s)\n", argv[1], argv[2], argv[3], K, r);
      fflush(stdout);
      _exit(3);
    }
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  printf("PASS %s %s %s K=%d %.1f us/call\n", argv[1], argv[2], argv[3], K, us / K);
  return 0;
}
