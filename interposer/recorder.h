// The recorder's core, as the hooks (nccl_hooks.cpp, cuda_hooks.cpp) see it. Every function
// here is noexcept and safe to call whether or not tracing is active: the first NCCL hook starts
// the recorder (file, writer thread); before that, and after an internal failure, these are
// no-ops and the hooks only forward.
#pragma once

#include <cstdint>

#include "completion.h"
#include "op_desc.h"
#include "record.h"

namespace lockstep::rec {

// Thread-local re-entrancy guard: NCCL calls its own public entry points (ncclBcast ->
// ncclBroadcast), and those land in our hooks again; the nested call must pass straight through.
class HookGuard {
 public:
  HookGuard() noexcept;
  ~HookGuard() noexcept;
  bool nested() const noexcept { return nested_; }

 private:
  bool nested_;
};

// True while the calling thread is inside one of liblockstep's NCCL hooks: an NCCL call made
// now is recorded by the interposer (the profiler plugin asks, profiler_plugin.cpp).
bool in_nccl_hook() noexcept;

// Starts the recorder if needed; false when tracing is off (failed, or exiting).
bool recorder_start() noexcept;
// True once started (the CUDA runtime hooks stay inert until an NCCL call was made).
bool recorder_active() noexcept;

// --- operations -----------------------------------------------------------------------------
struct OpToken {
  bool active = false;
  bool grouped = false;
  int64_t call_index = 0;
  int64_t issue_mono = 0, issue_wall = 0;
  uint64_t stack_hash = 0;
  CaptureState capture;
  OpDesc desc;
};
OpToken op_begin(const OpDesc& d) noexcept;
void op_end(OpToken& t, int rc) noexcept;

void group_start() noexcept;
// After the real ncclGroupEnd / ncclGroupSimulateEnd returned rc.
void group_end(int rc, bool simulate) noexcept;

// --- communicators --------------------------------------------------------------------------
struct CommOrigin {
  enum Kind { UniqueIds, InitAll, Split, Shrink } kind;
  const void* ids = nullptr;  // ncclUniqueId array (UniqueIds)
  int n_ids = 0;
  void* parent = nullptr;     // Split / Shrink
  int color = 0, key = 0;     // Split
  const int* excluded = nullptr;  // Shrink
  int n_excluded = 0;
  int initall_index = 0;      // InitAll: which ncclCommInitAll call of this process
};
struct CallStart {
  bool active = false;
  int64_t call_index = 0;
  int64_t mono = 0;
  uint64_t split_counter = 0;  // Split/Shrink: parent's counter taken before the call
};
// may_start=false (CUDA runtime hooks): only when the recorder already runs. Resolves the
// thread's deferred completions first (completion.h), except for a cudaEventRecord
// (event_record: event_recorded may adopt that event after the real call).
CallStart call_start(bool may_start = true, bool event_record = false) noexcept;
// Split/Shrink: takes the parent's split counter (before the call, so every member agrees).
void take_split_counter(CallStart& c, void* parent) noexcept;
// After a creating call returned: newcomm is the handle written by NCCL (nullptr if none).
void comm_created(const CallStart& c, const CommOrigin& origin, void* newcomm, int nranks,
                  int rank, const void* config, int rc) noexcept;
void comm_ended(const CallStart& c, void* comm, CommEnd kind, int rc) noexcept;
void api_call(const CallStart& c, const char* name, void* comm, int rc,
              const char* detail) noexcept;
// After a real ncclCommGetAsyncError (rc, *asyncError): once a nonblocking communicator's state
// is ncclSuccess its ncclInProgress ops are on their streams and get their completion events.
// Never starts the recorder (frameworks poll this constantly).
void comm_async_state(void* comm, int rc, int async_err) noexcept;
// Blocks (bounded) until every record so far is committed: before ncclCommAbort returns.
void flush_trace() noexcept;

// --- CUDA runtime (graphs, host waits) -------------------------------------------------------
// Before the real cudaStreamEndCapture: the stream's capture id (0 if not capturing).
uint64_t capture_id_of(void* stream) noexcept;
void graph_captured(uint64_t capture_id, void* graph) noexcept;
void graph_instantiated(void* exec, void* graph) noexcept;
// Before the real cudaGraphDestroy / cudaGraphExecDestroy: the handle value may be reused.
void graph_destroyed(void* graph) noexcept;
void graph_exec_destroyed(void* exec) noexcept;
void graph_launched(const CallStart& c, void* exec, void* stream, int rc) noexcept;
void wait_done(const CallStart& c, WaitKind kind, void* stream, void* event) noexcept;
// cudaEventRecord(event, stream) returned success on this thread (completion.h: adoption).
void event_recorded(void* event, void* stream) noexcept;
// Before a real call that must come after the thread's deferred ops' signals (a capture begins).
void resolve_deferred_completions() noexcept;
// Before the real cudaEventRecord[WithFlags] / cudaEventDestroy of `event`, on any thread.
void event_reused(void* event) noexcept;
// A stream (device: every stream) synchronize returned success on this thread.
void synchronized(void* stream, bool device) noexcept;

}  // namespace lockstep::rec
