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
		m[0] = 1 // nil map write: a runtime panic
	}()
	require.Equal(t, int32(3), int32(r))
}

func TestNoAllocOnSuccess(t *testing.T) {
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = toResult("ncclTest", nil) }))
}
