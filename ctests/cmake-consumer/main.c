/* Links against an installed cecoll through find_package and makes a few
 * calls that need no communicator peers. Prints the version on success. */
#include <stdio.h>

#include <cecoll/nccl.h>
#include <cecoll/nccl_ce.h>

int main(void) {
  int version = 0, count = 0;
  const char* backend = NULL;
  ncclComm_t comm = NULL;
  int dev0 = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 1;
  if (cecollGetBackend(&backend) != ncclSuccess || cecollGetDeviceCount(&count) != ncclSuccess) return 1;
  if (ncclCommInitAll(&comm, 1, &dev0) != ncclSuccess) return 1;
  if (ncclCommDestroy(comm) != ncclSuccess) return 1;
  printf("consumer: cecoll %d on %s, %d device(s)\n", version, backend, count);
  return 0;
}
