/* test_env.c: a variable the program sets after it started (setenv, or
 * Python's os.environ) must reach cecoll, as long as it is set before the
 * first call into the library. A Go shared library otherwise sees only the
 * environment of exec time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"
#include "nccl_ce.h"

int main(void) {
  int passed = 0, failed = 0;
  /* Before any call into Go: choose a backend that cannot exist. */
  setenv("CECOLL_BACKEND", "no-such-backend", 1);
  const char* name = NULL;
  ncclResult_t r = cecollGetBackend(&name);
  const char* last = ncclGetLastError(NULL);
  if (r == ncclSystemError && last && strstr(last, "no-such-backend")) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "FAIL: CECOLL_BACKEND set by setenv was not seen: result %d, last error '%s'\n", r,
            last ? last : "(null)");
  }
  printf("test_env: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
