// Review 2026-12-02, finding L11: a driver library that has cuGetProcAddress in its CUDA 11
// form (4 arguments; libcuda keeps it next to cuGetProcAddress_v2) and one graph entry point.
// Loaded by getproc_v1_probe.cpp with dlopen, as a runtime loads libcuda.
#include <cstring>

// What cuGetProcAddress hands out: the driver's own entry, not the exported symbol (which a
// preloaded library interposes).
static int graph_launch_impl(void*, void*) { return 0; }
static int init_impl(unsigned) { return 0; }

extern "C" {
__attribute__((visibility("default"))) int cuInit(unsigned f) { return init_impl(f); }
__attribute__((visibility("default"))) int cuGraphLaunch(void* e, void* s) { return graph_launch_impl(e, s); }
__attribute__((visibility("default"))) int cuGetProcAddress(const char* symbol, void** pfn, int, unsigned long long) {
  if (!symbol || !pfn) return 1;
  if (strcmp(symbol, "cuGraphLaunch") == 0) *pfn = reinterpret_cast<void*>(&graph_launch_impl);
  else if (strcmp(symbol, "cuInit") == 0) *pfn = reinterpret_cast<void*>(&init_impl);
  else return 500;  // CUDA_ERROR_NOT_FOUND
  return 0;
}
__attribute__((visibility("default"))) int cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                                               unsigned long long flags, int* status) {
  int rc = cuGetProcAddress(symbol, pfn, version, flags);
  if (status) *status = rc == 0 ? 0 : 1;
  return rc;
}
}
