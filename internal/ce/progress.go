package ce

import (
	"errors"

	"cecoll/internal/hip"
)

// Pending reports whether this rank's last collective is still queued or
// running (its ordering event not yet complete). internal/comm polls it to
// bound how long a collective may stay pending (CECOLL_TIMEOUT); it is one
// event query, never a wait.
func (e *Engine) Pending() bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.live || e.aborted || !e.evValid {
		return false
	}
	if err := e.rt.SetDevice(e.dev); err != nil {
		return false
	}
	return errors.Is(e.rt.EventQuery(e.ev), hip.ErrNotReady)
}
