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

// A struct of two integer eightbytes by value (ncclTeam_t) takes two
// registers, or 16 bytes of stack when two are not free.
func TestLocatePair(t *testing.T) {
	fns, err := parseAPI(`
int ncclTeamRankToWorld(ncclComm_t, ncclTeam_t, int)
ncclResult_t ncclA(int, int, int, int, int, ncclTeam_t, ncclComm_t)
ncclResult_t ncclB(int, int, int, int, int, int, int, ncclTeam_t, ncclComm_t)
`)
	require.NoError(t, err)
	for _, tc := range []struct {
		fn   int
		arch string
		comm loc
	}{
		{0, "x86_64", loc{reg: "%rdi"}},
		{0, "arm64", loc{reg: "x0"}},
		{1, "x86_64", loc{reg: "%r9"}}, // the team on the stack; %r9 stays free for the comm
		{1, "arm64", loc{reg: "x7"}},   // the team in x5, x6
		{2, "x86_64", loc{stack: 32}},
		{2, "arm64", loc{stack: 16}}, // x7 skipped: the team all on the stack
	} {
		comm, _, err := locate(fns[tc.fn], tc.arch)
		require.NoError(t, err)
		require.Equal(t, tc.comm, *comm, "%s %s", fns[tc.fn].name, tc.arch)
	}
}

// A function that does not return ncclResult_t refuses through
// xfwd_refuse_zero, and a refusal reads the communicator before the index
// overwrites the first argument register.
func TestRefusal(t *testing.T) {
	fns, err := parseAPI(`
ncclTeam_t ncclTeamWorld(ncclComm_t)
ncclResult_t ncclDevCommDestroy(ncclComm_t, const ncclDevComm_t*)
`)
	require.NoError(t, err)
	s, err := stubSource(fns)
	require.NoError(t, err)
	text := string(s)
	require.Contains(t, text, "\tmovq %rdi, %rsi\n\tmovl $0, %edi\n\tmovl $0, %edx\n\tjmp xfwd_refuse_zero\n")
	require.Contains(t, text, "\tmov x1, x0\n\tmov w0, #0\n\tmov w2, #2\n\tb xfwd_refuse_zero\n")
	require.Contains(t, text, "\tmovq %rdi, %rsi\n\tmovl $1, %edi\n\tmovl $2, %edx\n\tjmp xfwd_refuse\n")
	_, err = parseAPI("struct ncclBig ncclBig(ncclComm_t)\n")
	require.Error(t, err)
}
