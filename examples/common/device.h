// The CUDA device of this rank (LOCAL_RANK modulo the visible devices), made current through
// its primary context: the driver-API equivalent of torch.cuda.set_device(local_rank).
#pragma once

#include <cuda.h>

#include "common/check.h"

namespace lockstep_examples {

inline CUcontext use_local_device(int local_rank) {
  CU_CHECK(cuInit(0));
  int ndev = 0;
  CU_CHECK(cuDeviceGetCount(&ndev));
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, local_rank % ndev));
  CUcontext ctx;
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cuCtxSetCurrent(ctx));
  return ctx;
}

}  // namespace lockstep_examples
