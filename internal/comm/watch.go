package comm

import (
	"runtime"
	"time"

	"cecoll/internal/param"
	"cecoll/internal/result"
)

// The progress watcher of a multi-process communicator: a goroutine that
// polls (one event query per tick) whether the rank's last collective is
// still pending. When it stays pending, with no new collective issued, for
// CECOLL_TIMEOUT seconds (default 600), a peer has stopped responding: the
// communicator fails with an asynchronous ncclRemoteError, its peers are
// told through the bootstrap, and the engine is aborted so its queued
// waits are released. No process then hangs forever on a silent peer.

func collTimeout() time.Duration { return param.Timeout.Get() }

// pender is the engine's progress probe (ce.Engine.Pending).
type pender interface{ Pending() bool }

func (c *Comm) startWatch(stop <-chan struct{}) {
	limit := collTimeout()
	tick := min(time.Second, limit/10)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t := time.NewTicker(tick)
		defer t.Stop()
		var since time.Time
		var seq uint64
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			pending := false
			if c.engMu.TryLock() { // busy (launch, finalize): skip this tick
				if p, ok := c.eng.(pender); ok {
					pending = p.Pending()
				}
				c.engMu.Unlock()
			}
			now, cur := time.Now(), c.seq.Load()
			if !pending || cur != seq {
				since, seq = now, cur
				continue
			}
			if now.Sub(since) < limit {
				continue
			}
			err := result.Errorf(result.RemoteError, "collective #%d of rank %d made no progress for %v (CECOLL_TIMEOUT): a peer stopped responding", cur, c.rank, limit)
			c.node.boot.Abort(err)
			c.remoteFailed(err)
			return
		}
	}()
}
