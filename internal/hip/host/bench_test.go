// Benchmarks of the host device's copy and flag paths. Run them with
//
//	go test -run '^$' -bench . -benchtime 20x ./internal/hip/host    # copies: 20 x 64 MiB
//	go test -run '^$' -bench RoundTrip ./internal/hip/host           # memop round trips
//
// BenchmarkCopy reports the runtime's copy rate (GB/s), the rate of a plain
// Go copy() of the same number of bytes measured in the same run (go-GB/s),
// and their ratio. BenchmarkMemOpRoundTrip reports the time of one
// write-value/wait-value round trip between two streams (ns/roundtrip).
package host_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/comm"
	"cecoll/internal/hip"
	"cecoll/internal/hip/host"
)

const (
	benchBytes = 64 << 20 // bytes moved per iteration
	benchSplit = 8        // copies per iteration
)

// benchRuntime is a default host runtime (chaos off) on device 0 of this
// benchmark's locked thread.
func benchRuntime(b *testing.B) hip.Runtime {
	b.Helper()
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	rt, err := host.New(host.Config{})
	require.NoError(b, err)
	b.Cleanup(rt.Close)
	require.NoError(b, rt.SetDevice(0))
	return rt
}

func benchAlloc(b *testing.B, rt hip.Runtime, n uintptr, fill byte) hip.DevicePtr {
	b.Helper()
	p, err := rt.MemAlloc(n)
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, rt.MemFree(p)) })
	require.NoError(b, rt.Memset(p, fill, n)) // also faults every page in
	return p
}

func benchStream(b *testing.B, rt hip.Runtime) hip.Stream {
	b.Helper()
	s, err := rt.StreamCreate()
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, rt.StreamDestroy(s)) })
	return s
}

// BenchmarkCopy moves 64 MiB per iteration as 8 copies on one stream
// (MemcpyAsync each, or one MemcpyBatchAsync), then synchronizes.
func BenchmarkCopy(b *testing.B) {
	for _, batched := range []bool{false, true} {
		name := "MemcpyAsync"
		if batched {
			name = "MemcpyBatchAsync"
		}
		b.Run(name, func(b *testing.B) {
			rt := benchRuntime(b)
			src, dst := benchAlloc(b, rt, benchBytes, 1), benchAlloc(b, rt, benchBytes, 0)
			s := benchStream(b, rt)
			const piece = benchBytes / benchSplit
			dsts := make([]hip.DevicePtr, benchSplit)
			srcs := make([]hip.DevicePtr, benchSplit)
			sizes := make([]uintptr, benchSplit)
			for i := range benchSplit {
				dsts[i], srcs[i], sizes[i] = dst+hip.DevicePtr(i*piece), src+hip.DevicePtr(i*piece), piece
			}
			b.SetBytes(benchBytes)
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if batched {
					if err := rt.MemcpyBatchAsync(dsts, srcs, sizes, nil, nil, s); err != nil {
						b.Fatal(err)
					}
				} else {
					for i := range benchSplit {
						if err := rt.MemcpyAsync(dsts[i], srcs[i], sizes[i], s); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := rt.StreamSynchronize(s); err != nil {
					b.Fatal(err)
				}
			}
			dev := time.Since(start)
			b.StopTimer()

			// The same bytes through a plain Go copy(), the ceiling a
			// host-memory copy can reach on this machine.
			gs, gd := make([]byte, benchBytes), make([]byte, benchBytes)
			for i := range gs {
				gs[i] = 1
			}
			copy(gd, gs) // fault in
			start = time.Now()
			for range b.N {
				copy(gd, gs)
			}
			plain := time.Since(start)

			rate := func(d time.Duration) float64 { return float64(benchBytes) * float64(b.N) / d.Seconds() / 1e9 }
			b.ReportMetric(rate(dev), "GB/s")
			b.ReportMetric(rate(plain), "go-GB/s")
			b.ReportMetric(rate(dev)/rate(plain), "ratio")
		})
	}
}

// BenchmarkMemOpRoundTrip: stream 1 writes ping = i and waits for pong == i;
// stream 2 waits for ping == i and writes pong = i. One iteration is one
// round trip. Rounds are enqueued in chunks, at most two chunks ahead.
func BenchmarkMemOpRoundTrip(b *testing.B) {
	rt := benchRuntime(b)
	flags := benchAlloc(b, rt, 4096, 0)
	ping, pong := flags, flags+4
	s1, s2 := benchStream(b, rt), benchStream(b, rt)
	var evs [2]hip.Event
	for i := range evs {
		e, err := rt.EventCreate(hip.EventDisableTiming)
		require.NoError(b, err)
		b.Cleanup(func() { require.NoError(b, rt.EventDestroy(e)) })
		evs[i] = e
	}
	const chunk = 64
	ops1 := make([]hip.MemOp, 0, 2*chunk)
	ops2 := make([]hip.MemOp, 0, 2*chunk)
	b.ResetTimer()
	start := time.Now()
	for done, k := 0, 0; done < b.N; k++ {
		ev := evs[k%2]
		if k >= 2 {
			if err := rt.EventSynchronize(ev); err != nil { // chunk k-2 done
				b.Fatal(err)
			}
		}
		n := min(chunk, b.N-done)
		ops1, ops2 = ops1[:0], ops2[:0]
		for i := 1; i <= n; i++ {
			v := uint32(done + i)
			ops2 = append(ops2, hip.WaitValue32(ping, v, hip.WaitEQ), hip.WriteValue32(pong, v))
			ops1 = append(ops1, hip.WriteValue32(ping, v), hip.WaitValue32(pong, v, hip.WaitEQ))
		}
		if err := hip.BatchMemOps(rt, s2, ops2); err != nil {
			b.Fatal(err)
		}
		if err := hip.BatchMemOps(rt, s1, ops1); err != nil {
			b.Fatal(err)
		}
		if err := rt.EventRecord(ev, s1); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	if err := rt.StreamSynchronize(s1); err != nil {
		b.Fatal(err)
	}
	if err := rt.StreamSynchronize(s2); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/roundtrip")
}

// BenchmarkGroupCollective times one grouped collective of N ranks in one
// process with 8 bytes per rank, driven from one locked thread (as
// cecoll-perf -N N issues it: back to back, every rank on its own stream
// and device, registered windows), through the communicator and the
// engine, with inline execution on and off. One iteration is one
// collective of every rank; the streams are synchronized at the end.
//
//	go test -run '^$' -bench GroupCollective -count 5 ./internal/hip/host
func BenchmarkGroupCollective(b *testing.B) {
	fns := []struct {
		name string
		fn   ce.Func
	}{{"allgather", ce.FuncAllGather}, {"alltoall", ce.FuncAlltoAll}, {"scatter", ce.FuncScatter}, {"gather", ce.FuncGather}}
	for _, n := range []int{2, 4} {
		for _, f := range fns {
			for _, inline := range []bool{true, false} {
				name := fmt.Sprintf("N%d/%s/inline=%v", n, f.name, inline)
				b.Run(name, func(b *testing.B) { benchGroup(b, n, f.fn, benchChunk, inline) })
			}
		}
	}
	// Copies of 16 KiB per peer: a 4-rank AllGather's batch (64 KiB out of
	// place, 48 KiB in place) sits at the inline copy limit.
	for _, inline := range []bool{true, false} {
		b.Run(fmt.Sprintf("N4/allgather16K/inline=%v", inline), func(b *testing.B) {
			benchGroup(b, 4, ce.FuncAllGather, 16<<10, inline)
		})
	}
}

// benchWorld is n ranks of one process with 8-byte buffers in registered
// windows and a stream each, rank r on device r.
type benchWorld struct {
	rt         *host.Runtime
	comms      []*comm.Comm
	send, recv []hip.DevicePtr
	streams    []hip.Stream
}

const benchChunk = 8

func newBenchWorld(b *testing.B, n int, chunk uintptr, inline bool) *benchWorld {
	rt, err := host.New(host.Config{NoInline: !inline})
	require.NoError(b, err)
	b.Cleanup(rt.Close)
	devs := make([]int, n)
	for r := range devs {
		devs[r] = r
	}
	w := &benchWorld{rt: rt, send: make([]hip.DevicePtr, n), recv: make([]hip.DevicePtr, n), streams: make([]hip.Stream, n)}
	w.comms, err = comm.InitAll(rt, n, devs, comm.DefaultConfig())
	require.NoError(b, err)
	bytes := uintptr(n) * chunk
	require.NoError(b, comm.GroupStart())
	for r, c := range w.comms {
		require.NoError(b, rt.SetDevice(c.Device()))
		w.streams[r], err = rt.StreamCreate()
		require.NoError(b, err)
		w.send[r], err = comm.MemAlloc(rt, bytes)
		require.NoError(b, err)
		w.recv[r], err = comm.MemAlloc(rt, bytes)
		require.NoError(b, err)
		_, err = c.WindowRegister(w.send[r], bytes, 0)
		require.NoError(b, err)
		_, err = c.WindowRegister(w.recv[r], bytes, 0)
		require.NoError(b, err)
	}
	require.NoError(b, comm.GroupEnd())
	b.Cleanup(func() {
		for _, c := range w.comms {
			require.NoError(b, c.Destroy())
		}
	})
	return w
}

func benchGroup(b *testing.B, n int, fn ce.Func, chunk uintptr, inline bool) {
	runtime.LockOSThread() // groups belong to the calling thread
	defer runtime.UnlockOSThread()
	w := newBenchWorld(b, n, chunk, inline)
	rt, comms, send, recv, streams := w.rt, w.comms, w.send, w.recv, w.streams
	launch := func() {
		if err := comm.GroupStart(); err != nil {
			b.Fatal(err)
		}
		for r, c := range comms {
			if err := c.Collective(fn, send[r], recv[r], chunk, 0, 0, streams[r]); err != nil {
				b.Fatal(err)
			}
		}
		if err := comm.GroupEnd(); err != nil {
			b.Fatal(err)
		}
	}
	syncAll := func() {
		for _, s := range streams {
			if err := rt.StreamSynchronize(s); err != nil {
				b.Fatal(err)
			}
		}
	}
	for range 50 {
		launch()
	}
	syncAll()
	b.ResetTimer()
	for b.Loop() {
		launch()
	}
	syncAll()
	b.StopTimer()
}

// BenchmarkThreadCollective is BenchmarkGroupCollective's AllGather with
// one locked thread per rank instead of one thread driving a group: each
// issues its rank's collectives back to back, then synchronizes its
// stream. One iteration is one collective of every rank.
func BenchmarkThreadCollective(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, inline := range []bool{true, false} {
			b.Run(fmt.Sprintf("N%d/allgather/inline=%v", n, inline), func(b *testing.B) {
				w := newBenchWorld(b, n, benchChunk, inline)
				run := func(iters int) {
					errs := make(chan error, n)
					for r, c := range w.comms {
						go func() {
							runtime.LockOSThread()
							defer runtime.UnlockOSThread()
							var err error
							for i := 0; i < iters && err == nil; i++ {
								err = c.Collective(ce.FuncAllGather, w.send[r], w.recv[r], benchChunk, 0, 0, w.streams[r])
							}
							if err == nil {
								err = w.rt.StreamSynchronize(w.streams[r])
							}
							errs <- err
						}()
					}
					for range n {
						if err := <-errs; err != nil {
							b.Fatal(err)
						}
					}
				}
				run(50)
				b.ResetTimer()
				run(b.N)
			})
		}
	}
}
