package osthread

import (
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIDIsGettid(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.Equal(t, syscall.Gettid(), ID())
}

func TestUseCache(t *testing.T) {
	t.Cleanup(func() { UseCache(nil) })
	UseCache(func() int { return -7 })
	require.Equal(t, -7, ID())
	UseCache(nil)
	require.Equal(t, syscall.Gettid(), ID())
}

func BenchmarkID(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range b.N {
		_ = ID()
	}
}
