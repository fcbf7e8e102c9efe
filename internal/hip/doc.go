// Package hip is cecoll's device runtime: one Go interface with HIP-style
// names that covers everything the engine (internal/ce) and the communicators
// (internal/comm) need from a GPU, and nothing backend-specific above it.
//
// Three backends implement Runtime, each in its own subpackage:
//
//   - host:   a virtual device in pure Go (device memory is mmap'd host
//     memory shareable through memfd, streams are FIFO workers, memops
//     are atomic stores and waits). It is the embedded default and the base
//     of every CI test.
//   - nvidia: libcuda.so.1 (driver API only) through purego.
//   - amd:    libamdhip64.so.{7,6} through purego.
//
// Package backend picks one (CECOLL_BACKEND=auto|nvidia|amd|host).
//
// Conventions every backend keeps:
//   - Device pointers, streams, events and graphs are integers.
//   - Errors are Error values carrying CUDA driver codes (HIP shares them),
//     so a refusal reads the same on every backend. A bad argument of a
//     call is ErrInvalidValue; a fault while asynchronous work runs is
//     ErrIllegalAddress, sticky (on a GPU for the whole context, on the
//     host device for the stream that faulted and the work that waits on
//     it).
//   - PointerInfo says what kind of memory a pointer addresses: device,
//     pinned host, pageable host (which turns an asynchronous copy
//     host-synchronous), managed, or nothing mapped. PointerCache answers
//     the same question on the engine's hot path without a driver call
//     once it has seen the device allocation (pointer.go).
//   - The current device is per OS thread, as in CUDA: a goroutine that calls
//     the runtime across calls locks its OS thread first.
//   - Slices passed to a call are read during the call and never retained,
//     so callers may reuse them at once.
package hip
