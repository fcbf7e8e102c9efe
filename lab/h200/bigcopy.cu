// lab/h200/bigcopy.cu: what bounds a large AllGather on one GPU: its copies, or its syncs?
// N "ranks" on one device, a stream each (and a second stream for split2), the AllGather's
// pushes (rank r's block into every peer's recv at r*chunk; out of place its own too), timed
// against the ceiling cecoll-perf uses (one copy per rank of the rank's bytes, concurrently).
// Modes, each per iteration of R, in alternating rounds:
//   ceil      one copy per rank of all its bytes
//   pieces    one cudaMemcpyAsync per block, on the rank's stream
//   batch     one cudaMemcpyBatchAsync per rank (src order stream, prefer overlap: the engine's)
//   batchnf   the same without the prefer-overlap flag
//   split2    pieces alternating over two streams per rank (fork and join by events)
//   sync      pieces inside the protocol's round trip: each rank records, waits for every
//             peer's record, copies, records, waits for every peer's (two hops per iteration)
//   syncsplit sync with split2's copies
//   seed      the native reference: the seed's eager round (NCCL 2.28.3's src/ce_coll.cc,
//             ncclMemOpSync, UC; docs/protocol.md): per
//             rank one cuStreamBatchMemOp of N-1 write-values into the peers' ready words and
//             N-1 waits (EQ) on its own, a batch of the pushes, then the same on the complete
//             words (sequence numbers never repeat, so no resets: its cheapest form)
// Build and run on the GPU machine: nvcc -O2 -o /tmp/bigcopy lab/h200/bigcopy.cu -lcuda
//   /tmp/bigcopy N CHUNK_MIB INPLACE [ROUNDS [MODE,MODE,...]]   (ceil always runs first)
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>
#include "probe.h"

static const int R = 10;
static int N;
static size_t C;
static bool inplace;
static std::vector<char*> recv, send, scratch;
static std::vector<cudaStream_t> cs, s2;
static std::vector<cudaEvent_t> st, en, forkev, joinev;
static uint32_t* words;  // the seed's flags: ready [N][N] then complete [N][N]; [p][r] is r's word at p
static uint32_t seq;

struct Copy { char *dst, *src; size_t n; };

// pushes of rank r, its own block first (out of place), then peers from r+1 round the ring.
static std::vector<Copy> pushes(int r) {
  std::vector<Copy> v;
  char* blk = inplace ? recv[r] + r * C : send[r];
  if (!inplace) v.push_back({recv[r] + r * C, blk, C});
  for (int k = 1; k < N; k++) {
    int p = (r + k) % N;
    v.push_back({recv[p] + r * C, blk, C});
  }
  return v;
}

static void batch(const std::vector<Copy>& v, cudaStream_t s, bool overlap) {
  std::vector<void*> d, sr;
  std::vector<size_t> n;
  for (auto& c : v) d.push_back(c.dst), sr.push_back(c.src), n.push_back(c.n);
  cudaMemcpyAttributes a;
  memset(&a, 0, sizeof a);
  a.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  a.flags = overlap ? cudaMemcpyFlagPreferOverlapWithCompute : 0;
  size_t idx = 0;
#if CUDART_VERSION >= 13000
  CK(cudaMemcpyBatchAsync((const void* const*)d.data(), (const void* const*)sr.data(), n.data(), v.size(), &a, &idx, 1, s));
#else
  size_t fail = 0;
  CK(cudaMemcpyBatchAsync(d.data(), sr.data(), n.data(), v.size(), &a, &idx, 1, &fail, s));
#endif
}

static void copies(int r, const std::string& how) {
  auto v = pushes(r);
  if (how == "batch" || how == "batchnf") return batch(v, cs[r], how == "batch");
  if (how != "split") {
    for (auto& c : v) CK(cudaMemcpyAsync(c.dst, c.src, c.n, cudaMemcpyDeviceToDevice, cs[r]));
    return;
  }
  CK(cudaEventRecord(forkev[r], cs[r]));
  CK(cudaStreamWaitEvent(s2[r], forkev[r]));
  for (size_t i = 0; i < v.size(); i++)
    CK(cudaMemcpyAsync(v[i].dst, v[i].src, v[i].n, cudaMemcpyDeviceToDevice, i % 2 ? s2[r] : cs[r]));
  CK(cudaEventRecord(joinev[r], s2[r]));
  CK(cudaStreamWaitEvent(cs[r], joinev[r]));
}

static void sync(std::vector<cudaEvent_t>& ev) {
  for (int r = 0; r < N; r++) CK(cudaEventRecord(ev[r], cs[r]));
  for (int r = 0; r < N; r++)
    for (int p = 0; p < N; p++)
      if (p != r) CK(cudaStreamWaitEvent(cs[r], ev[p]));
}

// seedSync is ncclPrepUCSync + ncclMemOpSync for every rank: write seq into each peer's word for
// this rank, wait until each peer's word here holds seq.
static void seedSync(bool complete) {
  uint32_t* w = words + (complete ? N * N : 0);
  seq++;
  std::vector<CUstreamBatchMemOpParams> ops(2 * (N - 1));
  for (int r = 0; r < N; r++) {
    size_t k = 0;  // ops[k]: a write, ops[N-1+k]: a wait (every write before every wait)
    for (int p = 0; p < N; p++) {
      if (p == r) continue;
      CUstreamBatchMemOpParams &wr = ops[k], &wt = ops[N - 1 + k];
      k++;
      memset(&wr, 0, sizeof wr);
      memset(&wt, 0, sizeof wt);
      wr.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
      wr.writeValue.address = (CUdeviceptr)&w[p * N + r];
      wr.writeValue.value = seq;
      wt.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
      wt.waitValue.address = (CUdeviceptr)&w[r * N + p];
      wt.waitValue.value = seq;
      wt.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    }
    CU(cuStreamBatchMemOp((CUstream)cs[r], ops.size(), ops.data(), 0));
  }
}

static void iteration(const std::string& m) {
  size_t bytes = (inplace ? N - 1 : N) * C;
  if (m == "ceil") {
    for (int r = 0; r < N; r++) CK(cudaMemcpyAsync(recv[r], scratch[r], bytes, cudaMemcpyDeviceToDevice, cs[r]));
    return;
  }
  if (m == "seed") {
    seedSync(false);
    for (int r = 0; r < N; r++) copies(r, "batch");
    seedSync(true);
    return;
  }
  bool synced = m.rfind("sync", 0) == 0;
  std::string how = m == "split2" || m == "syncsplit" ? "split" : m == "sync" ? "pieces" : m;
  if (synced) sync(st);
  for (int r = 0; r < N; r++) copies(r, how);
  if (synced) sync(en);
}

static double timed(const std::string& m) {
  iteration(m);
  CK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < R; i++) iteration(m);
  CK(cudaDeviceSynchronize());
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / R;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    printf("usage: bigcopy N CHUNK_MIB INPLACE [ROUNDS [MODE,MODE,...]]\n");
    return 2;
  }
  N = atoi(argv[1]), C = (size_t)atoi(argv[2]) << 20, inplace = atoi(argv[3]) != 0;
  int rounds = argc > 4 ? atoi(argv[4]) : 3;
  CK(cudaSetDevice(0));
  recv.resize(N), send.resize(N), scratch.resize(N), cs.resize(N), s2.resize(N);
  st.resize(N), en.resize(N), forkev.resize(N), joinev.resize(N);
  for (int r = 0; r < N; r++) {
    CK(cudaMalloc(&recv[r], N * C));
    CK(cudaMalloc(&send[r], C));
    CK(cudaMalloc(&scratch[r], N * C));
    CK(cudaMemset(recv[r], 1, N * C));
    CK(cudaMemset(send[r], 2, C));
    CK(cudaMemset(scratch[r], 3, N * C));
    CK(cudaStreamCreateWithFlags(&cs[r], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2[r], cudaStreamNonBlocking));
    for (auto* e : {&st[r], &en[r], &forkev[r], &joinev[r]}) CK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  CK(cudaMalloc(&words, 2 * N * N * sizeof *words));
  CK(cudaMemset(words, 0, 2 * N * N * sizeof *words));
  std::vector<std::string> modes = {"ceil"};
  std::string want = argc > 5 ? argv[5] : "pieces,batch,batchnf,split2,sync,syncsplit,seed";
  for (size_t a = 0, b; a <= want.size(); a = b + 1) {
    b = want.find(',', a);
    if (b == std::string::npos) b = want.size();
    if (b > a) modes.push_back(want.substr(a, b - a));
  }
  const int M = modes.size();
  std::vector<std::vector<double>> pct(M);
  for (int rd = 0; rd < rounds; rd++) {
    double ceil = timed("ceil");
    for (int m = 0; m < M; m++) {
      double t = m == 0 ? ceil : timed(modes[m]);
      pct[m].push_back(100 * ceil / t);
      printf("bigcopy N=%d chunk=%zu MiB %s round %d %-9s %9.1f us %6.1f %%ceil\n", N, C >> 20,
             inplace ? "in" : "out", rd, modes[m].c_str(), t, 100 * ceil / t);
    }
  }
  for (int m = 1; m < M; m++) {
    auto v = pct[m];
    std::sort(v.begin(), v.end());
    printf("bigcopy N=%d chunk=%zu MiB %s median %-9s %6.1f %%ceil\n", N, C >> 20, inplace ? "in" : "out",
           modes[m].c_str(), v[v.size() / 2]);
  }
  return 0;
}
