/* mp_common.c: the helpers declared in mp_common.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "mp_common.h"

#include "common.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

double mp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- The bootstrap id ---------------------------------------------------- */

void mp_id_to_hex(const ncclUniqueId* id, char out[MP_ID_HEX]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
    unsigned char b = (unsigned char)id->internal[i];
    out[2 * i] = digits[b >> 4];
    out[2 * i + 1] = digits[b & 15];
  }
  out[2 * NCCL_UNIQUE_ID_BYTES] = '\0';
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int mp_id_from_hex(const char* hex, ncclUniqueId* id) {
  if (!hex || strlen(hex) != 2 * NCCL_UNIQUE_ID_BYTES) return -1;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    id->internal[i] = (char)(hi << 4 | lo);
  }
  return 0;
}

/* The address starts at byte 16: the magic and the secret come first. */
#define MP_ID_ADDR_OFF 16

int mp_id_addr(const ncclUniqueId* id, struct sockaddr_storage* ss, socklen_t* len) {
  sa_family_t fam;
  memcpy(&fam, id->internal + MP_ID_ADDR_OFF, sizeof fam);
  memset(ss, 0, sizeof *ss);
  if (fam == AF_INET) {
    struct sockaddr_in sin;
    memcpy(&sin, id->internal + MP_ID_ADDR_OFF, sizeof sin);
    if (sin.sin_port == 0) return -1;
    memcpy(ss, &sin, sizeof sin);
    *len = sizeof sin;
    return 0;
  }
  if (fam == AF_INET6) {
    struct sockaddr_in6 sin6;
    memcpy(&sin6, id->internal + MP_ID_ADDR_OFF, sizeof sin6);
    if (sin6.sin6_port == 0) return -1;
    memcpy(ss, &sin6, sizeof sin6);
    *len = sizeof sin6;
    return 0;
  }
  return -1;
}

void mp_addr_string(const struct sockaddr_storage* ss, char* out, size_t n) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in* sin = (const struct sockaddr_in*)ss;
    inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
    snprintf(out, n, "%s:%u", host, (unsigned)ntohs(sin->sin_port));
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6* sin6 = (const struct sockaddr_in6*)ss;
    inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
    snprintf(out, n, "[%s]:%u", host, (unsigned)ntohs(sin6->sin6_port));
  } else {
    snprintf(out, n, "(none)");
  }
}

/* ---- Children -------------------------------------------------------------- */

/* A close-on-exec pipe whose ends are above the fds the child is given
 * (3 and 4), so the dup2 onto them never clobbers another end. */
static int high_pipe(int fds[2]) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  for (int i = 0; i < 2; i++) {
    fds[i] = fcntl(p[i], F_DUPFD_CLOEXEC, 10);
    close(p[i]);
  }
  if (fds[0] < 0 || fds[1] < 0) {
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
    return -1;
  }
  return 0;
}

int mp_spawn(mp_child* c, const char* self, char* const args[], char* const extra_env[]) {
  return mp_spawn_ex(c, self, args, extra_env, NULL);
}

int mp_spawn_ex(mp_child* c, const char* self, char* const args[], char* const extra_env[], const mp_spawn_opt* opt) {
  char** env;
  char** argv;
  int up[2], down[2], rc;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  sigset_t def;
  memset(c, 0, sizeof *c);
  c->to_child = c->from_child = -1;
  if (high_pipe(up) != 0) return -1;
  if (high_pipe(down) != 0) {
    close(up[0]);
    close(up[1]);
    return -1;
  }
  if (t_spawn_vectors(self, extra_env, args, &argv, &env) != 0) {
    close(up[0]);
    close(up[1]);
    close(down[0]);
    close(down[1]);
    return -1;
  }
  posix_spawn_file_actions_init(&fa);
  /* dup2 clears close-on-exec on the target: only fds 0-4 reach the child. */
  posix_spawn_file_actions_adddup2(&fa, up[1], 3);
  posix_spawn_file_actions_adddup2(&fa, down[0], 4);
  if (opt && opt->output) {
    posix_spawn_file_actions_addopen(&fa, 1, opt->output, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  /* The parent ignores SIGPIPE; the child starts with the default. */
  posix_spawnattr_init(&attr);
  sigemptyset(&def);
  sigaddset(&def, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &def);
  if (opt && opt->new_pgroup) {
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  } else {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  }
  rc = posix_spawn(&c->pid, "/proc/self/exe", &fa, &attr, argv, env);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  free(argv);
  close(up[1]);
  close(down[0]);
  if (rc != 0) {
    fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
    close(up[0]);
    close(down[1]);
    c->pid = 0;
    return -1;
  }
  c->from_child = up[0];
  c->to_child = down[1];
  return 0;
}

static int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int vsend(int fd, const char* fmt, va_list ap) {
  char buf[512];
  int len;
  if (fd < 0) return -1;
  len = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  if (len < 0) return -1;
  if ((size_t)len > sizeof buf - 2) len = (int)sizeof buf - 2;
  buf[len++] = '\n';
  return write_all(fd, buf, (size_t)len);
}

int mp_send_line(mp_child* c, const char* fmt, ...) {
  va_list ap;
  int rc;
  va_start(ap, fmt);
  rc = vsend(c->to_child, fmt, ap);
  va_end(ap);
  return rc;
}

/* Line reader shared by both sides: buf/len hold what came after the last
 * line returned. */
static int recv_line(int fd, char* buf, size_t* len, size_t cap, char* out, size_t n, double deadline) {
  for (;;) {
    char* nl = memchr(buf, '\n', *len);
    if (nl) {
      size_t l = (size_t)(nl - buf);
      size_t k = l < n - 1 ? l : n - 1;
      memcpy(out, buf, k);
      out[k] = '\0';
      memmove(buf, nl + 1, *len - l - 1);
      *len -= l + 1;
      return 1;
    }
    if (*len == cap) *len = 0; /* an over-long line: drop it */
    if (fd < 0) return -1;
    double left = deadline - mp_now();
    if (left <= 0) return 0;
    struct pollfd p = {fd, POLLIN, 0};
    int pr = poll(&p, 1, (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t r = read(fd, buf + *len, cap - *len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return -1;
    *len += (size_t)r;
  }
}

int mp_recv_line(mp_child* c, char* out, size_t n, double deadline) {
  return recv_line(c->from_child, c->line, &c->line_len, sizeof c->line, out, n, deadline);
}

static void reap(mp_child* c, int flags) {
  int st;
  pid_t r;
  if (!c->pid || c->done) return;
  do {
    r = waitpid(c->pid, &st, flags);
  } while (r < 0 && errno == EINTR);
  if (r == c->pid) {
    c->done = 1;
    c->status = st;
  } else if (r < 0) {
    /* Not ours any more (should not happen): treat as a failure. */
    c->done = 1;
    c->status = 0xff00;
  }
}

int mp_wait_all(mp_child* ch, int n, double deadline, const char* what) {
  int killed = 0;
  for (;;) {
    int running = 0;
    for (int i = 0; i < n; i++) {
      reap(&ch[i], WNOHANG);
      if (ch[i].pid && !ch[i].done) running++;
    }
    if (running == 0) return killed;
    if (mp_now() >= deadline) break;
    usleep(5000);
  }
  for (int i = 0; i < n; i++) {
    if (ch[i].pid && !ch[i].done) {
      fprintf(stderr, "WATCHDOG %s: child %d (pid %d) still running at its deadline: killed\n", what, i,
              (int)ch[i].pid);
      kill(ch[i].pid, SIGKILL);
      reap(&ch[i], 0);
      killed++;
    }
  }
  fflush(stderr);
  return killed;
}

int mp_poll(mp_child* c) {
  reap(c, WNOHANG);
  return c->pid && c->done;
}

void mp_kill_all(mp_child* ch, int n) {
  for (int i = 0; i < n; i++) {
    if (ch[i].pid && !ch[i].done) {
      kill(ch[i].pid, SIGKILL);
      reap(&ch[i], 0);
    }
  }
}

void mp_close(mp_child* ch, int n) {
  for (int i = 0; i < n; i++) {
    if (ch[i].to_child >= 0) close(ch[i].to_child);
    if (ch[i].from_child >= 0) close(ch[i].from_child);
    ch[i].to_child = ch[i].from_child = -1;
  }
}

int mp_ok(const mp_child* c) { return c->pid && c->done && WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0; }

const char* mp_status_string(const mp_child* c, char* buf, size_t n) {
  if (!c->pid)
    snprintf(buf, n, "not started");
  else if (!c->done)
    snprintf(buf, n, "running");
  else if (WIFEXITED(c->status))
    snprintf(buf, n, "exit %d%s", WEXITSTATUS(c->status), WEXITSTATUS(c->status) == 3 ? " (its watchdog)" : "");
  else if (WIFSIGNALED(c->status))
    snprintf(buf, n, "signal %d", WTERMSIG(c->status));
  else
    snprintf(buf, n, "status 0x%x", c->status);
  return buf;
}

/* ---- In the child ------------------------------------------------------------ */

void mp_tell_parent(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)vsend(3, fmt, ap);
  va_end(ap);
}

int mp_hear_parent(char* out, size_t n, double deadline) {
  static char buf[512];
  static size_t len;
  return recv_line(4, buf, &len, sizeof buf, out, n, deadline);
}

/* ---- Directory snapshots ------------------------------------------------------ */

void mp_dir_snapshot(const char* path, mp_dir* d) {
  DIR* dir = opendir(path);
  struct dirent* e;
  int cap = 0;
  d->names = NULL;
  d->n = 0;
  if (!dir) return;
  while ((e = readdir(dir)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (d->n == cap) {
      char** nn;
      cap = cap ? 2 * cap : 32;
      nn = (char**)realloc(d->names, (size_t)cap * sizeof *nn);
      if (!nn) break;
      d->names = nn;
    }
    d->names[d->n] = strdup(e->d_name);
    if (d->names[d->n]) d->n++;
  }
  closedir(dir);
}

int mp_dir_new(const mp_dir* before, const mp_dir* after, char* out, size_t n) {
  int count = 0;
  size_t used = 0;
  if (n) out[0] = '\0';
  for (int i = 0; i < after->n; i++) {
    int seen = 0;
    for (int j = 0; j < before->n && !seen; j++) seen = strcmp(after->names[i], before->names[j]) == 0;
    if (seen) continue;
    count++;
    if (used < n) {
      int w = snprintf(out + used, n - used, "%s%s", count > 1 ? "," : "", after->names[i]);
      if (w > 0) used += (size_t)w;
    }
  }
  return count;
}

void mp_dir_free(mp_dir* d) {
  for (int i = 0; i < d->n; i++) free(d->names[i]);
  free(d->names);
  d->names = NULL;
  d->n = 0;
}
