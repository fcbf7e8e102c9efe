package hip_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/hiptest"
	"cecoll/internal/hip/host"
)

// fakeRuntime answers PointerInfo from a list of allocations and counts
// the calls; every other method is the nil interface's (never called).
type fakeRuntime struct {
	hip.Runtime
	mu     sync.Mutex
	allocs []hip.PointerInfo
	calls  atomic.Int64
	err    error
}

func (f *fakeRuntime) set(infos ...hip.PointerInfo) {
	f.mu.Lock()
	f.allocs = infos
	f.mu.Unlock()
}

func (f *fakeRuntime) PointerInfo(p hip.DevicePtr) (hip.PointerInfo, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return hip.PointerInfo{Device: -1}, f.err
	}
	for _, a := range f.allocs {
		if p >= a.Base && uintptr(p-a.Base) < a.Size {
			return a, nil
		}
	}
	return hip.PointerInfo{Kind: hip.PtrHostPageable, Device: -1}, nil
}

const base = hip.DevicePtr(0x7f00_0000_0000)

func dev(b hip.DevicePtr, size uintptr) hip.PointerInfo {
	return hip.PointerInfo{Kind: hip.PtrDevice, Device: 0, Base: b, Size: size}
}

// TestPointerCache: a device allocation is asked about once, then answered
// from the cache for any range inside it; other kinds are asked every
// time; a range that does not fit the cached allocation is asked again
// (and a re-allocation of another size replaces the stale range).
func TestPointerCache(t *testing.T) {
	f := &fakeRuntime{}
	f.set(dev(base, 1<<20),
		hip.PointerInfo{Kind: hip.PtrHostPinned, Device: -1, Base: base + 2<<20, Size: 4096},
		hip.PointerInfo{Kind: hip.PtrManaged, Device: -1, Base: base + 3<<20, Size: 4096},
		hip.PointerInfo{Kind: hip.PtrDevice, Device: 0}, // device memory of unknown size: Base/Size 0
	)
	var c hip.PointerCache
	check := func(p hip.DevicePtr, n uintptr, want hip.PtrKind, calls int64, what string) {
		t.Helper()
		before := f.calls.Load()
		k, err := c.Check(f, p, n)
		require.NoError(t, err, what)
		require.Equal(t, want, k, what)
		require.Equal(t, calls, f.calls.Load()-before, "%s: runtime queries", what)
	}
	check(base+100, 1000, hip.PtrDevice, 1, "first use of a device allocation")
	check(base+100, 1000, hip.PtrDevice, 0, "the same range again")
	check(base, 1<<20, hip.PtrDevice, 0, "the whole allocation")
	check(base+(1<<20)-1, 0, hip.PtrDevice, 0, "its last byte (n 0 counts as 1)")
	check(base+4096, 1<<20, hip.PtrDevice, 1, "a range past the allocation's end is asked again")
	check(base+4096, 1<<20, hip.PtrDevice, 1, "and not cached")
	check(base+2<<20, 64, hip.PtrHostPinned, 1, "pinned host memory")
	check(base+2<<20, 64, hip.PtrHostPinned, 1, "is not cached")
	check(base+3<<20, 64, hip.PtrManaged, 1, "managed memory is not cached")
	check(base+5<<20, 64, hip.PtrHostPageable, 1, "pageable memory")
	check(base+5<<20, 64, hip.PtrHostPageable, 1, "is not cached")

	// Freed and allocated again, larger: the request past the cached end
	// is asked about, and the new range replaces the stale one.
	f.set(dev(base, 4<<20))
	check(base+2<<20, 1<<20, hip.PtrDevice, 1, "inside the new, larger allocation")
	check(base+3<<20, 4096, hip.PtrDevice, 0, "now cached")
	check(base+100, 64, hip.PtrDevice, 0, "the old range is covered by the new one")

	// Two allocations side by side, cached in either order.
	f.set(dev(base+8<<20, 4096), dev(base+16<<20, 4096), dev(base+12<<20, 4096))
	for _, p := range []hip.DevicePtr{base + 16<<20, base + 8<<20, base + 12<<20} {
		check(p, 64, hip.PtrDevice, 1, fmt.Sprintf("allocation at %#x", p))
	}
	for _, p := range []hip.DevicePtr{base + 8<<20, base + 12<<20, base + 16<<20, base + 100} {
		check(p, 64, hip.PtrDevice, 0, fmt.Sprintf("cached %#x", p))
	}
	check(base+8<<20+4000, 200, hip.PtrDevice, 1, "running past an allocation's end: the kind at p, asked again")
	check(base+8<<20+4000, 200, hip.PtrDevice, 1, "every time")

	f.set() // everything freed
	check(base+8<<20, 64, hip.PtrDevice, 0, "a freed range stays cached")
	c.Reset()
	check(base+8<<20, 64, hip.PtrHostPageable, 1, "after Reset: asked again")

	_, err := c.Check(f, 0, 8)
	require.ErrorIs(t, err, hip.ErrInvalidValue, "NULL")
	_, err = c.Check(f, hip.DevicePtr(^uintptr(0)-3), 8)
	require.ErrorIs(t, err, hip.ErrInvalidValue, "wraps")
	f.err = hip.ErrDeinitialized
	k, err := c.Check(f, base+32<<20, 8)
	require.ErrorIs(t, err, hip.ErrDeinitialized, "the runtime's error")
	require.Equal(t, hip.PtrUnmapped, k)
}

// A hit allocates nothing and asks nothing.
func TestPointerCacheHitAllocs(t *testing.T) {
	f := &fakeRuntime{}
	var infos []hip.PointerInfo
	for i := range 64 {
		infos = append(infos, dev(base+hip.DevicePtr(i)<<20, 1<<20))
	}
	f.set(infos...)
	var c hip.PointerCache
	for i := range 64 {
		_, err := c.Check(f, base+hip.DevicePtr(i)<<20, 8)
		require.NoError(t, err)
	}
	calls := f.calls.Load()
	p := base + 37<<20 + 100
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if k, err := c.Check(f, p, 4096); err != nil || k != hip.PtrDevice {
			panic("miss")
		}
	}))
	require.Equal(t, calls, f.calls.Load())
}

// Concurrent checks and inserts (run it with -race).
func TestPointerCacheConcurrent(t *testing.T) {
	f := &fakeRuntime{}
	var infos []hip.PointerInfo
	for i := range 256 {
		infos = append(infos, dev(base+hip.DevicePtr(i)<<20, 1<<20))
	}
	f.set(infos...)
	var c hip.PointerCache
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				p := base + hip.DevicePtr((i*7+g*31)%256)<<20 + hip.DevicePtr(i%1000)
				k, err := c.Check(f, p, 64)
				if err != nil || k != hip.PtrDevice {
					t.Errorf("Check(%#x) = %v, %v", p, k, err)
					return
				}
				if i%500 == 0 && g == 0 {
					c.Reset()
				}
			}
		}()
	}
	wg.Wait()
	require.Less(t, f.calls.Load(), int64(8*2000/4), "most checks are hits")
}

// With the host device: MemAlloc memory is cached, other mapped memory is
// device memory (asked every time: its size is not known), an unmapped
// page is refused.
func TestPointerCacheHost(t *testing.T) {
	rt, err := host.New(host.Config{})
	require.NoError(t, err)
	defer rt.Close()
	p, err := rt.MemAlloc(1 << 20)
	require.NoError(t, err)
	defer rt.MemFree(p)
	var c hip.PointerCache
	for range 2 {
		k, err := c.Check(rt, p+4096, 8192)
		require.NoError(t, err)
		require.Equal(t, hip.PtrDevice, k)
	}
	buf := make([]byte, 64)
	k, err := c.Check(rt, hip.DevicePtr(unsafe.Pointer(&buf[0])), 64)
	require.NoError(t, err)
	require.Equal(t, hip.PtrDevice, k, "the host device's simplification")
	k, err = c.Check(rt, hiptest.UnmappedPage(t), 64)
	require.NoError(t, err)
	require.Equal(t, hip.PtrUnmapped, k)
}

// BenchmarkPointerCacheHit: a hit among 1, 64 and 4096 cached device
// allocations; it must report 0 allocs/op.
func BenchmarkPointerCacheHit(b *testing.B) {
	for _, n := range []int{1, 64, 4096} {
		b.Run(fmt.Sprintf("ranges=%d", n), func(b *testing.B) {
			f := &fakeRuntime{}
			var infos []hip.PointerInfo
			for i := range n {
				infos = append(infos, dev(base+hip.DevicePtr(i)<<20, 1<<20))
			}
			f.set(infos...)
			var c hip.PointerCache
			for i := range n {
				if _, err := c.Check(f, base+hip.DevicePtr(i)<<20, 8); err != nil {
					b.Fatal(err)
				}
			}
			p := base + hip.DevicePtr(n/2)<<20 + 100
			calls := f.calls.Load()
			b.ReportAllocs()
			for b.Loop() {
				if k, err := c.Check(f, p, 4096); err != nil || k != hip.PtrDevice {
					b.Fatal(k, err)
				}
			}
			if f.calls.Load() != calls {
				b.Fatal("a hit asked the runtime")
			}
		})
	}
}
