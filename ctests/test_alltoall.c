/* test_alltoall.c: ncclAlltoAll, RCCL's ncclAllToAll and ncclLaunchCeColl
 * with ncclFuncAlltoAll on every dimension of the standard sweep, plus
 * AlltoAll-specific cases. Options: see common.h (t_opts). */
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* In place with blocks large enough that a naive push would overwrite
 * blocks still to be read (B13: NCCL itself refuses in-place AlltoAll;
 * cecoll must give the right result). */
static void extra(t_world* w, const t_opts* o, uint64_t* seed) {
  t_coll c;
  if (w->n < 2) return;
  for (int reg = 0; reg < 2; reg++) {
    memset(&c, 0, sizeof c);
    c.func = ncclFuncAlltoAll;
    c.dtype = ncclInt64;
    c.count = o->quick ? 1000 : 12289;
    c.inplace_ranks = (w->n >= 64) ? ~0ull : ((1ull << w->n) - 1);
    c.registered = reg;
    c.iters = 2;
    c.seed = ++*seed;
    t_set_case("AlltoAll %s n=%d: in place B13 reg=%d", w->threaded ? "threads" : "group", w->n, reg);
    t_coll_run(w, &c);
  }
}

/* RCCL's spelling must be the same function: one AllToAll on one rank. */
static void check_alltoall_spelling(void) {
  t_world w;
  void *send, *recv;
  int in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
  t_set_case("ncclAllToAll spelling");
  t_world_init_all(&w, 1, NULL);
  CHECK(cecollSetDevice(w.dev[0]));
  CHECK(ncclMemAlloc(&send, sizeof in));
  CHECK(ncclMemAlloc(&recv, sizeof out));
  CHECK(cecollMemcpy(send, in, sizeof in));
  CHECK(cecollMemset(recv, 0, sizeof out));
  EXPECT_RESULT(ncclAllToAll(send, recv, 4, ncclInt32, w.comm[0], w.stream[0]), ncclSuccess);
  CHECK(cecollStreamSynchronize(w.stream[0]));
  CHECK(cecollMemcpy(out, recv, sizeof out));
  EXPECT(memcmp(in, out, sizeof in) == 0, "ncclAllToAll moved {%d,%d,%d,%d}", out[0], out[1], out[2], out[3]);
  EXPECT_RESULT(pncclAllToAll(send, recv, 4, ncclInt32, w.comm[0], w.stream[0]), ncclSuccess);
  EXPECT_RESULT(pncclAlltoAll(send, recv, 4, ncclInt32, w.comm[0], w.stream[0]), ncclSuccess);
  CHECK(cecollStreamSynchronize(w.stream[0]));
  CHECK(ncclMemFree(send));
  CHECK(ncclMemFree(recv));
  t_world_destroy(&w);
}

int main(int argc, char** argv) {
  if (!getenv("CECOLL_TEST_SKIP_SPELLING")) check_alltoall_spelling();
  return t_coll_main(ncclFuncAlltoAll, argc, argv, extra);
}
