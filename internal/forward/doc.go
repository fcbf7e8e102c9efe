// Package forward owns cecoll's forward mode: the real NCCL or RCCL behind
// cecoll, and the policy that sends each AllGather, AlltoAll, Scatter and
// Gather either to the copy engines or to it.
//
//   - Lib is the real library as cecoll calls it (export/ implements it over
//     the generated table of function pointers, export/fwd_table.h; tests
//     implement it in Go). Every call into it is marked "inside the real
//     library" on the calling thread, so the real library's own calls to
//     its exported names that land in cecoll (cecoll preloaded, the real
//     library linked by the program) pass straight through.
//   - Load finds the real library through a Loader (the dynamic loader, as
//     export/ reaches it): CECOLL_NCCL_LIB; else the definition after
//     cecoll in lookup order (cecoll preloaded); else, where cecoll's own
//     file is libnccl.so.* or librccl.so.*, the loader's path and torch's
//     nvidia/nccl/lib, never cecoll itself.
//   - Policy and Decide are the routing rule (CECOLL_ROUTE,
//     CECOLL_ROUTE_BYTES, the CTA policy). internal/comm agrees the policy
//     and the library's identity among the ranks at init, so that every
//     rank decides every call the same way without talking.
//
// It holds no communicator state: pairing a cecoll communicator with a
// real one is internal/comm's (pair.go).
package forward
