package host

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

func TestMemOpRefusals(t *testing.T) {
	rt := newRT(t, Config{Devices: 2})
	s := newStream(t, rt)
	buf := alloc(t, rt, 4096)
	full := make([]hip.MemOp, hip.MaxMemOpsPerBatch+1)
	for i := range full {
		full[i] = write(buf, uint32(i))
	}
	tests := []struct {
		name string
		ops  []hip.MemOp
		want error
	}{
		{"op 0 (B1)", []hip.MemOp{{Op: hip.MemOpInvalid, Addr: buf, Flags: hip.WaitEQ}}, hip.ErrInvalidValue},
		{"unknown op", []hip.MemOp{{Op: 77, Addr: buf}}, hip.ErrInvalidValue},
		{"256 entries (B7)", full, hip.ErrInvalidValue},
		{"empty", nil, hip.ErrInvalidValue},
		{"unknown wait flag", []hip.MemOp{wait(buf, 1, 4)}, hip.ErrInvalidValue},
		{"unknown write flag", []hip.MemOp{{Op: hip.MemOpWriteValue32, Addr: buf, Flags: 2}}, hip.ErrInvalidValue},
		{"unaligned", []hip.MemOp{write(buf+2, 1)}, hip.ErrInvalidValue},
		{"null address", []hip.MemOp{write(0, 1)}, hip.ErrInvalidValue},
		{"bad entry after good ones", []hip.MemOp{write(buf, 5), {Op: 0, Addr: buf}}, hip.ErrInvalidValue},
		{"255 entries", full[:hip.MaxMemOpsPerBatch], nil},
		{"flush flag on a wait", []hip.MemOp{wait(buf, 0, hip.WaitGEQ|1<<30)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, rt.StreamBatchMemOp(s, tc.ops))
			require.NoError(t, rt.StreamSynchronize(s))
		})
	}
	// A refused batch enqueued nothing.
	require.Equal(t, uint32(hip.MaxMemOpsPerBatch-1), load(buf))
	require.Equal(t, hip.ErrInvalidHandle, rt.StreamBatchMemOp(0x5555, []hip.MemOp{write(buf, 1)}))
}

func TestBatchCopyRefusals(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	s := newStream(t, rt)
	buf := alloc(t, rt, 4096)
	d := []hip.DevicePtr{buf, buf + 64}
	src := []hip.DevicePtr{buf + 128, buf + 192}
	sz := []uintptr{8, 8}
	good := []hip.CopyAttributes{{SrcAccessOrder: hip.SrcAccessOrderStream, Flags: hip.CopyFlagPreferOverlapWithCompute}}
	zero := []uintptr{0}
	tests := []struct {
		name  string
		d, s  []hip.DevicePtr
		sz    []uintptr
		attrs []hip.CopyAttributes
		idxs  []uintptr
		st    hip.Stream
		want  error
	}{
		{"ok", d, src, sz, good, zero, s, nil},
		{"ok no attrs", d, src, sz, nil, nil, s, nil},
		{"ok per-thread stream", d, src, sz, good, zero, hip.StreamPerThread, nil},
		{"count 0", nil, nil, nil, nil, nil, s, hip.ErrInvalidValue},
		{"len mismatch", d, src[:1], sz, nil, nil, s, hip.ErrInvalidValue},
		{"attrIdxs[0] != 0", d, src, sz, good, []uintptr{1}, s, hip.ErrInvalidValue},
		{"attrIdx out of range", d, src, sz, append(good, good...), []uintptr{0, 2}, s, hip.ErrInvalidValue},
		{"attrs without idxs", d, src, sz, good, nil, s, hip.ErrInvalidValue},
		{"access order 0", d, src, sz, []hip.CopyAttributes{{}}, zero, s, hip.ErrInvalidValue},
		{"access order 4", d, src, sz, []hip.CopyAttributes{{SrcAccessOrder: 4}}, zero, s, hip.ErrInvalidValue},
		{"legacy NULL stream 0 (B14)", d, src, sz, good, zero, hip.StreamNull, hip.ErrInvalidValue},
		{"legacy NULL stream 1 (B14)", d, src, sz, good, zero, hip.StreamLegacy, hip.ErrInvalidValue},
		{"null pointer", []hip.DevicePtr{0, buf}, src, sz, nil, nil, s, hip.ErrInvalidValue},
		{"bad handle", d, src, sz, nil, nil, 0x7777, hip.ErrInvalidHandle},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, rt.MemcpyBatchAsync(tc.d, tc.s, tc.sz, tc.attrs, tc.idxs, tc.st))
		})
	}

	t.Run("under capture", func(t *testing.T) {
		runtime.LockOSThread() // a capture belongs to its thread
		defer runtime.UnlockOSThread()
		c := newStream(t, rt)
		require.NoError(t, rt.StreamBeginCapture(c, hip.CaptureModeGlobal))
		require.Equal(t, hip.ErrStreamCaptureUnsupported, rt.MemcpyBatchAsync(d, src, sz, good, zero, c))
		st, err := rt.StreamGetCaptureStatus(c)
		require.NoError(t, err)
		require.Equal(t, hip.CaptureActive, st)
		require.NoError(t, rt.MemcpyAsync(d[0], src[0], 8, c)) // the per-op fallback captures
		g, err := rt.StreamEndCapture(c)
		require.NoError(t, err, "the refusal must not invalidate the capture")
		require.NoError(t, rt.GraphDestroy(g))
	})
}

func TestCapabilitySwitches(t *testing.T) {
	t.Run("noattrs (B3)", func(t *testing.T) {
		rt := newRT(t, Config{Devices: 1, Caps: capsWith(func(c *hip.Caps) { c.CopyAttributes = false })})
		s := newStream(t, rt)
		buf := alloc(t, rt, 4096)
		attrs := []hip.CopyAttributes{{SrcAccessOrder: hip.SrcAccessOrderStream}}
		require.Equal(t, hip.ErrInvalidValue, rt.MemcpyBatchAsync([]hip.DevicePtr{buf}, []hip.DevicePtr{buf + 8}, []uintptr{8}, attrs, []uintptr{0}, s))
		require.NoError(t, rt.MemcpyBatchAsync([]hip.DevicePtr{buf}, []hip.DevicePtr{buf + 8}, []uintptr{8}, nil, nil, s))
		require.False(t, rt.Caps().CopyAttributes)
	})
	t.Run("nobatchcopy", func(t *testing.T) {
		rt := newRT(t, Config{Devices: 1, Caps: capsWith(func(c *hip.Caps) { c.BatchCopy = false })})
		s := newStream(t, rt)
		buf := alloc(t, rt, 4096)
		require.Equal(t, hip.ErrNotSupported, rt.MemcpyBatchAsync([]hip.DevicePtr{buf}, []hip.DevicePtr{buf + 8}, []uintptr{8}, nil, nil, s))
	})
	t.Run("nomulticast", func(t *testing.T) {
		rt := newRT(t, Config{Devices: 1, Caps: capsWith(func(c *hip.Caps) { c.Multicast = false })})
		buf := alloc(t, rt, 4096)
		_, err := rt.MulticastCreate([]hip.DevicePtr{buf}, 64)
		require.Equal(t, hip.ErrNotSupported, err)
	})
	t.Run("nopeerwrite (B5)", func(t *testing.T) {
		rt := newRT(t, Config{Devices: 2, Caps: capsWith(func(c *hip.Caps) { c.PeerWriteValue = false })})
		lockThread()
		defer unlockThread()
		own := alloc(t, rt, 4096)
		require.NoError(t, rt.SetDevice(1))
		peer := alloc(t, rt, 4096)
		require.NoError(t, rt.SetDevice(0))
		fd, err := rt.MemExport(own)
		require.NoError(t, err)
		imported, err := rt.MemImport(fd, 4096)
		require.NoError(t, err)
		closeFD(t, fd)
		defer func() { require.NoError(t, rt.MemFree(imported)) }()
		s := newStream(t, rt)
		require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(own, 1)}))
		require.Equal(t, hip.ErrNotSupported, rt.StreamBatchMemOp(s, []hip.MemOp{write(peer, 1)}))
		require.Equal(t, hip.ErrNotSupported, rt.StreamBatchMemOp(s, []hip.MemOp{write(imported, 1)}))
		// Waits on peer memory and copies into it stay allowed: the B5
		// fallback publishes flags by 4-byte copies.
		require.NoError(t, rt.MemcpyAsync(peer, own, 4, s))
		require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(peer, 1, hip.WaitEQ)}))
		require.NoError(t, rt.StreamSynchronize(s))
	})
	t.Run("hipbatches", func(t *testing.T) {
		for _, hipb := range []bool{false, true} {
			rt := newRT(t, Config{Devices: 1, Caps: capsWith(func(c *hip.Caps) { c.SplitWaitReset = hipb })})
			require.Equal(t, hipb, rt.Caps().SplitWaitReset)
			s := newStream(t, rt)
			buf := alloc(t, rt, 4096)
			flag, reset := buf, buf+4
			store(reset, 9)
			// A sync that puts its reset after its wait in one batch.
			require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(buf+8, 1), wait(flag, 1, hip.WaitEQ), write(reset, 0)}))
			eventually(t, 5e9, func() bool { return load(buf+8) == 1 }, "first write never ran")
			if hipb {
				eventually(t, 5e9, func() bool { return load(reset) == 0 }, "hipbatches: the reset did not overtake the wait")
			} else {
				require.Equal(t, uint32(9), load(reset), "CUDA order: the reset ran before the wait held")
			}
			store(flag, 1)
			require.NoError(t, rt.StreamSynchronize(s))
			require.Zero(t, load(reset))
		}
	})
}
