package host

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// Copies on one stream run in order: a chain a->b->c->d of 4-byte copies
// ends with a's value only if each copy saw the previous one.
func TestStreamFIFO(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	s := newStream(t, rt)
	buf := alloc(t, rt, 4096)
	for round := uint32(1); round <= 50; round++ {
		store(buf, round)
		for i := uintptr(0); i < 16; i++ {
			require.NoError(t, rt.MemcpyAsync(buf+hip.DevicePtr(4*(i+1)), buf+hip.DevicePtr(4*i), 4, s))
		}
		require.NoError(t, hip.BatchMemOps(rt, s, []hip.MemOp{write(buf+256, round)}))
		require.NoError(t, rt.StreamSynchronize(s))
		require.Equal(t, round, load(buf+64), "round %d", round)
		require.Equal(t, round, load(buf+256))
	}
}

// A stream blocked on a wait does not block another stream; the wait is
// released by a write-value from a third stream.
func TestStreamsRunConcurrently(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	a, b, c := newStream(t, rt), newStream(t, rt), newStream(t, rt)
	flag := alloc(t, rt, 4096)
	data := flag + 64
	require.NoError(t, rt.StreamBatchMemOp(a, []hip.MemOp{wait(flag, 1, hip.WaitEQ)}))
	require.NoError(t, rt.StreamBatchMemOp(a, []hip.MemOp{write(data, 5)}))
	require.NoError(t, rt.MemcpyAsync(data+4, flag, 4, b))
	require.NoError(t, rt.StreamSynchronize(b))
	require.Equal(t, hip.ErrNotReady, rt.StreamQuery(a))
	require.Zero(t, load(data))
	require.NoError(t, rt.StreamBatchMemOp(c, []hip.MemOp{write(flag, 1)}))
	require.NoError(t, rt.StreamSynchronize(a))
	require.NoError(t, rt.StreamQuery(a))
	require.Equal(t, uint32(5), load(data))
}

func TestWaitConditions(t *testing.T) {
	tests := []struct {
		name           string
		cond           uint32
		value          uint32
		initial, wrong uint32 // the wait must hold back on both
		release        uint32
	}{
		{"EQ", hip.WaitEQ, 7, 0, 6, 7},
		{"GEQ", hip.WaitGEQ, 10, 0, 9, 11},
		{"GEQ cyclic across wrap", hip.WaitGEQ, 0xFFFFFFFF, 0xFFFFFFF0, 0xFFFFFFFE, 1},
		{"AND", hip.WaitAND, 0x6, 0x1, 0x8, 0x4},
		{"NOR", hip.WaitNOR, 0xFFFF0000, 0xFFFFFFFF, 0x0000FFFF, 0xFFFF0000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRT(t, Config{Devices: 2})
			w, p := newStream(t, rt), newStream(t, rt)
			buf := alloc(t, rt, 4096)
			flag, out := buf, buf+4
			store(flag, tc.initial)
			require.NoError(t, rt.StreamBatchMemOp(w, []hip.MemOp{wait(flag, tc.value, tc.cond), write(out, 1)}))
			time.Sleep(2 * time.Millisecond)
			require.Zero(t, load(out), "released by %#x", tc.initial)
			require.NoError(t, rt.StreamBatchMemOp(p, []hip.MemOp{write(flag, tc.wrong)}))
			require.NoError(t, rt.StreamSynchronize(p))
			time.Sleep(2 * time.Millisecond)
			require.Zero(t, load(out), "released by %#x", tc.wrong)
			require.NoError(t, rt.StreamBatchMemOp(p, []hip.MemOp{write(flag, tc.release)}))
			require.NoError(t, rt.StreamSynchronize(w))
			require.Equal(t, uint32(1), load(out))
		})
	}
}

// A wait on a word in ordinary Go memory, released by a 4-byte Memcpy
// (engines publish flags by small copies): the copy must wake the waiter.
func TestWaitReleasedBySmallCopy(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	s := newStream(t, rt)
	words := make([]uint32, 4)
	flag := hip.DevicePtr(unsafe.Pointer(&words[0]))
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(flag, 3, hip.WaitEQ), write(flag+4, 9)}))
	time.Sleep(5 * time.Millisecond) // let it reach the futex sleep
	src := []uint32{3}
	start := time.Now()
	require.NoError(t, rt.Memcpy(uintptr(flag), uintptr(unsafe.Pointer(&src[0])), 4))
	require.NoError(t, rt.StreamSynchronize(s))
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, uint32(9), load(flag+4))
	_ = words[3]
}

func TestStreamDestroyDrains(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	buf := alloc(t, rt, 4096)
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(buf, 1, hip.WaitEQ), write(buf+4, 2)}))
	require.NoError(t, rt.StreamDestroy(s))
	require.Equal(t, hip.ErrInvalidHandle, rt.StreamDestroy(s))
	require.Equal(t, hip.ErrInvalidHandle, rt.MemcpyAsync(buf, buf+8, 4, s))
	require.Equal(t, hip.ErrInvalidHandle, rt.StreamSynchronize(s))
	store(buf, 1)
	eventually(t, 5*time.Second, func() bool { return load(buf+4) == 2 }, "destroyed stream dropped its work")
}

func TestSpecialStreams(t *testing.T) {
	rt := newRT(t, Config{Devices: 2})
	lockThread()
	defer unlockThread()
	buf := alloc(t, rt, 4096)
	for _, h := range []hip.Stream{hip.StreamNull, hip.StreamLegacy, hip.StreamPerThread} {
		require.NoError(t, rt.MemcpyAsync(buf+4, buf, 4, h))
		require.NoError(t, rt.StreamSynchronize(h))
		require.NoError(t, rt.StreamQuery(h))
	}
	l0, err := rt.lookupStream(hip.StreamNull)
	require.NoError(t, err)
	l1, err := rt.lookupStream(hip.StreamLegacy)
	require.NoError(t, err)
	pt, err := rt.lookupStream(hip.StreamPerThread)
	require.NoError(t, err)
	require.Same(t, l0, l1)
	require.NotSame(t, l0, pt)
	require.NoError(t, rt.SetDevice(1))
	l2, err := rt.lookupStream(hip.StreamNull)
	require.NoError(t, err)
	require.NotSame(t, l0, l2)
	require.Equal(t, 1, l2.dev)
	require.NoError(t, rt.SetDevice(0))

	for _, h := range []hip.Stream{3, 0x1001, 0xdeadbeef} {
		require.Equal(t, hip.ErrInvalidHandle, rt.StreamSynchronize(h))
		require.Equal(t, hip.ErrInvalidHandle, rt.MemcpyAsync(buf, buf+4, 4, h))
	}
	s := newStream(t, rt)
	require.GreaterOrEqual(t, uintptr(s), uintptr(0x1000))
}

func TestDeviceSynchronize(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	a, b := newStream(t, rt), newStream(t, rt)
	buf := alloc(t, rt, 4096)
	require.NoError(t, rt.StreamBatchMemOp(a, []hip.MemOp{wait(buf, 1, hip.WaitEQ), write(buf+4, 1)}))
	require.NoError(t, rt.StreamBatchMemOp(b, []hip.MemOp{write(buf, 1)}))
	require.NoError(t, rt.DeviceSynchronize())
	require.Equal(t, uint32(1), load(buf+4))
}

// Close stops workers blocked on waits that will never hold.
func TestCloseStopsBlockedWorkers(t *testing.T) {
	watchdog(t, 10*time.Second)
	rt, err := New(Config{Devices: 1})
	require.NoError(t, err)
	words := make([]uint32, 1)
	flag := hip.DevicePtr(unsafe.Pointer(&words[0]))
	a, err := rt.StreamCreate()
	require.NoError(t, err)
	b, err := rt.StreamCreate()
	require.NoError(t, err)
	ev, err := rt.EventCreate(hip.EventDefault)
	require.NoError(t, err)
	require.NoError(t, rt.StreamBatchMemOp(a, []hip.MemOp{wait(flag, 1, hip.WaitEQ)}))
	require.NoError(t, rt.EventRecord(ev, a))
	require.NoError(t, rt.StreamWaitEvent(b, ev))
	time.Sleep(5 * time.Millisecond)
	start := time.Now()
	rt.Close()
	require.Less(t, time.Since(start), time.Second)
	_ = words[0]
}
