/* test_gather.c: ncclGather and ncclLaunchCeColl with ncclFuncGather on
 * every dimension of the standard sweep (every root, NULL recvbuff on the
 * non-roots), plus Gather-specific cases. Options: see common.h. */
#include <string.h>

#include "common.h"

/* Registered send buffers with NULL recvbuff on the non-roots, for each
 * root, and the root in place. Gather decides its path from the send
 * buffer, which every rank has. */
static void extra(t_world* w, const t_opts* o, uint64_t* seed) {
  t_coll c;
  if (o->quick) return;
  for (int root = 0; root < w->n; root++) {
    memset(&c, 0, sizeof c);
    c.func = ncclFuncGather;
    c.dtype = ncclBfloat16;
    c.count = 257;
    c.root = root;
    c.inplace_ranks = (root % 2) ? (1ull << root) : 0;
    c.registered = 1;
    c.null_unused = 1;
    c.iters = 2;
    c.seed = ++*seed;
    t_set_case("Gather %s n=%d: registered, NULL recv on non-roots, root %d", w->threaded ? "threads" : "group", w->n, root);
    t_coll_run(w, &c);
  }
}

int main(int argc, char** argv) { return t_coll_main(ncclFuncGather, argc, argv, extra); }
