package comm

import (
	"sync"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/hip/backend"
	"cecoll/internal/result"
)

var proc struct {
	once sync.Once
	rt   hip.Runtime
	err  error
}

// Runtime is the process's device runtime, opened on first use (never in
// init): a forced backend that cannot load fails here, with SystemError,
// on every call that needs it.
func Runtime() (hip.Runtime, error) {
	proc.once.Do(func() {
		rt, err := backend.Open()
		if err != nil {
			proc.err = result.Errorf(result.SystemError, "device runtime: %w", err)
			return
		}
		proc.rt = rt
	})
	return proc.rt, proc.err
}

// MemAlloc is ncclMemAlloc: device memory on the calling thread's current
// device, usable for windows and shareable with peers.
func MemAlloc(rt hip.Runtime, size uintptr) (hip.DevicePtr, error) {
	if size == 0 {
		return 0, result.Errorf(result.InvalidArgument, "ncclMemAlloc: size 0")
	}
	p, err := rt.MemAlloc(size)
	if err != nil {
		return 0, result.Errorf(result.Of(err), "ncclMemAlloc(%d): %w", size, err)
	}
	return p, nil
}

// MemFree is ncclMemFree; NULL is a no-op.
func MemFree(rt hip.Runtime, p hip.DevicePtr) error {
	if p == 0 {
		return nil
	}
	if err := rt.MemFree(p); err != nil {
		return result.Errorf(result.Of(err), "ncclMemFree(%#x): %w", p, err)
	}
	return nil
}

// ProcInitRank is ncclCommInitRankConfig on the process's runtime.
func ProcInitRank(id ID, n, rank int, cfg Config) (*Comm, error) {
	rt, err := Runtime()
	if err != nil {
		return nil, err
	}
	return InitRank(rt, id, n, rank, cfg)
}

// ProcInitAll is ncclCommInitAll on the process's runtime.
func ProcInitAll(n int, devs []int) ([]*Comm, error) {
	rt, err := Runtime()
	if err != nil {
		return nil, err
	}
	return InitAll(rt, n, devs, DefaultConfig())
}

// ProcMemAlloc is ncclMemAlloc on the process's runtime.
func ProcMemAlloc(size uintptr) (hip.DevicePtr, error) {
	rt, err := Runtime()
	if err != nil {
		return 0, err
	}
	return MemAlloc(rt, size)
}

// ProcMemFree is ncclMemFree on the process's runtime.
func ProcMemFree(p hip.DevicePtr) error {
	if p == 0 {
		return nil
	}
	rt, err := Runtime()
	if err != nil {
		return err
	}
	return MemFree(rt, p)
}

// Implemented is ncclCeImplemented for the calling thread's device; false
// when no runtime loads.
func Implemented(fn Func, redOp, dt int32) bool {
	rt, err := Runtime()
	if err != nil {
		return false
	}
	return ce.Implemented(rt, fn, redOp, dt)
}
