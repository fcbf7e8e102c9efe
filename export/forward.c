/* forward.c: the real NCCL/RCCL behind cecoll, as C reaches it.
 *
 * - The loader's primitives (dladdr, dlsym(RTLD_NEXT), dlopen with
 *   RTLD_LOCAL|RTLD_DEEPBIND|RTLD_NODELETE, dl_iterate_phdr), which
 *   internal/forward's Load puts in order (forward.go binds them).
 * - The thread-local mark "inside the real library": set around every call
 *   cecoll makes into it (XCALL), so that the real library's own calls to
 *   its exported names, when they land in cecoll (cecoll preloaded in front
 *   of the library the program linked), go straight back to it (api.c).
 * - xr_*: one wrapper per call internal/forward's Lib makes, each marked.
 * - xfwd_ensure and xfwd_refuse, which the stubs of fwd_stubs.S call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cshim.h"
#include "_cgo_export.h"

__thread int xinside;

/* ---- environment and loading, once ------------------------------------- */

static pthread_once_t xenv_once = PTHREAD_ONCE_INIT;
static void xenv_sync(void) { goexp_cecollSyncEnv(); }

/* The first call into cecoll copies the C environment into Go's (env.go)
 * and looks for the real library (internal/forward Load). */
void xenv(void) { pthread_once(&xenv_once, xenv_sync); }

/* Called by a stub whose jump entry is empty (fwd_stubs.S): the function's
 * first call, or the real library not looked up yet. Looks it up, logs the
 * function's route once (INFO: the calls that never enter Go are otherwise
 * invisible) and fills the entry, so that later calls jump straight
 * through. A forked child must not enter Go: fork.c emptied its slots, so
 * its stubs go on to xfwd_refuse. */
__attribute__((visibility("hidden"))) void xfwd_ensure(int index) {
  if (xforked || index < 0 || index >= XR_COUNT) return;
  xenv();
  void* f = __atomic_load_n(&xfwd_slot[index], __ATOMIC_ACQUIRE);
  if (f == NULL) return;
  goexp_xfwdNoteStub((char*)xfwd_name[index]);
  __atomic_store_n(&xfwd_jump[index], f, __ATOMIC_RELEASE);
}

/* Set once a communicator was made with INFO summaries on (summary.go): only
 * then does the exit hook enter Go, to print the communicators never
 * destroyed. Not in a forked child, which must not enter Go. */
int xsummary_armed;

static void xexit_summary(void) {
  if (xsummary_armed && !xforked) goexp_xfwdExitSummary();
}

__attribute__((constructor)) static void xexit_watch(void) { atexit(xexit_summary); }

/* ---- the loader ----------------------------------------------------------- */

static void* xself_addr(void) { return (void*)&xenv; }

int xfwd_self(char* buf, size_t n) {
  Dl_info info;
  if (dladdr(xself_addr(), &info) == 0 || info.dli_fname == NULL) return 0;
  snprintf(buf, n, "%s", info.dli_fname);
  return 1;
}

/* Whether p lies in cecoll's own object. */
static int xis_self(void* p) {
  Dl_info a, b;
  if (p == NULL || dladdr(p, &a) == 0 || dladdr(xself_addr(), &b) == 0) return 0;
  return a.dli_fbase == b.dli_fbase;
}

/* The object holding p, for the library's name. */
static void xpath_of(void* p, char* buf, size_t n) {
  Dl_info info;
  buf[0] = '\0';
  if (p != NULL && dladdr(p, &info) != 0 && info.dli_fname != NULL) snprintf(buf, n, "%s", info.dli_fname);
}

/* Fills the slots from handle h (RTLD_NEXT for the library after cecoll).
 * RCCL spells AlltoAll ncclAllToAll, NCCL only ncclAlltoAll: each stands
 * in for the other where one is missing. */
static void xbind(void* h) {
  memset(xfwd_jump, 0, sizeof xfwd_jump); /* each stub's next call fills its entry anew */
  for (int i = 0; i < XR_COUNT; i++) {
    void* f = dlsym(h, xfwd_name[i]);
    xfwd_slot[i] = xis_self(f) ? NULL : f;
  }
  if (xfwd_slot[XR_ncclAllToAll] == NULL) xfwd_slot[XR_ncclAllToAll] = xfwd_slot[XR_ncclAlltoAll];
  if (xfwd_slot[XR_ncclAlltoAll] == NULL) xfwd_slot[XR_ncclAlltoAll] = xfwd_slot[XR_ncclAllToAll];
}

/* Binds the library after cecoll in the lookup order, if it has the
 * functions a real NCCL must have. 1: bound, path filled. */
int xfwd_bind_next(char* path, size_t n) {
  void* v = dlsym(RTLD_NEXT, "ncclGetVersion");
  if (v == NULL || xis_self(v) || dlsym(RTLD_NEXT, "ncclCommInitRankConfig") == NULL) return 0;
  xpath_of(v, path, n);
  xbind(RTLD_NEXT);
  return 1;
}

/* Opens path and binds it; 0 on success, else err says why. The library
 * is never closed (RTLD_NODELETE; cecoll never dlcloses). */
int xfwd_open(const char* path, char* err, size_t n) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND | RTLD_NODELETE);
  if (h == NULL) {
    const char* e = dlerror();
    snprintf(err, n, "%s", e ? e : "dlopen failed");
    return -1;
  }
  void* v = dlsym(h, "ncclGetVersion");
  if (v == NULL || dlsym(h, "ncclCommInitRankConfig") == NULL) {
    snprintf(err, n, "it has no ncclGetVersion or ncclCommInitRankConfig: not an NCCL or RCCL");
    return -1;
  }
  if (xis_self(v)) {
    snprintf(err, n, "it is cecoll itself");
    return -1;
  }
  xbind(h);
  return 0;
}

void xfwd_unbind(void) {
  memset(xfwd_jump, 0, sizeof xfwd_jump);
  memset(xfwd_slot, 0, sizeof xfwd_slot);
}

struct xobjs {
  char* buf;
  size_t n, used;
};

static int xobj_cb(struct dl_phdr_info* info, size_t size, void* arg) {
  struct xobjs* o = arg;
  (void)size;
  if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0') return 0;
  size_t l = strlen(info->dlpi_name);
  if (o->used + l + 2 > o->n) return 1;
  memcpy(o->buf + o->used, info->dlpi_name, l);
  o->used += l;
  o->buf[o->used++] = '\n';
  o->buf[o->used] = '\0';
  return 0;
}

/* The paths of the loaded objects, newline-separated. */
void xfwd_objects(char* buf, size_t n) {
  struct xobjs o = {buf, n, 0};
  buf[0] = '\0';
  dl_iterate_phdr(xobj_cb, &o);
}

/* ---- calls into the real library, marked --------------------------------- */

#define XCALL(name, args) ({ xinside++; __typeof__(XREAL(name) args) r_ = XREAL(name) args; xinside--; r_; })
#define XHAVE(name) (xfwd_slot[XR_##name] != NULL)
#define XMISSING ((ncclResult_t)-1)

const char* xr_last_error(void) {
  if (!XHAVE(ncclGetLastError)) return "";
  const char* s = XCALL(ncclGetLastError, (NULL));
  return s ? s : "";
}

int xr_version(void) {
  int v = 0;
  if (!XHAVE(ncclGetVersion) || XCALL(ncclGetVersion, (&v)) != ncclSuccess) return 0;
  return v;
}

ncclResult_t xr_unique_id(void* id) {
  return XHAVE(ncclGetUniqueId) ? XCALL(ncclGetUniqueId, ((ncclUniqueId*)id)) : XMISSING;
}

ncclResult_t xr_init_rank(uintptr_t* out, int n, void* id, int rank, void* cfg) {
  ncclComm_t c = NULL;
  ncclResult_t r = XCALL(ncclCommInitRankConfig, (&c, n, *(ncclUniqueId*)id, rank, (ncclConfig_t*)cfg));
  *out = (uintptr_t)c;
  return r;
}

ncclResult_t xr_init_all(uintptr_t* out, int n, int* devs) {
  return XHAVE(ncclCommInitAll) ? XCALL(ncclCommInitAll, ((ncclComm_t*)out, n, devs)) : XMISSING;
}

ncclResult_t xr_split(uintptr_t h, int color, int key, uintptr_t* out, void* cfg) {
  ncclComm_t c = NULL;
  if (!XHAVE(ncclCommSplit)) return XMISSING;
  ncclResult_t r = XCALL(ncclCommSplit, ((ncclComm_t)h, color, key, &c, (ncclConfig_t*)cfg));
  *out = (uintptr_t)c;
  return r;
}

ncclResult_t xr_shrink(uintptr_t h, int* excl, int nexcl, uintptr_t* out, void* cfg, int flags) {
  ncclComm_t c = NULL;
  if (!XHAVE(ncclCommShrink)) return XMISSING;
  ncclResult_t r = XCALL(ncclCommShrink, ((ncclComm_t)h, excl, nexcl, &c, (ncclConfig_t*)cfg, flags));
  *out = (uintptr_t)c;
  return r;
}

ncclResult_t xr_finalize(uintptr_t h) { return XHAVE(ncclCommFinalize) ? XCALL(ncclCommFinalize, ((ncclComm_t)h)) : XMISSING; }
ncclResult_t xr_destroy(uintptr_t h) { return XHAVE(ncclCommDestroy) ? XCALL(ncclCommDestroy, ((ncclComm_t)h)) : XMISSING; }
ncclResult_t xr_abort(uintptr_t h) { return XHAVE(ncclCommAbort) ? XCALL(ncclCommAbort, ((ncclComm_t)h)) : XMISSING; }

ncclResult_t xr_async_error(uintptr_t h, int* state) {
  ncclResult_t s = ncclSuccess;
  if (!XHAVE(ncclCommGetAsyncError)) return XMISSING;
  ncclResult_t r = XCALL(ncclCommGetAsyncError, ((ncclComm_t)h, &s));
  *state = (int)s;
  return r;
}

ncclResult_t xr_register(uintptr_t h, uintptr_t p, size_t size, uintptr_t* out) {
  void* reg = NULL;
  if (!XHAVE(ncclCommRegister)) return XMISSING;
  ncclResult_t r = XCALL(ncclCommRegister, ((ncclComm_t)h, (void*)p, size, &reg));
  *out = (uintptr_t)reg;
  return r;
}

ncclResult_t xr_deregister(uintptr_t h, uintptr_t reg) {
  return XHAVE(ncclCommDeregister) ? XCALL(ncclCommDeregister, ((ncclComm_t)h, (void*)reg)) : XMISSING;
}

ncclResult_t xr_window_register(uintptr_t h, uintptr_t p, size_t size, int flags, uintptr_t* out) {
  ncclWindow_t w = NULL;
  if (!XHAVE(ncclCommWindowRegister)) return XMISSING;
  ncclResult_t r = XCALL(ncclCommWindowRegister, ((ncclComm_t)h, (void*)p, size, &w, flags));
  *out = (uintptr_t)w;
  return r;
}

ncclResult_t xr_window_deregister(uintptr_t h, uintptr_t w) {
  return XHAVE(ncclCommWindowDeregister) ? XCALL(ncclCommWindowDeregister, ((ncclComm_t)h, (ncclWindow_t)w))
                                         : XMISSING;
}

ncclResult_t xr_send(uintptr_t buf, size_t count, int dt, int peer, uintptr_t h, uintptr_t s) {
  return XHAVE(ncclSend) ? XCALL(ncclSend, ((const void*)buf, count, (ncclDataType_t)dt, peer, (ncclComm_t)h, (cudaStream_t)s))
                         : XMISSING;
}
ncclResult_t xr_recv(uintptr_t buf, size_t count, int dt, int peer, uintptr_t h, uintptr_t s) {
  return XHAVE(ncclRecv) ? XCALL(ncclRecv, ((void*)buf, count, (ncclDataType_t)dt, peer, (ncclComm_t)h, (cudaStream_t)s))
                         : XMISSING;
}
ncclResult_t xr_group_start(void) { return XHAVE(ncclGroupStart) ? XCALL(ncclGroupStart, ()) : XMISSING; }
ncclResult_t xr_group_end(void) { return XHAVE(ncclGroupEnd) ? XCALL(ncclGroupEnd, ()) : XMISSING; }
ncclResult_t xr_group_simulate_end(void* info) {
  return XHAVE(ncclGroupSimulateEnd) ? XCALL(ncclGroupSimulateEnd, ((ncclSimInfo_t*)info)) : XMISSING;
}

/* ---- the stubs' refusal ------------------------------------------------------ */

/* A stub found no real function to jump to, or a cecoll handle (why 0: the
 * communicator, 1: a window) that owns no real one. The caller gets the
 * refusal as this function's return value; void functions ignore it. */
__attribute__((visibility("hidden"))) ncclResult_t xfwd_refuse(int index, void* comm, int why) {
  if (index < 0 || index >= XR_COUNT) return ncclInternalError;
  if (xforked) return xfork_refuse(xfwd_name[index]);
  xenv();
  return goexp_xfwdRefuse((char*)xfwd_name[index], comm, why, xfwd_takes_comm[index]);
}

/* The refusal of a stub whose function does not return ncclResult_t (int,
 * a pointer, void, ncclTeam_t): logged and recorded as xfwd_refuse's, and
 * the caller gets zero. Sixteen zero bytes of integer class come back in
 * rax:rdx (x86-64) or x0:x1 (arm64), where any such value of up to 16
 * bytes is returned. */
struct xfwd_zero {
  uint64_t lo, hi;
};
__attribute__((visibility("hidden"))) struct xfwd_zero xfwd_refuse_zero(int index, void* comm, int why) {
  struct xfwd_zero z = {0, 0};
  (void)xfwd_refuse(index, comm, why);
  return z;
}
