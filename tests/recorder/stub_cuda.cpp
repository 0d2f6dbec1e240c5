// A minimal CUDA driver (libcuda.so.1) and runtime (libcudart.so.13) for the recorder's unit
// tests: events complete as soon as they are recorded, except on kStuckStream (a hung
// collective); kCapturingStream reports an active capture into graph kGraph.
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "stub_cuda.h"

extern "C" {
#define API extern "C" __attribute__((visibility("default")))

struct StubEvent {
  bool stuck;
  int64_t ready_ns;  // CLOCK_MONOTONIC time from which it reports completion
};

static int64_t mono_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

API int cuDriverGetVersion(int* v) { *v = 13000; return 0; }
API int cuCtxGetCurrent(void** ctx) { *ctx = reinterpret_cast<void*>(0xC0); return 0; }
API int cuCtxSetCurrent(void*) { return 0; }
API int cuEventCreate(void** ev, unsigned) { *ev = new StubEvent{false, 0}; return 0; }
API int cuEventDestroy_v2(void* ev) { delete static_cast<StubEvent*>(ev); return 0; }
API int cuEventRecord(void* ev, void* stream) {
  auto* e = static_cast<StubEvent*>(ev);
  e->stuck = reinterpret_cast<uintptr_t>(stream) == stub_cuda::kStuckStream;
  e->ready_ns = reinterpret_cast<uintptr_t>(stream) == stub_cuda::kSlowStream
                    ? mono_now() + int64_t(stub_cuda::kSlowStreamDelayMs) * 1000000
                    : 0;
  return 0;
}
// STUB_CUDA_QUERY_STALL_S=N: every query first sleeps N seconds (a driver stuck in a GPU fault).
API int cuEventQuery(void* ev) {
  static const char* stall = getenv("STUB_CUDA_QUERY_STALL_S");
  if (stall && *stall) sleep(unsigned(atoi(stall)));
  auto* e = static_cast<StubEvent*>(ev);
  return e->stuck || mono_now() < e->ready_ns ? 600 : 0;  // 600: CUDA_ERROR_NOT_READY
}
API int cuThreadExchangeStreamCaptureMode(int* mode) { *mode = 0; return 0; }
API int cuStreamGetCaptureInfo_v3(void* stream, int* status, unsigned long long* id, void** graph,
                                  const void**, const void**, size_t*) {
  bool capturing = reinterpret_cast<uintptr_t>(stream) == stub_cuda::kCapturingStream;
  *status = capturing ? 1 : 0;
  if (id) *id = capturing ? stub_cuda::kCaptureId : 0;
  if (graph) *graph = capturing ? reinterpret_cast<void*>(stub_cuda::kGraph) : nullptr;
  return 0;
}
}
