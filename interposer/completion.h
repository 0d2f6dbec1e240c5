// Completion tracking through the CUDA driver API: after an op is enqueued, a completion signal
// is enqueued on its stream (completion_signal.h: a pooled event by default, or a stream memory
// write), and a watchdog thread polls the signals every 10 ms. A stream's signals complete in
// order, so each poll finds the completed prefix of each stream's in-flight ops by binary
// search. It also detects hangs: ops in flight and no completion for LOCKSTEP_HANG_TIMEOUT
// seconds (what is then said and spawned: hang_report.h). libcuda.so.1 is loaded on the first
// op (completion_driver.h).
//
// LOCKSTEP_COMPLETION=covering: not one event per op, but per stream at most one pending
// "covering" event, recorded by the issuing thread right after an op (same thread, stream and
// place as a per-op event; the watchdog never records onto a user stream) when the watchdog has
// seen that stream's previous covering events complete, or when the stream issued
// LOCKSTEP_COMPLETION_WINDOW ops since its last one. A covering event that completes completes
// every op of its stream up to and including its own (streams are FIFO). Precision: an op after
// the stream's last completed covering event reads as in flight although it may be done; the
// first incomplete op of a stream is at most `window` ops after the last completed one (meta
// `completion_signal=covering`, `completion_window`; the analyzer reports that range). Ops after
// a stream's last covering event get no completion row until the stream's next op records one.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bounded_queue.h"
#include "completion_signal.h"
#include "hang_report.h"
#include "op_desc.h"

namespace lockstep::rec {

class Writer;

// Covering mode: one stream as the issuing threads see it (the legacy and per-thread default
// streams, handles 0-2, are one per context and thread: keyed so, see cover_stream).
struct CoverStream {
  std::atomic<uint64_t> recorded{0};  // covering events recorded (issuing threads)
  std::atomic<uint64_t> seen{0};      // of those, seen complete (watchdog)
  std::atomic<uint32_t> since{0};     // ops since the last covering event
  void* ctx = nullptr;                // the context current when it was first seen
};

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
  // Covering mode: cudaStreamSynchronize(stream) (device: cudaDeviceSynchronize) returned
  // success: every op this thread issued there before is complete (the uncovered tail too).
  void synced(void* stream, bool device);
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
    CoverStream* cover;  // covering mode (then signal.event only on covering ops), else null
    uint64_t thread = 0;  // covering mode: the issuing thread (cover_thread())
    // Covering mode: not an op but a synchronize that returned on `thread` (synced()): the
    // entries of that thread before it are complete.
    uint8_t sync = 0;     // 0 = an op, 1 = stream sync (cover), 2 = device sync (ctx)
  };
  void add_sync(const Entry& marker);
  bool track_covering(void* stream, const InFlightOp& op, int64_t enqueued_mono);
  CoverStream* cover_stream(void* stream, void* ctx);  // slow path: under mu_
  CoverStream* cached_cover_stream(void* stream, void* ctx);  // the thread's cache, then the above
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
  bool covering_ = false;     // LOCKSTEP_COMPLETION=covering
  uint32_t window_ = 8;       // LOCKSTEP_COMPLETION_WINDOW
  std::map<std::tuple<void*, void*, uint64_t>, CoverStream*> covers_;  // under mu_; never freed
  std::atomic<bool> signal_noted_{false};

  // Hot path -> watchdog, lock-free; overflow_ (under mu_) only when the queue is full.
  BoundedQueue<Entry> incoming_{1 << 15};
  std::mutex mu_;  // guards overflow_, thread_ start, covers_
  std::vector<Entry> overflow_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> started_{false};
  std::thread thread_;

  // watchdog thread only
  // stream (covering mode: its CoverStream) -> entries in enqueue order
  std::map<void*, std::deque<Entry>> in_flight_;
  std::vector<size_t> covering_at_;  // scratch: positions of covering events in one queue
  size_t n_in_flight_ = 0;
  int64_t last_progress_ = 0;
  bool hang_reported_ = false;
};

}  // namespace lockstep::rec
