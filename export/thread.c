/* thread.c: the calling thread's kernel id, for internal/osthread (env.go
 * installs it), cached in thread-local storage: a cgo call here costs a
 * fifth of the gettid syscall on the launch path (docs/performance.md,
 * "Thread ids from C thread-local storage"). A new thread starts with an
 * empty cache, so a reused id is never stale. */
#include <sys/syscall.h>
#include <unistd.h>

#include "cshim.h"

static __thread int xtid;

int xgettid(void) {
  if (xtid == 0) xtid = (int)syscall(SYS_gettid);
  return xtid;
}
