// lab/h200/graphpar.cu: graph replay time of R ranks x C tiny (8 B) D2D copies per rank, K reps per graph,
// the copies of a rank chained one after another (seq) or as parallel branches (par). Build and run on the
// GPU machine: nvcc -O2 -o graphpar lab/h200/graphpar.cu && ./graphpar (docs/performance.md, "Flag operations in a graph").
#include <cstdio>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
int main() {
  const int K = 20, maxR = 8, maxC = 8;
  char* buf; CK(cudaMalloc(&buf, 1 << 20));
  cudaStream_t o; CK(cudaStreamCreateWithFlags(&o, cudaStreamNonBlocking));
  cudaStream_t rs[maxR], side[maxR][maxC];
  for (int r = 0; r < maxR; r++) { CK(cudaStreamCreateWithFlags(&rs[r], cudaStreamNonBlocking));
    for (int c = 0; c < maxC; c++) CK(cudaStreamCreateWithFlags(&side[r][c], cudaStreamNonBlocking)); }
  cudaEvent_t ev[4096]; for (int i = 0; i < 4096; i++) CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
  cudaEvent_t t0, t1; CK(cudaEventCreate(&t0)); CK(cudaEventCreate(&t1));
  int Rs[] = {1, 2, 4, 8}, Cs[] = {2, 4, 8};
  for (int ri = 0; ri < 4; ri++) for (int ci = 0; ci < 3; ci++) for (int par = 0; par < 2; par++) {
    int R = Rs[ri], C = Cs[ci], e = 0;
    cudaGraph_t g; cudaGraphExec_t x;
    CK(cudaStreamBeginCapture(o, cudaStreamCaptureModeGlobal));
    CK(cudaEventRecord(ev[e], o));
    for (int r = 0; r < R; r++) CK(cudaStreamWaitEvent(rs[r], ev[e]));
    e++;
    for (int k = 0; k < K; k++) for (int r = 0; r < R; r++) {
      if (!par) { for (int c = 0; c < C; c++) CK(cudaMemcpyAsync(buf + 4096 * (r * maxC + c), buf + 65536 + 8 * r, 8, cudaMemcpyDeviceToDevice, rs[r])); continue; }
      CK(cudaEventRecord(ev[e], rs[r]));
      for (int c = 1; c < C; c++) CK(cudaStreamWaitEvent(side[r][c], ev[e]));
      e++;
      CK(cudaMemcpyAsync(buf + 4096 * (r * maxC), buf + 65536 + 8 * r, 8, cudaMemcpyDeviceToDevice, rs[r]));
      for (int c = 1; c < C; c++) {
        CK(cudaMemcpyAsync(buf + 4096 * (r * maxC + c), buf + 65536 + 8 * r, 8, cudaMemcpyDeviceToDevice, side[r][c]));
        CK(cudaEventRecord(ev[e], side[r][c])); CK(cudaStreamWaitEvent(rs[r], ev[e])); e++;
      }
    }
    for (int r = 0; r < R; r++) { CK(cudaEventRecord(ev[e], rs[r])); CK(cudaStreamWaitEvent(o, ev[e])); e++; }
    CK(cudaStreamEndCapture(o, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(x, o));
    CK(cudaStreamSynchronize(o));
    float best = 1e30f;
    for (int it = 0; it < 10; it++) {
      CK(cudaEventRecord(t0, o)); CK(cudaGraphLaunch(x, o)); CK(cudaEventRecord(t1, o)); CK(cudaEventSynchronize(t1));
      float ms; CK(cudaEventElapsedTime(&ms, t0, t1)); if (ms < best) best = ms;
    }
    printf("R=%d C=%d %s: %.2f us per rep\n", R, C, par ? "par" : "seq", best * 1000 / K);
    CK(cudaGraphExecDestroy(x)); CK(cudaGraphDestroy(g));
  }
  return 0;
}
