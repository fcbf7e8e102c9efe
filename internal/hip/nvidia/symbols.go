package nvidia

import (
	"errors"
	"fmt"

	"github.com/ebitengine/purego"
)

// libName is the driver library's soname. Only the driver API is used, so
// cecoll works with whichever CUDA runtime (12 or 13) the application links.
const libName = "libcuda.so.1"

// syms holds the resolved entry points. Every field is filled by load from
// the table below; optional ones stay 0 when the driver lacks them.
type syms struct {
	init, driverGetVersion, deviceGetCount, deviceGet, deviceGetName   uintptr
	deviceGetAttribute, deviceCanAccessPeer, primaryCtxRetain          uintptr
	ctxSetCurrent, ctxGetCurrent, ctxGetDevice, ctxSynchronize         uintptr
	memGetAllocationGranularity, memCreate, memRelease                 uintptr
	memAddressReserve, memAddressFree, memMap, memUnmap, memSetAccess  uintptr
	memExportToShareableHandle, memImportFromShareableHandle           uintptr
	memRetainAllocationHandle, memAlloc, memFree, memGetAddressRange   uintptr
	pointerGetAttributes                                               uintptr
	memsetD8, memcpy, memcpyAsync, memcpy2DAsync                       uintptr
	streamCreate, streamDestroy, streamSynchronize, streamQuery        uintptr
	streamWaitEvent, eventCreate, eventDestroy, eventRecord            uintptr
	eventSynchronize, eventQuery, eventElapsedTime, eventElapsedTimeV1 uintptr
	streamBatchMemOp, streamIsCapturing, streamBeginCapture            uintptr
	streamEndCapture, graphInstantiate, graphLaunch, graphDestroy      uintptr
	graphExecDestroy, memcpyBatchAsyncV2, memcpyBatchAsyncV1           uintptr
}

// symbol is one entry of the table: the exported name, its C prototype
// (CUDA 13.0 cuda.h), and whether Open fails without it.
type symbol struct {
	name     string
	proto    string
	optional bool
	// fallback marks a deliberately older name, used only where the name
	// cuda.h maps to is missing (it is not what the current header maps to).
	fallback bool
	fn       *uintptr
}

// table lists every libcuda entry point the backend calls, under the
// versioned names cuda.h's macros resolve to: dlsym of the plain name can
// return a legacy ABI (docs/protocol.md#versioned-driver-symbols). No cuMulticast* symbol is
// bound (see Runtime.MulticastCreate).
func (s *syms) table() []symbol {
	const opt = true
	return []symbol{
		{name: "cuInit", proto: "CUresult cuInit(unsigned int Flags)", fn: &s.init},
		{name: "cuDriverGetVersion", proto: "CUresult cuDriverGetVersion(int *driverVersion)", fn: &s.driverGetVersion},
		{name: "cuDeviceGetCount", proto: "CUresult cuDeviceGetCount(int *count)", fn: &s.deviceGetCount},
		{name: "cuDeviceGet", proto: "CUresult cuDeviceGet(CUdevice *device, int ordinal)", fn: &s.deviceGet},
		{name: "cuDeviceGetName", proto: "CUresult cuDeviceGetName(char *name, int len, CUdevice dev)", fn: &s.deviceGetName},
		{name: "cuDeviceGetAttribute", proto: "CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)", fn: &s.deviceGetAttribute},
		{name: "cuDeviceCanAccessPeer", proto: "CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)", fn: &s.deviceCanAccessPeer},
		{name: "cuDevicePrimaryCtxRetain", proto: "CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)", fn: &s.primaryCtxRetain},
		{name: "cuCtxSetCurrent", proto: "CUresult cuCtxSetCurrent(CUcontext ctx)", fn: &s.ctxSetCurrent},
		{name: "cuCtxGetCurrent", proto: "CUresult cuCtxGetCurrent(CUcontext *pctx)", fn: &s.ctxGetCurrent},
		{name: "cuCtxGetDevice", proto: "CUresult cuCtxGetDevice(CUdevice *device)", fn: &s.ctxGetDevice},
		{name: "cuCtxSynchronize", proto: "CUresult cuCtxSynchronize(void)", fn: &s.ctxSynchronize},

		{name: "cuMemGetAllocationGranularity", proto: "CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option)", fn: &s.memGetAllocationGranularity},
		{name: "cuMemCreate", proto: "CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags)", fn: &s.memCreate},
		{name: "cuMemRelease", proto: "CUresult cuMemRelease(CUmemGenericAllocationHandle handle)", fn: &s.memRelease},
		{name: "cuMemAddressReserve", proto: "CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags)", fn: &s.memAddressReserve},
		{name: "cuMemAddressFree", proto: "CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)", fn: &s.memAddressFree},
		{name: "cuMemMap", proto: "CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags)", fn: &s.memMap},
		{name: "cuMemUnmap", proto: "CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)", fn: &s.memUnmap},
		{name: "cuMemSetAccess", proto: "CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)", fn: &s.memSetAccess},
		{name: "cuMemExportToShareableHandle", proto: "CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType handleType, unsigned long long flags)", fn: &s.memExportToShareableHandle},
		{name: "cuMemImportFromShareableHandle", proto: "CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle, CUmemAllocationHandleType shHandleType)", fn: &s.memImportFromShareableHandle},
		{name: "cuMemRetainAllocationHandle", proto: "CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)", fn: &s.memRetainAllocationHandle},
		{name: "cuMemAlloc_v2", proto: "CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)", fn: &s.memAlloc},
		{name: "cuMemFree_v2", proto: "CUresult cuMemFree_v2(CUdeviceptr dptr)", fn: &s.memFree},
		{name: "cuMemGetAddressRange_v2", proto: "CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)", fn: &s.memGetAddressRange},
		// Unversioned in cuda.h (no macro maps it), present since CUDA 7.0.
		{name: "cuPointerGetAttributes", proto: "CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr)", fn: &s.pointerGetAttributes},
		{name: "cuMemsetD8_v2", proto: "CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)", fn: &s.memsetD8},
		{name: "cuMemcpy", proto: "CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)", fn: &s.memcpy},
		{name: "cuMemcpyAsync", proto: "CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)", fn: &s.memcpyAsync},
		{name: "cuMemcpy2DAsync_v2", proto: "CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)", fn: &s.memcpy2DAsync},

		{name: "cuStreamCreate", proto: "CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)", fn: &s.streamCreate},
		{name: "cuStreamDestroy_v2", proto: "CUresult cuStreamDestroy_v2(CUstream hStream)", fn: &s.streamDestroy},
		{name: "cuStreamSynchronize", proto: "CUresult cuStreamSynchronize(CUstream hStream)", fn: &s.streamSynchronize},
		{name: "cuStreamQuery", proto: "CUresult cuStreamQuery(CUstream hStream)", fn: &s.streamQuery},
		{name: "cuStreamWaitEvent", proto: "CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)", fn: &s.streamWaitEvent},
		{name: "cuEventCreate", proto: "CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)", fn: &s.eventCreate},
		{name: "cuEventDestroy_v2", proto: "CUresult cuEventDestroy_v2(CUevent hEvent)", fn: &s.eventDestroy},
		{name: "cuEventRecord", proto: "CUresult cuEventRecord(CUevent hEvent, CUstream hStream)", fn: &s.eventRecord},
		{name: "cuEventSynchronize", proto: "CUresult cuEventSynchronize(CUevent hEvent)", fn: &s.eventSynchronize},
		{name: "cuEventQuery", proto: "CUresult cuEventQuery(CUevent hEvent)", fn: &s.eventQuery},
		{name: "cuEventElapsedTime_v2", proto: "CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)", optional: opt, fn: &s.eventElapsedTime},
		{name: "cuEventElapsedTime", proto: "CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)", optional: opt, fallback: true, fn: &s.eventElapsedTimeV1},

		{name: "cuStreamBatchMemOp_v2", proto: "CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags)", fn: &s.streamBatchMemOp},
		{name: "cuStreamIsCapturing", proto: "CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)", fn: &s.streamIsCapturing},
		{name: "cuStreamBeginCapture_v2", proto: "CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)", fn: &s.streamBeginCapture},
		{name: "cuStreamEndCapture", proto: "CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)", fn: &s.streamEndCapture},
		{name: "cuGraphInstantiateWithFlags", proto: "CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)", fn: &s.graphInstantiate},
		{name: "cuGraphLaunch", proto: "CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)", fn: &s.graphLaunch},
		{name: "cuGraphDestroy", proto: "CUresult cuGraphDestroy(CUgraph hGraph)", fn: &s.graphDestroy},
		{name: "cuGraphExecDestroy", proto: "CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)", fn: &s.graphExecDestroy},

		// Batched copies: CUDA 13.0 ABI (8 args) under _v2; the plain name is
		// the 12.8/12.9 ABI with size_t *failIdx before the stream. Which one
		// is called depends on cuDriverGetVersion (Open).
		{name: "cuMemcpyBatchAsync_v2", proto: "CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream)", optional: opt, fn: &s.memcpyBatchAsyncV2},
		{name: "cuMemcpyBatchAsync", proto: "CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream)", optional: opt, fallback: true, fn: &s.memcpyBatchAsyncV1},
	}
}

// load resolves the table in handle. A missing required symbol is an error
// naming it; optional ones are left 0. Dlsym is used throughout because
// purego.RegisterLibFunc panics on a missing symbol.
func (s *syms) load(handle uintptr) error {
	var missing []string
	for _, e := range s.table() {
		p, err := purego.Dlsym(handle, e.name)
		if err != nil || p == 0 {
			if !e.optional {
				missing = append(missing, e.name)
			}
			continue
		}
		*e.fn = p
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: missing symbols %v: %w", libName, missing, errors.ErrUnsupported)
	}
	if s.eventElapsedTime == 0 {
		s.eventElapsedTime = s.eventElapsedTimeV1
	}
	if s.eventElapsedTime == 0 {
		return fmt.Errorf("%s: missing symbol cuEventElapsedTime: %w", libName, errors.ErrUnsupported)
	}
	return nil
}
