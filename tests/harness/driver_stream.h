// The CUDA driver setup shared by the rank programs of tests/plugin and tests/reach: device 0's
// primary context made current, and a non-blocking stream on it.
#pragma once

#include <cuda.h>

namespace lockstep_test {

// false when a driver call failed (the caller names its program).
inline bool driver_stream(CUstream* stream) {
  CUdevice dev;
  CUcontext ctx;
  return cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
         cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
         cuStreamCreate(stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
}

}  // namespace lockstep_test
