/*
 * matrix.c: the correctness matrix of cecoll's operations. One binary
 * generates the cells, runs each in a child process under a watchdog, and
 * judges it against one rule table.
 *
 * Dimensions of a cell (its name joins them with dots, e.g.
 * scatter.inplace.rootlast.sym.proc.graph.two.n4, or with a device per rank
 * scatter.inplace.rootlast.sym.proc.graph.two.n4.dev):
 *   collective  allgather alltoall scatter gather, sendrecv (nccl-tests'
 *               sendrecv: each rank sends to rank+1 and receives from rank-1,
 *               both in one group of its own; in place, from and into one
 *               buffer), broadcast (in place: ncclBcast, one buffer),
 *               alltoallv (ncclAllToAllv, RCCL's: pair (s, d) moves
 *               ((s + 2d + n) mod 3) * count / 2 elements, so the rank
 *               count sets an uneven split with zero pairs; each rank's
 *               send blocks packed by falling peer, its receive blocks by
 *               rising peer, 5 elements of poison between blocks; out of
 *               place only: ncclAllToAllv has no in-place form, and the
 *               matrix has no alltoallv.inplace cells) and
 *               sendrecv-mismatch (sendrecv whose last call of each round
 *               has rank 1 receive from rank 0 other than the count rank 0
 *               sends: 3/4 of it with an even rank count, count + count/4
 *               + 1 with an odd one; run with CECOLL_CHECK=1)
 *   place       oop, inplace (NCCL's in-place forms; Scatter and Gather use
 *               the in-place rooted layout of
 *               docs/protocol.md#the-in-place-rooted-layout on EVERY rank:
 *               one buffer buf per rank at the same offset, Scatter
 *               send=buf recv=buf+rank*count, Gather recv=buf
 *               send=buf+rank*count; the same layout for every buffer kind)
 *   root        root0, rootlast (Scatter, Gather and Broadcast only)
 *   buffers     unreg     ncclMemAlloc, not registered
 *               reg       ncclMemAlloc + ncclCommRegister
 *               win       ncclCommWindowRegister(NCCL_WIN_DEFAULT)
 *               sym       ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)
 *               mixed     rank r: unreg, reg, win for r%3 = 0, 1, 2 (legal);
 *                         window registration is collective, so when some
 *                         rank uses a window every other rank registers one
 *                         on a spare allocation it does not pass
 *               mixedsym  even ranks sym, odd ranks unreg (registering a
 *                         spare sym window): breaks NCCL's symmetric
 *                         registration contract; run with CECOLL_CHECK=1
 *   layout      group     one process, one thread, ncclCommInitAll, every
 *                         rank's call inside one ncclGroupStart/End
 *               threads   one process, ncclGetUniqueId + a thread per rank
 *                         (ncclCommInitRank), ungrouped calls
 *               proc      a process per rank (posix_spawn of this binary;
 *                         the id reaches each through its pipe)
 *               2proc     2 processes, ranks split between them, each one
 *                         thread issuing its ranks in a group (n >= 3)
 *   exec        eager; graph (each call captured on its stream with
 *               cecollStreamBeginCapture/EndCapture, replayed with
 *               cecollGraphLaunch -g times with new inputs, checked each time)
 *   streams     own (one per rank), two (each rank alternates its calls
 *               between two streams of its own, no sync in between), null
 *               (stream 0), shared (one stream for all ranks of a process)
 *   ranks       -r list (default 2,3,4)
 *   devices     dev0      every rank on device 0 (no component in the name:
 *                         the names of the matrix before this dimension)
 *               dev       rank r on device r (name ending .dev): group
 *                         passes devlist {0..n-1} to ncclCommInitAll,
 *                         threads sets each rank's device on its thread,
 *                         a rank process (proc, 2proc) sets its rank's
 *                         (modulo the device count) before its
 *                         ncclCommInitRank; each rank's streams and
 *                         allocations are made on its device. Copies and
 *                         flags then cross devices, and the engine leaves
 *                         its one-device paths (captured pairs). streams
 *                         =shared only with proc: a stream belongs to one
 *                         device, so one stream for the ranks of a process
 *                         on several devices is no cell. A dev cell needs
 *                         as many devices as ranks (the host device has
 *                         CECOLL_HOST_DEVICES, default 8; a GPU machine
 *                         cecollGetDeviceCount's): with fewer it is SKIP,
 *                         with the counts in the line, never run on shared
 *                         devices (that would be another cell: its ranks'
 *                         NULL streams, for one, would be one stream)
 *
 * Each cell makes -k calls (default 2) per round, each on its own buffers,
 * back to back, and -g rounds (eager) or replays (graph), default 2, with
 * new random inputs each time. The datatype follows from the cell's name
 * (float32, int8, bfloat16 or float64); the count is -c (default 1001).
 *
 * Outcomes: the first rule that matches decides (--rules prints the table):
 *   1 stream=null, exec=graph          capture-error: cecollStreamBeginCapture
 *                                      of the NULL stream fails (any error
 *                                      code, never a crash) in every process
 *   2 layout=threads, stream=shared,   shared-stream: two ranks of one process
 *     or stream=null and devices=dev0  on one stream in calls of separate
 *     (dev: a NULL stream per device)  threads (ungrouped, or the group of
 *                                      one rank of sendrecv, alltoallv and
 *                                      sendrecv-mismatch): a call returns
 *                                      ncclInvalidUsage, last error mentions
 *                                      "stream"
 *   3 buffers=mixedsym, layout not     contract: ncclInvalidUsage from a call or
 *     group, not sendrecv, alltoallv   ncclCommGetAsyncError whose last error
 *     or sendrecv-mismatch (no window  mentions "symmetric" (data unchecked,
 *     matters to a send or receive)    but no stream may fault after the
 *                                      abort); in a group every rank's buffers are
 *                                      known, windows or not: right data
 *   4 collective=sendrecv-mismatch     unmatched: ncclInvalidUsage from a call
 *                                      or ncclCommGetAsyncError whose last
 *                                      error names rank 1's receive #K (-k)
 *                                      from rank 0 with its bytes and the
 *                                      send's bytes: CECOLL_CHECK's "rank 1's
 *                                      receive #2 from rank 0 is 3000 bytes,
 *                                      rank 0's send #2 to rank 1 is 4004
 *                                      bytes", or, both sides in one group,
 *                                      ncclGroupEnd's "... is 3000 bytes, the
 *                                      matching ncclSend 4004 bytes" (data
 *                                      unchecked; no hang, no stream fault)
 *   5 otherwise                        data: every byte of every allocation
 *                                      is right: results, inputs, and the
 *                                      poison around them (128 guard bytes
 *                                      before each region, 64+ after, unused
 *                                      buffers and spare allocations whole)
 * (alltoallv's gaps and its zero pairs' places are poison, checked as
 * such.) (Ranks in different processes may all use the NULL stream: rule 2 is
 * about one process. The NULL stream is one per device: in dev0 cells all
 * ranks are on device 0, so one process's NULL stream is one stream; in
 * dev cells each rank's is its own device's, so threads+null is right
 * data.)
 *
 * Verdicts, one line per cell: PASS (right data), EXPECTED-ERROR-OK (the
 * rule's error came), FAIL (wrong data, another error, no error, a crash),
 * HANG (the watchdog, -t seconds, fired; in process layouts the cell kills
 * its rank processes and the runner kills the cell's process group), SKIP
 * (a dev cell with fewer devices than ranks: the runner, which never starts
 * the device runtime itself, asks a child for the count (--device-count)
 * once, only when the list holds a dev cell, and starts no process for
 * such a cell; the summary counts SKIP only where there were some).
 *
 * Usage:
 *   matrix --list all|pairwise [-r 2,3,4]      ids, names, expected outcomes
 *   matrix --run all|pairwise|NAME|ID[,...] [-j 2] [-b 1] [-t 30] [-o LOGDIR] [-K]
 *                   (a comma-separated mix: pairwise,NAME adds a cell)
 *   matrix --cell NAME[,NAME...]               cells in this process, in turn
 *   matrix --rules                             the outcome table
 *   matrix --device-count                      the backend's device count (what dev cells need)
 *   --shard K/N with --list or --run: every N-th selected cell from the K-th
 *   (0-based), to split a long list between runs
 *   --ops LIST with --list or --run: the cells of these collectives only
 *   (comma-separated names; pairwise is then chosen among them)
 *   --devices dev0|dev|dev0,dev with --list or --run: the cells of these
 *   device values only (default both; ids count the cells generated, and
 *   the dev0 cells come first, so theirs are the same either way)
 * Common options: -r ranks, -k calls, -g rounds, -c count, -t watchdog
 * seconds (CECOLL_MATRIX_WATCHDOG), -j parallel cells, -o log folder (default
 * matrix-logs beside the binary; logs of cells with the expected outcome are
 * deleted unless -K), -v print the log tail of unexpected cells.
 * pairwise: a greedy, deterministic subset in which every pair of values of
 * any two dimensions appears at least once, shown by a cell of the best
 * outcome class that can show it (right data before errors); chosen among
 * the dev0 cells and among the dev cells apart, so every such pair appears
 * on device 0 and again on devices of their own (the dev0 part is the
 * subset of the matrix before the device dimension).
 * --run exits non-zero on any FAIL or HANG. The cells inherit the
 * environment: CECOLL_CHECK=1 runs every cell under the check (a false
 * alarm in a right-data cell is then a FAIL), CECOLL_HOST_CHAOS=<seed> under
 * the host device's adversarial scheduler. MATRIX_TIMES=1 writes each
 * phase's start time into the cell's log (keep it with -K).
 *
 * Each cell runs in its own process (posix_spawn of this binary, never a
 * bare fork: the Go runtime is already running), in its own process group.
 * Ids: the cells of alltoallv and sendrecv-mismatch, which came later, take
 * theirs after every other cell's (dev0 first again), and pairwise covers
 * them apart, so every other cell keeps its id and the subset it had.
 *
 * -b B runs up to B cells of one layout and rank count (and CECOLL_CHECK)
 * one after another in one process and, in process layouts, in the same
 * rank processes: a GPU's context is made once, not per cell (about 0.5 s
 * on the H200, and serialised between processes), and the library is
 * exercised as a long-running program uses it, communicator after
 * communicator. A batch that hangs or dies gives that verdict to the cell
 * it was in; its later cells run again in a new process.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "mp_common.h"

/* ---- Dimensions ------------------------------------------------------------ */

/* D_DEV last: the pairwise cover pairs the dimensions before it (NPD) and is
 * chosen among each device value's cells apart (see pairwise_by_device). */
enum { D_COLL, D_PLACE, D_ROOT, D_BUF, D_LAYOUT, D_EXEC, D_STREAM, D_RANKS, D_DEV, ND };
#define NPD D_DEV
/* The collectives after C_BROADCAST came later: their cells take ids after
 * every earlier cell's (all_cells), so those keep theirs. */
enum { C_ALLGATHER, C_ALLTOALL, C_SCATTER, C_GATHER, C_SENDRECV, C_BROADCAST, C_ALLTOALLV, C_MISMATCH, NC };
#define C_FIRST_LATER C_ALLTOALLV
enum { P_OOP, P_INPLACE, NP };
enum { R_NONE, R_ZERO, R_LAST, NR };
enum { B_UNREG, B_REG, B_WIN, B_SYM, B_MIXED, B_MIXEDSYM, NBUF };
enum { L_GROUP, L_THREADS, L_PROC, L_2PROC, NL };
enum { E_EAGER, E_GRAPH, NE };
enum { S_OWN, S_TWO, S_NULL, S_SHARED, NS };
enum { V_DEV0, V_DEVS, NV }; /* every rank on device 0; rank r on device r */

static const char* const coll_names[NC] = {"allgather", "alltoall", "scatter", "gather",
                                           "sendrecv",  "broadcast", "alltoallv", "sendrecv-mismatch"};
static const char* const place_names[NP] = {"oop", "inplace"};
static const char* const root_names[NR] = {"-", "root0", "rootlast"};
static const char* const buf_names[NBUF] = {"unreg", "reg", "win", "sym", "mixed", "mixedsym"};
static const char* const layout_names[NL] = {"group", "threads", "proc", "2proc"};
static const char* const exec_names[NE] = {"eager", "graph"};
static const char* const stream_names[NS] = {"own", "two", "null", "shared"};
/* In a name: nothing for dev0 (today's names), a last component .dev for dev. */
static const char* const dev_names[NV] = {"dev0", "dev"};

#define MAX_RANKLIST 8
#define MAXN 16 /* ranks of one communicator */
#define MAXK 4  /* calls per round */
#define MAX_BATCH 64 /* cells per process (-b) */

typedef struct {
  int v[ND]; /* v[D_RANKS]: the rank count itself */
} cell;

/* Copies what fits of src (snprintf would warn of the truncation that is
 * wanted here). */
static void scopy(char* dst, size_t n, const char* src) {
  size_t k = strlen(src);
  if (k >= n) k = n - 1;
  memcpy(dst, src, k);
  dst[k] = '\0';
}

static int is_rooted(int coll) { return coll == C_SCATTER || coll == C_GATHER || coll == C_BROADCAST; }

/* Sends and receives (a group of them per rank): no window decides their
 * path, only their bytes. */
static int is_p2p(int coll) { return coll == C_SENDRECV || coll == C_ALLTOALLV || coll == C_MISMATCH; }

/* Cells that run under CECOLL_CHECK=1 (the library reads it when it loads):
 * the contract cells, and the unmatched sends and receives. */
static int needs_check(const cell* c) { return c->v[D_BUF] == B_MIXEDSYM || c->v[D_COLL] == C_MISMATCH; }

static void cell_name(const cell* c, char* out, size_t n) {
  char root[16] = "";
  if (c->v[D_ROOT] != R_NONE) snprintf(root, sizeof root, ".%s", root_names[c->v[D_ROOT]]);
  snprintf(out, n, "%s.%s%s.%s.%s.%s.%s.n%d%s", coll_names[c->v[D_COLL]], place_names[c->v[D_PLACE]], root,
           buf_names[c->v[D_BUF]], layout_names[c->v[D_LAYOUT]], exec_names[c->v[D_EXEC]],
           stream_names[c->v[D_STREAM]], c->v[D_RANKS], c->v[D_DEV] == V_DEVS ? ".dev" : "");
}

static int lookup(const char* tok, size_t len, const char* const* names, int n) {
  for (int i = 0; i < n; i++)
    if (strlen(names[i]) == len && strncmp(tok, names[i], len) == 0) return i;
  return -1;
}

static int cell_valid(const cell* c) {
  if (is_rooted(c->v[D_COLL]) != (c->v[D_ROOT] != R_NONE)) return 0;
  /* ncclAllToAllv has no in-place form (RCCL's neither): a receive may not
   * share bytes with a send. */
  if (c->v[D_COLL] == C_ALLTOALLV && c->v[D_PLACE] == P_INPLACE) return 0;
  if (c->v[D_RANKS] < 2 || c->v[D_RANKS] > MAXN) return 0;
  /* 2 processes of one rank each is the proc layout. */
  if (c->v[D_LAYOUT] == L_2PROC && c->v[D_RANKS] < 3) return 0;
  /* A stream belongs to one device: one stream for all ranks of a process
   * exists only where that process has one rank (proc) once the ranks are
   * on devices of their own. */
  if (c->v[D_DEV] == V_DEVS && c->v[D_STREAM] == S_SHARED && c->v[D_LAYOUT] != L_PROC) return 0;
  return 1;
}

/* Parses a cell name; 0 on success. */
static int cell_parse(const char* s, cell* c) {
  const char* tok[10];
  size_t len[10];
  /* collective.place[.root].buffers.layout.exec.streams.nN[.dev] */
  int nt = 0, k = 0;
  const char* p = s;
  memset(c, 0, sizeof *c);
  while (nt < 10) {
    size_t m = strcspn(p, ".");
    tok[nt] = p, len[nt] = m, nt++;
    if (!p[m]) break;
    p += m + 1;
  }
  c->v[D_DEV] = V_DEV0;
  if (nt >= 8 && lookup(tok[nt - 1], len[nt - 1], dev_names + V_DEVS, 1) == 0) c->v[D_DEV] = V_DEVS, nt--;
  if (nt != 7 && nt != 8) return -1;
  if ((c->v[D_COLL] = lookup(tok[k], len[k], coll_names, NC)) < 0) return -1;
  k++;
  if ((c->v[D_PLACE] = lookup(tok[k], len[k], place_names, NP)) < 0) return -1;
  k++;
  c->v[D_ROOT] = R_NONE;
  if (nt == 8) {
    if ((c->v[D_ROOT] = lookup(tok[k], len[k], root_names, NR)) <= 0) return -1;
    k++;
  }
  if ((c->v[D_BUF] = lookup(tok[k], len[k], buf_names, NBUF)) < 0) return -1;
  k++;
  if ((c->v[D_LAYOUT] = lookup(tok[k], len[k], layout_names, NL)) < 0) return -1;
  k++;
  if ((c->v[D_EXEC] = lookup(tok[k], len[k], exec_names, NE)) < 0) return -1;
  k++;
  if ((c->v[D_STREAM] = lookup(tok[k], len[k], stream_names, NS)) < 0) return -1;
  k++;
  if (len[k] < 2 || tok[k][0] != 'n') return -1;
  {
    char num[16];
    char* end;
    long v;
    if (len[k] - 1 >= sizeof num) return -1;
    memcpy(num, tok[k] + 1, len[k] - 1);
    num[len[k] - 1] = '\0';
    v = strtol(num, &end, 10);
    if (*end) return -1;
    c->v[D_RANKS] = (int)v;
  }
  return cell_valid(c) ? 0 : -1;
}

/* ---- The rule table ---------------------------------------------------------- */

/* In the order of their classes: a pair of the pairwise cover is shown by
 * a cell of the first class that can show it. */
typedef enum { X_DATA, X_CONTRACT, X_MISMATCH, X_SHARED_STREAM, X_CAPTURE, NX } expect_t;

static const struct rule {
  expect_t x;
  const char* outcome; /* as --list prints it */
  const char* when;
  const char* want;
  ncclResult_t code;  /* the error code the rule names; ncclSuccess: any error */
  const char* text;   /* what the last-error text must mention (case-insensitive) */
} rules[NX] = {
    /* In the order they are tried (see expected()). */
    [X_CAPTURE] = {X_CAPTURE, "capture-error", "stream=null and exec=graph",
                   "cecollStreamBeginCapture of the NULL stream fails (an error, not a crash) in every process",
                   ncclSuccess, NULL},
    [X_SHARED_STREAM] = {X_SHARED_STREAM, "shared-stream-error", "layout=threads, stream=shared|null+dev0",
                         "two ranks of one process on one stream in calls of separate threads: a call returns "
                         "ncclInvalidUsage, last error mentions \"stream\"",
                         ncclInvalidUsage, "stream"},
    [X_CONTRACT] = {X_CONTRACT, "contract-error", "buffers=mixedsym, layout not group, not sends/receives (CECOLL_CHECK=1)",
                    "ncclInvalidUsage from a call or ncclCommGetAsyncError, last error mentions \"symmetric\"; "
                    "data not checked",
                    ncclInvalidUsage, "symmetric"},
    [X_MISMATCH] = {X_MISMATCH, "unmatched-error", "collective=sendrecv-mismatch (CECOLL_CHECK=1)",
                    "ncclInvalidUsage from a call or ncclCommGetAsyncError, last error naming rank 1's receive #k "
                    "from rank 0, rank 0's send, and both sizes; data not checked",
                    ncclInvalidUsage, "'s receive #"},
    [X_DATA] = {X_DATA, "data", "otherwise",
                "right data: every byte of every allocation (results, inputs, guard and poison bytes)", ncclSuccess,
                NULL},
};

static expect_t expected(const cell* c) {
  if (c->v[D_STREAM] == S_NULL && c->v[D_EXEC] == E_GRAPH) return X_CAPTURE;
  /* The NULL stream is one per device: one stream for the ranks of a
   * process only where they share a device. */
  if (c->v[D_LAYOUT] == L_THREADS &&
      ((c->v[D_STREAM] == S_NULL && c->v[D_DEV] == V_DEV0) || c->v[D_STREAM] == S_SHARED))
    return X_SHARED_STREAM;
  /* Sends and receives route and plan by their bytes, never their windows. */
  if (c->v[D_BUF] == B_MIXEDSYM && c->v[D_LAYOUT] != L_GROUP && !is_p2p(c->v[D_COLL])) return X_CONTRACT;
  if (c->v[D_COLL] == C_MISMATCH) return X_MISMATCH;
  return X_DATA;
}

static void print_rules(void) {
  static const expect_t order[NX] = {X_CAPTURE, X_SHARED_STREAM, X_CONTRACT, X_MISMATCH, X_DATA};
  printf("outcome rules, the first that matches decides:\n");
  for (int i = 0; i < NX; i++) {
    const struct rule* r = &rules[order[i]];
    printf("  %d  %-40s %-20s %s\n", i + 1, r->when, r->outcome, r->want);
  }
  printf("devices: dev0 cells put every rank on device 0; dev cells (names ending .dev) rank r on device r,\n"
         "and are SKIPPED where the backend has fewer devices than ranks (cecollGetDeviceCount)\n");
}

/* ---- Options ------------------------------------------------------------------ */

static struct {
  int ranks[MAX_RANKLIST];
  int nranks;
  int calls;     /* -k */
  int rounds;    /* -g: eager rounds, graph replays */
  size_t count;  /* -c */
  int watchdog;  /* -t seconds */
  int jobs;      /* -j */
  const char* logdir;
  int keep_logs; /* -K */
  int batch;     /* -b: cells per process */
  int verbose;   /* -v */
  int shard_k, shard_n; /* --shard K/N: every N-th selected cell from the K-th */
  unsigned ops;         /* --ops: a bit per collective generated */
  unsigned devs;        /* --devices: a bit per device value generated */
} opt;

static const char* self_path;

static void usage(void) {
  fprintf(stderr,
          "usage: %s --list all|pairwise | --run all|pairwise|NAME|ID[,...] | --cell NAME[,...] | --rules\n"
          "       [--shard K/N] [--ops allgather,...] [--devices dev0,dev] [-r 2,3,4] [-k calls] [-g rounds] [-c count] [-t watchdog_s] [-j jobs] [-b batch]\n"
          "       [-o logdir] [-K] [-v]\n",
          self_path);
  exit(2);
}

/* --ops: the collectives whose cells are generated (default: every one). */
static void set_ops(const char* s) {
  opt.ops = 0;
  while (s && *s) {
    size_t m = strcspn(s, ",");
    int c = lookup(s, m, coll_names, NC);
    if (c < 0) usage();
    opt.ops |= 1u << c;
    s += m + (s[m] == ',');
  }
  if (opt.ops == 0) usage();
}

/* --devices: the device values whose cells are generated (default: both). */
static void set_devs(const char* s) {
  opt.devs = 0;
  while (s && *s) {
    size_t m = strcspn(s, ",");
    int d = lookup(s, m, dev_names, NV);
    if (d < 0) usage();
    opt.devs |= 1u << d;
    s += m + (s[m] == ',');
  }
  if (opt.devs == 0) usage();
}

static void set_ranks(const char* s) {
  opt.nranks = 0;
  while (s && *s) {
    char* end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 2 || v > MAXN || opt.nranks == MAX_RANKLIST) usage();
    opt.ranks[opt.nranks++] = (int)v;
    if (*end && *end != ',') usage();
    s = *end ? end + 1 : end;
  }
  if (opt.nranks == 0) usage();
}

/* ---- Cells and the pairwise subset -------------------------------------------- */

/* The later collectives' cells (alltoallv, sendrecv-mismatch) are a second
 * generation: ids after every earlier cell's, and a pairwise cover of
 * their own. */
static int later(const cell* c) { return c->v[D_COLL] >= C_FIRST_LATER; }

/* Every valid cell for the rank list, in a fixed order (the ids): the dev0
 * cells first, so their ids are those of the matrix before the device
 * dimension; the later collectives' after all of those, dev0 first again,
 * so no earlier cell's id moved. */
static int all_cells(cell** out) {
  int cap = 1024, n = 0;
  cell* v = (cell*)malloc((size_t)cap * sizeof *v);
  REQUIRE(v != NULL);
  for (int gen = 0; gen < 2; gen++)
    for (int dv = 0; dv < NV; dv++)
      for (int ri = 0; ri < opt.nranks && (opt.devs >> dv & 1); ri++)
        for (int co = gen ? C_FIRST_LATER : 0; co < (gen ? NC : C_FIRST_LATER); co++)
          for (int pl = 0; pl < NP && (opt.ops >> co & 1); pl++)
            for (int ro = 0; ro < NR; ro++)
              for (int bu = 0; bu < NBUF; bu++)
                for (int la = 0; la < NL; la++)
                  for (int ex = 0; ex < NE; ex++)
                    for (int st = 0; st < NS; st++) {
                      cell c = {{co, pl, ro, bu, la, ex, st, opt.ranks[ri], dv}};
                      if (!cell_valid(&c)) continue;
                      if (n == cap) {
                        cap *= 2;
                        v = (cell*)realloc(v, (size_t)cap * sizeof *v);
                        REQUIRE(v != NULL);
                      }
                      v[n++] = c;
                    }
  *out = v;
  return n;
}

static int card(int d) {
  static const int cards[ND] = {NC, NP, NR, NBUF, NL, NE, NS, MAX_RANKLIST, NV};
  return cards[d];
}

/* The value index of dimension d (ranks: the position in the rank list). */
static int val(const cell* c, int d) {
  if (d != D_RANKS) return c->v[d];
  for (int i = 0; i < opt.nranks; i++)
    if (opt.ranks[i] == c->v[D_RANKS]) return i;
  return 0;
}

/* Pair (d1=a, d2=b), d1 < d2, as one index. */
static int pair_base[ND][ND];
static int npairs;

static void pair_index_init(void) {
  npairs = 0;
  for (int i = 0; i < NPD; i++)
    for (int j = i + 1; j < NPD; j++) {
      pair_base[i][j] = npairs;
      npairs += card(i) * card(j);
    }
}

static int pair_of(const cell* c, int i, int j) { return pair_base[i][j] + val(c, i) * card(j) + val(c, j); }

/* Greedy pairwise cover. Each pair that some cell holds is assigned the
 * best outcome class (data first) among the cells that hold it, and must
 * be shown by a cell of that class: a pair a right-data cell can show is
 * never left to an error cell that checks nothing. Each step takes the
 * cell covering the most uncovered pairs, the first one on ties, so the
 * subset is the same on every run. Returns the chosen ids, in id order. */
static int pairwise(const cell* cells, int ncells, int* chosen) {
  int* cls;
  char* covered;
  char* taken;
  int nchosen = 0, left = 0;
  pair_index_init();
  cls = (int*)malloc((size_t)npairs * sizeof *cls);
  covered = (char*)calloc((size_t)npairs, 1);
  taken = (char*)calloc((size_t)ncells, 1);
  REQUIRE(cls && covered && taken);
  for (int p = 0; p < npairs; p++) cls[p] = NX;
  for (int k = 0; k < ncells; k++) {
    int x = (int)expected(&cells[k]);
    for (int i = 0; i < NPD; i++)
      for (int j = i + 1; j < NPD; j++) {
        int p = pair_of(&cells[k], i, j);
        if (x < cls[p]) cls[p] = x;
      }
  }
  for (int p = 0; p < npairs; p++) left += cls[p] < NX;
  while (left > 0) {
    int best = -1, best_gain = 0;
    for (int k = 0; k < ncells; k++) {
      int x = (int)expected(&cells[k]), gain = 0;
      if (taken[k]) continue;
      for (int i = 0; i < NPD; i++)
        for (int j = i + 1; j < NPD; j++) {
          int p = pair_of(&cells[k], i, j);
          gain += !covered[p] && cls[p] == x;
        }
      if (gain > best_gain) best = k, best_gain = gain;
    }
    REQUIRE(best >= 0);
    taken[best] = 1;
    for (int i = 0; i < NPD; i++)
      for (int j = i + 1; j < NPD; j++) {
        int p = pair_of(&cells[best], i, j);
        if (!covered[p] && cls[p] == (int)expected(&cells[best])) covered[p] = 1, left--;
      }
  }
  for (int k = 0; k < ncells; k++)
    if (taken[k]) chosen[nchosen++] = k;
  free(cls);
  free(covered);
  free(taken);
  return nchosen;
}

/* The pairwise subset of each device value's cells, joined: the dev0 cells'
 * is the subset of the matrix before the device dimension, and the dev
 * cells get a cover of their own (every pair of the other dimensions on
 * devices of their own), not just each dimension's values once beside
 * .dev. The later collectives' cells are covered apart the same way, so
 * the earlier cells' subset is what it was before them. In id order (the
 * parts' ids are ranges in this order). */
static int pairwise_by_device(const cell* cells, int ncells, int* chosen) {
  cell* sub = (cell*)malloc(((size_t)ncells + 1) * sizeof *sub);
  int* ids = (int*)malloc(((size_t)ncells + 1) * sizeof *ids);
  int* got = (int*)malloc(((size_t)ncells + 1) * sizeof *got);
  int nchosen = 0;
  REQUIRE(sub && ids && got);
  for (int part = 0; part < 2 * NV; part++) {
    int m = 0, k;
    for (int i = 0; i < ncells; i++)
      if (later(&cells[i]) == part / NV && cells[i].v[D_DEV] == part % NV) sub[m] = cells[i], ids[m++] = i;
    if (m == 0) continue;
    k = pairwise(sub, m, got);
    for (int i = 0; i < k; i++) chosen[nchosen++] = ids[got[i]];
  }
  free(sub);
  free(ids);
  free(got);
  return nchosen;
}

/* ---- What a rank saw ------------------------------------------------------------ */

#define MAX_EV 4

typedef struct {
  char where[16]; /* init, register, capture, call, launch, sync, async, teardown */
  int code;
  char text[320];
} event;

enum { OB_NULL_CAPTURED = 1 }; /* cecollStreamBeginCapture(NULL) succeeded */

typedef struct {
  int have; /* reported (process layouts) */
  int done; /* went through the whole flow */
  int flags;
  size_t bad; /* wrong bytes */
  int nev;
  event ev[MAX_EV];
} obs;

/* ---- One process's ranks of a cell ------------------------------------------------ */

enum { M_GROUP, M_SINGLE, M_THREADS };
enum { K_UNREG, K_REG, K_WIN, K_SYM };
/* A rank's allocations per call: the recv-side and send-side buffers, and
 * spares that carry a window the rank registers but never passes. */
enum { A_R, A_S, A_SPARE_R, A_SPARE_S, NA };
#define GUARD_BEFORE 128

typedef struct {
  cell c;
  expect_t x;
  char name[96];
  int n, first, nlocal, mode;
  int K, rounds;
  size_t count, esz, cb, alloc;
  size_t span; /* bytes of a rank's largest region: n*cb, an alltoallv's blocks and gaps */
  ncclDataType_t dt;
  uint64_t seed;
  ncclUniqueId id;
  ncclComm_t comm[MAXN];
  int dev[MAXN];   /* the device of each local rank */
  int kind[MAXN];  /* K_* of each local rank */
  int spare[MAXN]; /* window flags of its spare windows, -1: none */
  int nslots;
  cudaStream_t slot[2 * MAXN];
  int slot_dev[2 * MAXN];   /* the device a slot's stream belongs to */
  char slot_null[2 * MAXN]; /* the NULL stream (of slot_dev's device) */
  int slot_of[MAXN][2];
  void* mem[MAXN][MAXK][NA];
  ncclWindow_t win[MAXN][MAXK][NA];
  void* reg[MAXN][MAXK][NA];
  unsigned char* want[MAXN][MAXK][NA];
  cecollGraph_t graph[2 * MAXN][MAXK];
  int cap_ok[2 * MAXN][MAXK];
  unsigned char *tmp, *scratch;
  obs ob[MAXN];
  atomic_int failed; /* some rank saw an error: the flow stops */
  t_barrier* bar;
  pthread_t syncer;
  int syncer_live;
  atomic_int sync_done;
  ncclResult_t sync_res;
  char sync_text[256];
} run_t;

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;

static void phase(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void phase(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  t_set_case("%s", buf);
  mp_tell_parent("PHASE %s", buf);
  /* MATRIX_TIMES=1: where a cell's time goes (the GPU's cells take seconds
   * where the host device's take milliseconds). */
  static double t0;
  static int times = -1;
  if (times < 0) times = getenv("MATRIX_TIMES") != NULL, t0 = mp_now();
  if (times) fprintf(stderr, "matrix: +%.3f s %s\n", mp_now() - t0, buf);
}

/* Records an error of local rank l and stops the flow. */
static void ev(run_t* R, int l, const char* where, ncclResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void ev(run_t* R, int l, const char* where, ncclResult_t code, const char* fmt, ...) {
  obs* o = &R->ob[l];
  char text[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  for (char* p = text; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  pthread_mutex_lock(&ev_mu);
  if (o->nev < MAX_EV) {
    event* e = &o->ev[o->nev++];
    snprintf(e->where, sizeof e->where, "%s", where);
    e->code = (int)code;
    snprintf(e->text, sizeof e->text, "%s", text);
  }
  fprintf(stderr, "EVENT rank %d %s: %d (%s): %s\n", R->first + l, where, (int)code, ncclGetErrorString(code), text);
  fflush(stderr);
  mp_tell_parent("NOTE rank %d %s %s: %.300s", R->first + l, where, ncclGetErrorString(code), text);
  pthread_mutex_unlock(&ev_mu);
  atomic_store(&R->failed, 1);
}

/* The last-error text of comm; where it is empty (some errors are only
 * kept process-wide) the NULL communicator's too, marked as such. */
static const char* last_error(ncclComm_t comm, char* buf, size_t n) {
  const char* t = comm ? ncclGetLastError(comm) : NULL;
  const char* g = ncclGetLastError(NULL);
  if (t && *t) return t;
  snprintf(buf, n, "(ncclGetLastError(comm) empty; ncclGetLastError(NULL): %s)", g && *g ? g : "empty");
  return buf;
}

static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t hash_name(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int root_of(const run_t* R) { return R->c.v[D_ROOT] == R_LAST ? R->n - 1 : 0; }

/* alltoallv: pair (s, d) moves ((s + 2d + n) mod 3) * count / 2 elements,
 * so each rank count has its own uneven split with zero pairs (n = 3: the
 * self pairs too). A rank packs its send blocks by falling peer, its
 * receive blocks by rising peer, V_GAP elements apart: a write past a
 * block lands in a gap (poison, checked), never in a block that a later
 * copy rewrites. */
#define V_GAP 5

static size_t v_count(const run_t* R, int s, int d) { return (size_t)((s + 2 * d + R->n) % 3) * R->count / 2; }

/* Displacement (elements) of rank s's send block to d. */
static size_t v_sdispl(const run_t* R, int s, int d) {
  size_t at = 0;
  for (int p = R->n - 1; p > d; p--) at += v_count(R, s, p) + V_GAP;
  return at;
}

/* Displacement (elements) of rank r's receive block from s. */
static size_t v_rdispl(const run_t* R, int r, int s) {
  size_t at = 0;
  for (int p = 0; p < s; p++) at += v_count(R, p, r) + V_GAP;
  return at;
}

/* Bytes from a rank's first send block to the end of its last. */
static size_t v_send_span(const run_t* R, int s) { return (v_sdispl(R, s, 0) + v_count(R, s, 0)) * R->esz; }

/* sendrecv-mismatch: rank 1's receive from rank 0 in the last call of each
 * round (in a graph the last call captured): 3/4 of the count with an even
 * rank count, the receiver short of the send; count + count/4 + 1 with an
 * odd one, the receiver waiting for bytes that never come. The k-th
 * transfer of a pair is #k to the check (from 1): this one is #K. */
static int mismatched(const run_t* R, int r, int k) { return R->c.v[D_COLL] == C_MISMATCH && r == 1 && k == R->K - 1; }

static size_t mismatch_count(size_t count, int n) { return n % 2 ? count + count / 4 + 1 : count * 3 / 4; }

/* Input bytes of rank r (what its send buffer holds). */
static size_t in_bytes(const run_t* R, int r) {
  switch (R->c.v[D_COLL]) {
    case C_ALLGATHER: return R->cb;
    case C_ALLTOALL: return (size_t)R->n * R->cb;
    case C_SCATTER: return r == root_of(R) ? (size_t)R->n * R->cb : 0;
    case C_BROADCAST: return r == root_of(R) ? R->cb : 0;
    case C_ALLTOALLV: return v_send_span(R, r); /* the blocks are at their displacements, the gaps poison */
    default: return R->cb;
  }
}

/* Rank r's input for call k of round t: every process computes every
 * peer's from the same seed. */
static void gen_input(const run_t* R, int r, int k, int t, unsigned char* out) {
  uint64_t st = mix64(R->seed ^ mix64((uint64_t)r * 1000003u + (uint64_t)k * 7919u + (uint64_t)t * 104729u));
  t_fill_random(out, in_bytes(R, r), &st);
}

/* Where rank r's send and recv regions are: allocation and offset. */
static void regions(const run_t* R, int r, int* sb, size_t* so, int* rb, size_t* ro) {
  size_t cb = R->cb;
  *sb = A_S, *so = GUARD_BEFORE, *rb = A_R, *ro = GUARD_BEFORE;
  if (R->c.v[D_PLACE] == P_OOP) return;
  *sb = A_R;
  switch (R->c.v[D_COLL]) {
    case C_ALLGATHER: *so = GUARD_BEFORE + (size_t)r * cb; break;
    case C_ALLTOALL: case C_SENDRECV: case C_MISMATCH: case C_BROADCAST: break;
    case C_SCATTER: *ro = GUARD_BEFORE + (size_t)r * cb; break; /* send = buf, recv = buf + r*count */
    default: *so = GUARD_BEFORE + (size_t)r * cb; break;         /* Gather: recv = buf, send = buf + r*count */
  }
}

/* Poison and this round's inputs, uploaded; then the expected contents. */
static void prepare(run_t* R, int t) {
  int n = R->n, root = root_of(R);
  size_t cb = R->cb;
  for (int l = 0; l < R->nlocal; l++) {
    int r = R->first + l, sb, rb;
    size_t so, ro;
    regions(R, r, &sb, &so, &rb, &ro);
    CHECK(cecollSetDevice(R->dev[l])); /* copies after the rank's device's NULL stream */
    for (int k = 0; k < R->K; k++) {
      unsigned char* out;
      for (int a = 0; a < NA; a++)
        if (R->mem[l][k][a]) memset(R->want[l][k][a], T_POISON, R->alloc);
      if (in_bytes(R, r)) gen_input(R, r, k, t, R->want[l][k][sb] + so);
      if (R->c.v[D_COLL] == C_ALLTOALLV) { /* only the blocks are input: the gaps stay poison */
        unsigned char* in = R->want[l][k][sb] + so;
        memcpy(R->tmp, in, in_bytes(R, r));
        memset(in, T_POISON, in_bytes(R, r));
        for (int d = 0; d < n; d++)
          memcpy(in + v_sdispl(R, r, d) * R->esz, R->tmp + v_sdispl(R, r, d) * R->esz, v_count(R, r, d) * R->esz);
      }
      for (int a = 0; a < NA; a++)
        if (R->mem[l][k][a]) CHECK(cecollMemcpy(R->mem[l][k][a], R->want[l][k][a], R->alloc));
      out = R->want[l][k][rb] + ro;
      switch (R->c.v[D_COLL]) {
        case C_ALLGATHER:
          for (int i = 0; i < n; i++) gen_input(R, i, k, t, out + (size_t)i * cb);
          break;
        case C_ALLTOALL:
          for (int i = 0; i < n; i++) {
            gen_input(R, i, k, t, R->tmp);
            memcpy(out + (size_t)i * cb, R->tmp + (size_t)r * cb, cb);
          }
          break;
        case C_SCATTER:
          gen_input(R, root, k, t, R->tmp);
          memcpy(out, R->tmp + (size_t)r * cb, cb);
          break;
        case C_SENDRECV: case C_MISMATCH: gen_input(R, (r + n - 1) % n, k, t, out); break;
        case C_ALLTOALLV:
          for (int i = 0; i < n; i++) {
            gen_input(R, i, k, t, R->tmp);
            memcpy(out + v_rdispl(R, r, i) * R->esz, R->tmp + v_sdispl(R, i, r) * R->esz, v_count(R, i, r) * R->esz);
          }
          break;
        case C_BROADCAST: gen_input(R, root, k, t, out); break;
        default:
          if (r == root)
            for (int i = 0; i < n; i++) gen_input(R, i, k, t, out + (size_t)i * cb);
          break;
      }
    }
  }
}

/* Reads every allocation back: results, inputs, guards, spares. */
static void verify(run_t* R, const char* when) {
  for (int l = 0; l < R->nlocal; l++) {
    CHECK(cecollSetDevice(R->dev[l]));
    for (int k = 0; k < R->K; k++)
      for (int a = 0; a < NA; a++) {
        char what[160];
        static const char* const an[NA] = {"recv-side", "send-side", "spare (recv-side)", "spare (send-side)"};
        if (!R->mem[l][k][a]) continue;
        CHECK(cecollMemcpy(R->scratch, R->mem[l][k][a], R->alloc));
        snprintf(what, sizeof what, "%s: rank %d call %d %s allocation", when, R->first + l, k, an[a]);
        R->ob[l].bad += t_compare(R->scratch, R->want[l][k][a], R->alloc, what);
      }
  }
}

static cudaStream_t stream_of(const run_t* R, int l, int k) { return R->slot[R->slot_of[l][k % 2]]; }

/* nccl-tests' sendrecv: to rank+1, from rank-1, in one group of the rank
 * (nested in the layout's group where it has one); call k of
 * sendrecv-mismatch with rank 1's receive off its send's count. */
static ncclResult_t sendrecv(run_t* R, int l, int k, const void* send, void* recv, cudaStream_t st) {
  int r = R->first + l, n = R->n;
  size_t rcount = mismatched(R, r, k) ? mismatch_count(R->count, n) : R->count;
  ncclResult_t res = ncclGroupStart(), end;
  if (res != ncclSuccess) return res;
  res = ncclSend(send, R->count, R->dt, (r + 1) % n, R->comm[l], st);
  if (res == ncclSuccess) res = ncclRecv(recv, rcount, R->dt, (r + n - 1) % n, R->comm[l], st);
  end = ncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

static ncclResult_t call(run_t* R, int l, int k) {
  int r = R->first + l, sb, rb;
  size_t so, ro;
  const void* send;
  void* recv;
  cudaStream_t st = stream_of(R, l, k);
  regions(R, r, &sb, &so, &rb, &ro);
  send = (unsigned char*)R->mem[l][k][sb] + so;
  recv = (unsigned char*)R->mem[l][k][rb] + ro;
  switch (R->c.v[D_COLL]) {
    case C_ALLGATHER: return ncclAllGather(send, recv, R->count, R->dt, R->comm[l], st);
    case C_ALLTOALL: return ncclAlltoAll(send, recv, R->count, R->dt, R->comm[l], st);
    case C_SCATTER: return ncclScatter(send, recv, R->count, R->dt, root_of(R), R->comm[l], st);
    case C_SENDRECV: case C_MISMATCH: return sendrecv(R, l, k, send, recv, st);
    case C_ALLTOALLV: {
      size_t sc[MAXN], sd[MAXN], rc[MAXN], rd[MAXN];
      for (int p = 0; p < R->n; p++)
        sc[p] = v_count(R, r, p), sd[p] = v_sdispl(R, r, p), rc[p] = v_count(R, p, r), rd[p] = v_rdispl(R, r, p);
      return ncclAllToAllv(send, sc, sd, recv, rc, rd, R->dt, R->comm[l], st);
    }
    case C_BROADCAST:
      if (send == recv) return ncclBcast(recv, R->count, R->dt, root_of(R), R->comm[l], st);
      return ncclBroadcast(send, recv, R->count, R->dt, root_of(R), R->comm[l], st);
    default: return ncclGather(send, recv, R->count, R->dt, root_of(R), R->comm[l], st);
  }
}

static void call_checked(run_t* R, int l, int k) {
  char buf[300];
  ncclResult_t res = call(R, l, k);
  if (res != ncclSuccess)
    ev(R, l, "call", res, "%s call %d: %s", coll_names[R->c.v[D_COLL]], k, last_error(R->comm[l], buf, sizeof buf));
}

static int grouped(const run_t* R) { return R->mode == M_GROUP; }

static void group_end(run_t* R, const char* where) {
  ncclResult_t res = ncclGroupEnd();
  if (res != ncclSuccess) ev(R, 0, where, res, "ncclGroupEnd: %s", ncclGetLastError(NULL));
}

/* One thread per local rank (threads layout), each on its rank's device. */
static void on_threads(run_t* R, t_rank_fn fn) {
  t_world tw;
  memset(&tw, 0, sizeof tw);
  tw.n = R->nlocal;
  for (int l = 0; l < R->nlocal; l++) tw.dev[l] = R->dev[l];
  t_run_threads(&tw, fn, R);
}

/* The backend's device count, asked once. */
static int device_count(void) {
  static int count = -1;
  if (count < 0) {
    CHECK(cecollGetDeviceCount(&count));
    REQUIRE(count > 0);
  }
  return count;
}

/* Device of global rank r in cell c: 0, or (dev) r modulo the device count,
 * which is r wherever the cell runs (cell_skip). */
static int device_of(const cell* c, int r) { return c->v[D_DEV] == V_DEVS ? r % device_count() : 0; }

/* Why cell c cannot run with count devices (count < 0: ask), or NULL: a
 * dev cell needs a device per rank (with fewer it would repeat devices, and
 * so be another cell: its NULL streams, for one, would be shared). */
static const char* cell_skip(const cell* c, int count, char* buf, size_t n) {
  if (c->v[D_DEV] != V_DEVS) return NULL;
  if (count < 0) count = device_count();
  if (count >= c->v[D_RANKS]) return NULL;
  snprintf(buf, n, "needs %d devices (one per rank), cecollGetDeviceCount gives %d", c->v[D_RANKS], count);
  return buf;
}

/* ---- Setup ------------------------------------------------------------------------ */

static void buffer_kinds(run_t* R) {
  for (int l = 0; l < R->nlocal; l++) {
    int r = R->first + l;
    R->spare[l] = -1;
    switch (R->c.v[D_BUF]) {
      case B_UNREG: R->kind[l] = K_UNREG; break;
      case B_REG: R->kind[l] = K_REG; break;
      case B_WIN: R->kind[l] = K_WIN; break;
      case B_SYM: R->kind[l] = K_SYM; break;
      case B_MIXED: {
        static const int cyc[3] = {K_UNREG, K_REG, K_WIN};
        R->kind[l] = cyc[r % 3];
        /* Rank 2 registers windows, collectively: everyone else does too. */
        if (R->n >= 3 && R->kind[l] != K_WIN) R->spare[l] = NCCL_WIN_DEFAULT;
        break;
      }
      default:
        R->kind[l] = r % 2 ? K_UNREG : K_SYM;
        if (r % 2) R->spare[l] = NCCL_WIN_COLL_SYMMETRIC;
        break;
    }
  }
}

static void run_setup(run_t* R, const cell* c, int first, int nlocal, int mode) {
  static const ncclDataType_t types[4] = {ncclFloat32, ncclInt8, ncclBfloat16, ncclFloat64};
  memset(R, 0, sizeof *R);
  R->c = *c;
  R->x = expected(c);
  cell_name(c, R->name, sizeof R->name);
  R->n = c->v[D_RANKS];
  R->first = first;
  R->nlocal = nlocal;
  R->mode = mode;
  R->K = opt.calls;
  R->rounds = opt.rounds;
  R->seed = hash_name(R->name);
  R->dt = types[R->seed % 4];
  R->esz = t_type_size(R->dt);
  R->count = opt.count;
  R->cb = R->count * R->esz;
  R->span = (size_t)R->n * R->cb;
  if (c->v[D_COLL] == C_ALLTOALLV) /* (a pair moves at most count) */
    R->span = ((size_t)R->n * R->count + (size_t)(R->n - 1) * V_GAP) * R->esz;
  R->alloc = (GUARD_BEFORE + R->span + 64 + NCCL_WIN_REQUIRED_ALIGNMENT - 1) /
             NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
  for (int l = 0; l < nlocal; l++) R->dev[l] = device_of(c, first + l);
  buffer_kinds(R);
}

/* The streams: a slot per stream, on the device of its first rank. The
 * NULL stream is one per device: one slot for a process's ranks on device
 * 0, one per rank on devices of their own. */
static void make_streams(run_t* R) {
  int s = R->c.v[D_STREAM], one = s == S_SHARED || (s == S_NULL && R->c.v[D_DEV] == V_DEV0);
  R->nslots = s == S_TWO ? 2 * R->nlocal : one ? 1 : R->nlocal;
  for (int l = 0; l < R->nlocal; l++) {
    R->slot_of[l][0] = s == S_TWO ? 2 * l : one ? 0 : l;
    R->slot_of[l][1] = s == S_TWO ? 2 * l + 1 : one ? 0 : l;
    R->slot_dev[R->slot_of[l][1]] = R->slot_dev[R->slot_of[l][0]] = R->dev[one ? 0 : l];
  }
  for (int i = 0; i < R->nslots; i++) {
    if (s == S_NULL) {
      R->slot[i] = NULL, R->slot_null[i] = 1;
      continue;
    }
    CHECK(cecollSetDevice(R->slot_dev[i]));
    CHECK(cecollStreamCreate(&R->slot[i]));
  }
}

static void alloc_buffers(run_t* R) {
  for (int l = 0; l < R->nlocal; l++) {
    CHECK(cecollSetDevice(R->dev[l]));
    for (int k = 0; k < R->K; k++)
      for (int a = 0; a < NA; a++) {
        if (a >= A_SPARE_R && R->spare[l] < 0) continue;
        CHECK(ncclMemAlloc(&R->mem[l][k][a], R->alloc));
        R->want[l][k][a] = (unsigned char*)malloc(R->alloc);
        REQUIRE(R->want[l][k][a] != NULL);
      }
  }
  R->tmp = (unsigned char*)malloc(R->span + 1);
  R->scratch = (unsigned char*)malloc(R->alloc);
  REQUIRE(R->tmp && R->scratch);
}

/* Local rank l's registrations of call k's allocation a (A_R or A_S). The
 * window registrations are collective: every rank makes them in this
 * order, on the buffer it passes or on its spare. */
static void register_one(run_t* R, int l, int k, int a) {
  ncclResult_t res = ncclSuccess;
  int flags = R->kind[l] == K_SYM ? NCCL_WIN_COLL_SYMMETRIC : NCCL_WIN_DEFAULT;
  switch (R->kind[l]) {
    case K_REG:
      res = ncclCommRegister(R->comm[l], R->mem[l][k][a], R->alloc, &R->reg[l][k][a]);
      break;
    case K_WIN:
    case K_SYM:
      res = ncclCommWindowRegister(R->comm[l], R->mem[l][k][a], R->alloc, &R->win[l][k][a], flags);
      break;
    default: break;
  }
  if (res == ncclSuccess && R->spare[l] >= 0)
    res = ncclCommWindowRegister(R->comm[l], R->mem[l][k][a + 2], R->alloc, &R->win[l][k][a + 2], R->spare[l]);
  if (res != ncclSuccess) ev(R, l, "register", res, "call %d allocation %d: %s", k, a, ncclGetLastError(R->comm[l]));
}

static void thr_register(int l, void* p) {
  run_t* R = (run_t*)p;
  for (int k = 0; k < R->K; k++)
    for (int a = A_R; a <= A_S; a++) register_one(R, l, k, a);
}

static void register_all(run_t* R) {
  phase("%s: register buffers", R->name);
  if (R->mode == M_THREADS) {
    on_threads(R, thr_register);
    return;
  }
  for (int k = 0; k < R->K && !atomic_load(&R->failed); k++)
    for (int a = A_R; a <= A_S; a++) {
      if (grouped(R)) CHECK(ncclGroupStart());
      for (int l = 0; l < R->nlocal; l++) register_one(R, l, k, a);
      if (grouped(R)) group_end(R, "register");
    }
}

static void thr_init(int l, void* p) {
  run_t* R = (run_t*)p;
  ncclResult_t res = ncclCommInitRank(&R->comm[l], R->n, R->id, R->first + l);
  if (res != ncclSuccess) ev(R, l, "init", res, "ncclCommInitRank: %s", ncclGetLastError(NULL));
}

static void init_comms(run_t* R, int layout) {
  ncclResult_t res;
  phase("%s: create the communicator", R->name);
  CHECK(cecollSetDevice(0));
  if (layout == L_GROUP) {
    res = ncclCommInitAll(R->comm, R->n, R->dev);
    if (res != ncclSuccess) ev(R, 0, "init", res, "ncclCommInitAll: %s", ncclGetLastError(NULL));
  } else if (layout == L_THREADS) {
    CHECK(ncclGetUniqueId(&R->id));
    on_threads(R, thr_init);
  } else {
    if (grouped(R)) CHECK(ncclGroupStart());
    /* Each rank process on its rank's device; in a group, as NCCL's
     * examples, the device set before each rank's init. */
    for (int l = 0; l < R->nlocal; l++) {
      CHECK(cecollSetDevice(R->dev[l]));
      res = ncclCommInitRank(&R->comm[l], R->n, R->id, R->first + l);
      if (res != ncclSuccess) ev(R, l, "init", res, "ncclCommInitRank: %s", ncclGetLastError(NULL));
    }
    if (grouped(R)) group_end(R, "init");
  }
}

/* ---- Waiting ---------------------------------------------------------------------- */

static void* sync_main(void* p) {
  run_t* R = (run_t*)p;
  for (int s = 0; s < R->nslots; s++) {
    ncclResult_t res;
    CHECK(cecollSetDevice(R->slot_dev[s])); /* a NULL slot is its device's */
    res = cecollStreamSynchronize(R->slot[s]);
    if (res != ncclSuccess && R->sync_res == ncclSuccess) {
      R->sync_res = res;
      snprintf(R->sync_text, sizeof R->sync_text, "stream %d: %s", s, ncclGetLastError(NULL));
    }
  }
  atomic_store(&R->sync_done, 1);
  return NULL;
}

static int async_errors(run_t* R, int record) {
  int seen = 0;
  for (int l = 0; l < R->nlocal; l++) {
    ncclResult_t ae = ncclSuccess;
    if (!R->comm[l]) continue;
    if (ncclCommGetAsyncError(R->comm[l], &ae) != ncclSuccess) continue;
    if (ae == ncclSuccess || ae == ncclInProgress) continue;
    seen = 1;
    if (record && R->ob[l].nev == 0) {
      char buf[300];
      ev(R, l, "async", ae, "ncclCommGetAsyncError: %s", last_error(R->comm[l], buf, sizeof buf));
    }
  }
  return seen;
}

/* Waits for every stream of this process while watching the communicators'
 * asynchronous errors: an error ends the wait (the streams are then left
 * to the abort). A hang here is the watchdog's. */
static void sync_all(run_t* R, int record, int linger) {
  if (!R->syncer_live) {
    atomic_store(&R->sync_done, 0);
    R->sync_res = ncclSuccess;
    REQUIRE(pthread_create(&R->syncer, NULL, sync_main, R) == 0);
    R->syncer_live = 1;
  }
  for (;;) {
    if (atomic_load(&R->sync_done)) break;
    if (async_errors(R, record)) return;
    usleep(1000);
  }
  REQUIRE(pthread_join(R->syncer, NULL) == 0);
  R->syncer_live = 0;
  if (R->sync_res != ncclSuccess && record) ev(R, 0, "sync", R->sync_res, "cecollStreamSynchronize %s", R->sync_text);
  /* CECOLL_CHECK's watcher compares the ranks' calls a little later, and
   * a call whose violation went unnoticed may still complete: give it a
   * second, once, at the end. */
  if ((R->x == X_CONTRACT || R->x == X_MISMATCH) && record && linger) {
    double end = mp_now() + 1;
    while (!atomic_load(&R->failed) && mp_now() < end && !async_errors(R, 1)) usleep(2000);
  } else {
    async_errors(R, record);
  }
}

/* ---- Issuing ---------------------------------------------------------------------- */

static void thr_issue(int l, void* p) {
  run_t* R = (run_t*)p;
  /* A rank's calls go back to back: with two streams nothing orders them
   * but the communicator. */
  for (int k = 0; k < R->K && R->ob[l].nev == 0; k++) call_checked(R, l, k);
}

static void issue_one(run_t* R, int k) {
  if (grouped(R)) CHECK(ncclGroupStart());
  for (int l = 0; l < R->nlocal; l++) call_checked(R, l, k);
  if (grouped(R)) group_end(R, "call");
}

static void issue_all(run_t* R) {
  /* The runner's own test (ctests/run.sh): MATRIX_SELFTEST_HANG=NAME makes
   * that cell hang here, as a collective that never completes would. */
  const char* hang = getenv("MATRIX_SELFTEST_HANG");
  if (hang && strcmp(hang, R->name) == 0)
    for (;;) pause();
  if (R->mode == M_THREADS) {
    on_threads(R, thr_issue);
    return;
  }
  for (int k = 0; k < R->K && !atomic_load(&R->failed); k++) issue_one(R, k);
}

/* The slots call k uses, each once. */
static int slots_of_call(const run_t* R, int k, int* out) {
  int n = 0;
  for (int l = 0; l < R->nlocal; l++) {
    int s = R->slot_of[l][k % 2], seen = 0;
    for (int i = 0; i < n; i++) seen |= out[i] == s;
    if (!seen) out[n++] = s;
  }
  return n;
}

static int owner_of(const run_t* R, int s, int k) {
  for (int l = 0; l < R->nlocal; l++)
    if (R->slot_of[l][k % 2] == s) return l;
  return -1;
}

/* Capture and launch on a slot from its device (the NULL slot's stream is
 * that device's). */
static void begin_capture(run_t* R, int l, int s, int k) {
  ncclResult_t res;
  CHECK(cecollSetDevice(R->slot_dev[s]));
  res = cecollStreamBeginCapture(R->slot[s]);
  R->cap_ok[s][k] = res == ncclSuccess;
  if (res != ncclSuccess)
    ev(R, l, "capture", res, "cecollStreamBeginCapture(%s) for call %d: %s", R->slot_null[s] ? "NULL stream" : "stream",
       k, ncclGetLastError(NULL));
  else if (R->slot_null[s])
    R->ob[l].flags |= OB_NULL_CAPTURED;
}

static void end_capture(run_t* R, int l, int s, int k) {
  int quiet = atomic_load(&R->failed);
  ncclResult_t res;
  CHECK(cecollSetDevice(R->slot_dev[s]));
  res = cecollStreamEndCapture(R->slot[s], &R->graph[s][k]);
  if (res != ncclSuccess) {
    R->graph[s][k] = NULL;
    /* After an error the capture is invalid anyway: only a first error counts. */
    if (!quiet) ev(R, l, "capture", res, "cecollStreamEndCapture for call %d: %s", k, ncclGetLastError(NULL));
  }
}

/* Threads: the owner of a stream (the first rank on it) captures it while
 * every rank on it calls; barriers keep the steps apart, and every thread
 * passes every barrier so none waits for one that left. */
static void thr_capture(int l, void* p) {
  run_t* R = (run_t*)p;
  for (int k = 0; k < R->K; k++) {
    int s = R->slot_of[l][k % 2], own = owner_of(R, s, k) == l;
    if (own && !atomic_load(&R->failed)) begin_capture(R, l, s, k);
    t_barrier_wait(R->bar);
    if (!atomic_load(&R->failed) && R->cap_ok[s][k]) call_checked(R, l, k);
    t_barrier_wait(R->bar);
    if (own && R->cap_ok[s][k]) end_capture(R, l, s, k);
    t_barrier_wait(R->bar);
  }
}

static void capture_all(run_t* R) {
  if (R->mode == M_THREADS) {
    phase("%s: capture (each rank on its thread)", R->name);
    R->bar = t_barrier_new(R->nlocal);
    on_threads(R, thr_capture);
    t_barrier_free(R->bar);
    R->bar = NULL;
    return;
  }
  for (int k = 0; k < R->K && !atomic_load(&R->failed); k++) {
    int sl[2 * MAXN], ns = slots_of_call(R, k, sl);
    phase("%s: capture call %d", R->name, k);
    for (int i = 0; i < ns && !atomic_load(&R->failed); i++) begin_capture(R, owner_of(R, sl[i], k), sl[i], k);
    if (!atomic_load(&R->failed)) issue_one(R, k);
    for (int i = 0; i < ns; i++)
      if (R->cap_ok[sl[i]][k]) end_capture(R, owner_of(R, sl[i], k), sl[i], k);
  }
}

static void launch_all(run_t* R) {
  for (int k = 0; k < R->K && !atomic_load(&R->failed); k++) {
    int sl[2 * MAXN], ns = slots_of_call(R, k, sl);
    for (int i = 0; i < ns; i++) {
      ncclResult_t res;
      if (!R->graph[sl[i]][k]) continue;
      CHECK(cecollSetDevice(R->slot_dev[sl[i]]));
      res = cecollGraphLaunch(R->graph[sl[i]][k], R->slot[sl[i]]);
      if (res != ncclSuccess) ev(R, owner_of(R, sl[i], k), "launch", res, "cecollGraphLaunch call %d: %s", k, ncclGetLastError(NULL));
    }
  }
}

/* ---- Teardown --------------------------------------------------------------------- */

static void thr_finalize(int l, void* p) {
  run_t* R = (run_t*)p;
  ncclResult_t res = ncclCommFinalize(R->comm[l]);
  if (res != ncclSuccess) ev(R, l, "teardown", res, "ncclCommFinalize: %s", ncclGetLastError(R->comm[l]));
}

static void free_local(run_t* R) {
  for (int s = 0; s < 2 * MAXN; s++)
    for (int k = 0; k < MAXK; k++)
      if (R->graph[s][k]) (void)cecollGraphDestroy(R->graph[s][k]);
  for (int s = 0; s < R->nslots; s++)
    if (!R->slot_null[s] && R->slot[s]) {
      CHECK(cecollSetDevice(R->slot_dev[s]));
      (void)cecollStreamDestroy(R->slot[s]);
    }
  for (int l = 0; l < R->nlocal; l++) {
    CHECK(cecollSetDevice(R->dev[l]));
    for (int k = 0; k < R->K; k++)
      for (int a = 0; a < NA; a++) {
        if (R->mem[l][k][a]) (void)ncclMemFree(R->mem[l][k][a]);
        free(R->want[l][k][a]);
      }
  }
  free(R->tmp);
  free(R->scratch);
}

/* The normal end: every step is checked. */
static void teardown(run_t* R) {
  phase("%s: teardown", R->name);
  sync_all(R, 1, 1);
  for (int l = 0; l < R->nlocal && !atomic_load(&R->failed); l++)
    for (int k = 0; k < R->K; k++)
      for (int a = 0; a < NA; a++) {
        ncclResult_t res = ncclSuccess;
        if (R->win[l][k][a]) res = ncclCommWindowDeregister(R->comm[l], R->win[l][k][a]);
        if (res == ncclSuccess && R->reg[l][k][a]) res = ncclCommDeregister(R->comm[l], R->reg[l][k][a]);
        R->win[l][k][a] = NULL, R->reg[l][k][a] = NULL;
        if (res != ncclSuccess) ev(R, l, "teardown", res, "deregister: %s", ncclGetLastError(R->comm[l]));
      }
  if (atomic_load(&R->failed)) return;
  phase("%s: finalize", R->name);
  if (R->mode == M_THREADS) {
    on_threads(R, thr_finalize);
  } else {
    if (grouped(R)) CHECK(ncclGroupStart());
    for (int l = 0; l < R->nlocal; l++) thr_finalize(l, R);
    if (grouped(R)) group_end(R, "teardown");
  }
  if (atomic_load(&R->failed)) return;
  for (int l = 0; l < R->nlocal; l++) {
    ncclResult_t res = ncclCommDestroy(R->comm[l]);
    R->comm[l] = NULL;
    if (res != ncclSuccess) ev(R, l, "teardown", res, "ncclCommDestroy: %s", ncclGetLastError(NULL));
  }
  free_local(R);
}

/* After an error: abort every communicator (which releases their streams'
 * waits), then wait for the streams; nothing is recorded any more. */
static void teardown_abort(run_t* R) {
  phase("%s: abort after an error", R->name);
  for (int l = 0; l < R->nlocal; l++)
    if (R->comm[l]) (void)ncclCommAbort(R->comm[l]);
  phase("%s: wait for the streams after ncclCommAbort", R->name);
  if (R->syncer_live) {
    REQUIRE(pthread_join(R->syncer, NULL) == 0);
    R->syncer_live = 0;
  }
  /* Released streams run to their end, moving undefined bytes; a device
   * fault there (a copy or flag write into memory no longer mapped) is a
   * defect: on a GPU it is sticky for the whole context (and, under MPS,
   * for every client). */
  for (int s = 0; s < R->nslots; s++) {
    ncclResult_t res;
    CHECK(cecollSetDevice(R->slot_dev[s]));
    res = cecollStreamSynchronize(R->slot[s]);
    if (res == ncclUnhandledCudaError) ev(R, 0, "fault", res, "cecollStreamSynchronize after ncclCommAbort: %s", ncclGetLastError(NULL));
  }
  free_local(R);
}

/* ---- The flow of one process -------------------------------------------------------- */

static void run_flow(run_t* R, int layout) {
  init_comms(R, layout);
  if (!atomic_load(&R->failed)) {
    make_streams(R);
    alloc_buffers(R);
    register_all(R);
  }
  if (!atomic_load(&R->failed) && R->c.v[D_EXEC] == E_GRAPH) capture_all(R);
  if (R->x == X_CAPTURE && atomic_load(&R->failed)) {
    /* The refused capture enqueued nothing: the communicators must still
     * finalize cleanly, so end normally (its errors are recorded). */
    int only_capture = 1;
    for (int l = 0; l < R->nlocal; l++)
      for (int i = 0; i < R->ob[l].nev; i++) only_capture &= strcmp(R->ob[l].ev[i].where, "capture") == 0;
    if (only_capture) {
      atomic_store(&R->failed, 0);
      teardown(R);
      if (atomic_load(&R->failed)) teardown_abort(R);
      for (int l = 0; l < R->nlocal; l++) R->ob[l].done = 1;
      return;
    }
  }
  for (int t = 0; t < R->rounds && !atomic_load(&R->failed); t++) {
    const char* what = R->c.v[D_EXEC] == E_GRAPH ? "replay" : "round";
    char when[32];
    phase("%s: %s %d: prepare", R->name, what, t);
    prepare(R, t);
    phase("%s: %s %d: %s", R->name, what, t, R->c.v[D_EXEC] == E_GRAPH ? "launch" : "issue");
    if (R->c.v[D_EXEC] == E_GRAPH)
      launch_all(R);
    else
      issue_all(R);
    if (atomic_load(&R->failed)) break;
    phase("%s: %s %d: sync", R->name, what, t);
    sync_all(R, 1, 0);
    if (atomic_load(&R->failed)) break;
    phase("%s: %s %d: verify", R->name, what, t);
    snprintf(when, sizeof when, "%s %d", what, t);
    if (R->x == X_DATA) verify(R, when);
  }
  if (!atomic_load(&R->failed)) teardown(R);
  if (atomic_load(&R->failed)) teardown_abort(R);
  for (int l = 0; l < R->nlocal; l++) R->ob[l].done = 1;
}

/* ---- Verdicts --------------------------------------------------------------------- */

enum { V_PASS, V_ERROR_OK, V_FAIL, V_HANG, V_SKIP, NVERDICT };
static const char* const verdict_names[NVERDICT] = {"PASS", "EXPECTED-ERROR-OK", "FAIL", "HANG", "SKIP"};

/* What the processes of a cell did, besides what their ranks saw. */
typedef struct {
  int n;
  obs ob[MAXN]; /* by global rank */
  int hung;     /* a deadline passed */
  int crashed;  /* a process died from a signal or stopped on a fatal error */
  char problem[400];
} cell_result;

/* The datatype of cell c (from its name, as every process computes it). */
static ncclDataType_t cell_type(const cell* c) {
  static const ncclDataType_t types[4] = {ncclFloat32, ncclInt8, ncclBfloat16, ncclFloat64};
  char name[96];
  cell_name(c, name, sizeof name);
  return types[hash_name(name) % 4];
}

/* What the error of an unmatched cell must say: rank 1's receive #K from
 * rank 0 and its bytes, then the send's bytes, as CECOLL_CHECK words it or
 * as a group words it that holds both sides (ncclGroupEnd matches them by
 * their numbers before the check sees them). */
typedef struct {
  char recv[96], send[96], group[96];
} mismatch_text;

static void mismatch_words(const cell* c, mismatch_text* w) {
  size_t esz = t_type_size(cell_type(c));
  snprintf(w->recv, sizeof w->recv, "rank 1's receive #%d from rank 0 is %zu bytes", opt.calls,
           mismatch_count(opt.count, c->v[D_RANKS]) * esz);
  snprintf(w->send, sizeof w->send, "rank 0's send #%d to rank 1 is %zu bytes", opt.calls, opt.count * esz);
  snprintf(w->group, sizeof w->group, "the matching ncclSend %zu bytes", opt.count * esz);
}

static int event_matches(const struct rule* ru, const event* e, const mismatch_text* w) {
  if (ru->code != ncclSuccess && e->code != (int)ru->code) return 0;
  if (e->code == (int)ncclSuccess) return 0;
  if (ru->x == X_MISMATCH)
    return strstr(e->text, w->recv) && (strstr(e->text, w->send) || strstr(e->text, w->group));
  return !ru->text || strcasestr(e->text, ru->text) != NULL;
}

/* Events a rule lets happen besides its own error. */
static int event_allowed(expect_t x, const event* e) {
  switch (x) {
    case X_CAPTURE: return strcmp(e->where, "capture") == 0;
    case X_SHARED_STREAM: return strcmp(e->where, "call") == 0 && e->code == (int)ncclInvalidUsage;
    case X_CONTRACT:
    case X_MISMATCH:
      /* A peer learns of the mismatch as a remote error, and its released
       * streams may report one. */
      return e->code == (int)ncclInvalidUsage || e->code == (int)ncclRemoteError ||
             (strcmp(e->where, "sync") == 0 && e->code != (int)ncclUnhandledCudaError);
    default: return 0;
  }
}

static int judge(const cell* c, const cell_result* cr, char* detail, size_t dn) {
  const expect_t x = expected(c);
  const struct rule* ru = &rules[x];
  mismatch_text w;
  const event *first = NULL, *match = NULL, *stray = NULL;
  int first_r = -1, match_r = -1, stray_r = -1, missing = -1, null_captured = -1;
  size_t bad = 0;
  int bad_r = -1;
  mismatch_words(c, &w);
  for (int r = 0; r < cr->n; r++) {
    const obs* o = &cr->ob[r];
    if (!o->have) {
      if (missing < 0) missing = r;
      continue;
    }
    if ((o->flags & OB_NULL_CAPTURED) && null_captured < 0) null_captured = r;
    if (o->bad && bad_r < 0) bad_r = r;
    bad += o->bad;
    for (int i = 0; i < o->nev; i++) {
      const event* e = &o->ev[i];
      if (!first) first = e, first_r = r;
      if (x != X_DATA && !match && event_matches(ru, e, &w)) match = e, match_r = r;
      if (x != X_DATA && !stray && !event_matches(ru, e, &w) && !event_allowed(x, e)) stray = e, stray_r = r;
    }
  }
#define EVFMT "rank %d %s: %s: %.200s"
#define EVARG(r, e) (r), (e)->where, ncclGetErrorString((ncclResult_t)(e)->code), (e)->text
  if (cr->crashed) {
    if (first)
      snprintf(detail, dn, "%.250s; first error: " EVFMT, cr->problem, EVARG(first_r, first));
    else
      snprintf(detail, dn, "%.250s", cr->problem);
    return V_FAIL;
  }
  if (x == X_DATA) {
    if (first) {
      snprintf(detail, dn, EVFMT "%s%.250s", EVARG(first_r, first), cr->hung ? "; then: " : "", cr->hung ? cr->problem : "");
      return V_FAIL;
    }
    if (cr->hung) {
      snprintf(detail, dn, "%.250s", cr->problem);
      return V_HANG;
    }
    if (bad) {
      snprintf(detail, dn, "wrong data: %zu bytes, first on rank %d (the log shows where)", bad, bad_r);
      return V_FAIL;
    }
    if (missing >= 0) {
      snprintf(detail, dn, "rank %d reported nothing", missing);
      return V_FAIL;
    }
    snprintf(detail, dn, "right data");
    return V_PASS;
  }
  if (x == X_CAPTURE && null_captured >= 0) {
    snprintf(detail, dn, "rank %d: cecollStreamBeginCapture of the NULL stream succeeded", null_captured);
    return V_FAIL;
  }
  if (stray) {
    snprintf(detail, dn, "want %s; got " EVFMT, ru->outcome, EVARG(stray_r, stray));
    return V_FAIL;
  }
  if (!match) {
    if (cr->hung) {
      snprintf(detail, dn, "no %s before: %.250s", ru->outcome, cr->problem);
      return V_HANG;
    }
    for (int r = 0; r < cr->n && ru->text; r++)
      for (int i = 0; i < cr->ob[r].nev; i++)
        if (cr->ob[r].ev[i].code == (int)ru->code) {
          snprintf(detail, dn, "want %s: %s came, but its last-error text does not mention \"%s\"%s%s: " EVFMT,
                   ru->outcome, ncclGetErrorString(ru->code), x == X_MISMATCH ? w.recv : ru->text,
                   x == X_MISMATCH ? " and " : "", x == X_MISMATCH ? w.send : "", EVARG(r, &cr->ob[r].ev[i]));
          return V_FAIL;
        }
    if (first)
      snprintf(detail, dn, "want %s; got " EVFMT, ru->outcome, EVARG(first_r, first));
    else
      snprintf(detail, dn, "want %s; every call succeeded, no error reported", ru->outcome);
    return V_FAIL;
  }
  if (cr->hung) {
    snprintf(detail, dn, "after the expected error (" EVFMT "): %.250s", EVARG(match_r, match), cr->problem);
    return V_HANG;
  }
  snprintf(detail, dn, EVFMT, EVARG(match_r, match));
  return V_ERROR_OK;
#undef EVFMT
#undef EVARG
}

static int say_verdict(const char* name, int v, const char* detail) {
  printf("%s %s: %s\n", verdict_names[v], name, detail);
  fflush(stdout);
  mp_tell_parent("VERDICT %s %.440s", verdict_names[v], detail);
  return v == V_PASS || v == V_ERROR_OK || v == V_SKIP ? 0 : 1;
}

static void set_watchdog(int seconds) {
  char buf[32];
  /* t_watchdog prefers the environment: make it say what -t says. */
  snprintf(buf, sizeof buf, "%d", seconds);
  setenv("CECOLL_TEST_WATCHDOG", buf, 1);
  t_watchdog(seconds);
}

static void print_backend(const char* name) {
  const char* backend = "?";
  CHECK(cecollGetBackend(&backend));
  printf("%s: backend %s, pid %d\n", name, backend, (int)getpid());
  fflush(stdout);
}

/* The device count, from a child (--device-count), asked once; -1 where
 * none came. The runner and a process layout's coordinator never start the
 * device runtime themselves (it would, for one, set the environment that
 * their children inherit). */
static int child_device_count(void) {
  static int n = -2;
  if (n != -2) return n;
  n = -1;
  mp_child ch;
  char* args[] = {"--device-count", NULL};
  char line[128];
  memset(&ch, 0, sizeof ch);
  fflush(stdout);
  fflush(stderr);
  mp_spawn_opt so = {0, "/dev/null"}; /* its own line is for a caller at a terminal */
  if (mp_spawn_ex(&ch, self_path, args, NULL, &so) != 0) return -1;
  while (mp_recv_line(&ch, line, sizeof line, mp_now() + 60) > 0)
    if (sscanf(line, "DEVICES %d", &n) == 1) break;
  (void)mp_wait_all(&ch, 1, mp_now() + 30, "the device count");
  mp_close(&ch, 1);
  return n;
}

/* ---- Process layouts: the ranks' processes and their coordinator ------------------------ */

static int opt_proc = -1; /* -P: this rank process's index */

static void proc_ranks(const cell* c, int p, int* first, int* nlocal) {
  int n = c->v[D_RANKS], h = (n + 1) / 2;
  if (c->v[D_LAYOUT] == L_PROC) {
    *first = p, *nlocal = 1;
  } else {
    *first = p ? h : 0, *nlocal = p ? n - h : h;
  }
}

/* A rank process: for each "ID <hex> <cell>" from the coordinator, its
 * ranks' flow of that cell, then what they saw and DONE; until END (or the
 * coordinator's end). The CUDA context outlives the cells of a batch. */
static int rank_main(void) {
  char line[MP_ID_HEX + 160];
  if (opt_proc < 0) usage();
  for (;;) {
    char name[96];
    cell c;
    run_t* R;
    int first, nlocal;
    phase("process %d waits for a cell", opt_proc);
    if (mp_hear_parent(line, sizeof line, mp_now() + opt.watchdog + 30) != 1 || strcmp(line, "END") == 0) return 0;
    char* sp = strncmp(line, "ID ", 3) == 0 ? strchr(line + 3, ' ') : NULL;
    if (!sp || sscanf(sp, " %95s", name) != 1 || cell_parse(name, &c) != 0)
      t_fatal_at(__FILE__, __LINE__, "not a cell from the coordinator: %.80s", line);
    *sp = '\0';
    set_watchdog(opt.watchdog + 3); /* a backstop: the coordinator's deadline comes first */
    proc_ranks(&c, opt_proc, &first, &nlocal);
    R = (run_t*)calloc(1, sizeof *R);
    REQUIRE(R != NULL);
    run_setup(R, &c, first, nlocal, c.v[D_LAYOUT] == L_PROC ? M_SINGLE : M_GROUP);
    if (mp_id_from_hex(line + 3, &R->id) != 0) t_fatal_at(__FILE__, __LINE__, "a bad id from the coordinator");
    print_backend(name);
    run_flow(R, c.v[D_LAYOUT]);
    for (int l = 0; l < R->nlocal; l++) {
      const obs* o = &R->ob[l];
      mp_tell_parent("OBS %d %d %d %zu", R->first + l, o->done, o->flags, o->bad);
      for (int i = 0; i < o->nev; i++)
        mp_tell_parent("EV %d %d %s %.320s", R->first + l, o->ev[i].code, o->ev[i].where, o->ev[i].text);
    }
    fflush(stdout);
    mp_tell_parent("DONE");
    free(R);
  }
}

static void take_line(cell_result* cr, const char* line) {
  int r, a, b, code, off = 0;
  size_t bad;
  char where[16];
  if (sscanf(line, "OBS %d %d %d %zu", &r, &a, &b, &bad) == 4 && r >= 0 && r < cr->n) {
    cr->ob[r].have = 1, cr->ob[r].done = a, cr->ob[r].flags = b, cr->ob[r].bad = bad;
  } else if (sscanf(line, "EV %d %d %15s %n", &r, &code, where, &off) == 3 && off > 0 && r >= 0 && r < cr->n &&
             cr->ob[r].nev < MAX_EV) {
    event* e = &cr->ob[r].ev[cr->ob[r].nev++];
    e->code = code;
    snprintf(e->where, sizeof e->where, "%s", where);
    snprintf(e->text, sizeof e->text, "%s", line + off);
  }
}

static void append(char* buf, size_t n, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char* buf, size_t n, const char* fmt, ...) {
  size_t used = strlen(buf);
  va_list ap;
  if (used + 1 >= n) return;
  va_start(ap, fmt);
  vsnprintf(buf + used, n - used, fmt, ap);
  va_end(ap);
}

/* The cell process of a process layout: starts the rank processes once,
 * then for each cell of its batch makes an id (so it outlives the ranks'
 * communicators), hands it with the cell's name to each rank process,
 * collects what they saw until each says DONE, and judges. At a deadline or
 * a dead rank process it judges that cell and stops: the runner runs the
 * rest of the batch again. Every cell has the same layout and rank count. */
static int coordinator(char* const* names, int count) {
  cell c0;
  int n, P, rc = 0;
  mp_child ch[MAXN];
  char targ[16], karg[16], garg[16], carg[32], parg[MAXN][12];
  /* 10 s unless the caller chose: long enough for any rank to start here,
   * short enough that a cell that cannot form fails before its watchdog. */
  const char* boot = getenv("CECOLL_BOOTSTRAP_TIMEOUT");
  char env_boot[64];
  char* env[] = {env_boot, NULL};
  REQUIRE(cell_parse(names[0], &c0) == 0);
  n = c0.v[D_RANKS], P = c0.v[D_LAYOUT] == L_PROC ? n : 2;
  snprintf(env_boot, sizeof env_boot, "CECOLL_BOOTSTRAP_TIMEOUT=%s", boot && *boot ? boot : "10");
  print_backend(names[0]);
  memset(ch, 0, sizeof ch);
  snprintf(targ, sizeof targ, "%d", opt.watchdog);
  snprintf(karg, sizeof karg, "%d", opt.calls);
  snprintf(garg, sizeof garg, "%d", opt.rounds);
  snprintf(carg, sizeof carg, "%zu", opt.count);
  phase("%s: coordinator: start %d processes", names[0], P);
  for (int p = 0; p < P; p++) {
    char* args[] = {"--rank", "-P", parg[p], "-t", targ, "-k", karg, "-g", garg, "-c", carg, NULL};
    snprintf(parg[p], sizeof parg[p], "%d", p);
    fflush(stdout);
    fflush(stderr);
    if (mp_spawn(&ch[p], self_path, args, env) != 0) t_fatal_at(__FILE__, __LINE__, "could not start process %d", p);
  }
  for (int i = 0; i < count; i++) {
    const char* name = names[i];
    cell c;
    int eof[MAXN] = {0}, done[MAXN] = {0}, killed = 0, v;
    char phases[MAXN][200];
    char hex[MP_ID_HEX], detail[600];
    ncclUniqueId id;
    cell_result* cr = (cell_result*)calloc(1, sizeof *cr);
    double deadline = mp_now() + opt.watchdog;
    REQUIRE(cr != NULL && cell_parse(name, &c) == 0);
    if (cell_skip(&c, c.v[D_DEV] == V_DEVS ? child_device_count() : -1, detail, sizeof detail)) {
      rc |= say_verdict(name, V_SKIP, detail);
      free(cr);
      continue;
    }
    set_watchdog(opt.watchdog + 5); /* a backstop: its own deadline comes first */
    cr->n = n;
    phase("%s: coordinator: ncclGetUniqueId", name);
    CHECK(ncclGetUniqueId(&id));
    mp_id_to_hex(&id, hex);
    for (int p = 0; p < P; p++) {
      snprintf(phases[p], sizeof phases[p], "starting");
      mp_send_line(&ch[p], "ID %s %s", hex, name);
    }
    phase("%s: coordinator: waiting for %d processes", name, P);
    for (;;) {
      struct pollfd pf[MAXN];
      int np = 0, live = 0;
      for (int p = 0; p < P; p++)
        if (!eof[p] && !done[p]) pf[np].fd = ch[p].from_child, pf[np].events = POLLIN, pf[np].revents = 0, np++;
      if (np) (void)poll(pf, (nfds_t)np, 50);
      for (int p = 0; p < P; p++) {
        char line[600];
        int r;
        while (!eof[p] && !done[p] && (r = mp_recv_line(&ch[p], line, sizeof line, mp_now() + 0.001)) != 0) {
          if (r < 0) {
            eof[p] = 1;
            break;
          }
          if (strncmp(line, "PHASE ", 6) == 0)
            scopy(phases[p], sizeof phases[p], line + 6);
          else if (strncmp(line, "NOTE ", 5) == 0)
            mp_tell_parent("%s", line);
          else if (strcmp(line, "DONE") == 0)
            done[p] = 1;
          else
            take_line(cr, line);
        }
        if (!done[p] && (!eof[p] || !mp_poll(&ch[p]))) live++;
      }
      if (!live) break;
      if (np == 0) usleep(20000);
      if (mp_now() > deadline) {
        for (int p = 0; p < P; p++) {
          if (done[p] || ch[p].done) continue;
          append(cr->problem, sizeof cr->problem, "%sprocess %d still running after %d s, in [%s]",
                 killed++ ? "; " : "", p, opt.watchdog, phases[p]);
        }
        cr->hung = 1;
        mp_kill_all(ch, P);
        break;
      }
    }
    for (int p = 0; p < P; p++) {
      const int st = ch[p].status;
      if (done[p] || !ch[p].done || killed) continue;
      if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
        cr->hung = 1;
        append(cr->problem, sizeof cr->problem, "%sprocess %d: its watchdog fired in [%s]",
               cr->problem[0] ? "; " : "", p, phases[p]);
      } else {
        char s[64];
        cr->crashed = 1;
        append(cr->problem, sizeof cr->problem, "%sprocess %d: %s in [%s] (the log has its last words)",
               cr->problem[0] ? "; " : "", p, mp_status_string(&ch[p], s, sizeof s), phases[p]);
      }
    }
    v = judge(&c, cr, detail, sizeof detail);
    rc |= say_verdict(name, v, detail);
    free(cr);
    for (int p = 0; p < P; p++)
      if (!done[p]) {
        /* A rank process is gone or hung: the batch ends here. */
        mp_kill_all(ch, P);
        mp_close(ch, P);
        return rc | 1;
      }
  }
  for (int p = 0; p < P; p++) mp_send_line(&ch[p], "END");
  for (double until = mp_now() + 10; mp_now() < until;) {
    int live = 0;
    for (int p = 0; p < P; p++) live += !mp_poll(&ch[p]);
    if (!live) break;
    usleep(10000);
  }
  mp_close(ch, P);
  return rc;
}

/* ---- A cell ---------------------------------------------------------------------------- */

static int cell_main(const char* name) {
  cell c;
  run_t* R;
  cell_result* cr;
  char detail[600];
  int v, layout;
  if (cell_parse(name, &c) != 0) {
    fprintf(stderr, "%s: not a cell name (see --list all)\n", name);
    return 2;
  }
  layout = c.v[D_LAYOUT];
  set_watchdog(opt.watchdog);
  print_backend(name);
  if (cell_skip(&c, -1, detail, sizeof detail)) return say_verdict(name, V_SKIP, detail);
  R = (run_t*)calloc(1, sizeof *R);
  cr = (cell_result*)calloc(1, sizeof *cr);
  REQUIRE(R && cr);
  run_setup(R, &c, 0, c.v[D_RANKS], layout == L_GROUP ? M_GROUP : M_THREADS);
  run_flow(R, layout);
  cr->n = R->n;
  for (int r = 0; r < R->n; r++) {
    cr->ob[r] = R->ob[r];
    cr->ob[r].have = 1;
  }
  v = judge(&c, cr, detail, sizeof detail);
  free(cr);
  free(R);
  return say_verdict(name, v, detail);
}

/* --cell A,B,...: a batch of cells of one layout and rank count, one after
 * another in this process (and, for process layouts, the same rank
 * processes), each with its own watchdog and VERDICT line. */
static int batch_main(char* list) {
  char* names[MAX_BATCH];
  int count = 0, rc = 0;
  cell c;
  for (char* t = strtok(list, ","); t && count < MAX_BATCH; t = strtok(NULL, ",")) names[count++] = t;
  if (count == 0 || cell_parse(names[0], &c) != 0) {
    fprintf(stderr, "%s: not a cell name (see --list all)\n", count ? names[0] : "");
    return 2;
  }
  if (c.v[D_LAYOUT] == L_PROC || c.v[D_LAYOUT] == L_2PROC) return coordinator(names, count);
  for (int i = 0; i < count; i++) rc |= cell_main(names[i]);
  return rc;
}

/* ---- The runner -------------------------------------------------------------------------- */

typedef struct {
  int cells[MAX_BATCH]; /* its batch: ids, all with one batch_key */
  int ncells, nv;       /* cells[nv] runs now; those before it have verdicts */
  int all_ok;           /* every verdict so far was the expected one */
  mp_child ch;
  double t0; /* when cells[nv] started */
  int eof, killed;
  char name[96]; /* cells[nv]'s */
  char phase[256];
  char note[400];
  char verdict[600];
  char log[PATH_MAX];
} job;

/* The first line of the log that holds `key`, for the verdict line. */
static void log_line(const char* path, const char* key, char* out, size_t n) {
  FILE* f = fopen(path, "r");
  char line[512];
  out[0] = '\0';
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, key)) continue;
    line[strcspn(line, "\n")] = '\0';
    scopy(out, n, line);
    break;
  }
  fclose(f);
}

static void log_tail(const char* path, int lines) {
  FILE* f = fopen(path, "r");
  char* buf;
  long size, start;
  int seen = 0;
  if (!f) return;
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  start = size > 16384 ? size - 16384 : 0;
  buf = (char*)calloc(1, (size_t)(size - start) + 1);
  if (buf) {
    fseek(f, start, SEEK_SET);
    size_t got = fread(buf, 1, (size_t)(size - start), f);
    long i;
    buf[got] = '\0';
    for (i = (long)got - 1; i > 0; i--)
      if (buf[i] == '\n' && ++seen > lines) break;
    printf("    | %s", buf + (i > 0 ? i + 1 : 0));
    free(buf);
  }
  fclose(f);
}

/* Cells that may share a process: one layout, rank count and CECOLL_CHECK. */
static int batch_key(const cell* c) {
  return (c->v[D_LAYOUT] * (MAXN + 1) + c->v[D_RANKS]) * 2 + needs_check(c);
}

static int start_job(job* j, const cell* cells, const int* ids, int n) {
  char targ[16], karg[16], garg[16], carg[32];
  char env_check[] = "CECOLL_CHECK=1";
  char* env[] = {env_check, NULL};
  static char list[MAX_BATCH * 100];
  char* args[] = {"--cell", list, "-t", targ, "-k", karg, "-g", garg, "-c", carg, NULL};
  mp_spawn_opt so = {1, j->log};
  size_t used = 0;
  memset(j, 0, sizeof *j);
  j->ncells = n, j->all_ok = 1;
  for (int i = 0; i < n; i++) {
    char name[96];
    j->cells[i] = ids[i];
    cell_name(&cells[ids[i]], name, sizeof name);
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? "," : "", name);
  }
  cell_name(&cells[ids[0]], j->name, sizeof j->name);
  snprintf(j->log, sizeof j->log, "%s/%s%s.log", opt.logdir, j->name, n > 1 ? "+" : "");
  snprintf(j->phase, sizeof j->phase, "starting");
  snprintf(targ, sizeof targ, "%d", opt.watchdog);
  snprintf(karg, sizeof karg, "%d", opt.calls);
  snprintf(garg, sizeof garg, "%d", opt.rounds);
  snprintf(carg, sizeof carg, "%zu", opt.count);
  j->t0 = mp_now();
  fflush(stdout);
  fflush(stderr);
  /* The contract and unmatched cells run under CECOLL_CHECK=1, which the
   * library reads when it loads. */
  return mp_spawn_ex(&j->ch, self_path, args, needs_check(&cells[ids[0]]) ? env : NULL, &so);
}

/* Reads what the job said; returns 1 when a VERDICT line came (it stops
 * there: the caller reports it before reading on). */
static int read_job(job* j) {
  char line[700];
  int rc;
  while (!j->eof && (rc = mp_recv_line(&j->ch, line, sizeof line, mp_now() + 0.001)) != 0) {
    if (rc < 0) {
      j->eof = 1;
      break;
    }
    if (strncmp(line, "PHASE ", 6) == 0)
      scopy(j->phase, sizeof j->phase, line + 6);
    else if (strncmp(line, "NOTE ", 5) == 0 && !j->note[0])
      scopy(j->note, sizeof j->note, line + 5);
    else if (strncmp(line, "VERDICT ", 8) == 0) {
      scopy(j->verdict, sizeof j->verdict, line + 8);
      return 1;
    }
  }
  return 0;
}

/* The verdict of the job's current cell: from its VERDICT line, or from the
 * end of its process (which ran no further). */
static int job_verdict(job* j, char* detail, size_t dn) {
  const int st = j->ch.status;
  char extra[300];
  if (j->verdict[0] && !j->killed) {
    for (int v = 0; v < NVERDICT; v++) {
      size_t k = strlen(verdict_names[v]);
      if (strncmp(j->verdict, verdict_names[v], k) == 0 && (j->verdict[k] == ' ' || !j->verdict[k])) {
        snprintf(detail, dn, "%s", j->verdict[k] ? j->verdict + k + 1 : "");
        return v;
      }
    }
  }
  if (j->killed) {
    snprintf(detail, dn, "no verdict %d s after the start, killed by the runner, in [%s]%s%s", opt.watchdog + 8,
             j->phase, j->note[0] ? "; earlier: " : "", j->note);
    return V_HANG;
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
    snprintf(detail, dn, "watchdog (%d s) in [%s]%s%s", opt.watchdog, j->phase, j->note[0] ? "; earlier: " : "",
             j->note);
    return V_HANG;
  }
  log_line(j->log, "FATAL", extra, sizeof extra);
  if (WIFSIGNALED(st))
    snprintf(detail, dn, "crashed: signal %d in [%s] %s", WTERMSIG(st), j->phase, extra);
  else
    snprintf(detail, dn, "exit %d without a verdict in [%s] %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, j->phase,
             extra);
  return V_FAIL;
}

/* Prints and counts the verdict of j's current cell; moves to the next. */
static void report(job* j, int v, const char* detail, int* tally, char** bad_names, int* nbad) {
  const int ok = v == V_PASS || v == V_ERROR_OK || v == V_SKIP;
  tally[v]++;
  printf("%-17s %-52s %6.1fs  %s%s%s\n", verdict_names[v], j->name, mp_now() - j->t0, detail, ok ? "" : "  log: ",
         ok ? "" : j->log);
  if (!ok && opt.verbose) log_tail(j->log, 15);
  fflush(stdout);
  if (!ok) bad_names[(*nbad)++] = strdup(j->name);
  j->all_ok &= ok;
  j->nv++;
  j->t0 = mp_now();
  j->verdict[0] = j->note[0] = '\0';
  snprintf(j->phase, sizeof j->phase, "starting");
}

/* Runs the cells, -j processes at a time, each process a batch of up to -b
 * cells that share a batch_key. A process that ends early (a hang, a crash)
 * gives its current cell that verdict; its later cells go back to the queue. */
static int run_cells(const cell* cells, const int* list, int count) {
  job* jobs = (job*)calloc((size_t)opt.jobs, sizeof *jobs);
  int* busy = (int*)calloc((size_t)opt.jobs, sizeof *busy);
  char* taken = (char*)calloc((size_t)count + 1, 1);
  int left = count, running = 0, tally[NVERDICT] = {0};
  char** bad_names = (char**)calloc((size_t)count + 1, sizeof *bad_names);
  int nbad = 0;
  double t_start = mp_now();
  const char* be = getenv("CECOLL_BACKEND");
  REQUIRE(jobs && busy && taken && bad_names);
  mkdir(opt.logdir, 0755);
  printf("matrix: %d cells, %d at a time, %d per process, watchdog %d s, %d calls x %d rounds, count %zu, "
         "CECOLL_BACKEND=%s%s%s, logs in %s\n",
         count, opt.jobs, opt.batch, opt.watchdog, opt.calls, opt.rounds, opt.count, be ? be : "(unset)",
         getenv("CECOLL_HOST_CHAOS") ? ", CECOLL_HOST_CHAOS=" : "",
         getenv("CECOLL_HOST_CHAOS") ? getenv("CECOLL_HOST_CHAOS") : "", opt.logdir);
  fflush(stdout);
  /* dev cells beyond the device count are skipped here, without a process
   * (on one GPU they would only start processes to say so); the count is
   * asked only when the list holds a dev cell (where no count comes, each
   * cell process judges alone, as with --cell). */
  for (int i = 0; i < count; i++) {
    char name[96], why[160];
    if (cells[list[i]].v[D_DEV] != V_DEVS || child_device_count() < 0) continue;
    if (!cell_skip(&cells[list[i]], child_device_count(), why, sizeof why)) continue;
    cell_name(&cells[list[i]], name, sizeof name);
    printf("%-17s %-52s %6.1fs  %s\n", verdict_names[V_SKIP], name, 0.0, why);
    tally[V_SKIP]++;
    taken[i] = 1, left--;
  }
  fflush(stdout);
  while (left > 0 || running > 0) {
    struct pollfd pf[64];
    int np = 0;
    for (int s = 0; s < opt.jobs && left > 0; s++) {
      int ids[MAX_BATCH], n = 0, key = -1;
      if (busy[s]) continue;
      for (int i = 0; i < count && n < opt.batch; i++) {
        if (taken[i] || (key >= 0 && batch_key(&cells[list[i]]) != key)) continue;
        key = batch_key(&cells[list[i]]);
        taken[i] = 1, ids[n++] = list[i];
      }
      left -= n;
      if (start_job(&jobs[s], cells, ids, n) != 0) {
        for (int i = 0; i < n; i++) {
          cell_name(&cells[ids[i]], jobs[s].name, sizeof jobs[s].name);
          report(&jobs[s], V_FAIL, "could not start its process", tally, bad_names, &nbad);
        }
        continue;
      }
      busy[s] = 1, running++;
    }
    for (int s = 0; s < opt.jobs && np < 64; s++)
      if (busy[s] && !jobs[s].eof) pf[np].fd = jobs[s].ch.from_child, pf[np].events = POLLIN, pf[np].revents = 0, np++;
    if (np)
      (void)poll(pf, (nfds_t)np, 50);
    else
      usleep(20000);
    for (int s = 0; s < opt.jobs; s++) {
      job* j = &jobs[s];
      char detail[700];
      if (!busy[s]) continue;
      while (read_job(j)) {
        report(j, job_verdict(j, detail, sizeof detail), detail, tally, bad_names, &nbad);
        if (j->nv < j->ncells) cell_name(&cells[j->cells[j->nv]], j->name, sizeof j->name);
      }
      if (!mp_poll(&j->ch)) {
        if (mp_now() - j->t0 < opt.watchdog + 8) continue;
        (void)kill(-j->ch.pid, SIGKILL);
        mp_kill_all(&j->ch, 1);
        j->killed = 1;
      }
      /* The pipe's last lines come before its end. */
      for (double until = mp_now() + 1; !j->eof && mp_now() < until;)
        while (read_job(j) && !j->killed) {
          report(j, job_verdict(j, detail, sizeof detail), detail, tally, bad_names, &nbad);
          if (j->nv < j->ncells) cell_name(&cells[j->cells[j->nv]], j->name, sizeof j->name);
        }
      /* Whatever of the job's process group is still there (rank processes
       * of a cell that died) goes too. */
      (void)kill(-j->ch.pid, SIGKILL);
      /* A process that stopped after a verdict, before its next cell began
       * (a coordinator ends its batch at a hang), did not run that cell. */
      if (j->nv < j->ncells && !(j->nv > 0 && !j->killed && !j->verdict[0] && strcmp(j->phase, "starting") == 0))
        report(j, job_verdict(j, detail, sizeof detail), detail, tally, bad_names, &nbad);
      for (int k = j->nv; k < j->ncells; k++) /* not run: back to the queue */
        for (int i = 0; i < count; i++)
          if (list[i] == j->cells[k] && taken[i]) {
            taken[i] = 0, left++;
            break;
          }
      mp_close(&j->ch, 1);
      if (j->all_ok && !opt.keep_logs) unlink(j->log);
      busy[s] = 0, running--;
    }
  }
  printf("\nmatrix summary: %d cells in %.1f s: %d PASS, %d EXPECTED-ERROR-OK, %d FAIL, %d HANG", count,
         mp_now() - t_start, tally[V_PASS], tally[V_ERROR_OK], tally[V_FAIL], tally[V_HANG]);
  /* Only where some were (dev cells beyond the device count): the line is
   * otherwise what it was before SKIP existed. */
  if (tally[V_SKIP]) printf(", %d SKIP (too few devices)", tally[V_SKIP]);
  printf("\n");
  if (nbad) {
    printf("unexpected outcomes (%d):\n", nbad);
    for (int i = 0; i < nbad; i++) printf("  %s\n", bad_names[i]);
  }
  fflush(stdout);
  for (int i = 0; i < nbad; i++) free(bad_names[i]);
  free(bad_names);
  free(taken);
  free(jobs);
  free(busy);
  return nbad ? 1 : 0;
}

/* ---- Lists ---------------------------------------------------------------------------------- */

/* Resolves a comma-separated list of "all", "pairwise", names and ids into
 * ids, each once, in the order given; returns the count. */
static int select_cells(const char* what, const cell* cells, int ncells, int* list) {
  int n = 0;
  char* seen = (char*)calloc((size_t)ncells + 1, 1);
  int* tmp = (int*)malloc(((size_t)ncells + 1) * sizeof *tmp);
  REQUIRE(seen && tmp);
  while (*what) {
    size_t m = strcspn(what, ",");
    char tok[128];
    char* end;
    long id;
    cell c;
    int nt = 0;
    if (m == 0 || m >= sizeof tok) usage();
    memcpy(tok, what, m);
    tok[m] = '\0';
    id = strtol(tok, &end, 10);
    if (strcmp(tok, "all") == 0) {
      for (int k = 0; k < ncells; k++) tmp[nt++] = k;
    } else if (strcmp(tok, "pairwise") == 0) {
      nt = pairwise_by_device(cells, ncells, tmp);
    } else if (!*end) {
      if (id < 0 || id >= ncells) {
        fprintf(stderr, "no cell %ld (0..%d with -r as given)\n", id, ncells - 1);
        exit(2);
      }
      tmp[nt++] = (int)id;
    } else if (cell_parse(tok, &c) == 0) {
      for (int k = 0; k < ncells && nt == 0; k++)
        if (memcmp(&cells[k], &c, sizeof c) == 0) tmp[nt++] = k;
      if (nt == 0) {
        fprintf(stderr, "%s: its rank count is not in -r\n", tok);
        exit(2);
      }
    } else {
      fprintf(stderr, "%s: not a cell name or id (see --list all)\n", tok);
      exit(2);
    }
    for (int i = 0; i < nt; i++)
      if (!seen[tmp[i]]) seen[tmp[i]] = 1, list[n++] = tmp[i];
    what += m + (what[m] == ',');
  }
  free(seen);
  free(tmp);
  return n;
}

static void list_cells(const cell* cells, const int* list, int n) {
  for (int i = 0; i < n; i++) {
    char name[96];
    cell_name(&cells[list[i]], name, sizeof name);
    printf("%5d  %-52s %s\n", list[i], name, rules[expected(&cells[list[i]])].outcome);
  }
  fprintf(stderr, "%d cells\n", n);
}

static void default_logdir(void) {
  static char dir[PATH_MAX];
  char exe[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (k > 0) {
    exe[k] = '\0';
    *strrchr(exe, '/') = '\0';
    scopy(dir, sizeof dir - 16, exe);
    strcat(dir, "/matrix-logs");
  } else {
    snprintf(dir, sizeof dir, "matrix-logs");
  }
  opt.logdir = dir;
}

int main(int argc, char** argv) {
  static const struct option longs[] = {{"list", required_argument, NULL, 'L'},
                                        {"run", required_argument, NULL, 'R'},
                                        {"cell", required_argument, NULL, 'C'},
                                        {"rank", no_argument, NULL, 'W'},
                                        {"rules", no_argument, NULL, 'U'},
                                        {"shard", required_argument, NULL, 'S'},
                                        {"ops", required_argument, NULL, 'O'},
                                        {"devices", required_argument, NULL, 'D'},
                                        {"device-count", no_argument, NULL, 'N'},
                                        {NULL, 0, NULL, 0}};
  const char *list = NULL, *run = NULL, *v;
  char* one = NULL;
  int rules_only = 0, rank = 0, devcount_only = 0, o;
  self_path = argv[0];
  set_ranks("2,3,4");
  opt.ops = (1u << NC) - 1;
  opt.devs = (1u << NV) - 1;
  opt.calls = 2;
  opt.rounds = 2;
  opt.count = 1001;
  opt.watchdog = (v = getenv("CECOLL_MATRIX_WATCHDOG")) && *v ? atoi(v) : 30;
  opt.jobs = 2;
  opt.batch = 1;
  while ((o = getopt_long(argc, argv, "r:k:g:c:t:j:b:o:KvP:", longs, NULL)) != -1) {
    switch (o) {
      case 'L': list = optarg; break;
      case 'R': run = optarg; break;
      case 'C': one = optarg; break;
      case 'W': rank = 1; break;
      case 'U': rules_only = 1; break;
      case 'r': set_ranks(optarg); break;
      case 'O': set_ops(optarg); break;
      case 'D': set_devs(optarg); break;
      case 'N': devcount_only = 1; break;
      case 'k': opt.calls = atoi(optarg); break;
      case 'g': opt.rounds = atoi(optarg); break;
      case 'c': opt.count = strtoull(optarg, NULL, 10); break;
      case 't': opt.watchdog = atoi(optarg); break;
      case 'j': opt.jobs = atoi(optarg); break;
      case 'b': opt.batch = atoi(optarg); break;
      case 'o': opt.logdir = optarg; break;
      case 'K': opt.keep_logs = 1; break;
      case 'v': opt.verbose = 1; break;
      case 'P': opt_proc = atoi(optarg); break;
      case 'S':
        if (sscanf(optarg, "%d/%d", &opt.shard_k, &opt.shard_n) != 2 || opt.shard_n < 1 || opt.shard_k < 0 ||
            opt.shard_k >= opt.shard_n)
          usage();
        break;
      default: usage();
    }
  }
  if (optind != argc || opt.calls < 1 || opt.calls > MAXK || opt.rounds < 1 || opt.count < 1 || opt.watchdog < 1 ||
      opt.jobs < 1 || opt.jobs > 64 || opt.batch < 1 || opt.batch > MAX_BATCH)
    usage();
  if (rules_only) {
    print_rules();
    return 0;
  }
  if (rank) return rank_main();
  if (devcount_only) {
    printf("%d devices (%s)\n", device_count(), getenv("CECOLL_BACKEND") ? getenv("CECOLL_BACKEND") : "default backend");
    mp_tell_parent("DEVICES %d", device_count());
    return 0;
  }
  if (one) {
    cell c;
    char first[128];
    scopy(first, sizeof first, one);
    first[strcspn(first, ",")] = '\0';
    /* CECOLL_CHECK is read when the library loads: start again with it. */
    if (cell_parse(first, &c) == 0 && needs_check(&c) && !((v = getenv("CECOLL_CHECK")) && strcmp(v, "1") == 0)) {
      setenv("CECOLL_CHECK", "1", 1);
      execv("/proc/self/exe", argv);
      t_fatal_at(__FILE__, __LINE__, "execv: %s", strerror(errno));
    }
    return batch_main(one);
  }
  if (!list && !run) usage();
  {
    cell* cells;
    int ncells = all_cells(&cells), n, rc = 0;
    int* sel = (int*)malloc((size_t)ncells * sizeof *sel + sizeof *sel);
    REQUIRE(sel != NULL);
    n = select_cells(list ? list : run, cells, ncells, sel);
    if (opt.shard_n > 1) {
      int m = 0;
      for (int i = opt.shard_k; i < n; i += opt.shard_n) sel[m++] = sel[i];
      n = m;
    }
    if (list) {
      list_cells(cells, sel, n);
    } else {
      /* A cell process that died must not kill the runner through a pipe. */
      signal(SIGPIPE, SIG_IGN);
      if (!opt.logdir) default_logdir();
      rc = run_cells(cells, sel, n);
    }
    free(sel);
    free(cells);
    return rc;
  }
}
