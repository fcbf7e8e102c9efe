package ce

import (
	"testing"
	"time"

	"cecoll/internal/hip"
)

// nullRT runs no device work, so BenchmarkLaunchNull times the engine's own
// cost per Launch (validation, path, ops built, submit bookkeeping), to set
// against a rank-call's host cost on a GPU (docs/performance.md, "The
// engine's own launch cost").
type nullRT struct{ testRT }

func (nullRT) StreamBatchMemOp(hip.Stream, []hip.MemOp) error                      { return nil }
func (nullRT) MemcpyAsync(hip.DevicePtr, hip.DevicePtr, uintptr, hip.Stream) error { return nil }
func (nullRT) MemcpyBatchAsync([]hip.DevicePtr, []hip.DevicePtr, []uintptr, []hip.CopyAttributes, []uintptr, hip.Stream) error {
	return nil
}
func (nullRT) EventRecord(hip.Event, hip.Stream) error     { return nil }
func (nullRT) StreamWaitEvent(hip.Stream, hip.Event) error { return nil }
func (nullRT) StreamGetCaptureStatus(hip.Stream) (hip.CaptureStatus, error) {
	return hip.CaptureNone, nil
}

func BenchmarkLaunchNull(b *testing.B) {
	for _, f := range []Func{FuncAllGather, FuncScatter} {
		b.Run(f.String(), func(b *testing.B) {
			c := collCase{fn: f, count: 8, dtype: 0, mode: bufWindow}
			w := newWorld(b, 4, worldOpts{devices: 1})
			for _, cm := range w.comms {
				cm.rt = nullRT{cm.rt.(testRT)}
			}
			cfg := testCfg()
			w.run(cfg, time.Minute, false, func(r *rankEnv) error {
				p := r.prepare(c)
				r.w.bar.wait()
				if r.rank != 0 {
					return nil
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := r.e.Launch(&p.args); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
