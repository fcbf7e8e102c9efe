package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The banner's version is the VERSION file's, where the tree has one.
func TestVersion(t *testing.T) {
	b, err := os.ReadFile("../VERSION")
	if os.IsNotExist(err) {
		t.Skip("no VERSION file")
	}
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(b)), version, "export/version.go and VERSION")
	require.Contains(t, banner(), "cecoll version "+version+" (NCCL 2.28.")
}
