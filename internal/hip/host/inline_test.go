package host

import (
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// inlineModes are the two execution paths: ops run by the enqueuing
// thread when they can (the default), and by the stream workers only.
var inlineModes = []struct {
	name     string
	noInline bool
}{{"inline", false}, {"worker-only", true}}

func TestInlineSwitch(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want bool
	}{
		{"default", Config{}, true},
		{"off", Config{NoInline: true}, false},
		{"chaos keeps the worker-only path", Config{Chaos: 3}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := New(tc.cfg)
			require.NoError(t, err)
			defer rt.Close()
			require.Equal(t, tc.want, rt.inline)
		})
	}
}

// needInline skips a test of inline behaviour in the worker-only rerun.
func needInline(t *testing.T) {
	if os.Getenv("CECOLL_HOST_INLINE") == "0" {
		t.Skip("inline execution is off")
	}
}

// A small copy enqueued on an idle stream has run when the call returns.
func TestInlineRunsBeforeReturn(t *testing.T) {
	needInline(t)
	rt := newRT(t, Config{Devices: 1})
	s := newStream(t, rt)
	buf := alloc(t, rt, 1<<16)
	ev := newEvent(t, rt, hip.EventDefault)
	for round := byte(1); round <= 20; round++ {
		fill(mem(buf, 4096), round)
		require.NoError(t, rt.MemcpyAsync(buf+8192, buf, 4096, s))
		require.NoError(t, rt.StreamQuery(s), "round %d", round)
		require.Equal(t, mem(buf, 4096), mem(buf+8192, 4096))

		require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(buf+16384, uint32(round)), wait(buf+16384, uint32(round), hip.WaitEQ)}))
		require.NoError(t, rt.EventRecord(ev, s))
		require.NoError(t, rt.StreamQuery(s))
		require.NoError(t, rt.EventQuery(ev))
		require.Equal(t, uint32(round), load(buf+16384))
	}
	_, err := rt.EventElapsedTime(ev, ev)
	require.NoError(t, err, "an inline marker has its time")
}

// A copy of inlineMaxCopy bytes or more goes to the worker: the enqueuing
// call returns while the copy is still held up in its piece hook.
func TestInlineLeavesLargeCopiesToWorker(t *testing.T) {
	for _, batched := range []bool{false, true} {
		name := "MemcpyAsync"
		if batched {
			name = "MemcpyBatchAsync"
		}
		t.Run(name, func(t *testing.T) {
			rt := newRT(t, Config{Devices: 1})
			s := newStream(t, rt)
			const n = inlineMaxCopy
			buf := alloc(t, rt, 4*n)
			gate := make(chan struct{})
			var entered atomic.Bool
			rt.pieceHook = func(_ hip.Stream, _, _, size uintptr) {
				if size >= n/2 {
					entered.Store(true)
					<-gate
				}
			}
			fill(mem(buf, n), 3)
			returned := make(chan error, 1)
			go func() {
				if batched {
					returned <- rt.MemcpyBatchAsync([]hip.DevicePtr{buf + n, buf + 3*n}, []hip.DevicePtr{buf, buf + n/2},
						[]uintptr{n / 2, n / 2}, nil, nil, s)
				} else {
					returned <- rt.MemcpyAsync(buf+n, buf, n, s)
				}
			}()
			select {
			case err := <-returned:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				close(gate)
				t.Fatal("a large copy ran on the enqueuing thread")
			}
			eventually(t, 5*time.Second, entered.Load, "the worker never started the copy")
			require.Equal(t, hip.ErrNotReady, rt.StreamQuery(s))
			close(gate)
			require.NoError(t, rt.StreamSynchronize(s))
			if !batched {
				require.Equal(t, mem(buf, n), mem(buf+n, n))
			}
		})
	}
}

// A wait that does not hold stops the inline run; the rest completes on
// the worker once another thread writes the flag, with no further call on
// the stream.
func TestInlineHandsUnsatisfiedWaitToWorker(t *testing.T) {
	for _, m := range inlineModes {
		t.Run(m.name, func(t *testing.T) {
			rt := newRT(t, Config{Devices: 1, NoInline: m.noInline})
			s := newStream(t, rt)
			buf := alloc(t, rt, 4096)
			flag, out := buf, buf+64
			require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(out, 1), wait(flag, 5, hip.WaitGEQ), write(out+4, 2)}))
			require.NoError(t, rt.MemcpyAsync(out+8, out+4, 4, s))
			if rt.inline {
				require.Equal(t, uint32(1), load(out), "the write before the wait ran inline")
			}
			require.Equal(t, hip.ErrNotReady, rt.StreamQuery(s))
			require.Zero(t, load(out+4))
			time.Sleep(3 * time.Millisecond) // let the worker reach its futex sleep
			go func() { store(flag, 7) }()
			eventually(t, 5*time.Second, func() bool { return load(out+8) == 2 }, "nobody ran the ops after the wait")
			require.NoError(t, rt.StreamSynchronize(s))
		})
	}
}

// Many threads issue random small ops on shared streams while waits that
// do not yet hold push work to the workers and back: every stream's ops
// still run in order, and all of them complete.
func TestInlineAndWorkerKeepStreamOrder(t *testing.T) {
	for _, m := range inlineModes {
		t.Run(m.name, func(t *testing.T) {
			rt := newRT(t, Config{Devices: 2, NoInline: m.noInline})
			const streams, rounds = 4, 400
			buf := alloc(t, rt, 1<<20)
			// Per stream i: word W, progress flag F, and a log of rounds.
			W := func(i int) hip.DevicePtr { return buf + hip.DevicePtr(i*4) }
			F := func(i int) hip.DevicePtr { return buf + 256 + hip.DevicePtr(i*4) }
			logA := func(i, k int) hip.DevicePtr { return buf + 4096 + hip.DevicePtr((i*rounds+k)*4) }
			logB := func(i, k int) hip.DevicePtr { return buf + 65536 + hip.DevicePtr((i*rounds+k)*4) }
			var hs [streams]hip.Stream
			for i := range hs {
				hs[i] = newStream(t, rt)
			}
			var wg sync.WaitGroup
			errs := make(chan error, streams)
			for i := 0; i < streams; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(i) + 1))
					s := hs[i]
					for k := 1; k < rounds; k++ {
						v := uint32(k)
						var err error
						// W = k, then log it by a single copy and by a batch: each
						// copy must see exactly this round's write.
						if err == nil {
							err = rt.StreamBatchMemOp(s, []hip.MemOp{write(W(i), v)})
						}
						if err == nil {
							err = rt.MemcpyAsync(logA(i, k), W(i), 4, s)
						}
						if err == nil {
							err = rt.MemcpyBatchAsync([]hip.DevicePtr{logB(i, k)}, []hip.DevicePtr{W(i)}, []uintptr{4}, nil, nil, s)
						}
						if err == nil {
							err = rt.StreamBatchMemOp(s, []hip.MemOp{write(F(i), v)})
						}
						if err == nil && rng.Intn(3) == 0 {
							// Wait for the neighbour to reach this round (every
							// stream writes F before it waits: no cycle).
							err = rt.StreamBatchMemOp(s, []hip.MemOp{wait(F((i+1)%streams), v, hip.WaitGEQ)})
						}
						if err == nil && rng.Intn(8) == 0 {
							err = rt.StreamQuery(s)
							if err == hip.ErrNotReady {
								err = nil
							}
						}
						if err == nil && rng.Intn(50) == 0 {
							time.Sleep(time.Duration(rng.Intn(200)) * time.Microsecond)
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			for i := range hs {
				require.NoError(t, rt.StreamSynchronize(hs[i]))
				require.NoError(t, rt.StreamQuery(hs[i]))
				st, err := rt.lookupStream(hs[i])
				require.NoError(t, err)
				st.mu.Lock()
				require.Equal(t, st.tail, st.completed, "stream %d", i)
				require.Equal(t, st.tail, st.head, "stream %d", i)
				st.mu.Unlock()
				for k := 1; k < rounds; k++ {
					require.Equal(t, uint32(k), load(logA(i, k)), "stream %d round %d (copy)", i, k)
					require.Equal(t, uint32(k), load(logB(i, k)), "stream %d round %d (batch)", i, k)
				}
			}
		})
	}
}

// One thread drives two streams the way a group drives two ranks: A
// writes X, waits for Y and copies; B waits for X and writes Y. Issued in
// either order from one goroutine, it completes: the issuing thread never
// blocks on a flag that only its own later calls write.
func TestInlineGroupPatternOneThread(t *testing.T) {
	for _, m := range inlineModes {
		for _, bFirst := range []bool{false, true} {
			name := m.name + "/A-first"
			if bFirst {
				name = m.name + "/B-first"
			}
			t.Run(name, func(t *testing.T) {
				rt := newRT(t, Config{Devices: 2, NoInline: m.noInline})
				a, b := newStream(t, rt), newStream(t, rt)
				buf := alloc(t, rt, 1<<16)
				x, y, src, dst := buf, buf+4, buf+4096, buf+8192
				issueA := func(k uint32) {
					require.NoError(t, rt.StreamBatchMemOp(a, []hip.MemOp{write(x, k), wait(y, k, hip.WaitEQ)}))
					require.NoError(t, rt.MemcpyAsync(dst, src, 1024, a))
				}
				issueB := func(k uint32) {
					require.NoError(t, rt.StreamBatchMemOp(b, []hip.MemOp{wait(x, k, hip.WaitEQ), write(y, k)}))
				}
				for k := uint32(1); k <= 200; k++ {
					fill(mem(src, 1024), byte(k))
					if bFirst {
						issueB(k)
						issueA(k)
					} else {
						issueA(k)
						issueB(k)
					}
					require.NoError(t, rt.StreamSynchronize(a))
					require.NoError(t, rt.StreamSynchronize(b))
					require.Equal(t, mem(src, 1024), mem(dst, 1024), "round %d", k)
				}
			})
		}
	}
}

// Back to back without synchronizing: rounds pile up behind waits, the
// issuing thread and the workers share the streams, and the result is
// still every round in order.
func TestInlineGroupPatternBackToBack(t *testing.T) {
	for _, m := range inlineModes {
		t.Run(m.name, func(t *testing.T) {
			rt := newRT(t, Config{Devices: 2, NoInline: m.noInline})
			a, b := newStream(t, rt), newStream(t, rt)
			const rounds = 2000
			buf := alloc(t, rt, 1<<16)
			x, y, out := buf, buf+4, buf+8192
			for k := uint32(1); k <= rounds; k++ {
				require.NoError(t, rt.StreamBatchMemOp(a, []hip.MemOp{write(x, k), wait(y, k, hip.WaitGEQ)}))
				require.NoError(t, rt.MemcpyAsync(out+hip.DevicePtr(4*(k%1024)), y, 4, a))
				require.NoError(t, rt.StreamBatchMemOp(b, []hip.MemOp{wait(x, k, hip.WaitGEQ), write(y, k)}))
			}
			require.NoError(t, rt.StreamSynchronize(a))
			require.NoError(t, rt.StreamSynchronize(b))
			// Round k's copy ran after y = k and before round k+1's write
			// of x, so y was k or k+1.
			for k := uint32(rounds - 1023); k <= rounds; k++ {
				got := load(out + hip.DevicePtr(4*(k%1024)))
				require.True(t, got == k || got == k+1, "round %d copied y = %d", k, got)
			}
		})
	}
}

// TestWorkerOnlyPath runs this package's own tests (the conformance suite
// has its own worker-only runs) again with CECOLL_HOST_INLINE=0, which
// newRT turns into Config.NoInline, so every test also covers the path
// where only the stream workers run ops.
func TestWorkerOnlyPath(t *testing.T) {
	if os.Getenv("CECOLL_HOST_INLINE") == "0" {
		t.Skip("already the worker-only run")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	watchdog(t, 120*time.Second)
	args := []string{"-test.run", ".", "-test.skip", "^(TestConformance|TestWorkerOnlyPath)$", "-test.count=1"}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CECOLL_HOST_INLINE=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "worker-only run:\n%s", out)
	require.True(t, strings.Contains(string(out), "PASS"), "%s", out)
}

// A worker parked on a flag whose wait another thread then passes inline
// must not read the flag again: the program may free it as soon as the
// stream is done (the engine's tests crashed on such a read).
func TestParkedWorkerLeavesFreedFlag(t *testing.T) {
	rt := newRT(t, Config{Devices: 1})
	s := newStream(t, rt)
	st, err := rt.lookupStream(s)
	require.NoError(t, err)
	for round := 0; round < 100; round++ {
		buf, err := rt.MemAlloc(4096)
		require.NoError(t, err)
		require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{wait(buf, 1, hip.WaitEQ)}))
		if rt.inline {
			eventually(t, 5*time.Second, func() bool {
				st.mu.Lock()
				defer st.mu.Unlock()
				return st.parked
			}, "the worker never parked")
		}
		// Set the flag without a wake, then enqueue: this thread passes the
		// wait while the worker may still sleep on the word.
		atomic.StoreUint32(word(uintptr(buf)), 1)
		require.NoError(t, rt.StreamBatchMemOp(s, []hip.MemOp{write(buf+4, 2)}))
		require.NoError(t, rt.StreamSynchronize(s))
		require.Equal(t, uint32(2), load(buf+4))
		require.NoError(t, rt.MemFree(buf))
	}
}
