package comm

import (
	"encoding/binary"
	"fmt"
	"time"

	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Windows across processes: every rank publishes its window's allocation
// (fdpass.go) and sends base, size, allocation base and size through the
// bootstrap; each rank imports the allocations of ranks in other processes
// (ranks of its own process keep plain pointers) and adds the window's
// offset inside its allocation. A second exchange confirms every import,
// so the exporters keep their allocations published until all peers hold
// their own mapping, and all ranks succeed or fail together.
//
// A peer's numbers are checked before use: its window must lie inside the
// allocation it claims (winMsg.fits), the fd it passes must be a sealed
// memfd at least that long (the runtime's MemImport), and copies reach at
// most the smallest window of all ranks (Window.reach), so no peer can
// make this process write outside what it mapped.

// importedMem is one peer allocation mapped into this process.
type importedMem struct {
	p   hip.DevicePtr
	dev int
}

// remotePeers reports whether some rank of c lives in another process.
func (c *Comm) remotePeers() bool {
	if c.node == nil {
		return false
	}
	for r := range c.size {
		if !c.node.boot.sameProcess(r) {
			return true
		}
	}
	return false
}

const nodeWinMsg = 33

// winMsg is one rank's part of the exchange.
type winMsg struct {
	base, allocBase hip.DevicePtr
	size, allocSize uintptr
	ok              bool // its local checks passed
}

func (m winMsg) encode() []byte {
	b := make([]byte, nodeWinMsg)
	binary.LittleEndian.PutUint64(b[0:], uint64(m.base))
	binary.LittleEndian.PutUint64(b[8:], uint64(m.size))
	binary.LittleEndian.PutUint64(b[16:], uint64(m.allocBase))
	binary.LittleEndian.PutUint64(b[24:], uint64(m.allocSize))
	if m.ok {
		b[32] = 1
	}
	return b
}

func parseWinMsg(b []byte) (winMsg, error) {
	if len(b) != nodeWinMsg {
		return winMsg{}, fmt.Errorf("a window message of %d bytes, want %d", len(b), nodeWinMsg)
	}
	if b[32] > 1 {
		return winMsg{}, fmt.Errorf("a window message with flag %d", b[32])
	}
	return winMsg{
		base:      hip.DevicePtr(binary.LittleEndian.Uint64(b[0:])),
		size:      uintptr(binary.LittleEndian.Uint64(b[8:])),
		allocBase: hip.DevicePtr(binary.LittleEndian.Uint64(b[16:])),
		allocSize: uintptr(binary.LittleEndian.Uint64(b[24:])),
		ok:        b[32] == 1,
	}, nil
}

// fits checks a peer's window against the allocation it claims: the
// window lies inside it and nothing wraps.
func (m winMsg) fits() error {
	switch {
	case m.size == 0 || m.allocSize == 0:
		return fmt.Errorf("window of %d bytes in an allocation of %d", m.size, m.allocSize)
	case m.base < m.allocBase || uintptr(m.base-m.allocBase) > m.allocSize:
		return fmt.Errorf("window base %#x outside its allocation [%#x, +%d)", m.base, m.allocBase, m.allocSize)
	case m.size > m.allocSize-uintptr(m.base-m.allocBase):
		return fmt.Errorf("window [%#x, +%d) runs past its allocation [%#x, +%d)", m.base, m.size, m.allocBase, m.allocSize)
	}
	return nil
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

// registerNode is register's exchange for a communicator whose ranks may
// span processes; localErr is the result of the local checks (w was
// inserted when nil).
func (c *Comm) registerNode(w *Window, localErr error) error {
	b := c.node.boot
	if err := b.connect(); err != nil { // the table says who is local
		localErr = firstNonNil(localErr, err)
	}
	var allocBase hip.DevicePtr
	var allocSize uintptr
	published := false
	if localErr == nil && c.remotePeers() {
		base, size, err := c.rt.MemGetAddressRange(w.base)
		if err != nil {
			localErr = result.Errorf(result.InvalidArgument, "window register: buffer %#x is not ncclMemAlloc memory, so ranks in other processes cannot map it (%v); register ncclMemAlloc buffers, or leave the buffer unregistered (it is staged)", w.base, err)
		} else {
			allocBase, allocSize = base, size
			publish(b.sec, c.rt, c.dev, allocBase)
			published = true
		}
	}
	defer func() {
		if published {
			unpublish(b.sec.key, allocBase)
		}
	}()

	mine := winMsg{base: w.base, size: w.size, allocBase: allocBase, allocSize: allocSize, ok: localErr == nil}
	all, err := c.boot.AllGather(mine.encode())
	var msgs []winMsg
	refused, why := -1, error(nil)
	if err == nil {
		msgs = make([]winMsg, len(all))
		for r, raw := range all {
			if msgs[r], why = parseWinMsg(raw); why != nil || !msgs[r].ok {
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
	sizes := make([]uintptr, len(msgs))
	var impErr error
	for r, m := range msgs {
		sizes[r] = m.size
		if err := m.fits(); err != nil && !b.sameProcess(r) && impErr == nil {
			impErr = result.Errorf(result.RemoteError, "window register: rank %d (pid %d): %v", r, b.table[r].pid, err)
		}
	}
	reach, err := reachOf(w, sizes)
	impErr = firstNonNil(impErr, err)

	peers := make([]hip.DevicePtr, len(msgs))
	var imports []importedMem
	deadline := time.Now().Add(b.timeout)
	for r, m := range msgs {
		if impErr != nil {
			break
		}
		if b.sameProcess(r) {
			peers[r] = m.base
			continue
		}
		fd, err := fetchFD(b.table[r].sock, b.sec, m.allocBase, deadline)
		if err != nil {
			impErr = result.Errorf(result.SystemError, "window register: fetching rank %d's allocation from pid %d: %w", r, b.table[r].pid, err)
			break
		}
		p, err := c.rt.MemImport(fd, m.allocSize)
		closeFD(fd)
		if err != nil {
			impErr = result.Errorf(result.Of(err), "window register: mapping rank %d's allocation (%d bytes, from pid %d): %w", r, m.allocSize, b.table[r].pid, err)
			break
		}
		imports = append(imports, importedMem{p: p, dev: c.dev})
		peers[r] = p + (m.base - m.allocBase)
	}
	var ok [1]byte
	if impErr == nil {
		ok[0] = 1
	}
	conf, err := c.boot.AllGather(ok[:])
	if err == nil && impErr == nil {
		for r, m := range conf {
			if len(m) != 1 || m[0] != 1 {
				err = result.Errorf(result.SystemError, "window register: rank %d could not map its peers' buffers", r)
				break
			}
		}
	}
	if err := firstNonNil(impErr, err); err != nil {
		c.unmap(imports)
		return fail(err)
	}
	c.node.mu.Lock()
	if len(imports) > 0 {
		c.node.imports[w] = imports
	}
	c.node.winIndex[w] = c.node.nextWin
	c.node.nextWin++
	c.node.mu.Unlock()
	w.peers, w.reach = peers, reach
	w.live.Store(true)
	log.Infof(log.Reg, "rank %d: window [%#x, +%d) registered across processes (reach %d); peers %#x", c.rank, w.base, w.size, reach, peers)
	return nil
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
