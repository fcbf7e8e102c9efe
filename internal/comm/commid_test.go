package comm

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Two processes meet at the address NCCL_COMM_ID gives, each making its
// id alone: rank 1 starts first and waits until rank 0's init listens.
// Rank 0's process is the root, which relays later exchanges (the
// barrier): it stays until rank 1 is done, as an id-making process must.
func TestMPCommID(t *testing.T) {
	watchdog(t, 90*time.Second)
	for _, tc := range []struct {
		name, host, family, role string
	}{
		{"ipv4", "127.0.0.1", "", "colls"},
		{"ipv6", "::1", "", "barrier"},
		{"hostname", "localhost", "AF_INET", "barrier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bind := tc.host
			if tc.host == "localhost" {
				bind = "127.0.0.1"
			}
			addr := net.JoinHostPort(tc.host, strconv.Itoa(freePort(t, bind)))
			env := []string{envID + "=" + commIDRole, "NCCL_COMM_ID=" + addr, "NCCL_SOCKET_FAMILY=" + tc.family}
			done := filepath.Join(t.TempDir(), "rank1.done")
			c1 := startChild(t, ID{}, 2, "1", tc.role, append(env, envDone+"="+done)...)
			time.Sleep(300 * time.Millisecond)
			c0 := startChild(t, ID{}, 2, "0", tc.role, append(env, envAwait+"="+done)...)
			requireChildOK(t, []*child{c0, c1}, 60*time.Second)
		})
	}
}
