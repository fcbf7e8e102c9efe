package hiptest

import (
	"encoding/binary"
	"strconv"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// testNullStream: single copies and memop batches work on the legacy NULL
// stream (0 and its explicit name 1) and on the per-thread stream (2);
// batched copies are refused on the legacy NULL stream with
// ErrInvalidValue, as CUDA does (B14), and work on the per-thread stream.
// Synchronization of these streams stays on this thread: stream 2 is the
// calling thread's.
func testNullStream(e *env) {
	caps := e.rt.Caps()
	for _, s := range []hip.Stream{hip.StreamNull, hip.StreamLegacy, hip.StreamPerThread} {
		e.sub("stream-"+strconv.Itoa(int(s)), func(e *env) {
			const n = 4096 + 3
			src, dst := e.alloc(n), e.alloc(n)
			flags := e.zeroed(4096)
			data := e.random(n)
			e.write(src, data)
			require.NoError(e.t, e.rt.Memset(dst, poison, n))
			e.res.special = append(e.res.special, s) // drained before the buffers are freed

			require.NoError(e.t, e.rt.MemcpyAsync(dst, src, n, s), "MemcpyAsync")
			e.memops(s, hip.WriteValue32(word(flags, 0), 3), hip.WaitValue32(word(flags, 0), 3, hip.WaitEQ),
				hip.WriteValue32(word(flags, 1), 4))
			require.NoError(e.t, e.rt.StreamSynchronize(s))
			requireBytes(e.t, data, e.read(dst, n), "MemcpyAsync")
			require.Equal(e.t, uint32(3), e.read32(word(flags, 0)))
			require.Equal(e.t, uint32(4), e.read32(word(flags, 1)))

			require.NoError(e.t, e.rt.Memset(dst, poison, n))
			err := e.rt.MemcpyBatchAsync([]hip.DevicePtr{dst, dst + 100}, []hip.DevicePtr{src, src + 100}, []uintptr{100, n - 100}, nil, nil, s)
			switch {
			case s.IsLegacyNull() && caps.BatchCopy:
				require.ErrorIs(e.t, err, hip.ErrInvalidValue, "MemcpyBatchAsync on the legacy NULL stream")
			case s.IsLegacyNull():
				require.True(e.t, is(err, hip.ErrInvalidValue, hip.ErrNotSupported), "MemcpyBatchAsync on the legacy NULL stream without BatchCopy: %v", err)
			case caps.BatchCopy:
				require.NoError(e.t, err, "MemcpyBatchAsync on the per-thread stream")
				require.NoError(e.t, e.rt.StreamSynchronize(s))
				requireBytes(e.t, data, e.read(dst, n), "MemcpyBatchAsync on the per-thread stream")
			default:
				require.ErrorIs(e.t, err, hip.ErrNotSupported, "MemcpyBatchAsync without BatchCopy")
			}
		})
	}
}

// testBadArgs: the refusals the engine relies on, and (on the host device,
// where CUDA's behaviour is undefined) stale and garbage handles give errors
// instead of crashes.
func testBadArgs(e *env) {
	e.sub("memop-invalid-op", func(e *env) { // B1
		flags := e.zeroed(4096)
		s := e.stream()
		bad := hip.MemOp{Addr: word(flags, 0), Value: 1} // Op left 0
		require.ErrorIs(e.t, e.rt.StreamBatchMemOp(s, []hip.MemOp{bad}), hip.ErrInvalidValue, "memop entry with Op 0")
		e.memops(s, hip.WriteValue32(word(flags, 1), 9))
		e.sync(s, "stream after a refused memop batch")
		require.Equal(e.t, uint32(9), e.read32(word(flags, 1)), "the stream must stay usable after a refused batch")
	})

	e.sub("memop-batch-limit", func(e *env) { // B7
		const many = 600
		flags := e.zeroed(4 * many)
		s := e.stream()
		ops := make([]hip.MemOp, many)
		for i := range ops {
			ops[i] = hip.WriteValue32(word(flags, i), uint32(i+1))
		}
		require.ErrorIs(e.t, e.rt.StreamBatchMemOp(s, ops[:hip.MaxMemOpsPerBatch+1]), hip.ErrInvalidValue, "%d memop entries", hip.MaxMemOpsPerBatch+1)
		require.NoError(e.t, e.rt.StreamBatchMemOp(s, ops[:hip.MaxMemOpsPerBatch]), "%d memop entries", hip.MaxMemOpsPerBatch)
		e.sync(s, "a full memop batch")
		got := e.read(flags, 4*many)
		for i := range many {
			want := uint32(0)
			if i < hip.MaxMemOpsPerBatch {
				want = uint32(i + 1)
			}
			require.Equal(e.t, want, le32(got[4*i:]), "word %d after the %d-entry batch", i, hip.MaxMemOpsPerBatch)
		}
		require.NoError(e.t, e.rt.Memset(flags, 0, 4*many))
		require.NoError(e.t, hip.BatchMemOps(e.rt, s, ops), "BatchMemOps of %d entries", many)
		e.sync(s, "BatchMemOps")
		got = e.read(flags, 4*many)
		for i := range many {
			require.Equal(e.t, uint32(i+1), le32(got[4*i:]), "word %d after BatchMemOps", i)
		}
	})

	e.sub("batch-copy-args", func(e *env) {
		caps := e.rt.Caps()
		if !caps.BatchCopy {
			e.t.Skip("Caps().BatchCopy is false")
		}
		p := e.zeroed(4096)
		s := e.stream()
		d := []hip.DevicePtr{p + 2048, p + 3072}
		sr := []hip.DevicePtr{p, p + 1024}
		sz := []uintptr{16, 16}
		require.ErrorIs(e.t, e.rt.MemcpyBatchAsync(d, sr[:1], sz, nil, nil, s), hip.ErrInvalidValue, "fewer sources than destinations")
		require.ErrorIs(e.t, e.rt.MemcpyBatchAsync(d, sr, sz[:1], nil, nil, s), hip.ErrInvalidValue, "fewer sizes than destinations")
		if caps.CopyAttributes {
			a := []hip.CopyAttributes{attrStream}
			require.ErrorIs(e.t, e.rt.MemcpyBatchAsync(d, sr, sz, a, []uintptr{1}, s), hip.ErrInvalidValue, "attrIdxs[0] != 0")
			require.ErrorIs(e.t, e.rt.MemcpyBatchAsync(d, sr, sz, a, nil, s), hip.ErrInvalidValue, "attrs without attrIdxs")
			require.ErrorIs(e.t, e.rt.MemcpyBatchAsync(d, sr, sz, a, []uintptr{0, 1}, s), hip.ErrInvalidValue, "more attrIdxs than attrs")
		}
		require.NoError(e.t, e.rt.MemcpyBatchAsync(d, sr, sz, nil, nil, s), "the stream must stay usable after refused batches")
		e.sync(s, "batched copy after refusals")
	})

	if e.rt.Name() != "host" {
		return // CUDA leaves stale and garbage handles undefined
	}
	e.sub("stale-handles", func(e *env) {
		rt := e.rt
		s, err := rt.StreamCreate()
		require.NoError(e.t, err)
		require.NoError(e.t, rt.StreamDestroy(s))
		require.Error(e.t, rt.StreamDestroy(s), "StreamDestroy twice")
		require.Error(e.t, rt.StreamSynchronize(s), "StreamSynchronize of a destroyed stream")
		p := e.zeroed(4096)
		require.Error(e.t, rt.MemcpyAsync(p+8, p, 4, s), "MemcpyAsync on a destroyed stream")

		ev, err := rt.EventCreate(hip.EventDefault)
		require.NoError(e.t, err)
		require.NoError(e.t, rt.EventDestroy(ev))
		require.Error(e.t, rt.EventDestroy(ev), "EventDestroy twice")
		require.Error(e.t, rt.EventQuery(ev), "EventQuery of a destroyed event")

		q, err := rt.MemAlloc(4096)
		require.NoError(e.t, err)
		require.NoError(e.t, rt.MemFree(q))
		require.Error(e.t, rt.MemFree(q), "MemFree twice")
	})
	e.sub("garbage-handles", func(e *env) {
		rt := e.rt
		const junk = 0xdead_beef_0000
		p := e.zeroed(4096)
		require.Error(e.t, rt.StreamDestroy(hip.Stream(junk)), "StreamDestroy(garbage)")
		require.Error(e.t, rt.StreamSynchronize(hip.Stream(junk)), "StreamSynchronize(garbage)")
		require.Error(e.t, rt.StreamBatchMemOp(hip.Stream(junk), []hip.MemOp{hip.WriteValue32(p, 1)}), "StreamBatchMemOp(garbage)")
		require.Error(e.t, rt.EventDestroy(hip.Event(junk)), "EventDestroy(garbage)")
		require.Error(e.t, rt.EventRecord(hip.Event(junk), hip.StreamNull), "EventRecord(garbage)")
		require.Error(e.t, rt.GraphLaunch(hip.GraphExec(junk), hip.StreamNull), "GraphLaunch(garbage)")
		require.Error(e.t, rt.GraphDestroy(hip.Graph(junk)), "GraphDestroy(garbage)")
		require.Error(e.t, rt.MemFree(hip.DevicePtr(junk)), "MemFree(garbage)")
		_, _, err := rt.MemGetAddressRange(hip.DevicePtr(junk))
		require.Error(e.t, err, "MemGetAddressRange(garbage)")
	})
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
