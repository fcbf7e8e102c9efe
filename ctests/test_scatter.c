/* test_scatter.c: ncclScatter and ncclLaunchCeColl with ncclFuncScatter on
 * every dimension of the standard sweep (every root, in place on the root
 * for each root: B12), plus Scatter-specific cases. Options: see common.h. */
#include <string.h>

#include "common.h"

/* In place on each root with registered buffers, and NULL sendbuff on
 * every non-root alongside a registered root buffer (B11: the ranks must
 * still agree on the path). */
static void extra(t_world* w, const t_opts* o, uint64_t* seed) {
  t_coll c;
  if (o->quick) return;
  for (int root = 0; root < w->n; root++) {
    memset(&c, 0, sizeof c);
    c.func = ncclFuncScatter;
    c.dtype = ncclFloat16;
    c.count = 257;
    c.root = root;
    c.inplace_ranks = 1ull << root;
    c.registered = 1;
    c.null_unused = 1;
    c.iters = 1;
    c.seed = ++*seed;
    t_set_case("Scatter %s n=%d: registered, in place on root %d, NULL elsewhere", w->threaded ? "threads" : "group", w->n, root);
    t_coll_run(w, &c);
  }
}

int main(int argc, char** argv) { return t_coll_main(ncclFuncScatter, argc, argv, extra); }
