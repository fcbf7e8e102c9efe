package comm

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/hip/host"
)

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// internalBases are the buffers of c's internal windows (the engine's sync
// flags and staging).
func internalBases(c *Comm) []hip.DevicePtr {
	c.winMu.RLock()
	defer c.winMu.RUnlock()
	var out []hip.DevicePtr
	for _, w := range c.wins {
		if w.internal {
			out = append(out, w.base)
		}
	}
	return out
}

// Three ranks; ranks 0 and 1 start a staged AllGather that rank 2 never
// calls, so their streams wait on rank 2's flags. The ranks are then
// aborted (or, for the idle rank, destroyed) and destroyed in every order,
// under chaos seeds: the released streams push into their peers' staging
// and flags after those peers finalized, so every internal window must
// stay mapped until the last rank is gone, and be freed then.
func TestAbortKeepsInternalWindows(t *testing.T) {
	watchdog(t, 240*time.Second)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t.Setenv("CECOLL_STAGING_BYTES", "64K") // 3 rounds of 21.5 KB per peer block
	t.Setenv("CECOLL_ABORT_TIMEOUT", "30")
	const n, idle = 3, 2
	const count = 50000 // int8 elements per rank
	seeds := []int64{0, 3, 11}
	if testing.Short() {
		seeds = seeds[:2]
	}
	for _, seed := range seeds {
		cfg, err := host.ConfigFromEnv()
		require.NoError(t, err)
		cfg.Devices, cfg.Chaos = 2, seed
		rt, err := host.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { reclaiming.Wait(); rt.Close() })
		for _, destroyIdle := range []bool{false, true} {
			for _, order := range permutations(n) {
				name := fmt.Sprintf("seed=%d/destroyIdle=%v/order=%v", seed, destroyIdle, order)
				t.Run(name, func(t *testing.T) {
					abortRanksInOrder(t, rt, n, idle, count, order, destroyIdle)
				})
			}
		}
	}
}

func abortRanksInOrder(t *testing.T, rt hip.Runtime, n, idle int, count uintptr, order []int, destroyIdle bool) {
	devs := []int{0, 1, 0}
	comms, err := InitAll(rt, n, devs, DefaultConfig())
	require.NoError(t, err)
	streams := make([]hip.Stream, n)
	send := make([]hip.DevicePtr, n)
	recv := make([]hip.DevicePtr, n)
	for r := range n {
		require.NoError(t, rt.SetDevice(devs[r]))
		streams[r], err = rt.StreamCreate()
		require.NoError(t, err)
		send[r], err = MemAlloc(rt, count)
		require.NoError(t, err)
		recv[r], err = MemAlloc(rt, uintptr(n)*count)
		require.NoError(t, err)
	}
	var bases []hip.DevicePtr
	for _, c := range comms {
		b := internalBases(c)
		require.Len(t, b, 2, "rank %d: sync and staging windows", c.Rank())
		bases = append(bases, b...)
	}
	mapped := func(p hip.DevicePtr) bool {
		_, _, err := rt.MemGetAddressRange(p)
		return err == nil
	}

	errs := onRanks(comms, func(c *Comm) error {
		if c.Rank() == idle {
			return nil // never joins the collective
		}
		if err := rt.SetDevice(c.Device()); err != nil {
			return err
		}
		return c.Collective(ce.FuncAllGather, send[c.Rank()], recv[c.Rank()], count, 0, 0, streams[c.Rank()])
	})
	for _, err := range errs {
		require.NoError(t, err)
	}

	for i, r := range order {
		if r == idle && destroyIdle {
			require.NoError(t, comms[r].Destroy())
		} else {
			require.NoError(t, comms[r].Abort())
			require.NoError(t, comms[r].Destroy())
		}
		last := i == len(order)-1
		if last {
			// The engines free their state in the background, once their
			// streams drained.
			require.Eventually(t, func() bool {
				for _, p := range bases {
					if mapped(p) {
						return false
					}
				}
				return true
			}, 20*time.Second, time.Millisecond, "internal windows after destroying ranks %v", order)
			break
		}
		for _, p := range bases {
			require.True(t, mapped(p), "internal window %#x after destroying ranks %v", p, order[:i+1])
		}
	}

	for r := range n {
		require.NoError(t, rt.StreamSynchronize(streams[r]))
		require.NoError(t, rt.StreamDestroy(streams[r]))
		require.NoError(t, MemFree(rt, send[r]))
		require.NoError(t, MemFree(rt, recv[r]))
	}
}
