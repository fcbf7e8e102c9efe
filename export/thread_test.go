package main

import (
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// threadID is gettid on every thread, live threads apart, while its cache
// holds.
func TestThreadIDIsGettid(t *testing.T) {
	const n = 8
	type ids struct{ gettid, first, again int }
	got := make([]ids, n)
	var recorded, done sync.WaitGroup
	recorded.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread() // and never unlocked: the thread exits with the goroutine
			got[i] = ids{syscall.Gettid(), threadID(), threadID()}
			recorded.Done()
			recorded.Wait() // all threads alive at once
		}()
	}
	done.Wait()
	seen := map[int]bool{}
	for _, id := range got {
		require.Equal(t, id.gettid, id.first)
		require.Equal(t, id.first, id.again, "cached")
		require.False(t, seen[id.first], "two live threads with one id")
		seen[id.first] = true
	}
}

func BenchmarkThreadID(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range b.N {
		_ = threadID()
	}
}
