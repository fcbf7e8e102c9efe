package host

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"cecoll/internal/hip"
	"cecoll/internal/osthread"
)

var _ hip.Runtime = (*Runtime)(nil)

// driverVersion is what DriverVersion reports: CUDA 13.0's encoding.
const driverVersion = 13000

// Runtime is one virtual GPU node: Config.Devices devices sharing this
// process's address space. Several Runtimes in one process are independent.
type Runtime struct {
	devices int
	caps    hip.Caps
	seed    int64 // chaos seed; 0: off
	inline  bool  // issuing threads run ready ops themselves (inline.go)
	epoch   time.Time

	devMu  sync.RWMutex
	curDev map[int32]int // OS thread id -> current device

	regMu     sync.RWMutex
	streams   map[hip.Stream]*stream
	events    map[hip.Event]*event
	graphs    map[hip.Graph]*graph
	execs     map[hip.GraphExec]*graphExec
	legacy    []*stream // per device, created on first use
	perThread map[ptsKey]*stream
	live      map[*stream]struct{} // every stream whose worker runs
	handles   atomic.Uintptr
	nStreams  atomic.Int64 // creation index, seeds each stream's chaos source

	mem memTable
	mc  mcTable

	capMu     sync.Mutex
	captures  map[*capture]struct{} // active captures
	nCaptures atomic.Int32          // len(captures), read without capMu
	copyPool  *copyPool
	closed    atomic.Bool
	workers   sync.WaitGroup
	pieceHook func(s hip.Stream, dst, src, n uintptr) // tests: each executed copy piece

	queues []*queuePool // per device, with Config.Queues (queues.go); nil: no limit

	blkMu     sync.Mutex
	blocked   []*stream    // streams left with ops pending behind a wait (inline.go)
	nBlocked  atomic.Int32 // len(blocked), read without blkMu
	closeOnce sync.Once
}

type ptsKey struct {
	tid int32
	dev int
}

// firstHandle keeps handles clear of the special stream values 0, 1, 2 and
// of small integers a caller might pass by mistake.
const firstHandle = 0x1000

// New starts a virtual node. Close stops its workers.
func New(cfg Config) (*Runtime, error) {
	if cfg.Devices < 0 {
		return nil, fmt.Errorf("host: %d devices", cfg.Devices)
	}
	if cfg.Devices == 0 {
		cfg.Devices = DefaultDevices
	}
	caps := DefaultCaps()
	if cfg.Caps != nil {
		caps = *cfg.Caps
	}
	caps.StreamMemOps = true // the virtual device always has them
	caps.StreamQueues = cfg.Queues
	rt := &Runtime{
		devices:   cfg.Devices,
		caps:      caps,
		seed:      cfg.Chaos,
		inline:    cfg.Chaos == 0 && !cfg.NoInline && cfg.Queues == 0,
		queues:    newQueuePools(cfg.Devices, cfg.Queues),
		epoch:     time.Now(),
		curDev:    make(map[int32]int),
		streams:   make(map[hip.Stream]*stream),
		events:    make(map[hip.Event]*event),
		graphs:    make(map[hip.Graph]*graph),
		execs:     make(map[hip.GraphExec]*graphExec),
		legacy:    make([]*stream, cfg.Devices),
		perThread: make(map[ptsKey]*stream),
		live:      make(map[*stream]struct{}),
		captures:  make(map[*capture]struct{}),
	}
	rt.handles.Store(firstHandle - 0x10)
	rt.copyPool = newCopyPool(rt)
	return rt, nil
}

// Close stops every stream worker and copy engine, abandoning queued work
// (waits in progress notice within a few milliseconds). For tests: the
// library never closes its runtime.
func (rt *Runtime) Close() {
	rt.closeOnce.Do(func() {
		rt.closed.Store(true)
		rt.regMu.RLock()
		for s := range rt.live {
			s.mu.Lock()
			s.work.Broadcast()
			s.done.Broadcast()
			s.room.Broadcast()
			s.mu.Unlock()
		}
		rt.regMu.RUnlock()
		for _, p := range rt.queues {
			p.wake()
		}
		rt.workers.Wait()
		rt.copyPool.stop()
	})
}

func (rt *Runtime) stopping() bool { return rt.closed.Load() }

func (rt *Runtime) newHandle() uintptr { return rt.handles.Add(0x10) }

// Name implements hip.Runtime.
func (rt *Runtime) Name() string { return "host" }

// DriverVersion implements hip.Runtime.
func (rt *Runtime) DriverVersion() (int, error) { return driverVersion, nil }

// Caps implements hip.Runtime: every device has the same.
func (rt *Runtime) Caps() hip.Caps { return rt.caps }

// DeviceCount implements hip.Runtime.
func (rt *Runtime) DeviceCount() (int, error) { return rt.devices, nil }

func tid() int32 { return int32(osthread.ID()) }

// SetDevice implements hip.Runtime: the device is per OS thread.
func (rt *Runtime) SetDevice(dev int) error {
	if dev < 0 || dev >= rt.devices {
		return hip.ErrInvalidDevice
	}
	t := tid()
	rt.devMu.Lock()
	rt.curDev[t] = dev
	rt.devMu.Unlock()
	return nil
}

// GetDevice implements hip.Runtime.
func (rt *Runtime) GetDevice() (int, error) { return rt.current(), nil }

func (rt *Runtime) current() int {
	t := tid()
	rt.devMu.RLock()
	d := rt.curDev[t]
	rt.devMu.RUnlock()
	return d
}

// DeviceName implements hip.Runtime.
func (rt *Runtime) DeviceName(dev int) (string, error) {
	if dev < 0 || dev >= rt.devices {
		return "", hip.ErrInvalidDevice
	}
	return "cecoll host device " + strconv.Itoa(dev), nil
}

// DeviceCanAccessPeer implements hip.Runtime: all devices share one memory.
func (rt *Runtime) DeviceCanAccessPeer(dev, peer int) (bool, error) {
	if dev < 0 || dev >= rt.devices || peer < 0 || peer >= rt.devices {
		return false, hip.ErrInvalidDevice
	}
	return true, nil
}

// DeviceSynchronize implements hip.Runtime: waits for the work enqueued so
// far on every stream of the current device, and returns the sticky error
// of one that failed and is not destroyed, as cuCtxSynchronize reports an
// earlier fault.
func (rt *Runtime) DeviceSynchronize() error {
	dev := rt.current()
	var list []*stream
	rt.regMu.RLock()
	for s := range rt.live {
		if s.dev == dev && !s.internal {
			list = append(list, s)
		}
	}
	rt.regMu.RUnlock()
	for _, s := range list {
		if s.capturing() != nil {
			return hip.ErrStreamCaptureUnsupported
		}
	}
	var first error
	for _, s := range list {
		if err := s.sync(); err != nil && first == nil && !s.isDestroyed() {
			first = err
		}
	}
	return first
}
