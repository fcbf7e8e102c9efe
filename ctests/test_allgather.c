/* test_allgather.c: ncclAllGather (and ncclLaunchCeColl with
 * ncclFuncAllGather) on every dimension of the standard sweep, plus
 * AllGather-specific cases. Options: see common.h (t_opts). */
#include <string.h>

#include "common.h"

/* Each rank in place except one, over counts that do not divide evenly
 * into the copy engines' sub-batches: the local copy slot is what differs
 * between in-place and out-of-place ranks (B9 counts it on every rank). */
static void extra(t_world* w, const t_opts* o, uint64_t* seed) {
  t_coll c;
  if (w->n < 2 || o->quick) return;
  for (int lone = 0; lone < w->n; lone += (w->n > 3 ? w->n - 1 : 1)) {
    memset(&c, 0, sizeof c);
    c.func = ncclFuncAllGather;
    c.dtype = ncclUint8;
    c.count = 4099;
    c.inplace_ranks = ~(1ull << lone) & ((w->n >= 64) ? ~0ull : ((1ull << w->n) - 1));
    c.seed = ++*seed;
    c.iters = 1;
    t_set_case("AllGather %s n=%d: all in place but rank %d", w->threaded ? "threads" : "group", w->n, lone);
    t_coll_run(w, &c);
  }
}

int main(int argc, char** argv) { return t_coll_main(ncclFuncAllGather, argc, argv, extra); }
