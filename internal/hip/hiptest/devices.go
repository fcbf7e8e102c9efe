package hiptest

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// testDevices: device enumeration, the per-OS-thread current device, and
// refusal of device numbers that do not exist.
func testDevices(e *env) {
	t, rt := e.t, e.rt
	n, err := rt.DeviceCount()
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1, "DeviceCount")
	require.Less(t, e.opts.Device, n, "Options.Device")

	v, err := rt.DriverVersion()
	require.NoError(t, err)
	require.Positive(t, v, "DriverVersion")

	for d := range n {
		name, err := rt.DeviceName(d)
		require.NoError(t, err, "DeviceName(%d)", d)
		require.NotEmpty(t, strings.TrimSpace(name), "DeviceName(%d)", d)
		for p := range n {
			if p != d {
				_, err := rt.DeviceCanAccessPeer(d, p)
				require.NoError(t, err, "DeviceCanAccessPeer(%d, %d)", d, p)
			}
		}
	}

	for _, bad := range []int{-1, n, n + 100} {
		require.ErrorIs(t, rt.SetDevice(bad), hip.ErrInvalidDevice, "SetDevice(%d)", bad)
		_, err := rt.DeviceName(bad)
		require.Error(t, err, "DeviceName(%d)", bad)
	}
	cur, err := rt.GetDevice()
	require.NoError(t, err)
	require.Equal(t, e.opts.Device, cur, "a refused SetDevice changed the current device")

	// The current device belongs to the OS thread: set the last device
	// here, and a second locked thread still sees the default 0, while its
	// own SetDevice does not change this thread's.
	last := n - 1
	require.NoError(t, rt.SetDevice(last))
	got, err := rt.GetDevice()
	require.NoError(t, err)
	require.Equal(t, last, got, "GetDevice after SetDevice(%d)", last)

	type answer struct {
		fresh, after int
		err          error
	}
	ch := make(chan answer, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread's device dies with it
		var a answer
		if a.fresh, a.err = rt.GetDevice(); a.err == nil {
			if a.err = rt.SetDevice(0); a.err == nil {
				a.after, a.err = rt.GetDevice()
			}
		}
		ch <- a
	}()
	var a answer
	select {
	case a = <-ch:
	case <-time.After(e.waitBudget()):
		e.t.Fatalf("GetDevice/SetDevice on a second thread did not return")
	}
	require.NoError(t, a.err)
	require.Equal(t, 0, a.fresh, "a thread that never set a device must see device 0")
	require.Equal(t, 0, a.after)
	got, err = rt.GetDevice()
	require.NoError(t, err)
	require.Equal(t, last, got, "another thread's SetDevice(0) changed this thread's device")

	require.NoError(t, rt.SetDevice(e.opts.Device))
	require.NoError(t, rt.DeviceSynchronize(), "DeviceSynchronize")
}

// testMemory: allocation alignment and ranges, synchronous copies and
// memset, and (where the backend exports memory) a second mapping of the
// same bytes in this process.
func testMemory(e *env) {
	page := uintptr(os.Getpagesize())

	e.sub("alloc-range", func(e *env) {
		for _, n := range []uintptr{1, 4096, 3*4096 + 5, 1<<20 + 1} {
			p := e.alloc(n)
			require.Zero(e.t, uintptr(p)%page, "MemAlloc(%d) = %#x is not page aligned", n, p)
			for _, off := range []uintptr{0, 1, n / 2, n - 1} {
				if off >= n {
					continue
				}
				base, size, err := e.rt.MemGetAddressRange(p + hip.DevicePtr(off))
				require.NoError(e.t, err, "MemGetAddressRange(base+%d) of a %d-byte allocation", off, n)
				require.Equal(e.t, p, base, "MemGetAddressRange(base+%d) base", off)
				require.GreaterOrEqual(e.t, size, n, "MemGetAddressRange(base+%d) size", off)
			}
		}
	})

	e.sub("copy-memset", func(e *env) {
		const n = 3*4096 + 5
		p, q := e.alloc(n), e.alloc(n)
		data := e.random(n)
		e.write(p, data)
		requireBytes(e.t, data, e.read(p, n), "host->device->host round trip")

		// Memset an odd interior range; the bytes around it keep their values.
		const off, m = 101, 5000
		require.NoError(e.t, e.rt.Memset(p+off, 0x5a, m))
		for i := off; i < off+m; i++ {
			data[i] = 0x5a
		}
		requireBytes(e.t, data, e.read(p, n), "after Memset of an interior range")

		// Synchronous device-to-device copy at odd offsets.
		require.NoError(e.t, e.rt.Memset(q, 0xee, n))
		require.NoError(e.t, e.rt.Memcpy(uintptr(q+3), uintptr(p+7), n-10))
		want := make([]byte, n)
		for i := range want {
			want[i] = 0xee
		}
		copy(want[3:3+n-10], data[7:7+n-10])
		requireBytes(e.t, want, e.read(q, n), "device-to-device Memcpy")
	})

	e.sub("free", func(e *env) {
		p, err := e.rt.MemAlloc(2 * page)
		require.NoError(e.t, err)
		require.NoError(e.t, e.rt.MemFree(p), "MemFree")
		_, _, err = e.rt.MemGetAddressRange(p + 1)
		require.Error(e.t, err, "MemGetAddressRange of freed memory")
	})

	e.sub("export-import", func(e *env) {
		const n = 2*4096 + 9
		p := e.alloc(n)
		fd, err := e.rt.MemExport(p)
		if errors.Is(err, hip.ErrNotSupported) {
			e.t.Skipf("%s: MemExport not supported", e.rt.Name())
		}
		require.NoError(e.t, err, "MemExport")
		defer func() { require.NoError(e.t, syscall.Close(fd)) }()
		require.GreaterOrEqual(e.t, fd, 0)
		if e.rt.Name() != "host" {
			// CUDA's own handles are meant for other processes: the
			// cross-process test covers the GPU backends.
			return
		}
		q, err := e.rt.MemImport(fd, n)
		require.NoError(e.t, err, "MemImport in the exporting process")
		e.res.mem = append(e.res.mem, q)
		base, _, err := e.rt.MemGetAddressRange(q + 5)
		require.NoError(e.t, err)
		require.Equal(e.t, q, base, "MemGetAddressRange of an imported mapping")

		data := e.random(n)
		e.write(p, data)
		requireBytes(e.t, data, e.read(q, n), "bytes written through the export, read through the import")

		s := e.stream()
		local := e.alloc(4)
		require.NoError(e.t, prepareSignal(e.rt, local, 0xfeedf00d))
		require.NoError(e.t, signal(e.rt, s, word(q, 1), 0xfeedf00d, local), "write-value (or B5 copy) through the import")
		e.sync(s, "write-value through the import")
		require.Equal(e.t, uint32(0xfeedf00d), e.read32(word(p, 1)), "write-value through the import, read through the export")
	})
}
