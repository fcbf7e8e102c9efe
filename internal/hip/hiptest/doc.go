// Package hiptest is the conformance suite of the device runtime: one set of
// tests, written against the hip.Runtime interface only, that every backend
// (host, nvidia, amd) runs through Run. It pins the CUDA behaviour the engine
// relies on (docs/protocol.md#runtime-facts-the-backends-rely-on): per-thread
// current device, stream FIFO order, cyclic GEQ waits, batched copies and
// their refusals on the legacy NULL stream and under capture, capture and
// replay, the memop batch limit, cross-process sharing through
// MemExport/MemImport, and PointerInfo's kinds (device memory, pageable Go
// memory, an unmapped page) with PointerCache. On the host backend only, it
// also checks that inaccessible memory fails the call or the stream, not the
// process.
//
// Rules the suite keeps so that it runs unchanged on a GPU: device memory
// only from MemAlloc; Go memory only in synchronous Memcpy (through
// hip.CopyToDevice and hip.CopyFromDevice); behaviour that CUDA leaves
// undefined (double destroy, garbage handles) is checked on the host backend
// only; optional features are chosen through Caps. Every subtest runs on its
// own locked OS thread with the device set, under a watchdog, so that a hang
// becomes a failure with a goroutine dump.
//
// Cross-process tests re-execute the test binary (never fork without exec):
// the backend's TestMain must call RunChildIfRequested first.
package hiptest
