// Host cost of one small NCCL call on a real GPU, for comparing runs with and without the
// recorder (LD_PRELOAD=liblockstep.so). World size 1, driver API + NCCL, no PyTorch: the noise
// of a Python framework (tens of µs per call, ±5 µs between processes) hides sub-µs costs.
//
//   nccl_call_overhead [calls=20000] [repeats=31]
// Prints one JSON line: median/min ns per ncclAllReduce(8 bytes) issue (calls issued back to
// back on one stream, then one cuStreamSynchronize), over `repeats` timed batches.
#include <cuda.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    auto r_ = (x);                                                                 \
    if (r_ != 0) { std::fprintf(stderr, "%s failed: %d\n", #x, (int)r_); return 1; } \
  } while (0)

int main(int argc, char** argv) {
  int calls = argc > 1 ? std::atoi(argv[1]) : 20000;
  int repeats = argc > 2 ? std::atoi(argv[2]) : 31;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUdeviceptr buf;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAlloc(&buf, 64));
  ncclUniqueId id;
  ncclComm_t comm;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRank(&comm, 1, id, 0));
  auto batch = [&](int n) {
    for (int i = 0; i < n; ++i)
      ncclAllReduce((void*)buf, (void*)buf, 2, ncclFloat32, ncclSum, comm, (cudaStream_t)stream);
    cuStreamSynchronize(stream);
  };
  batch(2000);  // warm-up
  std::vector<double> ns;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    batch(calls);
    auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / calls);
  }
  std::sort(ns.begin(), ns.end());
  const char* preload = std::getenv("LD_PRELOAD");
  const char* stacks = std::getenv("LOCKSTEP_STACKS");
  std::printf("{\"label\": \"%s\", \"median_ns\": %.1f, \"min_ns\": %.1f, \"max_ns\": %.1f, "
              "\"calls\": %d, \"repeats\": %d}\n",
              preload && *preload ? (stacks ? stacks : "lockstep") : "baseline",
              ns[ns.size() / 2], ns.front(), ns.back(), calls, repeats);
  ncclCommDestroy(comm);
  return 0;
}
