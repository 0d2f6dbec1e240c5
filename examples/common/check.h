// Error checks for the example and test programs: print the failing call and what the library
// said, then exit(1). Programs written against the driver API and NCCL run unchanged on the
// CPU fixture and on GPUs, so the messages come from whichever library is loaded.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

#define CU_CHECK(call)                                                                    \
  do {                                                                                    \
    CUresult e_ = (call);                                                                 \
    if (e_ != CUDA_SUCCESS) {                                                             \
      const char* s_ = nullptr;                                                           \
      cuGetErrorString(e_, &s_);                                                          \
      std::fprintf(stderr, "%s failed: %s\n", #call, s_ ? s_ : "unknown CUDA error");    \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

#define NCCL_CHECK(call)                                                                  \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess) {                                                              \
      std::fprintf(stderr, "%s failed: %s (%s)\n", #call, ncclGetErrorString(r_),         \
                   ncclGetLastError(nullptr));                                            \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

// Only for programs that use the runtime API (include <cuda_runtime_api.h> first).
#ifdef CUDART_VERSION
#define CUDART_CHECK(call)                                                                \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));            \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)
#endif
