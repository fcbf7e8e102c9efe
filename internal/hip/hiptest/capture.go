package hiptest

import (
	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// captureSet is one set of buffers the captured sequence works on: the
// eager run and the graph each have their own, and must end up alike.
type captureSet struct {
	in, b, c, d hip.DevicePtr
	flags       hip.DevicePtr // word 0: gate, 1: count, 2: done
}

const (
	capN   = 8192 + 3 // in -> b
	capOff = 101      // c is b[capOff:capOff+capM]
	capM   = 4096 + 1 // c -> d
)

func (e *env) captureSet() captureSet {
	return captureSet{in: e.alloc(capN), b: e.alloc(capN), c: e.alloc(capM), d: e.alloc(capM), flags: e.alloc(4096)}
}

// reset poisons a set's outputs and flags and puts new input in it, so a
// replay that does nothing, or reads the input as it was at capture time,
// shows.
func (e *env) reset(cs captureSet, input []byte) {
	e.t.Helper()
	e.write(cs.in, input)
	for _, p := range []struct {
		p hip.DevicePtr
		n uintptr
	}{{cs.b, capN}, {cs.c, capM}, {cs.d, capM}} {
		require.NoError(e.t, e.rt.Memset(p.p, poison, p.n))
	}
	require.NoError(e.t, e.rt.Memset(cs.flags, 0, 4096))
}

// captureOps enqueues the sequence that is run eagerly and captured: a
// gate wait that the sequence consumes, chained copies and write-values.
// With tryBatch (under capture) it also tries a batched copy, which must be
// refused without spoiling the capture.
func (e *env) captureOps(s hip.Stream, cs captureSet, tryBatch bool) {
	e.t.Helper()
	gate, count, done := word(cs.flags, 0), word(cs.flags, 1), word(cs.flags, 2)
	e.memops(s, hip.WaitValue32(gate, 1, hip.WaitEQ), hip.WriteValue32(gate, 0))
	e.copyAsync(cs.b, cs.in, capN, s)
	e.memops(s, hip.WriteValue32(count, 0xc0de0001))
	e.copyAsync(cs.c, cs.b+capOff, capM, s)
	if tryBatch {
		err := e.rt.MemcpyBatchAsync([]hip.DevicePtr{cs.d}, []hip.DevicePtr{cs.c}, []uintptr{capM}, nil, nil, s)
		if e.rt.Caps().BatchCopy {
			require.ErrorIs(e.t, err, hip.ErrStreamCaptureUnsupported, "MemcpyBatchAsync under capture")
		} else {
			require.True(e.t, is(err, hip.ErrStreamCaptureUnsupported, hip.ErrNotSupported),
				"MemcpyBatchAsync under capture without BatchCopy: %v", err)
		}
		st, err := e.rt.StreamGetCaptureStatus(s)
		require.NoError(e.t, err)
		require.Equal(e.t, hip.CaptureActive, st, "a refused batched copy must leave the capture active")
	}
	e.copyAsync(cs.d, cs.c, capM, s)
	e.memops(s, hip.WriteValue32(done, 1))
}

// captureResult reads a set's outputs.
func (e *env) captureResult(cs captureSet) (b, c, d, flags []byte) {
	e.t.Helper()
	return e.read(cs.b, capN), e.read(cs.c, capM), e.read(cs.d, capM), e.read(cs.flags, 12)
}

// testCapture: capture a sequence, instantiate it, and launch it three
// times with new input each time; every launch must leave what an eager run
// of the same sequence leaves (and what the sequence means).
func testCapture(e *env) {
	eager, graph := e.captureSet(), e.captureSet()
	e.releaser()
	sc, sl, se := e.stream(), e.stream(), e.stream()

	status := func(s hip.Stream) hip.CaptureStatus {
		st, err := e.rt.StreamGetCaptureStatus(s)
		require.NoError(e.t, err, "StreamGetCaptureStatus")
		return st
	}

	e.reset(graph, e.random(capN))
	require.Equal(e.t, hip.CaptureNone, status(sc), "before capture")
	require.NoError(e.t, e.rt.StreamBeginCapture(sc, hip.CaptureModeThreadLocal))
	require.Equal(e.t, hip.CaptureActive, status(sc), "during capture")
	require.Equal(e.t, hip.CaptureNone, status(sl), "another stream during capture")
	e.captureOps(sc, graph, true)
	g, err := e.rt.StreamEndCapture(sc)
	require.NoError(e.t, err, "StreamEndCapture after a refused batched copy")
	require.Equal(e.t, hip.CaptureNone, status(sc), "after capture")
	// Capturing ran nothing.
	b, _, _, _ := e.captureResult(graph)
	requireBytes(e.t, filled(capN, poison), b, "a captured copy ran during capture")

	exec, err := e.rt.GraphInstantiate(g)
	require.NoError(e.t, err, "GraphInstantiate")
	// The executable graph does not depend on the graph it came from.
	require.NoError(e.t, e.rt.GraphDestroy(g), "GraphDestroy after instantiation")
	defer func() { require.NoError(e.t, e.rt.GraphExecDestroy(exec), "GraphExecDestroy") }()

	for round := range 3 {
		input := e.random(capN)
		e.reset(eager, input)
		e.reset(graph, input)

		e.set32(word(eager.flags, 0), 1)
		e.captureOps(se, eager, false)
		e.sync(se, "eager run")

		gated := round == 1 // this launch finds its gate closed
		if !gated {
			e.set32(word(graph.flags, 0), 1)
		}
		require.NoError(e.t, e.rt.GraphLaunch(exec, sl), "GraphLaunch %d", round)
		if gated {
			e.blocked(sl, "graph launch behind its gate")
			b, _, _, _ := e.captureResult(graph)
			requireBytes(e.t, filled(capN, poison), b, "graph copy ran before its gate opened")
			e.releaseWith(word(graph.flags, 0), 1)
		}
		e.sync(sl, "graph launch")

		eb, ec, ed, ef := e.captureResult(eager)
		gb, gc, gd, gf := e.captureResult(graph)
		requireBytes(e.t, input, eb, "eager b")
		requireBytes(e.t, input[capOff:capOff+capM], ec, "eager c")
		requireBytes(e.t, input[capOff:capOff+capM], ed, "eager d")
		requireBytes(e.t, eb, gb, "graph b vs eager")
		requireBytes(e.t, ec, gc, "graph c vs eager")
		requireBytes(e.t, ed, gd, "graph d vs eager")
		requireBytes(e.t, ef, gf, "graph flags vs eager")
		require.Equal(e.t, []byte{0, 0, 0, 0, 1, 0, 0xde, 0xc0, 1, 0, 0, 0}, gf, "flags: gate consumed, count, done")
	}
	require.Equal(e.t, hip.CaptureNone, status(sl), "launch stream after the launches")
}
