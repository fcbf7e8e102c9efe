package host

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// An enqueuer that runs maxPending ops ahead of a stuck worker blocks
// instead of growing the ring, and resumes once the worker drains.
func TestBackPressureBoundsQueue(t *testing.T) {
	watchdog(t, 20*time.Second)
	rt := newRT(t, Config{Devices: 1})
	s := newStream(t, rt)
	buf := alloc(t, rt, 1<<16)
	gate := buf + 4096
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(gate, 1, hip.WaitEQ)}))

	var issued atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 3*maxPending; i++ {
			if err := rt.MemcpyAsync(buf+64, buf+128, 8, s); err != nil {
				panic(err)
			}
			issued.Add(1)
		}
	}()
	// The issuer stalls at the bound while the gate is closed.
	eventually(t, 5*time.Second, func() bool { return issued.Load() >= maxPending-1 }, "issuer never reached the bound")
	time.Sleep(20 * time.Millisecond)
	require.Less(t, issued.Load(), int64(maxPending+1), "enqueue did not block at the bound")
	st, err := rt.lookupStream(s)
	require.NoError(t, err)
	st.mu.Lock()
	ringLen := len(st.ring)
	st.mu.Unlock()
	require.LessOrEqual(t, ringLen, 2*maxPending)

	store(gate, 1)
	<-done
	require.NoError(t, rt.StreamSynchronize(s))
	require.Equal(t, int64(3*maxPending), issued.Load())
}

// Records of one event that fill a stream's queue: the next EventRecord
// waits for room while the worker runs the earlier markers of the same
// event. It must not hold the event's lock across that wait (the worker's
// marker takes it): that deadlocked 500 grouped 4-rank Gathers. The same
// for StreamWaitEvent on a full queue while the event's stream drains.
func TestRecordWaitsForRoomWithoutEventLock(t *testing.T) {
	watchdog(t, 30*time.Second)
	rt := newRT(t, Config{Devices: 1})
	s := newStream(t, rt)
	o := newStream(t, rt)
	buf := alloc(t, rt, 4096)
	gate := buf + 256
	ev, err := rt.EventCreate(hip.EventDisableTiming)
	require.NoError(t, err)
	defer rt.EventDestroy(ev)
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(gate, 1, hip.WaitEQ)}))
	require.NoError(t, rt.StreamBatchMemOp(o, []hip.MemOp{wait(gate, 1, hip.WaitEQ)}))
	var issued atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2*maxPending; i++ {
			if err := rt.EventRecord(ev, s); err != nil {
				panic(err)
			}
			// o waits for ev's latest record: o's queue fills too.
			if err := rt.StreamWaitEvent(o, ev); err != nil {
				panic(err)
			}
			issued.Add(1)
		}
	}()
	eventually(t, 5*time.Second, func() bool { return issued.Load() >= maxPending-2 }, "issuer never reached the bound")
	store(gate, 1)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("EventRecord/StreamWaitEvent stuck after %d of %d calls", issued.Load(), 2*maxPending)
	}
	require.NoError(t, rt.StreamSynchronize(s))
	require.NoError(t, rt.StreamSynchronize(o))
}

// A waiter asleep on a word of this process is counted in its bucket, so
// the next write-value wakes it; the count returns to zero afterwards.
func TestSleeperCountedAndWoken(t *testing.T) {
	watchdog(t, 20*time.Second)
	rt := newRT(t, Config{Devices: 1})
	s := newStream(t, rt)
	w := newStream(t, rt)
	buf := alloc(t, rt, 4096)
	flag := buf + 256
	b := sleeperBucket(uintptr(flag))
	base := b.Load()
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(flag, 7, hip.WaitEQ)}))
	eventually(t, 5*time.Second, func() bool { return b.Load() > base }, "waiter never slept")
	require.NoError(t, rt.StreamBatchMemOp(w, []hip.MemOp{write(flag, 7)}))
	require.NoError(t, rt.StreamSynchronize(s))
	eventually(t, 5*time.Second, func() bool { return b.Load() == base }, "sleeper count not restored")
}

// Exported and imported allocations are marked shared (always woken); a
// plain allocation is not, and freeing a shared one drops the count.
func TestSharedAllocationsAlwaysWoken(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	a := alloc(t, rt, 4096)
	b := alloc(t, rt, 4096)
	require.False(t, rt.mem.isShared(uintptr(a)))
	fd, err := rt.MemExport(a)
	require.NoError(t, err)
	defer closeFD(t, fd)
	require.True(t, rt.mem.isShared(uintptr(a)+100))
	require.False(t, rt.mem.isShared(uintptr(b)))
	imp, err := rt.MemImport(fd, 4096)
	require.NoError(t, err)
	require.True(t, rt.mem.isShared(uintptr(imp)))
	require.Equal(t, int32(2), rt.mem.shared.Load())
	require.NoError(t, rt.MemFree(imp))
	require.Equal(t, int32(1), rt.mem.shared.Load())
}
