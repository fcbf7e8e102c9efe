// Package comm owns cecoll's communicators inside one process: creating them
// (ncclCommInitAll, ncclCommInitRank from several threads or from one thread
// inside a group), their init exchange and what the ranks agree on there
// (pair.go: routing, the real library, the engine's settings, whether copy
// engines can run), ncclGroupStart/End semantics (which work is deferred and
// when it runs), the collectives' arguments and refusals (coll.go),
// symmetric windows (one registration path, window.go), finalize, destroy
// and abort, the lifetime of the engines' internal windows in one process
// (shared.go), split and shrink, the asynchronous error state, the watchdog
// (watch.go) and CECOLL_CHECK (check.go).
//
// The ranks meet through internal/bootstrap: a bootstrap.Group among the
// ranks of this process (world.go), or, for an id that names a root, a
// bootstrap.Node (node.go) through the TCP root of the process that made
// the id. Windows cross processes through internal/peermem. A peer's death
// or a stalled collective (CECOLL_TIMEOUT) becomes an asynchronous
// ncclRemoteError and aborts the engine; CECOLL_CHECK=1 cross-checks every
// collective's signature, and every receive's size against its send's, on
// a shared board. docs/security.md is the threat model of what peers send.
//
// It implements ce.Comm and ce.Window for the engine and decides when the
// engine runs; it never moves data itself. export/ calls it, one function per
// C entry point, and maps its errors with result.Of.
//
// Threads: a communicator binds to the calling thread's current device at
// creation. Group state is per OS thread (C threads call in through export,
// where the goroutine is locked to the calling thread; Go callers lock their
// OS thread first). Goroutines started here lock their OS thread and set the
// communicator's device before any runtime call.
package comm
