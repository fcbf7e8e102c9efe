package nvidia

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/hiptest"
)

// TestGPUPointerInfo classifies each kind of memory on a real driver:
// MemAlloc (VMM) memory from the table, cuMemAlloc memory, pinned
// (cuMemAllocHost) and managed (cuMemAllocManaged, one page) memory
// through cuPointerGetAttributes, pageable Go memory and an unmapped page.
// It logs the driver's raw answer for pageable memory (CUDA_SUCCESS with
// memory type 0, or CUDA_ERROR_INVALID_VALUE): PointerInfo accepts both.
func TestGPUPointerInfo(t *testing.T) {
	r := openGPU(t)
	lib, err := purego.Dlopen(libName, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	sym := func(name string) uintptr {
		p, err := purego.Dlsym(lib, name)
		require.NoError(t, err, name)
		return p
	}

	p := alloc(t, r, 1<<20)
	info, err := r.PointerInfo(p + 100)
	require.NoError(t, err)
	require.Equal(t, hip.PtrDevice, info.Kind)
	require.Equal(t, 0, info.Device)
	require.Equal(t, p, info.Base)
	require.GreaterOrEqual(t, info.Size, uintptr(1<<20))

	// CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize): not in the table.
	var d uintptr
	require.NoError(t, r.call(r.fn.memAlloc, uintptr(unsafe.Pointer(&d)), 3<<20))
	defer func() { require.NoError(t, r.call(r.fn.memFree, d)) }()
	info, err = r.PointerInfo(hip.DevicePtr(d + 12345))
	require.NoError(t, err)
	t.Logf("cuMemAlloc memory: %+v", info)
	require.Equal(t, hip.PtrDevice, info.Kind)
	require.Equal(t, 0, info.Device)
	require.True(t, info.Contains(hip.DevicePtr(d), 3<<20), "range %#x+%d holds the allocation %#x+%d", info.Base, info.Size, d, 3<<20)

	// CUresult cuMemAllocHost_v2(void **pp, size_t bytesize); cuMemFreeHost(void *p).
	var h uintptr
	require.NoError(t, r.call(sym("cuMemAllocHost_v2"), uintptr(unsafe.Pointer(&h)), 1<<20))
	defer func() { require.NoError(t, r.call(sym("cuMemFreeHost"), h)) }()
	info, err = r.PointerInfo(hip.DevicePtr(h + 8))
	require.NoError(t, err)
	t.Logf("cuMemAllocHost memory: %+v", info)
	require.Equal(t, hip.PtrHostPinned, info.Kind)

	// CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags /* CU_MEM_ATTACH_GLOBAL */).
	var m uintptr
	require.NoError(t, r.call(sym("cuMemAllocManaged"), uintptr(unsafe.Pointer(&m)), 4096, 1))
	defer func() { require.NoError(t, r.call(r.fn.memFree, m)) }()
	info, err = r.PointerInfo(hip.DevicePtr(m))
	require.NoError(t, err)
	t.Logf("cuMemAllocManaged memory: %+v", info)
	require.Equal(t, hip.PtrManaged, info.Kind)

	goMem := make([]byte, 4096)
	q := newPtrQuery()
	raw := r.call(r.fn.pointerGetAttributes, uintptr(len(q.attrs)),
		uintptr(unsafe.Pointer(&q.attrs[0])), uintptr(unsafe.Pointer(&q.data[0])), uintptr(unsafe.Pointer(&goMem[0])))
	runtime.KeepAlive(q)
	t.Logf("driver %d on pageable memory: cuPointerGetAttributes = %v, memory type %d, managed %d, ordinal %d",
		r.version, raw, uint32(q.memType), uint8(q.managed), int32(uint32(q.ordinal)))
	info, err = r.PointerInfo(hip.DevicePtr(unsafe.Pointer(&goMem[0])))
	require.NoError(t, err)
	require.Equal(t, hip.PointerInfo{Kind: hip.PtrHostPageable, Device: -1}, info)
	runtime.KeepAlive(goMem)

	info, err = r.PointerInfo(hiptest.UnmappedPage(t))
	require.NoError(t, err)
	require.Equal(t, hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}, info)
}
