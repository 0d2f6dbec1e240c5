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
// At exit, how long stop() waits for the watchdog's last poll (Completion::stop).
constexpr int kWatchdogStopWaitMs = 2000;
}  // namespace

// The streams on which a thread has deferred ops (track_or_defer): the ops are already with
// the watchdog, without a signal; their stream's marker follows when resolved. Heap-allocated
// on first use (the initial-exec TLS keeps one pointer).
struct Completion::ThreadDeferred {
  static constexpr unsigned kMax = 8;
  const Completion* owner = nullptr;
  unsigned n = 0;
  bool defer = false;           // learned: set when the caller records after an op, cleared
  void* last_stream = nullptr;  // when an op was not adopted (event_recorded)
  struct {
    void* stream;
    void* ctx;
    uint32_t ops;
  } s[kMax];
};
namespace {
__attribute__((tls_model("initial-exec"))) thread_local void* t_deferred;
struct DeferredFree {  // frees the thread's buffer at its exit (touched on allocation only)
  void* p = nullptr;
  ~DeferredFree();
};
thread_local DeferredFree t_deferred_free;
}  // namespace
DeferredFree::~DeferredFree() {
  t_deferred = nullptr;
  delete static_cast<Completion::ThreadDeferred*>(p);
}

uint32_t AdoptedEvents::claim(void* ev) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(ev);
  const uint32_t ix = index_of(ev);
  uint32_t held = index_[ix].load(std::memory_order_acquire);
  if (held) {
    const uintptr_t w = word_[held - 1].load(std::memory_order_acquire);
    if ((w & ~uintptr_t(3)) != v && (w & ~uintptr_t(3)) && (w & 3) <= kSettling)
      return kNone;  // another event, not settled, is found through this index entry
  }
  for (int tries = 0; tries < 8; tries++) {
    // (one claimer per thread at a time: a relaxed cursor, then the record's CAS decides)
    const uint32_t r = next_.load(std::memory_order_relaxed) % kRecords;
    next_.store(r + 1, std::memory_order_relaxed);
    uintptr_t expected = 0;
    if (word_[r].load(std::memory_order_relaxed) != 0 || !word_[r].compare_exchange_strong(expected, v))
      continue;
    if (index_[ix].compare_exchange_strong(held, r + 1)) return r;
    word_[r].store(0, std::memory_order_release);  // another thread claimed there meanwhile
    break;
  }
  return kNone;
}

void AdoptedEvents::settle(void* ev, CompletionDriver* drv) {
  const uint32_t held = index_[index_of(ev)].load(std::memory_order_seq_cst);
  if (!held || !drv) return;
  const uint32_t i = held - 1;
  uintptr_t live = reinterpret_cast<uintptr_t>(ev);
  if (word_[i].load(std::memory_order_seq_cst) != live ||  // released, settled, or another's
      !word_[i].compare_exchange_strong(live, live | kSettling))
    return;
  while (querying_[i].load(std::memory_order_seq_cst))
    std::this_thread::yield();  // the watchdog's one query of it (~1 us)
  // Still the adopted record (the caller has not recorded it again yet): done or not, for good.
  if (bench_off() & kProfile) bench_count(kCntSettleQueries, 1);
  const int rc = drv->event_query(ev);
  word_[i].store(live | (rc != kCudaErrorNotReady ? kDone : kLost), std::memory_order_seq_cst);
}

AdoptedEvents::State AdoptedEvents::poll(uint32_t i, void* ev, CompletionDriver* drv) {
  querying_[i].store(1, std::memory_order_seq_cst);
  const uintptr_t w = word_[i].load(std::memory_order_seq_cst);
  State st = State(w & 3);
  if (w == reinterpret_cast<uintptr_t>(ev))
    st = drv->event_query(ev) != kCudaErrorNotReady ? kDone : kLive;
  querying_[i].store(0, std::memory_order_release);
  return st;
}

void AdoptedEvents::release(uint32_t i) { word_[i].store(0, std::memory_order_release); }

Completion::Completion(Writer* writer, int global_rank, std::string trace_dir)
    : writer_(writer), hang_reporter_(writer, global_rank, std::move(trace_dir)) {
  hang_timeout_s_ = config().hang_timeout_s;
  memop_ = config().completion_memop;
  covering_ = config().completion_covering;
  window_ = static_cast<uint32_t>(config().completion_window);
}

bool Completion::load_driver() {
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
  if (t_deferred) resolve_deferred();  // this thread's earlier ops go first
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
  push_entry(Entry{op, stream, sig, ctx, enqueued_mono, nullptr});
  return true;
}

void Completion::push_entry(const Entry& e) {
  if (!incoming_.push(e)) {
    std::lock_guard<std::mutex> g(mu_);
    overflow_.push_back(e);
  }
  if (!started_.load(std::memory_order_acquire)) start_watchdog();
}

Completion::ThreadDeferred* Completion::deferred_of_thread() {
  auto* td = static_cast<ThreadDeferred*>(t_deferred);
  if (!td) {
    td = new ThreadDeferred;
    t_deferred_free.p = td;
    t_deferred = td;
  }
  if (td->owner != this) {  // first use, or a recorder abandoned at fork
    td->owner = this;
    td->n = 0;
    // Deferral is learned: a thread defers its ops only once it has been seen recording an
    // event on its last op's stream (event_recorded). A program that never does (plain C++
    // loops; a capture begun through the driver API, which no hook sees) keeps one event per op.
    td->defer = false;
    td->last_stream = nullptr;
  }
  return td;
}

bool Completion::track_or_defer(void* stream, const InFlightOp& op, int64_t enqueued_mono) {
  // Memops and covering have their own signals: recorded at once. The default streams'
  // handles (0-2: PyTorch's collectives run on the current stream, the legacy one unless set)
  // name a stream per context (and thread, deferred ops are): event_recorded checks both.
  if (memop_ || covering_ || (bench_off() & kOffAdopt)) return track(stream, op, enqueued_mono);
  if (!available()) return false;
  const bool default_stream = reinterpret_cast<uintptr_t>(stream) <= 2;
  if (default_stream && !drv_->ctx_get_current) return track(stream, op, enqueued_mono);
  ThreadDeferred* td = deferred_of_thread();
  td->last_stream = stream;
  if (!td->defer) return track(stream, op, enqueued_mono);
  if (stop_.load(std::memory_order_acquire)) return false;
  void* ctx = nullptr;
  if (default_stream) drv_->ctx_get_current(&ctx);
  unsigned i = 0;
  while (i < td->n && (td->s[i].stream != stream || (default_stream && td->s[i].ctx != ctx))) i++;
  if (i == td->n) {
    if (td->n == ThreadDeferred::kMax) {
      resolve_deferred();
      td->defer = true;
      i = 0;
    }
    if (!default_stream && drv_->ctx_get_current) drv_->ctx_get_current(&ctx);
    td->s[td->n++] = {stream, ctx, 0};
  }
  td->s[i].ops++;
  if (enqueued_mono == 0 && !(bench_off() & kOffClock)) enqueued_mono = mono_ns();
  Entry e{op, stream, Signal{}, nullptr, enqueued_mono, nullptr};
  e.has_signal = 0;
  e.batched = 1;  // completes with its stream's marker (add_marker clears it if none comes)
  push_entry(e);
  if (!started_.load(std::memory_order_acquire)) start_watchdog();
  return true;
}

// The marker of one stream's deferred ops: our own event, after a capture-status query (the
// thread may have begun capturing on that stream since: an event recorded now would become a
// node of its graph). Capturing, or the record failed: a marker without a signal (the ops are
// then completed only by a later signal of their stream).
void Completion::push_own_marker(void* stream, void* ctx) {
  Entry m{};
  m.stream = stream;
  m.marker = 1;
  m.has_signal = 0;
  m.op.call_index = -1;
  // A default stream's handle names the stream of the current context: its deferred ops' is
  // that of the context they were deferred in (the thread may have switched since).
  void* cur = nullptr;
  bool switched = false, elsewhere = false;
  if (reinterpret_cast<uintptr_t>(stream) <= 2 && ctx && drv_->ctx_get_current &&
      drv_->ctx_get_current(&cur) == 0 && cur != ctx) {
    switched = drv_->ctx_set_current && drv_->ctx_set_current(ctx) == 0;
    elsewhere = !switched;
  }
  if (!elsewhere && !capture_state(stream).capturing) {
    if (void* ev = events_->take(ctx)) {
      const bool profile = bench_off() & kProfile;
      const uint64_t t0 = profile ? bench_ticks() : 0;
      const int rc = drv_->event_record(ev, stream);
      if (profile) bench_count(kCntEventRecordTicks, bench_ticks() - t0);
      if (rc == 0) {
        m.signal.event = ev;
        m.ctx = ctx;
        m.has_signal = 1;
      } else {
        events_->put(ctx, ev);
      }
    }
  }
  if (switched) drv_->ctx_set_current(cur);
  push_entry(m);
}

void Completion::resolve_deferred() {
  auto* td = static_cast<ThreadDeferred*>(t_deferred);
  if (!td || td->n == 0 || td->owner != this) return;
  for (unsigned i = 0; i < td->n; i++) {
    push_own_marker(td->s[i].stream, td->s[i].ctx);
    n_own_after_.fetch_add(td->s[i].ops, std::memory_order_relaxed);
  }
  td->n = 0;
  td->defer = false;  // until this thread records an event after an op (event_recorded)
}

void Completion::event_recorded(void* event, void* stream) {
  auto* td = static_cast<ThreadDeferred*>(t_deferred);
  if (!td || td->owner != this) return;
  if (td->n == 0) {
    // The caller records events on its ops' stream after all: defer its next op again.
    if (event && !td->defer && stream == td->last_stream) td->defer = true;
    return;
  }
  // A default stream's handle names the stream of the current context: the ops' only in the
  // context they were deferred in (track_or_defer keys them by both).
  const bool default_stream = reinterpret_cast<uintptr_t>(stream) <= 2;
  void* ctx = nullptr;
  if (event && default_stream && (!drv_->ctx_get_current || drv_->ctx_get_current(&ctx) != 0))
    event = nullptr;
  unsigned i = 0;
  while (event && i < td->n && (td->s[i].stream != stream || (default_stream && td->s[i].ctx != ctx))) i++;
  const uint32_t slot = event && i < td->n ? adopted_.claim(event) : AdoptedEvents::kNone;
  if (slot == AdoptedEvents::kNone) return resolve_deferred();
  Entry m{};
  m.stream = stream;
  m.marker = 1;
  m.op.call_index = -1;
  m.signal.event = event;
  m.ctx = td->s[i].ctx;
  m.adopted = slot;
  push_entry(m);
  n_adopted_.fetch_add(td->s[i].ops, std::memory_order_relaxed);
  td->s[i] = td->s[--td->n];
  resolve_deferred();  // the thread's ops on other streams: our own
  td->defer = true;
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
  e.has_signal = sig.event != nullptr;
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
  auto mark = [&](StreamQueue& sq) {
    for (const Entry& e : sq.q)
      if (e.thread != m.thread) return;
    sq.q.push_back(m);
    sq.q.back().cover = sq.q.front().cover;
  };
  if (m.sync == 1) {
    auto it = in_flight_.find(m.cover);
    if (it != in_flight_.end()) mark(it->second);
    return;
  }
  for (auto& [key, sq] : in_flight_)
    if (sq.q.front().cover && sq.q.front().cover->ctx == m.ctx) mark(sq);
}

// A deferred ops' marker goes after them in their stream's queue. Without a signal (capturing,
// or our record failed) it is dropped, and those ops no longer complete exactly with it.
void Completion::add_marker(const Entry& m) {
  auto it = in_flight_.find(m.stream);
  if (m.has_signal && it != in_flight_.end()) {
    it->second.q.push_back(m);
    return;
  }
  if (it != in_flight_.end()) unbatch_before(it->second, it->second.q.size());
  if (m.adopted != AdoptedEvents::kNone) adopted_.release(m.adopted);  // (not expected)
  else if (m.signal.event) events_->release({{m.ctx, m.signal.event}});
}

// The ops without a signal just before position `end` (up to the previous signal) no longer
// complete exactly with a marker: a later signal completes them, a hang names them as a range.
void Completion::unbatch_before(StreamQueue& sq, size_t end) {
  for (size_t i = end; i-- > 0;) {
    Entry& e = sq.q[i];
    if (e.has_signal || e.sync) break;
    if (!e.marker) e.batched = 0;
  }
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
  thread_ = std::thread([this] {
    watchdog();
    thread_exit_.mark();
  });
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
  resolve_deferred();  // the exiting thread's (other threads' deferred ops keep no signal)
  if (load_state_ > 0 && !memop_ && !covering_)
    writer_->set_meta("completion_adopted",
                      "adopted=" + std::to_string(n_adopted_.load()) + " own_after=" +
                          std::to_string(n_own_after_.load()) + " lost=" + std::to_string(n_lost_.load()));
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_.store(true, std::memory_order_release);
  }
  // Within a bound: a watchdog stuck in a driver call (a GPU in a bad state) does not hold the
  // program's exit; its last poll's rows are then missing.
  if (thread_.joinable() && !thread_exit_.join_within(thread_, kWatchdogStopWaitMs))
    writer_->set_meta("watchdog_at_exit", "not stopped within " +
                                              std::to_string(kWatchdogStopWaitMs / 1000) +
                                              " s (in a driver call): not waited for");
}

void Completion::take_incoming() {
  auto add = [this](const Entry& e) {
    if (e.sync) return add_sync(e);
    if (e.marker) return add_marker(e);
    // (an op without a timestamp, LOCKSTEP_BENCH_OFF=clock: from when the watchdog saw it)
    if (n_in_flight_ == 0) last_progress_ = e.enqueued_mono ? e.enqueued_mono : mono_ns();
    StreamQueue& sq = in_flight_[e.cover ? static_cast<void*>(e.cover) : e.stream];
    sq.q.push_back(e);
    sq.unsignalled += !e.has_signal;
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
  auto is_done = [&](StreamQueue& sq, size_t i) {
    Entry& e = sq.q[i];
    if (e.sync) return true;
    if (!e.has_signal) return false;  // (lost since the positions were taken)
    if (!e.signal.event) return memops_->done(e.signal);
    if (drv_->ctx_set_current && e.ctx && (!ctx_known || cur_ctx != e.ctx)) {
      drv_->ctx_set_current(e.ctx);
      cur_ctx = e.ctx;
      ctx_known = true;
    }
    if (bench_off() & kOffWatchdog) return true;
    if (e.adopted != AdoptedEvents::kNone) {
      switch (adopted_.poll(e.adopted, e.signal.event, drv_)) {
        case AdoptedEvents::kDone: return true;
        case AdoptedEvents::kLost:  // recorded again before it completed: no signal left
          adopted_.release(e.adopted);
          e.adopted = AdoptedEvents::kNone;
          e.signal.event = nullptr;
          e.has_signal = 0;
          sq.unsignalled++;
          unbatch_before(sq, i);
          n_lost_.fetch_add(1, std::memory_order_relaxed);
          return false;
        default: return false;
      }
    }
    // Completed, or failed: an errored stream will not complete later either.
    return drv_->event_query(e.signal.event) != kCudaErrorNotReady;
  };
  std::vector<std::pair<void*, void*>> released;
  // The index of the last entry of q known done, + 1; binary search over the entries at
  // positions pos(0..n-1), whose signals complete in order. Whatever the signals say, the
  // prefix returned ends at an entry seen done (sound even if one lost its signal meanwhile).
  auto done_prefix = [&](StreamQueue& sq, size_t n, auto pos) -> size_t {
    if (n == 0) return 0;
    if (is_done(sq, pos(n - 1))) return n;
    size_t lo = 0, hi = n - 1;  // pos(hi) is not done
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (is_done(sq, pos(mid))) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    StreamQueue& sq = it->second;
    std::deque<Entry>& q = sq.q;
    // Signals of one stream complete in order, so the completed ops are a prefix of q: find
    // its end with O(log n) checks instead of one per op (cuEventQuery costs ~1.3 us of
    // driver time on an H200, and shares the driver with the application's launches).
    size_t done = 0;
    CoverStream* cover = q.front().cover;
    if (sq.unsignalled == 0) {
      done = done_prefix(sq, q.size(), [](size_t i) { return i; });
    } else {
      // Only some entries carry a signal; one that completed covers every entry before it.
      covering_at_.clear();
      for (size_t i = 0; i < q.size(); i++)
        if (q[i].has_signal || q[i].sync) covering_at_.push_back(i);
      size_t k = done_prefix(sq, covering_at_.size(), [&](size_t i) { return covering_at_[i]; });
      done = k ? covering_at_[k - 1] + 1 : 0;
    }
    if (cover) {
      uint64_t events = 0;
      for (size_t i = 0; i < done; i++) events += q[i].signal.event != nullptr;
      if (events) cover->seen.fetch_add(events, std::memory_order_release);
    }
    for (size_t i = 0; i < done; i++) {
      const Entry& e = q.front();
      if (e.adopted != AdoptedEvents::kNone) adopted_.release(e.adopted);
      else if (e.signal.event) released.emplace_back(e.ctx, e.signal.event);
      sq.unsignalled -= !e.has_signal && !e.sync;
      if (e.sync || e.marker) {  // a sync marker or a deferred ops' marker: no op
        q.pop_front();
        continue;
      }
      Record r;
      r.kind = RecKind::Completion;
      r.done = {e.op.call_index, now};
      if (!(bench_off() & kOffDoneRows)) writer_->push(r);
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
    // Oldest in-flight op of each stream: those are what the process is stuck on. An oldest
    // op without a signal of its own (covering mode; an adopted event lost) is known less
    // well: the first incomplete op is one from it up to the first op with a pending signal
    // (or the newest op, when none has one). One that completes with its marker is exact.
    std::vector<StuckOps> heads;
    for (auto& [key, sq] : in_flight_) {
      const Entry* head = nullptr;
      for (const Entry& e : sq.q)
        if (!e.sync && !e.marker) {
          head = &e;
          break;
        }
      if (!head) continue;
      StuckOps h{&head->op, &head->op};
      if (!head->has_signal && !head->batched) {
        const Entry* last_op = head;
        bool after = false;
        for (const Entry& e : sq.q) {
          if (&e == head) after = true;
          if (!after || &e == head || e.sync) continue;
          if (!e.marker) last_op = &e;
          if (e.has_signal) break;
        }
        h.last = &last_op->op;
      }
      heads.push_back(h);
    }
    hang_reporter_.report(now, now - last_progress_, std::move(heads), n_in_flight_);
  }
}

}  // namespace lockstep::rec
