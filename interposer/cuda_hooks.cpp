// CUDA runtime entry points liblockstep.so interposes (libcudart is loaded dynamically by torch
// wheels, so these are seen): graph capture -> instantiate -> launch -> destroy, to count what
// captured NCCL ops execute at each replay, and host-side waits. Until the process makes its
// first NCCL call they only forward (one relaxed load).
#include <cuda_runtime_api.h>

#include "bench_knobs.h"
#include "recorder.h"
#include "symbol_lookup.h"

using namespace lockstep::rec;

namespace {

#define REAL_RT(name)                                                                \
  ([]() {                                                                           \
    static std::atomic<void*> slot{nullptr};                                        \
    return real_fn<decltype(&name)>(slot, Library::Cudart, #name);                  \
  }())

// Not reachable in practice (the caller linked a runtime); keep the contract clear anyway.
constexpr cudaError_t kNoRuntime = cudaErrorInitializationError;

template <class Fn, class... A>
cudaError_t wait_hook(Fn real, WaitKind kind, void* stream, void* event, A... args) {
  if (!real) return kNoRuntime;
  const bool record = kind == WaitKind::EventRecord;
  const unsigned off = bench_off();
  // (bench knob "waits", which the paused arm of bench/step_overhead.py sets: forward only, so
  // that the A/B's baseline does not carry the settle check; a trace recorded so is no evidence)
  if (record && !(off & kOffWaits)) {
    const uint64_t s0 = (off & kProfile) ? bench_ticks() : 0;
    event_reused(event);  // an op may have adopted it (completion.h)
    if (off & kProfile) bench_count(kCntSettleTicks, bench_ticks() - s0);
  }
  if (!recorder_active() || (off & kOffWaits)) return real(args...);
  HookGuard guard;
  if (guard.nested()) return real(args...);
  uint64_t t0 = (off & kProfile) ? bench_ticks() : 0;
  CallStart c = call_start(false, record);
  uint64_t t1 = (off & kProfile) ? bench_ticks() : 0;
  cudaError_t rc = real(args...);
  uint64_t t2 = (off & kProfile) ? bench_ticks() : 0;
  // Adopted by the thread's ops just before on that stream (a failed record: none adopted).
  if (record && c.active) event_recorded(rc == cudaSuccess ? event : nullptr, stream);
  // A failed record leaves the event as it was: no row (the model checker and replay would
  // take it for the event's position).
  if (!record || rc == cudaSuccess) wait_done(c, kind, stream, event);
  if (rc == cudaSuccess && (kind == WaitKind::StreamSync || kind == WaitKind::DeviceSync))
    synchronized(stream, kind == WaitKind::DeviceSync);
  if (off & kProfile) {
    bench_count(kCntWaitTicks, (t1 - t0) + (bench_ticks() - t2));
    bench_count(kCntWaits, 1);
  }
  return rc;
}

// Both instantiate entry points: forward, then map the new exec to the graph's captured ops.
template <class Fn>
cudaError_t instantiate_hook(Fn real, cudaGraphExec_t* exec, cudaGraph_t graph,
                             unsigned long long flags) {
  if (!real) return kNoRuntime;
  HookGuard guard;  // the runtime's own cuGraphInstantiate* must not map it again
  cudaError_t rc = real(exec, graph, flags);
  if (rc == cudaSuccess && exec && !guard.nested() && recorder_active())
    graph_instantiated(*exec, graph);
  return rc;
}

}  // namespace

#pragma GCC visibility push(default)  // the hooks are the only exported symbols
extern "C" {

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  auto real = REAL_RT(cudaStreamEndCapture);
  if (!real) return kNoRuntime;
  if (!recorder_active()) return real(stream, graph);
  HookGuard guard;
  if (guard.nested()) return real(stream, graph);
  uint64_t capture = capture_id_of(stream);
  cudaError_t rc = real(stream, graph);
  if (rc == cudaSuccess && graph) graph_captured(capture, *graph);
  return rc;
}

// A capture begun on a stream with a deferred op (completion.h) would take our own event for
// it into the graph: the thread's deferred ops get their signals first.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  auto real = REAL_RT(cudaStreamBeginCapture);
  if (!real) return kNoRuntime;
  if (recorder_active()) resolve_deferred_completions();
  return real(stream, mode);
}
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                          const cudaGraphNode_t* deps,
                                          const cudaGraphEdgeData* edge_data, size_t ndeps,
                                          cudaStreamCaptureMode mode) {
  auto real = REAL_RT(cudaStreamBeginCaptureToGraph);
  if (!real) return kNoRuntime;
  if (recorder_active()) resolve_deferred_completions();
  return real(stream, graph, deps, edge_data, ndeps, mode);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  return instantiate_hook(REAL_RT(cudaGraphInstantiate), exec, graph, flags);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                          unsigned long long flags) {
  return instantiate_hook(REAL_RT(cudaGraphInstantiateWithFlags), exec, graph, flags);
}

cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph,
                                           cudaGraphInstantiateParams* params) {
  auto real = REAL_RT(cudaGraphInstantiateWithParams);
  if (!real) return kNoRuntime;
  HookGuard guard;
  cudaError_t rc = real(exec, graph, params);
  if (rc == cudaSuccess && exec && !guard.nested() && recorder_active())
    graph_instantiated(*exec, graph);
  return rc;
}

// An updated exec runs the new graph's nodes: its captured NCCL ops are those of `graph` now.
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                cudaGraphExecUpdateResultInfo* info) {
  auto real = REAL_RT(cudaGraphExecUpdate);
  if (!real) return kNoRuntime;
  HookGuard guard;
  cudaError_t rc = real(exec, graph, info);
  if (rc == cudaSuccess && !guard.nested() && recorder_active()) graph_instantiated(exec, graph);
  return rc;
}

// The mapping goes before the real call: once the handle is freed, another thread may be
// handed the same value for a new graph/exec, and retiring afterwards could drop its mapping.
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  auto real = REAL_RT(cudaGraphDestroy);
  if (!real) return kNoRuntime;
  if (recorder_active()) graph_destroyed(graph);
  return real(graph);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  auto real = REAL_RT(cudaGraphExecDestroy);
  if (!real) return kNoRuntime;
  if (recorder_active()) graph_exec_destroyed(exec);
  return real(exec);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  auto real = REAL_RT(cudaGraphLaunch);
  if (!real) return kNoRuntime;
  if (!recorder_active()) return real(exec, stream);
  HookGuard guard;
  if (guard.nested()) return real(exec, stream);
  CallStart c = call_start(false);
  cudaError_t rc = real(exec, stream);
  graph_launched(c, exec, stream, rc);
  return rc;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return wait_hook(REAL_RT(cudaStreamSynchronize), WaitKind::StreamSync, stream, nullptr, stream);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return wait_hook(REAL_RT(cudaEventSynchronize), WaitKind::EventSync, nullptr, event, event);
}
cudaError_t cudaDeviceSynchronize(void) {
  return wait_hook(REAL_RT(cudaDeviceSynchronize), WaitKind::DeviceSync, nullptr, nullptr);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return wait_hook(REAL_RT(cudaStreamWaitEvent), WaitKind::StreamWaitEvent, stream, event,
                   stream, event, flags);
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return wait_hook(REAL_RT(cudaEventRecord), WaitKind::EventRecord, stream, event, event, stream);
}

// Default flags: cudaEventRecord itself (PyTorch's CUDAEvent::record, its work end event
// included, records this way). cudaEventRecordExternal (stream capture only): settled before
// it is recorded again, never adopted.
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  auto real = REAL_RT(cudaEventRecordWithFlags);
  if (!real) return kNoRuntime;
  if (flags == cudaEventRecordDefault)
    return wait_hook(real, WaitKind::EventRecord, stream, event, event, stream, flags);
  event_reused(event);
  return real(event, stream, flags);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  auto real = REAL_RT(cudaEventDestroy);
  if (!real) return kNoRuntime;
  event_reused(event);
  return real(event);
}

}  // extern "C"
#pragma GCC visibility pop
