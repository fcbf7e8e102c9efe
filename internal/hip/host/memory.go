package host

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"cecoll/internal/hip"
	"cecoll/internal/memfd"
)

// allocation is one MemAlloc'd or MemImport'ed mapping.
type allocation struct {
	base, size uintptr
	mapping    []byte // for Munmap
	fd         int    // the memfd (MemAlloc) or -1 (MemImport: the fd is the caller's)
	dev        int
	imported   bool
	// shared: imported, or exported at least once, so processes other
	// than this one may sleep on its words.
	shared atomic.Bool
}

// memTable holds the allocations sorted by base.
type memTable struct {
	mu     sync.RWMutex
	allocs []*allocation
	shared atomic.Int32 // allocations with shared set: when 0, no lookup is needed to wake
}

// markShared sets a.shared once.
func (t *memTable) markShared(a *allocation) {
	if a.shared.CompareAndSwap(false, true) {
		t.shared.Add(1)
	}
}

// isShared reports whether p lies in a shared allocation.
func (t *memTable) isShared(p uintptr) bool {
	if t.shared.Load() == 0 {
		return false
	}
	a := t.find(p)
	return a != nil && a.shared.Load()
}

// find returns the allocation that holds p, or nil.
func (t *memTable) find(p uintptr) *allocation {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.findLocked(p)
}

func (t *memTable) findLocked(p uintptr) *allocation {
	i := sort.Search(len(t.allocs), func(i int) bool { return t.allocs[i].base > p })
	if i == 0 {
		return nil
	}
	a := t.allocs[i-1]
	if p < a.base+a.size {
		return a
	}
	return nil
}

func (t *memTable) insert(a *allocation) {
	t.mu.Lock()
	i := sort.Search(len(t.allocs), func(i int) bool { return t.allocs[i].base > a.base })
	t.allocs = append(t.allocs, nil)
	copy(t.allocs[i+1:], t.allocs[i:])
	t.allocs[i] = a
	t.mu.Unlock()
}

// remove takes out the allocation based exactly at p.
func (t *memTable) remove(p uintptr) *allocation {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.findLocked(p)
	if a == nil || a.base != p {
		return nil
	}
	for i, b := range t.allocs {
		if b == a {
			t.allocs = append(t.allocs[:i], t.allocs[i+1:]...)
			break
		}
	}
	return a
}

var pageSize = uintptr(syscall.Getpagesize())

func roundPage(n uintptr) uintptr { return (n + pageSize - 1) &^ (pageSize - 1) }

// MemAlloc implements hip.Runtime: a memfd mapped shared, so MemExport can
// hand it to another process; sealed at its size, so no process holding it
// can shrink it under another's mapping.
func (rt *Runtime) MemAlloc(size uintptr) (hip.DevicePtr, error) {
	if size == 0 {
		return 0, hip.ErrInvalidValue
	}
	if err := rt.unsafeCall(); err != nil {
		return 0, err
	}
	size = roundPage(size)
	fd, err := memfd.Create("cecoll", int64(size))
	if err != nil {
		return 0, hip.ErrOutOfMemory
	}
	m, err := syscall.Mmap(fd, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		syscall.Close(fd)
		return 0, hip.ErrOutOfMemory
	}
	a := &allocation{base: uintptr(unsafe.Pointer(&m[0])), size: size, mapping: m, fd: fd, dev: rt.current()}
	rt.mem.insert(a)
	return hip.DevicePtr(a.base), nil
}

// MemFree implements hip.Runtime. p must be an allocation's base.
func (rt *Runtime) MemFree(p hip.DevicePtr) error {
	if p == 0 {
		return hip.ErrInvalidValue
	}
	if err := rt.unsafeCall(); err != nil {
		return err
	}
	a := rt.mem.remove(uintptr(p))
	if a == nil {
		return hip.ErrInvalidValue
	}
	if a.shared.Load() {
		rt.mem.shared.Add(-1)
	}
	if err := syscall.Munmap(a.mapping); err != nil {
		return hip.ErrInvalidValue
	}
	if a.fd >= 0 {
		syscall.Close(a.fd)
	}
	return nil
}

// MemExport implements hip.Runtime: a dup of the allocation's memfd.
func (rt *Runtime) MemExport(p hip.DevicePtr) (int, error) {
	a := rt.mem.find(uintptr(p))
	if a == nil || a.base != uintptr(p) || a.fd < 0 {
		return -1, hip.ErrInvalidValue
	}
	fd, err := syscall.Dup(a.fd)
	if err != nil {
		return -1, hip.ErrOutOfMemory
	}
	syscall.CloseOnExec(fd)
	rt.mem.markShared(a)
	return fd, nil
}

// MemImport implements hip.Runtime: maps another process's (or this one's)
// exported allocation. The mapping belongs to the current device and is
// marked imported; MemFree unmaps it. The fd comes from a peer, so it is
// checked first: a memfd sealed against shrinking (ErrInvalidHandle
// otherwise) and at least size bytes long (ErrInvalidValue), since
// touching a mapping past the end of its file raises SIGBUS.
func (rt *Runtime) MemImport(fd int, size uintptr) (hip.DevicePtr, error) {
	if fd < 0 || size == 0 || size > 1<<62 {
		return 0, hip.ErrInvalidValue
	}
	size = roundPage(size)
	if err := memfd.Check(fd, int64(size)); err != nil {
		if errors.Is(err, memfd.ErrTooSmall) {
			return 0, hip.ErrInvalidValue
		}
		return 0, hip.ErrInvalidHandle
	}
	m, err := syscall.Mmap(fd, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return 0, hip.ErrInvalidValue
	}
	a := &allocation{base: uintptr(unsafe.Pointer(&m[0])), size: size, mapping: m, fd: -1, dev: rt.current(), imported: true}
	rt.mem.markShared(a)
	rt.mem.insert(a)
	return hip.DevicePtr(a.base), nil
}

// MemGetAddressRange implements hip.Runtime for MemAlloc and MemImport
// allocations (ErrNotFound for any other address, ErrInvalidValue for 0).
func (rt *Runtime) MemGetAddressRange(p hip.DevicePtr) (hip.DevicePtr, uintptr, error) {
	if p == 0 {
		return 0, 0, hip.ErrInvalidValue
	}
	a := rt.mem.find(uintptr(p))
	if a == nil {
		return 0, 0, hip.ErrNotFound
	}
	return hip.DevicePtr(a.base), a.size, nil
}

// Memset implements hip.Runtime. Like cudaMemset it runs after the work
// already on the current device's legacy NULL stream, and returns that
// stream's sticky error if it failed. A range that is not mapped gives
// ErrInvalidValue (bytes before the fault may be set), as the driver
// refuses a bad pointer of a synchronous call.
func (rt *Runtime) Memset(p hip.DevicePtr, value byte, n uintptr) error {
	if n == 0 {
		return nil
	}
	if p == 0 || wraps(uintptr(p), n) {
		return hip.ErrInvalidValue
	}
	if err := rt.unsafeCall(); err != nil {
		return err
	}
	if err := rt.syncLegacy(); err != nil {
		return err
	}
	if !rt.tryMemset(uintptr(p), value, n) {
		return hip.ErrInvalidValue
	}
	return nil
}

// Memcpy implements hip.Runtime: any direction, synchronous, after the work
// already on the current device's legacy NULL stream (whose sticky error
// it returns). A range that is not mapped gives ErrInvalidValue; bytes
// before the fault may have been copied.
func (rt *Runtime) Memcpy(dst, src uintptr, n uintptr) error {
	if n == 0 {
		return nil
	}
	if dst == 0 || src == 0 || wraps(dst, n) || wraps(src, n) {
		return hip.ErrInvalidValue
	}
	if rt.mc.lookup(src) != nil {
		return hip.ErrInvalidValue
	}
	if err := rt.unsafeCall(); err != nil {
		return err
	}
	if err := rt.syncLegacy(); err != nil {
		return err
	}
	if !rt.tryCopy(dst, src, n) {
		return hip.ErrInvalidValue
	}
	return nil
}

// syncLegacy waits for the current device's legacy NULL stream, if used,
// and returns its sticky error.
func (rt *Runtime) syncLegacy() error {
	dev := rt.current()
	rt.regMu.RLock()
	s := rt.legacy[dev]
	rt.regMu.RUnlock()
	if s != nil {
		return s.sync()
	}
	return nil
}
