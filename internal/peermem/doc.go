// Package peermem shares device memory between the processes of one
// node: each process serves, on one abstract Unix socket, the file
// descriptors of the allocations its ranks register as windows, to peers
// presenting the communicator's secret (fd.go), and maps a peer's
// allocation from what the peer claims of it (claim.go: Claim, checked by
// Fits before anything is mapped; Map). The socket serves through a
// bootstrap.Gate; what a peer sends here is decoded by fuzzed functions
// (fuzz_test.go). internal/comm runs the registration's exchange over its
// bootstrap and decides which ranks' memory to map.
package peermem
