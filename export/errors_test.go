package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

func TestToResult(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int32
	}{
		{nil, 0},
		{result.Errorf(result.InvalidArgument, "bad"), 4},
		{fmt.Errorf("wrapped: %w", result.Errorf(result.InvalidUsage, "no")), 5},
		{result.Errorf(result.SystemError, "backend: %w", errors.New("dlopen")), 2},
		{fmt.Errorf("op: %w", hip.ErrInvalidValue), 1},
		{errors.New("plain"), 3},
	} {
		require.Equal(t, tc.want, int32(toResult("ncclTest", tc.err)), "%v", tc.err)
	}
}

// A panic inside an export becomes ncclInternalError, never a crash.
func TestRecoverInto(t *testing.T) {
	r := toResult("ncclTest", nil)
	func() {
		defer recoverInto(&r, "ncclTest")
		var m map[int]int
		//lint:ignore SA5000 the runtime panic is the point
		m[0] = 1
	}()
	require.Equal(t, int32(3), int32(r))
}

// The last-error text names the call once: a collective's error names
// the collective, which its call says already.
func TestLastErrorPrefix(t *testing.T) {
	for _, tc := range []struct{ call, text, want string }{
		{"ncclAllGather", "AllGather: sendbuff is NULL", "ncclAllGather: sendbuff is NULL"},
		{"ncclAllGatherConfig", "AllGather: sendbuff is NULL", "ncclAllGatherConfig: sendbuff is NULL"},
		{"ncclAllToAll", "AlltoAll: recvbuff is NULL", "ncclAllToAll: recvbuff is NULL"},
		{"ncclScatter", "Scatter: root 3 out of range [0, 2)", "ncclScatter: root 3 out of range [0, 2)"},
		{"ncclLaunchCeColl", "AllGather: eltSize 8 does not match ncclInt32 (4 bytes)", "ncclLaunchCeColl: AllGather: eltSize 8 does not match ncclInt32 (4 bytes)"},
		{"ncclGather", "NULL communicator", "ncclGather: NULL communicator"},
		{"ncclCommCount", "ncclCommCount: NULL count", "ncclCommCount: NULL count"},
		{"ncclGather", "Gatherer: x", "ncclGather: Gatherer: x"},
	} {
		require.Equal(t, tc.want, setLastError(tc.call, tc.text), "%s %q", tc.call, tc.text)
	}
}

func TestNoAllocOnSuccess(t *testing.T) {
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = toResult("ncclTest", nil) }))
}
