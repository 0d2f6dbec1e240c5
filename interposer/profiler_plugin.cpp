// NCCL's profiler plugin interface v5, as NCCL 2.28.9 drives it (src/plugin/profiler.cc):
//   init(ctx, commHash, &mask, commName, nNodes, nranks, rank)   once per communicator
//   GroupApi start ........................................... first call of an outermost group
//     CollApi / P2pApi start+stop ............................ each API call (calling thread)
//     [launch] Group start, Coll / P2p start (seqNumber, peer), stops   (at the kernel launch)
//   GroupApi stop ............................................ outermost ncclGroupEnd returns
//   finalize(ctx)                                              commFree
// Event handles are opaque to NCCL: ours are tagged integers (no memory behind them), so a handle
// NCCL keeps (a graph's persistent plan, a late host callback) can never point to freed memory.
#include "profiler_plugin.h"
#include "call_progress.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bounded_queue.h"
#include "clock.h"
#include "group_fold.h"
#include "meta_keys.h"
#include "nccl_profiler/profiler_v5.h"
#include "profiler_schema.h"
#include "recorder.h"
#include "recorder_state.h"
#include "stack_capture.h"
#include "symbol_lookup.h"
#include "trace_file.h"

extern "C" ncclProfiler_v5_t ncclProfiler_v5;

namespace lockstep::rec {
namespace {

// API events carry what the caller passed (count and datatype as given, stream, graph capture);
// task events add the peer of a send/recv and NCCL's per-type sequence number.
constexpr int kActivationMask =
    ncclProfileGroupApi | ncclProfileCollApi | ncclProfileP2pApi | ncclProfileColl | ncclProfileP2p;

// ---- rows for the writer thread ------------------------------------------------------------
struct ProfRow {
  enum Kind : uint8_t { CommInit, CommLinked, CommFinalize, Op } kind;
  int64_t id;          // profiler_comms.id, or profiler_ops.id
  int64_t comm;        // Op: profiler_comms.id; CommLinked: comms.id
  int64_t mono;
  uint64_t nccl_hash;  // CommInit
  int64_t count;
  int64_t nccl_seq;    // -1 = NULL
  int64_t call_index;  // -1 = NULL
  uint64_t stream;
  int32_t nranks, rank, nnodes;  // CommInit
  int32_t root, peer, tid;       // -1 = NULL
  int8_t op;                     // OpKind, -1 = not an op lockstep names
  int8_t dtype;                  // -1 = NULL
  bool captured, seen_both;
  char text[40];                 // CommInit: commName; Op: NCCL's func name
};

constexpr size_t kRowQueue = 1 << 14;
std::atomic<BoundedQueue<ProfRow>*> g_rows{nullptr};
std::atomic<uint64_t> g_rows_dropped{0};
std::atomic<int64_t> g_next_ctx{1}, g_next_op{1};
std::mutex g_setup_mu;

void push_row(const ProfRow& row) {
  BoundedQueue<ProfRow>* q = g_rows.load(std::memory_order_acquire);
  if (!q || !q->push(row)) g_rows_dropped.fetch_add(1, std::memory_order_relaxed);
}

// ---- communicators -------------------------------------------------------------------------
struct Context {
  int64_t id = 0;
  uint64_t nccl_hash = 0;
  int nranks = 0, rank = 0, nnodes = 0;
  char name[40] = {};
  int64_t init_mono = 0;
  std::mutex mu;
  std::atomic<CommState*> comm{nullptr};  // the comms row for ops only the plugin saw
};

// The comms row (and CommState: per-communicator seq) for the plugin's own ops, made on first use.
// Identity: NCCL's commHash, which every member computes alike (from the ncclUniqueId, or the
// parent's hash and the split color), so members recorded by the plugin align with each other.
CommState* comm_of(Recorder* r, Context* ctx) {
  if (CommState* c = ctx->comm.load(std::memory_order_acquire)) return c;
  std::lock_guard<std::mutex> g(ctx->mu);
  if (CommState* c = ctx->comm.load()) return c;
  auto* c = new CommState();  // never freed, as the interposer's (comm_table.h)
  c->id = r->next_comm_id.fetch_add(1);
  c->hash = ctx->nccl_hash ? ctx->nccl_hash : 1;
  c->nranks = ctx->nranks;
  c->rank = ctx->rank;
  Record rec;
  rec.kind = RecKind::CommInit;
  rec.comm = {};
  rec.comm.id = c->id;
  rec.comm.hash = c->hash;
  rec.comm.handle = 0;  // the plugin never sees the ncclComm_t
  rec.comm.parent_id = -1;
  rec.comm.init_call = r->next_call.fetch_add(1, std::memory_order_relaxed);
  rec.comm.init_mono = ctx->init_mono;
  rec.comm.nranks = ctx->nranks;
  rec.comm.rank = ctx->rank;
  rec.comm.device = -1;
  snprintf(rec.comm.name, sizeof rec.comm.name, "%s", ctx->name);
  r->writer->push(rec);
  ProfRow row{};
  row.kind = ProfRow::CommLinked;
  row.id = ctx->id;
  row.comm = c->id;
  push_row(row);
  ctx->comm.store(c, std::memory_order_release);
  return c;
}

// ---- event handles -------------------------------------------------------------------------
// bit 63: ours; bits 56..62: kind; bits 0..55: serial of the API call (its slot below).
constexpr uintptr_t kTag = uintptr_t(1) << 63;
constexpr uintptr_t kSerialMask = (uintptr_t(1) << 56) - 1;
enum HandleKind : uintptr_t { kGroupApiHandle = 1, kCollApiHandle = 2, kP2pApiHandle = 3 };

void* make_handle(HandleKind k, uint64_t serial) {
  return reinterpret_cast<void*>(kTag | uintptr_t(k) << 56 | (serial & kSerialMask));
}
bool decode(const void* h, HandleKind* k, uint64_t* serial) {
  auto v = reinterpret_cast<uintptr_t>(h);
  if (!(v & kTag)) return false;
  *k = HandleKind((v >> 56) & 0x7f);
  *serial = v & kSerialMask;
  return true;
}

// What task events (possibly on another thread) add to an API call, until its group ends.
struct ApiSlot {
  std::atomic<uint64_t> serial{0};
  std::atomic<int32_t> peer{-1};
  std::atomic<int64_t> nccl_seq{-1};
  std::atomic<int32_t> launched_tid{0};  // thread that saw its task event
};
constexpr size_t kSlots = 1 << 12;  // calls in flight between API event and group end
ApiSlot g_slots[kSlots];
std::atomic<uint64_t> g_next_serial{1};

ApiSlot* slot_for(const void* handle, HandleKind want) {
  HandleKind k;
  uint64_t serial;
  if (!decode(handle, &k, &serial) || k != want) return nullptr;
  ApiSlot& s = g_slots[serial & (kSlots - 1)];
  return (s.serial.load(std::memory_order_acquire) & kSerialMask) == serial ? &s : nullptr;
}

// ---- per-thread group ----------------------------------------------------------------------
struct PendingCall {
  Context* ctx;
  uint64_t serial;
  int op;  // OpKind, -1 unknown
  int dtype;
  size_t count;
  int root;
  void* stream;
  bool captured, seen_both;
  int64_t mono, wall;
  uint64_t stack_hash;
  char func[24];
};

struct ThreadGroup {
  int tid = 0;
  bool open = false;
  int depth = 0;  // groupApi.groupDepth: 1 = NCCL's implicit group, > 1 = a user group
  std::vector<PendingCall> calls;
  std::unique_ptr<StackBuf> stack;
  std::vector<const OpDesc*> parts;
  std::vector<OpDesc> descs;
  uint64_t seen_stacks[256] = {};  // stacks already handed to the writer (direct-mapped)
};
constexpr size_t kMaxGroupCalls = 1 << 16;

// A pointer in TLS, the state on the heap: liblockstep's static TLS must stay within what glibc
// reserves for a library dlopened later (NCCL dlopens its plugin), or dlopen fails.
__attribute__((tls_model("initial-exec"))) thread_local ThreadGroup* t_group = nullptr;
pthread_key_t g_group_key;
std::once_flag g_group_key_once;

ThreadGroup& thread_group() {
  if (!t_group) {
    std::call_once(g_group_key_once, [] {
      pthread_key_create(&g_group_key, [](void* p) { delete static_cast<ThreadGroup*>(p); });
    });
    t_group = new ThreadGroup();
    t_group->tid = int(syscall(SYS_gettid));
    pthread_setspecific(g_group_key, t_group);
  }
  return *t_group;
}

int op_of(const char* f) {
  static const struct { const char* name; OpKind k; } names[] = {
      {"AllReduce", OpKind::AllReduce},   {"Broadcast", OpKind::Broadcast},
      {"Reduce", OpKind::Reduce},         {"AllGather", OpKind::AllGather},
      {"ReduceScatter", OpKind::ReduceScatter}, {"AlltoAll", OpKind::AllToAll},
      {"Gather", OpKind::Gather},         {"Scatter", OpKind::Scatter},
      {"Send", OpKind::Send},             {"Recv", OpKind::Recv}};
  if (!f) return -1;
  for (const auto& n : names)
    if (strcmp(f, n.name) == 0) return int(n.k);
  return -1;
}

// NCCL's ncclDatatypeToString ("ncclFloat32") -> ncclDataType_t value; -1 unknown.
int dtype_of(const char* s) {
  static const char* const names[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",
                                      "ncclInt64",   "ncclUint64",  "ncclFloat16",  "ncclFloat32",
                                      "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  if (!s) return -1;
  for (int i = 0; i < 12; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

uint64_t stack_of(Recorder* r, ThreadGroup& g) {
  if (r->stack_mode == StackMode::None) return 0;
  if (!g.stack) g.stack.reset(new StackBuf());
  uint64_t h = capture_stack(r->stack_mode, *g.stack);
  uint64_t& seen = g.seen_stacks[h & 255];
  if (seen != h && r->writer->submit_stack(h, g.stack->pcs, g.stack->n, g.stack->py, g.stack->npy))
    seen = h;
  return h;
}

void* on_api_call(Context* ctx, const ncclProfilerEventDescr_v5_t* d, bool p2p) {
  Recorder* r = current_recorder();
  if (!r) return nullptr;
  ThreadGroup& g = thread_group();
  if (!g.open) {  // not announced by a GroupApi event (not NCCL 2.28's order): its own group
    g.open = true;
    g.depth = 1;
    g.calls.clear();
  }
  uint64_t serial = g_next_serial.fetch_add(1, std::memory_order_relaxed);
  ApiSlot& s = g_slots[serial & (kSlots - 1)];
  s.peer.store(-1, std::memory_order_relaxed);
  s.nccl_seq.store(-1, std::memory_order_relaxed);
  s.launched_tid.store(0, std::memory_order_relaxed);
  s.serial.store(serial, std::memory_order_release);
  HandleKind kind = p2p ? kP2pApiHandle : kCollApiHandle;
  if (g.calls.size() >= kMaxGroupCalls) {
    g_rows_dropped.fetch_add(1, std::memory_order_relaxed);
    return make_handle(kind, serial);
  }
  PendingCall c{};
  c.ctx = ctx;
  c.serial = serial;
  const char* func = p2p ? d->p2pApi.func : d->collApi.func;
  c.op = op_of(func);
  c.dtype = dtype_of(p2p ? d->p2pApi.datatype : d->collApi.datatype);
  c.count = p2p ? d->p2pApi.count : d->collApi.count;
  c.root = -1;
  if (!p2p && (c.op == int(OpKind::Broadcast) || c.op == int(OpKind::Reduce) ||
               c.op == int(OpKind::Gather) || c.op == int(OpKind::Scatter)))
    c.root = d->collApi.root;
  c.stream = p2p ? d->p2pApi.stream : d->collApi.stream;
  c.captured = p2p ? d->p2pApi.graphCaptured : d->collApi.graphCaptured;
  // NCCL calls the plugin from inside the API call: if that call came through a lockstep hook,
  // the interposer records it (exact: same thread, same call).
  c.seen_both = in_nccl_hook();
  c.mono = mono_ns();
  c.wall = wall_ns();
  if (!c.seen_both) c.stack_hash = stack_of(r, g);
  snprintf(c.func, sizeof c.func, "%s", func ? func : "?");
  g.calls.push_back(c);
  return make_handle(kind, serial);
}

void on_task(const void* parent, HandleKind api_kind, int peer, int64_t nccl_seq) {
  ApiSlot* s = slot_for(parent, api_kind);
  if (!s) return;
  if (peer >= 0) s->peer.store(peer, std::memory_order_relaxed);
  if (nccl_seq >= 0) s->nccl_seq.store(nccl_seq, std::memory_order_relaxed);
  s->launched_tid.store(thread_group().tid, std::memory_order_release);
}

ProfRow op_row(const PendingCall& c, int tid) {
  ProfRow row{};
  row.kind = ProfRow::Op;
  row.id = g_next_op.fetch_add(1, std::memory_order_relaxed);
  row.comm = c.ctx->id;
  row.mono = c.mono;
  row.count = int64_t(c.count);
  row.nccl_seq = -1;
  row.call_index = -1;
  row.stream = reinterpret_cast<uint64_t>(c.stream);
  row.root = c.root;
  row.peer = -1;
  row.tid = tid;
  row.op = int8_t(c.op);
  row.dtype = int8_t(c.dtype);
  row.captured = c.captured;
  row.seen_both = c.seen_both;
  snprintf(row.text, sizeof row.text, "%s", c.func);
  return row;
}

// The outermost group ended (GroupApi stop, on the thread that issued its calls): every call
// gets its profiler_ops row; the calls only the plugin saw become ops rows, one per
// communicator, folded as the interposer folds a group (group_fold.h).
void on_group_end() {
  ThreadGroup& g = thread_group();
  if (!g.open) return;
  g.open = false;
  Recorder* r = current_recorder();
  if (!r || g.calls.empty()) {
    g.calls.clear();
    return;
  }
  std::vector<ProfRow> rows;
  rows.reserve(g.calls.size());
  std::vector<bool> launched(g.calls.size());
  g.descs.clear();
  for (size_t i = 0; i < g.calls.size(); i++) {
    const PendingCall& c = g.calls[i];
    ProfRow row = op_row(c, g.tid);
    ApiSlot& s = g_slots[c.serial & (kSlots - 1)];
    if ((s.serial.load(std::memory_order_acquire) & kSerialMask) == (c.serial & kSerialMask)) {
      row.peer = s.peer.load(std::memory_order_relaxed);
      row.nccl_seq = s.nccl_seq.load(std::memory_order_relaxed);
      launched[i] = s.launched_tid.load(std::memory_order_acquire) == g.tid;
    }
    rows.push_back(row);
    g.descs.push_back({c.op >= 0 ? OpKind(c.op) : OpKind::Coalesced, c.dtype, c.count, c.root,
                       row.peer, -1 /* the plugin is never told the reduction op */, nullptr,
                       c.stream});
  }
  int64_t group_id = g.depth > 1 ? r->next_group_id.fetch_add(1, std::memory_order_relaxed) : -1;
  int64_t now = mono_ns();
  std::vector<Context*> done;
  progress_begin(r->next_call);  // until these ops are pushed (call_progress.h)
  for (size_t i = 0; i < g.calls.size(); i++) {
    const PendingCall& first = g.calls[i];
    if (first.seen_both || first.op < 0) continue;
    bool seen = false;
    for (Context* d : done) seen |= d == first.ctx;
    if (seen) continue;
    done.push_back(first.ctx);
    g.parts.clear();
    std::vector<size_t> members;
    bool all_launched = true, captured = false;
    for (size_t j = i; j < g.calls.size(); j++) {
      const PendingCall& c = g.calls[j];
      if (c.ctx != first.ctx || c.seen_both || c.op < 0) continue;
      g.parts.push_back(&g.descs[j]);
      members.push_back(j);
      all_launched &= launched[j];
      captured |= c.captured;
    }
    CommState* cs = comm_of(r, first.ctx);
    Folded f = fold_parts(g.parts.data(), g.parts.size(), cs->nranks, cs->rank);
    OpRec o{};
    o.call_index = r->next_call.fetch_add(1, std::memory_order_acq_rel);
    o.comm_id = cs->id;
    o.count = f.count;
    o.group_id = group_id;
    o.issue_mono = first.mono;
    o.issue_wall = first.wall;
    o.return_mono = now;
    o.stream = reinterpret_cast<uint64_t>(first.stream);
    o.origin_call = -1;
    o.stack_hash = first.stack_hash;
    o.tid = g.tid;
    o.root = f.root;
    o.peer = f.peer;
    o.redop = -1;
    o.rc = 0;  // NCCL does not tell the plugin a call's result; a failed call has no events
    o.dtype = int8_t(f.dtype >= 0 && f.dtype < 12 ? f.dtype : -1);
    o.op = f.op;
    if (captured) {
      o.state = OpState::Captured;  // replays are not seen by the plugin (docs/recorder.md)
    } else {
      o.state = OpState::Enqueued;
      o.seq = cs->next_seq.fetch_add(1, std::memory_order_relaxed);
    }
    o.has_parts = f.list_parts;  // the writer waits for all of them, as for the interposer's ops
    Record rec;
    rec.kind = RecKind::Op;
    rec.op = o;
    r->writer->push(rec);
    if (f.list_parts) {
      int32_t part = 0;
      for (const OpDesc* d : g.parts) {
        Record p;
        p.kind = RecKind::Part;
        p.part = {o.call_index, int64_t(d->count), part++, d->root, d->peer, -1,
                  int8_t(d->dtype >= 0 && d->dtype < 12 ? d->dtype : -1), d->kind, int32_t(g.parts.size())};
        r->writer->push(p);
      }
    }
    for (size_t j : members) rows[j].call_index = o.call_index;
    // Completion: a CUDA event recorded now follows the kernel only if NCCL launched it before
    // this point, which its task events on this thread prove (NCCL's direct launch path). Else
    // (host-callback launch, nonblocking communicator) no completion is claimed.
    if (o.state == OpState::Enqueued && all_launched)
      r->completion->track(first.stream, {o.call_index, cs->hash, o.seq, o.count, o.op});
  }
  progress_end();
  for (const ProfRow& row : rows) push_row(row);
  g.calls.clear();
}

// ---- the v5 entry points -------------------------------------------------------------------
ncclProfilerResult_t plugin_init(void** context, uint64_t comm_hash, int* mask, const char* name,
                                 int nnodes, int nranks, int rank, ncclDebugLogger_t) {
  if (context) *context = nullptr;
  if (mask) *mask = 0;
  if (!context || !mask) return NCCL_PROFILER_SUCCESS;
  try {
    if (!recorder_start()) return NCCL_PROFILER_SUCCESS;  // tracing off: NCCL emits nothing
    Recorder* r = current_recorder();
    if (!r) return NCCL_PROFILER_SUCCESS;
    {
      std::lock_guard<std::mutex> g(g_setup_mu);
      if (!g_rows.load()) g_rows.store(new BoundedQueue<ProfRow>(kRowQueue));
    }
    note_reach(kReachProfiler);
    r->writer->set_meta(lockstep::schema::meta::kNcclReached, reach_names(reach_bits()));
    r->writer->set_meta(lockstep::schema::meta::kProfilerPlugin, "ncclProfiler_v5");
    // Preloaded (in the global scope), its hooks see the calls that reach NCCL through it;
    // dlopened by NCCL alone (RTLD_LOCAL), only the plugin records.
    // (the program's handle searches the global scope only; RTLD_DEFAULT from here would also
    // search this library's own local scope)
    void* program = dlopen(nullptr, RTLD_LAZY | RTLD_NOLOAD);
    bool preloaded = program && real_dlsym(program, "ncclProfiler_v5") == &ncclProfiler_v5;
    if (program) dlclose(program);
    r->writer->set_meta(lockstep::schema::meta::kInterposerPreloaded, preloaded ? "1" : "0");
    auto* ctx = new Context();  // never freed: late events may still name it
    ctx->id = g_next_ctx.fetch_add(1);
    ctx->nccl_hash = comm_hash;
    ctx->nranks = nranks;
    ctx->rank = rank;
    ctx->nnodes = nnodes;
    ctx->init_mono = mono_ns();
    snprintf(ctx->name, sizeof ctx->name, "%s", name ? name : "");
    ProfRow row{};
    row.kind = ProfRow::CommInit;
    row.id = ctx->id;
    row.mono = ctx->init_mono;
    row.nccl_hash = comm_hash;
    row.nranks = nranks;
    row.rank = rank;
    row.nnodes = nnodes;
    snprintf(row.text, sizeof row.text, "%s", ctx->name);
    push_row(row);
    *context = ctx;
    *mask = kActivationMask;
  } catch (...) {
  }
  return NCCL_PROFILER_SUCCESS;
}

ncclProfilerResult_t plugin_start(void* context, void** handle, ncclProfilerEventDescr_v5_t* d) {
  if (handle) *handle = nullptr;
  auto* ctx = static_cast<Context*>(context);
  if (!ctx || !handle || !d) return NCCL_PROFILER_SUCCESS;
  try {
    switch (d->type) {
      case ncclProfileGroupApi: {
        ThreadGroup& g = thread_group();
        g.open = true;
        g.depth = d->groupApi.groupDepth;
        g.calls.clear();
        *handle = make_handle(kGroupApiHandle, 0);
        break;
      }
      case ncclProfileCollApi: *handle = on_api_call(ctx, d, false); break;
      case ncclProfileP2pApi: *handle = on_api_call(ctx, d, true); break;
      case ncclProfileColl: on_task(d->parentObj, kCollApiHandle, -1, int64_t(d->coll.seqNumber)); break;
      case ncclProfileP2p: on_task(d->parentObj, kP2pApiHandle, d->p2p.peer, -1); break;
      default: break;  // Group (a kernel plan) and finer events: not asked for, or not needed
    }
  } catch (...) {
  }
  return NCCL_PROFILER_SUCCESS;
}

ncclProfilerResult_t plugin_stop(void* handle) {
  HandleKind k;
  uint64_t serial;
  if (decode(handle, &k, &serial) && k == kGroupApiHandle) {
    try {
      on_group_end();
    } catch (...) {
      thread_group().calls.clear();
    }
  }
  return NCCL_PROFILER_SUCCESS;
}

ncclProfilerResult_t plugin_record(void*, ncclProfilerEventState_v5_t, ncclProfilerEventStateArgs_v5_t*) {
  return NCCL_PROFILER_SUCCESS;
}

ncclProfilerResult_t plugin_finalize(void* context) {
  auto* ctx = static_cast<Context*>(context);
  if (!ctx) return NCCL_PROFILER_SUCCESS;
  ProfRow row{};
  row.kind = ProfRow::CommFinalize;
  row.id = ctx->id;
  row.mono = mono_ns();
  push_row(row);
  return NCCL_PROFILER_SUCCESS;
}

// ---- writer side ---------------------------------------------------------------------------
struct Stmts {
  sqlite3* db = nullptr;
  trace_file::Stmt comm, linked, fin, op;
};
// Writer thread only. Never destroyed: at exit a writer still in its final commit (left behind
// after Writer::stop's bound) would step statements a static destructor had finalized.
Stmts& g_stmts = *new Stmts;
uint64_t g_dropped_published = 0;

bool prepare(sqlite3* db) {
  if (g_stmts.db == db) return true;
  // A new file (a forked child's): the old statements belong to a connection that is not ours.
  for (trace_file::Stmt* s : {&g_stmts.comm, &g_stmts.linked, &g_stmts.fin, &g_stmts.op}) s->abandon();
  g_stmts.db = nullptr;
  // The tables exist only in files whose process loaded the plugin (created in the writer's
  // open transaction).
  if (sqlite3_exec(db, trace_file::compact_sql(schema::kProfilerCreateSql).c_str(), nullptr, nullptr, nullptr) !=
      SQLITE_OK)
    return false;
  g_stmts.comm = trace_file::Stmt(db,
                                  "INSERT OR REPLACE INTO profiler_comms(id,nccl_comm_hash,name,nranks,rank,nnodes,"
                                  "init_mono_ns) VALUES(?,?,?,?,?,?,?)");
  g_stmts.linked = trace_file::Stmt(db, "UPDATE profiler_comms SET comm_id=? WHERE id=?");
  g_stmts.fin = trace_file::Stmt(db, "UPDATE profiler_comms SET finalize_mono_ns=? WHERE id=?");
  g_stmts.op = trace_file::Stmt(db,
                                "INSERT OR REPLACE INTO profiler_ops(id,profiler_comm,nccl_func,op,dtype,count,root,"
                                "peer,stream,graph_captured,nccl_seq,tid,mono_ns,seen_by,call_index) "
                                "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  const bool ok = g_stmts.comm.ok() && g_stmts.linked.ok() && g_stmts.fin.ok() && g_stmts.op.ok();
  if (ok) g_stmts.db = db;
  return ok;
}

// A negative value is absent (NULL).
int64_t opt(int64_t v) { return v < 0 ? -1 : v; }

bool step(trace_file::Stmt& s) {
  const int rc = s.run();
  return rc == SQLITE_DONE || rc == SQLITE_CONSTRAINT;
}

bool insert(const ProfRow& row) {
  switch (row.kind) {
    case ProfRow::CommInit: {
      char hex[17];
      snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(row.nccl_hash));
      g_stmts.comm.i64(1, row.id).text(2, hex).text(3, row.text).i64(4, row.nranks).i64(5, row.rank)
          .i64(6, row.nnodes).i64(7, row.mono);
      return step(g_stmts.comm);
    }
    case ProfRow::CommLinked:
      g_stmts.linked.i64(1, row.comm).i64(2, row.id);
      return step(g_stmts.linked);
    case ProfRow::CommFinalize:
      g_stmts.fin.i64(1, row.mono).i64(2, row.id);
      return step(g_stmts.fin);
    case ProfRow::Op: {
      trace_file::Stmt& s = g_stmts.op;
      const char* dt = dtype_name(row.dtype);
      s.i64(1, row.id).i64(2, row.comm).text(3, row.text);
      if (row.op >= 0) s.text(4, op_name(OpKind(row.op)));
      else s.null(4);
      s.text(5, dt ? dt : "").i64(6, row.count).opt(7, opt(row.root)).opt(8, opt(row.peer))
          .i64(9, int64_t(row.stream)).i64(10, row.captured ? 1 : 0).opt(11, opt(row.nccl_seq))
          .i64(12, row.tid).i64(13, row.mono)
          .text(14, row.seen_both ? schema::kSeenByBoth : schema::kSeenByPlugin).opt(15, opt(row.call_index));
      return step(s);
    }
  }
  return true;
}

}  // namespace

bool profiler_commit_rows(sqlite3* db) noexcept {
  BoundedQueue<ProfRow>* q = g_rows.load(std::memory_order_acquire);
  if (!q) return true;
  try {
    if (!prepare(db)) return false;
    ProfRow row;
    for (size_t n = 0; n < kRowQueue && q->pop(row); n++)
      if (!insert(row)) return false;
    uint64_t dropped = g_rows_dropped.load(std::memory_order_relaxed);
    if (dropped != g_dropped_published) {
      if (Recorder* r = current_recorder()) r->writer->set_meta(lockstep::schema::meta::kProfilerDropped, std::to_string(dropped));
      g_dropped_published = dropped;
    }
  } catch (...) {
    return false;
  }
  return true;
}

}  // namespace lockstep::rec

// The symbol NCCL 2.28 looks up first (dlsym(lib, "ncclProfiler_v5")).
extern "C" {
__attribute__((visibility("default"))) ncclProfiler_v5_t ncclProfiler_v5 = {
    "lockstep",
    lockstep::rec::plugin_init,
    lockstep::rec::plugin_start,
    lockstep::rec::plugin_stop,
    lockstep::rec::plugin_record,
    lockstep::rec::plugin_finalize,
};
}
