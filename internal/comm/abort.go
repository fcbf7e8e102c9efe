package comm

import (
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Abort is ncclCommAbort: it fails the peers' pending bootstrap waits, has
// the engine release this rank's queued flag waits so its streams drain
// (ce.Engine.Abort), then frees everything like Destroy. It never waits
// for peers. The engine's Finalize waits for this rank's last collective
// at most CECOLL_ABORT_TIMEOUT seconds (default 5); past that the CE state
// is left allocated (leaked) rather than freed under a stream that may
// still touch it.
func (c *Comm) Abort() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state() == stDestroyed {
		return nil
	}
	if c.boot != nil {
		c.boot.Abort(result.Errorf(result.RemoteError, "rank %d aborted the communicator", c.rank))
	}
	c.st.Store(int32(stAborted))
	c.engMu.Lock()
	if c.eng != nil {
		if err := c.onDevice(c.eng.Abort); err != nil {
			log.Warnf("rank %d: abort: engine: %v", c.rank, err)
		}
	}
	c.engMu.Unlock()
	c.releaseLocked()
	c.detach()
	return nil
}
