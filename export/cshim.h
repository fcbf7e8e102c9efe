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
#include "fwd_table.h"

/* The C side of a communicator handle: checked on every call. */
#define XCOMM_MAGIC 0x63656d6d6f63ULL /* "commec" */
#define XWIN_MAGIC 0x6e69776365ULL    /* "ecwin" */
#define XDEAD_MAGIC 0xdeadULL

/* real, at offset 16 in both, is the real library's handle the cecoll
 * one owns (0: none); the stubs of fwd_stubs.S read it there. calls, at
 * 24, counts each stub's calls that carried this communicator (the stubs
 * add to it; the INFO summary reads it). */
struct ncclComm {
  uint64_t magic;
  uintptr_t handle; /* cgo.Handle of the *comm.Comm */
  uintptr_t real;   /* the real ncclComm_t it owns */
  uint64_t calls[XR_COUNT];
};
_Static_assert(__builtin_offsetof(struct ncclComm, real) == 16, "fwd_stubs.S reads real at 16");
_Static_assert(__builtin_offsetof(struct ncclComm, calls) == 24, "fwd_stubs.S counts calls at 24");

struct ncclWindow_vidmem {
  uint64_t magic;
  uintptr_t handle; /* cgo.Handle of the *comm.Window */
  uintptr_t real;   /* the real ncclWindow_t it owns */
};

/* What a Go half returns instead of a result, for api.c to act on:
 * forward the call unchanged (a handle that is not cecoll's), or to the
 * real communicator the cecoll one owns (a collective routed there). */
#define XSENT_RAW ((ncclResult_t)-1000)
#define XSENT_REAL ((ncclResult_t)-1001)

/* forward.c */
extern __thread int xinside;
void xenv(void);
int xfwd_self(char* buf, size_t n);
int xfwd_bind_next(char* path, size_t n);
int xfwd_open(const char* path, char* err, size_t n);
void xfwd_unbind(void);
void xfwd_objects(char* buf, size_t n);
const char* xr_last_error(void);
int xr_version(void);
ncclResult_t xr_unique_id(void* id);
ncclResult_t xr_init_rank(uintptr_t* out, int n, void* id, int rank, void* cfg);
ncclResult_t xr_init_all(uintptr_t* out, int n, int* devs);
ncclResult_t xr_split(uintptr_t h, int color, int key, uintptr_t* out, void* cfg);
ncclResult_t xr_shrink(uintptr_t h, int* excl, int nexcl, uintptr_t* out, void* cfg, int flags);
ncclResult_t xr_finalize(uintptr_t h);
ncclResult_t xr_destroy(uintptr_t h);
ncclResult_t xr_abort(uintptr_t h);
ncclResult_t xr_async_error(uintptr_t h, int* state);
ncclResult_t xr_register(uintptr_t h, uintptr_t p, size_t size, uintptr_t* out);
ncclResult_t xr_deregister(uintptr_t h, uintptr_t reg);
ncclResult_t xr_window_register(uintptr_t h, uintptr_t p, size_t size, int flags, uintptr_t* out);
ncclResult_t xr_window_deregister(uintptr_t h, uintptr_t w);
ncclResult_t xr_send(uintptr_t buf, size_t count, int dt, int peer, uintptr_t h, uintptr_t s);
ncclResult_t xr_recv(uintptr_t buf, size_t count, int dt, int peer, uintptr_t h, uintptr_t s);
ncclResult_t xr_group_start(void);
ncclResult_t xr_group_end(void);
ncclResult_t xr_group_simulate_end(void* info);
ncclResult_t xfwd_refuse(int index, void* comm, int why) __attribute__((visibility("hidden")));
void xfwd_ensure(int index) __attribute__((visibility("hidden")));
extern int xsummary_armed;

/* fork.c: set in a child forked after the library loaded, which must not
 * enter Go; xfork_refuse sets the last error and answers ncclInvalidUsage. */
extern int xforked;
ncclResult_t xfork_refuse(const char* fn);

/* thread.c */
int xgettid(void);

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
