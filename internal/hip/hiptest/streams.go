package hiptest

import (
	"encoding/binary"
	"math"
	"strconv"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// testStreamFIFO: everything enqueued on one stream runs in order. The
// stream is held by a wait first, so the whole sequence is queued before
// any of it runs (the most freedom a reordering scheduler can have).
// Copies form a chain b0->b1->...->bK, and between them a write-value to
// one word x is followed by a copy of x into a slot: slot i must hold the
// value written just before it, not a later or earlier one.
func testStreamFIFO(e *env) {
	const (
		k = 32
		n = 4096 + 7
	)
	bufs := make([]hip.DevicePtr, k+1)
	for i := range bufs {
		bufs[i] = e.alloc(n)
		require.NoError(e.t, e.rt.Memset(bufs[i], 0xee, n))
	}
	flags := e.zeroed(4096)
	gate, x := word(flags, 0), word(flags, 1)
	slots := word(flags, 16)
	data := e.random(n)
	e.write(bufs[0], data)

	e.releaser()
	s := e.stream()
	e.memops(s, hip.WaitValue32(gate, 1, hip.WaitEQ))
	for i := 1; i <= k; i++ {
		e.copyAsync(bufs[i], bufs[i-1], n, s)
		e.memops(s, hip.WriteValue32(x, uint32(i)))
		e.copyAsync(word(slots, i-1), x, 4, s)
	}
	e.memops(s, hip.WriteValue32(word(flags, 2), 0xd0e))

	e.blocked(s, "FIFO stream behind its gate")
	requireBytes(e.t, filled(n, 0xee), e.read(bufs[k], n), "end of the chain before the gate opened")
	e.releaseWith(gate, 1)
	e.sync(s, "FIFO stream after its gate opened")
	require.NoError(e.t, e.rt.StreamQuery(s), "StreamQuery after StreamSynchronize")

	for i := 1; i <= k; i++ {
		requireBytes(e.t, data, e.read(bufs[i], n), "chained copy "+strconv.Itoa(i))
		require.Equal(e.t, uint32(i), e.read32(word(slots, i-1)), "slot %d: the copy of x saw another write-value than the one before it", i-1)
	}
	require.Equal(e.t, uint32(k), e.read32(x), "last write-value to x")
	require.Equal(e.t, uint32(0xd0e), e.read32(word(flags, 2)))
}

// testEvents: an event recorded behind a blocked wait is not ready; a stream
// that waits on it runs after it; timing between two records is >= 0.
func testEvents(e *env) {
	const n = 8192 + 3
	a, b, c := e.alloc(n), e.alloc(n), e.alloc(n)
	flags := e.zeroed(4096)
	gate, mark := word(flags, 0), word(flags, 1)
	data := e.random(n)
	e.write(a, data)
	require.NoError(e.t, e.rt.Memset(b, 0xee, n))
	require.NoError(e.t, e.rt.Memset(c, 0xee, n))

	e.releaser()
	s1, s2 := e.stream(), e.stream()
	e0, e1 := e.event(hip.EventDefault), e.event(hip.EventDefault)
	never := e.event(hip.EventDisableTiming)

	// CUDA: querying or synchronizing an event never recorded succeeds.
	require.NoError(e.t, e.rt.EventQuery(never), "EventQuery of an event never recorded")
	require.NoError(e.t, e.rt.EventSynchronize(never), "EventSynchronize of an event never recorded")

	require.NoError(e.t, e.rt.EventRecord(e0, s1))
	e.memops(s1, hip.WaitValue32(gate, 1, hip.WaitEQ))
	e.copyAsync(b, a, n, s1)
	require.NoError(e.t, e.rt.EventRecord(e1, s1))
	require.NoError(e.t, e.rt.StreamWaitEvent(s2, e1))
	e.copyAsync(c, b, n, s2)
	e.memops(s2, hip.WriteValue32(mark, 1))

	e.blocked(s1, "s1 behind its gate")
	require.ErrorIs(e.t, e.rt.StreamQuery(s2), hip.ErrNotReady, "s2 ran past StreamWaitEvent before the event completed")
	require.ErrorIs(e.t, e.rt.EventQuery(e1), hip.ErrNotReady, "EventQuery of an event behind a blocked wait")
	require.Equal(e.t, uint32(0), e.read32(mark), "s2's write-value ran before the event")
	requireBytes(e.t, filled(n, 0xee), e.read(c, n), "s2's copy ran before the event")

	e.releaseWith(gate, 1)
	e.await("EventSynchronize after the gate opened", func() error { return e.rt.EventSynchronize(e1) })
	require.NoError(e.t, e.rt.EventQuery(e1), "EventQuery after EventSynchronize")
	e.sync(s2, "s2 after the event")
	requireBytes(e.t, data, e.read(c, n), "s2's copy must see s1's copy that precedes the event")
	require.Equal(e.t, uint32(1), e.read32(mark))

	ms, err := e.rt.EventElapsedTime(e0, e1)
	require.NoError(e.t, err, "EventElapsedTime")
	require.False(e.t, math.IsNaN(float64(ms)) || math.IsInf(float64(ms), 0), "EventElapsedTime = %v", ms)
	require.GreaterOrEqual(e.t, ms, float32(0), "EventElapsedTime")
	e.t.Logf("elapsed across the gate: %.3f ms (settle %v)", ms, e.opts.Settle)

	// A stream that waits on a completed event does not block.
	require.NoError(e.t, e.rt.StreamWaitEvent(s2, e1))
	e.memops(s2, hip.WriteValue32(mark, 2))
	e.sync(s2, "StreamWaitEvent on a completed event")
	require.Equal(e.t, uint32(2), e.read32(mark))
}

// waitCase is one wait condition checked against one written value.
type waitCase struct {
	name  string
	cond  uint32
	value uint32 // the wait's operand
	init  uint32 // the flag before: must not satisfy the wait
	write uint32 // the value written later
	holds bool   // whether write satisfies the wait
}

// waitCases pin CUDA's meaning of the conditions: EQ is equality, GEQ is
// cyclic, int32(*addr - value) >= 0, so it survives wrap-around and an
// unsigned comparison would give the wrong answer in the last three rows.
var waitCases = []waitCase{
	{"EQ/equal", hip.WaitEQ, 7, 0, 7, true},
	{"EQ/greater", hip.WaitEQ, 7, 0, 8, false},
	{"GEQ/equal", hip.WaitGEQ, 5, 4, 5, true},
	{"GEQ/greater", hip.WaitGEQ, 5, 4, 6, true},
	{"GEQ/less", hip.WaitGEQ, 5, 0, 4, false},
	{"GEQ/wrapped-ahead", hip.WaitGEQ, 0xfffffffe, 0xfffffffd, 1, true},      // int32(1-0xfffffffe) = 3
	{"GEQ/wrapped-behind", hip.WaitGEQ, 1, 0, 0xfffffffe, false},             // int32(0xfffffffe-1) = -3
	{"GEQ/half-range-ahead", hip.WaitGEQ, 5, 4, 0x80000004, true},            // int32(0x7fffffff) >= 0
	{"GEQ/more-than-half-ahead", hip.WaitGEQ, 5, 4, 0x80000005, false},       // int32(0x80000000) < 0
	{"GEQ/zero-after-wrap", hip.WaitGEQ, 0xffffff00, 0xfffffeff, 0x10, true}, // int32(0x110) > 0
}

// waitHolds is the condition as CUDA defines it, for the cases above.
func waitHolds(cond, flag, value uint32) bool {
	switch cond {
	case hip.WaitEQ:
		return flag == value
	case hip.WaitGEQ:
		return int32(flag-value) >= 0
	}
	panic("waitHolds: condition not used by the suite")
}

// waitGroup is how many waits testWaitWrite keeps blocked at once: few,
// because a GPU maps streams onto a small number of hardware queues
// (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default) and a blocked wait stalls
// whatever else shares its queue.
const waitGroup = 4

// testWaitWrite runs the waitCases in groups, one waiter stream each: all
// block on their initial value; the written values release exactly the
// cases that hold; writing the operand itself releases the rest.
func testWaitWrite(e *env) {
	flags := e.zeroed(4096)
	e.releaser()
	streams := make([]hip.Stream, waitGroup)
	for i := range streams {
		streams[i] = e.stream()
	}
	for first := 0; first < len(waitCases); first += waitGroup {
		group := waitCases[first:min(first+waitGroup, len(waitCases))]
		flag := func(i int) hip.DevicePtr { return word(flags, 2*(first+i)) }
		mark := func(i int) hip.DevicePtr { return word(flags, 2*(first+i)+1) }
		// The initial values in one write, before any stream blocks: the
		// host writes no device memory while a wait is pending.
		var img []byte
		for _, c := range group {
			img = binary.LittleEndian.AppendUint32(img, c.init)
			img = binary.LittleEndian.AppendUint32(img, 0)
		}
		e.write(flag(0), img)
		for i, c := range group {
			e.memops(streams[i], hip.WaitValue32(flag(i), c.value, c.cond), hip.WriteValue32(mark(i), 1))
		}
		time.Sleep(e.opts.Settle)
		for i, c := range group {
			require.ErrorIs(e.t, e.rt.StreamQuery(streams[i]), hip.ErrNotReady, "%s: wait(%#x) released by the initial %#x", c.name, c.value, c.init)
		}
		for i, c := range group {
			e.releaseWith(flag(i), c.write)
		}
		for i, c := range group {
			if c.holds {
				e.sync(streams[i], c.name+": the written value satisfies the wait")
				require.Equal(e.t, uint32(1), e.read32(mark(i)), c.name)
			}
		}
		time.Sleep(e.opts.Settle)
		for i, c := range group {
			if !c.holds {
				require.ErrorIs(e.t, e.rt.StreamQuery(streams[i]), hip.ErrNotReady, "%s: wait(%#x) released by %#x", c.name, c.value, c.write)
				require.Equal(e.t, uint32(0), e.read32(mark(i)), c.name)
				e.releaseWith(flag(i), c.value)
			}
		}
		for i, c := range group {
			if !c.holds {
				e.sync(streams[i], c.name+": writing the operand itself")
				require.Equal(e.t, uint32(1), e.read32(mark(i)), c.name)
			}
		}
	}
}

// testPingPong: two streams hand a token back and forth through
// write-value/wait-value for many rounds, all enqueued up front, the
// answering stream first. After each wait a stream copies the word it waited
// on into a log: round i of each log must read i, which only the exact
// interleaving gives.
func testPingPong(e *env) {
	const rounds = 64
	flags := e.zeroed(4096)
	ping, pong := word(flags, 0), word(flags, 1)
	log1, log2 := e.zeroed(4*(rounds+1)), e.zeroed(4*(rounds+1))
	s1, s2 := e.stream(), e.stream()

	// s2: wait ping == i, log ping, answer pong = i.
	// s1: ping = i, wait pong == i, log pong.
	for i := 1; i <= rounds; i++ {
		e.memops(s2, hip.WaitValue32(ping, uint32(i), hip.WaitEQ))
		e.copyAsync(word(log2, i), ping, 4, s2)
		e.memops(s2, hip.WriteValue32(pong, uint32(i)))
	}
	start := time.Now()
	for i := 1; i <= rounds; i++ {
		e.memops(s1, hip.WriteValue32(ping, uint32(i)), hip.WaitValue32(pong, uint32(i), hip.WaitEQ))
		e.copyAsync(word(log1, i), pong, 4, s1)
	}
	e.sync(s1, "ping-pong, pinging stream")
	e.sync(s2, "ping-pong, answering stream")
	e.t.Logf("%d round trips in %v", rounds, time.Since(start))
	require.Equal(e.t, uint32(rounds), e.read32(ping))
	require.Equal(e.t, uint32(rounds), e.read32(pong))
	l1, l2 := e.read(log1, 4*(rounds+1)), e.read(log2, 4*(rounds+1))
	for i := 1; i <= rounds; i++ {
		require.Equal(e.t, uint32(i), le32(l2[4*i:]), "round %d: what the answering stream saw after its wait", i)
		require.Equal(e.t, uint32(i), le32(l1[4*i:]), "round %d: what the pinging stream saw after its wait", i)
	}
}

// filled is n bytes of b.
func filled(n uintptr, b byte) []byte {
	s := make([]byte, n)
	for i := range s {
		s[i] = b
	}
	return s
}
