#include "completion.h"

#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "record.h"
#include "trace_schema.h"
#include "writer.h"

extern char** environ;

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
    : writer_(writer), global_rank_(global_rank), trace_dir_(std::move(trace_dir)) {
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

void* Completion::take_event(void* ctx) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [c, ev] : released_) pool_[c].push_back(ev);
  released_.clear();
  auto& free = pool_[ctx];
  if (!free.empty()) {
    void* ev = free.back();
    free.pop_back();
    return ev;
  }
  return nullptr;
}

bool Completion::track(void* stream, const InFlightOp& op) {
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
  std::lock_guard<std::mutex> g(mu_);
  if (stop_) return false;
  incoming_.push_back({op, stream, ev, ctx, mono_ns()});
  if (!thread_.joinable()) thread_ = std::thread([this] { watchdog(); });
  return true;
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
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Completion::watchdog() {
  pthread_setname_np(pthread_self(), "lockstep-watch");
  // Querying an event while another thread captures in global mode would invalidate that
  // capture; relaxed mode for this thread prevents it (as PyTorch's watchdog does).
  if (drv_->exchange_capture_mode) {
    int mode = kCaptureModeRelaxed;
    drv_->exchange_capture_mode(&mode);
  }
  // Two buffers swapped back and forth: the hot path's push_back into incoming_ finds
  // capacity already there (no allocation in steady state).
  std::vector<Entry> fresh;
  for (;;) {
    bool stopping;
    fresh.clear();
    {
      std::lock_guard<std::mutex> g(mu_);
      stopping = stop_;
      fresh.swap(incoming_);
    }
    for (Entry& e : fresh) {
      if (n_in_flight_ == 0) last_progress_ = e.enqueued_mono;
      in_flight_[e.stream].push_back(e);
      n_in_flight_++;
    }
    poll_once(mono_ns());
    for (size_t i = 0; i < children_.size();) {
      if (waitpid(children_[i], nullptr, WNOHANG) != 0) children_.erase(children_.begin() + i);
      else i++;
    }
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
    report_hang(now, now - last_progress_);
  }
}

void Completion::report_hang(int64_t now, int64_t stalled_ns) {
  // Oldest in-flight op of each stream: those are what the process is stuck on.
  std::vector<const InFlightOp*> heads;
  for (auto& [stream, q] : in_flight_) heads.push_back(&q.front().op);
  std::sort(heads.begin(), heads.end(),
            [](const InFlightOp* a, const InFlightOp* b) { return a->call_index < b->call_index; });
  char rank[32];
  if (global_rank_ >= 0) snprintf(rank, sizeof rank, "rank %d", global_rank_);
  else snprintf(rank, sizeof rank, "rank ?");
  std::string msg = std::string(rank) + " (pid " + std::to_string(getpid()) +
                    "): no NCCL progress for " + std::to_string(stalled_ns / 1000000000) +
                    "s; in flight:";
  size_t shown = 0;
  for (const InFlightOp* op : heads) {
    if (shown == 8) break;
    char buf[160];
    snprintf(buf, sizeof buf, "%s comm %016llx seq %lld %s count %lld", shown ? "," : "",
             static_cast<unsigned long long>(op->comm_hash), static_cast<long long>(op->seq),
             op_name(op->op), static_cast<long long>(op->count));
    msg += buf;
    shown++;
  }
  if (n_in_flight_ > shown) msg += " (+" + std::to_string(n_in_flight_ - shown) + " more queued)";
  msg += "; trace: " + trace_dir_;
  warn("%s", msg.c_str());
  writer_->add_hang(now, wall_ns(), int(n_in_flight_), "lockstep: " + msg);
  maybe_spawn_analyzer();
}

namespace {
// Lowest global rank among the trace files this process can see (INT32_MAX if none readable).
int lowest_rank_in(const std::string& dir) {
  int lowest = INT32_MAX;
  DIR* d = opendir(dir.c_str());
  if (!d) return lowest;
  size_t suffix = strlen(schema::kFileSuffix);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() <= suffix || name.compare(name.size() - suffix, suffix,
                                              schema::kFileSuffix) != 0)
      continue;
    sqlite3* db = nullptr;
    std::string path = dir + "/" + name;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_busy_timeout(db, 200);
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='global_rank'", -1, &st,
                             nullptr) == SQLITE_OK &&
          sqlite3_step(st) == SQLITE_ROW) {
        int r = sqlite3_column_int(st, 0);
        if (r >= 0 && r < lowest) lowest = r;
      }
      sqlite3_finalize(st);
    }
    sqlite3_close(db);
  }
  closedir(d);
  return lowest;
}
}  // namespace

void Completion::maybe_spawn_analyzer() {
  const char* analyzer = config().analyzer.c_str();
  if (!*analyzer || analyzer_spawned_) return;
  // One diagnosis per job: only the lowest rank that has a trace here runs it.
  if (global_rank_ != 0 && (global_rank_ < 0 || lowest_rank_in(trace_dir_) < global_rank_))
    return;
  analyzer_spawned_ = true;
  std::vector<std::string> env_store;
  for (char** e = environ; e && *e; e++)
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) env_store.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string a0 = analyzer, a1 = "analyze", a2 = trace_dir_;
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);  // the report goes to the job's log (stderr)
  pid_t pid = 0;
  writer_->flush(1000);  // this process's own hang rows first
  int rc = posix_spawn(&pid, analyzer, &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) warn("cannot start the analyzer %s: %s", analyzer, strerror(rc));
  else children_.push_back(pid);
}

}  // namespace lockstep::rec
