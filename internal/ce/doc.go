// Package ce is cecoll's copy-engine (CE) collective engine: AllGather,
// AlltoAll, Scatter and Gather moved by the GPU's DMA copy engines and
// ordered by signals between the ranks' streams. It reimplements the
// algorithm of RCCL's port of NCCL's src/ce_coll.cc without that file's
// defects (B1..B19, docs/protocol.md#defects-of-the-seed), each pinned by a
// test in b_test.go and a mutant in mutants/.
//
// A collective is a plan (plan.go: the path to the peers' buffers, which
// blocks move where, who copies, and the syncs around the copies), computed
// alike on every rank, run as steps on the engine's own stream (run.go),
// synced by signals (signal.go: flags in device memory, or CUDA events).
// engine.go holds the state: the sync window, the staging window, the
// streams and events, Abort and Close; config.go the tunables.
//
// The engine sees the device only through hip.Runtime and its Caps, and the
// communicator only through Comm (comm.go) and the optional SharedMem
// (shared.go), by which an in-process communicator keeps the internal
// windows' memory until no rank's stream can write into it; it never learns
// which backend runs.
package ce
