package host

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/memfd"
)

func TestMemAllocAndRange(t *testing.T) {
	rt := newRT(t, Config{Devices: 2})
	_, err := rt.MemAlloc(0)
	require.Equal(t, hip.ErrInvalidValue, err)
	p := alloc(t, rt, 100)
	require.Zero(t, uintptr(p)%pageSize)
	base, size, err := rt.MemGetAddressRange(p + 50)
	require.NoError(t, err)
	require.Equal(t, p, base)
	require.Equal(t, pageSize, size)
	_, _, err = rt.MemGetAddressRange(p + hip.DevicePtr(pageSize))
	require.Equal(t, hip.ErrNotFound, err)
	_, _, err = rt.MemGetAddressRange(0)
	require.Equal(t, hip.ErrInvalidValue, err)
	goBuf := make([]byte, 64)
	_, _, err = rt.MemGetAddressRange(hip.DevicePtr(unsafe.Pointer(&goBuf[0])))
	require.Equal(t, hip.ErrNotFound, err)

	require.Equal(t, hip.ErrInvalidValue, rt.MemFree(p+8), "not a base")
	q, err := rt.MemAlloc(10)
	require.NoError(t, err)
	require.NoError(t, rt.MemFree(q))
	require.Equal(t, hip.ErrInvalidValue, rt.MemFree(q), "double free")
	_, err = rt.MemExport(q)
	require.Equal(t, hip.ErrInvalidValue, err)
}

// An exported allocation imported again (as another process would) maps
// the same bytes in both directions.
func TestMemExportImport(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	p := alloc(t, rt, 3*pageSize)
	fill(mem(p, 3*pageSize), 3)
	fd, err := rt.MemExport(p)
	require.NoError(t, err)
	q, err := rt.MemImport(fd, 3*pageSize)
	require.NoError(t, err)
	closeFD(t, fd)
	require.NotEqual(t, p, q)
	require.Equal(t, mem(p, 3*pageSize), mem(q, 3*pageSize))
	store(q+8, 0xabcd)
	require.Equal(t, uint32(0xabcd), load(p+8))
	base, size, err := rt.MemGetAddressRange(q + 100)
	require.NoError(t, err)
	require.Equal(t, q, base)
	require.Equal(t, 3*pageSize, size)
	a := rt.mem.find(uintptr(q))
	require.True(t, a.imported)

	// A wait on one mapping is released by a write-value through the other.
	s := newStream(t, rt)
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(p, 5, hip.WaitEQ), write(q+4, 6)}))
	require.NoError(t, rt.StreamBatchMemOp(newStream(t, rt), []hip.MemOp{write(q, 5)}))
	require.NoError(t, rt.StreamSynchronize(s))
	require.Equal(t, uint32(6), load(p+4))
	require.NoError(t, rt.MemFree(q))

	fd, err = rt.MemExport(p)
	require.NoError(t, err)
	_, err = rt.MemImport(fd, 4*pageSize)
	require.Equal(t, hip.ErrInvalidValue, err, "larger than the exported file")
	closeFD(t, fd)
}

// MemImport maps only what a peer cannot pull from under the mapping: a
// memfd sealed against shrinking (MemAlloc's are) and as long as the size
// claimed. An unsealed memfd, shrunk by its owner after the import, would
// kill this process with SIGBUS at the next access.
func TestMemImportChecksPeerFD(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	p := alloc(t, rt, pageSize)
	fd, err := rt.MemExport(p)
	require.NoError(t, err)
	require.ErrorIs(t, syscall.Ftruncate(fd, 0), syscall.EPERM, "an exported allocation cannot shrink")
	closeFD(t, fd)

	unsealed, err := memfd.CreateUnsealed("unsealed", int64(pageSize))
	require.NoError(t, err)
	defer closeFD(t, unsealed)
	_, err = rt.MemImport(unsealed, pageSize)
	require.Equal(t, hip.ErrInvalidHandle, err, "unsealed memfd")

	var pipe [2]int
	require.NoError(t, syscall.Pipe(pipe[:]))
	defer closeFD(t, pipe[0])
	defer closeFD(t, pipe[1])
	_, err = rt.MemImport(pipe[0], pageSize)
	require.Equal(t, hip.ErrInvalidHandle, err, "pipe")

	small, err := memfd.Create("small", int64(pageSize))
	require.NoError(t, err)
	defer closeFD(t, small)
	_, err = rt.MemImport(small, 2*pageSize)
	require.Equal(t, hip.ErrInvalidValue, err, "smaller than claimed")
	_, err = rt.MemImport(small, ^uintptr(0))
	require.Equal(t, hip.ErrInvalidValue, err, "a size that wraps when rounded")
	q, err := rt.MemImport(small, pageSize)
	require.NoError(t, err)
	require.NoError(t, rt.MemFree(q))
}

func TestMemsetMemcpy(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	p := alloc(t, rt, 8192)
	require.NoError(t, rt.Memset(p, 0x5a, 8192))
	for _, b := range mem(p, 8192) {
		require.Equal(t, byte(0x5a), b)
	}
	host := make([]byte, 5000)
	fill(host, 1)
	require.NoError(t, hip.CopyToDevice(rt, p+3, host))
	back := make([]byte, 5000)
	require.NoError(t, hip.CopyFromDevice(rt, back, p+3))
	require.Equal(t, host, back)
	require.Equal(t, hip.ErrInvalidValue, rt.Memcpy(0, uintptr(p), 4))
	require.NoError(t, rt.Memcpy(0, 0, 0))

	// Memcpy runs after the work already on the legacy NULL stream.
	lockThread()
	defer unlockThread()
	require.NoError(t, rt.StreamBatchMemOp(hip.StreamNull, []hip.MemOp{write(p, 77)}))
	out := make([]uint32, 1)
	require.NoError(t, rt.Memcpy(uintptr(unsafe.Pointer(&out[0])), uintptr(p), 4))
	require.Equal(t, uint32(77), out[0])
}

// Batched copies move the right bytes, small ones on the worker and large
// ones through the copy engines; copies of one batch may overlap freely in
// time but not in memory.
func TestBatchCopyBytes(t *testing.T) {
	for _, size := range []uintptr{8, 4096, 1 << 20} {
		rt := newRT(t, Config{Devices: 1})
		s := newStream(t, rt)
		const n = 6
		src := alloc(t, rt, n*size)
		dst := alloc(t, rt, n*size)
		fill(mem(src, n*size), byte(size))
		var ds, ss []hip.DevicePtr
		var sz []uintptr
		for i := uintptr(0); i < n; i++ {
			ds = append(ds, dst+hip.DevicePtr(i*size))
			ss = append(ss, src+hip.DevicePtr((n-1-i)*size))
			sz = append(sz, size)
		}
		attrs := []hip.CopyAttributes{{SrcAccessOrder: hip.SrcAccessOrderStream}}
		require.NoError(t, rt.MemcpyBatchAsync(ds, ss, sz, attrs, []uintptr{0}, s))
		require.NoError(t, rt.StreamSynchronize(s))
		for i := uintptr(0); i < n; i++ {
			require.Equal(t, mem(src+hip.DevicePtr((n-1-i)*size), size), mem(dst+hip.DevicePtr(i*size), size), "size %d copy %d", size, i)
		}
	}
}
