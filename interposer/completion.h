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
//
// Adopted events (the default signal, `event`): an op whose stream the issuing thread records an
// event on right after it (its next hooked call is that cudaEventRecord: PyTorch's work end
// event, recorded after every collective and coalesced group) takes that event as its signal
// instead of recording one of ours (~1.15 us per op under PyTorch). On a default stream
// (handles 0-2, PyTorch's synchronous collectives) only in the context of the op. The op goes to the
// watchdog at once without a signal ("deferred"); its signal follows as a marker entry of its
// stream: the caller's event, or, when the thread's next hooked call is anything else, our
// own event recorded then (after a capture-status query: a capture may have begun since).
// Ops of one group share their marker, as they share one launch. A thread whose op was not
// adopted records our own event at once again, until it records an event on the stream of its
// last op. The adopted event stays the caller's: before the caller records it again or
// destroys it (hooked: cudaEventRecord[WithFlags], cudaEventDestroy), the hook settles it
// (AdoptedEvents); an op whose adopted event was recorded again before it completed ("lost":
// meta completion_adopted) is completed only by a later signal of its stream, and a hang
// names it as a range.
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

#include "bounded_join.h"
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

// Live adoptions: one record per adopted op marker (kRecords, reused round robin; none free:
// our own event instead), found from the event by a direct-mapped index (an index entry held by
// another live event: our own event instead). A record's word holds the event, or'ed with its
// state. The hook that records an event again or destroys it settles its live record (CAS to
// kSettling, waits while the watchdog queries it, queries it itself, stores kDone or kLost)
// before forwarding; the watchdog marks `querying` before it reads the word, so either it sees
// the settling state and does not query, or the hook waits for its query to finish (both
// seq_cst: Dekker). A settled record stays the watchdog's until it releases it; the event may
// be adopted again at once, in a new record.
class AdoptedEvents {
 public:
  static constexpr uint32_t kRecords = 8192;
  static constexpr uint32_t kIndex = 4096;
  static constexpr uint32_t kNone = ~0u;
  enum State : uintptr_t { kLive = 0, kSettling = 1, kDone = 2, kLost = 3 };
  // After the caller's record of ev succeeded: its record, or kNone.
  uint32_t claim(void* ev);
  // Before the caller records ev again or destroys it (any thread).
  void settle(void* ev, CompletionDriver* drv);
  // Watchdog: kLive (not done yet), kDone, kLost, or kSettling (ask again next poll).
  State poll(uint32_t rec, void* ev, CompletionDriver* drv);
  void release(uint32_t rec);

 private:
  static uint32_t index_of(void* ev) {
    uintptr_t v = reinterpret_cast<uintptr_t>(ev);
    return uint32_t((v >> 4) ^ (v >> 16) ^ (v >> 28)) % kIndex;
  }
  std::atomic<uintptr_t> word_[kRecords] = {};
  std::atomic<uint32_t> querying_[kRecords] = {};
  std::atomic<uint32_t> index_[kIndex] = {};  // record + 1 of the event last adopted there
  std::atomic<uint32_t> next_{0};             // where claim looks for a free record first
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
  bool available() {
    const int state = __atomic_load_n(&load_state_, __ATOMIC_ACQUIRE);
    return state != 0 ? state > 0 : load_driver();
  }
  CaptureState capture_state(void* stream);
  // After a successful enqueue on a non-capturing stream; enqueued_mono: when it returned (0:
  // read the clock here). Returns false if not tracked.
  bool track(void* stream, const InFlightOp& op, int64_t enqueued_mono = 0);
  // The same from a thread whose current context may differ (an op whose completion is
  // recorded later, from whichever thread polls ncclCommGetAsyncError): records in ctx.
  bool track_in(void* ctx, void* stream, const InFlightOp& op);
  // The op hot path (emit_op): like track, but the op may wait on its thread for an event the
  // caller records on its stream next (adopted), see the top of this file.
  bool track_or_defer(void* stream, const InFlightOp& op, int64_t enqueued_mono);
  // Before any other hooked call of this thread: records our own signal for its deferred ops.
  void resolve_deferred();
  // cudaEventRecord(event, stream) returned success on this thread: adopts it for the thread's
  // deferred ops on that stream (others: resolve_deferred).
  void event_recorded(void* event, void* stream);
  // Before the caller re-records or destroys `event` (cudaEventRecord[WithFlags],
  // cudaEventDestroy): settles an adoption of it.
  void event_reused(void* event) { adopted_.settle(event, drv_); }
  // Covering mode: cudaStreamSynchronize(stream) (device: cudaDeviceSynchronize) returned
  // success: every op this thread issued there before is complete (the uncovered tail too).
  void synced(void* stream, bool device);
  struct ThreadDeferred;  // (completion.cpp)
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
    // An op with no signal of its own (covering, deferred ops sharing one, an adopted event
    // lost, a capture begun before our own could be recorded) completes when a later signal
    // of its stream does; `batched`: exactly then (it shares that signal: one group's ops).
    uint8_t has_signal = 1;
    uint8_t batched = 0;
    uint8_t marker = 0;  // not an op: the signal of the deferred ops before it on its stream
    uint32_t adopted = AdoptedEvents::kNone;  // the adopted event's slot
  };
  struct StreamQueue {
    std::deque<Entry> q;
    size_t unsignalled = 0;  // entries without a signal (has_signal == 0)
  };
  ThreadDeferred* deferred_of_thread();
  void push_entry(const Entry& e);
  void push_own_marker(void* stream, void* ctx);
  void add_marker(const Entry& m);
  void unbatch_before(StreamQueue& sq, size_t end);
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
  bool load_driver();  // available()'s first call
  int load_state_ = 0;  // 0 = not tried, 1 = loaded, -1 = unavailable
  std::mutex load_mu_;
  bool memop_ = false;  // LOCKSTEP_COMPLETION=memop (events are the default: see completion_signal.h)
  bool covering_ = false;     // LOCKSTEP_COMPLETION=covering
  uint32_t window_ = 8;       // LOCKSTEP_COMPLETION_WINDOW
  std::map<std::tuple<void*, void*, uint64_t>, CoverStream*> covers_;  // under mu_; never freed
  std::atomic<bool> signal_noted_{false};
  AdoptedEvents adopted_;
  std::atomic<uint64_t> n_adopted_{0}, n_own_after_{0}, n_lost_{0};  // meta completion_adopted

  // Hot path -> watchdog, lock-free; overflow_ (under mu_) only when the queue is full.
  BoundedQueue<Entry> incoming_{1 << 15};
  std::mutex mu_;  // guards overflow_, thread_ start, covers_
  std::vector<Entry> overflow_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> started_{false};
  std::thread thread_;
  ThreadExit thread_exit_;

  // watchdog thread only
  // stream (covering mode: its CoverStream) -> entries in enqueue order
  std::map<void*, StreamQueue> in_flight_;
  std::vector<size_t> covering_at_;  // scratch: positions of covering events in one queue
  size_t n_in_flight_ = 0;
  int64_t last_progress_ = 0;
  bool hang_reported_ = false;
};

}  // namespace lockstep::rec
