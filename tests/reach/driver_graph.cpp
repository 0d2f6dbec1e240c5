// CUDA graphs with a captured ncclAllReduce, driven through the driver API only (as JAX/XLA):
//   driver_graph direct|getproc|thread|params|update N
// direct:  cuStreamEndCapture / cuGraphInstantiateWithFlags / cuGraphLaunch linked directly;
// getproc: the same functions from cuGetProcAddress_v2, itself from dlsym on a libcuda handle
//          (the way libcudart reaches them);
// thread:  captured on one stream by the main thread, launched on another stream by a thread;
// params:  instantiated with cuGraphInstantiateWithParams;
// update:  an exec of a graph without NCCL op, updated (cuGraphExecUpdate) to the NCCL graph.
// The exec is launched N times; one rank, fixture NCCL. Exit 0 when every call succeeded.
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <thread>

#define NEED(x)                                                                 \
  do {                                                                          \
    if (!(x)) {                                                                 \
      fprintf(stderr, "driver_graph: failed: %s (line %d)\n", #x, __LINE__);   \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

using EndCapture = CUresult (*)(CUstream, CUgraph*);
using Instantiate = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
using Launch = CUresult (*)(CUgraphExec, CUstream);
EndCapture end_capture = cuStreamEndCapture;
Instantiate instantiate = cuGraphInstantiateWithFlags;
Launch launch = cuGraphLaunch;

void from_get_proc_address() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  NEED(h);
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  NEED(get);
  void* p = nullptr;
  NEED(get("cuStreamEndCapture", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) == 0);
  end_capture = reinterpret_cast<EndCapture>(p);
  NEED(get("cuGraphInstantiate", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) == 0);
  instantiate = reinterpret_cast<Instantiate>(p);
  NEED(get("cuGraphLaunch", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) == 0);
  launch = reinterpret_cast<Launch>(p);
}

CUgraph capture(CUstream s, ncclComm_t comm, float* buf, bool with_nccl) {
  NEED(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  if (with_nccl)
    NEED(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, reinterpret_cast<cudaStream_t>(s)) ==
         ncclSuccess);
  else
    NEED(cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(buf), 0, 4, s) == CUDA_SUCCESS);
  CUgraph g = nullptr;
  NEED(end_capture(s, &g) == CUDA_SUCCESS && g);
  return g;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: driver_graph direct|getproc|thread|params|update N\n");
    return 2;
  }
  const char* mode = argv[1];
  int n = atoi(argv[2]);
  if (strcmp(mode, "getproc") == 0) from_get_proc_address();

  NEED(cuInit(0) == CUDA_SUCCESS);
  CUdevice dev;
  CUcontext ctx;
  CUstream s, s2;
  NEED(cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
  NEED(cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS);
  NEED(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  NEED(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  NEED(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);

  ncclUniqueId id;
  ncclComm_t comm;
  NEED(ncclGetUniqueId(&id) == ncclSuccess);
  NEED(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  static float buf[16];
  NEED(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, reinterpret_cast<cudaStream_t>(s)) ==
       ncclSuccess);  // one eager op: seq 1

  CUgraphExec exec = nullptr;
  if (strcmp(mode, "update") == 0) {
    CUgraph plain = capture(s, comm, buf, false);
    NEED(instantiate(&exec, plain, 0) == CUDA_SUCCESS);
    CUgraph g = capture(s, comm, buf, true);
    CUgraphExecUpdateResultInfo info;
    NEED(cuGraphExecUpdate(exec, g, &info) == CUDA_SUCCESS);
  } else if (strcmp(mode, "params") == 0) {
    CUgraph g = capture(s, comm, buf, true);
    CUDA_GRAPH_INSTANTIATE_PARAMS params{};
    NEED(cuGraphInstantiateWithParams(&exec, g, &params) == CUDA_SUCCESS);
  } else {
    CUgraph g = capture(s, comm, buf, true);
    NEED(instantiate(&exec, g, 0) == CUDA_SUCCESS);
  }

  if (strcmp(mode, "thread") == 0) {
    std::thread t([&] {
      NEED(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
      for (int i = 0; i < n; i++) NEED(launch(exec, s2) == CUDA_SUCCESS);
      NEED(cuStreamSynchronize(s2) == CUDA_SUCCESS);
    });
    t.join();
  } else {
    for (int i = 0; i < n; i++) NEED(launch(exec, s) == CUDA_SUCCESS);
  }
  NEED(cuStreamSynchronize(s) == CUDA_SUCCESS);
  NEED(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  NEED(ncclCommDestroy(comm) == ncclSuccess);
  printf("driver_graph: ok\n");
  return 0;
}
