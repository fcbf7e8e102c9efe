package osthread

import (
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIDIsGettid(t *testing.T) {
	const n = 8
	ids := make([]int, n)
	var recorded, done sync.WaitGroup
	recorded.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread() // and never unlocked: the thread exits with the goroutine
			require.Equal(t, syscall.Gettid(), ID())
			require.Equal(t, ID(), ID(), "cached")
			ids[i] = ID()
			recorded.Done()
			recorded.Wait() // all threads alive at once
		}()
	}
	done.Wait()
	seen := map[int]bool{}
	for _, id := range ids {
		require.False(t, seen[id], "two live threads with one id")
		seen[id] = true
	}
}

func BenchmarkID(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range b.N {
		_ = ID()
	}
}

func BenchmarkGettid(b *testing.B) {
	for range b.N {
		_ = syscall.Gettid()
	}
}
