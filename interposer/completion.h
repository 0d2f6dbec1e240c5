// Completion tracking through the CUDA driver API: after an op is enqueued, a completion signal
// is enqueued on its stream (completion_signal.h: a stream memory write where the driver allows
// it, else a pooled event), and a watchdog thread polls the signals every 10 ms. A stream's
// signals complete in order, so each poll finds the completed prefix of each stream's in-flight
// ops by binary search. It also detects hangs: ops in flight and no completion for
// LOCKSTEP_HANG_TIMEOUT seconds (what is then said and spawned: hang_report.h). libcuda.so.1 is
// loaded on the first op (completion_driver.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bounded_queue.h"
#include "completion_signal.h"
#include "hang_report.h"
#include "op_desc.h"

namespace lockstep::rec {

class Writer;

struct CaptureState {
  bool capturing = false;  // active (or invalidated) stream capture: do not record events
  uint64_t id = 0;
  uint64_t graph = 0;      // CUgraph being captured into
};

class Completion {
 public:
  Completion(Writer* writer, int global_rank, std::string trace_dir);

  // Loads the driver on first use; false when there is none (then nothing is tracked).
  bool available();
  CaptureState capture_state(void* stream);
  // After a successful enqueue on a non-capturing stream; enqueued_mono: when it returned (0:
  // read the clock here). Returns false if not tracked.
  bool track(void* stream, const InFlightOp& op, int64_t enqueued_mono = 0);
  // The same from a thread whose current context may differ (an op whose completion is
  // recorded later, from whichever thread polls ncclCommGetAsyncError): records in ctx.
  bool track_in(void* ctx, void* stream, const InFlightOp& op);
  // The calling thread's current CUDA context (nullptr without a driver).
  void* current_context();
  void stop();

 private:
  struct Entry {
    InFlightOp op;
    void* stream;
    Signal signal;
    void* ctx;  // the event's context (event signals only)
    int64_t enqueued_mono;
  };
  void start_watchdog();
  void watchdog();
  void take_incoming();
  void poll_once(int64_t now);
  void note_signal_kind();

  Writer* writer_;
  HangReporter hang_reporter_;
  double hang_timeout_s_ = 60;
  CompletionDriver* drv_ = nullptr;
  EventPool* events_ = nullptr;
  MemopSlots* memops_ = nullptr;
  int load_state_ = 0;  // 0 = not tried, 1 = loaded, -1 = unavailable
  std::mutex load_mu_;
  bool memop_ = false;  // LOCKSTEP_COMPLETION=memop (events are the default: see completion_signal.h)
  std::atomic<bool> signal_noted_{false};

  // Hot path -> watchdog, lock-free; overflow_ (under mu_) only when the queue is full.
  BoundedQueue<Entry> incoming_{1 << 15};
  std::mutex mu_;  // guards overflow_, thread_ start
  std::vector<Entry> overflow_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> started_{false};
  std::thread thread_;

  // watchdog thread only
  std::map<void*, std::deque<Entry>> in_flight_;  // stream -> entries in enqueue order
  size_t n_in_flight_ = 0;
  int64_t last_progress_ = 0;
  bool hang_reported_ = false;
};

}  // namespace lockstep::rec
