/* A stand-in for the CUDA runtime header, for test_header.sh: it declares
 * cudaStream_t exactly as CUDA does, so nccl.h is checked against a program
 * that includes the CUDA runtime before or after it. With
 * -DSTUB_CUDA_GUARD it also defines the include guard of CUDA's
 * driver_types.h, as the real header does. */
#ifndef STUB_CUDA_RUNTIME_API_H
#define STUB_CUDA_RUNTIME_API_H

#ifdef STUB_CUDA_GUARD
#define __DRIVER_TYPES_H__
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef enum { cudaSuccess = 0 } cudaError_t;

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
