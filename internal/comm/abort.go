package comm

import (
	"os"
	"runtime"
	"strconv"
	"time"

	"cecoll/internal/log"
)

// drainTimeout is how long abort waits for the device to drain after
// the engine released its waits; CECOLL_ABORT_TIMEOUT (seconds) overrides it.
func drainTimeout() time.Duration {
	if v := os.Getenv("CECOLL_ABORT_TIMEOUT"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			return time.Duration(s * float64(time.Second))
		}
	}
	return 5 * time.Second
}

// aborter is what an engine offers to release its streams' pending flag
// waits on abort. Only the engine knows the values its waits expect (they
// are equality waits on sequence numbers), so without it an aborted
// communicator's queued collectives stay blocked and its CE state is
// leaked rather than freed under them.
type aborter interface {
	Abort() error
}

// drained reports whether the comm's device finished its queued work
// within d (a goroutine keeps waiting after a timeout; it ends when the
// device drains).
func (c *Comm) drained(d time.Duration) bool {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := c.rt.SetDevice(c.dev); err != nil {
			done <- err
			return
		}
		done <- c.rt.DeviceSynchronize()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			log.Warnf("rank %d: abort: device synchronize: %v", c.rank, err)
			return false
		}
		return true
	case <-t.C:
		return false
	}
}
