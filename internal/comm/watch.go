package comm

import (
	"runtime"
	"sync"
	"time"

	"cecoll/internal/param"
	"cecoll/internal/result"
)

// The watchdog: one goroutine for every communicator of the process, one
// process or several. It polls each engine's progress (an event query and
// a counter, no lock a call may hold). When a rank's last collective or
// graph replay (cecollGraphLaunch) stays pending, with nothing new issued,
// for CECOLL_TIMEOUT seconds (default 600), a peer has stopped responding:
// the communicator fails with an asynchronous ncclRemoteError, which
// releases its queued waits and tells its peers (Comm.fail). No rank then hangs forever on a silent
// or dead peer, in any layout.

var watched = struct {
	sync.Mutex
	comms   map[*Comm]*progress
	running bool
}{comms: make(map[*Comm]*progress)}

// progress is what the watchdog last saw of a communicator.
type progress struct {
	issued uint64
	since  time.Time
}

// watchAdd starts watching c (its creation succeeded).
func watchAdd(c *Comm) {
	watched.Lock()
	defer watched.Unlock()
	watched.comms[c] = &progress{since: time.Now()}
	if !watched.running {
		watched.running = true
		go watchLoop(param.Timeout.Get())
	}
}

// watchRemove stops watching c (finalize, destroy, abort, failure).
func watchRemove(c *Comm) {
	watched.Lock()
	delete(watched.comms, c)
	watched.Unlock()
}

// watchLoop ends once no communicator is left; watchAdd starts another.
func watchLoop(limit time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t := time.NewTicker(max(min(time.Second, limit/10), time.Millisecond))
	defer t.Stop()
	var stuck []*Comm
	for range t.C {
		now := time.Now()
		watched.Lock()
		if len(watched.comms) == 0 {
			watched.running = false
			watched.Unlock()
			return
		}
		stuck = stuck[:0]
		for c, p := range watched.comms {
			eng := c.engine()
			if eng == nil {
				continue
			}
			issued := eng.Issued()
			if issued != p.issued || !eng.Pending() {
				p.issued, p.since = issued, now
				continue
			}
			if now.Sub(p.since) >= limit {
				stuck = append(stuck, c)
				delete(watched.comms, c)
			}
		}
		watched.Unlock()
		for _, c := range stuck {
			c.fail(result.Errorf(result.RemoteError, "rank %d: its last work on the copy engines (collective #%d or a graph replay after it) made no progress for %v (CECOLL_TIMEOUT): a peer stopped responding",
				c.rank, c.seq.Load(), limit))
		}
	}
}
