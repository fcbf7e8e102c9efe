/*
 * devapi.h: the host functions of NCCL's device API (nccl_device/core.h,
 * 2.28+) that the forward-mode tests call, with the types they need.
 * include/nccl.h is NCCL 2.28's nccl.h, which declares none of them.
 * ncclTeam_t has NCCL's layout (returned and passed by value, so it must);
 * ncclDevComm is the fake's own stand-in (NCCL's is larger: a program
 * passes cecoll only a pointer to it) and the requirements stay opaque.
 */
#ifndef CECOLL_CTESTS_DEVAPI_H_
#define CECOLL_CTESTS_DEVAPI_H_

#include <stdint.h>

#include "nccl.h"

typedef struct ncclTeam {
  int nRanks, rank, stride;
} ncclTeam_t;

typedef struct ncclDevComm {
  uint64_t magic;
  int rank, nRanks;
  void* comm; /* the fake communicator it was made from */
} ncclDevComm_t;

typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;

ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements_t* reqs, ncclDevComm_t* out);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm_t* devComm);
ncclTeam_t ncclTeamWorld(ncclComm_t comm);

#endif
