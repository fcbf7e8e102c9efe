package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The committed files are what the generator makes from the API list: a
// change to the list, the handled set or the generator without `go
// generate ./export` fails here.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := findRoot()
	require.NoError(t, err)
	files, err := Generate(root)
	require.NoError(t, err)
	for _, name := range sortedKeys(files) {
		have, err := os.ReadFile(filepath.Join(root, name))
		require.NoError(t, err)
		require.Equal(t, string(files[name]), string(have), "%s is stale: run go generate ./export", name)
	}
}

// The stubs place each translated argument where the ABI passes it.
func TestLocate(t *testing.T) {
	fns, err := parseAPI(`
ncclResult_t ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t)
ncclResult_t ncclPutSignal(const void*, size_t, ncclDataType_t, int, ncclWindow_t, size_t, int, int, unsigned int, ncclComm_t, cudaStream_t)
ncclResult_t ncclX(ncclUniqueId, double, ncclComm_t)
ncclResult_t ncclAllToAllv(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*, ncclDataType_t, ncclComm_t, cudaStream_t)
`)
	require.NoError(t, err)
	for _, tc := range []struct {
		fn   int
		arch string
		comm loc
		wins []loc
	}{
		{0, "x86_64", loc{stack: 8}, nil},
		{0, "arm64", loc{reg: "x6"}, nil},
		{1, "x86_64", loc{stack: 32}, []loc{{reg: "%r8"}}},
		{1, "arm64", loc{stack: 8}, []loc{{reg: "x4"}}},
		{2, "x86_64", loc{reg: "%rdi"}, nil}, // the id goes on the stack, the double in xmm0
		{2, "arm64", loc{reg: "x1"}, nil},    // the id by reference in x0
		{3, "x86_64", loc{stack: 16}, nil},
		{3, "arm64", loc{reg: "x7"}, nil},
	} {
		comm, wins, err := locate(fns[tc.fn], tc.arch)
		require.NoError(t, err)
		require.Equal(t, tc.comm, *comm, "%s %s", fns[tc.fn].name, tc.arch)
		require.Equal(t, tc.wins, wins, "%s %s", fns[tc.fn].name, tc.arch)
	}
}

// Every function of the list is exported, and a stub is made for exactly
// the ones api.c does not implement.
func TestStubsCoverTheRest(t *testing.T) {
	root, err := findRoot()
	require.NoError(t, err)
	files, err := Generate(root)
	require.NoError(t, err)
	text, err := os.ReadFile(filepath.Join(root, apiFile))
	require.NoError(t, err)
	fns, err := parseAPI(string(text))
	require.NoError(t, err)
	stubs := string(files["export/fwd_stubs.S"])
	exports := string(files["export/exports.map"])
	for _, f := range fns {
		require.Contains(t, exports, "    "+f.name+";\n")
		require.Contains(t, exports, "    p"+f.name+";\n")
		has := strings.Contains(stubs, "\np"+f.name+":\n")
		require.Equal(t, !handled[f.name], has, "%s: stub present %v, handled %v", f.name, has, handled[f.name])
	}
}
