/* cshim.h: what the Go side of export/ needs from C. Included by every Go
 * file's cgo preamble and so by _cgo_export.h: declarations, type
 * definitions and static inline helpers only. Names here are internal: the
 * version script (exports.map) exports nothing but the API. */
#ifndef CECOLL_EXPORT_CSHIM_H_
#define CECOLL_EXPORT_CSHIM_H_

#include <stdint.h>
#include <stdlib.h>

#include "nccl.h"
#include "nccl_ce.h"

/* The C side of a communicator handle: checked on every call. */
#define XCOMM_MAGIC 0x63656d6d6f63ULL /* "commec" */
#define XWIN_MAGIC 0x6e69776365ULL    /* "ecwin" */
#define XDEAD_MAGIC 0xdeadULL

struct ncclComm {
  uint64_t magic;
  uintptr_t handle; /* cgo.Handle of the *comm.Comm */
};

struct ncclWindow_vidmem {
  uint64_t magic;
  uintptr_t handle; /* cgo.Handle of the *comm.Window */
};

/* Last-error text: a C-owned buffer (api.c), returned by ncclGetLastError. */
void xlast_set(const char* text, size_t n);

/* Integer <-> pointer conversions for opaque handles that are runtime
 * integers (streams, events, graphs, registration handles, addresses). */
static inline void* xptr(uintptr_t v) { return (void*)v; }
static inline cecollEvent_t xevent(uintptr_t v) { return (cecollEvent_t)v; }
static inline cecollGraph_t xgraph(uintptr_t v) { return (cecollGraph_t)v; }
static inline cudaStream_t xstream(uintptr_t v) { return (cudaStream_t)v; }

/* Static names of the backends for cecollGetBackend. */
static inline const char* xbackend_name(int k) {
  switch (k) {
  case 0: return "host";
  case 1: return "nvidia";
  case 2: return "amd";
  default: return "unknown";
  }
}

#endif
