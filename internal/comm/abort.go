package comm

import (
	"cecoll/internal/result"
)

// Abort is ncclCommAbort: it releases this rank's queued flag waits (the
// engine's streams drain; the data of the collectives they belonged to is
// undefined), fails the peers: those of other processes through the
// bootstrap and those of this process directly (ncclRemoteError), then
// frees everything like Destroy. It never waits for peers, and takes no
// lock that a call waiting for room in a stream's queue holds. The engine
// frees its state once its streams drained, within CECOLL_ABORT_TIMEOUT
// seconds (default 5), or leaves it allocated (leaked) rather than free
// it under a stream that may still touch it. In forward mode the real
// communicator is aborted first; its error is returned, cecoll's side is
// aborted either way.
func (c *Comm) Abort() error {
	var rerr error
	if h := c.takeReal(); h != 0 {
		rerr = c.lib.Abort(h)
	}
	if eng := c.engine(); eng != nil {
		eng.Abort() // first, without c.mu: a destroy in progress may hold it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state() == stDestroyed {
		return rerr
	}
	err := result.Errorf(result.RemoteError, "rank %d aborted the communicator", c.rank)
	if c.boot != nil {
		c.boot.Abort(err)
	}
	c.st.Store(int32(stAborted))
	c.fail(err)
	c.releaseLocked()
	c.detach()
	return rerr
}
