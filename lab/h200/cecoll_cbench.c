/* cecoll_cbench: the same driver calls as the Go nvidia backend's
 * benchmarks (internal/hip/nvidia/bench_test.go), made from C, so that the
 * Go binding's host cost can be reported as a ratio in the same run.
 *
 * Host cost: bursts of BURST calls are timed, and the stream is synchronised
 * untimed between bursts (the driver's queue never fills, so the figure is
 * the host's cost, not the GPU's). Copy bandwidth: 8 batched copies totalling
 * 1 GiB vs one single copy of the same bytes, timed with the host clock
 * around enqueue + sync, as the Go benchmark does.
 *
 * Output lines: "CBENCH <name> <ns per call>" and "CBENCH_BW <name> <GB/s>".
 * "cecoll_cbench probe" instead reports which streams stop while others are
 * parked on a wait-value ("PROBE ..." lines).
 * Build: gcc -O2 -I/usr/local/cuda/include cecoll_cbench.c -lcuda
 * (never calls any cuMulticast* function). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BURST 64
#define CHECK(x)                                                                   \
  do {                                                                             \
    CUresult r_ = (x);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                      \
      fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #x, (int)r_); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static CUstream stream;
static CUdeviceptr base;
static CUevent ev;
static CUstreamBatchMemOpParams ops[8];
static CUdeviceptr dsts[8], srcs[8];
static size_t sizes[8], attrIdx[1];
static CUmemcpyAttributes attrs[1];

static CUresult op_batchmemop(void) { return cuStreamBatchMemOp(stream, 8, ops, 0); }
static CUresult op_memcpyasync(void) { return cuMemcpyAsync(dsts[0], srcs[0], 4096, stream); }
static CUresult op_eventrecord(void) { return cuEventRecord(ev, stream); }
static CUresult op_iscapturing(void) {
  CUstreamCaptureStatus st;
  return cuStreamIsCapturing(stream, &st);
}
#if CUDA_VERSION >= 12080
static CUresult op_batchcopy(void) {
#if CUDA_VERSION >= 13000
  return cuMemcpyBatchAsync(dsts, srcs, sizes, 8, attrs, attrIdx, 1, stream);
#else
  return cuMemcpyBatchAsync(dsts, srcs, sizes, 8, attrs, attrIdx, 1, NULL, stream);
#endif
}
#endif


/* probe: which other streams stop while one stream is parked on a
 * wait-value? W waits on a flag in pinned host memory (released by the CPU,
 * so no stream is needed to release it); then NEW fresh non-blocking streams
 * each get one 4-byte device copy, and the legacy stream gets one too.
 * Streams whose copy has not completed after 100 ms are reported blocked.
 * Never hangs: everything is polled, and the flag is released at the end. */
static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int probe(int parked) {
  enum { NEW = 24 };
  volatile unsigned int *hflag;
  CUdeviceptr dflag, buf;
  CUstream w[8], s[NEW];
  CHECK(cuMemAllocHost((void **)&hflag, 4));
  *hflag = 0;
  CHECK(cuMemHostGetDevicePointer(&dflag, (void *)hflag, 0));
  CHECK(cuMemAlloc(&buf, 1 << 20));
  for (int i = 0; i < parked; i++) {
    CHECK(cuStreamCreate(&w[i], CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamWaitValue32(w[i], dflag, 1, CU_STREAM_WAIT_VALUE_EQ));
  }
  for (int i = 0; i < NEW; i++) {
    CHECK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
    CHECK(cuMemcpyAsync(buf + 4096 + 64 * i, buf, 4, s[i]));
  }
  CHECK(cuMemcpyAsync(buf + 8192, buf, 4, CU_STREAM_LEGACY));
  sleep_ms(100);
  printf("PROBE parked=%d new-streams-blocked:", parked);
  int blocked = 0;
  for (int i = 0; i < NEW; i++)
    if (cuStreamQuery(s[i]) == CUDA_ERROR_NOT_READY) {
      printf(" %d", i);
      blocked++;
    }
  printf(" (%d of %d) legacy-stream:%s\n", blocked, NEW,
         cuStreamQuery(CU_STREAM_LEGACY) == CUDA_ERROR_NOT_READY ? "blocked" : "ran");
  *hflag = 1;
  CHECK(cuCtxSynchronize());
  for (int i = 0; i < parked; i++) CHECK(cuStreamDestroy(w[i]));
  for (int i = 0; i < NEW; i++) CHECK(cuStreamDestroy(s[i]));
  CHECK(cuMemFree(buf));
  CHECK(cuMemFreeHost((void *)hflag));
  fflush(stdout);
  return 0;
}

static void host_cost(const char *name, CUresult (*f)(void), int bursts) {
  CHECK(f());
  CHECK(cuStreamSynchronize(stream));
  double total = 0;
  for (int b = 0; b < bursts; b++) {
    double t0 = now_ns();
    for (int i = 0; i < BURST; i++) CHECK(f());
    total += now_ns() - t0;
    CHECK(cuStreamSynchronize(stream));
  }
  printf("CBENCH %s %.1f\n", name, total / ((double)bursts * BURST));
  fflush(stdout);
}

int main(int argc, char **argv) {
  int bursts = argc > 1 ? atoi(argv[1]) : 500;
  CUdevice dev;
  CUcontext ctx;
  int ver = 0;
  CHECK(cuInit(0));
  CHECK(cuDriverGetVersion(&ver));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  if (argc > 1 && strcmp(argv[1], "probe") == 0) {
    const char *mc = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    printf("PROBE CUDA_DEVICE_MAX_CONNECTIONS=%s\n", mc ? mc : "(unset)");
    return probe(1) || probe(4);
  }
  printf("CBENCH_INFO driver %d header %d burst %d bursts %d\n", ver, CUDA_VERSION, BURST, bursts);
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CHECK(cuMemAlloc(&base, 1 << 20));
  CHECK(cuMemsetD8(base, 0, 1 << 20));
  CHECK(cuCtxSynchronize());

  memset(ops, 0, sizeof ops);
  for (int i = 0; i < 4; i++) {
    ops[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[i].writeValue.address = base + 4 * i;
    ops[i].writeValue.value = 0;
    ops[i].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
    ops[4 + i].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[4 + i].waitValue.address = base + 4 * i;
    ops[4 + i].waitValue.value = 0;
    ops[4 + i].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  }
  for (int i = 0; i < 8; i++) {
    srcs[i] = base + 65536 + (CUdeviceptr)i * 4096;
    dsts[i] = base + 65536 + (CUdeviceptr)(8 + i) * 4096;
    sizes[i] = 4096;
  }
  memset(attrs, 0, sizeof attrs);
#if CUDA_VERSION >= 12080
  attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  attrs[0].flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
#endif
  attrIdx[0] = 0;

  host_cost("StreamBatchMemOp8", op_batchmemop, bursts);
#if CUDA_VERSION >= 12080
  if (ver >= 12080) host_cost("MemcpyBatchAsync8x4K", op_batchcopy, bursts);
#endif
  host_cost("MemcpyAsync4K", op_memcpyasync, bursts);
  host_cost("EventRecord", op_eventrecord, bursts);
  host_cost("StreamGetCaptureStatus", op_iscapturing, bursts);

  /* Copy bandwidth, 1 GiB device to device. */
  const size_t total = (size_t)1 << 30;
  CUdeviceptr s, d;
  CHECK(cuMemAlloc(&s, total));
  CHECK(cuMemAlloc(&d, total));
  CHECK(cuMemsetD8(s, 1, total));
  CHECK(cuCtxSynchronize());
  for (int i = 0; i < 8; i++) {
    srcs[i] = s + (CUdeviceptr)i * (total / 8);
    dsts[i] = d + (CUdeviceptr)i * (total / 8);
    sizes[i] = total / 8;
  }
  const int reps = 30;
  for (int mode = 0; mode < 3; mode++) {
    const char *name = mode == 0 ? "batch8" : mode == 1 ? "single" : "async8";
#if CUDA_VERSION >= 12080
    if (mode == 0 && ver < 12080) continue;
#else
    if (mode == 0) continue;
#endif
    double t0 = 0;
    for (int r = -1; r < reps; r++) {
      if (r == 0) {
        CHECK(cuStreamSynchronize(stream));
        t0 = now_ns();
      }
      if (mode == 0) {
#if CUDA_VERSION >= 12080
        CHECK(op_batchcopy());
#endif
      } else if (mode == 1) {
        CHECK(cuMemcpyAsync(d, s, total, stream));
      } else {
        for (int i = 0; i < 8; i++) CHECK(cuMemcpyAsync(dsts[i], srcs[i], sizes[i], stream));
      }
    }
    CHECK(cuStreamSynchronize(stream));
    double ns = (now_ns() - t0) / reps;
    printf("CBENCH_BW Copy1GiB/%s %.1f\n", name, total / ns);
  }
  CHECK(cuMemFree(s));
  CHECK(cuMemFree(d));
  CHECK(cuMemFree(base));
  CHECK(cuEventDestroy(ev));
  CHECK(cuStreamDestroy(stream));
  return 0;
}
