package amd

import (
	"testing"
	"time"

	"cecoll/internal/hip/hiptest"
)

// TestConformance runs the shared hip.Runtime suite on an AMD GPU; it
// skips where libamdhip64 does not load or sees no device.
func TestConformance(t *testing.T) {
	r, err := Open()
	if err != nil {
		t.Skipf("no AMD GPU here: %v", err)
	}
	hiptest.Run(t, r, hiptest.Options{CrossProcess: true, Timeout: 60 * time.Second})
}
