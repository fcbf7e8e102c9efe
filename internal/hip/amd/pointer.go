package amd

import (
	"errors"
	"fmt"
	"unsafe"

	"cecoll/internal/hip"
)

// pointerAttribute is hipPointerAttribute_t as ROCm 6 and 7 declare it
// (hip_runtime_api.h; ROCm 5's first member was a union of memoryType and
// type, with other enum values, but this backend loads only
// libamdhip64.so.6 and .7): 32 bytes.
type pointerAttribute struct {
	Type            int32 // enum hipMemoryType
	Device          int32
	DevicePointer   uintptr
	HostPointer     uintptr
	IsManaged       int32
	AllocationFlags uint32
}

var (
	_ [32 - unsafe.Sizeof(pointerAttribute{})]byte
	_ [unsafe.Sizeof(pointerAttribute{}) - 32]byte
)

// hipMemoryType values of ROCm 6 and 7.
const (
	hipMemoryTypeUnregistered = 0
	hipMemoryTypeHost         = 1 // hipHostMalloc'd or hipHostRegister'ed
	hipMemoryTypeDevice       = 2
	hipMemoryTypeManaged      = 3
	hipMemoryTypeArray        = 10
	hipMemoryTypeUnified      = 11
)

// PointerInfo implements hip.Runtime. Memory this backend allocated or
// imported is answered from its table (PtrDevice, its device, base and
// size); anything else is asked of hipPointerGetAttributes, and for
// device memory hipMemGetAddressRange gives base and size. For memory HIP
// does not know, ROCm releases before the fix of
// https://github.com/ROCm/hip/issues/3057 (2024) return
// hipErrorInvalidValue and later ones hipSuccess with
// hipMemoryTypeUnregistered: both mean "not HIP's", and mincore(2) then
// tells pageable host memory (PtrHostPageable) from an address that is
// not mapped (PtrUnmapped).
func (r *Runtime) PointerInfo(p hip.DevicePtr) (hip.PointerInfo, error) {
	if p == 0 {
		return hip.PointerInfo{Device: -1}, hip.ErrInvalidValue
	}
	if base, a := r.ownAllocation(p); a != nil {
		return hip.PointerInfo{Kind: hip.PtrDevice, Device: a.dev, Base: base, Size: a.size}, nil
	}
	var attr pointerAttribute
	err := call2(r.sym.hipPointerGetAttributes, uintptr(unsafe.Pointer(&attr)), uintptr(p))
	switch {
	case err == nil:
	case errors.Is(err, hip.ErrInvalidValue):
		attr = pointerAttribute{} // not HIP's, as older releases say it
	default:
		return hip.PointerInfo{Device: -1}, fmt.Errorf("hipPointerGetAttributes: %w", err)
	}
	info := hip.PointerInfo{Device: -1}
	switch {
	case attr.IsManaged != 0 || attr.Type == hipMemoryTypeManaged || attr.Type == hipMemoryTypeUnified:
		info.Kind = hip.PtrManaged
	case attr.Type == hipMemoryTypeDevice:
		info.Kind, info.Device = hip.PtrDevice, int(attr.Device)
		var base, size uintptr
		if call3(r.sym.hipMemGetAddressRange, uintptr(unsafe.Pointer(&base)), uintptr(unsafe.Pointer(&size)), uintptr(p)) == nil {
			info.Base, info.Size = hip.DevicePtr(base), size
		}
	case attr.Type == hipMemoryTypeHost:
		info.Kind = hip.PtrHostPinned
	case attr.Type == hipMemoryTypeArray:
		info.Kind = hip.PtrUnmapped // not linear memory
	case hip.HostMapped(p):
		info.Kind = hip.PtrHostPageable
	default:
		info.Kind = hip.PtrUnmapped
	}
	return info, nil
}
