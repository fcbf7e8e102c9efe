package nvidia

import (
	"os"
	"testing"
	"time"

	"cecoll/internal/hip"
	"cecoll/internal/hip/hiptest"
)

// TestMain lets the conformance suite re-execute this binary as the child
// of its cross-process test.
func TestMain(m *testing.M) {
	hiptest.RunChildIfRequested(func() (hip.Runtime, error) {
		r, err := Open()
		if err != nil {
			return nil, err
		}
		return r, nil
	})
	os.Exit(m.Run())
}

// TestConformance runs the shared hip.Runtime suite on the GPU.
func TestConformance(t *testing.T) {
	r, err := Open()
	if err != nil {
		t.Skipf("no NVIDIA GPU here: %v", err)
	}
	hiptest.Run(t, r, hiptest.Options{CrossProcess: true, Timeout: 30 * time.Second})
}
