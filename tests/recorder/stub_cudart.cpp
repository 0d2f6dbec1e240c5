// The runtime half of the stub CUDA (see stub_cuda.cpp): graph capture/instantiate/launch and
// host waits, all succeeding at once.
#include <cuda_runtime_api.h>

#include "stub_cuda.h"

#define API extern "C" __attribute__((visibility("default")))

API cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* g) {
  *g = reinterpret_cast<cudaGraph_t>(stub_cuda::kGraph);
  return cudaSuccess;
}
API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t, unsigned long long) {
  *e = reinterpret_cast<cudaGraphExec_t>(stub_cuda::kGraphExec);
  return cudaSuccess;
}
API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long f) {
  return cudaGraphInstantiate(e, g, f);
}
// Nothing to free: the stub hands out the same graph and exec values every time, as a real
// runtime may after a destroy.
API cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }
API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }
API cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return cudaSuccess; }
API cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
API cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
API cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
API cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
// 0xbad0: a record that fails (recorder_test: event records).
API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  return reinterpret_cast<uintptr_t>(e) == 0xbad0 ? cudaErrorInvalidResourceHandle : cudaSuccess;
}
API cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
