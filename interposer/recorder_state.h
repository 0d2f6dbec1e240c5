// Process-wide recorder state (internal to the interposer: recorder.cpp and lifecycle.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "comm_table.h"
#include "completion.h"
#include "process_info.h"
#include "record.h"
#include "stack_capture.h"
#include "writer.h"

namespace lockstep::rec {

struct CapturedOp {
  OpRec rec;          // as recorded at capture (state captured)
  CommState* comm;
};

// What a graph exec runs: its graph's captured ops as they were at instantiation. A copy, not
// the graph's handle: CUDA lets an exec outlive its graph (cudaGraphDestroy), and a destroyed
// graph's handle value may be handed out again for an unrelated graph.
struct ExecOps {
  uint64_t graph;
  std::shared_ptr<const std::vector<CapturedOp>> ops;
};

// An op of a nonblocking communicator that returned ncclInProgress: its event is recorded once
// the communicator's async state is ncclSuccess (see recorder.cpp, defer_completion).
struct DeferredTrack {
  void* stream;
  void* ctx;  // CUDA context current when the op was issued
  InFlightOp op;
};

struct Recorder {
  ProcessInfo info;
  Writer* writer = nullptr;
  Completion* completion = nullptr;
  StackMode stack_mode = StackMode::None;
  CommTable comms;
  std::atomic<int64_t> next_call{1};
  std::atomic<int64_t> next_comm_id{1};
  std::atomic<int64_t> next_group_id{1};
  std::atomic<CommState*> null_comm{nullptr};  // ops called with a NULL communicator

  std::mutex graph_mu;  // capture/instantiate/launch bookkeeping (not the per-op hot path)
  std::unordered_map<uint64_t, std::vector<CapturedOp>> by_capture;  // capture id -> ops
  std::unordered_map<uint64_t, std::vector<CapturedOp>> by_graph;    // CUgraph -> ops
  std::unordered_map<uint64_t, ExecOps> execs;                      // exec -> its ops

  std::mutex deferred_mu;
  std::unordered_map<void*, std::vector<DeferredTrack>> deferred;   // comm handle -> ops
  std::atomic<int64_t> n_deferred{0};  // lets the hot paths skip deferred_mu when none
};

enum class RecorderState : int { NotStarted = 0, Active = 1, Off = -1 };

// nullptr unless Active.
Recorder* current_recorder() noexcept;

// lifecycle.cpp: exit/signal/fork handling, installed once per process image at start.
void install_lifecycle_handlers() noexcept;
// recorder.cpp: forget everything in a forked child (it starts over on its first NCCL call).
void reset_after_fork() noexcept;
// A child forked while the parent's writer was inside SQLite (sqlite_section.h): it never starts
// a recorder, and says so on stderr if it calls NCCL.
void stay_untraced_after_fork() noexcept;
// recorder.cpp: stop tracing for good (exit): final commit, threads joined.
void shutdown_recorder(const char* reason) noexcept;

}  // namespace lockstep::rec
