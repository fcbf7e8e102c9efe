// Package amd is the AMD backend of the device runtime: hip.Runtime over the
// HIP runtime library (libamdhip64.so.7, then libamdhip64.so.6), called
// through purego so that nothing links against ROCm at build time.
//
// It owns the HIP symbol table (lib.go), the allocation-free call helpers
// (call.go), the mapping of hipError_t to hip.Error (errors.go), device
// memory through HIP's virtual memory management API with a hipMalloc
// fallback (memory.go), PointerInfo through hipPointerGetAttributes
// (pointer.go), and the Runtime methods (runtime.go).
//
// HIP differs from CUDA in ways the engine must see, reported in Caps:
//   - Within one hipStreamBatchMemOp a write may overtake an earlier wait
//     (SplitWaitReset).
//   - hipMemcpyBatchAsync exists from ROCm 7.1 with the CUDA 12.8 signature
//     (it has size_t *failIdx), and before ROCm 7.12 it refuses copy
//     attributes (CopyAttributes false: attributes are dropped, B3).
//   - No multicast.
//
// It cannot run without an AMD GPU; its tests drive it against a fake
// libamdhip64 built from testdata/fakehip.c at test time.
package amd
