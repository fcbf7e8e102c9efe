// lab/h200/hubpar.cu: the 8 B hub AllGather of N ranks on one device as graphs, one per rank
// stream, K calls a graph, R replays, to see what its root's chain costs and what would cut it.
// A call, as the engine captures it (docs/architecture.md, "hub"):
//   peer q: signal (4-byte copy of ones into the root's arrival word q), then a batch: wait for
//           its release word, reset it;
//   root:   a batch: wait for every arrival word, reset them; stage 1: every rank's 8-byte
//           block into the root's recv (N copies); stage 2: that 8N-byte buffer into every
//           peer's recv (N-1 copies); release: one copy of ones over the peers' release words.
// COPIES: chain (each copy after the one before, as captured today), par (each stage's copies
//   as parallel graph nodes: the capture's dependencies set back to the stage's start before
//   each copy, then to all of the stage's copies: cuStreamGetCaptureInfo /
//   cuStreamUpdateCaptureDependencies, no extra streams), or rel (the root owns the memory,
//   not the copies: every rank copies its block into slot r of the root's staging (one of two,
//   alternating by call) before its signal, the root releases right after its wait, and every
//   rank copies the whole staging into its recv after the release: two copies a rank), or bcast
//   (every rank copies its block into slot r of the root's one staging before its signal; the
//   root copies the staging into every rank's recv, then releases: N copies at the root), or
//   pull (safe in a graph with one slot: the root gathers every rank's block into its staging,
//   releases, then every rank, the root too, copies the staging into its recv; the root writes
//   the slot again only past every peer's next signal, which its stream issues after its pull).
// WAITS (the root's batch): w32 (a wait and a reset per peer, as shipped), w64 (a 64-bit wait
//   and reset per two arrival words: word 0, the root's own, is always 0), lane (the old
//   engine's: peers copy one byte into their lane of one word, one wait and one reset), fold
//   (no write-value at all: the root's release is one 2D copy whose first row zeroes the
//   arrival words and whose second sets the release words; a peer's signal is one 2D copy
//   setting its arrival word and zeroing its release word, and its wait resets nothing).
// Prints us per call, or HANG (exit 3). Also prints which capture-info symbols the driver has.
// Build and run on the GPU machine:
//   nvcc -O2 -o /tmp/hubpar lab/h200/hubpar.cu -lcuda -ldl && /tmp/hubpar par w32 4
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <unistd.h>
#include <vector>
#include "probe.h"

static const int K = 20, R = 50;
static std::string copies, waits;
static int N;
// Sync window: arrival words at win + 4q (lane: bytes of word 0), release words at rel + 4q.
static CUdeviceptr win, rel, ones, data, foldRoot, foldPeer;

typedef CUresult (*getInfoV3)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**,
                              const void**, size_t*);
typedef CUresult (*updDepsV2)(CUstream, CUgraphNode*, const void*, size_t, unsigned);
static getInfoV3 getInfo;
static updDepsV2 updDeps;

// copy2D: rows rows of width bytes from src (pitch 128) to dst (pitch 128).
static void copy2D(CUstream s, CUdeviceptr dst, CUdeviceptr src, size_t width, size_t rows) {
  CUDA_MEMCPY2D m;
  memset(&m, 0, sizeof m);
  m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m.srcDevice = src, m.dstDevice = dst, m.srcPitch = m.dstPitch = 128;
  m.WidthInBytes = width, m.Height = rows;
  CU(cuMemcpy2DAsync(&m, s));
}

static CUstreamBatchMemOpParams op(int kind, CUdeviceptr a, unsigned long long v) {
  CUstreamBatchMemOpParams p;
  memset(&p, 0, sizeof p);
  switch (kind) {
    case 0: p.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32; p.waitValue.value = (cuuint32_t)v; break;
    case 1: p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32; p.writeValue.value = (cuuint32_t)v; break;
    case 2: p.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64; p.waitValue.value64 = v; break;
    case 3: p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64; p.writeValue.value64 = v; break;
  }
  p.waitValue.address = a;  // waitValue and writeValue share the layout of address
  if (kind == 0 || kind == 2) p.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  return p;
}

// stage enqueues n copies on s: chained, or as parallel nodes after what s depended on.
static void stage(CUstream s, int n, CUdeviceptr* dst, CUdeviceptr* src, size_t bytes) {
  if (copies == "chain" || n == 1) {
    for (int i = 0; i < n; i++) CU(cuMemcpyAsync(dst[i], src[i], bytes, s));
    return;
  }
  CUstreamCaptureStatus st;
  const CUgraphNode* deps;
  size_t nd;
  CU(getInfo(s, &st, nullptr, nullptr, &deps, nullptr, &nd));
  std::vector<CUgraphNode> start(deps, deps + nd), nodes;
  for (int i = 0; i < n; i++) {
    if (i > 0) CU(updDeps(s, start.data(), nullptr, start.size(), CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CU(cuMemcpyAsync(dst[i], src[i], bytes, s));
    CU(getInfo(s, &st, nullptr, nullptr, &deps, nullptr, &nd));
    nodes.insert(nodes.end(), deps, deps + nd);
  }
  CU(updDeps(s, nodes.data(), nullptr, nodes.size(), CU_STREAM_SET_CAPTURE_DEPENDENCIES));
}

// HUBPAR_VMM=1: every rank's send and recv a VMM allocation of its own (as ncclMemAlloc makes
// them) and the staging a 68 MiB one with the area at 64 MiB (as cecoll's staging window with
// its hub area), HUBPAR_VMM=2 the flags too; else all in one cuMemAlloc. HUBPAR_FORK=1: each
// call captured as the engine captures it, forked from the rank's stream into a stream of its
// own and joined back.
static CUdeviceptr sends[16], recvs[16], stage0;
static CUdeviceptr send(int r) { return sends[r]; }
static CUdeviceptr recv(int r) { return recvs[r]; }
static CUdeviceptr stagep(int k) { return stage0 + 4096 * (k % 2); }

static CUdeviceptr vmm(size_t size) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g;
  CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  size = (size + g - 1) / g * g;
  CUmemGenericAllocationHandle h;
  CU(cuMemCreate(&h, size, &prop, 0));
  CUdeviceptr p;
  CU(cuMemAddressReserve(&p, size, g, 0, 0));
  CU(cuMemMap(p, size, 0, h, 0));
  CUmemAccessDesc acc = {};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(p, size, &acc, 1));
  CU(cuMemsetD8(p, 0, size));
  return p;
}

static void call(CUstream s, int me, int k) {
  bool released = copies == "rel", bcast = copies == "bcast", pull = copies == "pull", fold = waits == "fold";
  if (bcast) CU(cuMemcpyAsync(stagep(0) + 8 * me, send(me), 8, s));
  if (released) CU(cuMemcpyAsync(stagep(k) + 8 * me, send(me), 8, s));
  if (me != 0) {
    if (waits == "lane") CU(cuMemcpyAsync(win + me, ones, 1, s));
    else if (fold) copy2D(s, win + 4 * me, foldPeer, 4, 2);
    else CU(cuMemcpyAsync(win + 4 * me, ones, 4, s));
    CUstreamBatchMemOpParams p[2] = {op(0, rel + 4 * me, 1), op(1, rel + 4 * me, 0)};
    CU(cuStreamBatchMemOp(s, fold ? 1 : 2, p, 0));
    if (released) CU(cuMemcpyAsync(recv(me), stagep(k), 8 * N, s));
    if (pull) CU(cuMemcpyAsync(recv(me), stagep(0), 8 * N, s));
    return;
  }
  std::vector<CUstreamBatchMemOpParams> p;
  if (waits == "lane") {
    unsigned v = 0;
    for (int q = 1; q < N; q++) v |= 1u << (8 * q);
    p = {op(0, win, v), op(1, win, 0)};
  } else if (waits == "w64") {
    for (int q = 0; q < N; q += 2) p.push_back(op(2, win + 4 * q, (q ? 1ull : 0ull) | (1ull << 32)));
    for (int q = 0; q < N; q += 2) p.push_back(op(3, win + 4 * q, 0));
  } else {
    for (int q = 1; q < N; q++) p.push_back(op(0, win + 4 * q, 1));
    for (int q = 1; q < N && !fold; q++) p.push_back(op(1, win + 4 * q, 0));
  }
  // The root's release: ones over the peers' release words (fold: and zeros over the arrivals).
  auto release = [&] {
    if (fold) copy2D(s, win, foldRoot, 4 * N, 2);
    else CU(cuMemcpyAsync(rel + 4, ones, 4 * (N - 1), s));
  };
  CU(cuStreamBatchMemOp(s, (unsigned)p.size(), p.data(), 0));
  if (released) {
    release();
    CU(cuMemcpyAsync(recv(0), stagep(k), 8 * N, s));
    return;
  }
  if (pull) {
    for (int r = 0; r < N; r++) CU(cuMemcpyAsync(stagep(0) + 8 * r, send(r), 8, s));
    release();
    CU(cuMemcpyAsync(recv(0), stagep(0), 8 * N, s));
    return;
  }
  CUdeviceptr d[16], sr[16];
  if (bcast) {
    for (int q = 0; q < N; q++) CU(cuMemcpyAsync(recv(q), stagep(0), 8 * N, s));
    release();
    return;
  }
  for (int r = 0; r < N; r++) d[r] = recv(0) + 8 * r, sr[r] = send(r);
  stage(s, N, d, sr, 8);
  for (int q = 1; q < N; q++) d[q - 1] = recv(q), sr[q - 1] = recv(0);
  stage(s, N - 1, d, sr, 8 * N);
  release();
}

int main(int argc, char** argv) {
  if (argc < 4) {
    printf("usage: hubpar chain|par|rel|bcast|pull w32|w64|lane|fold N\n");
    return 2;
  }
  copies = argv[1], waits = argv[2], N = atoi(argv[3]);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  const char* syms[] = {"cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo_v3",
                        "cuStreamUpdateCaptureDependencies", "cuStreamUpdateCaptureDependencies_v2"};
  if (getenv("HUBPAR_SYMS"))
    for (const char* n : syms) printf("%s: %s\n", n, dlsym(lib, n) ? "yes" : "no");
  getInfo = (getInfoV3)dlsym(lib, "cuStreamGetCaptureInfo_v3");
  updDeps = (updDepsV2)dlsym(lib, "cuStreamUpdateCaptureDependencies_v2");
  if (!getInfo || !updDeps) {
    printf("no capture-info symbols\n");
    return 1;
  }
  CK(cudaSetDevice(0));
  const char* vm = getenv("HUBPAR_VMM");
  bool useVMM = vm && *vm;
  CUdeviceptr base;
  if (useVMM && vm[0] == '2') {
    base = vmm(1 << 20);  // the flags too
  } else {
    CU(cuMemAlloc(&base, 1 << 20));
    CU(cuMemsetD8(base, 0, 1 << 20));
  }
  win = base, rel = base + 128, ones = base + 256, data = base + 4096;
  // fold's 2D sources (pitch 128): the root's zeros then ones, a peer's ones then zeros.
  foldRoot = base + 512, foldPeer = base + 768;
  CU(cuMemsetD32(foldRoot + 128, 1, 16));
  CU(cuMemsetD32(foldPeer, 1, 16));
  for (int r = 0; r < N; r++) {
    sends[r] = useVMM ? vmm(1 << 20) : data + 4096 * r;
    recvs[r] = useVMM ? vmm(1 << 20) : data + 65536 + 4096 * r;
  }
  stage0 = useVMM ? vmm(68 << 20) + (64 << 20) : data + 32768;
  CU(cuMemsetD32(ones, 1, 16));
  for (int r = 0; r < N; r++) CU(cuMemsetD8(send(r), (unsigned char)(r + 1), 8));
  std::vector<cudaStream_t> s(N);
  std::vector<cudaGraphExec_t> x(N);
  const char* fk = getenv("HUBPAR_FORK");
  bool forked = fk && *fk;
  std::vector<cudaStream_t> es(N);
  std::vector<cudaEvent_t> evIn(N), evOut(N);
  for (int r = 0; r < N; r++) {
    CK(cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&es[r], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&evIn[r], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&evOut[r], cudaEventDisableTiming));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s[r], cudaStreamCaptureModeRelaxed));
    for (int k = 0; k < K; k++) {
      if (!forked) {
        call((CUstream)s[r], r, k);
        continue;
      }
      // As the engine captures a call: the caller's stream forks into the rank's own stream
      // (an event recorded, then waited on), the call runs there, and the caller's stream
      // waits for it.
      CK(cudaEventRecord(evIn[r], s[r]));
      CK(cudaStreamWaitEvent(es[r], evIn[r], 0));
      call((CUstream)es[r], r, k);
      CK(cudaEventRecord(evOut[r], es[r]));
      CK(cudaStreamWaitEvent(s[r], evOut[r], 0));
    }
    CK(cudaStreamEndCapture(s[r], &g));
    CK(cudaGraphInstantiate(&x[r], g, 0));
    CK(cudaGraphUpload(x[r], s[r]));
  }
  for (int w = 0; w < 3; w++)
    for (int r = 0; r < N; r++) CK(cudaGraphLaunch(x[r], s[r]));
  for (int r = 0; r < N; r++) CK(cudaStreamSynchronize(s[r]));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < R; i++)
    for (int r = 0; r < N; r++) CK(cudaGraphLaunch(x[r], s[r]));
  for (int r = 0; r < N; r++)
    if (!finished(s[r], 3000)) {
      printf("hubpar %s %s %d HANG\n", argv[1], argv[2], N);
      fflush(stdout);
      _exit(3);
    }
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  // The data: every recv holds every rank's 8-byte block, rank r's bytes r+1.
  int wrong = 0;
  for (int r = 0; r < N; r++) {
    unsigned char h[128];
    CU(cuMemcpyDtoH(h, recv(r), 8 * N));
    for (int i = 0; i < 8 * N; i++) wrong += h[i] != i / 8 + 1;
  }
  if (wrong) printf("hubpar %s %s %d: %d wrong bytes\n", argv[1], argv[2], N, wrong);
  printf("hubpar %-5s %-4s N=%d vmm=%s%s %7.2f us per call\n", argv[1], argv[2], N, useVMM ? vm : "0", forked ? " fork" : "", us / (R * K));
  return 0;
}
