// fakeptr.c: a stand-in for libcuda's cuPointerGetAttributes, so that the
// nvidia backend's PointerInfo decoding is tested without a GPU.
//
// It knows the ranges a test declares with fake_set_pointer and writes
// each attribute with the C type cuda.h gives it (unsigned int memory
// type, one-byte bool, int ordinal, CUdeviceptr and size_t range). For
// any other pointer it does what the driver documents, CUDA_SUCCESS with
// every attribute at its NULL default, or, after fake_set_legacy(1),
// CUDA_ERROR_INVALID_VALUE as cuPointerGetAttribute does.
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  MEMORY_TYPE = 2,
  IS_MANAGED = 8,
  DEVICE_ORDINAL = 9,
  RANGE_START_ADDR = 11,
  RANGE_SIZE = 12,
};

#define MAXPTR 16
static struct {
  CUdeviceptr base;
  size_t size;
  unsigned type;
  int dev;
  bool managed;
} ptrs[MAXPTR];
static int g_legacy, g_fail, g_calls;
static unsigned g_attrs[16], g_nattrs;

void fake_reset(void) {
  memset(ptrs, 0, sizeof ptrs);
  g_legacy = g_fail = g_calls = 0;
  g_nattrs = 0;
}

void fake_set_pointer(CUdeviceptr base, size_t size, unsigned type, int dev, int managed) {
  for (int i = 0; i < MAXPTR; i++)
    if (ptrs[i].base == 0) {
      ptrs[i].base = base;
      ptrs[i].size = size;
      ptrs[i].type = type;
      ptrs[i].dev = dev;
      ptrs[i].managed = managed != 0;
      return;
    }
}

void fake_set_legacy(int on) { g_legacy = on; }
void fake_fail_next(int code) { g_fail = code; }
int fake_calls(void) { return g_calls; }

// fake_last_attrs copies the attribute list of the last call into out and
// returns its length.
int fake_last_attrs(unsigned *out, int n) {
  for (unsigned i = 0; i < g_nattrs && (int)i < n; i++) out[i] = g_attrs[i];
  return (int)g_nattrs;
}

int cuPointerGetAttributes(unsigned numAttributes, int *attributes, void **data, CUdeviceptr ptr) {
  g_calls++;
  g_nattrs = numAttributes < 16 ? numAttributes : 16;
  for (unsigned i = 0; i < g_nattrs; i++) g_attrs[i] = (unsigned)attributes[i];
  if (g_fail) {
    int c = g_fail;
    g_fail = 0;
    return c;
  }
  int hit = -1;
  for (int i = 0; i < MAXPTR; i++)
    if (ptrs[i].base && ptr >= ptrs[i].base && ptr < ptrs[i].base + ptrs[i].size) hit = i;
  if (hit < 0 && g_legacy) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < numAttributes; i++) {
    switch (attributes[i]) {
      case MEMORY_TYPE:
        *(unsigned *)data[i] = hit < 0 ? 0 : ptrs[hit].type;
        break;
      case IS_MANAGED:
        *(bool *)data[i] = hit < 0 ? false : ptrs[hit].managed;
        break;
      case DEVICE_ORDINAL:
        *(int *)data[i] = hit < 0 ? -2 : ptrs[hit].dev;  // CU_DEVICE_INVALID
        break;
      case RANGE_START_ADDR:
        *(CUdeviceptr *)data[i] = hit < 0 ? 0 : ptrs[hit].base;
        break;
      case RANGE_SIZE:
        *(size_t *)data[i] = hit < 0 ? 0 : ptrs[hit].size;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}
