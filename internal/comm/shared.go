package comm

import (
	"errors"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/log"
)

// The engine's internal windows (sync flags, staging) are written by
// peers' streams. After an abort, a peer's released stream may still push
// into them once this rank has finalized, so their memory is kept until
// every rank of the communicator in this process has released its engine
// (each engine's Finalize waits for its own streams first). A world holds
// only the ranks of this process, so the count covers exactly the writers
// that use this process's mapping; a peer in another process writes
// through its own import of the memory, which this free does not unmap,
// so it needs no hold (kept simple on purpose: no cross-process count).

var _ ce.SharedMem = (*Comm)(nil)

// sharedAlloc is an internal window's memory awaiting the world's last
// engine release.
type sharedAlloc struct {
	p   hip.DevicePtr
	dev int
}

// HoldShared implements ce.SharedMem. A comm without a world (none is
// made today) holds nothing, and its memory is freed at once.
func (c *Comm) HoldShared() {
	if c.w == nil {
		return
	}
	c.w.mu.Lock()
	c.w.holds++
	c.w.mu.Unlock()
}

// ReleaseShared implements ce.SharedMem: ps join the world's pending
// frees, which run when the last hold ends, on the calling thread with
// each allocation's device current (the caller's device is restored).
func (c *Comm) ReleaseShared(ps ...hip.DevicePtr) error {
	var free []sharedAlloc
	if w := c.w; w != nil {
		w.mu.Lock()
		for _, p := range ps {
			w.pending = append(w.pending, sharedAlloc{p: p, dev: c.dev})
		}
		w.holds--
		if w.holds == 0 {
			free, w.pending = w.pending, nil
		}
		w.mu.Unlock()
	} else {
		for _, p := range ps {
			free = append(free, sharedAlloc{p: p, dev: c.dev})
		}
	}
	if len(free) == 0 {
		return nil
	}
	cur, err := c.rt.GetDevice()
	if err != nil {
		cur = c.dev
	}
	var first error
	for _, a := range free {
		err := c.rt.SetDevice(a.dev)
		if err == nil {
			err = c.rt.MemFree(a.p)
		}
		if err != nil && !errors.Is(err, hip.ErrDeinitialized) { // not when the process is exiting
			log.Warnf("rank %d: free of internal window memory %#x (device %d): %v", c.rank, a.p, a.dev, err)
			if first == nil {
				first = err
			}
		}
	}
	if err := c.rt.SetDevice(cur); err != nil && first == nil {
		first = err
	}
	return first
}
