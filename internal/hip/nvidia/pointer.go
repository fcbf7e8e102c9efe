package nvidia

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"cecoll/internal/hip"
)

// Pointer attributes asked of cuPointerGetAttributes (cuda.h
// CUpointer_attribute), with the C type each writes.
const (
	ptrAttrMemoryType    = 2  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE: unsigned int (CUmemorytype)
	ptrAttrIsManaged     = 8  // CU_POINTER_ATTRIBUTE_IS_MANAGED: bool (one byte)
	ptrAttrDeviceOrdinal = 9  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: int
	ptrAttrRangeStart    = 11 // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: CUdeviceptr
	ptrAttrRangeSize     = 12 // CU_POINTER_ATTRIBUTE_RANGE_SIZE: size_t
)

// CUmemorytype values besides memoryTypeDevice (2).
const (
	memoryTypeHost    = 1 // CU_MEMORYTYPE_HOST: cuMemHostAlloc'd or cuMemHostRegister'ed
	memoryTypeArray   = 3 // CU_MEMORYTYPE_ARRAY
	memoryTypeUnified = 4 // CU_MEMORYTYPE_UNIFIED
)

// ptrQuery is one cuPointerGetAttributes call's arguments: the attribute
// list, the array of pointers to the result cells, and the cells. It is
// heap-allocated (the GC never moves heap objects), so the addresses in
// data stay valid while the driver writes through them; every cell is
// 8 bytes and zeroed, so a driver that writes fewer bytes (a bool) or
// nothing at all (an attribute it leaves at its "NULL default") leaves a
// well-defined zero.
type ptrQuery struct {
	attrs   [5]uint32
	data    [5]uintptr
	memType uint64
	managed uint64
	ordinal uint64
	start   uint64
	size    uint64
}

func newPtrQuery() *ptrQuery {
	q := &ptrQuery{attrs: [5]uint32{ptrAttrMemoryType, ptrAttrIsManaged, ptrAttrDeviceOrdinal, ptrAttrRangeStart, ptrAttrRangeSize}}
	q.data = [5]uintptr{
		uintptr(unsafe.Pointer(&q.memType)), uintptr(unsafe.Pointer(&q.managed)),
		uintptr(unsafe.Pointer(&q.ordinal)), uintptr(unsafe.Pointer(&q.start)),
		uintptr(unsafe.Pointer(&q.size)),
	}
	return q
}

// info decodes the cells; known is false when the driver does not know
// the pointer (memory type 0 and not managed: its "NULL defaults").
func (q *ptrQuery) info() (info hip.PointerInfo, known bool) {
	info = hip.PointerInfo{Device: -1, Base: hip.DevicePtr(q.start), Size: uintptr(q.size)}
	memType := uint32(q.memType)
	switch {
	case uint8(q.managed) != 0 || memType == memoryTypeUnified:
		info.Kind = hip.PtrManaged
	case memType == memoryTypeDevice:
		info.Kind, info.Device = hip.PtrDevice, int(int32(uint32(q.ordinal)))
	case memType == memoryTypeHost:
		info.Kind = hip.PtrHostPinned
	case memType == memoryTypeArray:
		info.Kind, info.Base, info.Size = hip.PtrUnmapped, 0, 0 // not linear memory
	default:
		return hip.PointerInfo{Device: -1}, false
	}
	return info, true
}

// PointerInfo implements hip.Runtime. Memory this backend allocated or
// imported is answered from its table (PtrDevice, its device, base and
// size). Anything else is asked of cuPointerGetAttributes: memory type,
// managed flag, device ordinal and address range. For memory the driver
// does not know (unregistered pageable host memory, or no memory at all)
// the driver documents CUDA_SUCCESS with every attribute at its NULL
// default, i.e. memory type 0, while cuPointerGetAttribute and the
// runtime's cudaPointerGetAttributes before CUDA 11 return
// CUDA_ERROR_INVALID_VALUE; both answers are taken to mean "not the
// driver's", and then mincore(2) tells pageable host memory
// (PtrHostPageable) from an address that is not mapped (PtrUnmapped).
// Managed memory is PtrManaged whatever memory type the driver reports.
func (r *Runtime) PointerInfo(p hip.DevicePtr) (hip.PointerInfo, error) {
	if p == 0 {
		return hip.PointerInfo{Device: -1}, hip.ErrInvalidValue
	}
	if base, a := r.ownAllocation(p); a != nil {
		return hip.PointerInfo{Kind: hip.PtrDevice, Device: a.dev, Base: base, Size: a.size}, nil
	}
	q := newPtrQuery()
	err := r.call(r.fn.pointerGetAttributes, uintptr(len(q.attrs)),
		uintptr(unsafe.Pointer(&q.attrs[0])), uintptr(unsafe.Pointer(&q.data[0])), uintptr(p))
	runtime.KeepAlive(q)
	return pointerInfo(p, q, err)
}

// pointerInfo turns cuPointerGetAttributes' answer into a PointerInfo.
func pointerInfo(p hip.DevicePtr, q *ptrQuery, err error) (hip.PointerInfo, error) {
	switch {
	case err == nil:
		if info, known := q.info(); known {
			return info, nil
		}
	case errors.Is(err, hip.ErrInvalidValue):
		// Not the driver's memory, as older drivers say it.
	default:
		return hip.PointerInfo{Device: -1}, fmt.Errorf("cuPointerGetAttributes: %w", err)
	}
	if hip.HostMapped(p) {
		return hip.PointerInfo{Kind: hip.PtrHostPageable, Device: -1}, nil
	}
	return hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}, nil
}
