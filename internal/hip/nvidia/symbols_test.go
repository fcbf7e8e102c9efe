package nvidia

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// versioned lists the plain names whose cuda.h macro maps to another
// exported symbol (docs/protocol.md#versioned-driver-symbols and cuda.h of CUDA 12/13): the
// table must bind the right-hand side, since dlsym of the left one returns
// a legacy ABI.
var versioned = map[string]string{
	"cuStreamBatchMemOp":   "cuStreamBatchMemOp_v2",
	"cuMemcpyBatchAsync":   "cuMemcpyBatchAsync_v2",
	"cuMemGetAddressRange": "cuMemGetAddressRange_v2",
	"cuMemAlloc":           "cuMemAlloc_v2",
	"cuMemFree":            "cuMemFree_v2",
	"cuStreamDestroy":      "cuStreamDestroy_v2",
	"cuEventDestroy":       "cuEventDestroy_v2",
	"cuStreamBeginCapture": "cuStreamBeginCapture_v2",
	"cuGraphInstantiate":   "cuGraphInstantiateWithFlags",
}

func TestSymbolTable(t *testing.T) {
	var s syms
	tab := s.table()
	seen := map[string]bool{}
	protoName := regexp.MustCompile(`^CUresult (cu\w+)\(`)
	for _, e := range tab {
		require.False(t, seen[e.name], "duplicate %s", e.name)
		seen[e.name] = true
		m := protoName.FindStringSubmatch(e.proto)
		require.NotNil(t, m, "%s: prototype %q", e.name, e.proto)
		require.Equal(t, e.name, m[1], "prototype names another function")
		require.NotNil(t, e.fn, e.name)
		require.False(t, strings.HasPrefix(e.name, "cuMulticast"), "multicast is forbidden: %s", e.name)
		require.False(t, strings.HasSuffix(e.name, "_ptsz") || strings.HasSuffix(e.name, "_ptds"),
			"per-thread variants change stream 0's meaning: %s", e.name)
		if v, ok := versioned[e.name]; ok {
			require.True(t, e.fallback, "%s is the legacy ABI of %s; bind %s", e.name, v, v)
			require.True(t, e.optional, "a fallback must be optional: %s", e.name)
		}
	}
	for plain, v := range versioned {
		if plain == "cuGraphInstantiate" || plain == "cuMemcpyBatchAsync" || seen[plain] || seen[v] {
			require.True(t, seen[v], "%s must be bound as %s", plain, v)
		}
	}
	// Every field of syms is reachable from the table, so nothing is
	// called through a pointer that load never fills.
	fields := map[*uintptr]bool{}
	for _, e := range tab {
		require.False(t, fields[e.fn], "two entries fill one field: %s", e.name)
		fields[e.fn] = true
	}
	require.Len(t, fields, reflect.TypeFor[syms]().NumField())
}

// TestSymbolTableMatchesHeader checks the table against cuda.h where a CUDA
// toolkit is installed: for every bound name, a "#define plain
// [__CUDA_API_PT*(]name" must not point elsewhere.
func TestSymbolTableMatchesHeader(t *testing.T) {
	var hdr []byte
	for _, p := range []string{"/usr/local/cuda/include/cuda.h", "/usr/include/cuda.h"} {
		if b, err := os.ReadFile(p); err == nil {
			hdr = b
			break
		}
	}
	if hdr == nil {
		t.Skip("no cuda.h on this machine")
	}
	def := regexp.MustCompile(`(?m)^\s*#\s*define\s+(cu\w+)\s+(?:__CUDA_API_PT(?:DS|SZ)\((cu\w+)\)|(cu\w+))\s*$`)
	mapped := map[string]string{}
	for _, m := range def.FindAllStringSubmatch(string(hdr), -1) {
		to := m[2] + m[3]
		if _, ok := mapped[m[1]]; !ok {
			mapped[m[1]] = to
		}
	}
	require.NotEmpty(t, mapped)
	var s syms
	for _, e := range s.table() {
		if e.fallback {
			continue
		}
		to, ok := mapped[e.name]
		if ok && to != e.name {
			t.Errorf("cuda.h maps %s to %s: bind %s", e.name, to, to)
		}
	}
}

// Without the driver the process keeps its environment: the host device
// runs then, and CUDA_DEVICE_MAX_CONNECTIONS is none of cecoll's business.
func TestOpenMissingLibrary(t *testing.T) {
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "") // restored after the test
	os.Unsetenv("CUDA_DEVICE_MAX_CONNECTIONS")
	_, err := openPath("libcuda-cecoll-absent.so.1")
	require.Error(t, err)
	require.Contains(t, err.Error(), "libcuda-cecoll-absent.so.1")
	_, set := os.LookupEnv("CUDA_DEVICE_MAX_CONNECTIONS")
	require.False(t, set, "set although no driver loaded")
}

func TestMulticastNeverSupported(t *testing.T) {
	r := &Runtime{}
	require.False(t, r.Caps().Multicast)
	_, err := r.MulticastCreate([]hip.DevicePtr{1}, 1<<21)
	require.ErrorIs(t, err, hip.ErrNotSupported)
	require.ErrorIs(t, r.MulticastDestroy(1), hip.ErrNotSupported)
}

// TestStreamQueues pins Caps.StreamQueues: the user's value as the driver
// reads it (docs/performance.md, "Hardware queues: which waiting streams
// stall the GPU"), else what cecoll set before the driver's cuInit, else
// the driver's default: 8, or 2 for an MPS client ("MPS clients and
// hardware queues").
func TestStreamQueues(t *testing.T) {
	for _, tc := range []struct {
		v            string
		set          bool
		raisedTo     int
		mps, preInit bool
		want         int
	}{
		{"", false, 32, false, false, 32},
		{"", false, 8, true, false, 8},
		{"", false, 32, false, true, 8}, // the driver initialised first
		{"", false, 8, true, true, 2},
		{"16", true, 0, false, false, 16},
		{"16", true, 0, true, true, 16},
		{" 4 ", true, 0, false, false, 4},
		{"64", true, 0, false, false, 32},
		{"0", true, 0, false, false, 8},
		{"0", true, 0, true, false, 2},
		{"-3", true, 0, false, false, 8},
		{"many", true, 0, false, false, 8},
	} {
		require.Equal(t, tc.want, streamQueues(tc.v, tc.set, tc.raisedTo, tc.mps, tc.preInit), "%+v", tc)
	}
}

// TestRaiseConnectionsMPS: with an MPS control daemon's socket in
// CUDA_MPS_PIPE_DIRECTORY, cecoll sets CUDA_DEVICE_MAX_CONNECTIONS to 8
// (a client left at its default has 2 queues, which one rank fills; 32
// per client exhausted the server's pool); without one to 32; a value the
// user set stays either way.
func TestRaiseConnectionsMPS(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", dir)
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "")
	_, set, raisedTo, mps := raiseConnections()
	require.False(t, set || mps)
	require.Equal(t, 32, raisedTo, "no daemon")
	require.Equal(t, "32", os.Getenv("CUDA_DEVICE_MAX_CONNECTIONS"))

	// A socket of another type than a stream (MPS's may be one) counts.
	pk, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "control"), Net: "unixgram"})
	require.NoError(t, err)
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "")
	_, _, raisedTo, mps = raiseConnections()
	require.True(t, mps, "a datagram socket: a daemon")
	require.Equal(t, 8, raisedTo)
	pk.Close()
	require.NoError(t, os.Remove(filepath.Join(dir, "control")))

	ln, err := net.Listen("unix", filepath.Join(dir, "control"))
	require.NoError(t, err)
	defer ln.Close()
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "")
	_, set, raisedTo, mps = raiseConnections()
	require.False(t, set)
	require.True(t, mps)
	require.Equal(t, 8, raisedTo, "MPS: 8 per client")
	require.Equal(t, "8", os.Getenv("CUDA_DEVICE_MAX_CONNECTIONS"))
	require.Equal(t, 8, streamQueues("", false, raisedTo, mps, false))

	// A daemon that quit leaves its socket file: no daemon.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "")
	_, _, raisedTo, mps = raiseConnections()
	require.False(t, mps, "a stale socket is no daemon")
	require.Equal(t, 32, raisedTo)

	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "16")
	v, set, raisedTo, _ := raiseConnections()
	require.True(t, set)
	require.Zero(t, raisedTo)
	require.Equal(t, "16", v)
}
