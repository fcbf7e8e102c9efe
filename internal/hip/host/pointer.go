package host

import "cecoll/internal/hip"

// PointerInfo implements hip.Runtime. MemAlloc and MemImport memory is
// PtrDevice with its device, base and size, and a multicast range is
// PtrDevice with its own base and size. Any other mapped address counts
// as device memory too (the host device's simplification: in one process
// every host address is device memory, so malloc'd buffers and torch CPU
// tensors work), with the calling thread's device and Base and Size 0.
// An address that cannot be read is PtrUnmapped: not mapped, PROT_NONE,
// or a file mapping past its end. That is found by a fault-guarded read
// of the 32-bit word holding p (fault.go), a twentieth of mincore(2)'s
// cost (BenchmarkPointerInfo measures both; docs/performance.md,
// "Pointer checks"), and this runs on every collective whose buffers are
// not MemAlloc'd; the read
// faults in nothing but a zero page of memory never touched (and may read
// a file mapping's page in, as the copy would).
func (rt *Runtime) PointerInfo(p hip.DevicePtr) (hip.PointerInfo, error) {
	if p == 0 {
		return hip.PointerInfo{Device: -1}, hip.ErrInvalidValue
	}
	if a := rt.mem.find(uintptr(p)); a != nil {
		return hip.PointerInfo{Kind: hip.PtrDevice, Device: a.dev, Base: hip.DevicePtr(a.base), Size: a.size}, nil
	}
	if r := rt.mc.lookup(uintptr(p)); r != nil {
		return hip.PointerInfo{Kind: hip.PtrDevice, Device: rt.current(), Base: hip.DevicePtr(r.base), Size: r.size}, nil
	}
	if _, ok := loadWord(uintptr(p) &^ 3); !ok {
		return hip.PointerInfo{Kind: hip.PtrUnmapped, Device: -1}, nil
	}
	return hip.PointerInfo{Kind: hip.PtrDevice, Device: rt.current()}, nil
}
