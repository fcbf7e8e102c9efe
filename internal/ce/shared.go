package ce

import "cecoll/internal/hip"

// SharedMem is an optional extension of Comm, for ranks that share this
// process's address space. After Abort a rank's released stream may still
// push into a peer's internal windows (staging, sync flags) while that
// peer has already finalized; freeing them at the peer's Finalize would
// leave the stream writing into freed memory. A Comm that implements
// SharedMem keeps that memory until the last engine of the communicator in
// this process has released its state (each engine's Finalize first waits
// for its own streams). Across processes a peer writes through its own
// import of the memory, which the exporter's free does not unmap, so a
// multi-process communicator need not implement it.
type SharedMem interface {
	// HoldShared records that this rank may write into its peers'
	// internal windows until its ReleaseShared.
	HoldShared()
	// ReleaseShared ends this rank's hold and takes over ps, this rank's
	// internal window memory (from Runtime().MemAlloc on Device(), already
	// deregistered): the communicator frees it once no rank holds any
	// more, and reports the first error of any free it made now.
	ReleaseShared(ps ...hip.DevicePtr) error
}

// holdShared starts the engine's hold on its peers' internal windows, when
// its communicator keeps them (SharedMem).
func (e *Engine) holdShared() {
	if sm, ok := e.c.(SharedMem); ok && !e.held {
		sm.HoldShared()
		e.held = true
	}
}

// freeShared frees the memory behind the internal windows, or hands it
// to the communicator with the engine's hold (see SharedMem).
func (e *Engine) freeShared(ps ...*hip.DevicePtr) error {
	var first error
	if e.held {
		mem := make([]hip.DevicePtr, 0, len(ps))
		for _, p := range ps {
			if *p != 0 {
				mem = append(mem, *p)
				*p = 0
			}
		}
		e.held = false
		return e.c.(SharedMem).ReleaseShared(mem...)
	}
	for _, p := range ps {
		if *p != 0 {
			if err := e.rt.MemFree(*p); err != nil && first == nil {
				first = err
			}
			*p = 0
		}
	}
	return first
}
