// CUDA graphs driven through the driver API (JAX/XLA, the runtime's own calls):
// cuStreamEndCapture, cuGraphInstantiate*, cuGraphExecUpdate, cuGraphLaunch, cuGraphDestroy,
// cuGraphExecDestroy. Programs reach these three ways, all covered (a statically linked cudart
// gets its driver functions otherwise: on the H200, NCCL's own never reached a wrapper handed
// out here; docs/limits.md):
//  - linked against libcuda.so.1: the exported symbols below (global scope);
//  - cuGetProcAddress (how libcudart and most frameworks get every driver function): our
//    cuGetProcAddress (CUDA 11 form) / cuGetProcAddress_v2 forward, and hand out the wrapper for these names;
//  - dlsym on a libcuda handle (how libcudart gets cuGetProcAddress): dlsym_hook.cpp asks
//    driver_hook_for_dlsym().
// A call made inside a runtime hook (cudaGraphLaunch -> cuGraphLaunch) is nested and only
// forwarded, so one launch is counted once. Until the first NCCL call they only forward.
#include <cuda.h>

#include <cstring>

#include "recorder.h"
#include "symbol_lookup.h"

using namespace lockstep::rec;

namespace {

// The real function behind each wrapper: from cuGetProcAddress/dlsym when it handed the wrapper
// out, else looked up in the loaded libcuda. The first pointer wins; a different one for the same
// name (another flavour) is returned unwrapped.
template <class Fn>
Fn real_driver(std::atomic<void*>& slot, const char* name) {
  void* p = slot.load(std::memory_order_acquire);
  if (!p) {
    p = find_real(Library::Driver, name);
    void* expected = nullptr;
    if (p && !slot.compare_exchange_strong(expected, p)) p = expected;
  }
  return reinterpret_cast<Fn>(p);
}

struct Wrapped {
  const char* name;
  void* wrapper;
  std::atomic<void*>* real;
  int min_version;  // cuGetProcAddress: the signature we wrap exists from this CUDA version
};

std::atomic<void*> r_end_capture, r_instantiate, r_instantiate_params, r_exec_update, r_launch,
    r_graph_destroy, r_exec_destroy, r_get_proc_v2, r_get_proc_v1;

// cuGetProcAddress in its CUDA 11 form (4 arguments; cuda.h maps the name to _v2, so it is
// declared under its symbol name): CUDA 11.3-11.8 runtimes get every driver function through it.
using GetProcV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

constexpr CUresult kNoDriver = CUDA_ERROR_NOT_INITIALIZED;

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult cuStreamEndCapture(CUstream stream,
                                                                   CUgraph* graph) {
  auto real = real_driver<decltype(&cuStreamEndCapture)>(r_end_capture, "cuStreamEndCapture");
  if (!real) return kNoDriver;
  if (!recorder_active()) return real(stream, graph);
  HookGuard guard;
  if (guard.nested()) return real(stream, graph);
  uint64_t capture = capture_id_of(stream);
  CUresult rc = real(stream, graph);
  if (rc == CUDA_SUCCESS && graph) graph_captured(capture, *graph);
  return rc;
}

__attribute__((visibility("default"))) CUresult cuGraphInstantiateWithFlags(
    CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  auto real = real_driver<decltype(&cuGraphInstantiateWithFlags)>(r_instantiate,
                                                                 "cuGraphInstantiateWithFlags");
  if (!real) return kNoDriver;
  HookGuard guard;
  CUresult rc = real(exec, graph, flags);
  if (rc == CUDA_SUCCESS && exec && !guard.nested() && recorder_active())
    graph_instantiated(*exec, graph);
  return rc;
}

__attribute__((visibility("default"))) CUresult cuGraphInstantiateWithParams(
    CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  auto real = real_driver<decltype(&cuGraphInstantiateWithParams)>(
      r_instantiate_params, "cuGraphInstantiateWithParams");
  if (!real) return kNoDriver;
  HookGuard guard;
  CUresult rc = real(exec, graph, params);
  if (rc == CUDA_SUCCESS && exec && !guard.nested() && recorder_active())
    graph_instantiated(*exec, graph);
  return rc;
}

__attribute__((visibility("default"))) CUresult cuGraphExecUpdate_v2(
    CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  auto real = real_driver<decltype(&cuGraphExecUpdate_v2)>(r_exec_update, "cuGraphExecUpdate_v2");
  if (!real) return kNoDriver;
  HookGuard guard;
  CUresult rc = real(exec, graph, info);
  if (rc == CUDA_SUCCESS && !guard.nested() && recorder_active()) graph_instantiated(exec, graph);
  return rc;
}

__attribute__((visibility("default"))) CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  auto real = real_driver<decltype(&cuGraphLaunch)>(r_launch, "cuGraphLaunch");
  if (!real) return kNoDriver;
  if (!recorder_active()) return real(exec, stream);
  HookGuard guard;
  if (guard.nested()) return real(exec, stream);
  CallStart c = call_start(false);
  CUresult rc = real(exec, stream);
  graph_launched(c, exec, stream, rc);
  return rc;
}

__attribute__((visibility("default"))) CUresult cuGraphDestroy(CUgraph graph) {
  auto real = real_driver<decltype(&cuGraphDestroy)>(r_graph_destroy, "cuGraphDestroy");
  if (!real) return kNoDriver;
  if (recorder_active()) graph_destroyed(graph);
  return real(graph);
}

__attribute__((visibility("default"))) CUresult cuGraphExecDestroy(CUgraphExec exec) {
  auto real = real_driver<decltype(&cuGraphExecDestroy)>(r_exec_destroy, "cuGraphExecDestroy");
  if (!real) return kNoDriver;
  if (recorder_active()) graph_exec_destroyed(exec);
  return real(exec);
}

}  // extern "C"

namespace {

const Wrapped* wrapped_table() {
  static const Wrapped table[] = {
      {"cuStreamEndCapture", reinterpret_cast<void*>(&cuStreamEndCapture), &r_end_capture, 0},
      {"cuGraphInstantiateWithFlags", reinterpret_cast<void*>(&cuGraphInstantiateWithFlags),
       &r_instantiate, 0},
      // cuda.h: cuGraphInstantiate is cuGraphInstantiateWithFlags since 11.4 (older: another
      // signature, not wrapped).
      {"cuGraphInstantiate", reinterpret_cast<void*>(&cuGraphInstantiateWithFlags), &r_instantiate,
       11040},
      {"cuGraphInstantiateWithParams", reinterpret_cast<void*>(&cuGraphInstantiateWithParams),
       &r_instantiate_params, 0},
      {"cuGraphExecUpdate", reinterpret_cast<void*>(&cuGraphExecUpdate_v2), &r_exec_update, 12000},
      {"cuGraphExecUpdate_v2", reinterpret_cast<void*>(&cuGraphExecUpdate_v2), &r_exec_update, 0},
      {"cuGraphLaunch", reinterpret_cast<void*>(&cuGraphLaunch), &r_launch, 0},
      {"cuGraphDestroy", reinterpret_cast<void*>(&cuGraphDestroy), &r_graph_destroy, 0},
      {"cuGraphExecDestroy", reinterpret_cast<void*>(&cuGraphExecDestroy), &r_exec_destroy, 0},
      {nullptr, nullptr, nullptr, 0},
  };
  return table;
}

// The wrapper to hand out for `name` whose real function is `p`, or p itself.
void* wrap(const char* name, void* p, int version) {
  if (!p || !name) return p;
  for (const Wrapped* w = wrapped_table(); w->name; w++) {
    if (strcmp(w->name, name) != 0) continue;
    if (version && version < w->min_version) return p;
    if (p == w->wrapper) return p;
    void* expected = nullptr;
    if (w->real->compare_exchange_strong(expected, p) || expected == p) return w->wrapper;
    return p;  // another flavour of this function than the one our wrapper calls
  }
  return p;
}

void* get_proc_wrapper(const char* symbol, void* p, int version);

// What cuGetProcAddress (either form) hands out for `symbol`: our wrapper where we have one.
void after_get_proc(CUresult rc, const char* symbol, void** pfn, int version, cuuint64_t flags) {
  // Per-thread-default-stream flavours (_ptsz) treat stream 0 differently: left unwrapped.
  if (rc == CUDA_SUCCESS && pfn && *pfn && symbol && !(flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    *pfn = get_proc_wrapper(symbol, *pfn, version ? version : 1);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int version, cuuint64_t flags,
    CUdriverProcAddressQueryResult* status) {
  auto real = real_driver<decltype(&cuGetProcAddress_v2)>(r_get_proc_v2, "cuGetProcAddress_v2");
  if (!real) return kNoDriver;
  CUresult rc = real(symbol, pfn, version, flags, status);
  after_get_proc(rc, symbol, pfn, version, flags);
  return rc;
}

__attribute__((visibility("default"))) CUresult lockstep_cuGetProcAddress_v1(
    const char* symbol, void** pfn, int version, cuuint64_t flags) __asm__("cuGetProcAddress");
CUresult lockstep_cuGetProcAddress_v1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  auto real = real_driver<GetProcV1>(r_get_proc_v1, "cuGetProcAddress");
  if (!real) return kNoDriver;
  CUresult rc = real(symbol, pfn, version, flags);
  after_get_proc(rc, symbol, pfn, version, flags);
  return rc;
}

}  // extern "C"

namespace {
void* hand_out(std::atomic<void*>& real, void* p, void* wrapper) {
  void* expected = nullptr;
  if (real.compare_exchange_strong(expected, p) || expected == p) return wrapper;
  return p;
}

// cuGetProcAddress itself, in the form `version` names (a runtime may ask the driver for it),
// and the graph entry points.
void* get_proc_wrapper(const char* symbol, void* p, int version) {
  if (strcmp(symbol, "cuGetProcAddress") == 0)
    return version >= 12000 ? hand_out(r_get_proc_v2, p, reinterpret_cast<void*>(&cuGetProcAddress_v2))
                            : hand_out(r_get_proc_v1, p, reinterpret_cast<void*>(&lockstep_cuGetProcAddress_v1));
  return wrap(symbol, p, version);
}
}  // namespace

namespace lockstep::rec {

// dlsym(handle, name) found p in a libcuda: our wrapper for the graph entry points and for
// cuGetProcAddress itself (both forms), else p.
void* driver_hook_for_dlsym(const char* name, void* p) {
  if (!p || name[0] != 'c' || name[1] != 'u' || (name[2] < 'A' || name[2] > 'Z')) return p;
  if (strcmp(name, "cuGetProcAddress_v2") == 0)
    return hand_out(r_get_proc_v2, p, reinterpret_cast<void*>(&cuGetProcAddress_v2));
  if (strcmp(name, "cuGetProcAddress") == 0)
    return hand_out(r_get_proc_v1, p, reinterpret_cast<void*>(&lockstep_cuGetProcAddress_v1));
  return wrap(name, p, 0);
}

}  // namespace lockstep::rec
