package comm

import (
	"sort"
	"sync/atomic"
	"time"

	"cecoll/internal/bootstrap"
	"cecoll/internal/ce"
	"cecoll/internal/forward"
	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/peermem"
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

// register runs the collective registration of w, one path for every
// layout. Every rank takes part in the exchange even when its own checks
// failed, and all ranks fail together, so a refusal on one rank never
// leaves the others waiting. Each rank publishes its window's allocation
// where some rank lives in another process (internal/peermem) and sends
// its claim (base, size, allocation); each maps the allocations of the
// ranks of other processes (those of its own keep plain pointers) and adds
// the window's offset inside its allocation. Across processes a second
// exchange confirms every mapping, so the exporters keep their
// allocations published until all peers hold their own, and all ranks
// succeed or fail together.
//
// A peer's numbers are checked before use: its window must lie inside the
// allocation it claims (peermem.Claim.Fits), the fd it passes must be a
// sealed memfd at least that long (the runtime's MemImport), and copies
// reach at most the smallest window of all ranks (Window.reach), so no
// peer can make this process write outside what it mapped.
func (c *Comm) register(w *Window) error {
	c.winMu.Lock()
	localErr := c.checkLocked(w.base, w.size)
	if localErr == nil {
		c.insertLocked(w)
	}
	c.winMu.Unlock()
	if c.node != nil {
		if err := c.node.boot.Connect(); err != nil { // the table says who is local
			localErr = firstNonNil(localErr, err)
		}
	}
	mine := peermem.Claim{Base: w.base, Size: w.size}
	var sec bootstrap.Secret
	if localErr == nil && c.remotePeers() {
		base, size, err := c.rt.MemGetAddressRange(w.base)
		if err != nil {
			localErr = result.Errorf(result.InvalidArgument, "window register: buffer %#x is not ncclMemAlloc memory, so ranks in other processes cannot map it (%v); register ncclMemAlloc buffers, or leave the buffer unregistered (it is staged)", w.base, err)
		} else {
			mine.AllocBase, mine.AllocSize = base, size
			sec = c.node.boot.Secret()
			peermem.Publish(sec, c.rt, c.dev, base)
			defer peermem.Unpublish(sec.Key, base)
		}
	}
	mine.OK = localErr == nil

	all, err := c.boot.AllGather(mine.Encode())
	var claims []peermem.Claim
	refused, why := -1, error(nil)
	if err == nil {
		claims = make([]peermem.Claim, len(all))
		for r, raw := range all {
			if claims[r], why = peermem.ParseClaim(raw); why != nil || !claims[r].OK {
				refused = r
				break
			}
		}
	}
	fail := func(e error) error {
		if localErr == nil {
			c.winMu.Lock()
			c.removeLocked(w)
			c.winMu.Unlock()
		}
		return e
	}
	switch {
	case localErr != nil:
		return fail(localErr)
	case err != nil:
		return fail(err)
	case why != nil:
		return fail(result.Errorf(result.RemoteError, "window register: rank %d: %v", refused, why))
	case refused >= 0:
		return fail(result.Errorf(result.InvalidArgument, "window register: rank %d refused its buffer", refused))
	}
	peers, imports, err := c.mapPeers(w, claims)
	if c.node != nil {
		var ok [1]byte
		if err == nil {
			ok[0] = 1
		}
		conf, cerr := c.boot.AllGather(ok[:])
		if err == nil && cerr == nil {
			for r, m := range conf {
				if len(m) != 1 || m[0] != 1 {
					cerr = result.Errorf(result.SystemError, "window register: rank %d could not map its peers' buffers", r)
					break
				}
			}
		}
		err = firstNonNil(err, cerr)
	}
	if err != nil {
		c.unmap(imports)
		return fail(err)
	}
	if c.node != nil {
		c.node.mu.Lock()
		if len(imports) > 0 {
			c.node.imports[w] = imports
		}
		c.node.winIndex[w] = c.node.nextWin
		c.node.nextWin++
		c.node.mu.Unlock()
		log.Infof(log.Reg, "rank %d: window [%#x, +%d) registered across processes (reach %d); peers %#x", c.rank, w.base, w.size, w.reach, peers)
	}
	w.live.Store(true)
	return nil
}

// mapPeers sets w's peer bases and reach from every rank's claim: a rank
// of this process's base as it is, another's through the mapping of its
// allocation (the returned imports, unmapped by the caller on failure).
func (c *Comm) mapPeers(w *Window, claims []peermem.Claim) ([]hip.DevicePtr, []importedMem, error) {
	sizes := make([]uintptr, len(claims))
	for r, m := range claims {
		sizes[r] = m.Size
		if err := m.Fits(); err != nil && !c.sameProcess(r) {
			return nil, nil, result.Errorf(result.RemoteError, "window register: rank %d (pid %d): %v", r, c.node.boot.Peer(r).Pid, err)
		}
	}
	reach, err := reachOf(w, sizes)
	if err != nil {
		return nil, nil, err
	}
	peers := make([]hip.DevicePtr, len(claims))
	var imports []importedMem
	for r, m := range claims {
		if c.sameProcess(r) {
			peers[r] = m.Base
			continue
		}
		peer := c.node.boot.Peer(r)
		p, err := peermem.Map(c.rt, peer.Sock, c.node.boot.Secret(), m, time.Now().Add(c.node.boot.Wait()))
		if err != nil {
			return nil, imports, result.Errorf(result.Of(err), "window register: rank %d (pid %d): %w", r, peer.Pid, err)
		}
		imports = append(imports, importedMem{p: p, dev: c.dev})
		peers[r] = p + (m.Base - m.AllocBase)
	}
	w.peers, w.reach = peers, reach
	return peers, imports, nil
}

// importedMem is one peer allocation mapped into this process.
type importedMem struct {
	p   hip.DevicePtr
	dev int
}

// reachOf is how far copies may go into every rank's window: the smallest
// size. The engine's own windows are sized alike on every rank (it
// addresses a peer's with its own sizes, and the ranks agreed on
// CECOLL_STAGING_BYTES at init: agreeEngine), so there a difference is a
// peer breaking the protocol, refused before any copy could reach past
// what it mapped.
func reachOf(w *Window, sizes []uintptr) (uintptr, error) {
	reach := w.size
	for r, s := range sizes {
		if w.internal && s != w.size {
			return 0, result.Errorf(result.RemoteError, "window register: rank %d's internal window is %d bytes, this rank's %d, although the ranks agreed on the engine's settings at init", r, s, w.size)
		}
		reach = min(reach, s)
	}
	return reach, nil
}

// unmapWindow releases w's imports of peer memory (deregistration).
func (c *Comm) unmapWindow(w *Window) {
	if c.node == nil {
		return
	}
	c.node.mu.Lock()
	imps := c.node.imports[w]
	delete(c.node.imports, w)
	delete(c.node.winIndex, w)
	c.node.mu.Unlock()
	c.unmap(imps)
}

func (c *Comm) unmap(imps []importedMem) {
	if len(imps) == 0 {
		return
	}
	err := c.onDevice(func() error {
		for _, m := range imps {
			if err := c.rt.MemFree(m.p); err != nil {
				log.Warnf("rank %d: unmapping a peer's window memory %#x: %v", c.rank, m.p, err)
			}
		}
		return nil
	})
	if err != nil {
		log.Warnf("rank %d: unmapping peers' window memory: %v", c.rank, err)
	}
}

func firstNonNil(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
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
