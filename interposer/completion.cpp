#include "completion.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench_knobs.h"
#include "clock.h"
#include "config.h"
#include "log.h"
#include "record.h"
#include "writer.h"

namespace lockstep::rec {

namespace {
// Covering mode: the issuing thread's last few streams (no lock on a hit). A thread that
// alternates between streams (one per process group) would take covers_'s mutex on every op
// with one entry.
struct ThreadCover {
  const void* owner;
  void* stream;
  void* ctx;
  CoverStream* cover;
};
struct ThreadCovers {
  static constexpr unsigned kEntries = 4;
  ThreadCover e[kEntries];
  unsigned next;  // the entry replaced on the next miss (round robin)
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadCovers t_covers;
__attribute__((tls_model("initial-exec"))) thread_local uint64_t t_cover_thread;
std::atomic<uint64_t> g_cover_threads{0};
uint64_t cover_thread() {
  if (!t_cover_thread) t_cover_thread = g_cover_threads.fetch_add(1) + 1;
  return t_cover_thread;
}

constexpr int kCaptureModeRelaxed = 2;         // CU_STREAM_CAPTURE_MODE_RELAXED
constexpr int kCudaErrorNotReady = 600;        // CUDA_ERROR_NOT_READY
constexpr int kWatchdogPollMs = 10;
}  // namespace

Completion::Completion(Writer* writer, int global_rank, std::string trace_dir)
    : writer_(writer), hang_reporter_(writer, global_rank, std::move(trace_dir)) {
  hang_timeout_s_ = config().hang_timeout_s;
  memop_ = config().completion_memop;
  covering_ = config().completion_covering;
  window_ = static_cast<uint32_t>(config().completion_window);
}

bool Completion::available() {
  int state = __atomic_load_n(&load_state_, __ATOMIC_ACQUIRE);
  if (state != 0) return state > 0;
  std::lock_guard<std::mutex> g(load_mu_);
  if (load_state_ == 0) {
    drv_ = load_completion_driver();
    bool ok = drv_ != nullptr;
    if (!ok) {
      writer_->set_meta("completion", "unavailable: no usable libcuda.so.1");
    } else {
      events_ = new EventPool(drv_);
      memops_ = new MemopSlots(drv_);
      if (covering_) {
        writer_->set_meta("completion_signal", "covering");
        writer_->set_meta("completion_window", std::to_string(window_));
      } else if (!memop_) {
        writer_->set_meta("completion_signal", "event");
      }
      int v = 0;
      if (drv_->driver_version && drv_->driver_version(&v) == 0)
        writer_->set_meta("cuda_driver_version", std::to_string(v));
    }
    __atomic_store_n(&load_state_, ok ? 1 : -1, __ATOMIC_RELEASE);
  }
  return load_state_ > 0;
}

CaptureState Completion::capture_state(void* stream) {
  CaptureState cs;
  if (!available() || !drv_->capture_info) return cs;
  int status = 0;
  unsigned long long id = 0;
  void* graph = nullptr;
  if (drv_->capture_info(stream, &status, &id, &graph, nullptr, nullptr, nullptr) != 0)
    return cs;
  cs.capturing = status != 0;  // ACTIVE or INVALIDATED
  cs.id = id;
  cs.graph = reinterpret_cast<uint64_t>(graph);
  return cs;
}

bool Completion::track(void* stream, const InFlightOp& op, int64_t enqueued_mono) {
  if (!available()) return false;
  if (covering_ && !(bench_off() & kOffCovering)) return track_covering(stream, op, enqueued_mono);
  Signal sig;
  void* ctx = nullptr;
  bool memop = false;
  if (memop_ && !(bench_off() & kOffMemop)) {
    memop = memops_->signal(stream, &sig);  // decides, on the first op, whether memops work
    if (!signal_noted_.load(std::memory_order_relaxed)) note_signal_kind();
  }
  if (!memop) {
    if (drv_->ctx_get_current) drv_->ctx_get_current(&ctx);
    sig.event = events_->take(ctx);
    if (!sig.event) return false;
    const bool profile = bench_off() & kProfile;
    const uint64_t t0 = profile ? bench_ticks() : 0;
    const int rc = drv_->event_record(sig.event, stream);
    if (profile) bench_count(kCntEventRecordTicks, bench_ticks() - t0);
    if (rc != 0) {
      events_->put(ctx, sig.event);
      return false;
    }
  }
  if (stop_.load(std::memory_order_acquire)) return false;
  if (enqueued_mono == 0 && !(bench_off() & kOffClock)) enqueued_mono = mono_ns();
  Entry e{op, stream, sig, ctx, enqueued_mono, nullptr};
  if (!incoming_.push(e)) {
    std::lock_guard<std::mutex> g(mu_);
    overflow_.push_back(e);
  }
  if (!started_.load(std::memory_order_acquire)) start_watchdog();
  return true;
}

// A real stream is one FIFO in every thread and context. The legacy stream (handles 0, 1) is
// one per context, the per-thread default stream (2, and 0 in per-thread builds) one per thread
// and context: keyed by both, which can only split a FIFO (still ordered), never merge two.
CoverStream* Completion::cover_stream(void* stream, void* ctx) {
  uint64_t thread = 0;
  void* current = ctx;
  if (reinterpret_cast<uintptr_t>(stream) <= 2) thread = cover_thread();
  else ctx = nullptr;
  if (!current && drv_->ctx_get_current) drv_->ctx_get_current(&current);
  std::lock_guard<std::mutex> g(mu_);
  CoverStream*& c = covers_[{stream, ctx, thread}];
  if (!c) {
    c = new CoverStream;
    c->ctx = current;
  }
  return c;
}

CoverStream* Completion::cached_cover_stream(void* stream, void* ctx) {
  ThreadCovers& tc = t_covers;
  for (const ThreadCover& e : tc.e)
    if (e.owner == this && e.stream == stream && e.ctx == ctx) return e.cover;
  ThreadCover& slot = tc.e[tc.next++ % ThreadCovers::kEntries];
  slot = {this, stream, ctx, cover_stream(stream, ctx)};
  return slot.cover;
}

bool Completion::track_covering(void* stream, const InFlightOp& op, int64_t enqueued_mono) {
  const bool default_stream = reinterpret_cast<uintptr_t>(stream) <= 2;
  void* ctx = nullptr;
  if (default_stream && drv_->ctx_get_current) drv_->ctx_get_current(&ctx);
  CoverStream* cover = cached_cover_stream(stream, ctx);
  Signal sig;
  void* ev_ctx = nullptr;
  // Races between threads issuing on one stream only move where the next event lands.
  const uint32_t since = cover->since.load(std::memory_order_relaxed) + 1;
  if (since >= window_ ||
      cover->seen.load(std::memory_order_acquire) == cover->recorded.load(std::memory_order_relaxed)) {
    ev_ctx = ctx;
    if (!default_stream && drv_->ctx_get_current) drv_->ctx_get_current(&ev_ctx);
    sig.event = events_->take(ev_ctx);
    int rc = -1;
    if (sig.event) {
      const bool profile = bench_off() & kProfile;
      const uint64_t t0 = profile ? bench_ticks() : 0;
      rc = drv_->event_record(sig.event, stream);
      if (profile) bench_count(kCntEventRecordTicks, bench_ticks() - t0);
      if (rc != 0) events_->put(ev_ctx, sig.event);
    }
    if (rc == 0) {
      cover->recorded.fetch_add(1, std::memory_order_relaxed);
      cover->since.store(0, std::memory_order_relaxed);
    } else {
      sig.event = nullptr;  // the next op tries again; this one waits for a later event
      cover->since.store(since, std::memory_order_relaxed);
    }
  } else {
    cover->since.store(since, std::memory_order_relaxed);
  }
  if (stop_.load(std::memory_order_acquire)) return false;
  if (enqueued_mono == 0 && !(bench_off() & kOffClock)) enqueued_mono = mono_ns();
  Entry e{op, stream, sig, ev_ctx, enqueued_mono, cover, cover_thread(), 0};
  if (!incoming_.push(e)) {
    std::lock_guard<std::mutex> g(mu_);
    overflow_.push_back(e);
  }
  if (!started_.load(std::memory_order_acquire)) start_watchdog();
  return true;
}

void Completion::synced(void* stream, bool device) {
  if (!covering_ || !started_.load(std::memory_order_acquire) || stop_.load(std::memory_order_acquire))
    return;
  Entry m{};
  m.thread = cover_thread();
  m.op.call_index = -1;
  if (device) {
    m.sync = 2;
    if (drv_->ctx_get_current) drv_->ctx_get_current(&m.ctx);
    if (!m.ctx) return;
  } else {
    m.sync = 1;
    void* ctx = nullptr;
    if (reinterpret_cast<uintptr_t>(stream) <= 2 && drv_->ctx_get_current) drv_->ctx_get_current(&ctx);
    m.cover = cached_cover_stream(stream, ctx);
  }
  if (!incoming_.push(m)) {
    std::lock_guard<std::mutex> g(mu_);
    overflow_.push_back(m);
  }
}

// A sync marker becomes a completed position at the end of each queue it covers: only where
// every entry there is the syncing thread's (another thread's op may have been enqueued after
// the synchronize began).
void Completion::add_sync(const Entry& m) {
  auto mark = [&](std::deque<Entry>& q) {
    for (const Entry& e : q)
      if (e.thread != m.thread) return;
    q.push_back(m);
    q.back().cover = q.front().cover;
  };
  if (m.sync == 1) {
    auto it = in_flight_.find(m.cover);
    if (it != in_flight_.end()) mark(it->second);
    return;
  }
  for (auto& [key, q] : in_flight_)
    if (q.front().cover && q.front().cover->ctx == m.ctx) mark(q);
}

// LOCKSTEP_COMPLETION=memop: meta `completion_signal` says "memop" or "event: <why not>" (once,
// from the first op; the default's "event" is written when the driver is loaded).
void Completion::note_signal_kind() {
  std::string text = memops_->state_text();
  if (text.empty() || signal_noted_.exchange(true)) return;
  writer_->set_meta("completion_signal", text);
}

void Completion::start_watchdog() {
  std::lock_guard<std::mutex> g(mu_);
  if (started_.load(std::memory_order_relaxed) || stop_.load()) return;
  thread_ = std::thread([this] { watchdog(); });
  started_.store(true, std::memory_order_release);
}

void* Completion::current_context() {
  if (!available() || !drv_->ctx_get_current) return nullptr;
  void* ctx = nullptr;
  drv_->ctx_get_current(&ctx);
  return ctx;
}

bool Completion::track_in(void* ctx, void* stream, const InFlightOp& op) {
  if (!available()) return false;
  void* cur = current_context();
  bool switched = ctx && ctx != cur && drv_->ctx_set_current && drv_->ctx_set_current(ctx) == 0;
  bool ok = track(stream, op);
  if (switched) drv_->ctx_set_current(cur);
  return ok;
}

void Completion::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_.store(true, std::memory_order_release);
  }
  if (thread_.joinable()) thread_.join();
}

void Completion::take_incoming() {
  auto add = [this](const Entry& e) {
    if (e.sync) return add_sync(e);
    // (an op without a timestamp, LOCKSTEP_BENCH_OFF=clock: from when the watchdog saw it)
    if (n_in_flight_ == 0) last_progress_ = e.enqueued_mono ? e.enqueued_mono : mono_ns();
    in_flight_[e.cover ? static_cast<void*>(e.cover) : e.stream].push_back(e);
    n_in_flight_++;
  };
  Entry e;
  while (incoming_.pop(e)) add(e);
  std::vector<Entry> more;
  {
    std::lock_guard<std::mutex> g(mu_);
    more.swap(overflow_);
  }
  // Overflowed entries were pushed after the queue was full, so after everything in it.
  for (const Entry& o : more) add(o);
  while (incoming_.pop(e)) add(e);
}

void Completion::watchdog() {
  pthread_setname_np(pthread_self(), "lockstep-watch");
  // Querying an event while another thread captures in global mode would invalidate that
  // capture; relaxed mode for this thread prevents it (as PyTorch's watchdog does).
  if (drv_->exchange_capture_mode) {
    int mode = kCaptureModeRelaxed;
    drv_->exchange_capture_mode(&mode);
  }
  for (;;) {
    bool stopping = stop_.load(std::memory_order_acquire);
    take_incoming();
    poll_once(mono_ns());
    if (stopping) break;  // after one last poll: ops that finished by exit get their rows
    std::this_thread::sleep_for(std::chrono::milliseconds(kWatchdogPollMs));
  }
}

void Completion::poll_once(int64_t now) {
  void* cur_ctx = nullptr;
  bool ctx_known = false;
  auto is_done = [&](const Entry& e) {
    if (e.sync) return true;
    if (!e.signal.event) return memops_->done(e.signal);
    if (drv_->ctx_set_current && e.ctx && (!ctx_known || cur_ctx != e.ctx)) {
      drv_->ctx_set_current(e.ctx);
      cur_ctx = e.ctx;
      ctx_known = true;
    }
    if (bench_off() & kOffWatchdog) return true;
    // Completed, or failed: an errored stream will not complete later either.
    return drv_->event_query(e.signal.event) != kCudaErrorNotReady;
  };
  std::vector<std::pair<void*, void*>> released;
  // The index of the last entry of q known done, + 1; binary search over the entries at
  // positions pos(0..n-1), whose signals complete in order.
  auto done_prefix = [&](const std::deque<Entry>& q, size_t n, auto pos) -> size_t {
    if (n == 0) return 0;
    if (is_done(q[pos(n - 1)])) return n;
    size_t lo = 0, hi = n - 1;  // pos(hi) is not done
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (is_done(q[pos(mid)])) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    std::deque<Entry>& q = it->second;
    // Signals of one stream complete in order, so the completed ones are a prefix of q: find
    // its end with O(log n) checks instead of one per op (cuEventQuery costs ~1.3 us of
    // driver time on an H200, and shares the driver with the application's launches).
    size_t done = 0;
    CoverStream* cover = q.front().cover;
    if (!cover) {
      done = done_prefix(q, q.size(), [](size_t i) { return i; });
    } else {
      // Covering: only some entries carry an event; one that completed covers every entry
      // before it.
      covering_at_.clear();
      for (size_t i = 0; i < q.size(); i++)
        if (q[i].signal.event || q[i].sync) covering_at_.push_back(i);
      size_t k = done_prefix(q, covering_at_.size(), [&](size_t i) { return covering_at_[i]; });
      done = k ? covering_at_[k - 1] + 1 : 0;
      uint64_t events = 0;
      for (size_t i = 0; i < done; i++) events += q[i].signal.event != nullptr;
      if (events) cover->seen.fetch_add(events, std::memory_order_release);
    }
    for (size_t i = 0; i < done; i++) {
      const Entry& e = q.front();
      if (e.sync) {  // a sync marker: no op
        q.pop_front();
        continue;
      }
      Record r;
      r.kind = RecKind::Completion;
      r.done = {e.op.call_index, now};
      if (!(bench_off() & kOffDoneRows)) writer_->push(r);
      if (e.signal.event) released.emplace_back(e.ctx, e.signal.event);
      q.pop_front();
      n_in_flight_--;
      last_progress_ = now;
      hang_reported_ = false;
    }
    it = q.empty() ? in_flight_.erase(it) : std::next(it);
  }
  events_->release(std::move(released));
  if (hang_timeout_s_ > 0 && n_in_flight_ > 0 && !hang_reported_ &&
      now - last_progress_ >= int64_t(hang_timeout_s_ * 1e9)) {
    hang_reported_ = true;
    // Oldest in-flight op of each stream: those are what the process is stuck on. Covering
    // mode knows less: the first incomplete op is one from the oldest in flight up to the
    // first pending covering event (or the newest op, when none is pending).
    std::vector<StuckOps> heads;
    for (auto& [key, q] : in_flight_) {
      StuckOps h{&q.front().op, &q.front().op};
      if (q.front().cover) {
        h.last = &q.back().op;
        for (const Entry& e : q)
          if (e.signal.event) {
            h.last = &e.op;
            break;
          }
      }
      heads.push_back(h);
    }
    hang_reporter_.report(now, now - last_progress_, std::move(heads), n_in_flight_);
  }
}

}  // namespace lockstep::rec
