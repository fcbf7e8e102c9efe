// Command export is libcecoll.so, cecoll's C surface: the C ABI of
// include/nccl.h and include/nccl_ce.h.
//
// api.c defines every public function with its exact prototype from the
// headers (so the compiler checks them) and forwards to a Go export named
// goexp_<function>; pnccl<X> is the function and nccl<X> a weak alias of
// it, as in NCCL. Each Go export is a thin shell: check the handle, recover
// a panic into ncclInternalError, call one function of internal/, map the
// error with toResult and set the last-error text. exports.map (a linker
// version script) exports only nccl*, pnccl* and cecoll* names.
//
// Forward mode: forward.c loads the real NCCL or RCCL (internal/forward
// decides which) into the table of fwd_table.[ch] and marks every call
// into it; the functions cecoll does not implement are the tail-jump stubs
// of fwd_stubs.S. tools/fwdgen generates fwd_table.[ch], fwd_stubs.S,
// exports.map and ctests/exported-symbols.txt from the API list
// forward/nccl-2.31.api (NCCL 2.31 and RCCL's extras), by `go generate`.
//
// Build (build.sh, or make): the file is named after cecoll's own version
// (VERSION), with the SONAME libcecoll.so.MAJOR and links to it:
//
//	go build -buildmode=c-shared -o build/libcecoll.so.$VERSION -ldflags \
//	    "-extldflags '-Wl,--version-script=$PWD/export/exports.map -Wl,-soname,libcecoll.so.$MAJOR'" ./export
//
// Process rules for programs that load the library:
//   - The Go runtime starts when the library loads; no work runs in init().
//   - Do not fork after loading it without exec'ing at once: the child has
//     the Go runtime's threads missing. Start other processes with
//     posix_spawn or fork+exec; in Python use the "spawn" start method.
//     fork.c refuses a forked child's calls in C, before they reach Go.
//   - Never dlclose it: a Go runtime cannot be unloaded.
//   - One Go runtime per process: do not load two Go c-shared libraries
//     built from cecoll (or another Go c-shared library) into one process.
//   - A thread's current device (cecollSetDevice, or cudaSetDevice on a GPU)
//     decides where ncclCommInitRank and ncclMemAlloc work; calls on a
//     communicator switch to its device themselves and restore the caller's.
//
//go:generate go run ../tools/fwdgen
package main
