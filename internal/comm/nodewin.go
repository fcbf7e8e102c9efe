package comm

import (
	"encoding/binary"

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
			publish(b.secret, c.rt, c.dev, allocBase)
			published = true
		}
	}
	defer func() {
		if published {
			unpublish(b.secret, allocBase)
		}
	}()

	var msg [nodeWinMsg]byte
	binary.LittleEndian.PutUint64(msg[0:], uint64(w.base))
	binary.LittleEndian.PutUint64(msg[8:], uint64(w.size))
	binary.LittleEndian.PutUint64(msg[16:], uint64(allocBase))
	binary.LittleEndian.PutUint64(msg[24:], uint64(allocSize))
	if localErr == nil {
		msg[32] = 1
	}
	all, err := c.boot.AllGather(msg[:])
	refused := -1
	if err == nil {
		for r, m := range all {
			if len(m) != nodeWinMsg || m[32] == 0 {
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
	case refused >= 0:
		return fail(result.Errorf(result.InvalidArgument, "window register: rank %d refused its buffer", refused))
	}

	peers := make([]hip.DevicePtr, len(all))
	var imports []importedMem
	var impErr error
	for r, m := range all {
		base := hip.DevicePtr(binary.LittleEndian.Uint64(m[0:]))
		if b.sameProcess(r) {
			peers[r] = base
			continue
		}
		ab := hip.DevicePtr(binary.LittleEndian.Uint64(m[16:]))
		as := uintptr(binary.LittleEndian.Uint64(m[24:]))
		fd, err := fetchFD(b.table[r].sock, b.secret, ab)
		if err != nil {
			impErr = result.Errorf(result.SystemError, "window register: fetching rank %d's allocation from pid %d: %w", r, b.table[r].pid, err)
			break
		}
		p, err := c.rt.MemImport(fd, as)
		closeFD(fd)
		if err != nil {
			impErr = result.Errorf(result.Of(err), "window register: mapping rank %d's allocation (%d bytes): %w", r, as, err)
			break
		}
		imports = append(imports, importedMem{p: p, dev: c.dev})
		peers[r] = p + (base - ab)
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
	w.peers = peers
	w.live.Store(true)
	log.Infof("rank %d: window [%#x, +%d) registered across processes; peers %#x", c.rank, w.base, w.size, peers)
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
