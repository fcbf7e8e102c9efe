// lab/h200/evpark.cu: do streams waiting on events hold the GPU's hardware queues as streams
// parked on flag waits do (lab/h200/chanpark.cu)? And do concurrent 1-byte copies into one
// word lose bytes?
//
// evpark park P [kind]: stream B parks on a flag wait (wait-value >= 1) and records event E;
//   P more streams wait on E (kind=event, default) or each on its own flag (kind=flag); then a
//   probe stream, created last, writes a word. Prints
//     EVPARK P= kind= stalled=0|1
//   stalled=1 when the probe's write is not done after 500 ms (exit 3, nothing released).
//   Otherwise the probe releases B's flag (and the flags) and every stream must finish.
// evpark lanes S W R: S streams, each copies 1 byte (value 1) into byte s%4 of word k/... of W
//   words (stream s writes byte s%4 of words [s/4 ...]); R rounds; prints LANES lost=<words>.
// Build on the GPU machine: nvcc -O2 -o evpark lab/h200/evpark.cu -lcuda
#include <cstring>
#include <unistd.h>
#include "probe.h"

static int park(int P, const char* kind) {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  unsigned *flags, *scratch;
  CK(cudaMalloc(&flags, 4 * (P + 2)));
  CK(cudaMalloc(&scratch, 64));
  CK(cudaMemset(flags, 0, 4 * (P + 2)));
  CK(cudaMemset(scratch, 0, 64));
  CK(cudaDeviceSynchronize());
  bool ev = strcmp(kind, "flag") != 0;
  cudaStream_t b, probe, *s = new cudaStream_t[P];
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  for (int i = 0; i < P; i++) CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&probe, cudaStreamNonBlocking));
  CU(cuStreamWaitValue32((CUstream)b, (CUdeviceptr)flags, 1, CU_STREAM_WAIT_VALUE_GEQ));
  CK(cudaEventRecord(e, b));
  for (int i = 0; i < P; i++) {
    if (ev) CK(cudaStreamWaitEvent(s[i], e, 0));
    else CU(cuStreamWaitValue32((CUstream)s[i], (CUdeviceptr)(flags + 1 + i), 1, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cudaMemcpyAsync(scratch + 1, scratch + 2, 4, cudaMemcpyDeviceToDevice, s[i]));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CU(cuStreamWriteValue32((CUstream)probe, (CUdeviceptr)(scratch + 3), 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  bool ok = finished(probe, 500);
  printf("EVPARK P=%d kind=%s stalled=%d\n", P, ev ? "event" : "flag", ok ? 0 : 1);
  fflush(stdout);
  if (!ok) _exit(3);
  for (int j = 0; j < P + 2; j++)
    CU(cuStreamWriteValue32((CUstream)probe, (CUdeviceptr)(flags + j), 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  for (int i = 0; i < P; i++)
    if (!finished(s[i], 2000)) { printf("EVPARK stream %d did not finish after release\n", i); fflush(stdout); _exit(3); }
  if (!finished(b, 2000)) { printf("EVPARK B did not finish\n"); _exit(3); }
  return 0;
}

static int lanes(int S, int W, int R) {
  CK(cudaSetDevice(0));
  unsigned *words;
  unsigned char* one;
  CK(cudaMalloc(&words, 4 * W));
  CK(cudaMalloc(&one, 4));
  CK(cudaMemset(one, 1, 4));
  cudaStream_t* s = new cudaStream_t[S];
  for (int i = 0; i < S; i++) CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
  unsigned* h = new unsigned[W];
  long lost = 0;
  int groups = (S + 3) / 4;  // streams 4g..4g+3 share words w with w % groups == g
  for (int r = 0; r < R; r++) {
    CK(cudaMemset(words, 0, 4 * W));
    CK(cudaDeviceSynchronize());
    for (int k = 0; k < W; k++)
      for (int i = 0; i < S; i++)
        if (k % groups == i / 4)
          CK(cudaMemcpyAsync((unsigned char*)(words + k) + i % 4, one, 1, cudaMemcpyDeviceToDevice, s[(i + k) % S]));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, words, 4 * W, cudaMemcpyDeviceToHost));
    for (int k = 0; k < W; k++) {
      int g = k % groups;
      unsigned want = 0;
      for (int b = 0; b < 4 && 4 * g + b < S; b++) want |= 1u << (8 * b);
      if (h[k] != want) lost++;
    }
  }
  printf("LANES S=%d W=%d R=%d lost=%ld\n", S, W, R, lost);
  return lost != 0;
}

int main(int argc, char** argv) {
  if (argc >= 3 && !strcmp(argv[1], "park")) return park(atoi(argv[2]), argc > 3 ? argv[3] : "event");
  if (argc >= 5 && !strcmp(argv[1], "lanes")) return lanes(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
  printf("usage: evpark park P [event|flag] | evpark lanes S W R\n");
  return 2;
}
