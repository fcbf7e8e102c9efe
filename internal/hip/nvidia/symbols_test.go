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
// exported symbol (gpu-abi.md section A.1 and cuda.h of CUDA 12/13): the
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
// reads it (docs/measurements.md, "Hardware queues: which waiting streams
// stall the GPU"), else cecoll's 32 where it raised the variable before
// the driver's cuInit, else the 8.
func TestStreamQueues(t *testing.T) {
	for _, tc := range []struct {
		v           string
		set, raised bool
		want        int
	}{
		{"", false, true, 32},
		{"", false, false, 8}, // MPS, or the driver initialised first
		{"16", true, false, 16},
		{" 4 ", true, false, 4},
		{"64", true, false, 32},
		{"0", true, false, 8},
		{"-3", true, false, 8},
		{"many", true, false, 8},
	} {
		require.Equal(t, tc.want, streamQueues(tc.v, tc.set, tc.raised), "%+v", tc)
	}
}

// TestRaiseConnectionsMPS: with an MPS control daemon's socket in
// CUDA_MPS_PIPE_DIRECTORY, cecoll leaves CUDA_DEVICE_MAX_CONNECTIONS unset
// (32 per client exhausted the MPS server's pool); without one it raises
// it to 32; a value the user set stays either way.
func TestRaiseConnectionsMPS(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", dir)
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "")
	_, set, raised := raiseConnections()
	require.False(t, set)
	require.True(t, raised, "no daemon: raised")
	require.Equal(t, "32", os.Getenv("CUDA_DEVICE_MAX_CONNECTIONS"))

	// A socket of another type than a stream (MPS's may be one) counts.
	pk, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "control"), Net: "unixgram"})
	require.NoError(t, err)
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "")
	_, _, raised = raiseConnections()
	require.False(t, raised, "a datagram socket: a daemon")
	pk.Close()
	require.NoError(t, os.Remove(filepath.Join(dir, "control")))

	ln, err := net.Listen("unix", filepath.Join(dir, "control"))
	require.NoError(t, err)
	defer ln.Close()
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "")
	_, set, raised = raiseConnections()
	require.False(t, set || raised, "MPS: the driver's default stays")
	require.Equal(t, "", os.Getenv("CUDA_DEVICE_MAX_CONNECTIONS"))
	require.Equal(t, 8, streamQueues("", false, raised))

	// A daemon that quit leaves its socket file: no daemon.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "")
	_, _, raised = raiseConnections()
	require.True(t, raised, "a stale socket is no daemon")

	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "16")
	v, set, raised2 := raiseConnections()
	require.True(t, set)
	require.False(t, raised2)
	require.Equal(t, "16", v)
}
