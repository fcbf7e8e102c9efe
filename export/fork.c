/* fork.c: a child forked after cecoll loaded cannot use it. The Go runtime
 * the library carries keeps its threads in the parent, so a call that
 * enters Go in the child may hang forever; every entry point that would
 * (XENTER in api.c) is refused here, in C, with ncclInvalidUsage and a
 * last-error text saying what to do instead. ncclGetErrorString,
 * ncclGetVersion and ncclGetLastError stay usable: they answer from C.
 *
 * The mark is set by a pthread_atfork child handler, so the check costs a
 * load per call (getpid is a system call). The handler also forgets the
 * real library of forward mode: its stubs (fwd_stubs.S) then find no
 * function and end in xfwd_refuse, which refuses them the same way, so a
 * forwarded call is refused too rather than reaching a real NCCL whose
 * communicators the child cannot share with cecoll's. Only its
 * ncclGetVersion is kept, a query that touches nothing. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cshim.h"

int xforked;
static pid_t xload_pid;
/* Threads of the child share the last-error buffer; in the parent only Go
 * writes it, under its own lock. */
static pthread_mutex_t xfork_mu = PTHREAD_MUTEX_INITIALIZER;

static void xfork_child(void) {
  void* version = xfwd_slot[XR_ncclGetVersion]; /* the child reports what the parent did */
  xforked = 1;
  xfwd_unbind();
  xfwd_slot[XR_ncclGetVersion] = version;
}

__attribute__((constructor)) static void xfork_watch(void) {
  xload_pid = getpid();
  pthread_atfork(NULL, NULL, xfork_child);
}

/* fn: the refused function (a leading "p" of pncclX dropped). */
ncclResult_t xfork_refuse(const char* fn) {
  char text[512];
  if (strncmp(fn, "pnccl", 5) == 0) fn++;
  int n = snprintf(text, sizeof text,
                   "%s: this process (pid %d) was forked after cecoll was loaded (in pid %d), and cecoll cannot run "
                   "in a forked child: create communicators in processes started fresh: in Python use the 'spawn' "
                   "start method (torch.multiprocessing.spawn, multiprocessing.get_context(\"spawn\")); in C "
                   "posix_spawn or fork+exec",
                   fn, (int)getpid(), (int)xload_pid);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof text) n = sizeof text - 1;
  pthread_mutex_lock(&xfork_mu);
  xlast_set(text, (size_t)n);
  pthread_mutex_unlock(&xfork_mu);
  return ncclInvalidUsage;
}
