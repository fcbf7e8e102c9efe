// Package comm owns cecoll's communicators inside one process: creating them
// (ncclCommInitAll, ncclCommInitRank from several threads or from one thread
// inside a group), their bootstrap (behind the small Bootstrap interface:
// allgather of bytes and barrier), ncclGroupStart/End semantics (which work is
// deferred and when it runs), symmetric windows (registration, overlap and
// alignment checks, peer bases, lookup), finalize/destroy/abort, the
// lifetime of the engines' internal windows in one process (freed when the
// last rank's engine is gone, shared.go) and the asynchronous error state.
//
// Several processes of one node: an id from ncclGetUniqueId names this
// process's TCP bootstrap root (tcproot.go); ranks rendezvous there and then
// run their bootstrap through it (tcpboot.go; a star). Windows cross
// processes as file descriptors passed over an abstract Unix socket
// (fdpass.go, nodewin.go). Both sockets are open to any local user and
// serve through a gate (gate.go) that a flood cannot kill; every payload a
// peer sends is decoded by a pure, fuzzed function that checks its numbers
// before use (wire.go, fuzz_test.go); docs/security.md is the threat
// model. A peer's death or a stalled collective
// (CECOLL_TIMEOUT, watch.go) becomes an asynchronous ncclRemoteError and
// aborts the engine; CECOLL_CHECK=1 cross-checks every collective's
// signature on a shared board (check.go). ncclCommInitAll stays in-process.
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
