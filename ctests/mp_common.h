/*
 * mp_common.h: helpers of the multi-process C tests (test_multiproc.c).
 *
 * A test process that loads cecoll carries the Go runtime from its first
 * instruction, so children are started with posix_spawn of
 * /proc/self/exe, never with a bare fork. The parent hands each child the
 * bootstrap id in hex on its command line and talks to it through two
 * pipes: the child writes status lines to fd 3 and reads the parent's
 * lines from fd 4.
 *
 * Every wait here takes a deadline, so a child that hangs is killed and
 * reported, never waited on forever.
 */
#ifndef CECOLL_CTESTS_MP_COMMON_H_
#define CECOLL_CTESTS_MP_COMMON_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "nccl.h"

/* Seconds on CLOCK_MONOTONIC, the same clock in every process of the host,
 * so timestamps compare across processes. */
double mp_now(void);

/* ---- The bootstrap id ---------------------------------------------------- */

#define MP_ID_HEX (2 * NCCL_UNIQUE_ID_BYTES + 1)

void mp_id_to_hex(const ncclUniqueId* id, char out[MP_ID_HEX]);

/* 0 on success, -1 when hex is not 2*NCCL_UNIQUE_ID_BYTES hex digits. */
int mp_id_from_hex(const char* hex, ncclUniqueId* id);

/* The root listener's address of a cecoll id: bytes 16.. hold a Linux
 * struct sockaddr_in or sockaddr_in6 in kernel layout. Returns 0 and fills
 * ss/len, or -1 when the id holds no such address (e.g. an in-process id). */
int mp_id_addr(const ncclUniqueId* id, struct sockaddr_storage* ss, socklen_t* len);

/* "1.2.3.4:5678" or "[::1]:5678"; "(none)" without an address. */
void mp_addr_string(const struct sockaddr_storage* ss, char* out, size_t n);

/* ---- Children -------------------------------------------------------------- */

typedef struct {
  pid_t pid;     /* 0: not started */
  int to_child;  /* parent's write end of the child's fd 4, or -1 */
  int from_child;/* parent's read end of the child's fd 3, or -1 */
  int done;      /* reaped */
  int status;    /* waitpid status once done */
  char line[512];/* partial input of mp_recv_line */
  size_t line_len;
} mp_child;

/* Starts /proc/self/exe with args (argv[0] is set to self, args NULL-ended)
 * and the caller's environment plus extra_env ("K=V" entries replacing
 * inherited ones of the same name, NULL-ended). The child's fds 3 and 4
 * are the status pipes. Returns 0, or -1 (c->pid stays 0). */
int mp_spawn(mp_child* c, const char* self, char* const args[], char* const extra_env[]);

/* What mp_spawn_ex adds to mp_spawn. */
typedef struct {
  int new_pgroup;     /* the child leads a new process group, so kill(-pid) also
                       * reaches the processes it starts itself */
  const char* output; /* file (created, truncated) for the child's stdout and
                       * stderr; NULL: inherited */
} mp_spawn_opt;

/* mp_spawn with options (opt may be NULL). */
int mp_spawn_ex(mp_child* c, const char* self, char* const args[], char* const extra_env[], const mp_spawn_opt* opt);

/* Reaps the child if it has exited, without waiting; 1 when it is done. */
int mp_poll(mp_child* c);

/* Writes one line (a '\n' is added) to the child; -1 on error. */
int mp_send_line(mp_child* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reads the next line from the child into out (without '\n') until the
 * absolute deadline (mp_now() seconds). 1: a line; 0: the deadline passed;
 * -1: the child closed its end. */
int mp_recv_line(mp_child* c, char* out, size_t n, double deadline);

/* Reaps children until all are done or the absolute deadline passes; on
 * the deadline every child still running is killed with SIGKILL, reaped,
 * and reported on stderr with `what`. Returns the number killed. */
int mp_wait_all(mp_child* ch, int n, double deadline, const char* what);

/* Kills (SIGKILL) and reaps every child still running; closes the pipes. */
void mp_kill_all(mp_child* ch, int n);
void mp_close(mp_child* ch, int n);

/* 0 when the child exited with status 0. */
int mp_ok(const mp_child* c);

/* "exit 1", "signal 9", "running": for messages. */
const char* mp_status_string(const mp_child* c, char* buf, size_t n);

/* ---- In the child ------------------------------------------------------------ */

/* Writes one line to the parent (fd 3); a no-op without a parent. */
void mp_tell_parent(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reads one line from the parent (fd 4) until the absolute deadline: as
 * mp_recv_line. */
int mp_hear_parent(char* out, size_t n, double deadline);

/* ---- Directory snapshots (leaks in /dev/shm) ----------------------------------- */

typedef struct {
  char** names;
  int n;
} mp_dir;

/* The entry names of path ("." and ".." left out); an unreadable directory
 * gives an empty snapshot. */
void mp_dir_snapshot(const char* path, mp_dir* d);

/* Names in `after` that are not in `before`, comma-separated into out;
 * returns their count. */
int mp_dir_new(const mp_dir* before, const mp_dir* after, char* out, size_t n);

void mp_dir_free(mp_dir* d);

#endif /* CECOLL_CTESTS_MP_COMMON_H_ */
