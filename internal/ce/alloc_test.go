package ce

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/log"
)

// launchAllocs measures the allocations of rank 0's call of c (3 ranks, so
// the multicast sync runs too) after a warm-up: Launch, or Prepare and
// every Step as a group runs them. The peers enqueue their matching calls
// before rank 0 measures and then only wait, so what is counted is rank
// 0's launch path (and the device's work).
func launchAllocs(t *testing.T, c collCase, flagWrite string, steps bool) float64 {
	const runs = 50
	cfg := testCfg()
	cfg.FlagWrite = flagWrite
	var allocs float64
	w := newWorld(t, 3, worldOpts{})
	w.run(cfg, 60*time.Second, false, func(r *rankEnv) error {
		p := r.prepare(c)
		launch := func() {
			if !steps {
				if err := r.e.Launch(&p.args); err != nil {
					panic(err)
				}
				return
			}
			pr, err := r.e.Prepare(&p.args)
			if err != nil {
				panic(err)
			}
			for k := range pr.Steps {
				if err := r.e.Step(k); err != nil {
					panic(err)
				}
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

// TestB16_NoAllocationOnLaunch: the launch path allocates nothing, for
// every collective and path, both flag-write methods, and as Launch or as
// a group's Prepare and Steps (B16: the seed allocated its parameter
// arrays on every sync and collective).
func TestB16_NoAllocationOnLaunch(t *testing.T) {
	if log.Enabled(log.LevelInfo, log.Coll) {
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
				for _, steps := range []bool{false, true} {
					t.Run(fmt.Sprintf("%v/%s/steps=%v", c, fw, steps), func(t *testing.T) {
						require.Zero(t, launchAllocs(t, c, fw, steps))
					})
				}
			}
		}
	}
}

func BenchmarkLaunch(b *testing.B) {
	for _, f := range []Func{FuncAllGather, FuncAlltoAll, FuncScatter, FuncGather} {
		b.Run(f.String(), func(b *testing.B) {
			c := collCase{fn: f, count: 2, dtype: 7, mode: bufWindow}
			w := newWorld(b, 2, worldOpts{})
			w.run(testCfg(), 10*time.Minute, false, func(r *rankEnv) error {
				p := r.prepare(c)
				r.w.bar.wait()
				if r.rank == 0 {
					b.ReportAllocs()
					b.ResetTimer()
				}
				for range b.N {
					if err := r.e.Launch(&p.args); err != nil {
						return err
					}
				}
				r.syncStream()
				return nil
			})
		})
	}
}
