package host

import (
	"cecoll/internal/hip"
)

// enqueue1 puts one op on s, or records it when s is capturing.
func (s *stream) enqueue1(o *op) error {
	if err := s.lock(1); err != nil {
		return err
	}
	if c := s.cap; c != nil {
		err := c.add(s.branch, o)
		s.mu.Unlock()
		return err
	}
	s.push(o)
	s.kick()
	return nil
}

// MemcpyAsync implements hip.Runtime: one copy in stream order. A NULL or
// wrapping range is refused at the call (ErrInvalidValue); one that is not
// mapped faults when the copy runs and fails the stream (fault.go).
func (rt *Runtime) MemcpyAsync(dst, src hip.DevicePtr, n uintptr, sh hip.Stream) error {
	s, err := rt.lookupStream(sh)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if dst == 0 || src == 0 || wraps(uintptr(dst), n) || wraps(uintptr(src), n) || rt.mc.lookup(uintptr(src)) != nil {
		return hip.ErrInvalidValue
	}
	o := op{kind: opCopy, dst: uintptr(dst), src: uintptr(src), n: n, big: n >= inlineMaxCopy}
	return s.enqueue1(&o)
}

// MemcpyBatchAsync implements hip.Runtime with the driver's validation.
// The copies of one batch have no order among them (the worker may run
// them in any order, in pieces, or on several copy engines); the batch as
// a whole is in stream order.
func (rt *Runtime) MemcpyBatchAsync(dsts, srcs []hip.DevicePtr, sizes []uintptr, attrs []hip.CopyAttributes, attrIdxs []uintptr, sh hip.Stream) error {
	if !rt.caps.BatchCopy {
		return hip.ErrNotSupported
	}
	count := len(dsts)
	if count == 0 || len(srcs) != count || len(sizes) != count || len(attrIdxs) != len(attrs) {
		return hip.ErrInvalidValue
	}
	if len(attrs) > 0 {
		if !rt.caps.CopyAttributes || attrIdxs[0] != 0 {
			return hip.ErrInvalidValue
		}
		for k := range attrs {
			if attrIdxs[k] >= uintptr(count) || attrs[k].SrcAccessOrder < hip.SrcAccessOrderStream || attrs[k].SrcAccessOrder > hip.SrcAccessOrderAny {
				return hip.ErrInvalidValue
			}
		}
	}
	if sh.IsLegacyNull() {
		return hip.ErrInvalidValue
	}
	s, err := rt.lookupStream(sh)
	if err != nil {
		return err
	}
	live, total := 0, uintptr(0)
	for i := 0; i < count; i++ {
		if sizes[i] == 0 {
			continue
		}
		if dsts[i] == 0 || srcs[i] == 0 || wraps(uintptr(dsts[i]), sizes[i]) || wraps(uintptr(srcs[i]), sizes[i]) ||
			rt.mc.lookup(uintptr(srcs[i])) != nil {
			return hip.ErrInvalidValue
		}
		live++
		total += sizes[i]
	}
	if err := s.lock(live + 1); err != nil {
		return err
	}
	if s.cap != nil {
		// As CUDA: refused, and the capture stays valid.
		s.mu.Unlock()
		return hip.ErrStreamCaptureUnsupported
	}
	if live == 0 {
		s.mu.Unlock()
		return nil
	}
	s.push(&op{kind: opBatch, count: live, big: total >= inlineMaxCopy})
	for i := 0; i < count; i++ {
		if sizes[i] != 0 {
			s.push(&op{kind: opCopy, dst: uintptr(dsts[i]), src: uintptr(srcs[i]), n: sizes[i]})
		}
	}
	s.kick()
	return nil
}

// Memcpy2DAsync implements hip.Runtime with the driver's validation: the
// rows run as the copies of one batch (in any order, in pieces), the
// whole in stream order; under capture they are recorded one after
// another.
func (rt *Runtime) Memcpy2DAsync(dst hip.DevicePtr, dpitch uintptr, src hip.DevicePtr, spitch, width, height uintptr, sh hip.Stream) error {
	s, err := rt.lookupStream(sh)
	if err != nil {
		return err
	}
	if width == 0 || height == 0 {
		return nil
	}
	if dst == 0 || src == 0 || width > dpitch || width > spitch || rt.mc.lookup(uintptr(src)) != nil ||
		wraps2D(uintptr(dst), dpitch, width, height) || wraps2D(uintptr(src), spitch, width, height) {
		return hip.ErrInvalidValue
	}
	if err := s.lock(int(height) + 1); err != nil {
		return err
	}
	row := func(i uintptr) op {
		return op{kind: opCopy, dst: uintptr(dst) + i*dpitch, src: uintptr(src) + i*spitch, n: width}
	}
	if c := s.cap; c != nil {
		for i := range height {
			o := row(i)
			if err := c.add(s.branch, &o); err != nil {
				s.mu.Unlock()
				return err
			}
		}
		s.mu.Unlock()
		return nil
	}
	s.push(&op{kind: opBatch, count: int(height), big: width*height >= inlineMaxCopy})
	for i := range height {
		o := row(i)
		s.push(&o)
	}
	s.kick()
	return nil
}

// Memop types the driver knows besides the 32-bit ones.
const (
	memOpFlushRemoteWrites hip.MemOpType = 3
	memOpWaitValue64       hip.MemOpType = 4
	memOpWriteValue64      hip.MemOpType = 5
	memOpBarrier           hip.MemOpType = 6

	waitFlagFlush       = 1 << 30 // CU_STREAM_WAIT_VALUE_FLUSH
	writeNoMemoryBarier = 1       // CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER
)

// checkMemOp validates one entry for stream s.
func (rt *Runtime) checkMemOp(s *stream, m *hip.MemOp) error {
	switch m.Op {
	case hip.MemOpWaitValue32:
		if m.Flags&^waitFlagFlush > hip.WaitNOR {
			return hip.ErrInvalidValue
		}
		if m.Addr == 0 || m.Addr&3 != 0 || rt.mc.lookup(uintptr(m.Addr)) != nil {
			return hip.ErrInvalidValue
		}
	case hip.MemOpWriteValue32:
		if m.Flags&^writeNoMemoryBarier != 0 || m.Addr == 0 || m.Addr&3 != 0 {
			return hip.ErrInvalidValue
		}
		if !rt.caps.PeerWriteValue {
			// CUDA 13.1 refuses write-values to a peer's memory (B5).
			if a := rt.mem.find(uintptr(m.Addr)); a != nil && (a.imported || a.dev != s.dev) {
				return hip.ErrNotSupported
			}
		}
	case memOpFlushRemoteWrites, memOpBarrier:
		// Nothing to do: every store here is already globally visible.
	case memOpWaitValue64, memOpWriteValue64:
		return hip.ErrNotSupported
	default:
		return hip.ErrInvalidValue
	}
	return nil
}

func memOpToOp(m *hip.MemOp) op {
	switch m.Op {
	case hip.MemOpWaitValue32:
		return op{kind: opWait, dst: uintptr(m.Addr), val: uint32(m.Value), cond: m.Flags &^ waitFlagFlush}
	case hip.MemOpWriteValue32:
		return op{kind: opWrite, dst: uintptr(m.Addr), val: uint32(m.Value)}
	}
	return op{kind: opNop}
}

// StreamBatchMemOp implements hip.Runtime. Entries run in order; with the
// hipbatches switch the writes of a batch run before its waits, as HIP may
// do. The whole batch is validated before anything is enqueued.
func (rt *Runtime) StreamBatchMemOp(sh hip.Stream, ops []hip.MemOp) error {
	s, err := rt.lookupStream(sh)
	if err != nil {
		return err
	}
	if len(ops) == 0 || len(ops) > hip.MaxMemOpsPerBatch {
		return hip.ErrInvalidValue
	}
	for i := range ops {
		if err := rt.checkMemOp(s, &ops[i]); err != nil {
			return err
		}
	}
	if err := s.lock(len(ops)); err != nil {
		return err
	}
	c := s.cap
	for pass := 0; pass < 2; pass++ {
		for i := range ops {
			if rt.caps.SplitWaitReset && (ops[i].Op == hip.MemOpWaitValue32) != (pass == 1) {
				continue
			}
			if !rt.caps.SplitWaitReset && pass == 1 {
				break
			}
			o := memOpToOp(&ops[i])
			if c != nil {
				if err := c.add(s.branch, &o); err != nil {
					s.mu.Unlock()
					return err
				}
				continue
			}
			s.push(&o)
		}
	}
	if c != nil {
		s.mu.Unlock()
		return nil
	}
	s.kick()
	return nil
}
