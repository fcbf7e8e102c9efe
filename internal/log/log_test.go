package log

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/param"
)

// Once the log is set up, a bad value of any variable is a WARN line in
// the log's file, once.
func TestParamWarningsReachTheLog(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cecoll-%p.log")
	t.Setenv("CECOLL_DEBUG", "info")
	t.Setenv("CECOLL_DEBUG_FILE", file)
	t.Setenv("CECOLL_TIMEOUT", "inf")
	param.Reset()
	t.Cleanup(param.Reset)
	Setup()
	require.True(t, Enabled(LevelInfo))
	require.False(t, Enabled(LevelTrace))
	for range 3 {
		require.Equal(t, param.Timeout.Default(), param.Timeout.Get())
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), fmt.Sprintf("cecoll-%d.log", os.Getpid())))
	require.NoError(t, err)
	require.Regexp(t, `^\S+:\d+:\d+ cecoll WARN CECOLL_TIMEOUT="inf": want seconds from 0.001 to 1e6; using the default 600\n$`, string(b))
}
