// Package memfd owns the anonymous memory files that cross processes: the
// host device's allocations (internal/hip/host) and the CECOLL_CHECK board
// (internal/comm). Create makes one sealed against resizing before anyone
// else can hold it; Check is what a receiver runs on a peer's fd before it
// maps it, so that a peer cannot shrink the file under the mapping (the
// receiver would die of SIGBUS on its next access) or pass something that
// is not a memory file at all.
package memfd
