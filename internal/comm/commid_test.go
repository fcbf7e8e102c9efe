package comm

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/param"
	"cecoll/internal/result"
)

// freePort is a TCP port nothing listens at on host (closed again).
func freePort(t *testing.T, host string) int {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// With a root address given, every ncclGetUniqueId makes the same id,
// naming that address, and listens nowhere (rank 0's init does); the
// CECOLL_ twin wins over NCCL_COMM_ID; a bad address is an error.
func TestCommIDSameEverywhere(t *testing.T) {
	param.Reset()
	t.Cleanup(param.Reset)
	port := freePort(t, "127.0.0.1")
	t.Setenv("CECOLL_COMM_ID", "")
	t.Setenv("NCCL_COMM_ID", "127.0.0.1:"+strconv.Itoa(port))
	a, err := NewID()
	require.NoError(t, err)
	b, err := NewID()
	require.NoError(t, err)
	require.Equal(t, a, b, "the same bytes every time, in every process")
	require.True(t, a.fromCommID())
	addr, ok, err := getSockaddr(a[16:])
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, fmt.Sprintf("127.0.0.1:%d", port), addr.String())
	_, err = net.DialTimeout("tcp", addr.String(), time.Second)
	require.Error(t, err, "ncclGetUniqueId starts no listener there")
	sec := a.secret()
	require.False(t, sec.ours(), "no rank 0 of it listens in this process")

	t.Setenv("CECOLL_COMM_ID", "127.0.0.1:"+strconv.Itoa(port+1))
	c, err := NewID()
	require.NoError(t, err)
	require.True(t, c.fromCommID())
	require.NotEqual(t, a[8:16], c[8:16], "CECOLL_COMM_ID wins, with its own key")

	t.Setenv("CECOLL_COMM_ID", "")
	t.Setenv("NCCL_COMM_ID", "")
	r, err := newRandomID()
	require.NoError(t, err)
	require.False(t, r.fromCommID())
	forged := r
	copy(forged[8:16], a[8:16])
	require.False(t, forged.fromCommID(), "another address, the same key")

	for _, bad := range []string{"127.0.0.1", "localhost:0", "[::1]"} {
		t.Setenv("NCCL_COMM_ID", bad)
		_, err = NewID()
		requireCode(t, result.InvalidArgument, err)
		require.ErrorContains(t, err, "NCCL_COMM_ID")
	}
}

// The root's own listener leaves the ports given to NCCL_COMM_ID and
// CECOLL_COMM_ID free: it keeps a listener the kernel put there and takes
// the next.
func TestListenAvoiding(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	bad := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	listen := func(network, addr string) (net.Listener, error) {
		calls++
		if calls == 1 {
			return taken, nil // the kernel's unlucky first choice
		}
		return net.Listen(network, addr)
	}
	ln, err := listenAvoiding("127.0.0.1:0", []int{bad, 1}, listen)
	require.NoError(t, err)
	defer ln.Close()
	require.NotEqual(t, bad, ln.Addr().(*net.TCPAddr).Port)
	require.Equal(t, 2, calls)
	again, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", bad))
	require.NoError(t, err, "the avoided port was given back")
	again.Close()

	t.Setenv("CECOLL_COMM_ID", "localhost:7001")
	t.Setenv("NCCL_COMM_ID", "[::1]:7002")
	require.Equal(t, []int{7001, 7002}, commIDPorts())
}

// CECOLL_SOCKET_FAMILY (NCCL_SOCKET_FAMILY) picks the listener's family.
func TestSocketFamily(t *testing.T) {
	for _, tc := range []struct {
		ifname, family, want string
	}{
		{"", "", "127.0.0.1:0"},
		{"", "AF_INET", "127.0.0.1:0"},
		{"", "AF_INET6", "[::1]:0"},
		{"lo", "AF_INET6", "[::1]:0"},
		{"=lo", "AF_INET", "127.0.0.1:0"},
	} {
		t.Setenv("CECOLL_SOCKET_IFNAME", tc.ifname)
		t.Setenv("CECOLL_SOCKET_FAMILY", "")
		t.Setenv("NCCL_SOCKET_FAMILY", tc.family)
		got, err := listenAddr()
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%+v", tc)
	}
	t.Setenv("CECOLL_SOCKET_FAMILY", "AF_INET")
	require.Equal(t, "tcp4", tcpNetwork(), "the CECOLL_ twin wins")
}

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
