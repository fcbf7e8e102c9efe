package host

import (
	"sync"
	"sync/atomic"

	"cecoll/internal/hip"
)

// copyEngines is the number of copy goroutines a large batch may be
// spread over, like the several DMA engines of a GPU.
const copyEngines = 4

// copyPool is a small set of goroutines that help a stream worker with the
// pieces of a large batch.
type copyPool struct {
	jobs chan *batchJob
	wg   sync.WaitGroup
}

// batchJob is one batch being shared: each helper takes pieces by an
// atomic index until none is left. A stream owns one and reuses it.
type batchJob struct {
	rt     *Runtime
	h      hip.Stream
	pieces []piece
	next   atomic.Int64
	fault  atomic.Bool // a piece faulted (fault.go)
	wg     sync.WaitGroup
}

func newCopyPool(rt *Runtime) *copyPool {
	p := &copyPool{jobs: make(chan *batchJob, copyEngines)}
	for i := 0; i < copyEngines; i++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for j := range p.jobs {
				j.work()
				j.wg.Done()
			}
		}()
	}
	return p
}

func (p *copyPool) stop() {
	close(p.jobs)
	p.wg.Wait()
}

// run executes pieces with the help of idle engines and returns when all
// are copied (or faulted: false).
func (p *copyPool) run(j *batchJob, pieces []piece, h hip.Stream) bool {
	j.h = h
	j.pieces = pieces
	j.next.Store(0)
	j.fault.Store(false)
	helpers := min(len(pieces)-1, copyEngines)
	for i := 0; i < helpers; i++ {
		j.wg.Add(1)
		select {
		case p.jobs <- j:
		default:
			j.wg.Done() // every engine is busy: do the work here
		}
	}
	j.work()
	j.wg.Wait()
	j.pieces = nil
	return !j.fault.Load()
}

func (j *batchJob) work() {
	for {
		i := int(j.next.Add(1) - 1)
		if i >= len(j.pieces) {
			return
		}
		if !j.rt.runPiece(j.h, j.pieces[i]) {
			j.fault.Store(true)
		}
	}
}
