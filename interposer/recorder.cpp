// The recorder's core: turns hook events into records (per-communicator sequence numbers,
// group folding, the process-wide call index) and hands them to the writer.
#include "recorder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bench_knobs.h"
#include "call_progress.h"
#include "clock.h"
#include "config.h"
#include "group_fold.h"
#include "log.h"
#include "python_frames.h"
#include "recorder_state.h"
#include "sqlite_section.h"
#include "symbol_lookup.h"

namespace lockstep::rec {
namespace {

constexpr int kNcclSuccess = 0;
constexpr int kNcclInProgress = 7;
bool enqueued_ok(int rc) { return rc == kNcclSuccess || rc == kNcclInProgress; }

std::atomic<Recorder*> g_rec{nullptr};
std::atomic<int> g_state{int(RecorderState::NotStarted)};
bool g_forked_inside_sqlite = false;  // set in a forked child only (stay_untraced_after_fork)
std::mutex g_init_mu;

// ---- per-thread state ----------------------------------------------------------------------
struct PendingPart {
  OpDesc d;
  int64_t issue_mono, issue_wall;
  uint64_t stack_hash;
  CaptureState capture;
};

struct ThreadState {
  int tid = 0;
  int group_depth = 0;
  int64_t group_id = -1;
  std::vector<PendingPart> parts;          // capacity kept: no allocation in steady state
  std::vector<const OpDesc*> scratch;
  std::vector<void*> group_comms;
  std::vector<Record> op_batch;            // a grouped op and its parts, pushed as one run
  static constexpr size_t kSeenStacks = 1024;
  uint64_t seen_stacks[kSeenStacks] = {};  // direct-mapped cache of stacks already submitted
  StackBuf stack;
  ~ThreadState() { progress_release(); }
};

__attribute__((tls_model("initial-exec"))) thread_local ThreadState* t_state = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local bool t_in_hook = false;
pthread_key_t g_tls_key;
std::once_flag g_tls_once;

__attribute__((noinline)) ThreadState& new_thread_state() {
  std::call_once(g_tls_once, [] {
    pthread_key_create(&g_tls_key, [](void* p) { delete static_cast<ThreadState*>(p); });
  });
  t_state = new ThreadState();
  t_state->tid = int(syscall(SYS_gettid));
  t_state->parts.reserve(64);
  pthread_setspecific(g_tls_key, t_state);
  return *t_state;
}
inline ThreadState& thread_state() { return t_state ? *t_state : new_thread_state(); }

// ---- start ---------------------------------------------------------------------------------
Recorder* start_locked() {
  hot_clock_init();
  auto* r = new Recorder();
  r->info = read_process_info();
  r->stack_mode = stacks_init();
  TraceHeader h;
  h.info = r->info;
  using GetVersion = int (*)(int*);
  if (auto gv = reinterpret_cast<GetVersion>(find_real(Library::Nccl, "ncclGetVersion")))
    gv(&h.nccl_version);
  h.nccl_library = module_path_of(find_real(Library::Nccl, "ncclAllReduce"));
  h.stack_mode = stack_mode_name(r->stack_mode);
  h.unwinder = r->stack_mode == StackMode::None ? "" : unwinder_name();
  std::string error;
  r->writer = Writer::open(h, &error);
  if (!r->writer) {
    warn("%s; the program continues untraced", error.c_str());
    delete r;
    return nullptr;
  }
  r->completion = new Completion(r->writer, r->info.global_rank, r->info.trace_dir);
  r->writer->set_meta("hot_clock", hot_clock_uses_tsc() ? "tsc" : "clock_gettime");
  if (unsigned off = config().bench_off) {
    g_bench_off.store(off, std::memory_order_relaxed);
    if (off & kOffPyGuard) lockstep::python_frames_bench_exact_guard(true);
    r->writer->set_meta("bench_off", std::to_string(off));
  }
  r->writer->set_call_counter(&r->next_call);
  r->writer->start();
  return r;
}

Recorder* start_recorder() noexcept;
// The running recorder (started on first use), or null: off, or its writer failed.
inline Recorder* recorder() noexcept {
  if (Recorder* r = g_rec.load(std::memory_order_acquire)) return r->writer->failed() ? nullptr : r;
  return start_recorder();
}

__attribute__((noinline)) Recorder* start_recorder() noexcept {
  if (g_state.load(std::memory_order_acquire) != int(RecorderState::NotStarted)) return nullptr;
  std::lock_guard<std::mutex> g(g_init_mu);
  if (g_state.load() != int(RecorderState::NotStarted)) return g_rec.load();
  Recorder* r = nullptr;
  if (g_forked_inside_sqlite) {  // said only by a child that calls NCCL
    warn("this process was forked while the recorder's writer was inside SQLite for over %d ms; it "
         "runs untraced",
         kForkWaitMs);
    g_state.store(int(RecorderState::Off), std::memory_order_release);
    return nullptr;
  }
  try {
    r = start_locked();
  } catch (...) {
    warn("internal error while starting; the program continues untraced");
  }
  g_rec.store(r, std::memory_order_release);
  g_state.store(int(r ? RecorderState::Active : RecorderState::Off), std::memory_order_release);
  if (r) install_lifecycle_handlers();
  return r;
}

uint64_t stack_for(Recorder* r, ThreadState& ts, unsigned off) {
  if (r->stack_mode == StackMode::None || (off & kOffStack)) return 0;
  uint64_t h = capture_stack(r->stack_mode, ts.stack, off);
  const uint64_t t0 = (off & kProfile) ? bench_ticks() : 0;
  uint64_t& slot = ts.seen_stacks[h & (ThreadState::kSeenStacks - 1)];
  if (slot != h) {
    if (r->writer->submit_stack(h, ts.stack.pcs, ts.stack.n, ts.stack.py, ts.stack.npy)) slot = h;
    if (off & kProfile) bench_count(kCntStackSubmits, 1);
  }
  if (off & kProfile) {
    bench_count(kCntStackSubmitTicks, bench_ticks() - t0);
    bench_count(kCntStacks, 1);
  }
  return h;
}

uint64_t hash_bytes(const void* p, size_t n, uint64_t seed = 0) {
  uint64_t h = XXH3_64bits_withSeed(p, n, seed);
  return h ? h : 1;
}

CommState* new_untracked_comm(Recorder* r, void* handle, int64_t call_index) {
  auto* c = new CommState();
  c->id = r->next_comm_id.fetch_add(1);
  struct { int pid; void* h; } key{r->info.pid, handle};
  c->hash = hash_bytes(&key, sizeof key, 0x756e6b6e6f776e);  // "unknown"
  c->nranks = -1;
  c->rank = -1;
  using Query = int (*)(void*, int*);
  if (handle) {
    if (auto f = reinterpret_cast<Query>(find_real(Library::Nccl, "ncclCommCount"))) f(handle, &c->nranks);
    if (auto f = reinterpret_cast<Query>(find_real(Library::Nccl, "ncclCommUserRank"))) f(handle, &c->rank);
  }
  Record rec;
  rec.kind = RecKind::CommInit;
  rec.comm = {};
  rec.comm.id = c->id;
  rec.comm.hash = c->hash;
  rec.comm.handle = reinterpret_cast<uint64_t>(handle);
  rec.comm.parent_id = -1;
  rec.comm.init_call = call_index;
  rec.comm.init_mono = mono_ns();
  rec.comm.nranks = c->nranks;
  rec.comm.rank = c->rank;
  rec.comm.device = -1;
  rec.comm.before_tracing = handle != nullptr;
  snprintf(rec.comm.name, sizeof rec.comm.name, "%s", handle ? "" : "(null communicator)");
  r->writer->push(rec);
  return c;
}

// The state of an op's communicator. One we never saw created (created before tracing
// started, e.g. in a parent process) is registered on the spot, with an identity local to this
// process; a NULL communicator (NCCL rejects the call) gets one shared placeholder.
CommState* lookup_comm(Recorder* r, void* handle, int64_t call_index) {
  if (CommState* c = r->comms.find(handle)) return c;
  if (!handle) {
    if (CommState* c = r->null_comm.load(std::memory_order_acquire)) return c;
    std::lock_guard<std::mutex> g(r->graph_mu);
    if (CommState* c = r->null_comm.load()) return c;
    CommState* c = new_untracked_comm(r, nullptr, call_index);
    r->null_comm.store(c, std::memory_order_release);
    return c;
  }
  CommState* c = new_untracked_comm(r, handle, call_index);
  r->comms.insert(handle, c);
  return c;
}

OpRec base_op(const OpDesc& d, int tid) {
  OpRec o{};
  o.count = int64_t(d.count);
  o.group_id = -1;
  o.stream = reinterpret_cast<uint64_t>(d.stream);
  o.origin_call = -1;
  o.tid = tid;
  o.root = d.root;
  o.peer = d.peer;
  o.redop = d.redop;
  o.dtype = int8_t(d.dtype >= 0 && d.dtype < 12 ? d.dtype : -1);
  o.op = d.kind;
  return o;
}

void defer_completion(Recorder* r, void* handle, void* stream, const InFlightOp& op) {
  void* ctx = r->completion->current_context();
  std::lock_guard<std::mutex> g(r->deferred_mu);
  r->deferred[handle].push_back({stream, ctx, op});
  r->n_deferred.fetch_add(1, std::memory_order_relaxed);
}

// The ops of communicator `handle` waiting for their completion event: record the events now
// (enqueued), or drop them (the communicator failed or is gone: no completion is ever seen).
void release_deferred(Recorder* r, void* handle, bool enqueued) {
  if (r->n_deferred.load(std::memory_order_relaxed) == 0) return;  // the common case
  std::vector<DeferredTrack> ops;
  {
    std::lock_guard<std::mutex> g(r->deferred_mu);
    auto it = r->deferred.find(handle);
    if (it == r->deferred.end()) return;
    ops.swap(it->second);
    r->deferred.erase(it);
    r->n_deferred.fetch_sub(int64_t(ops.size()), std::memory_order_relaxed);
  }
  if (enqueued)
    for (const DeferredTrack& d : ops) r->completion->track_in(d.ctx, d.stream, d.op);
}

// Decides state/seq for a logical op, pushes it, and starts completion tracking. `batch`: the
// op's part records after a free first slot; the op goes there and all are pushed as one run.
void emit_op(Recorder* r, CommState* c, void* handle, OpRec& o, int rc, bool simulate,
             std::vector<Record>* batch = nullptr) {
  o.rc = rc;
  if (simulate) {
    o.state = OpState::Simulated;
  } else if (!enqueued_ok(rc)) {
    o.state = OpState::Failed;
  } else if (o.capture_id || o.graph_id) {
    o.state = OpState::Captured;
  } else {
    o.state = OpState::Enqueued;
    o.seq = c->next_seq.fetch_add(1, std::memory_order_relaxed);
  }
  const unsigned off = bench_off();
  Record rec;
  rec.kind = RecKind::Op;
  rec.op = o;
  if (!(off & kOffQueue)) {
    const uint64_t p0 = (off & kProfile) ? bench_ticks() : 0;
    if (batch && batch->size() > 1) {
      (*batch)[0] = rec;
      r->writer->push_op(batch->data(), batch->size());
    } else {
      r->writer->push(rec);
    }
    if (off & kProfile) bench_count(kCntRowPushTicks, bench_ticks() - p0);
  }
  if (o.state == OpState::Captured) {
    std::lock_guard<std::mutex> g(r->graph_mu);
    if (o.capture_id) r->by_capture[o.capture_id].push_back({o, c});
    else r->by_graph[o.graph_id].push_back({o, c});
  }
  if (o.state != OpState::Enqueued || (off & kOffEvent)) return;
  const uint64_t t0 = (off & kProfile) ? bench_ticks() : 0;
  InFlightOp in_flight{o.call_index, c->hash, o.seq, o.count, o.op};
  if (rc == kNcclSuccess) {
    r->completion->track_or_defer(reinterpret_cast<void*>(o.stream), in_flight, o.return_mono);
  } else {
    // ncclInProgress (nonblocking communicator): NCCL may still be putting the kernel on the
    // stream in the background, and its docs ("Nonblocking group operation") make the caller
    // wait for ncclCommGetAsyncError to report ncclSuccess before related CUDA calls (e.g.
    // cudaStreamSynchronize). An event recorded now could land before
    // the kernel and report a completion for work that has not even started (hiding a hang);
    // so the event is recorded at that point instead (comm_async_state), as the caller's own
    // stream work would be: then it is ordered after the kernel.
    defer_completion(r, handle, reinterpret_cast<void*>(o.stream), in_flight);
  }
  if (off & kProfile) bench_count(kCntEventTicks, bench_ticks() - t0);
}

}  // namespace

// ---- guard / state -------------------------------------------------------------------------
HookGuard::HookGuard() noexcept : nested_(t_in_hook) { t_in_hook = true; }
HookGuard::~HookGuard() noexcept {
  if (!nested_) t_in_hook = false;
}

bool in_nccl_hook() noexcept { return t_in_hook; }

Recorder* current_recorder() noexcept { return g_rec.load(std::memory_order_acquire); }
bool recorder_start() noexcept { return recorder() != nullptr; }
bool recorder_active() noexcept {
  return g_state.load(std::memory_order_relaxed) == int(RecorderState::Active);
}

void reset_after_fork() noexcept {
  // The parent's writer and watchdog threads do not exist here, and its SQLite connection must
  // not be used: abandon all of it (not freed: other structures may still point into it).
  new (&g_init_mu) std::mutex();
  g_rec.store(nullptr);
  g_state.store(int(RecorderState::NotStarted));
  t_state = nullptr;  // the forking thread's group state belonged to the parent
}

void stay_untraced_after_fork() noexcept { g_forked_inside_sqlite = true; }

void shutdown_recorder(const char* reason) noexcept {
  Recorder* r = g_rec.load();
  if (!r) return;
  g_state.store(int(RecorderState::Off));
  g_rec.store(nullptr);
  try {
    r->completion->stop();
    if (r->stack_mode == StackMode::Python)  // which guard the Python frames were read under
      r->writer->set_meta("python_guard", lockstep::python_frames_guard_status());
    if (r->stack_mode != StackMode::None) {  // how often the memoized native frames were used
      NativeMemoStats m = native_memo_stats();
      r->writer->set_meta("native_stack_memo",
                          "unwound=" + std::to_string(m.unwound) + " sampled=" +
                              std::to_string(m.sampled) + " disagreed=" + std::to_string(m.disagreed) +
                              " unverifiable=" + std::to_string(m.unverifiable));
    }
    r->writer->stop(reason);
  } catch (...) {
  }
}

void flush_trace() noexcept {
  if (Recorder* r = recorder()) r->writer->flush(2000);
}

// ---- ops -----------------------------------------------------------------------------------
OpToken op_begin(const OpDesc& d) noexcept {
  OpToken t;
  Recorder* r = recorder();
  if (!r) return t;
  const unsigned off = bench_off();
  if (off & kOffRecorder) return t;
  const uint64_t t0 = (off & kProfile) ? bench_ticks() : 0;
  ThreadState& ts = thread_state();
  t.active = true;
  t.desc = d;
  t.grouped = ts.group_depth > 0;
  // A group's row carries the issue time, stack and capture state of its first call on each
  // communicator: a later call of the group on the same stream as the group's previous call
  // takes that call's capture state and needs no clock or stack (paid once per group).
  const PendingPart* prev = t.grouped && !ts.parts.empty() ? &ts.parts.back() : nullptr;
  // The thread's previous op had no event of the caller's: its own now. A later call of a
  // group needs none (the group's first call did it; parts defer nothing before group_end).
  if (!prev) r->completion->resolve_deferred();
  if (!(off & kOffClock) && !prev) {
    t.issue_mono = hot_mono_ns();
    t.issue_wall = wall_from_mono(t.issue_mono);
  } else if (prev) {
    t.issue_mono = prev->issue_mono;
    t.issue_wall = prev->issue_wall;
  }
  if (!t.grouped) {
    progress_begin(r->next_call);  // until op_end pushed the op (call_progress.h)
    t.call_index = r->next_call.fetch_add(1, std::memory_order_acq_rel);
  }
  if (!prev) t.stack_hash = stack_for(r, ts, off);
  else t.stack_hash = prev->stack_hash;
  if (prev && prev->d.stream == d.stream) {
    t.capture = prev->capture;
  } else if (!(off & kOffCapture)) {
    const uint64_t c0 = (off & kProfile) ? bench_ticks() : 0;
    t.capture = r->completion->capture_state(d.stream);
    if (off & kProfile) bench_count(kCntCaptureTicks, bench_ticks() - c0);
  }
  if (off & kProfile) {
    bench_count(kCntOpBeginTicks, bench_ticks() - t0);
    bench_count(kCntOps, 1);
  }
  return t;
}

void op_end(OpToken& t, int rc) noexcept {
  if (!t.active) return;
  Recorder* r = recorder();
  if (!r) return;
  const bool profile = bench_off() & kProfile;
  const uint64_t t0 = profile ? bench_ticks() : 0;
  ThreadState& ts = thread_state();
  if (t.grouped && enqueued_ok(rc)) {
    ts.parts.push_back({t.desc, t.issue_mono, t.issue_wall, t.stack_hash, t.capture});
    return;
  }
  // Ungrouped, or a grouped call that failed on its own (it enqueued nothing: recorded now,
  // outside the sequence).
  if (t.grouped) {
    progress_begin(r->next_call);
    t.call_index = r->next_call.fetch_add(1, std::memory_order_acq_rel);
  }
  CommState* c = lookup_comm(r, t.desc.comm, t.call_index);
  OpRec o = base_op(t.desc, ts.tid);
  o.call_index = t.call_index;
  o.comm_id = c->id;
  o.group_id = t.grouped ? ts.group_id : -1;
  o.issue_mono = t.issue_mono;
  o.issue_wall = t.issue_wall;
  o.return_mono = (bench_off() & kOffClock) ? 0 : hot_mono_ns();
  o.stack_hash = t.stack_hash;
  if (t.capture.capturing) {
    o.capture_id = t.capture.id;
    o.graph_id = t.capture.graph;
  }
  emit_op(r, c, t.desc.comm, o, rc, false);
  progress_end();
  if (profile) bench_count(kCntOpEndTicks, bench_ticks() - t0);
}

void group_start() noexcept {
  Recorder* r = recorder();
  if (!r) return;
  ThreadState& ts = thread_state();
  if (ts.group_depth++ == 0) {
    ts.parts.clear();
    ts.group_id = r->next_group_id.fetch_add(1, std::memory_order_relaxed);
  }
}

void group_end(int rc, bool simulate) noexcept {
  Recorder* r = recorder();
  if (!r) return;
  ThreadState& ts = thread_state();
  if (ts.group_depth == 0) return;  // unbalanced GroupEnd: NCCL reports it; nothing to fold
  if (--ts.group_depth > 0) return;
  int64_t now = hot_mono_ns();
  // One row per communicator, in the order each was first used in the group.
  ts.group_comms.clear();
  for (const PendingPart& p : ts.parts)
    if (std::find(ts.group_comms.begin(), ts.group_comms.end(), p.d.comm) == ts.group_comms.end())
      ts.group_comms.push_back(p.d.comm);
  progress_begin(r->next_call);  // until the group's ops are pushed (call_progress.h)
  for (void* comm : ts.group_comms) {
    ts.scratch.clear();
    const PendingPart* first = nullptr;
    for (const PendingPart& p : ts.parts)
      if (p.d.comm == comm) {
        if (!first) first = &p;
        ts.scratch.push_back(&p.d);
      }
    int64_t call = r->next_call.fetch_add(1, std::memory_order_acq_rel);
    CommState* c = lookup_comm(r, comm, call);
    Folded f = fold_parts(ts.scratch.data(), ts.scratch.size(), c->nranks, c->rank);
    OpRec o = base_op(first->d, ts.tid);
    o.op = f.op;
    o.dtype = int8_t(f.dtype >= 0 && f.dtype < 12 ? f.dtype : -1);
    o.count = f.count;
    o.root = f.root;
    o.peer = f.peer;
    o.redop = f.redop;
    o.call_index = call;
    o.comm_id = c->id;
    o.group_id = ts.group_id;
    o.issue_mono = first->issue_mono;
    o.issue_wall = first->issue_wall;
    o.return_mono = now;
    o.stack_hash = first->stack_hash;
    if (first->capture.capturing) {
      o.capture_id = first->capture.id;
      o.graph_id = first->capture.graph;
    }
    o.has_parts = f.list_parts;
    ts.op_batch.resize(1);  // slot 0: the op (emit_op)
    if (f.list_parts) {
      int32_t part = 0;
      for (const OpDesc* d : ts.scratch) {
        Record rec;
        rec.kind = RecKind::Part;
        rec.part = {call,    int64_t(d->count), part++, d->root, d->peer, d->redop,
                    int8_t(d->dtype >= 0 && d->dtype < 12 ? d->dtype : -1), d->kind,
                    int32_t(ts.scratch.size())};
        ts.op_batch.push_back(rec);
      }
    }
    emit_op(r, c, comm, o, rc, simulate, &ts.op_batch);
  }
  progress_end();
  ts.parts.clear();
  ts.group_id = -1;
}

// ---- communicators -------------------------------------------------------------------------
CallStart call_start(bool may_start, bool event_record) noexcept {
  CallStart c;
  Recorder* r = may_start ? recorder() : recorder_active() ? current_recorder() : nullptr;
  if (!r) return c;
  if (!event_record) r->completion->resolve_deferred();  // before this call's effects
  c.active = true;
  c.call_index = r->next_call.fetch_add(1, std::memory_order_relaxed);
  c.mono = hot_mono_ns();
  return c;
}

void take_split_counter(CallStart& c, void* parent) noexcept {
  Recorder* r = recorder();
  if (!r || !c.active) return;
  CommState* p = lookup_comm(r, parent, c.call_index);
  c.split_counter = uint64_t(p->split_counter.fetch_add(1));
}

void comm_created(const CallStart& cs, const CommOrigin& origin, void* newcomm, int nranks,
                  int rank, const void* config, int rc) noexcept {
  Recorder* r = recorder();
  if (!r || !cs.active) return;
  Record rec;
  rec.kind = RecKind::CommInit;
  rec.comm = {};
  CommInitRec& ci = rec.comm;
  ci.parent_id = -1;
  ci.device = -1;
  ci.init_call = cs.call_index;
  ci.init_mono = cs.mono;
  ci.rc = rc;
  ci.handle = reinterpret_cast<uint64_t>(newcomm);
  switch (origin.kind) {
    case CommOrigin::UniqueIds:
      ci.hash = hash_bytes(origin.ids, size_t(origin.n_ids) * 128);  // NCCL_UNIQUE_ID_BYTES
      break;
    case CommOrigin::InitAll: {
      // All members live in this process: identity from this process and the call.
      struct { int pid; int call; } k{r->info.pid, origin.initall_index};
      ci.hash = hash_bytes(&k, sizeof k, 0x696e6974616c6c);
      break;
    }
    case CommOrigin::Split:
    case CommOrigin::Shrink: {
      CommState* p = lookup_comm(r, origin.parent, cs.call_index);
      ci.parent_id = p->id;
      int64_t color = origin.color;
      if (origin.kind == CommOrigin::Shrink) {
        // Every survivor passes the same exclusion list (order may differ): hash it sorted.
        std::vector<int> ex(origin.excluded, origin.excluded + std::max(origin.n_excluded, 0));
        std::sort(ex.begin(), ex.end());
        color = int64_t(hash_bytes(ex.data(), ex.size() * sizeof(int), 0x736872696e6b));
      } else {
        ci.has_split = true;
        ci.color = origin.color;
        ci.key = origin.key;
      }
      struct { uint64_t parent; uint64_t counter; int64_t color; } k{p->hash, cs.split_counter, color};
      ci.hash = hash_bytes(&k, sizeof k);
      break;
    }
  }
  ci.nranks = nranks;
  ci.rank = rank;
  bool alive = newcomm && enqueued_ok(rc);
  if (alive && rc == kNcclSuccess) {
    // Facts NCCL knows better than the arguments (split/shrink sizes, the device).
    using Query = int (*)(void*, int*);
    int v = 0;
    if (nranks < 0)
      if (auto f = reinterpret_cast<Query>(find_real(Library::Nccl, "ncclCommCount")); f && f(newcomm, &v) == 0) ci.nranks = v;
    if (rank < 0)
      if (auto f = reinterpret_cast<Query>(find_real(Library::Nccl, "ncclCommUserRank")); f && f(newcomm, &v) == 0) ci.rank = v;
    if (auto f = reinterpret_cast<Query>(find_real(Library::Nccl, "ncclCommCuDevice")); f && f(newcomm, &v) == 0)
      ci.device = v;
  }
  if (config) {
    // ncclConfig_t: size, magic, version, then fields; commName is at a fixed offset since 2.19.
    struct ConfigHead {
      size_t size;
      unsigned magic, version;
      int blocking, cga, minc, maxc;
      const char* netName;
      int splitShare, trafficClass;
      const char* commName;
    };
    auto* cfg = static_cast<const ConfigHead*>(config);
    if (cfg->magic == 0xcafebeef && cfg->size >= sizeof(ConfigHead) && cfg->commName)
      snprintf(ci.name, sizeof ci.name, "%s", cfg->commName);
  }
  ci.id = r->next_comm_id.fetch_add(1);
  if (alive) {
    auto* c = new CommState();
    c->id = ci.id;
    c->hash = ci.hash;
    c->nranks = ci.nranks;
    c->rank = ci.rank;
    r->comms.insert(newcomm, c);
  }
  r->writer->push(rec);
}

void comm_ended(const CallStart& cs, void* comm, CommEnd kind, int rc) noexcept {
  Recorder* r = recorder();
  if (!r || !cs.active) return;
  CommState* c = r->comms.find(comm);
  if (c) {
    Record rec;
    rec.kind = RecKind::CommEnd;
    rec.end = {c->id, cs.call_index, cs.mono, kind};
    r->writer->push(rec);
    if (kind == CommEnd::Destroy || kind == CommEnd::Abort) r->comms.retire(comm);
  }
  // Ops never confirmed enqueued die with the handle (which may be reused for a new comm).
  if (kind == CommEnd::Destroy || kind == CommEnd::Abort) release_deferred(r, comm, false);
  if (rc != kNcclSuccess) {
    static const char* const names[] = {"ncclCommDestroy", "ncclCommAbort", "ncclCommFinalize",
                                        "ncclCommRevoke"};
    api_call(cs, names[int(kind)], comm, rc, nullptr);
  }
}

void comm_async_state(void* comm, int rc, int async_err) noexcept {
  Recorder* r = current_recorder();
  if (!r) return;
  // A thread polling for its ops (nccl-tests: ncclCommGetAsyncError + cudaStreamQuery) gives
  // its deferred ops their own events here rather than at its next NCCL call.
  r->completion->resolve_deferred();
  if (rc != kNcclSuccess || async_err == kNcclInProgress) return;
  release_deferred(r, comm, async_err == kNcclSuccess);
}

void api_call(const CallStart& cs, const char* name, void* comm, int rc,
              const char* detail) noexcept {
  Recorder* r = recorder();
  if (!r || !cs.active) return;
  Record rec;
  rec.kind = RecKind::Api;
  rec.api = {};
  rec.api.call_index = cs.call_index;
  CommState* c = comm ? r->comms.find(comm) : nullptr;
  rec.api.comm_id = c ? c->id : -1;
  rec.api.mono = cs.mono;
  rec.api.name = name;
  rec.api.rc = rc;
  if (detail) snprintf(rec.api.detail, sizeof rec.api.detail, "%s", detail);
  r->writer->push(rec);
}

// ---- CUDA graphs and waits -----------------------------------------------------------------
uint64_t capture_id_of(void* stream) noexcept {
  Recorder* r = current_recorder();
  if (!r || !recorder_active()) return 0;
  CaptureState cs = r->completion->capture_state(stream);
  return cs.capturing ? cs.id : 0;
}

void graph_captured(uint64_t capture_id, void* graph) noexcept {
  Recorder* r = current_recorder();
  if (!r || !capture_id || !graph) return;
  std::lock_guard<std::mutex> g(r->graph_mu);
  auto it = r->by_capture.find(capture_id);
  if (it == r->by_capture.end()) return;
  auto& dst = r->by_graph[reinterpret_cast<uint64_t>(graph)];
  dst.insert(dst.end(), it->second.begin(), it->second.end());
  r->by_capture.erase(it);
}

void graph_instantiated(void* exec, void* graph) noexcept {
  Recorder* r = current_recorder();
  if (!r || !exec) return;
  uint64_t key = reinterpret_cast<uint64_t>(exec);
  std::lock_guard<std::mutex> g(r->graph_mu);
  auto it = r->by_graph.find(reinterpret_cast<uint64_t>(graph));
  if (it == r->by_graph.end() || it->second.empty()) {
    r->execs.erase(key);  // no NCCL op in it (the handle may be a reused one: forget the old)
    return;
  }
  r->execs[key] = {reinterpret_cast<uint64_t>(graph),
                   std::make_shared<const std::vector<CapturedOp>>(it->second)};
}

void graph_destroyed(void* graph) noexcept {
  Recorder* r = current_recorder();
  if (!r || !graph) return;
  std::lock_guard<std::mutex> g(r->graph_mu);
  r->by_graph.erase(reinterpret_cast<uint64_t>(graph));
}

void graph_exec_destroyed(void* exec) noexcept {
  Recorder* r = current_recorder();
  if (!r || !exec) return;
  std::lock_guard<std::mutex> g(r->graph_mu);
  r->execs.erase(reinterpret_cast<uint64_t>(exec));
}

void graph_launched(const CallStart& cs, void* exec, void* stream, int rc) noexcept {
  Recorder* r = current_recorder();
  if (!r || !cs.active || rc != 0) return;
  std::shared_ptr<const std::vector<CapturedOp>> ops;
  uint64_t graph = 0;
  {
    std::lock_guard<std::mutex> g(r->graph_mu);
    auto e = r->execs.find(reinterpret_cast<uint64_t>(exec));
    if (e == r->execs.end()) return;
    graph = e->second.graph;
    ops = e->second.ops;
  }
  Record rec;
  rec.kind = RecKind::GraphLaunch;
  rec.launch = {cs.call_index, reinterpret_cast<uint64_t>(exec), graph,
                reinterpret_cast<uint64_t>(stream), cs.mono};
  r->writer->push(rec);
  // One executed op per captured op, in capture order, each with a fresh sequence number:
  // the ops table then shows what ran, not just what was called.
  ThreadState& ts = thread_state();
  progress_begin(r->next_call);  // until the launch's ops are pushed (call_progress.h)
  for (const CapturedOp& c : *ops) {
    OpRec o = c.rec;
    o.call_index = r->next_call.fetch_add(1, std::memory_order_acq_rel);
    o.origin_call = c.rec.call_index;
    o.graph_exec = reinterpret_cast<uint64_t>(exec);
    o.stream = reinterpret_cast<uint64_t>(stream);
    o.tid = ts.tid;
    o.issue_mono = cs.mono;
    o.issue_wall = wall_ns();
    o.return_mono = mono_ns();
    o.capture_id = 0;
    o.seq = c.comm->next_seq.fetch_add(1, std::memory_order_relaxed);
    o.state = OpState::GraphLaunched;
    o.rc = 0;
    Record orec;
    orec.kind = RecKind::Op;
    orec.op = o;
    r->writer->push(orec);
    r->completion->track(stream, {o.call_index, c.comm->hash, o.seq, o.count, o.op});
  }
  progress_end();
}

void synchronized(void* stream, bool device) noexcept {
  Recorder* r = current_recorder();
  if (!r || (bench_off() & kOffEvent)) return;
  r->completion->synced(stream, device);
}

void event_recorded(void* event, void* stream) noexcept {
  Recorder* r = current_recorder();
  if (r && !(bench_off() & kOffEvent)) r->completion->event_recorded(event, stream);
}

void resolve_deferred_completions() noexcept {
  if (Recorder* r = current_recorder()) r->completion->resolve_deferred();
}

void event_reused(void* event) noexcept {
  if (Recorder* r = current_recorder()) r->completion->event_reused(event);
}

void wait_done(const CallStart& cs, WaitKind kind, void* stream, void* event) noexcept {
  Recorder* r = current_recorder();
  if (!r || !cs.active) return;
  // cudaEventRecord / cudaStreamWaitEvent only enqueue (they return in ~100 ns, PyTorch makes
  // several per collective): their row ends where it begins, one clock read instead of two.
  bool enqueue_only = kind == WaitKind::EventRecord || kind == WaitKind::StreamWaitEvent;
  Record rec;
  rec.kind = RecKind::Wait;
  rec.wait = {cs.call_index, reinterpret_cast<uint64_t>(stream), reinterpret_cast<uint64_t>(event),
              cs.mono, enqueue_only ? cs.mono : hot_mono_ns(), thread_state().tid, kind};
  if (!(bench_off() & kOffWaitRow)) r->writer->push(rec);
}

}  // namespace lockstep::rec
