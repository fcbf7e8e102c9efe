/* test_ncclenv.c: NCCL's environment, as NCCL defines it, where the
 * CECOLL_ twin is unset. Each case runs in children started with
 * posix_spawn (mp_common.c) under their own environment, and the parent
 * reads what they printed and logged:
 *
 *   debug_info     NCCL_DEBUG=INFO, NCCL_DEBUG_FILE=dir/env.%h.%p.log: the
 *                  file named with the host and the child's pid holds the
 *                  version banner and NCCL's default subsystems (INIT, not
 *                  the per-call COLL lines), every line tagged "cecoll";
 *                  nothing on the child's stderr
 *   no_gpu_lines   CECOLL_BACKEND=auto CECOLL_DEBUG=INFO where auto takes the
 *                  host device: no nvidia, libcuda or CUDA_ line
 *   debug_subsys   NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL: the per-call
 *                  lines and not the INIT ones
 *   version        NCCL_DEBUG=VERSION: the banner alone, once
 *   cecoll_wins    CECOLL_DEBUG=NONE beats NCCL_DEBUG=INFO
 *   warn_once      bad NCCL_DEBUG_SUBSYS, NCCL_SOCKET_FAMILY and CECOLL_TIMEOUT
 *                  in a child making 3 communicators: one warning each
 *   comm_id        NCCL_COMM_ID=127.0.0.1:<port>: two processes make their
 *                  ids alone (the same bytes), rank 1 first, and meet at
 *                  the address rank 0's init listens at; a bad address
 *                  fails ncclGetUniqueId with ncclInvalidArgument
 *   forward        with a real (fake) NCCL loaded (CECOLL_NCCL_LIB from
 *                  FAKE_NCCL): NCCL_COMM_ID is the real library's, so
 *                  cecoll's id names another port and leaves it free;
 *                  NCCL_DEBUG_FILE is shared with the real library, which
 *                  opens it with fopen("w"): no line of either is lost or
 *                  clobbered (skipped without FAKE_NCCL)
 *
 * Usage: test_ncclenv [-k] (keep the work directory). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "mp_common.h"

static const char* self;
static char dir[256];

/* ---- children ------------------------------------------------------------- */

/* One AllGather of n ranks (this one: rank) on comm, checked. */
static int allgather_ok(ncclComm_t comm, int rank, int n) {
  const size_t count = 64;
  void *send, *recv;
  cudaStream_t s;
  float host[64 * 4];
  int ok = 1;
  if (cecollStreamCreate(&s) != ncclSuccess || ncclMemAlloc(&send, count * 4) != ncclSuccess ||
      ncclMemAlloc(&recv, n * count * 4) != ncclSuccess)
    return 0;
  for (size_t i = 0; i < count; i++) host[i] = (float)(rank * 1000 + i);
  ok = cecollMemcpy(send, host, count * 4) == ncclSuccess &&
       ncclAllGather(send, recv, count, ncclFloat32, comm, s) == ncclSuccess &&
       cecollStreamSynchronize(s) == ncclSuccess && cecollMemcpy(host, recv, n * count * 4) == ncclSuccess;
  for (int r = 0; ok && r < n; r++)
    for (size_t i = 0; i < count; i++) ok = ok && host[r * count + i] == (float)(r * 1000 + i);
  ncclMemFree(send);
  ncclMemFree(recv);
  cecollStreamDestroy(s);
  return ok;
}

/* coll [times]: a one-rank communicator made from a unique id, times times. */
static int child_coll(int times) {
  const char* backend = "?";
  if (cecollGetBackend(&backend) != ncclSuccess) return 1;
  mp_tell_parent("backend %s", backend);
  for (int i = 0; i < times; i++) {
    ncclUniqueId id;
    ncclComm_t comm;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) return 1;
    if (!allgather_ok(comm, 0, 1)) return 1;
    if (ncclCommDestroy(comm) != ncclSuccess) return 1;
  }
  mp_tell_parent("ok");
  return 0;
}

/* commid rank: rank of 2, the id made here from NCCL_COMM_ID. Rank 0's
 * process is the root, which relays later exchanges: it stays until the
 * parent says rank 1 is done, as an id-making process must. */
static int child_commid(int rank) {
  ncclUniqueId id;
  ncclComm_t comm;
  char hex[MP_ID_HEX];
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  mp_id_to_hex(&id, hex);
  mp_tell_parent("id %s", hex);
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: init: %s\n", rank, ncclGetLastError(NULL));
    return 1;
  }
  if (!allgather_ok(comm, rank, 2)) return 1;
  if (ncclCommDestroy(comm) != ncclSuccess) return 1;
  mp_tell_parent("ok");
  if (rank == 0) {
    char line[64];
    mp_hear_parent(line, sizeof line, mp_now() + 60);
  }
  return 0;
}

/* badcommid: ncclGetUniqueId refuses a bad NCCL_COMM_ID, naming it. */
static int child_badcommid(void) {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  const char* last = ncclGetLastError(NULL);
  if (r != ncclInvalidArgument || strstr(last, "NCCL_COMM_ID") == NULL) {
    fprintf(stderr, "ncclGetUniqueId -> %d: %s\n", (int)r, last);
    return 1;
  }
  mp_tell_parent("ok");
  return 0;
}

/* fwdport port: in forward mode, cecoll's id and listener stay off the
 * port NCCL_COMM_ID gives the real library. */
static int child_fwdport(int port) {
  ncclUniqueId id;
  struct sockaddr_storage ss;
  socklen_t len;
  char where[128];
  if (ncclGetUniqueId(&id) != ncclSuccess || mp_id_addr(&id, &ss, &len) != 0) return 1;
  mp_addr_string(&ss, where, sizeof where);
  int theirs = ntohs(((struct sockaddr_in*)&ss)->sin_port);
  if (theirs == port) {
    fprintf(stderr, "cecoll's id names %s, NCCL_COMM_ID's port\n", where);
    return 1;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    perror("bind NCCL_COMM_ID's port");
    return 1;
  }
  close(fd);
  return child_coll(1);
}

static int child_main(int argc, char** argv) {
  const char* role = argv[2];
  int arg = argc > 3 ? atoi(argv[3]) : 1;
  if (strcmp(role, "coll") == 0) return child_coll(arg);
  if (strcmp(role, "commid") == 0) return child_commid(arg);
  if (strcmp(role, "badcommid") == 0) return child_badcommid();
  if (strcmp(role, "fwdport") == 0) return child_fwdport(arg);
  fprintf(stderr, "unknown role %s\n", role);
  return 2;
}

/* ---- the parent -------------------------------------------------------------- */

/* The variables a case starts from: none of the log's or bootstrap's set. */
#define CLEAN                                                                                          \
  "CECOLL_DEBUG=", "NCCL_DEBUG=", "CECOLL_DEBUG_SUBSYS=", "NCCL_DEBUG_SUBSYS=", "CECOLL_DEBUG_FILE=", \
      "NCCL_DEBUG_FILE=", "CECOLL_COMM_ID=", "NCCL_COMM_ID=", "CECOLL_SOCKET_FAMILY=", "NCCL_SOCKET_FAMILY=", \
      "CECOLL_NCCL_LIB=", "CECOLL_BACKEND=host"

/* The backend the last child of role coll ran on. */
static char child_backend[64];

/* Runs one child (role, arg) with env; its stdout and stderr go to
 * dir/<name>.out. Returns 0 when it exited 0 and said "ok". */
static int run_child(mp_child* c, const char* name, const char* role, const char* arg, char* const env[], int wait) {
  char out[512];
  char* args[] = {"--child", (char*)role, (char*)arg, NULL};
  snprintf(out, sizeof out, "%s/%s.out", dir, name);
  mp_spawn_opt opt = {.output = out};
  memset(c, 0, sizeof *c);
  if (mp_spawn_ex(c, self, args, env, &opt) != 0) return -1;
  if (!wait) return 0;
  char line[512];
  int said = 0;
  double deadline = mp_now() + 60;
  while (mp_recv_line(c, line, sizeof line, deadline) == 1) {
    said |= strcmp(line, "ok") == 0;
    if (strncmp(line, "backend ", 8) == 0) snprintf(child_backend, sizeof child_backend, "%.60s", line + 8);
  }
  mp_wait_all(c, 1, deadline, name);
  int ok = mp_ok(c) && said;
  mp_close(c, 1);
  return ok ? 0 : -1;
}

/* The whole of a file, NUL-terminated (static buffer). */
static const char* slurp(const char* path) {
  static char buf[1 << 20];
  FILE* f = fopen(path, "r");
  size_t n = 0;
  buf[0] = '\0';
  if (f == NULL) return NULL;
  n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int count_of(const char* hay, const char* needle) {
  int n = 0;
  for (const char* p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* Lines of text that contain none of the needles (NULL-ended). */
static int lines_without(const char* text, const char* const needles[]) {
  int bad = 0;
  for (const char* p = text; *p != '\0';) {
    const char* e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int hit = 0;
    for (int i = 0; needles[i] != NULL && !hit; i++) hit = memmem(p, len, needles[i], strlen(needles[i])) != NULL;
    if (!hit) {
      fprintf(stderr, "  line without a tag: %.*s\n", (int)len, p);
      bad++;
    }
    p += len + (e != NULL);
  }
  return bad;
}

/* The host name as NCCL's %h writes it. */
static void short_host(char* out, size_t n) {
  gethostname(out, n - 1);
  out[n - 1] = '\0';
  out[strcspn(out, ".")] = '\0';
  for (char* p = out; *p; p++)
    if (*p == '%' || *p == '/') *p = '-';
}

static const char* out_of(const char* name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.out", dir, name);
  const char* t = slurp(path);
  return t ? t : "";
}

static void check_debug_info(void) {
  mp_child c;
  char file[400], host[256], path[700];
  t_set_case("NCCL_DEBUG=INFO NCCL_DEBUG_FILE");
  snprintf(file, sizeof file, "NCCL_DEBUG_FILE=%s/env.%%h.%%p.log", dir);
  char* env[] = {CLEAN, "NCCL_DEBUG=INFO", file, NULL};
  EXPECT(run_child(&c, "debug_info", "coll", "1", env, 1) == 0, "child failed: %s", out_of("debug_info"));
  short_host(host, sizeof host);
  snprintf(path, sizeof path, "%s/env.%s.%d.log", dir, host, (int)c.pid);
  const char* log = slurp(path);
  EXPECT(log != NULL, "no debug file %s (%%h, %%p)", path);
  if (log == NULL) return;
  EXPECT(count_of(log, "cecoll INFO cecoll version ") == 1, "the banner, once, in:\n%s", log);
  EXPECT(strstr(log, " ready") != NULL, "INIT lines (NCCL's default subsystems) missing:\n%s", log);
  EXPECT(strstr(log, "ce AllGather") == NULL, "a COLL line outside NCCL's default subsystems:\n%s", log);
  static const char* const tags[] = {" cecoll ", NULL};
  EXPECT(lines_without(log, tags) == 0, "every line is tagged cecoll");
  EXPECT(strstr(out_of("debug_info"), "cecoll") == NULL, "stderr has cecoll lines: %s", out_of("debug_info"));
}

/* On the host device, chosen by auto, INFO says nothing of a GPU
 * backend that did not load. */
static void check_no_gpu_lines(void) {
  mp_child c;
  t_set_case("CECOLL_BACKEND=auto on the host device: no nvidia lines");
  char* env[] = {CLEAN, "CECOLL_BACKEND=auto", "CECOLL_DEBUG=INFO", NULL};
  EXPECT(run_child(&c, "auto", "coll", "1", env, 1) == 0, "child failed");
  if (strcmp(child_backend, "host") != 0) {
    printf("SKIP no nvidia lines: auto chose %s\n", child_backend);
    return;
  }
  const char* out = out_of("auto");
  EXPECT(strstr(out, " ready") != NULL, "INFO lines missing:\n%s", out);
  EXPECT(strstr(out, "nvidia") == NULL && strstr(out, "libcuda") == NULL && strstr(out, "CUDA_") == NULL,
         "GPU lines on the host device:\n%s", out);
}

static void check_debug_subsys(void) {
  mp_child c;
  t_set_case("NCCL_DEBUG_SUBSYS=COLL");
  char* env[] = {CLEAN, "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=COLL", NULL};
  EXPECT(run_child(&c, "debug_subsys", "coll", "1", env, 1) == 0, "child failed");
  const char* out = out_of("debug_subsys");
  EXPECT(strstr(out, "cecoll INFO ce AllGather") != NULL, "no COLL line:\n%s", out);
  EXPECT(strstr(out, " ready") == NULL, "an INIT line with COLL alone:\n%s", out);
}

static void check_version(void) {
  mp_child c;
  t_set_case("NCCL_DEBUG=VERSION");
  char* env[] = {CLEAN, "NCCL_DEBUG=VERSION", NULL};
  EXPECT(run_child(&c, "version", "coll", "2", env, 1) == 0, "child failed");
  const char* out = out_of("version");
  EXPECT(strncmp(out, "cecoll version ", 15) == 0 && count_of(out, "\n") == 1 && strstr(out, "NCCL 2.28") != NULL,
         "want the banner alone, once:\n%s", out);
}

static void check_cecoll_wins(void) {
  mp_child c;
  t_set_case("CECOLL_DEBUG=NONE over NCCL_DEBUG=INFO");
  char* env[] = {CLEAN, "NCCL_DEBUG=INFO", "CECOLL_DEBUG=NONE", "CECOLL_TIMEOUT=soon", NULL};
  EXPECT(run_child(&c, "cecoll_wins", "coll", "1", env, 1) == 0, "child failed");
  EXPECT(strstr(out_of("cecoll_wins"), "cecoll") == NULL, "output at NONE:\n%s", out_of("cecoll_wins"));
}

static void check_warn_once(void) {
  mp_child c;
  t_set_case("a bad variable warns once");
  char* env[] = {CLEAN, "NCCL_DEBUG_SUBSYS=INIT,WARP", "NCCL_SOCKET_FAMILY=AF_UNIX", "CECOLL_TIMEOUT=soon", NULL};
  EXPECT(run_child(&c, "warn_once", "coll", "3", env, 1) == 0, "child failed");
  const char* out = out_of("warn_once");
  EXPECT(count_of(out, "WARN NCCL_DEBUG_SUBSYS=\"INIT,WARP\"") == 1, "NCCL_DEBUG_SUBSYS:\n%s", out);
  EXPECT(count_of(out, "WARN NCCL_SOCKET_FAMILY=\"AF_UNIX\"") == 1, "NCCL_SOCKET_FAMILY:\n%s", out);
  EXPECT(count_of(out, "WARN CECOLL_TIMEOUT=\"soon\"") == 1, "CECOLL_TIMEOUT:\n%s", out);
  EXPECT(count_of(out, " WARN ") == 3, "three warnings in all:\n%s", out);
}

/* A port nothing listens at on loopback. */
static int free_port(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0 && bind(fd, (struct sockaddr*)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr*)&a, &len) == 0);
  close(fd);
  return ntohs(a.sin_port);
}

static void check_comm_id(void) {
  mp_child ch[2];
  char commid[64], ids[2][512] = {"", ""};
  t_set_case("NCCL_COMM_ID: two processes meet at the address");
  snprintf(commid, sizeof commid, "NCCL_COMM_ID=127.0.0.1:%d", free_port());
  char* env[] = {CLEAN, commid, NULL};
  /* Rank 1 first: it waits until rank 0's init listens. */
  REQUIRE(run_child(&ch[1], "comm_id.1", "commid", "1", env, 0) == 0);
  usleep(300 * 1000);
  REQUIRE(run_child(&ch[0], "comm_id.0", "commid", "0", env, 0) == 0);
  double deadline = mp_now() + 60;
  int oks = 0;
  for (int r = 1; r >= 0; r--) { /* rank 1 to its end, then rank 0 may go */
    char line[512];
    while (mp_recv_line(&ch[r], line, sizeof line, deadline) == 1) {
      if (strncmp(line, "id ", 3) == 0) memcpy(ids[r], line + 3, strlen(line + 3) + 1);
      oks += strcmp(line, "ok") == 0;
      if (r == 0 && strcmp(line, "ok") == 0) mp_send_line(&ch[0], "exit");
    }
  }
  mp_wait_all(ch, 2, deadline, "comm_id");
  EXPECT(mp_ok(&ch[0]) && mp_ok(&ch[1]) && oks == 2, "ranks failed:\n%s\n%s", out_of("comm_id.0"), out_of("comm_id.1"));
  EXPECT(ids[0][0] != '\0' && strcmp(ids[0], ids[1]) == 0, "the processes made different ids");
  mp_close(ch, 2);

  mp_child c;
  t_set_case("NCCL_COMM_ID: a bad address");
  char* bad[] = {CLEAN, "NCCL_COMM_ID=127.0.0.1", NULL};
  EXPECT(run_child(&c, "comm_id_bad", "badcommid", "0", bad, 1) == 0, "%s", out_of("comm_id_bad"));
}

static void check_forward(void) {
  mp_child c;
  const char* fake = getenv("FAKE_NCCL");
  struct stat st;
  char lib[512], file[400], commid[64], port[16], path[700], host[256];
  if (fake == NULL || stat(fake, &st) != 0) {
    printf("SKIP forward: FAKE_NCCL (the fake NCCL of ctests/fake-nccl) not given\n");
    return;
  }
  t_set_case("forward mode: NCCL_COMM_ID and NCCL_DEBUG_FILE are shared");
  int p = free_port();
  snprintf(lib, sizeof lib, "CECOLL_NCCL_LIB=%s", fake);
  snprintf(file, sizeof file, "NCCL_DEBUG_FILE=%s/fwd.%%p.log", dir);
  snprintf(commid, sizeof commid, "NCCL_COMM_ID=127.0.0.1:%d", p);
  snprintf(port, sizeof port, "%d", p);
  char* env[] = {CLEAN, lib, file, commid, "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=ALL", "FAKE_NCCL_DEV=0", NULL};
  EXPECT(run_child(&c, "forward", "fwdport", port, env, 1) == 0, "child failed:\n%s", out_of("forward"));
  short_host(host, sizeof host);
  snprintf(path, sizeof path, "%s/fwd.%d.log", dir, (int)c.pid);
  const char* log = slurp(path);
  EXPECT(log != NULL, "no debug file %s", path);
  if (log == NULL) return;
  /* The banner and the real library's line come before the fake opens
   * the file (and empties it); the pairing after. */
  EXPECT(count_of(log, "cecoll INFO cecoll version ") == 1, "banner:\n%s", log);
  EXPECT(count_of(log, "cecoll INFO forward: real library") == 1, "forward line:\n%s", log);
  EXPECT(strstr(log, "cecoll INFO comm ") != NULL && strstr(log, " paired with ") != NULL, "pairing line:\n%s", log);
  EXPECT(strstr(log, "NCCL INFO fake NCCL version") != NULL && strstr(log, "NCCL INFO comm rank 0 nranks 1") != NULL,
         "the real library's lines:\n%s", log);
  static const char* const tags[] = {" cecoll ", " NCCL INFO ", NULL};
  EXPECT(lines_without(log, tags) == 0, "every line is whole, cecoll's or NCCL's:\n%s", log);
}

/* Removes the work directory (files only) without starting a process. */
static void remove_dir(const char* d) {
  DIR* dp = opendir(d);
  struct dirent* e;
  char path[700];
  while (dp != NULL && (e = readdir(dp)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", d, e->d_name);
    unlink(path);
  }
  if (dp != NULL) closedir(dp);
  rmdir(d);
}

int main(int argc, char** argv) {
  self = argv[0];
  if (argc >= 3 && strcmp(argv[1], "--child") == 0) return child_main(argc, argv);
  int keep = argc >= 2 && strcmp(argv[1], "-k") == 0;
  t_watchdog(300);
  snprintf(dir, sizeof dir, "/tmp/cecoll-ncclenv-XXXXXX");
  REQUIRE(mkdtemp(dir) != NULL);
  RUN(check_debug_info());
  RUN(check_no_gpu_lines());
  RUN(check_debug_subsys());
  RUN(check_version());
  RUN(check_cecoll_wins());
  RUN(check_warn_once());
  RUN(check_comm_id());
  RUN(check_forward());
  if (!keep) {
    remove_dir(dir);
  } else {
    printf("kept %s\n", dir);
  }
  return t_report(argv[0]);
}
