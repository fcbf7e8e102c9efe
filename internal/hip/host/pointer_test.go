package host

import (
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/hiptest"
)

// TestPointerInfo: the host device's own allocations (allocated, imported,
// multicast) with device, base and size; any other readable memory as
// device memory of the calling thread's device; memory that cannot be
// read (unmapped, PROT_NONE, past a file's end) as PtrUnmapped.
func TestPointerInfo(t *testing.T) {
	rt := newRT(t, Config{Devices: 4})
	require.NoError(t, rt.SetDevice(2))
	p := alloc(t, rt, 10000)
	require.NoError(t, rt.SetDevice(1))
	fd, err := rt.MemExport(p)
	require.NoError(t, err)
	defer closeFD(t, fd)
	q, err := rt.MemImport(fd, 10000)
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.MemFree(q)) }()
	mc, err := rt.MulticastCreate([]hip.DevicePtr{p, q}, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.MulticastDestroy(mc)) }()

	goMem := make([]byte, 64)
	anon, err := syscall.Mmap(-1, 0, int(pageSize), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(t, err)
	defer syscall.Munmap(anon)
	none := protNone(t, pageSize)
	size := roundPage(10000)
	for _, c := range []struct {
		name string
		p    hip.DevicePtr
		want hip.PointerInfo
	}{
		{"allocation", p + 9999, hip.PointerInfo{Kind: hip.PtrDevice, Device: 2, Base: p, Size: size}},
		{"import", q, hip.PointerInfo{Kind: hip.PtrDevice, Device: 1, Base: q, Size: size}},
		{"multicast", mc + 100, hip.PointerInfo{Kind: hip.PtrDevice, Device: 1, Base: mc, Size: 4096}},
		{"go memory", hip.DevicePtr(unsafe.Pointer(&goMem[0])), hip.PointerInfo{Kind: hip.PtrDevice, Device: 1}},
		{"anonymous mapping", hip.DevicePtr(unsafe.Pointer(&anon[100])), hip.PointerInfo{Kind: hip.PtrDevice, Device: 1}},
		{"PROT_NONE mapping", none, hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}},
		{"past a file's end", hip.DevicePtr(pastEOF(t)), hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}},
		{"unmapped", hip.DevicePtr(unmapped(t)), hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}},
		{"first page", 8, hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}},
	} {
		info, err := rt.PointerInfo(c.p)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, info, c.name)
	}
	runtime.KeepAlive(goMem)
	_, err = rt.PointerInfo(0)
	require.ErrorIs(t, err, hip.ErrInvalidValue)

	// Neither the table nor the probe allocates.
	for _, a := range []hip.DevicePtr{p + 5, hip.DevicePtr(unsafe.Pointer(&anon[0]))} {
		require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = rt.PointerInfo(a) }))
	}
}

// BenchmarkPointerInfo: the cost of PointerInfo on a MemAlloc'd address
// (table lookup), on other mapped memory (a guarded read) and on an
// unmapped page (a guarded read that faults); and, for comparison, of
// hip.HostMapped's mincore(2) on the same two pages.
func BenchmarkPointerInfo(b *testing.B) {
	rt, err := New(Config{})
	require.NoError(b, err)
	defer rt.Close()
	p, err := rt.MemAlloc(1 << 20)
	require.NoError(b, err)
	defer rt.MemFree(p)
	anon, err := syscall.Mmap(-1, 0, int(pageSize), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(b, err)
	defer syscall.Munmap(anon)
	gone := hiptest.UnmappedPage(b)
	for _, c := range []struct {
		name string
		p    hip.DevicePtr
		want hip.PtrKind
	}{
		{"allocation", p + 100, hip.PtrDevice},
		{"mapped", hip.DevicePtr(unsafe.Pointer(&anon[0])), hip.PtrDevice},
		{"unmapped", gone, hip.PtrUnmapped},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				info, err := rt.PointerInfo(c.p)
				if err != nil || info.Kind != c.want {
					b.Fatal(info, err)
				}
			}
		})
		if c.name != "allocation" {
			b.Run("mincore/"+c.name, func(b *testing.B) {
				for b.Loop() {
					if hip.HostMapped(c.p) != (c.want == hip.PtrDevice) {
						b.Fatal("mincore disagrees")
					}
				}
			})
		}
	}
}
