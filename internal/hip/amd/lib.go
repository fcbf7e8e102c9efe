package amd

import (
	"fmt"
	"strings"

	"github.com/ebitengine/purego"
)

// Sonames tried by Open, newest first. ROCm 7 renamed the library's major
// version and TheRock wheels ship no unversioned symlink, so the unversioned
// name is not tried.
var sonames = []string{"libamdhip64.so.7", "libamdhip64.so.6"}

// symbols holds the addresses of the HIP entry points cecoll calls. The
// prototypes are quoted in symbolTable; optional entries are 0 when absent.
type symbols struct {
	hipDriverGetVersion             uintptr
	hipGetDeviceCount               uintptr
	hipSetDevice                    uintptr
	hipGetDevice                    uintptr
	hipDeviceGetName                uintptr
	hipDeviceGetAttribute           uintptr
	hipDeviceCanAccessPeer          uintptr
	hipDeviceEnablePeerAccess       uintptr
	hipDeviceSynchronize            uintptr
	hipMalloc                       uintptr
	hipExtMallocWithFlags           uintptr
	hipFree                         uintptr
	hipMemGetAddressRange           uintptr
	hipPointerGetAttributes         uintptr
	hipMemset                       uintptr
	hipMemcpy                       uintptr
	hipMemcpyAsync                  uintptr
	hipMemcpy2DAsync                uintptr
	hipMemcpyBatchAsync             uintptr
	hipMemGetAllocationGranularity  uintptr
	hipMemCreate                    uintptr
	hipMemRelease                   uintptr
	hipMemAddressReserve            uintptr
	hipMemAddressFree               uintptr
	hipMemMap                       uintptr
	hipMemUnmap                     uintptr
	hipMemSetAccess                 uintptr
	hipMemExportToShareableHandle   uintptr
	hipMemImportFromShareableHandle uintptr
	hipStreamCreateWithFlags        uintptr
	hipStreamDestroy                uintptr
	hipStreamSynchronize            uintptr
	hipStreamQuery                  uintptr
	hipStreamWaitEvent              uintptr
	hipStreamWaitValue32            uintptr
	hipStreamWriteValue32           uintptr
	hipStreamBatchMemOp             uintptr
	hipEventCreateWithFlags         uintptr
	hipEventDestroy                 uintptr
	hipEventRecord                  uintptr
	hipEventSynchronize             uintptr
	hipEventQuery                   uintptr
	hipEventElapsedTime             uintptr
	hipStreamIsCapturing            uintptr
	hipStreamBeginCapture           uintptr
	hipStreamEndCapture             uintptr
	hipGraphInstantiate             uintptr
	hipGraphLaunch                  uintptr
	hipGraphDestroy                 uintptr
	hipGraphExecDestroy             uintptr
}

const (
	required = true
	optional = false
)

type symbolEntry struct {
	name     string
	addr     *uintptr
	required bool
}

// symbolTable lists every entry point with its prototype from
// hip_runtime_api.h. Optional ones are looked up with Dlsym and may be
// missing: RegisterLibFunc would panic on them.
func (s *symbols) symbolTable() []symbolEntry {
	return []symbolEntry{
		// hipError_t hipDriverGetVersion(int *driverVersion);
		{"hipDriverGetVersion", &s.hipDriverGetVersion, required},
		// hipError_t hipGetDeviceCount(int *count);
		{"hipGetDeviceCount", &s.hipGetDeviceCount, required},
		// hipError_t hipSetDevice(int deviceId);
		{"hipSetDevice", &s.hipSetDevice, required},
		// hipError_t hipGetDevice(int *deviceId);
		{"hipGetDevice", &s.hipGetDevice, required},
		// hipError_t hipDeviceGetName(char *name, int len, hipDevice_t device);
		{"hipDeviceGetName", &s.hipDeviceGetName, required},
		// hipError_t hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int deviceId);
		{"hipDeviceGetAttribute", &s.hipDeviceGetAttribute, required},
		// hipError_t hipDeviceCanAccessPeer(int *canAccessPeer, int deviceId, int peerDeviceId);
		{"hipDeviceCanAccessPeer", &s.hipDeviceCanAccessPeer, required},
		// hipError_t hipDeviceEnablePeerAccess(int peerDeviceId, unsigned int flags);
		{"hipDeviceEnablePeerAccess", &s.hipDeviceEnablePeerAccess, required},
		// hipError_t hipDeviceSynchronize(void);
		{"hipDeviceSynchronize", &s.hipDeviceSynchronize, required},

		// hipError_t hipMalloc(void **ptr, size_t size);
		{"hipMalloc", &s.hipMalloc, required},
		// hipError_t hipExtMallocWithFlags(void **ptr, size_t sizeBytes, unsigned int flags);
		{"hipExtMallocWithFlags", &s.hipExtMallocWithFlags, optional},
		// hipError_t hipFree(void *ptr);
		{"hipFree", &s.hipFree, required},
		// hipError_t hipMemGetAddressRange(hipDeviceptr_t *pbase, size_t *psize, hipDeviceptr_t dptr);
		{"hipMemGetAddressRange", &s.hipMemGetAddressRange, required},
		// hipError_t hipPointerGetAttributes(hipPointerAttribute_t *attributes, const void *ptr);
		{"hipPointerGetAttributes", &s.hipPointerGetAttributes, required},
		// hipError_t hipMemset(void *dst, int value, size_t sizeBytes);
		{"hipMemset", &s.hipMemset, required},
		// hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind);
		{"hipMemcpy", &s.hipMemcpy, required},
		// hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes,
		//                           hipMemcpyKind kind, hipStream_t stream);
		{"hipMemcpyAsync", &s.hipMemcpyAsync, required},
		// hipError_t hipMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
		//                             size_t width, size_t height, hipMemcpyKind kind, hipStream_t stream);
		{"hipMemcpy2DAsync", &s.hipMemcpy2DAsync, required},
		// ROCm >= 7.1, CUDA 12.8 signature (with failIdx):
		// hipError_t hipMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t count,
		//                                hipMemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
		//                                size_t *failIdx, hipStream_t stream);
		{"hipMemcpyBatchAsync", &s.hipMemcpyBatchAsync, optional},

		// Virtual memory management: used only when every entry is present
		// and the device reports hipDeviceAttributeVirtualMemoryManagementSupported.
		//
		// hipError_t hipMemGetAllocationGranularity(size_t *granularity, const hipMemAllocationProp *prop,
		//                                           hipMemAllocationGranularity_flags option);
		{"hipMemGetAllocationGranularity", &s.hipMemGetAllocationGranularity, optional},
		// hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size,
		//                         const hipMemAllocationProp *prop, unsigned long long flags);
		{"hipMemCreate", &s.hipMemCreate, optional},
		// hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle);
		{"hipMemRelease", &s.hipMemRelease, optional},
		// hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr,
		//                                 unsigned long long flags);
		{"hipMemAddressReserve", &s.hipMemAddressReserve, optional},
		// hipError_t hipMemAddressFree(void *devPtr, size_t size);
		{"hipMemAddressFree", &s.hipMemAddressFree, optional},
		// hipError_t hipMemMap(void *ptr, size_t size, size_t offset,
		//                      hipMemGenericAllocationHandle_t handle, unsigned long long flags);
		{"hipMemMap", &s.hipMemMap, optional},
		// hipError_t hipMemUnmap(void *ptr, size_t size);
		{"hipMemUnmap", &s.hipMemUnmap, optional},
		// hipError_t hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc, size_t count);
		{"hipMemSetAccess", &s.hipMemSetAccess, optional},
		// hipError_t hipMemExportToShareableHandle(void *shareableHandle,
		//                                          hipMemGenericAllocationHandle_t handle,
		//                                          hipMemAllocationHandleType handleType,
		//                                          unsigned long long flags);
		{"hipMemExportToShareableHandle", &s.hipMemExportToShareableHandle, optional},
		// hipError_t hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *handle,
		//                                            void *osHandle,
		//                                            hipMemAllocationHandleType shHandleType);
		{"hipMemImportFromShareableHandle", &s.hipMemImportFromShareableHandle, optional},

		// hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags);
		{"hipStreamCreateWithFlags", &s.hipStreamCreateWithFlags, required},
		// hipError_t hipStreamDestroy(hipStream_t stream);
		{"hipStreamDestroy", &s.hipStreamDestroy, required},
		// hipError_t hipStreamSynchronize(hipStream_t stream);
		{"hipStreamSynchronize", &s.hipStreamSynchronize, required},
		// hipError_t hipStreamQuery(hipStream_t stream);
		{"hipStreamQuery", &s.hipStreamQuery, required},
		// hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags);
		{"hipStreamWaitEvent", &s.hipStreamWaitEvent, required},
		// The mask has a C++ default argument (0xFFFFFFFF) that a dlsym
		// caller must pass itself:
		// hipError_t hipStreamWaitValue32(hipStream_t stream, void *ptr, uint32_t value,
		//                                 unsigned int flags, uint32_t mask);
		{"hipStreamWaitValue32", &s.hipStreamWaitValue32, required},
		// hipError_t hipStreamWriteValue32(hipStream_t stream, void *ptr, uint32_t value,
		//                                  unsigned int flags);
		{"hipStreamWriteValue32", &s.hipStreamWriteValue32, required},
		// ROCm >= 6.4; without it a batch is issued one wait/write at a time:
		// hipError_t hipStreamBatchMemOp(hipStream_t stream, unsigned int count,
		//                                hipStreamBatchMemOpParams *paramArray, unsigned int flags);
		{"hipStreamBatchMemOp", &s.hipStreamBatchMemOp, optional},

		// hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags);
		{"hipEventCreateWithFlags", &s.hipEventCreateWithFlags, required},
		// hipError_t hipEventDestroy(hipEvent_t event);
		{"hipEventDestroy", &s.hipEventDestroy, required},
		// hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);
		{"hipEventRecord", &s.hipEventRecord, required},
		// hipError_t hipEventSynchronize(hipEvent_t event);
		{"hipEventSynchronize", &s.hipEventSynchronize, required},
		// hipError_t hipEventQuery(hipEvent_t event);
		{"hipEventQuery", &s.hipEventQuery, required},
		// hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop);
		{"hipEventElapsedTime", &s.hipEventElapsedTime, required},

		// hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus);
		{"hipStreamIsCapturing", &s.hipStreamIsCapturing, required},
		// hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode);
		{"hipStreamBeginCapture", &s.hipStreamBeginCapture, required},
		// hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph);
		{"hipStreamEndCapture", &s.hipStreamEndCapture, required},
		// Called with five arguments, the last three zero. If a ROCm release
		// adopts CUDA 12's three-argument form (exec, graph, flags) the same
		// call still means flags = 0 under the SysV ABI.
		// hipError_t hipGraphInstantiate(hipGraphExec_t *pGraphExec, hipGraph_t graph,
		//                                hipGraphNode_t *pErrorNode, char *pLogBuffer, size_t bufferSize);
		{"hipGraphInstantiate", &s.hipGraphInstantiate, required},
		// hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream);
		{"hipGraphLaunch", &s.hipGraphLaunch, required},
		// hipError_t hipGraphDestroy(hipGraph_t graph);
		{"hipGraphDestroy", &s.hipGraphDestroy, required},
		// hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec);
		{"hipGraphExecDestroy", &s.hipGraphExecDestroy, required},
	}
}

// hasVMM reports whether every virtual-memory entry point was found.
func (s *symbols) hasVMM() bool {
	return s.hipMemGetAllocationGranularity != 0 && s.hipMemCreate != 0 &&
		s.hipMemRelease != 0 && s.hipMemAddressReserve != 0 && s.hipMemAddressFree != 0 &&
		s.hipMemMap != 0 && s.hipMemUnmap != 0 && s.hipMemSetAccess != 0 &&
		s.hipMemExportToShareableHandle != 0 && s.hipMemImportFromShareableHandle != 0
}

// load dlopens path and resolves the symbol table. The library is never
// closed: HIP does not support being unloaded while the process runs.
func load(path string) (*symbols, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		// dlerror usually starts with the path already.
		if strings.HasPrefix(err.Error(), path) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := new(symbols)
	var missing []string
	for _, e := range s.symbolTable() {
		addr, err := purego.Dlsym(h, e.name)
		if err != nil || addr == 0 {
			if e.required {
				missing = append(missing, e.name)
			}
			continue
		}
		*e.addr = addr
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: missing required symbol %s", path, strings.Join(missing, ", "))
	}
	return s, nil
}
