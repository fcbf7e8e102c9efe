// Package testutil holds what the tests of several packages share; only
// tests import it.
package testutil

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/result"
)

// Watchdog fails the whole test binary, with every goroutine's stack, when
// the test still runs after d: a wait bug then reads as a failure, not a
// stuck CI.
func Watchdog(tb testing.TB, d time.Duration) {
	tb.Helper()
	name := tb.Name()
	timer := time.AfterFunc(d, func() {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "watchdog: %s still running after %v\n%s\n", name, d, buf[:n])
		panic("watchdog: " + name + " hung")
	})
	tb.Cleanup(func() { timer.Stop() })
}

// RequireCode requires err to be an error of NCCL result class want.
func RequireCode(tb testing.TB, want result.Code, err error) {
	tb.Helper()
	require.Error(tb, err)
	require.Equal(tb, want, result.Of(err), "error: %v", err)
}

// FreePort is a TCP port nothing listens at on host (closed again).
func FreePort(tb testing.TB, host string) int {
	tb.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	require.NoError(tb, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
