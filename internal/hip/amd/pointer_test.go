package amd

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/hiptest"
)

// setPointer declares [p, p+n) to the fake as memory of a hipMemoryType
// (fake_set_pointer); legacyPointers makes it refuse unknown pointers
// with hipErrorInvalidValue, as ROCm before 2024.
func (f *fake) setPointer(p uintptr, n uintptr, memType, dev int, managed bool) {
	h, err := purego.Dlopen(f.path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(f.t, err)
	fn, err := purego.Dlsym(h, "fake_set_pointer")
	require.NoError(f.t, err)
	m := uintptr(0)
	if managed {
		m = 1
	}
	purego.SyscallN(fn, p, n, uintptr(memType), uintptr(dev), m)
}

func (f *fake) legacyPointers(on bool) {
	h, err := purego.Dlopen(f.path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(f.t, err)
	fn, err := purego.Dlsym(h, "fake_set_legacy_pointers")
	require.NoError(f.t, err)
	v := uintptr(0)
	if on {
		v = 1
	}
	purego.SyscallN(fn, v)
}

// mmapPages returns n pages of host memory outside the Go heap, for
// pointers the fake declares.
func mmapPages(t *testing.T, n int) uintptr {
	t.Helper()
	m, err := syscall.Mmap(-1, 0, n*syscall.Getpagesize(), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	return uintptr(unsafe.Pointer(&m[0]))
}

// TestPointerInfo: the backend's own memory from its table (no HIP call);
// hipPointerGetAttributes' memory types decoded, device memory with
// hipMemGetAddressRange's base and size; unknown memory as HIP's old
// (hipErrorInvalidValue) and new (hipMemoryTypeUnregistered) releases
// report it, told apart by mincore into pageable and unmapped.
func TestPointerInfo(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			f := newFake(t, fakeFull)
			f.legacyPointers(legacy)
			rt := f.open()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			require.NoError(t, rt.SetDevice(1))
			defer func() { require.NoError(t, rt.SetDevice(0)) }()

			p, err := rt.MemAlloc(1000)
			require.NoError(t, err)
			defer func() { require.NoError(t, rt.MemFree(p)) }()
			info, err := rt.PointerInfo(p + 999)
			require.NoError(t, err)
			require.Equal(t, hip.PointerInfo{Kind: hip.PtrDevice, Device: 1, Base: p, Size: 65536}, info, "own VMM memory")
			require.Empty(t, f.last("hipPointerGetAttributes"), "answered from the table")

			page := uintptr(syscall.Getpagesize())
			mem := mmapPages(t, 6)
			f.setPointer(mem, 2*page, hipMemoryTypeDevice, 0, false)
			f.setPointer(mem+2*page, page, hipMemoryTypeHost, 0, false)
			f.setPointer(mem+3*page, page, hipMemoryTypeDevice, 1, true)
			f.setPointer(mem+4*page, page, hipMemoryTypeUnified, 0, false)
			f.setPointer(mem+5*page, page, hipMemoryTypeArray, 0, false)
			gone := uintptr(hiptest.UnmappedPage(t))
			goMem := make([]byte, 64)
			for _, c := range []struct {
				name string
				p    uintptr
				want hip.PointerInfo
			}{
				{"device", mem + 100, hip.PointerInfo{Kind: hip.PtrDevice, Device: 0, Base: hip.DevicePtr(mem), Size: 2 * page}},
				{"pinned host", mem + 2*page + 8, hip.PointerInfo{Kind: hip.PtrHostPinned, Device: -1}},
				{"managed", mem + 3*page, hip.PointerInfo{Kind: hip.PtrManaged, Device: -1}},
				{"unified", mem + 4*page, hip.PointerInfo{Kind: hip.PtrManaged, Device: -1}},
				{"array", mem + 5*page, hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}},
				{"go heap", uintptr(unsafe.Pointer(&goMem[0])), hip.PointerInfo{Kind: hip.PtrHostPageable, Device: -1}},
				{"unmapped", gone + 12, hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}},
			} {
				info, err := rt.PointerInfo(hip.DevicePtr(c.p))
				require.NoError(t, err, c.name)
				require.Equal(t, c.want, info, c.name)
				require.Equal(t, fmt.Sprintf("ptr=%#x", c.p), f.last("hipPointerGetAttributes"), "%s: the pointer is passed as is", c.name)
			}
			runtime.KeepAlive(goMem)

			_, err = rt.PointerInfo(0)
			require.ErrorIs(t, err, hip.ErrInvalidValue)
			f.failNextCall("hipPointerGetAttributes", 999)
			_, err = rt.PointerInfo(hip.DevicePtr(mem))
			require.ErrorIs(t, err, hip.ErrUnknown)
			require.Contains(t, err.Error(), "hipPointerGetAttributes")
		})
	}
}

// The fallback allocator's memory (no VMM) is the table's too.
func TestPointerInfoFallbackMemory(t *testing.T) {
	f := newFake(t, fakeFull)
	f.vmm(false)
	rt := f.open()
	p, err := rt.MemAlloc(5000)
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.MemFree(p)) }()
	info, err := rt.PointerInfo(p + 4999)
	require.NoError(t, err)
	require.Equal(t, hip.PointerInfo{Kind: hip.PtrDevice, Device: 0, Base: p, Size: 5000}, info)
	require.Empty(t, f.last("hipPointerGetAttributes"))
}
