package ce

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/log"
)

// launchAllocs measures the allocations of rank 0's Launch of c (3 ranks,
// so the multicast sync runs too) after a warm-up. The peers enqueue
// their matching calls before rank 0 measures and then only wait, so
// what is counted is rank 0's launch path (and the device's work).
func launchAllocs(t *testing.T, c collCase, flagWrite string) float64 {
	const runs = 50
	cfg := testCfg()
	cfg.FlagWrite = flagWrite
	var allocs float64
	w := newWorld(t, 3, worldOpts{})
	w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
		p := r.prepare(c)
		launch := func() {
			if err := r.e.Launch(&p.args); err != nil {
				panic(err)
			}
		}
		for range runs + 1 {
			launch()
		}
		r.syncStream()
		r.w.bar.wait()
		if r.rank != 0 {
			for range runs + 1 {
				launch()
			}
			r.w.bar.wait()
			r.syncStream()
			return nil
		}
		r.w.bar.wait()
		allocs = testing.AllocsPerRun(runs, launch)
		r.syncStream()
		if c.fn == FuncAlltoAll && c.inPlace {
			return nil // an even number of in-place transposes: the input again
		}
		return r.verify(c, p)
	})
	return allocs
}

func TestLaunchAllocatesNothing(t *testing.T) {
	if log.Enabled(log.LevelInfo) {
		t.Skip("INFO logging allocates by design")
	}
	for _, m := range []bufMode{bufWindow, bufPlain, bufGroup} {
		for _, c := range []collCase{
			{fn: FuncAllGather, count: 64, dtype: 7, mode: m},
			{fn: FuncAlltoAll, count: 64, dtype: 7, mode: m, inPlace: true},
			{fn: FuncScatter, count: 64, dtype: 7, root: 0, mode: m},
			{fn: FuncGather, count: 64, dtype: 7, root: 0, mode: m},
		} {
			for _, fw := range []string{FlagWriteValue, FlagWriteCopy} {
				t.Run(fmt.Sprintf("%v/%s", c, fw), func(t *testing.T) {
					require.Zero(t, launchAllocs(t, c, fw))
				})
			}
		}
	}
}

func TestB16_NoAllocationOnLaunch(t *testing.T) {
	if log.Enabled(log.LevelInfo) {
		t.Skip("INFO logging allocates by design")
	}
	c := collCase{fn: FuncAllGather, count: 64, dtype: 7, mode: bufWindow}
	require.Zero(t, launchAllocs(t, c, FlagWriteAuto))
	withSeed(t, &seed.b16)
	require.NotZero(t, launchAllocs(t, c, FlagWriteAuto))
}

// BenchmarkLaunch is the host cost of one rank's call (ns/op per rank
// call) on the host device, 2 ranks, zero-copy, 64 bytes per rank. The
// device's own work runs on the same cores and is partly included; the
// periodic stream syncs are not.
func BenchmarkLaunch(b *testing.B) {
	for _, f := range []Func{FuncAllGather, FuncAlltoAll, FuncScatter, FuncGather} {
		b.Run(f.String(), func(b *testing.B) {
			c := collCase{fn: f, count: 16, dtype: 7, mode: bufWindow}
			w := newWorld(b, 2, worldOpts{})
			w.run(testCfg(), 5*time.Minute, false, func(r *rankEnv) error {
				p := r.prepare(c)
				r.w.bar.wait()
				if r.rank == 0 {
					b.ReportAllocs()
					b.ResetTimer()
				}
				for i := range b.N {
					if err := r.e.Launch(&p.args); err != nil {
						return err
					}
					if i%256 == 255 {
						// Keep the backlog bounded; the wait is device
						// time, not launch cost.
						if r.rank == 0 {
							b.StopTimer()
						}
						r.syncStream()
						if r.rank == 0 {
							b.StartTimer()
						}
					}
				}
				if r.rank == 0 {
					b.StopTimer()
				}
				r.syncStream()
				return nil
			})
		})
	}
}
