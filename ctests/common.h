/*
 * common.h: shared helpers of cecoll's C tests.
 *
 * Every test is a plain C program built with -Wall -Werror against include/
 * only and linked to build/libcecoll.so. It uses nothing but nccl.h and the
 * cecoll* helpers of nccl_ce.h, so the same binary runs on the host device
 * and on a GPU.
 *
 * Results: CHECK() stops the program on a failed setup call (printing
 * file:line, the code and the last-error text); EXPECT*() counts a failed
 * case and goes on. Each binary ends with t_report(), which prints
 * "N passed, N failed" and gives the exit status.
 */
#ifndef CECOLL_CTESTS_COMMON_H_
#define CECOLL_CTESTS_COMMON_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nccl.h"
#include "nccl_ce.h"

/* ---- Reporting ---------------------------------------------------------- */

extern int t_passed;
extern int t_failed;

/* Names the running case, for failure messages and the watchdog
 * (CECOLL_TEST_VERBOSE=1 also prints it as it starts). */
void t_set_case(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
const char* t_case(void);

void t_fail_at(const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void t_fatal_at(const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4), noreturn));

/* Prints the totals and returns the exit status (0 only with no failure
 * and at least one pass). */
int t_report(const char* prog);

/* Kills the program with a message naming the case after `seconds`
 * (CECOLL_TEST_WATCHDOG overrides; 0 disables), so a hang is a failure
 * even when run by hand. */
void t_watchdog(int seconds);

/* A failed setup call ends the program: nothing after it could mean much. */
#define CHECK(call)                                                              \
  do {                                                                           \
    ncclResult_t check_r_ = (call);                                              \
    if (check_r_ != ncclSuccess)                                                 \
      t_fatal_at(__FILE__, __LINE__, "%s -> %d (%s): %s", #call, (int)check_r_, \
                 ncclGetErrorString(check_r_), ncclGetLastError(NULL));          \
  } while (0)

/* A condition of setup that must hold. */
#define REQUIRE(cond)                                                  \
  do {                                                                 \
    if (!(cond)) t_fatal_at(__FILE__, __LINE__, "required: %s", #cond); \
  } while (0)

/* One checked expectation: counts a pass or a failure. */
#define EXPECT(cond, ...)                                  \
  do {                                                     \
    if (cond) {                                            \
      t_passed++;                                          \
    } else {                                               \
      t_fail_at(__FILE__, __LINE__, __VA_ARGS__);          \
    }                                                      \
  } while (0)

/* A call that must return `want`. */
#define EXPECT_RESULT(call, want)                                                      \
  do {                                                                                 \
    ncclResult_t er_got_ = (call);                                                     \
    ncclResult_t er_want_ = (want);                                                    \
    EXPECT(er_got_ == er_want_, "%s -> %d (%s), want %d (%s); last error: %s", #call, \
           (int)er_got_, ncclGetErrorString(er_got_), (int)er_want_,                   \
           ncclGetErrorString(er_want_), ncclGetLastError(NULL));                      \
  } while (0)

/* Runs one group of checks unless CECOLL_TEST_SKIP (a comma-separated list
 * of names) names it: a way to get past a known crash while debugging. */
int t_skipped(const char* name);
#define RUN(call)                                   \
  do {                                              \
    if (!t_skipped(#call)) call;                    \
  } while (0)

/* ---- Data --------------------------------------------------------------- */

/* The byte written over every output before a collective: bytes the
 * collective should have written and did not stay at this value. */
#define T_POISON 0xA5

/* Deterministic random bytes (xorshift64*), seeded per case. */
void t_fill_random(void* buf, size_t bytes, uint64_t* state);

/* Compares and reports: returns the number of differing bytes, printing
 * the first few with `what` as context. */
size_t t_compare(const void* got, const void* want, size_t bytes, const char* what);

/* sizeof the element of an ncclDataType_t; 0 for an unknown value. */
size_t t_type_size(ncclDataType_t t);
const char* t_type_name(ncclDataType_t t);
const char* t_func_name(ncclFunc_t f);

/* ---- Options ------------------------------------------------------------ */

#define T_MAX_LIST 16
#define T_MAX_RANKS 64

/* What a test binary exercises; argv overrides the environment, which
 * overrides the defaults, so run.sh can shrink a run. */
typedef struct {
  int ranks[T_MAX_LIST]; /* -r 1,2,3  | CECOLL_TEST_RANKS  */
  int nranks;
  size_t counts[T_MAX_LIST]; /* -c 0,1,7 | CECOLL_TEST_COUNTS */
  int ncounts;
  size_t large_mib; /* -l 64      | CECOLL_TEST_LARGE_MB (0 skips the large case) */
  int threads;      /* -m group|threads|both | CECOLL_TEST_MODE: which launch modes */
  int group;
  int replays; /* -g 3       | CECOLL_TEST_REPLAYS (graph replays; 0 skips capture) */
  int quick;   /* -q         | CECOLL_TEST_QUICK=1: a reduced set (LeakSanitizer runs) */
} t_opts;

/* Parses the options above; prints usage and exits on a bad one. */
void t_parse(t_opts* o, int argc, char** argv);

/* 1 when list holds n. */
int t_has_rank(const t_opts* o, int n);

/* ---- Ranks -------------------------------------------------------------- */

/* The ranks of one communicator, all driven by this process. */
typedef struct {
  int n;
  int threaded; /* created by one thread per rank (ncclCommInitRank), else ncclCommInitAll */
  int dev[T_MAX_RANKS];
  ncclComm_t comm[T_MAX_RANKS];
  cudaStream_t stream[T_MAX_RANKS];
} t_world;

/* Device of rank r when n ranks share the backend's devices: r % count, so
 * a count smaller than n repeats devices. */
int t_device_for(int r);

/* Creates n ranks with ncclCommInitAll(devlist) on one thread, and a cecoll
 * stream per rank on its device. devlist NULL: t_device_for(). */
void t_world_init_all(t_world* w, int n, const int* devlist);

/* Creates n ranks with ncclGetUniqueId and one thread per rank calling
 * ncclCommInitRank on its own device. */
void t_world_init_threads(t_world* w, int n);

/* Destroys streams and communicators (ncclCommFinalize + ncclCommDestroy). */
void t_world_destroy(t_world* w);

/* Runs fn(rank, arg) on n threads at once, one per rank, each on the rank's
 * device, and joins them. */
typedef void (*t_rank_fn)(int rank, void* arg);
void t_run_threads(const t_world* w, t_rank_fn fn, void* arg);

/* A reusable barrier for the threads of t_run_threads. */
typedef struct t_barrier t_barrier;
t_barrier* t_barrier_new(int n);
void t_barrier_wait(t_barrier* b);
void t_barrier_free(t_barrier* b);

/* ---- Collective cases ----------------------------------------------------- */

/* One collective call over every rank of a world, its buffers, and the
 * reference result computed on the host. */
typedef struct {
  ncclFunc_t func;
  ncclDataType_t dtype;
  size_t count;           /* the public call's count (per rank) */
  int root;               /* Scatter, Gather */
  uint64_t inplace_ranks; /* bit r: rank r calls in place (root only for Scatter/Gather) */
  int registered;         /* buffers in windows (ncclMemAlloc + ncclCommWindowRegister) */
  int null_unused;        /* non-root buffers the call does not use are NULL */
  int use_launch;         /* call ncclLaunchCeColl rather than the public function */
  int iters;              /* eager calls, each with new inputs (>= 1) */
  int replays;            /* >0: capture the call once, replay it this many times */
  uint64_t seed;
} t_coll;

/* Runs the case on w (group mode: one thread, ncclGroupStart/End; threaded
 * worlds: one thread per rank, no group) and checks every byte of every
 * rank's buffers, guard bytes included. Counts one pass or one failure per
 * call; returns the number of failed calls. */
int t_coll_run(t_world* w, const t_coll* c);

/* Collective-specific cases a test adds to the standard sweep, run on each
 * world the sweep creates. seed advances from case to case. */
typedef void (*t_extra_fn)(t_world* w, const t_opts* o, uint64_t* seed);

/* The standard sweep of one collective, the whole main() of a test: every
 * datatype, every count of the options in and out of place, registered and
 * not, every root, ranks mixing in-place and out-of-place, ncclLaunchCeColl
 * with and without windows, repeated calls, graph capture and replay, for
 * each rank count and launch mode; then a devlist repeating a device, the
 * large case, and the B9 case (the program again with
 * CECOLL_INTRA_BATCH_SYNC_THRESHOLD/FREQ lowered, which the library reads
 * from its environment at load, so it needs a new process). */
int t_coll_main(ncclFunc_t func, int argc, char** argv, t_extra_fn extra);

/* Starts `self` again with extra environment entries ("K=V", NULL ended)
 * and args through posix_spawn (never fork: the Go runtime is already
 * running) and returns its exit status (-1 if it could not start or died
 * from a signal). */
int t_spawn_self(const char* self, char* const extra_env[], char* const args[]);

/* t_spawn_vectors builds posix_spawn's argv (self, then args) and envp (extra_env, then
 * every inherited entry that no extra one replaces by name); the caller frees both arrays.
 * 0, or -1 out of memory. */
int t_spawn_vectors(const char* self, char* const extra_env[], char* const args[], char*** argvp, char*** envp);

#endif /* CECOLL_CTESTS_COMMON_H_ */
