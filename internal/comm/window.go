package comm

import (
	"encoding/binary"
	"sort"
	"sync/atomic"

	"cecoll/internal/ce"
	"cecoll/internal/forward"
	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// WindowAlign is NCCL_WIN_REQUIRED_ALIGNMENT.
const WindowAlign = 4096

// WinCollSymmetric is NCCL_WIN_COLL_SYMMETRIC: the application promises to
// pass, in collectives, buffers at the same offset of this window on every
// rank, which lets copies reach a peer's buffer directly.
const WinCollSymmetric = 0x01

// Window is a symmetric window: one buffer per rank. It implements
// ce.Window. Peers' bases are this process's addresses of their buffers (in
// one process every rank's memory is mapped for every device).
type Window struct {
	c        *Comm
	base     hip.DevicePtr
	size     uintptr
	flags    int
	internal bool // the engine's own (sync flags, staging)
	peers    []hip.DevicePtr
	reach    uintptr // the smallest window of all ranks: copies go no further
	live     atomic.Bool
	dead     bool // deregistered (under c.winMu)

	// Forward mode: the real library's window for the same buffer (none:
	// realWhy says why).
	realRef
	realWhy string
}

var _ ce.Window = (*Window)(nil)

// Base implements ce.Window.
func (w *Window) Base() hip.DevicePtr { return w.base }

// Size implements ce.Window: the bytes every rank's window holds (its
// peers' may be smaller than this rank's).
func (w *Window) Size() uintptr { return w.reach }

// PeerBase implements ce.Window.
func (w *Window) PeerBase(peer int) hip.DevicePtr { return w.peers[peer] }

// Flags are the NCCL_WIN_* flags it was registered with.
func (w *Window) Flags() int { return w.flags }

// Comm is the communicator the window belongs to.
func (w *Window) Comm() *Comm { return w.c }

// Live reports whether the window is registered (after a deferred
// registration: once its ncclGroupEnd succeeded).
func (w *Window) Live() bool { return w.live.Load() }

// RegisterWindow implements ce.Comm: a collective registration the engine
// makes at init, never deferred.
func (c *Comm) RegisterWindow(p hip.DevicePtr, size uintptr) (ce.Window, error) {
	w := &Window{c: c, base: p, size: size, internal: true}
	if err := c.register(w); err != nil {
		return nil, err
	}
	return w, nil
}

// DeregisterWindow implements ce.Comm.
func (c *Comm) DeregisterWindow(cw ce.Window) error {
	w, ok := cw.(*Window)
	if !ok || w == nil {
		return result.Errorf(result.InvalidArgument, "window deregister: not a window of this communicator")
	}
	return c.deregister(w)
}

// WindowRegister is ncclCommWindowRegister: collective. Inside a group the
// window is returned at once and registered at ncclGroupEnd.
func (c *Comm) WindowRegister(p hip.DevicePtr, size uintptr, flags int) (*Window, error) {
	if st := c.state(); st != stReady && st != stInit {
		return nil, c.usable("ncclCommWindowRegister")
	}
	if err := c.failedAsync("ncclCommWindowRegister"); err != nil {
		return nil, err
	}
	w := &Window{c: c, base: p, size: size, flags: flags}
	if g := currentGroup(); g != nil {
		g.addReg(w)
		return w, nil
	}
	if err := c.usable("ncclCommWindowRegister"); err != nil {
		return nil, err
	}
	if err := c.onDevice(func() error { return c.registerUser(w) }); err != nil {
		return nil, err
	}
	return w, nil
}

// WindowDeregister is ncclCommWindowDeregister: local, the real
// library's window first.
func (c *Comm) WindowDeregister(w *Window) error {
	if w == nil || w.c != c || w.internal {
		return result.Errorf(result.InvalidArgument, "ncclCommWindowDeregister: not a window of this communicator")
	}
	var rerr error
	if rw := w.takeReal(); rw != 0 {
		if h := c.Real(); h != 0 {
			rerr = c.lib.WindowDeregister(forward.Handle(h), rw)
		}
	}
	if c.spans {
		return rerr // never registered with cecoll
	}
	return firstNonNil(rerr, c.deregister(w))
}

// checkLocked validates [p, p+size) for registration; c.winMu held.
func (c *Comm) checkLocked(p hip.DevicePtr, size uintptr) error {
	if p == 0 {
		return result.Errorf(result.InvalidArgument, "window register: NULL buffer")
	}
	if size == 0 {
		return result.Errorf(result.InvalidArgument, "window register: size 0")
	}
	if uintptr(p)+size < uintptr(p) {
		return result.Errorf(result.InvalidArgument, "window register: [%#x, +%d) wraps the address space", p, size)
	}
	base, asize, err := c.rt.MemGetAddressRange(p)
	switch {
	case err == nil:
		if off := uintptr(p - base); off%WindowAlign != 0 {
			return result.Errorf(result.InvalidArgument, "window register: buffer %#x is at offset %d of its allocation, not a multiple of %d", p, off, WindowAlign)
		}
		if uintptr(p)+size > uintptr(base)+asize {
			return result.Errorf(result.InvalidArgument, "window register: [%#x, +%d) runs past its allocation [%#x, +%d)", p, size, base, asize)
		}
	case c.rt.Name() == "host":
		// Plain host memory of this process: the address itself must align.
		if uintptr(p)%WindowAlign != 0 {
			return result.Errorf(result.InvalidArgument, "window register: buffer %#x is not %d-byte aligned", p, WindowAlign)
		}
	default:
		return result.Errorf(result.InvalidArgument, "window register: %#x is not device memory of this runtime (%v); allocate it with ncclMemAlloc", p, err)
	}
	for _, o := range c.wins {
		if uintptr(p) < uintptr(o.base)+o.size && uintptr(o.base) < uintptr(p)+size {
			return result.Errorf(result.InvalidArgument, "window register: [%#x, +%d) overlaps the window [%#x, +%d) already registered on this communicator", p, size, o.base, o.size)
		}
	}
	return nil
}

func (c *Comm) insertLocked(w *Window) {
	i := sort.Search(len(c.wins), func(i int) bool { return c.wins[i].base > w.base })
	c.wins = append(c.wins, nil)
	copy(c.wins[i+1:], c.wins[i:])
	c.wins[i] = w
}

func (c *Comm) removeLocked(w *Window) bool {
	for i, o := range c.wins {
		if o == w {
			c.wins = append(c.wins[:i], c.wins[i+1:]...)
			return true
		}
	}
	return false
}

// register runs the collective registration of w. Every rank takes part
// in the exchange even when its own checks failed, and all ranks fail
// together, so a refusal on one rank never leaves the others waiting.
func (c *Comm) register(w *Window) error {
	c.winMu.Lock()
	localErr := c.checkLocked(w.base, w.size)
	if localErr == nil {
		c.insertLocked(w)
	}
	c.winMu.Unlock()
	if c.node != nil {
		return c.registerNode(w, localErr)
	}

	var msg [17]byte
	binary.LittleEndian.PutUint64(msg[0:], uint64(w.base))
	binary.LittleEndian.PutUint64(msg[8:], uint64(w.size))
	if localErr == nil {
		msg[16] = 1
	}
	all, err := c.boot.AllGather(msg[:])
	refused := -1
	if err == nil {
		for r, m := range all {
			if len(m) != len(msg) || m[16] == 0 {
				refused = r
				break
			}
		}
	}
	if err != nil || localErr != nil || refused >= 0 {
		if localErr == nil {
			c.winMu.Lock()
			c.removeLocked(w)
			c.winMu.Unlock()
		}
		switch {
		case localErr != nil:
			return localErr
		case err != nil:
			return err
		default:
			return result.Errorf(result.InvalidArgument, "window register: rank %d refused its buffer", refused)
		}
	}
	sizes := make([]uintptr, len(all))
	for r, m := range all {
		sizes[r] = uintptr(binary.LittleEndian.Uint64(m[8:]))
	}
	reach, err := reachOf(w, sizes)
	if err != nil {
		c.winMu.Lock()
		c.removeLocked(w)
		c.winMu.Unlock()
		return err
	}
	w.peers = make([]hip.DevicePtr, len(all))
	for r, m := range all {
		w.peers[r] = hip.DevicePtr(binary.LittleEndian.Uint64(m[0:]))
	}
	w.reach = reach
	w.live.Store(true)
	return nil
}

func (c *Comm) deregister(w *Window) error {
	c.winMu.Lock()
	defer c.winMu.Unlock()
	if w.dead || !w.live.Load() || !c.removeLocked(w) {
		return result.Errorf(result.InvalidArgument, "window deregister: window [%#x, +%d) is not registered on this communicator", w.base, w.size)
	}
	w.dead = true
	w.live.Store(false)
	c.unmapWindow(w)
	return nil
}

// FindWindow implements ce.Comm: the symmetric window (or internal one)
// holding [p, p+n). A window without NCCL_WIN_COLL_SYMMETRIC is not
// returned: its buffers are staged. It allocates nothing (the engine calls
// it on the launch path).
func (c *Comm) FindWindow(p hip.DevicePtr, n uintptr) (ce.Window, bool) {
	c.winMu.RLock()
	defer c.winMu.RUnlock()
	lo, hi := 0, len(c.wins)
	for lo < hi { // first window with base > p
		m := int(uint(lo+hi) >> 1)
		if c.wins[m].base > p {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return nil, false
	}
	w := c.wins[lo-1]
	if !w.live.Load() || uintptr(p)+n > uintptr(w.base)+w.reach || uintptr(p)+n < uintptr(p) {
		return nil, false
	}
	if !w.internal && w.flags&WinCollSymmetric == 0 {
		return nil, false
	}
	return w, true
}

// Register is ncclCommRegister: bookkeeping only (copy engines need no
// registration); the handle is an opaque nonzero number. In forward mode
// the buffer is registered with the real communicator too (local in both).
func (c *Comm) Register(p hip.DevicePtr, size uintptr) (uintptr, error) {
	if err := c.usable("ncclCommRegister"); err != nil {
		return 0, err
	}
	if p == 0 && size != 0 {
		return 0, result.Errorf(result.InvalidArgument, "ncclCommRegister: NULL buffer")
	}
	var real forward.Handle
	if h := c.Real(); h != 0 {
		var err error
		if real, err = c.lib.Register(forward.Handle(h), uintptr(p), size); err != nil {
			return 0, err
		}
	}
	c.winMu.Lock()
	defer c.winMu.Unlock()
	c.nextReg++
	h := c.nextReg
	c.regs[h] = regEntry{p: uintptr(p), size: size, real: real}
	return h, nil
}

// Deregister is ncclCommDeregister: the real library's registration
// first.
func (c *Comm) Deregister(h uintptr) error {
	c.winMu.Lock()
	e, ok := c.regs[h]
	delete(c.regs, h)
	c.winMu.Unlock()
	if !ok {
		return result.Errorf(result.InvalidArgument, "ncclCommDeregister: unknown handle %#x", h)
	}
	if rc := c.Real(); rc != 0 && e.real != 0 {
		return c.lib.Deregister(forward.Handle(rc), e.real)
	}
	return nil
}

// RealWhy says why w has no real window although its communicator has a
// real one ("" otherwise).
func (w *Window) RealWhy() string { return w.realWhy }

// registerUser is the registration of a user window: cecoll's (collective,
// all ranks succeed or fail together), then, in forward mode, the real
// library's, whose outcome is agreed too: where it failed on any rank,
// every rank drops its real window and the window is cecoll's alone
// (forwarded calls on it are refused with the reason). A communicator on
// several hosts registers with the real library only.
func (c *Comm) registerUser(w *Window) error {
	if !c.spans {
		if err := c.register(w); err != nil {
			return err
		}
	}
	h := c.Real()
	if h == 0 {
		return nil
	}
	rw, rerr := c.lib.WindowRegister(forward.Handle(h), uintptr(w.base), w.size, w.flags)
	bad, text, err := c.agree(rerr)
	if err == nil && bad >= 0 {
		err = result.Errorf(result.InvalidUsage, "the real library (%s) refused the window on rank %d: %s", c.lib.Name(), bad, text)
	}
	if err == nil {
		w.setReal(rw)
		if c.spans {
			w.live.Store(true)
		}
		return nil
	}
	if rw != 0 {
		c.lib.WindowDeregister(forward.Handle(h), rw)
	}
	if c.spans {
		return err // the real window was all there was
	}
	if result.Of(err) != result.InvalidUsage {
		c.deregister(w) // the bootstrap failed: the registration fails
		return err
	}
	w.realWhy = err.Error()
	if c.rank == 0 {
		log.Warnf("comm %#x: %s; the window is cecoll's alone (forwarded calls on it are refused)", c.w.key, w.realWhy)
	}
	return nil
}
