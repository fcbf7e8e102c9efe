// Package ce is cecoll's copy-engine (CE) collective engine: AllGather,
// AlltoAll, Scatter and Gather moved by the GPU's DMA copy engines and
// ordered by stream memory operations (write-value / wait-value flags). It
// reimplements the algorithm of RCCL's port of NCCL's src/ce_coll.cc without
// that file's defects (B1..B19 in shared/design/ce-protocol.md).
//
// It owns, per communicator and rank (Engine):
//   - the sync window: two uint32 flag arrays (ready, complete) registered as
//     a symmetric window, and the flag protocol over it (unicast, or multicast
//     where the device has it and there are more than two ranks);
//   - an internal staging window that carries the data of calls whose
//     buffers are not in a registered window;
//   - the batch launch (batched copies, per-copy fallback, intra-batch sync);
//   - the path choice of every call (group, zero-copy window, staged), which
//     every rank makes alike from what it alone knows;
//   - the ordering of a communicator's collectives across streams (B19);
//   - abort (releasing this rank's queued flag waits from its own stream)
//     and Finalize's bounded wait for the last collective before it frees.
//
// The engine sees the device only through hip.Runtime and the communicator
// only through Comm (comm.go) and the optional SharedMem (shared.go), by
// which an in-process communicator keeps the internal windows' memory until
// no rank's stream can write into it; it never learns which backend runs.
package ce
