package ce

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// teardownRT records every use of a stream or event after its destroy,
// counts runtime calls once armed, and can hold the next EventQuery (hold)
// until let is closed or 300 ms passed.
type teardownRT struct {
	hip.Runtime
	mu       sync.Mutex
	dead     map[uint64]bool
	misuse   []string
	calls    atomic.Int64
	counting atomic.Bool
	hold     atomic.Pointer[chan struct{}] // closed when the held query starts
	let      chan struct{}
}

func (r *teardownRT) note() {
	if r.counting.Load() {
		r.calls.Add(1)
	}
}

func (r *teardownRT) use(what string, h uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead[h] {
		r.misuse = append(r.misuse, fmt.Sprintf("%s of %#x after its destroy", what, h))
	}
}

func (r *teardownRT) kill(h uint64) {
	r.mu.Lock()
	r.dead[h] = true
	r.mu.Unlock()
}

func (r *teardownRT) misuses() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.misuse...)
}

func (r *teardownRT) SetDevice(d int) error { r.note(); return r.Runtime.SetDevice(d) }

func (r *teardownRT) EventQuery(e hip.Event) error {
	r.note()
	if held := r.hold.Swap(nil); held != nil {
		close(*held)
		select {
		case <-r.let:
		case <-time.After(300 * time.Millisecond):
		}
	}
	r.use("EventQuery", uint64(e))
	return r.Runtime.EventQuery(e)
}

func (r *teardownRT) EventRecord(e hip.Event, s hip.Stream) error {
	r.note()
	r.use("EventRecord", uint64(e))
	return r.Runtime.EventRecord(e, s)
}

func (r *teardownRT) StreamWaitEvent(s hip.Stream, e hip.Event) error {
	r.note()
	r.use("StreamWaitEvent", uint64(e))
	return r.Runtime.StreamWaitEvent(s, e)
}

func (r *teardownRT) EventDestroy(e hip.Event) error {
	r.kill(uint64(e))
	return r.Runtime.EventDestroy(e)
}

func (r *teardownRT) StreamDestroy(s hip.Stream) error {
	r.kill(uint64(s))
	return r.Runtime.StreamDestroy(s)
}

func (r *teardownRT) StreamBatchMemOp(s hip.Stream, ops []hip.MemOp) error {
	r.note()
	r.use("StreamBatchMemOp", uint64(s))
	return r.Runtime.StreamBatchMemOp(s, ops)
}

func (r *teardownRT) MemcpyAsync(dst, src hip.DevicePtr, n uintptr, s hip.Stream) error {
	r.note()
	r.use("MemcpyAsync", uint64(s))
	return r.Runtime.MemcpyAsync(dst, src, n, s)
}

// Teardown cannot race a probe or a step by construction: release frees
// the state only under freeMu, which Pending holds for reading, and under
// mu after closed is set, which Step checks under mu. Each case makes
// today's interleaving happen for sure: Pending held inside its event
// query while Close runs, and a step of a call prepared before Close run
// after the state was freed. Neither may touch a destroyed stream or
// event, and the step is refused without a runtime call.
func TestTeardownProbes(t *testing.T) {
	var rts []*teardownRT
	w := newWorld(t, 1, worldOpts{wrap: func(_ int, rt hip.Runtime) hip.Runtime {
		r := &teardownRT{Runtime: rt, dead: map[uint64]bool{}, let: make(chan struct{})}
		rts = append(rts, r)
		return r
	}})
	trt := rts[0]
	w.run(testCfg(), 20*time.Second, false, func(r *rankEnv) error {
		send, recv := r.alloc(64), r.alloc(64)
		a := Args{Func: FuncAllGather, Datatype: 0, Count: 64, EltSize: 1, Send: send, Recv: recv, Stream: r.s}
		if err := r.e.Launch(&a); err != nil {
			return err
		}
		r.syncStream()

		// Pending, held inside its query while Close frees the state.
		started := make(chan struct{})
		trt.hold.Store(&started)
		probed := make(chan bool)
		go func() { probed <- r.e.Pending() }()
		<-started
		done := r.e.Close()
		select {
		case <-done: // today's main: freed under the probe
		case <-time.After(100 * time.Millisecond):
		}
		close(trt.let)
		<-probed
		<-done
		require.True(t, r.e.Drained())

		// A step of a call prepared before Close, after the state is gone.
		e2, err := Init(r.testComm, testCfg())
		if err != nil {
			return err
		}
		if _, err := e2.Prepare(&a); err != nil {
			return err
		}
		<-e2.Close()
		trt.counting.Store(true)
		err = e2.Step(0)
		trt.counting.Store(false)
		if result.Of(err) != result.InvalidUsage {
			return fmt.Errorf("a step after Close: %v, want InvalidUsage", err)
		}
		if n := trt.calls.Load(); n != 0 {
			return fmt.Errorf("a step after Close made %d runtime calls", n)
		}
		return nil
	})
	require.Empty(t, trt.misuses())
}
