// fakehip.c: a stand-in for libamdhip64 used by the amd backend's tests.
//
// It exports every symbol the backend binds, with the prototypes of
// hip_runtime_api.h (opaque handles as void*, enums as int), and records
// the arguments of the last call of each function. The test reads a record
// with fake_last_call(name, buf, n). "Device memory" is host memory: plain
// malloc for hipMalloc, memfd-backed mappings for the VMM calls, so copies,
// writes and export/import round trips really happen.
//
// Pointer attributes: hipPointerGetAttributes knows hipMalloc'd memory
// (device memory of the device current at allocation) and ranges a test
// declares with fake_set_pointer; any other pointer is unregistered, and
// fake_set_legacy_pointers(1) answers those with hipErrorInvalidValue as
// ROCm releases before 2024 did, instead of hipMemoryTypeUnregistered.
//
// Build variants (-D): FAKE_NO_BATCH_COPY drops hipMemcpyBatchAsync,
// FAKE_NO_BATCH_MEMOP drops hipStreamBatchMemOp, FAKE_NO_WRITE32 drops the
// required hipStreamWriteValue32.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int hipError_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;
typedef void *hipGraph_t;
typedef void *hipGraphExec_t;
typedef void *hipGraphNode_t;
typedef void *hipMemGenericAllocationHandle_t;
typedef void *hipDeviceptr_t;

enum {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  hipErrorInvalidDevice = 101,
  hipErrorNotSupported = 801,
};

// ---- recording -------------------------------------------------------------

#define MAXREC 96
#define RECLEN 16384
static struct {
  char name[64];
  char text[RECLEN];
} recs[MAXREC];
static int nrec;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static char *slot(const char *name) {
  for (int i = 0; i < nrec; i++)
    if (strcmp(recs[i].name, name) == 0) return recs[i].text;
  if (nrec == MAXREC) return NULL;
  snprintf(recs[nrec].name, sizeof recs[nrec].name, "%s", name);
  recs[nrec].text[0] = 0;
  return recs[nrec++].text;
}

static void record(const char *name, const char *fmt, ...) {
  pthread_mutex_lock(&mu);
  char *t = slot(name);
  if (t) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t, RECLEN, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&mu);
}

static void record_append(const char *name, const char *fmt, ...) {
  pthread_mutex_lock(&mu);
  char *t = slot(name);
  if (t) {
    size_t l = strlen(t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t + l, RECLEN - l, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&mu);
}

// fake_last_call copies the last record of function name into buf and
// returns its length, or -1 if the function was never called.
int fake_last_call(const char *name, char *buf, int n) {
  int r = -1;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nrec; i++) {
    if (strcmp(recs[i].name, name) == 0) {
      snprintf(buf, n, "%s", recs[i].text);
      r = (int)strlen(recs[i].text);
    }
  }
  pthread_mutex_unlock(&mu);
  return r;
}

// ---- configuration and failure injection ------------------------------------

static int g_version = 70200000;
static int g_ndev = 2;
static int g_vmm = 1;
static char g_fail_name[64];
static int g_fail_code;

void fake_set_driver_version(int v) { g_version = v; }
void fake_set_device_count(int n) { g_ndev = n; }
void fake_set_vmm(int on) { g_vmm = on; }

// fake_fail_next makes the next call of name return code.
void fake_fail_next(const char *name, int code) {
  pthread_mutex_lock(&mu);
  snprintf(g_fail_name, sizeof g_fail_name, "%s", name);
  g_fail_code = code;
  pthread_mutex_unlock(&mu);
}

static void reset_pointers(void);

void fake_reset(void) {
  reset_pointers();
  pthread_mutex_lock(&mu);
  nrec = 0;
  g_fail_name[0] = 0;
  g_fail_code = 0;
  pthread_mutex_unlock(&mu);
  g_version = 70200000;
  g_ndev = 2;
  g_vmm = 1;
}

static int injected(const char *name) {
  int code = 0;
  pthread_mutex_lock(&mu);
  if (g_fail_name[0] && strcmp(g_fail_name, name) == 0) {
    code = g_fail_code;
    g_fail_name[0] = 0;
  }
  pthread_mutex_unlock(&mu);
  return code;
}

#define FAIL(name)                        \
  do {                                    \
    int c_ = injected(name);              \
    if (c_) return c_;                    \
  } while (0)

// ---- devices -----------------------------------------------------------------

static __thread int cur_dev;

hipError_t hipDriverGetVersion(int *v) {
  FAIL("hipDriverGetVersion");
  *v = g_version;
  return hipSuccess;
}

hipError_t hipGetDeviceCount(int *n) {
  FAIL("hipGetDeviceCount");
  *n = g_ndev;
  return hipSuccess;
}

hipError_t hipSetDevice(int d) {
  FAIL("hipSetDevice");
  if (d < 0 || d >= g_ndev) return hipErrorInvalidDevice;
  cur_dev = d;
  record("hipSetDevice", "dev=%d", d);
  return hipSuccess;
}

hipError_t hipGetDevice(int *d) {
  FAIL("hipGetDevice");
  *d = cur_dev;
  return hipSuccess;
}

hipError_t hipDeviceGetName(char *name, int len, int dev) {
  FAIL("hipDeviceGetName");
  if (dev < 0 || dev >= g_ndev) return hipErrorInvalidDevice;
  snprintf(name, len, "Fake AMD GPU %d", dev);
  return hipSuccess;
}

hipError_t hipDeviceGetAttribute(int *pi, int attr, int dev) {
  FAIL("hipDeviceGetAttribute");
  record("hipDeviceGetAttribute", "attr=%d dev=%d", attr, dev);
  *pi = attr == 89 ? g_vmm : 0;
  return hipSuccess;
}

hipError_t hipDeviceCanAccessPeer(int *can, int dev, int peer) {
  FAIL("hipDeviceCanAccessPeer");
  if (dev < 0 || dev >= g_ndev || peer < 0 || peer >= g_ndev) return hipErrorInvalidDevice;
  *can = dev != peer;
  return hipSuccess;
}

hipError_t hipDeviceEnablePeerAccess(int peer, unsigned flags) {
  FAIL("hipDeviceEnablePeerAccess");
  record_append("hipDeviceEnablePeerAccess", "%d->%d flags=%u;", cur_dev, peer, flags);
  return hipSuccess;
}

hipError_t hipDeviceSynchronize(void) {
  FAIL("hipDeviceSynchronize");
  return hipSuccess;
}

// ---- plain memory ----------------------------------------------------------------

#define MAXALLOC 256
static struct {
  uintptr_t base;
  size_t size;
  int dev;
} allocs[MAXALLOC];

static void track(void *p, size_t n) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXALLOC; i++)
    if (allocs[i].base == 0) {
      allocs[i].base = (uintptr_t)p;
      allocs[i].size = n;
      allocs[i].dev = cur_dev;
      break;
    }
  pthread_mutex_unlock(&mu);
}

static void untrack(void *p) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXALLOC; i++)
    if (allocs[i].base == (uintptr_t)p) allocs[i].base = 0;
  pthread_mutex_unlock(&mu);
}

static hipError_t fake_alloc(void **ptr, size_t n) {
  size_t sz = (n + 4095) / 4096 * 4096;
  void *p = aligned_alloc(4096, sz);
  if (!p) return hipErrorOutOfMemory;
  memset(p, 0, sz);
  track(p, n);
  *ptr = p;
  return hipSuccess;
}

hipError_t hipMalloc(void **ptr, size_t size) {
  FAIL("hipMalloc");
  record("hipMalloc", "size=%zu dev=%d", size, cur_dev);
  return fake_alloc(ptr, size);
}

hipError_t hipExtMallocWithFlags(void **ptr, size_t size, unsigned flags) {
  FAIL("hipExtMallocWithFlags");
  record("hipExtMallocWithFlags", "size=%zu flags=%#x dev=%d", size, flags, cur_dev);
  return fake_alloc(ptr, size);
}

hipError_t hipFree(void *p) {
  FAIL("hipFree");
  untrack(p);
  free(p);
  return hipSuccess;
}

// hipPointerAttribute_t of ROCm 6 and 7 (hip_runtime_api.h).
typedef struct hipPointerAttribute_t {
  int type;  // enum hipMemoryType: Unregistered 0, Host 1, Device 2, Managed 3, Array 10, Unified 11
  int device;
  void *devicePointer;
  void *hostPointer;
  int isManaged;
  unsigned allocationFlags;
} hipPointerAttribute_t;
_Static_assert(sizeof(hipPointerAttribute_t) == 32, "hipPointerAttribute_t is 32 bytes");

#define MAXPTR 16
static struct {
  uintptr_t base;
  size_t size;
  int type, device, managed;
} ptrs[MAXPTR];
static int g_legacy_pointers;

static void reset_pointers(void) {
  pthread_mutex_lock(&mu);
  memset(ptrs, 0, sizeof ptrs);
  g_legacy_pointers = 0;
  pthread_mutex_unlock(&mu);
}

// fake_set_pointer makes [base, base+size) memory of the given
// hipMemoryType, device and managed flag for hipPointerGetAttributes (and
// hipMemGetAddressRange).
void fake_set_pointer(void *base, size_t size, int type, int device, int managed) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXPTR; i++)
    if (ptrs[i].base == 0) {
      ptrs[i].base = (uintptr_t)base;
      ptrs[i].size = size;
      ptrs[i].type = type;
      ptrs[i].device = device;
      ptrs[i].managed = managed;
      break;
    }
  pthread_mutex_unlock(&mu);
}

void fake_set_legacy_pointers(int on) { g_legacy_pointers = on; }

hipError_t hipMemGetAddressRange(hipDeviceptr_t *pbase, size_t *psize, hipDeviceptr_t dptr) {
  FAIL("hipMemGetAddressRange");
  uintptr_t p = (uintptr_t)dptr;
  for (int i = 0; i < MAXALLOC; i++)
    if (allocs[i].base && p >= allocs[i].base && p < allocs[i].base + allocs[i].size) {
      *pbase = (void *)allocs[i].base;
      *psize = allocs[i].size;
      return hipSuccess;
    }
  for (int i = 0; i < MAXPTR; i++)
    if (ptrs[i].base && p >= ptrs[i].base && p < ptrs[i].base + ptrs[i].size) {
      *pbase = (void *)ptrs[i].base;
      *psize = ptrs[i].size;
      return hipSuccess;
    }
  return hipErrorInvalidValue;
}

hipError_t hipPointerGetAttributes(hipPointerAttribute_t *attr, const void *ptr) {
  FAIL("hipPointerGetAttributes");
  record("hipPointerGetAttributes", "ptr=%p", ptr);
  if (attr == NULL) return hipErrorInvalidValue;
  memset(attr, 0, sizeof *attr);
  uintptr_t p = (uintptr_t)ptr;
  for (int i = 0; i < MAXALLOC; i++)
    if (allocs[i].base && p >= allocs[i].base && p < allocs[i].base + allocs[i].size) {
      attr->type = 2;
      attr->device = allocs[i].dev;
      attr->devicePointer = (void *)ptr;
      return hipSuccess;
    }
  for (int i = 0; i < MAXPTR; i++)
    if (ptrs[i].base && p >= ptrs[i].base && p < ptrs[i].base + ptrs[i].size) {
      attr->type = ptrs[i].type;
      attr->device = ptrs[i].device;
      attr->isManaged = ptrs[i].managed;
      attr->devicePointer = (void *)ptr;
      attr->hostPointer = ptrs[i].type == 1 ? (void *)ptr : NULL;
      return hipSuccess;
    }
  return g_legacy_pointers ? hipErrorInvalidValue : hipSuccess;  // hipMemoryTypeUnregistered
}

hipError_t hipMemset(void *dst, int value, size_t n) {
  FAIL("hipMemset");
  record("hipMemset", "dst=%p value=%d n=%zu", dst, value, n);
  memset(dst, value, n);
  return hipSuccess;
}

hipError_t hipMemcpy(void *dst, const void *src, size_t n, int kind) {
  FAIL("hipMemcpy");
  record("hipMemcpy", "n=%zu kind=%d", n, kind);
  memcpy(dst, src, n);
  return hipSuccess;
}

hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, hipStream_t s) {
  FAIL("hipMemcpyAsync");
  record("hipMemcpyAsync", "dst=%p src=%p n=%zu kind=%d stream=%p", dst, src, n, kind, s);
  memcpy(dst, src, n);
  return hipSuccess;
}

hipError_t hipMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                            size_t height, int kind, hipStream_t s) {
  FAIL("hipMemcpy2DAsync");
  record("hipMemcpy2DAsync", "dst=%p dpitch=%zu src=%p spitch=%zu width=%zu height=%zu kind=%d stream=%p", dst,
         dpitch, src, spitch, width, height, kind, s);
  if (width > dpitch || width > spitch) return hipErrorInvalidValue;
  for (size_t i = 0; i < height; i++) memcpy((char *)dst + i * dpitch, (const char *)src + i * spitch, width);
  return hipSuccess;
}

#ifndef FAKE_NO_BATCH_COPY
// Like ROCm 7.1 to 7.11, refuses numAttrs > 0 below version 7.12.
hipError_t hipMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t count, void *attrs,
                               size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, hipStream_t s) {
  FAIL("hipMemcpyBatchAsync");
  unsigned order = 0, flags = 0;
  if (attrs) {
    memcpy(&order, (char *)attrs + 0, 4);
    memcpy(&flags, (char *)attrs + 20, 4);
  }
  record("hipMemcpyBatchAsync",
         "count=%zu numAttrs=%zu attrs=%s attrsIdxs=%s attr0.order=%u attr0.flags=%u failIdx=%s stream=%p",
         count, numAttrs, attrs ? "set" : "null", attrsIdxs ? "set" : "null", order, flags,
         failIdx ? "set" : "null", s);
  if (numAttrs > 0 && g_version < 71200000) {
    if (failIdx) *failIdx = 0;
    return hipErrorInvalidValue;
  }
  for (size_t i = 0; i < count; i++) memcpy(dsts[i], srcs[i], sizes[i]);
  if (failIdx) *failIdx = (size_t)-1;
  return hipSuccess;
}
#endif

// ---- virtual memory -------------------------------------------------------------

struct fake_handle {
  int fd;
  size_t size;
};

static void prop_fields(const void *prop, unsigned *type, unsigned *ht, int *lt, int *lid) {
  memcpy(type, (const char *)prop + 0, 4);
  memcpy(ht, (const char *)prop + 4, 4);
  memcpy(lt, (const char *)prop + 8, 4);
  memcpy(lid, (const char *)prop + 12, 4);
}

hipError_t hipMemGetAllocationGranularity(size_t *g, const void *prop, int option) {
  FAIL("hipMemGetAllocationGranularity");
  unsigned type, ht;
  int lt, lid;
  prop_fields(prop, &type, &ht, &lt, &lid);
  record("hipMemGetAllocationGranularity", "type=%u handleTypes=%u loc=%d:%d option=%d", type, ht, lt, lid,
         option);
  *g = 65536;
  return hipSuccess;
}

hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size, const void *prop,
                        unsigned long long flags) {
  FAIL("hipMemCreate");
  unsigned type, ht;
  int lt, lid;
  prop_fields(prop, &type, &ht, &lt, &lid);
  record("hipMemCreate", "size=%zu type=%u handleTypes=%u loc=%d:%d flags=%llu", size, type, ht, lt, lid,
         flags);
  if (size % 65536) return hipErrorInvalidValue;
  int fd = memfd_create("fakehip", 0);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) return hipErrorOutOfMemory;
  struct fake_handle *h = malloc(sizeof *h);
  h->fd = fd;
  h->size = size;
  *handle = h;
  return hipSuccess;
}

hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle) {
  FAIL("hipMemRelease");
  struct fake_handle *h = handle;
  close(h->fd);
  free(h);
  return hipSuccess;
}

hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t align, void *addr, unsigned long long flags) {
  FAIL("hipMemAddressReserve");
  record("hipMemAddressReserve", "size=%zu align=%zu addr=%p flags=%llu", size, align, addr, flags);
  void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return hipErrorOutOfMemory;
  *ptr = p;
  return hipSuccess;
}

hipError_t hipMemAddressFree(void *p, size_t size) {
  FAIL("hipMemAddressFree");
  munmap(p, size);
  return hipSuccess;
}

hipError_t hipMemMap(void *p, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
                     unsigned long long flags) {
  FAIL("hipMemMap");
  struct fake_handle *h = handle;
  record("hipMemMap", "size=%zu offset=%zu flags=%llu", size, offset, flags);
  // Like ROCm: offset and flags must be 0, size a multiple of the granularity.
  if (offset != 0 || flags != 0 || size % 65536 || size > h->size) return hipErrorInvalidValue;
  if (mmap(p, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd, (off_t)offset) == MAP_FAILED)
    return hipErrorOutOfMemory;
  return hipSuccess;
}

hipError_t hipMemUnmap(void *p, size_t size) {
  FAIL("hipMemUnmap");
  mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  return hipSuccess;
}

// hipMemAccessDesc: location {int type; int id} at 0, flags at 8; 12 bytes.
hipError_t hipMemSetAccess(void *p, size_t size, const void *desc, size_t count) {
  FAIL("hipMemSetAccess");
  record("hipMemSetAccess", "size=%zu count=%zu", size, count);
  for (size_t i = 0; i < count; i++) {
    int lt, lid;
    unsigned fl;
    const char *d = (const char *)desc + 12 * i;
    memcpy(&lt, d, 4);
    memcpy(&lid, d + 4, 4);
    memcpy(&fl, d + 8, 4);
    record_append("hipMemSetAccess", " [%d:%d %u]", lt, lid, fl);
  }
  return hipSuccess;
}

hipError_t hipMemExportToShareableHandle(void *sh, hipMemGenericAllocationHandle_t handle, int type,
                                         unsigned long long flags) {
  FAIL("hipMemExportToShareableHandle");
  struct fake_handle *h = handle;
  record("hipMemExportToShareableHandle", "type=%d flags=%llu", type, flags);
  if (type != 1) return hipErrorInvalidValue;
  *(int *)sh = dup(h->fd);
  return hipSuccess;
}

hipError_t hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *handle, void *os, int type) {
  FAIL("hipMemImportFromShareableHandle");
  int fd = (int)(intptr_t)os;
  record("hipMemImportFromShareableHandle", "fd=%d type=%d", fd, type);
  struct stat st;
  if (os == NULL || type != 1 || fstat(fd, &st) != 0) return hipErrorInvalidValue;
  struct fake_handle *h = malloc(sizeof *h);
  h->fd = dup(fd);
  h->size = (size_t)st.st_size;
  *handle = h;
  return hipSuccess;
}

// ---- streams, memops --------------------------------------------------------------

#define MAXSTREAM 4096
static int nstream, nevent, ngraph;
static int capturing[MAXSTREAM];

static int sidx(hipStream_t s) {
  uintptr_t v = (uintptr_t)s;
  return (v >= 0x10000 && v < 0x10000 + MAXSTREAM) ? (int)(v - 0x10000) : -1;
}

hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned flags) {
  FAIL("hipStreamCreateWithFlags");
  record("hipStreamCreateWithFlags", "flags=%u", flags);
  pthread_mutex_lock(&mu);
  int i = nstream++ % MAXSTREAM;
  pthread_mutex_unlock(&mu);
  *s = (hipStream_t)(uintptr_t)(0x10000 + i);
  return hipSuccess;
}

hipError_t hipStreamDestroy(hipStream_t s) {
  FAIL("hipStreamDestroy");
  return hipSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t s) {
  FAIL("hipStreamSynchronize");
  record("hipStreamSynchronize", "stream=%p", s);
  return hipSuccess;
}

hipError_t hipStreamQuery(hipStream_t s) {
  FAIL("hipStreamQuery");
  return hipSuccess;
}

hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned flags) {
  FAIL("hipStreamWaitEvent");
  record("hipStreamWaitEvent", "stream=%p event=%p flags=%u", s, e, flags);
  return hipSuccess;
}

hipError_t hipStreamWaitValue32(hipStream_t s, void *ptr, uint32_t value, unsigned flags, uint32_t mask) {
  FAIL("hipStreamWaitValue32");
  record_append("hipStreamWaitValue32", "stream=%p ptr=%p value=%u flags=%u mask=%#x;", s, ptr, value, flags,
                mask);
  return hipSuccess;
}

#ifndef FAKE_NO_WRITE32
hipError_t hipStreamWriteValue32(hipStream_t s, void *ptr, uint32_t value, unsigned flags) {
  FAIL("hipStreamWriteValue32");
  record_append("hipStreamWriteValue32", "stream=%p ptr=%p value=%u flags=%u;", s, ptr, value, flags);
  *(volatile uint32_t *)ptr = value;
  return hipSuccess;
}
#endif

#ifndef FAKE_NO_BATCH_MEMOP
// hipStreamBatchMemOpParams: 48 bytes; operation u32 at 0, address at 8,
// value/value64 at 16, flags u32 at 24, alias at 32.
hipError_t hipStreamBatchMemOp(hipStream_t s, unsigned count, void *params, unsigned flags) {
  FAIL("hipStreamBatchMemOp");
  if (count == 0 || count >= 256 || params == NULL || flags != 0) return hipErrorInvalidValue;
  record("hipStreamBatchMemOp", "stream=%p count=%u flags=%u", s, count, flags);
  for (unsigned i = 0; i < count; i++) {
    const char *e = (const char *)params + 48 * i;
    uint32_t op, fl;
    uint64_t addr, val, alias;
    memcpy(&op, e + 0, 4);
    memcpy(&addr, e + 8, 8);
    memcpy(&val, e + 16, 8);
    memcpy(&fl, e + 24, 4);
    memcpy(&alias, e + 32, 8);
    record_append("hipStreamBatchMemOp", " [%u %#llx %llu %u %llu]", op, (unsigned long long)addr,
                  (unsigned long long)val, fl, (unsigned long long)alias);
    if (op == 2) *(volatile uint32_t *)(uintptr_t)addr = (uint32_t)val;
  }
  return hipSuccess;
}
#endif

// ---- events -------------------------------------------------------------------------

hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned flags) {
  FAIL("hipEventCreateWithFlags");
  record("hipEventCreateWithFlags", "flags=%u", flags);
  pthread_mutex_lock(&mu);
  int i = nevent++;
  pthread_mutex_unlock(&mu);
  *e = (hipEvent_t)(uintptr_t)(0x30000 + i);
  return hipSuccess;
}

hipError_t hipEventDestroy(hipEvent_t e) {
  FAIL("hipEventDestroy");
  return hipSuccess;
}

hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
  FAIL("hipEventRecord");
  record("hipEventRecord", "event=%p stream=%p", e, s);
  return hipSuccess;
}

hipError_t hipEventSynchronize(hipEvent_t e) {
  FAIL("hipEventSynchronize");
  return hipSuccess;
}

hipError_t hipEventQuery(hipEvent_t e) {
  FAIL("hipEventQuery");
  return hipSuccess;
}

hipError_t hipEventElapsedTime(float *ms, hipEvent_t a, hipEvent_t b) {
  FAIL("hipEventElapsedTime");
  *ms = 1.5f;
  return hipSuccess;
}

// ---- capture and graphs -----------------------------------------------------------

hipError_t hipStreamIsCapturing(hipStream_t s, int *status) {
  FAIL("hipStreamIsCapturing");
  int i = sidx(s);
  *status = i >= 0 ? capturing[i] : 0;
  return hipSuccess;
}

hipError_t hipStreamBeginCapture(hipStream_t s, int mode) {
  FAIL("hipStreamBeginCapture");
  record("hipStreamBeginCapture", "stream=%p mode=%d", s, mode);
  int i = sidx(s);
  if (i < 0) return hipErrorInvalidValue;
  capturing[i] = 1;
  return hipSuccess;
}

hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t *g) {
  FAIL("hipStreamEndCapture");
  int i = sidx(s);
  if (i < 0 || !capturing[i]) return 903;
  capturing[i] = 0;
  pthread_mutex_lock(&mu);
  int n = ngraph++;
  pthread_mutex_unlock(&mu);
  *g = (hipGraph_t)(uintptr_t)(0x40000 + n);
  return hipSuccess;
}

hipError_t hipGraphInstantiate(hipGraphExec_t *x, hipGraph_t g, hipGraphNode_t *errNode, char *log,
                               size_t logSize) {
  FAIL("hipGraphInstantiate");
  record("hipGraphInstantiate", "graph=%p errNode=%p log=%p logSize=%zu", g, (void *)errNode, (void *)log,
         logSize);
  *x = (hipGraphExec_t)((uintptr_t)g + 0x10000);
  return hipSuccess;
}

hipError_t hipGraphLaunch(hipGraphExec_t x, hipStream_t s) {
  FAIL("hipGraphLaunch");
  record("hipGraphLaunch", "exec=%p stream=%p", x, s);
  return hipSuccess;
}

hipError_t hipGraphDestroy(hipGraph_t g) {
  FAIL("hipGraphDestroy");
  return hipSuccess;
}

hipError_t hipGraphExecDestroy(hipGraphExec_t x) {
  FAIL("hipGraphExecDestroy");
  return hipSuccess;
}
