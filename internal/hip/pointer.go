package hip

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// PtrKind is the kind of memory a pointer addresses, as far as a copy
// engine cares: whether an asynchronous copy can use it without the host.
type PtrKind uint8

const (
	// PtrUnmapped: nothing a copy may use. The address is not mapped in
	// this process, or it is mapped memory the runtime cannot copy
	// linearly (a CUDA array).
	PtrUnmapped PtrKind = iota
	// PtrDevice: device memory. On the host backend any mapped memory is.
	PtrDevice
	// PtrHostPinned: host memory allocated or registered with the driver;
	// the copy engines reach it, so copies stay asynchronous.
	PtrHostPinned
	// PtrHostPageable: ordinary host memory the driver does not know. A
	// copy from or to it is staged through the host and returns only once
	// the data is staged: an asynchronous copy becomes host-synchronous,
	// which deadlocks a collective that waits for its peers.
	PtrHostPageable
	// PtrManaged: managed (unified) memory, migrated on demand.
	PtrManaged
)

var ptrKindNames = [...]string{"unmapped", "device", "host pinned", "host pageable", "managed"}

func (k PtrKind) String() string {
	if int(k) < len(ptrKindNames) {
		return ptrKindNames[k]
	}
	return "unknown pointer kind"
}

// PointerInfo describes the allocation holding a pointer (Runtime.PointerInfo).
type PointerInfo struct {
	Kind PtrKind
	// Device is the device of PtrDevice memory; -1 for the other kinds.
	Device int
	// Base and Size are the allocation holding the pointer where the
	// runtime knows them, else 0.
	Base DevicePtr
	Size uintptr
}

// Contains reports whether [p, p+n) lies inside the allocation (false when
// its size is not known). n 0 counts as 1: the byte at p.
func (i PointerInfo) Contains(p DevicePtr, n uintptr) bool {
	return i.Size != 0 && contains(uintptr(i.Base), uintptr(i.Base)+i.Size, uintptr(p), max(n, 1))
}

// contains reports whether [p, p+n) lies inside [base, end), n > 0.
func contains(base, end, p, n uintptr) bool {
	return p >= base && p < end && n <= end-p
}

// HostMapped reports whether the page holding p is mapped in this process
// (mincore(2), which fails with ENOMEM on an unmapped page). The backends
// use it to tell ordinary host memory from an address that is not memory
// at all, for pointers their driver does not know. A PROT_NONE mapping
// counts as mapped, and an error other than ENOMEM (the kernel out of
// resources) as mapped too: only what is surely not mapped is refused.
// Cost: one system call (docs/performance.md, "Pointer checks"), which
// the GPU backends pay only for pointers their driver does not know.
func HostMapped(p DevicePtr) bool {
	var vec [1]byte
	page := uintptr(syscall.Getpagesize())
	_, _, e := syscall.RawSyscall(syscall.SYS_MINCORE, uintptr(p)&^(page-1), page, uintptr(unsafe.Pointer(&vec[0])))
	return e != syscall.ENOMEM
}

// PointerCache answers the engine's question "may an asynchronous copy
// use this buffer?" on its hot path: a hit on a known device allocation
// costs no driver call, takes no lock and allocates nothing. A miss asks
// Runtime.PointerInfo once and remembers the allocation when it is device
// memory with a known base and size; other answers are not cached: host
// memory can be unmapped and mapped again as something else (pageable
// memory registered, a buffer freed), so it is asked about every time.
//
// Why remembering device ranges is safe: under unified addressing the
// driver carves device allocations out of virtual address ranges it
// reserved for the device; those addresses never become host memory, so
// a cached range keeps saying "device" truthfully even after its memory
// is freed. Where it is not safe, Check re-asks: a range freed and
// allocated again as device memory of another size is noticed because
// [p, p+n) must lie inside the cached range, and a request that does not
// fit queries the runtime afresh (and replaces the overlapping, stale
// ranges). What the cache cannot notice is a buffer freed and not
// allocated again inside a cached range: Check still says PtrDevice, and
// the copy fails on the device (ErrIllegalAddress), the use-after-free
// being the program's. On the host backend device memory is ordinary
// host memory, so a freed range can become anything; there every mapped
// address counts as device memory anyway, and an unmapped one fails the
// copy's stream instead of the process.
//
// A cache serves one Runtime. The zero value is ready; it is safe for
// concurrent use.
type PointerCache struct {
	mu  sync.Mutex                // serialises writers
	tab atomic.Pointer[[]ptrSpan] // sorted by base, disjoint; replaced, never modified
}

// ptrSpan is one cached device allocation [base, end).
type ptrSpan struct{ base, end uintptr }

// maxPointerSpans bounds the cache: past it the cache starts afresh
// (allocations are few; a program that makes many short-lived ones
// only pays more misses).
const maxPointerSpans = 4096

// Check returns the kind of the memory at p (PtrDevice, PtrHostPinned,
// PtrHostPageable, PtrManaged or PtrUnmapped: see Runtime.PointerInfo)
// for a use of [p, p+n) (n 0 counts as 1). Only a cached device
// allocation that holds all of [p, p+n) answers without the runtime; a
// range that runs past the allocation at p is asked about on every call
// but not refused: adjacent mappings of one reservation may hold a buffer
// together. p 0 or a range that wraps around is ErrInvalidValue; a query
// that fails returns the runtime's error.
func (c *PointerCache) Check(rt Runtime, p DevicePtr, n uintptr) (PtrKind, error) {
	n = max(n, 1)
	if p == 0 || uintptr(p)+(n-1) < uintptr(p) {
		return PtrUnmapped, ErrInvalidValue
	}
	if c.hit(uintptr(p), n) {
		return PtrDevice, nil
	}
	info, err := rt.PointerInfo(p)
	if err != nil {
		return PtrUnmapped, err
	}
	if info.Kind == PtrDevice && info.Contains(p, n) {
		c.add(uintptr(info.Base), uintptr(info.Base)+info.Size)
	}
	return info.Kind, nil
}

// hit reports whether a cached device range holds [p, p+n).
func (c *PointerCache) hit(p, n uintptr) bool {
	tp := c.tab.Load()
	if tp == nil {
		return false
	}
	tab := *tp
	// The last span with base <= p (sort.Search's closure is avoided: the
	// hot path stays a plain loop).
	lo, hi := 0, len(tab)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if tab[m].base <= p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo > 0 && contains(tab[lo-1].base, tab[lo-1].end, p, n)
}

// add caches the device allocation [base, end), dropping cached spans it
// overlaps: they are stale (their memory was freed, and the range given
// out again).
func (c *PointerCache) add(base, end uintptr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var old []ptrSpan
	if tp := c.tab.Load(); tp != nil && len(*tp) < maxPointerSpans {
		old = *tp
	}
	tab := make([]ptrSpan, 0, len(old)+1)
	at := -1
	for _, s := range old {
		if s.end > base && s.base < end {
			continue
		}
		if at < 0 && s.base > base {
			at = len(tab)
			tab = append(tab, ptrSpan{base, end})
		}
		tab = append(tab, s)
	}
	if at < 0 {
		tab = append(tab, ptrSpan{base, end})
	}
	c.tab.Store(&tab)
}

// Reset forgets every cached range, e.g. after the program freed memory
// it may allocate again as something else.
func (c *PointerCache) Reset() {
	c.mu.Lock()
	c.tab.Store(nil)
	c.mu.Unlock()
}
