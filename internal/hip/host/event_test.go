package host

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

func newEvent(t *testing.T, rt *Runtime, flags hip.EventFlags) hip.Event {
	t.Helper()
	e, err := rt.EventCreate(flags)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.EventDestroy(e) })
	return e
}

func TestEvents(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	s, other := newStream(t, rt), newStream(t, rt)
	buf := alloc(t, rt, 4096)
	start, end := newEvent(t, rt, hip.EventDefault), newEvent(t, rt, hip.EventDefault)
	notime := newEvent(t, rt, hip.EventDisableTiming)

	// Never recorded: complete.
	require.NoError(t, rt.EventQuery(start))
	require.NoError(t, rt.EventSynchronize(start))
	require.NoError(t, rt.StreamWaitEvent(other, start))
	_, err := rt.EventElapsedTime(start, end)
	require.Equal(t, hip.ErrInvalidHandle, err)

	require.NoError(t, rt.EventRecord(start, s))
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(buf, 1, hip.WaitEQ)}))
	require.NoError(t, rt.EventRecord(end, s))
	require.NoError(t, rt.EventRecord(notime, s))
	// other waits for end: its write must not run before the release.
	require.NoError(t, rt.StreamWaitEvent(other, end))
	require.NoError(t, rt.StreamBatchMemOp(other, []hip.MemOp{write(buf+4, 1)}))
	require.NoError(t, rt.EventSynchronize(start))
	require.Equal(t, hip.ErrNotReady, rt.EventQuery(end))
	_, err = rt.EventElapsedTime(start, end)
	require.Equal(t, hip.ErrNotReady, err)

	time.Sleep(20 * time.Millisecond)
	require.Zero(t, load(buf+4))
	store(buf, 1)
	require.NoError(t, rt.EventSynchronize(end))
	require.NoError(t, rt.EventQuery(end))
	ms, err := rt.EventElapsedTime(start, end)
	require.NoError(t, err)
	require.GreaterOrEqual(t, ms, float32(15))
	require.Less(t, ms, float32(5000))
	_, err = rt.EventElapsedTime(start, notime)
	require.Equal(t, hip.ErrInvalidHandle, err)
	require.NoError(t, rt.StreamSynchronize(other))
	require.Equal(t, uint32(1), load(buf+4))

	// A wait refers to the record made before it, not to later ones.
	require.NoError(t, rt.EventRecord(end, s))
	require.NoError(t, rt.StreamWaitEvent(other, end))
	require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(buf, 2, hip.WaitEQ)}))
	require.NoError(t, rt.EventRecord(end, s))
	require.NoError(t, rt.StreamBatchMemOp(other, []hip.MemOp{write(buf+8, 1)}))
	require.NoError(t, rt.StreamSynchronize(other))
	require.Equal(t, uint32(1), load(buf+8))
	require.Equal(t, hip.ErrNotReady, rt.EventQuery(end))
	store(buf, 2)
	require.NoError(t, rt.EventSynchronize(end))

	require.NoError(t, rt.EventDestroy(notime))
	require.Equal(t, hip.ErrInvalidHandle, rt.EventQuery(notime))
	require.Equal(t, hip.ErrInvalidHandle, rt.EventRecord(0x4242, s))
	_, err = rt.EventCreate(0x100)
	require.Equal(t, hip.ErrInvalidValue, err)
}
