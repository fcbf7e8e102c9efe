package nvidia

import (
	"fmt"
	"runtime"
	"unsafe"

	"cecoll/internal/hip"
)

// VMM constants (cuda.h, docs/protocol.md#mapping-peer-memory).
const (
	memAllocationTypePinned = 1 // CU_MEM_ALLOCATION_TYPE_PINNED
	memHandleTypePosixFD    = 1 // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	memLocationTypeDevice   = 1 // CU_MEM_LOCATION_TYPE_DEVICE
	memAccessProtReadWrite  = 3 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	granularityRecommended  = 1 // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
)

// memAllocationProp mirrors CUmemAllocationProp (32 bytes).
type memAllocationProp struct {
	Type        uint32
	HandleTypes uint32
	LocType     int32
	LocID       int32
	Win32Meta   uintptr
	Compression uint8
	RDMACapable uint8
	Usage       uint16
	Reserved    [4]uint8
}

// memAccessDesc mirrors CUmemAccessDesc (12 bytes).
type memAccessDesc struct {
	LocType int32
	LocID   int32
	Flags   uint32
}

var (
	_ [32 - unsafe.Sizeof(memAllocationProp{})]byte
	_ [unsafe.Sizeof(memAllocationProp{}) - 32]byte
	_ [12 - unsafe.Sizeof(memAccessDesc{})]byte
	_ [unsafe.Sizeof(memAccessDesc{}) - 12]byte
)

// allocation is one entry of the table of memory this backend mapped.
type allocation struct {
	size   uintptr
	handle uint64 // CUmemGenericAllocationHandle; 0 for cuMemAlloc memory
	vmm    bool
	dev    int // the device it was allocated (or imported) on
}

func roundUp(n, to uintptr) uintptr { return (n + to - 1) / to * to }

func devProp(dev int) memAllocationProp {
	return memAllocationProp{
		Type:        memAllocationTypePinned,
		HandleTypes: memHandleTypePosixFD,
		LocType:     memLocationTypeDevice,
		LocID:       int32(dev),
	}
}

// vmmSupported reports (and caches) whether dev supports VMM with POSIX
// file-descriptor handles.
func (r *Runtime) vmmSupported(dev int) (bool, error) {
	r.mu.Lock()
	v := r.vmm[dev]
	r.mu.Unlock()
	if v != 0 {
		return v > 0, nil
	}
	a, err := r.attribute(attrVMMSupported, dev)
	if err != nil {
		return false, err
	}
	b, err := r.attribute(attrPosixFDSupported, dev)
	if err != nil {
		return false, err
	}
	v = -1
	if a != 0 && b != 0 {
		v = 1
	}
	r.mu.Lock()
	r.vmm[dev] = v
	r.mu.Unlock()
	return v > 0, nil
}

// granularity is dev's recommended VMM granularity (cached).
func (r *Runtime) granularity(dev int) (uintptr, error) {
	r.mu.Lock()
	g := r.gran[dev]
	r.mu.Unlock()
	if g != 0 {
		return g, nil
	}
	prop := devProp(dev)
	if err := r.call(r.fn.memGetAllocationGranularity, uintptr(unsafe.Pointer(&g)),
		uintptr(unsafe.Pointer(&prop)), granularityRecommended); err != nil {
		return 0, fmt.Errorf("cuMemGetAllocationGranularity: %w", err)
	}
	if g == 0 {
		g = 2 << 20
	}
	r.mu.Lock()
	r.gran[dev] = g
	r.mu.Unlock()
	return g, nil
}

// mapHandle reserves an address range for handle, maps it and gives
// read-write access to dev and to every device that can access dev's
// memory as a peer (as NCCL's ncclMemAlloc does), unwinding on failure.
func (r *Runtime) mapHandle(h uint64, size, align uintptr, dev int) (hip.DevicePtr, error) {
	var base uintptr
	if err := r.call(r.fn.memAddressReserve, uintptr(unsafe.Pointer(&base)), size, align, 0, 0); err != nil {
		return 0, fmt.Errorf("cuMemAddressReserve: %w", err)
	}
	if err := r.call(r.fn.memMap, base, size, 0, uintptr(h), 0); err != nil {
		_ = r.call(r.fn.memAddressFree, base, size)
		return 0, fmt.Errorf("cuMemMap: %w", err)
	}
	descs := []memAccessDesc{{LocType: memLocationTypeDevice, LocID: int32(dev), Flags: memAccessProtReadWrite}}
	for d := 0; d < r.ndev; d++ {
		if d == dev {
			continue
		}
		if ok, err := r.DeviceCanAccessPeer(d, dev); err == nil && ok {
			descs = append(descs, memAccessDesc{LocType: memLocationTypeDevice, LocID: int32(d), Flags: memAccessProtReadWrite})
		}
	}
	err := r.call(r.fn.memSetAccess, base, size, uintptr(unsafe.Pointer(&descs[0])), uintptr(len(descs)))
	runtime.KeepAlive(descs)
	if err != nil {
		_ = r.call(r.fn.memUnmap, base, size)
		_ = r.call(r.fn.memAddressFree, base, size)
		return 0, fmt.Errorf("cuMemSetAccess: %w", err)
	}
	return hip.DevicePtr(base), nil
}

// MemAlloc allocates through VMM as NCCL's ncclMemAlloc does: cuMemCreate
// (POSIX fd handle type) on the current device, size rounded up to the
// recommended granularity, cuMemAddressReserve + cuMemMap + cuMemSetAccess
// for the own device and every peer that can access it. Where the device
// has no VMM it falls back to cuMemAlloc_v2 (not exportable).
func (r *Runtime) MemAlloc(size uintptr) (hip.DevicePtr, error) {
	if size == 0 {
		return 0, hip.ErrInvalidValue
	}
	if err := r.lockCtx(); err != nil {
		return 0, err
	}
	defer runtime.UnlockOSThread()
	dev, err := r.ctxDevice()
	if err != nil {
		return 0, err
	}
	ok, err := r.vmmSupported(dev)
	if err != nil {
		return 0, err
	}
	if !ok {
		var p uintptr
		if err := r.call(r.fn.memAlloc, uintptr(unsafe.Pointer(&p)), size); err != nil {
			return 0, err
		}
		r.record(hip.DevicePtr(p), &allocation{size: size, dev: dev})
		return hip.DevicePtr(p), nil
	}
	g, err := r.granularity(dev)
	if err != nil {
		return 0, err
	}
	size = roundUp(size, g)
	prop := devProp(dev)
	var h uint64
	if err := r.call(r.fn.memCreate, uintptr(unsafe.Pointer(&h)), size, uintptr(unsafe.Pointer(&prop)), 0); err != nil {
		return 0, fmt.Errorf("cuMemCreate: %w", err)
	}
	p, err := r.mapHandle(h, size, g, dev)
	if err != nil {
		_ = r.call(r.fn.memRelease, uintptr(h))
		return 0, err
	}
	r.record(p, &allocation{size: size, handle: h, vmm: true, dev: dev})
	return p, nil
}

func (r *Runtime) record(p hip.DevicePtr, a *allocation) {
	r.mu.Lock()
	r.allocs[p] = a
	r.mu.Unlock()
}

// MemFree unmaps and releases an allocation of MemAlloc or MemImport and
// frees its address range. Other pointers give hip.ErrInvalidValue.
func (r *Runtime) MemFree(p hip.DevicePtr) error {
	r.mu.Lock()
	a, ok := r.allocs[p]
	delete(r.allocs, p)
	r.mu.Unlock()
	if !ok {
		return hip.ErrInvalidValue
	}
	if err := r.lockCtx(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if !a.vmm {
		return r.call(r.fn.memFree, uintptr(p))
	}
	errUnmap := r.call(r.fn.memUnmap, uintptr(p), a.size)
	errRelease := r.call(r.fn.memRelease, uintptr(a.handle))
	errFree := r.call(r.fn.memAddressFree, uintptr(p), a.size)
	for _, err := range []error{errUnmap, errRelease, errFree} {
		if err != nil {
			return err
		}
	}
	return nil
}

// MemExport returns a POSIX fd for the VMM allocation mapped at p
// (cuMemRetainAllocationHandle, cuMemExportToShareableHandle, release of
// the extra reference). The caller closes the fd.
func (r *Runtime) MemExport(p hip.DevicePtr) (int, error) {
	r.mu.Lock()
	a, ok := r.allocs[p]
	r.mu.Unlock()
	if ok && !a.vmm {
		return -1, hip.ErrNotSupported
	}
	if err := r.lockCtx(); err != nil {
		return -1, err
	}
	defer runtime.UnlockOSThread()
	var h uint64
	if err := r.call(r.fn.memRetainAllocationHandle, uintptr(unsafe.Pointer(&h)), uintptr(p)); err != nil {
		return -1, fmt.Errorf("cuMemRetainAllocationHandle: %w", err)
	}
	var fd int32 = -1
	err := r.call(r.fn.memExportToShareableHandle, uintptr(unsafe.Pointer(&fd)), uintptr(h), memHandleTypePosixFD, 0)
	_ = r.call(r.fn.memRelease, uintptr(h))
	if err != nil {
		return -1, fmt.Errorf("cuMemExportToShareableHandle: %w", err)
	}
	return int(fd), nil
}

// MemImport maps another process's exported allocation on the current
// device: cuMemImportFromShareableHandle, then reserve, map and access as
// MemAlloc. size is rounded up to the granularity as the exporter's was.
// The fd stays the caller's.
func (r *Runtime) MemImport(fd int, size uintptr) (hip.DevicePtr, error) {
	if size == 0 || fd < 0 {
		return 0, hip.ErrInvalidValue
	}
	if err := r.lockCtx(); err != nil {
		return 0, err
	}
	defer runtime.UnlockOSThread()
	dev, err := r.ctxDevice()
	if err != nil {
		return 0, err
	}
	g, err := r.granularity(dev)
	if err != nil {
		return 0, err
	}
	size = roundUp(size, g)
	var h uint64
	if err := r.call(r.fn.memImportFromShareableHandle, uintptr(unsafe.Pointer(&h)), uintptr(fd), memHandleTypePosixFD); err != nil {
		return 0, fmt.Errorf("cuMemImportFromShareableHandle: %w", err)
	}
	p, err := r.mapHandle(h, size, g, dev)
	if err != nil {
		_ = r.call(r.fn.memRelease, uintptr(h))
		return 0, err
	}
	r.record(p, &allocation{size: size, handle: h, vmm: true, dev: dev})
	return p, nil
}

// MemGetAddressRange returns the allocation holding p: from the table for
// memory of this backend, else from cuMemGetAddressRange_v2.
func (r *Runtime) MemGetAddressRange(p hip.DevicePtr) (hip.DevicePtr, uintptr, error) {
	if base, a := r.ownAllocation(p); a != nil {
		return base, a.size, nil
	}
	if err := r.lockCtx(); err != nil {
		return 0, 0, err
	}
	defer runtime.UnlockOSThread()
	var base, size uintptr
	if err := r.call(r.fn.memGetAddressRange, uintptr(unsafe.Pointer(&base)), uintptr(unsafe.Pointer(&size)), uintptr(p)); err != nil {
		return 0, 0, err
	}
	return hip.DevicePtr(base), size, nil
}

// ownAllocation returns the allocation of this backend holding p, or nil.
func (r *Runtime) ownAllocation(p hip.DevicePtr) (hip.DevicePtr, *allocation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for base, a := range r.allocs {
		if p >= base && uintptr(p-base) < a.size {
			return base, a
		}
	}
	return 0, nil
}
