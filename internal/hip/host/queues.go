package host

import "sync"

// Hardware queues (Config.Queues, CECOLL_HOST_QUEUES). On a GPU a stream
// with work pending holds one of its context's hardware queues, a stream
// parked on a flag or event wait included; once every queue is held by a
// parked stream nothing else of the process runs on that device, the
// writes that would release them included (docs/performance.md, "Hardware
// queues": P streams parked stall the device from P = CUDA_DEVICE_MAX_CONNECTIONS;
// a single parked stream blocks nobody). The virtual device does the same:
// a stream's worker takes a queue of its device before it runs an op and
// gives it back when its queue of ops is empty. Inline execution is off
// then, so that every op runs on a worker holding a queue.

// queuePool is one device's hardware queues.
type queuePool struct {
	mu   sync.Mutex
	free sync.Cond
	left int // queues no stream holds
}

func newQueuePools(devices, queues int) []*queuePool {
	if queues <= 0 {
		return nil
	}
	ps := make([]*queuePool, devices)
	for i := range ps {
		ps[i] = &queuePool{left: queues}
		ps[i].free.L = &ps[i].mu
	}
	return ps
}

// acquire takes a queue, waiting while every one is held; false when the
// runtime closes meanwhile.
func (p *queuePool) acquire(rt *Runtime) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.left == 0 {
		if rt.stopping() {
			return false
		}
		p.free.Wait()
	}
	p.left--
	return true
}

func (p *queuePool) release() {
	p.mu.Lock()
	p.left++
	p.mu.Unlock()
	p.free.Signal()
}

// wake lets waiters see the runtime closing.
func (p *queuePool) wake() {
	p.mu.Lock()
	p.free.Broadcast()
	p.mu.Unlock()
}

// takeQueue makes the worker hold a queue of its device before it runs
// ops (s.mu held; released while it waits). False: the runtime closes.
func (s *stream) takeQueue() bool {
	if s.rt.queues == nil || s.holdsQueue {
		return true
	}
	s.mu.Unlock()
	ok := s.rt.queues[s.dev].acquire(s.rt)
	s.mu.Lock()
	s.holdsQueue = ok
	return ok
}

// giveQueue returns the worker's queue once its stream has nothing queued
// (s.mu held).
func (s *stream) giveQueue() {
	if s.holdsQueue && (s.head == s.tail || s.rt.stopping()) {
		s.holdsQueue = false
		s.rt.queues[s.dev].release()
	}
}
