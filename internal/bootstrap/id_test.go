package bootstrap

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/param"
	"cecoll/internal/result"
)

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
	require.True(t, a.FromCommID())
	addr, ok, err := getSockaddr(a[16:])
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, fmt.Sprintf("127.0.0.1:%d", port), addr.String())
	_, err = net.DialTimeout("tcp", addr.String(), time.Second)
	require.Error(t, err, "ncclGetUniqueId starts no listener there")
	sec := a.Secret()
	require.False(t, sec.ours(), "no rank 0 of it listens in this process")

	t.Setenv("CECOLL_COMM_ID", "127.0.0.1:"+strconv.Itoa(port+1))
	c, err := NewID()
	require.NoError(t, err)
	require.True(t, c.FromCommID())
	require.NotEqual(t, a[8:16], c[8:16], "CECOLL_COMM_ID wins, with its own key")

	t.Setenv("CECOLL_COMM_ID", "")
	t.Setenv("NCCL_COMM_ID", "")
	r, err := NewRandomID()
	require.NoError(t, err)
	require.False(t, r.FromCommID())
	forged := r
	copy(forged[8:16], a[8:16])
	require.False(t, forged.FromCommID(), "another address, the same key")

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

// A derived id (ncclCommShrink) proves itself through its root-made
// ancestor: its hello passes at the root, a shrink of a shrink too, and a
// derived key that does not follow from the parent's, or a parent the
// root did not make, does not.
func TestDerivedIDProof(t *testing.T) {
	id, err := NewID()
	require.NoError(t, err)
	hi := func(id ID) *hello {
		h := &hello{sec: id.Secret()}
		h.parent, h.dtag = id.Derivation()
		back, err := parseHello(h.encode())
		require.NoError(t, err)
		return &back
	}
	require.True(t, hi(id).ours())
	kid := DerivedID(&id, 7)
	require.NotEqual(t, id[8:16], kid[8:16])
	require.True(t, hi(kid).ours())
	grandkid := DerivedID(&kid, 9)
	require.True(t, hi(grandkid).ours(), "a shrink of a shrink")
	require.NotEqual(t, kid[8:16], grandkid[8:16])
	forged := hi(kid)
	forged.dtag++
	require.False(t, forged.ours(), "a key that does not follow from the parent's")
	other := id
	other[8]++ // a parent the root did not make
	require.False(t, hi(DerivedID(&other, 7)).ours())
}

// The id's layout is what C programs read: magic, key, then a Linux
// struct sockaddr_in of the root listener (family little-endian, port
// big-endian), loopback by default, and the secret tag at 48.
func TestIDLayout(t *testing.T) {
	id, err := NewID()
	require.NoError(t, err)
	require.Equal(t, "cecollID", string(id[0:8]))
	require.Equal(t, []byte{afInet, 0}, id[16:18])
	ln, err := startRoot()
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.Equal(t, []byte{byte(port >> 8), byte(port)}, id[18:20])
	require.Equal(t, []byte{127, 0, 0, 1}, id[20:24])
	require.Equal(t, make([]byte, tagOff-24), id[24:tagOff])
	sec := id.Secret()
	require.Equal(t, tagOf(sec.Key), sec.Tag)
	require.NotEqual(t, [TagBytes]byte{}, sec.Tag)
	require.True(t, sec.ours())
	require.Equal(t, make([]byte, IDBytes-tagOff-TagBytes), id[tagOff+TagBytes:])
	other, err := NewID()
	require.NoError(t, err)
	require.NotEqual(t, id[8:16], other[8:16], "a fresh key per id")
	require.NotEqual(t, id[tagOff:tagOff+TagBytes], other[tagOff:tagOff+TagBytes], "a fresh tag per id")
	forged := id.Secret()
	forged.Tag[0] ^= 1
	require.False(t, forged.ours(), "one bit off")

	for _, tc := range []struct {
		env, want string
		bad       bool
	}{
		{"", "127.0.0.1:0", false},
		{"lo", "127.0.0.1:0", false},
		{"=lo", "127.0.0.1:0", false},
		{"=nosuchif0", "", true},
	} {
		t.Setenv("NCCL_SOCKET_IFNAME", tc.env)
		got, err := listenAddr()
		if tc.bad {
			requireCode(t, result.SystemError, err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "NCCL_SOCKET_IFNAME=%q", tc.env)
	}
	t.Setenv("NCCL_SOCKET_IFNAME", "=nosuchif0")
	t.Setenv("CECOLL_SOCKET_IFNAME", "lo")
	got, err := listenAddr()
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:0", got, "CECOLL_SOCKET_IFNAME wins")

	a, ok, err := getSockaddr(id[16:])
	require.NoError(t, err)
	require.True(t, ok)
	var back ID
	putSockaddr(back[16:], a)
	require.Equal(t, id[16:tagOff], back[16:tagOff])
	v6 := &net.TCPAddr{IP: net.ParseIP("::1"), Port: 4242}
	putSockaddr(back[16:], v6)
	require.Equal(t, []byte{afInet6, 0, 0x10, 0x92}, back[16:20])
	a, ok, err = getSockaddr(back[16:])
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, v6.String(), a.String())
}

// An id costs its root nothing until ranks arrive (1M ncclGetUniqueId
// calls added 49 MB when every id had an entry).
func TestUniqueIDsCostNothing(t *testing.T) {
	_, err := NewID()
	require.NoError(t, err)
	forming := func() int {
		root.mu.Lock()
		defer root.mu.Unlock()
		return len(root.forming)
	}
	worlds := forming()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 100000 {
		_, err := NewID()
		require.NoError(t, err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Less(t, int64(after.HeapInuse)-int64(before.HeapInuse), int64(1<<20), "heap growth after 100000 ids")
	require.Equal(t, worlds, forming(), "no world forms without ranks")
}
