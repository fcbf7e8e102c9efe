package amd

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"cecoll/internal/hip"
)

// HIP virtual-memory enum values; they equal CUDA's.
const (
	hipMemAllocationTypePinned          = 1
	hipMemHandleTypePosixFileDescriptor = 1
	hipMemLocationTypeDevice            = 1
	hipMemAccessFlagsProtReadWrite      = 3
	hipMemAllocationGranularityRecomm   = 1

	// hipDeviceMallocFinegrained asks hipExtMallocWithFlags for memory that
	// stays coherent with peer devices during a command, which the flags
	// written by peers need; coarse-grained memory is only coherent at
	// command boundaries.
	hipDeviceMallocFinegrained = 0x1
)

// memAllocationProp is hipMemAllocationProp: 32 bytes, CUDA's layout.
type memAllocationProp struct {
	Type                 uint32
	RequestedHandleTypes uint32
	Location             memLocation
	Win32HandleMetaData  uintptr
	CompressionType      uint8
	GPUDirectRDMACapable uint8
	Usage                uint16
	_                    uint32
}

// memLocation is hipMemLocation.
type memLocation struct {
	Type int32
	ID   int32
}

// memAccessDesc is hipMemAccessDesc: 12 bytes.
type memAccessDesc struct {
	Location memLocation
	Flags    uint32
}

var (
	_ [32 - unsafe.Sizeof(memAllocationProp{})]byte
	_ [unsafe.Sizeof(memAllocationProp{}) - 32]byte
	_ [12 - unsafe.Sizeof(memAccessDesc{})]byte
	_ [unsafe.Sizeof(memAccessDesc{}) - 12]byte
)

// allocation is one MemAlloc or MemImport result.
type allocation struct {
	size   uintptr
	handle uintptr // hipMemGenericAllocationHandle_t; 0 for hipMalloc memory
	vmm    bool
	dev    int // the device it was allocated (or imported) on
}

func roundUp(n, to uintptr) uintptr { return (n + to - 1) / to * to }

// vmmOn reports whether allocations on dev go through the VMM API.
func (r *Runtime) vmmOn(dev int) bool { return dev >= 0 && dev < len(r.vmm) && r.vmm[dev] }

func deviceProp(dev int) memAllocationProp {
	return memAllocationProp{
		Type:                 hipMemAllocationTypePinned,
		RequestedHandleTypes: hipMemHandleTypePosixFileDescriptor,
		Location:             memLocation{Type: hipMemLocationTypeDevice, ID: int32(dev)},
	}
}

func (r *Runtime) granularity(dev int) (uintptr, error) {
	prop := deviceProp(dev)
	var g uintptr
	if err := call3(r.sym.hipMemGetAllocationGranularity,
		uintptr(unsafe.Pointer(&g)), uintptr(unsafe.Pointer(&prop)), hipMemAllocationGranularityRecomm); err != nil {
		return 0, fmt.Errorf("hipMemGetAllocationGranularity: %w", err)
	}
	if g == 0 {
		g = 1 << 21
	}
	return g, nil
}

// MemAlloc implements hip.Runtime the way NCCL's ncclMemAlloc does on
// CUDA: hipMemCreate with a POSIX-fd handle, a reserved range, hipMemMap,
// and read-write access for the own device and every device that can reach
// it. Without VMM it falls back to hipExtMallocWithFlags (fine-grained) or
// hipMalloc plus peer access; such memory cannot be exported.
func (r *Runtime) MemAlloc(size uintptr) (hip.DevicePtr, error) {
	if size == 0 {
		return 0, hip.ErrInvalidValue
	}
	dev, err := r.GetDevice()
	if err != nil {
		return 0, fmt.Errorf("hipGetDevice: %w", err)
	}
	if !r.vmmOn(dev) {
		return r.mallocFallback(dev, size)
	}
	gran, err := r.granularity(dev)
	if err != nil {
		return 0, err
	}
	size = roundUp(size, gran)
	prop := deviceProp(dev)
	var h uintptr
	if err := call4(r.sym.hipMemCreate,
		uintptr(unsafe.Pointer(&h)), size, uintptr(unsafe.Pointer(&prop)), 0); err != nil {
		return 0, fmt.Errorf("hipMemCreate: %w", err)
	}
	p, err := r.mapHandle(dev, h, size, gran)
	if err != nil {
		_ = call1(r.sym.hipMemRelease, h)
		return 0, err
	}
	r.mu.Lock()
	r.allocs[p] = &allocation{size: size, handle: h, vmm: true, dev: dev}
	r.mu.Unlock()
	return p, nil
}

// mapHandle reserves size bytes, maps h there and grants access to dev and
// to every device that can access dev's memory; it unwinds on failure.
func (r *Runtime) mapHandle(dev int, h, size, align uintptr) (hip.DevicePtr, error) {
	var p uintptr
	if err := call5(r.sym.hipMemAddressReserve,
		uintptr(unsafe.Pointer(&p)), size, align, 0, 0); err != nil {
		return 0, fmt.Errorf("hipMemAddressReserve: %w", err)
	}
	if err := call5(r.sym.hipMemMap, p, size, 0, h, 0); err != nil {
		_ = call2(r.sym.hipMemAddressFree, p, size)
		return 0, fmt.Errorf("hipMemMap: %w", err)
	}
	descs := make([]memAccessDesc, 0, r.ndev)
	for d := range r.ndev {
		if d != dev {
			if ok, err := r.DeviceCanAccessPeer(d, dev); err != nil || !ok {
				continue
			}
		}
		descs = append(descs, memAccessDesc{
			Location: memLocation{Type: hipMemLocationTypeDevice, ID: int32(d)},
			Flags:    hipMemAccessFlagsProtReadWrite,
		})
	}
	if err := call4(r.sym.hipMemSetAccess,
		p, size, uintptr(unsafe.Pointer(&descs[0])), uintptr(len(descs))); err != nil {
		_ = call2(r.sym.hipMemUnmap, p, size)
		_ = call2(r.sym.hipMemAddressFree, p, size)
		return 0, fmt.Errorf("hipMemSetAccess: %w", err)
	}
	return hip.DevicePtr(p), nil
}

func (r *Runtime) mallocFallback(dev int, size uintptr) (hip.DevicePtr, error) {
	var p uintptr
	var err error
	if r.sym.hipExtMallocWithFlags != 0 {
		err = call3(r.sym.hipExtMallocWithFlags,
			uintptr(unsafe.Pointer(&p)), size, hipDeviceMallocFinegrained)
		if err != nil {
			err = fmt.Errorf("hipExtMallocWithFlags: %w", err)
		}
	} else {
		err = call2(r.sym.hipMalloc, uintptr(unsafe.Pointer(&p)), size)
		if err != nil {
			err = fmt.Errorf("hipMalloc: %w", err)
		}
	}
	if err != nil {
		return 0, err
	}
	if err := r.enablePeersOf(dev); err != nil {
		_ = call1(r.sym.hipFree, p)
		return 0, err
	}
	r.mu.Lock()
	r.allocs[hip.DevicePtr(p)] = &allocation{size: size, dev: dev}
	r.mu.Unlock()
	return hip.DevicePtr(p), nil
}

// enablePeersOf lets every device that can reach dev's memory access it
// (hipMalloc memory needs hipDeviceEnablePeerAccess from the accessing
// device). Each pair is enabled once per Runtime.
func (r *Runtime) enablePeersOf(dev int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r.mu.Lock()
	defer r.mu.Unlock()
	saved := -1
	defer func() {
		if saved >= 0 {
			_ = r.SetDevice(saved)
		}
	}()
	for d := range r.ndev {
		if d == dev || r.peerOn[[2]int{d, dev}] {
			continue
		}
		if ok, err := r.DeviceCanAccessPeer(d, dev); err != nil || !ok {
			continue
		}
		if saved < 0 {
			cur, err := r.GetDevice()
			if err != nil {
				return fmt.Errorf("hipGetDevice: %w", err)
			}
			saved = cur
		}
		if err := r.SetDevice(d); err != nil {
			return fmt.Errorf("hipSetDevice(%d): %w", d, err)
		}
		err := call2(r.sym.hipDeviceEnablePeerAccess, uintptr(dev), 0)
		if err != nil && !errors.Is(err, hip.Error(hipErrorPeerAccessAlreadyEnabled)) {
			return fmt.Errorf("hipDeviceEnablePeerAccess(%d->%d): %w", d, dev, err)
		}
		r.peerOn[[2]int{d, dev}] = true
	}
	return nil
}

// MemFree implements hip.Runtime.
func (r *Runtime) MemFree(p hip.DevicePtr) error {
	r.mu.Lock()
	a, ok := r.allocs[p]
	if ok {
		delete(r.allocs, p)
	}
	r.mu.Unlock()
	if !ok {
		return hip.ErrInvalidValue
	}
	if !a.vmm {
		return call1(r.sym.hipFree, uintptr(p))
	}
	err := call2(r.sym.hipMemUnmap, uintptr(p), a.size)
	if e := call2(r.sym.hipMemAddressFree, uintptr(p), a.size); err == nil {
		err = e
	}
	if e := call1(r.sym.hipMemRelease, a.handle); err == nil {
		err = e
	}
	return err
}

// MemExport implements hip.Runtime: a POSIX fd for a VMM allocation.
// hipMalloc memory (no VMM) returns ErrNotSupported.
func (r *Runtime) MemExport(p hip.DevicePtr) (int, error) {
	r.mu.Lock()
	a, ok := r.allocs[p]
	r.mu.Unlock()
	if !ok {
		return -1, hip.ErrInvalidValue
	}
	if !a.vmm {
		return -1, hip.ErrNotSupported
	}
	var fd int32 = -1
	if err := call4(r.sym.hipMemExportToShareableHandle,
		uintptr(unsafe.Pointer(&fd)), a.handle, hipMemHandleTypePosixFileDescriptor, 0); err != nil {
		return -1, fmt.Errorf("hipMemExportToShareableHandle: %w", err)
	}
	return int(fd), nil
}

// MemImport implements hip.Runtime: the fd is passed by value in the
// pointer argument ((void*)(uintptr_t)fd, as ROCclr reads it back), and
// hipMemExportToShareableHandle writes an int. size is rounded up
// to the allocation granularity, as MemAlloc rounded it on the exporting
// side.
func (r *Runtime) MemImport(fd int, size uintptr) (hip.DevicePtr, error) {
	if size == 0 || fd < 0 {
		return 0, hip.ErrInvalidValue
	}
	dev, err := r.GetDevice()
	if err != nil {
		return 0, fmt.Errorf("hipGetDevice: %w", err)
	}
	if !r.vmmOn(dev) {
		return 0, hip.ErrNotSupported
	}
	gran, err := r.granularity(dev)
	if err != nil {
		return 0, err
	}
	size = roundUp(size, gran)
	if fd == 0 {
		// The fd travels as the pointer argument, and HIP refuses a NULL one.
		d, err := syscall.Dup(fd)
		if err != nil {
			return 0, fmt.Errorf("dup: %w", err)
		}
		defer syscall.Close(d)
		fd = d
	}
	var h uintptr
	if err := call3(r.sym.hipMemImportFromShareableHandle,
		uintptr(unsafe.Pointer(&h)), uintptr(fd), hipMemHandleTypePosixFileDescriptor); err != nil {
		return 0, fmt.Errorf("hipMemImportFromShareableHandle: %w", err)
	}
	p, err := r.mapHandle(dev, h, size, gran)
	if err != nil {
		_ = call1(r.sym.hipMemRelease, h)
		return 0, err
	}
	r.mu.Lock()
	r.allocs[p] = &allocation{size: size, handle: h, vmm: true, dev: dev}
	r.mu.Unlock()
	return p, nil
}

// MemGetAddressRange implements hip.Runtime: cecoll's own allocations are
// answered from its table (VMM ranges included), others by the runtime.
func (r *Runtime) MemGetAddressRange(p hip.DevicePtr) (hip.DevicePtr, uintptr, error) {
	if base, a := r.ownAllocation(p); a != nil {
		return base, a.size, nil
	}
	var base, size uintptr
	if err := call3(r.sym.hipMemGetAddressRange,
		uintptr(unsafe.Pointer(&base)), uintptr(unsafe.Pointer(&size)), uintptr(p)); err != nil {
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
