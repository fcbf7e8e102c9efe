// Package bootstrap is how the ranks of a communicator meet and exchange
// bytes on the host: the unique id (ncclUniqueId: its layout, its secret,
// the id of a given root address as NCCL_COMM_ID names one, the ids
// ncclCommShrink derives), the in-process exchange of ranks that share a
// process (Group), and the TCP bootstrap of ranks in several processes: a
// root listener per process (root.go), serving every communicator made
// from that process's ids, and each rank's Node, which joins there and
// runs its allgathers and aborts through it (a star).
//
// The root listens where any local user can connect: it serves through a
// Gate (gate.go) that a flood cannot kill and that holds a bounded number
// of strangers, and every frame and payload a peer sends is decoded by a
// pure, fuzzed function that checks its numbers before use (wire.go,
// fuzz_test.go; Enc and Dec serve internal/comm's own payloads).
// docs/security.md is the threat model.
//
// It knows nothing of communicators: internal/comm builds them on a
// Bootstrap, and internal/peermem serves its fd socket through a Gate with
// a Secret.
package bootstrap
