package host

import (
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"cecoll/internal/hip"
)

// mcRange is one emulated multicast object: a reserved, never touched
// address range whose offsets stand for the same offsets of every member.
type mcRange struct {
	base, size uintptr
	members    []uintptr
	mapping    []byte
}

// mcTable is read on every copy and write-value, so readers take no lock:
// they load an immutable sorted slice that writers replace.
type mcTable struct {
	mu  sync.Mutex
	tab atomic.Pointer[[]*mcRange]
}

// lookup returns the range holding p, or nil (cheap when none exists).
func (t *mcTable) lookup(p uintptr) *mcRange {
	tp := t.tab.Load()
	if tp == nil {
		return nil
	}
	tab := *tp
	i := sort.Search(len(tab), func(i int) bool { return tab[i].base > p })
	if i == 0 {
		return nil
	}
	if r := tab[i-1]; p < r.base+r.size {
		return r
	}
	return nil
}

// MulticastCreate implements hip.Runtime.
func (rt *Runtime) MulticastCreate(members []hip.DevicePtr, size uintptr) (hip.DevicePtr, error) {
	if !rt.caps.Multicast {
		return 0, hip.ErrNotSupported
	}
	if len(members) == 0 || size == 0 {
		return 0, hip.ErrInvalidValue
	}
	r := &mcRange{size: size, members: make([]uintptr, len(members))}
	for i, m := range members {
		if m == 0 {
			return 0, hip.ErrInvalidValue
		}
		r.members[i] = uintptr(m)
	}
	// PROT_NONE: the range only reserves unique addresses; a stray direct
	// access faults instead of silently missing the members.
	m, err := syscall.Mmap(-1, 0, int(roundPage(size)), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return 0, hip.ErrOutOfMemory
	}
	r.mapping = m
	r.base = uintptr(unsafe.Pointer(&m[0]))

	t := &rt.mc
	t.mu.Lock()
	var old []*mcRange
	if tp := t.tab.Load(); tp != nil {
		old = *tp
	}
	tab := make([]*mcRange, 0, len(old)+1)
	tab = append(tab, old...)
	tab = append(tab, r)
	sort.Slice(tab, func(i, j int) bool { return tab[i].base < tab[j].base })
	t.tab.Store(&tab)
	t.mu.Unlock()
	return hip.DevicePtr(r.base), nil
}

// MulticastDestroy implements hip.Runtime.
func (rt *Runtime) MulticastDestroy(mc hip.DevicePtr) error {
	t := &rt.mc
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.tab.Load()
	if tp == nil {
		return hip.ErrInvalidValue
	}
	old := *tp
	for i, r := range old {
		if r.base == uintptr(mc) {
			tab := make([]*mcRange, 0, len(old)-1)
			tab = append(tab, old[:i]...)
			tab = append(tab, old[i+1:]...)
			t.tab.Store(&tab)
			syscall.Munmap(r.mapping)
			return nil
		}
	}
	return hip.ErrInvalidValue
}

// fanOut calls f on [p, p+n), or, when p lies in a multicast range, on
// the same offset of every member, with n clipped to the range.
func (rt *Runtime) fanOut(p, n uintptr, f func(dst, n uintptr)) {
	r := rt.mc.lookup(p)
	if r == nil {
		f(p, n)
		return
	}
	off := p - r.base
	n = min(n, r.size-off)
	for _, m := range r.members {
		f(m+off, n)
	}
}

// copyBytes performs one copy (or one piece of one), fanning out when dst
// is a multicast address. Ops reach it through tryCopy (fault.go).
func (rt *Runtime) copyBytes(dst, src, n uintptr) {
	r := rt.mc.lookup(dst)
	if r == nil {
		rt.copyRaw(dst, src, n)
		return
	}
	off := dst - r.base
	n = min(n, r.size-off)
	for _, m := range r.members {
		rt.copyRaw(m+off, src, n)
	}
}

// writeValue is a write-value entry: a sequentially consistent 32-bit
// store (so everything the stream did before is visible first), then a
// wake of the word's waiters, in every member for a multicast address.
// Ops reach it through tryWrite (fault.go).
func (rt *Runtime) writeValue(a uintptr, v uint32) {
	r := rt.mc.lookup(a)
	if r == nil {
		atomic.StoreUint32(word(a), v)
		rt.wake(a)
		return
	}
	off := a - r.base
	for _, m := range r.members {
		atomic.StoreUint32(word(m+off), v)
		rt.wake(m + off)
	}
}

// wake wakes the waiters of the word at a after a store to it: always for
// shared allocations (a sleeper may be in another process, or on another
// mapping of the same memfd here), else only when a sleeper of this
// process may be on it (see sleepers).
func (rt *Runtime) wake(a uintptr) {
	if rt.mem.isShared(a) {
		futexWake(a)
		return
	}
	wakeLocal(a)
}

// wakeRange wakes the waiters on every aligned 32-bit word that [a, a+n)
// touches; used after small copies, which engines use to publish flags.
// Those were plain stores, which x86 may hold in its store buffer past
// the sleeper-count loads: the fence orders them (else a wake could be
// lost, costing a futex timeout).
func (rt *Runtime) wakeRange(a, n uintptr) {
	fence()
	for w := a &^ 3; w < a+n; w += 4 {
		rt.wake(w)
	}
}

// copyRaw moves n bytes. Engines publish flags by small copies, which a
// copy engine writes in whole aligned words: a 4-byte aligned copy of 4
// bytes is one atomic store, a small copy of aligned 8-byte words one
// atomic store a word (engines write flag pairs that way: ce/signal.go),
// and every small copy wakes the words it wrote.
func (rt *Runtime) copyRaw(dst, src, n uintptr) {
	switch {
	case n == 4 && dst&3 == 0 && src&3 == 0:
		atomic.StoreUint32(word(dst), atomic.LoadUint32(word(src)))
		rt.wake(dst)
		return
	case n <= smallCopy && (dst|src|n)&7 == 0:
		for o := uintptr(0); o < n; o += 8 {
			atomic.StoreUint64((*uint64)(ptr(dst+o)), atomic.LoadUint64((*uint64)(ptr(src+o))))
		}
	default:
		copy(bytesAt(dst, n), bytesAt(src, n))
	}
	if n <= smallCopy {
		rt.wakeRange(dst, n)
	}
}

// smallCopy: copies up to this size may publish flags (a release over 64
// ranks' pairs is 512 bytes).
const smallCopy = 512
