#include "completion.h"

#include <dlfcn.h>
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

// Driver entry points, declared with plain types so cuda.h's version macros do not matter.
struct Completion::Driver {
  using Res = int;  // CUresult
  Res (*event_create)(void** ev, unsigned flags) = nullptr;
  Res (*event_record)(void* ev, void* stream) = nullptr;
  Res (*event_query)(void* ev) = nullptr;
  Res (*event_destroy)(void* ev) = nullptr;
  Res (*ctx_get_current)(void** ctx) = nullptr;
  Res (*ctx_set_current)(void* ctx) = nullptr;
  Res (*capture_info)(void* stream, int* status, unsigned long long* id, void** graph,
                      const void** deps, const void** edges, size_t* ndeps) = nullptr;
  Res (*exchange_capture_mode)(int* mode) = nullptr;
  Res (*driver_version)(int* v) = nullptr;
};

namespace {
constexpr unsigned kEventDisableTiming = 0x2;  // CU_EVENT_DISABLE_TIMING
constexpr int kCaptureModeRelaxed = 2;         // CU_STREAM_CAPTURE_MODE_RELAXED
constexpr int kCudaErrorNotReady = 600;        // CUDA_ERROR_NOT_READY
constexpr int kWatchdogPollMs = 10;
}  // namespace

Completion::Completion(Writer* writer, int global_rank, std::string trace_dir)
    : writer_(writer), hang_reporter_(writer, global_rank, std::move(trace_dir)) {
  hang_timeout_s_ = config().hang_timeout_s;
}

bool Completion::load_driver() {
  void* h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return false;
  auto* d = new Driver();
  auto sym = [&](auto& fn, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (void* p = dlsym(h, n)) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
        return;
      }
  };
  sym(d->event_create, {"cuEventCreate"});
  sym(d->event_record, {"cuEventRecord"});
  sym(d->event_query, {"cuEventQuery"});
  sym(d->event_destroy, {"cuEventDestroy_v2", "cuEventDestroy"});
  sym(d->ctx_get_current, {"cuCtxGetCurrent"});
  sym(d->ctx_set_current, {"cuCtxSetCurrent"});
  sym(d->capture_info, {"cuStreamGetCaptureInfo_v3"});
  if (!d->capture_info) {
    // CUDA 13 exports the v3 argument list under the versioned name; older drivers via
    // cuGetProcAddress with an explicit version.
    using GetProc = int (*)(const char*, void**, int, unsigned long long, int*);
    if (auto gp = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"))) {
      void* p = nullptr;
      int status = 0;
      if (gp("cuStreamGetCaptureInfo", &p, 12030, 0, &status) == 0 && p)
        d->capture_info = reinterpret_cast<decltype(d->capture_info)>(p);
    }
  }
  sym(d->exchange_capture_mode, {"cuThreadExchangeStreamCaptureMode"});
  sym(d->driver_version, {"cuDriverGetVersion"});
  if (!d->event_create || !d->event_record || !d->event_query) {
    delete d;
    return false;
  }
  drv_ = d;
  int v = 0;
  if (d->driver_version && d->driver_version(&v) == 0)
    writer_->set_meta("cuda_driver_version", std::to_string(v));
  return true;
}

bool Completion::available() {
  int state = __atomic_load_n(&load_state_, __ATOMIC_ACQUIRE);
  if (state != 0) return state > 0;
  std::lock_guard<std::mutex> g(load_mu_);
  if (load_state_ == 0) {
    bool ok = load_driver();
    if (!ok) writer_->set_meta("completion", "unavailable: no usable libcuda.so.1");
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

namespace {
// Free events kept by each issuing thread (for one Completion and one context), refilled from
// and returned to the shared pool a batch at a time: no lock on the hot path in steady state.
// A thread that exits keeps its few events (not destroyed: the context may be gone by then).
struct ThreadEvents {
  const void* owner;
  void* ctx;
  int n;
  void* ev[32];
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadEvents t_events;
}  // namespace

void Completion::reclaim_released_locked() {
  for (auto& [c, ev] : released_) pool_[c].push_back(ev);
  released_.clear();
}

void* Completion::take_event(void* ctx) {
  ThreadEvents& te = t_events;
  if (te.owner == this && te.ctx == ctx && te.n > 0) return te.ev[--te.n];
  std::lock_guard<std::mutex> g(mu_);
  reclaim_released_locked();
  if (te.owner == this)  // events of another context go back to the pool
    for (int i = 0; i < te.n; i++) pool_[te.ctx].push_back(te.ev[i]);
  te.owner = this;  // a stale owner (a recorder abandoned at fork) keeps its events
  te.ctx = ctx;
  te.n = 0;
  auto& free = pool_[ctx];
  while (te.n < int(sizeof te.ev / sizeof te.ev[0]) && !free.empty()) {
    te.ev[te.n++] = free.back();
    free.pop_back();
  }
  return te.n > 0 ? te.ev[--te.n] : nullptr;
}

bool Completion::track(void* stream, const InFlightOp& op, int64_t enqueued_mono) {
  if (!available()) return false;
  void* ctx = nullptr;
  if (drv_->ctx_get_current) drv_->ctx_get_current(&ctx);
  void* ev = take_event(ctx);
  if (!ev && drv_->event_create(&ev, kEventDisableTiming) != 0) return false;
  if (drv_->event_record(ev, stream) != 0) {
    std::lock_guard<std::mutex> g(mu_);
    pool_[ctx].push_back(ev);
    return false;
  }
  if (stop_.load(std::memory_order_acquire)) return false;
  if (enqueued_mono == 0 && !(bench_off() & kOffClock)) enqueued_mono = mono_ns();
  Entry e{op, stream, ev, ctx, enqueued_mono};
  if (!incoming_.push(e)) {
    std::lock_guard<std::mutex> g(mu_);
    overflow_.push_back(e);
  }
  if (!started_.load(std::memory_order_acquire)) start_watchdog();
  return true;
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
    if (n_in_flight_ == 0) last_progress_ = e.enqueued_mono;
    in_flight_[e.stream].push_back(e);
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
    hang_reporter_.reap_children();
    if (stopping) break;  // after one last poll: ops that finished by exit get their rows
    std::this_thread::sleep_for(std::chrono::milliseconds(kWatchdogPollMs));
  }
}

void Completion::poll_once(int64_t now) {
  void* cur_ctx = nullptr;
  bool ctx_known = false;
  auto is_done = [&](const Entry& e) {
    if (drv_->ctx_set_current && e.ctx && (!ctx_known || cur_ctx != e.ctx)) {
      drv_->ctx_set_current(e.ctx);
      cur_ctx = e.ctx;
      ctx_known = true;
    }
    if (bench_off() & kOffWatchdog) return true;
    // Completed, or failed: an errored stream will not complete later either.
    return drv_->event_query(e.event) != kCudaErrorNotReady;
  };
  std::vector<std::pair<void*, void*>> released;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    std::deque<Entry>& q = it->second;
    // Events of one stream complete in order, so the completed ones are a prefix of q: find
    // its end with O(log n) queries instead of one per op (cuEventQuery costs ~1.3 us of
    // driver time on an H200, and shares the driver with the application's launches).
    size_t done = 0;
    if (is_done(q.back())) {
      done = q.size();
    } else {
      size_t lo = 0, hi = q.size() - 1;  // q[hi] is not done
      while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (is_done(q[mid])) lo = mid + 1;
        else hi = mid;
      }
      done = lo;
    }
    for (size_t i = 0; i < done; i++) {
      const Entry& e = q.front();
      Record r;
      r.kind = RecKind::Completion;
      r.done = {e.op.call_index, now};
      writer_->push(r);
      released.emplace_back(e.ctx, e.event);
      q.pop_front();
      n_in_flight_--;
      last_progress_ = now;
      hang_reported_ = false;
    }
    it = q.empty() ? in_flight_.erase(it) : std::next(it);
  }
  if (!released.empty()) {
    std::lock_guard<std::mutex> g(mu_);
    released_.insert(released_.end(), released.begin(), released.end());
  }
  if (hang_timeout_s_ > 0 && n_in_flight_ > 0 && !hang_reported_ &&
      now - last_progress_ >= int64_t(hang_timeout_s_ * 1e9)) {
    hang_reported_ = true;
    // Oldest in-flight op of each stream: those are what the process is stuck on.
    std::vector<const InFlightOp*> heads;
    for (auto& [stream, q] : in_flight_) heads.push_back(&q.front().op);
    hang_reporter_.report(now, now - last_progress_, std::move(heads), n_in_flight_);
  }
}

}  // namespace lockstep::rec
