package nvidia

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/hiptest"
)

// fakePtrLib builds testdata/fakeptr.c (a stand-in for the driver's
// cuPointerGetAttributes) and returns a Runtime whose entry points is it,
// with the fake's controls.
func fakePtrLib(t *testing.T) (*Runtime, map[string]uintptr) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot build the fake cuPointerGetAttributes")
	}
	so := filepath.Join(t.TempDir(), "libfakeptr.so")
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", so, "testdata/fakeptr.c").CombinedOutput()
	require.NoError(t, err, "%s", out)
	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	ctl := map[string]uintptr{}
	for _, name := range []string{"cuPointerGetAttributes", "fake_reset", "fake_set_pointer", "fake_set_legacy", "fake_fail_next", "fake_calls", "fake_last_attrs"} {
		ctl[name], err = purego.Dlsym(h, name)
		require.NoError(t, err, name)
	}
	purego.SyscallN(ctl["fake_reset"])
	r := &Runtime{allocs: map[hip.DevicePtr]*allocation{}}
	r.fn.pointerGetAttributes = ctl["cuPointerGetAttributes"]
	return r, ctl
}

// TestPointerInfoNoGPU checks PointerInfo's use of cuPointerGetAttributes
// against a fake: the attribute list, each memory type's decoding, both
// answers a driver gives for memory it does not know (CUDA_SUCCESS with
// memory type 0, or CUDA_ERROR_INVALID_VALUE) split by mincore into
// pageable and unmapped, the backend's own memory answered without a
// driver call, and errors.
func TestPointerInfoNoGPU(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		name := "success-with-defaults"
		if legacy {
			name = "invalid-value"
		}
		t.Run(name, func(t *testing.T) {
			r, ctl := fakePtrLib(t)
			if legacy {
				purego.SyscallN(ctl["fake_set_legacy"], 1)
			}
			calls := func() int { n, _, _ := purego.SyscallN(ctl["fake_calls"]); return int(int32(n)) }

			page := uintptr(syscall.Getpagesize())
			m, err := syscall.Mmap(-1, 0, int(8*page), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
			require.NoError(t, err)
			defer syscall.Munmap(m)
			mem := uintptr(unsafe.Pointer(&m[0]))
			set := func(off, n uintptr, memType uint32, dev int, managed bool) {
				mg := uintptr(0)
				if managed {
					mg = 1
				}
				purego.SyscallN(ctl["fake_set_pointer"], mem+off, n, uintptr(memType), uintptr(dev), mg)
			}
			set(0, 2*page, memoryTypeDevice, 1, false)
			set(2*page, page, memoryTypeHost, 0, false)
			set(3*page, page, memoryTypeDevice, 0, true)
			set(4*page, page, memoryTypeUnified, 0, false)
			set(5*page, page, memoryTypeArray, 0, false)
			r.allocs[hip.DevicePtr(mem+6*page)] = &allocation{size: 2 * page, dev: 3}

			gone := uintptr(hiptest.UnmappedPage(t))
			goMem := make([]byte, 64)

			for _, c := range []struct {
				name string
				p    uintptr
				want hip.PointerInfo
			}{
				{"device", mem + 100, hip.PointerInfo{Kind: hip.PtrDevice, Device: 1, Base: hip.DevicePtr(mem), Size: 2 * page}},
				{"pinned host", mem + 2*page, hip.PointerInfo{Kind: hip.PtrHostPinned, Device: -1, Base: hip.DevicePtr(mem + 2*page), Size: page}},
				{"managed", mem + 3*page + 5, hip.PointerInfo{Kind: hip.PtrManaged, Device: -1, Base: hip.DevicePtr(mem + 3*page), Size: page}},
				{"unified", mem + 4*page, hip.PointerInfo{Kind: hip.PtrManaged, Device: -1, Base: hip.DevicePtr(mem + 4*page), Size: page}},
				{"array", mem + 5*page, hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}},
				{"pageable", uintptr(unsafe.Pointer(&goMem[0])), hip.PointerInfo{Kind: hip.PtrHostPageable, Device: -1}},
				{"unmapped", gone + 8, hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}},
			} {
				info, err := r.PointerInfo(hip.DevicePtr(c.p))
				require.NoError(t, err, c.name)
				require.Equal(t, c.want, info, c.name)
			}
			runtime.KeepAlive(goMem)
			var attrs [16]uint32
			n, _, _ := purego.SyscallN(ctl["fake_last_attrs"], uintptr(unsafe.Pointer(&attrs[0])), 16)
			require.Equal(t, []uint32{ptrAttrMemoryType, ptrAttrIsManaged, ptrAttrDeviceOrdinal, ptrAttrRangeStart, ptrAttrRangeSize}, attrs[:n])

			before := calls()
			info, err := r.PointerInfo(hip.DevicePtr(mem + 7*page))
			require.NoError(t, err)
			require.Equal(t, hip.PointerInfo{Kind: hip.PtrDevice, Device: 3, Base: hip.DevicePtr(mem + 6*page), Size: 2 * page}, info, "own allocation")
			require.Equal(t, before, calls(), "own allocations need no driver call")

			_, err = r.PointerInfo(0)
			require.ErrorIs(t, err, hip.ErrInvalidValue)
			purego.SyscallN(ctl["fake_fail_next"], uintptr(hip.ErrDeinitialized))
			_, err = r.PointerInfo(hip.DevicePtr(mem))
			require.ErrorIs(t, err, hip.ErrDeinitialized)
			require.Contains(t, err.Error(), "cuPointerGetAttributes")
		})
	}
}
