// The NCCL entry points liblockstep.so interposes, and nothing else: each hook describes its
// call (an OpDesc, or what a communicator call created/ended), forwards to the real function
// unchanged and returns its result. All logic is in recorder.cpp.
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "bench_knobs.h"
#include "log.h"
#include "python_frames.h"
#include "recorder.h"
#include "recorder_state.h"
#include "stack_capture.h"
#include "symbol_lookup.h"

using namespace lockstep::rec;

namespace {

// The real function of the hook's NCCL slot, resolved once per entry point and slot.
#define REAL(name)                                                                   \
  ([](int s) {                                                                      \
    static std::atomic<void*> cache[kNcclSlots];                                    \
    return real_nccl_fn<decltype(&::name)>(cache, s, #name);                        \
  }(slot))

// Every hook exists once per NCCL slot (symbol_lookup.h): h_X<0> behind the exported symbol X,
// h_X<k> handed out by dlsym for the k-th other libnccl. The exported symbol keeps the slot of
// the hook it is nested in: an NCCL calling its own entry points (ncclBcast -> ncclBroadcast)
// through the global scope lands there, and must reach that same NCCL.
// Each entry also tells the stack capture who called it (HookSite, stack_capture.h: the key
// of the memoized native frames): the exported symbol for slot 0, the hook itself for the others.
#define NCCL_HOOK(name, PARAMS, ARGS, ...)                                           \
  template <int K>                                                                  \
  ncclResult_t h_##name PARAMS {                                                    \
    [[maybe_unused]] const int slot = K ? K : current_nccl_slot();                  \
    NcclSlotScope slot_scope(slot);                                                 \
    HookSiteScope site_scope(K != 0, __builtin_return_address(0),                   \
                             __builtin_frame_address(0));                           \
    __VA_ARGS__                                                                     \
  }                                                                                 \
  extern "C" __attribute__((visibility("default"))) ncclResult_t name PARAMS {      \
    HookSiteScope site_scope(true, __builtin_return_address(0),                     \
                             __builtin_frame_address(0));                           \
    return h_##name<0> ARGS;                                                        \
  }

// Sets the calling thread's HookSite for the capture of this call's stack; clears it on the
// way out, so that no capture outside an op hook sees a stale one.
struct HookSiteScope {
  bool set;
  HookSiteScope(bool s, void* ra, void* frame) : set(s) {
    if (set) t_hook_site = {reinterpret_cast<uintptr_t>(ra), reinterpret_cast<uintptr_t>(frame)};
  }
  ~HookSiteScope() {
    if (set) t_hook_site = HookSite{};
  }
};

// meta nccl_reached / nccl_libraries, written when the facts change (checked per call: two
// relaxed loads).
std::atomic<unsigned> g_published_bits{0};
std::atomic<void*> g_published_for{nullptr};
void publish_reach_slow(unsigned bits) {
  Recorder* r = current_recorder();
  if (!r) return;
  g_published_bits.store(bits, std::memory_order_relaxed);
  g_published_for.store(r, std::memory_order_relaxed);
  r->writer->set_meta("nccl_reached", reach_names(bits));
  std::string libs;
  for (int i = 0; i < kNcclSlots; i++) {
    std::string p = nccl_slot_path(i);
    if (p.empty()) continue;
    if (!libs.empty()) libs += ";";
    libs += p;
  }
  r->writer->set_meta("nccl_libraries", libs);
}
inline void publish_reach() {
  unsigned bits = reach_bits();
  if (bits != g_published_bits.load(std::memory_order_relaxed) ||
      current_recorder() != g_published_for.load(std::memory_order_relaxed))
    publish_reach_slow(bits);
}

// A hook with no real NCCL behind it can only fail: say so once.
ncclResult_t no_nccl(const char* name) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    warn("%s called but no NCCL library is loaded in this process; returning ncclSystemError",
         name);
  return ncclSystemError;
}

// Operation hooks: describe, record around the real call, return its result.
template <class Fn, class... A>
ncclResult_t op_hook(const char* name, Fn real, const OpDesc& d, A... args) {
  if (!real) return no_nccl(name);
  HookGuard guard;
  if (guard.nested()) return real(args...);
  OpToken t = op_begin(d);
  ncclResult_t rc = real(args...);
  op_end(t, rc);
  publish_reach();
  return rc;
}

// Other hooks: after(CallStart, rc) records what the call did.
template <class Fn, class Before, class After, class... A>
ncclResult_t call_hook(const char* name, Fn real, Before before, After after, A... args) {
  if (!real) return no_nccl(name);
  HookGuard guard;
  if (guard.nested()) return real(args...);
  CallStart c = call_start();
  before(c);
  ncclResult_t rc = real(args...);
  after(c, rc);
  publish_reach();
  return rc;
}
auto nothing = [](CallStart&) {};

void* handle_of(ncclComm_t c) { return static_cast<void*>(c); }

}  // namespace


// ---- collectives and point-to-point --------------------------------------------------------
NCCL_HOOK(ncclAllReduce, (const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t st), (s, r, n, t, op, comm, st),
  return op_hook("ncclAllReduce", REAL(ncclAllReduce),
                 {OpKind::AllReduce, t, n, -1, -1, op, comm, st}, s, r, n, t, op, comm, st);)
NCCL_HOOK(ncclBroadcast, (const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st), (s, r, n, t, root, comm, st),
  return op_hook("ncclBroadcast", REAL(ncclBroadcast),
                 {OpKind::Broadcast, t, n, root, -1, -1, comm, st}, s, r, n, t, root, comm, st);)
NCCL_HOOK(ncclBcast, (void* b, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st), (b, n, t, root, comm, st),
  return op_hook("ncclBcast", REAL(ncclBcast), {OpKind::Broadcast, t, n, root, -1, -1, comm, st},
                 b, n, t, root, comm, st);)
NCCL_HOOK(ncclReduce, (const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t st), (s, r, n, t, op, root, comm, st),
  return op_hook("ncclReduce", REAL(ncclReduce), {OpKind::Reduce, t, n, root, -1, op, comm, st},
                 s, r, n, t, op, root, comm, st);)
NCCL_HOOK(ncclAllGather, (const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st), (s, r, n, t, comm, st),
  return op_hook("ncclAllGather", REAL(ncclAllGather),
                 {OpKind::AllGather, t, n, -1, -1, -1, comm, st}, s, r, n, t, comm, st);)
NCCL_HOOK(ncclReduceScatter, (const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t st), (s, r, n, t, op, comm, st),
  return op_hook("ncclReduceScatter", REAL(ncclReduceScatter),
                 {OpKind::ReduceScatter, t, n, -1, -1, op, comm, st}, s, r, n, t, op, comm, st);)
NCCL_HOOK(ncclAlltoAll, (const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t st), (s, r, n, t, comm, st),
  return op_hook("ncclAlltoAll", REAL(ncclAlltoAll),
                 {OpKind::AllToAll, t, n, -1, -1, -1, comm, st}, s, r, n, t, comm, st);)
NCCL_HOOK(ncclGather, (const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st), (s, r, n, t, root, comm, st),
  return op_hook("ncclGather", REAL(ncclGather), {OpKind::Gather, t, n, root, -1, -1, comm, st},
                 s, r, n, t, root, comm, st);)
NCCL_HOOK(ncclScatter, (const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st), (s, r, n, t, root, comm, st),
  return op_hook("ncclScatter", REAL(ncclScatter),
                 {OpKind::Scatter, t, n, root, -1, -1, comm, st}, s, r, n, t, root, comm, st);)
NCCL_HOOK(ncclSend, (const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st), (s, n, t, peer, comm, st),
  return op_hook("ncclSend", REAL(ncclSend), {OpKind::Send, t, n, -1, peer, -1, comm, st}, s, n,
                 t, peer, comm, st);)
NCCL_HOOK(ncclRecv, (void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st), (r, n, t, peer, comm, st),
  return op_hook("ncclRecv", REAL(ncclRecv), {OpKind::Recv, t, n, -1, peer, -1, comm, st}, r, n,
                 t, peer, comm, st);)

// ---- groups --------------------------------------------------------------------------------
NCCL_HOOK(ncclGroupStart, (), (),
  auto real = REAL(ncclGroupStart);
  if (!real) return no_nccl("ncclGroupStart");
  HookGuard guard;
  if (guard.nested()) return real();
  ncclResult_t rc = real();
  if (rc == ncclSuccess) group_start();
  return rc;)
NCCL_HOOK(ncclGroupEnd, (), (),
  auto real = REAL(ncclGroupEnd);
  if (!real) return no_nccl("ncclGroupEnd");
  HookGuard guard;
  if (guard.nested()) return real();
  ncclResult_t rc = real();
  group_end(rc, false);
  return rc;)
NCCL_HOOK(ncclGroupSimulateEnd, (ncclSimInfo_t* info), (info),
  auto real = REAL(ncclGroupSimulateEnd);
  if (!real) return no_nccl("ncclGroupSimulateEnd");
  HookGuard guard;
  if (guard.nested()) return real(info);
  ncclResult_t rc = real(info);
  group_end(rc, true);
  return rc;)

// ---- communicator lifecycle ----------------------------------------------------------------
NCCL_HOOK(ncclCommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId id, int rank), (comm, nranks, id, rank),
  return call_hook(
      "ncclCommInitRank", REAL(ncclCommInitRank), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        comm_created(c, {CommOrigin::UniqueIds, &id, 1}, comm ? handle_of(*comm) : nullptr,
                     nranks, rank, nullptr, rc);
      },
      comm, nranks, id, rank);)
NCCL_HOOK(ncclCommInitRankConfig, (ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config), (comm, nranks, id, rank, config),
  return call_hook(
      "ncclCommInitRankConfig", REAL(ncclCommInitRankConfig), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        comm_created(c, {CommOrigin::UniqueIds, &id, 1}, comm ? handle_of(*comm) : nullptr,
                     nranks, rank, config, rc);
      },
      comm, nranks, id, rank, config);)
NCCL_HOOK(ncclCommInitRankScalable, (ncclComm_t* comm, int nranks, int rank, int nId, ncclUniqueId* ids, ncclConfig_t* config), (comm, nranks, rank, nId, ids, config),
  return call_hook(
      "ncclCommInitRankScalable", REAL(ncclCommInitRankScalable), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        comm_created(c, {CommOrigin::UniqueIds, ids, nId}, comm ? handle_of(*comm) : nullptr,
                     nranks, rank, config, rc);
      },
      comm, nranks, rank, nId, ids, config);)
NCCL_HOOK(ncclCommInitAll, (ncclComm_t* comms, int ndev, const int* devlist), (comms, ndev, devlist),
  return call_hook(
      "ncclCommInitAll", REAL(ncclCommInitAll), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        static std::atomic<int> calls{0};
        int call = calls.fetch_add(1);
        for (int i = 0; i < ndev; i++) {
          CommOrigin o{CommOrigin::InitAll};
          o.initall_index = call;
          comm_created(c, o, comms && rc == ncclSuccess ? handle_of(comms[i]) : nullptr, ndev, i,
                       nullptr, rc);
        }
      },
      comms, ndev, devlist);)
NCCL_HOOK(ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config), (comm, color, key, newcomm, config),
  return call_hook(
      "ncclCommSplit", REAL(ncclCommSplit), [&](CallStart& c) { take_split_counter(c, comm); },
      [&](CallStart& c, ncclResult_t rc) {
        if (color == NCCL_SPLIT_NOCOLOR) {
          api_call(c, "ncclCommSplit", comm, rc, "color=NCCL_SPLIT_NOCOLOR (no new comm)");
          return;
        }
        CommOrigin o{CommOrigin::Split};
        o.parent = comm;
        o.color = color;
        o.key = key;
        comm_created(c, o, newcomm ? handle_of(*newcomm) : nullptr, -1, -1, config, rc);
      },
      comm, color, key, newcomm, config);)
NCCL_HOOK(ncclCommShrink, (ncclComm_t comm, int* excluded, int nexcluded, ncclComm_t* newcomm, ncclConfig_t* config, int flags), (comm, excluded, nexcluded, newcomm, config, flags),
  return call_hook(
      "ncclCommShrink", REAL(ncclCommShrink), [&](CallStart& c) { take_split_counter(c, comm); },
      [&](CallStart& c, ncclResult_t rc) {
        CommOrigin o{CommOrigin::Shrink};
        o.parent = comm;
        o.excluded = excluded;
        o.n_excluded = nexcluded;
        comm_created(c, o, newcomm ? handle_of(*newcomm) : nullptr, -1, -1, config, rc);
      },
      comm, excluded, nexcluded, newcomm, config, flags);)
NCCL_HOOK(ncclCommFinalize, (ncclComm_t comm), (comm),
  return call_hook(
      "ncclCommFinalize", REAL(ncclCommFinalize), nothing,
      [&](CallStart& c, ncclResult_t rc) { comm_ended(c, comm, CommEnd::Finalize, rc); }, comm);)
NCCL_HOOK(ncclCommDestroy, (ncclComm_t comm), (comm),
  return call_hook(
      "ncclCommDestroy", REAL(ncclCommDestroy), nothing,
      [&](CallStart& c, ncclResult_t rc) { comm_ended(c, comm, CommEnd::Destroy, rc); }, comm);)
NCCL_HOOK(ncclCommAbort, (ncclComm_t comm), (comm),
  return call_hook(
      "ncclCommAbort", REAL(ncclCommAbort), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        comm_ended(c, comm, CommEnd::Abort, rc);
        flush_trace();  // an abort usually precedes the process's end: get it on disk now
      },
      comm);)
NCCL_HOOK(ncclCommRevoke, (ncclComm_t comm, int flags), (comm, flags),
  return call_hook(
      "ncclCommRevoke", REAL(ncclCommRevoke), nothing,
      [&](CallStart& c, ncclResult_t rc) { comm_ended(c, comm, CommEnd::Revoke, rc); }, comm,
      flags);)

// ---- registration and async errors ---------------------------------------------------------
NCCL_HOOK(ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle), (comm, buff, size, handle),
  return call_hook(
      "ncclCommRegister", REAL(ncclCommRegister), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        char d[64];
        snprintf(d, sizeof d, "buff=%p size=%zu", buff, size);
        api_call(c, "ncclCommRegister", comm, rc, d);
      },
      comm, buff, size, handle);)
NCCL_HOOK(ncclCommDeregister, (const ncclComm_t comm, void* handle), (comm, handle),
  return call_hook(
      "ncclCommDeregister", REAL(ncclCommDeregister), nothing,
      [&](CallStart& c, ncclResult_t rc) { api_call(c, "ncclCommDeregister", comm, rc, nullptr); },
      comm, handle);)
NCCL_HOOK(ncclCommWindowRegister, (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int flags), (comm, buff, size, win, flags),
  return call_hook(
      "ncclCommWindowRegister", REAL(ncclCommWindowRegister), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        char d[64];
        snprintf(d, sizeof d, "buff=%p size=%zu flags=%d", buff, size, flags);
        api_call(c, "ncclCommWindowRegister", comm, rc, d);
      },
      comm, buff, size, win, flags);)
NCCL_HOOK(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win),
  return call_hook(
      "ncclCommWindowDeregister", REAL(ncclCommWindowDeregister), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        api_call(c, "ncclCommWindowDeregister", comm, rc, nullptr);
      },
      comm, win);)
NCCL_HOOK(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* async), (comm, async),
  // Polled constantly by frameworks: only errors are recorded (and only those start tracing).
  auto real = REAL(ncclCommGetAsyncError);
  if (!real) return no_nccl("ncclCommGetAsyncError");
  HookGuard guard;
  ncclResult_t rc = real(comm, async);
  if (guard.nested()) return rc;
  ncclResult_t err = async ? *async : ncclSuccess;
  if (async) comm_async_state(comm, rc, err);
  if (rc != ncclSuccess || (err != ncclSuccess && err != ncclInProgress)) {
    CallStart c = call_start();
    char d[64];
    snprintf(d, sizeof d, "asyncError=%d", int(err));
    api_call(c, "ncclCommGetAsyncError", comm, rc, d);
  }
  return rc;)

// ---- dlsym: the hook of `name` (ncclX or pncclX) for NCCL slot `slot` ----------------------
#define HOOK_ENTRY(name)                                                              \
  {#name, {reinterpret_cast<void*>(&::name), reinterpret_cast<void*>(&h_##name<1>),  \
           reinterpret_cast<void*>(&h_##name<2>), reinterpret_cast<void*>(&h_##name<3>)}}
static_assert(kNcclSlots == 4, "HOOK_ENTRY lists one hook per slot");

namespace lockstep::rec {
void* nccl_hook_for(const char* name, int slot) {
  struct Entry {
    const char* name;
    void* hooks[kNcclSlots];
  };
  static const Entry table[] = {
      HOOK_ENTRY(ncclAllReduce), HOOK_ENTRY(ncclBroadcast), HOOK_ENTRY(ncclBcast),
      HOOK_ENTRY(ncclReduce), HOOK_ENTRY(ncclAllGather), HOOK_ENTRY(ncclReduceScatter),
      HOOK_ENTRY(ncclAlltoAll), HOOK_ENTRY(ncclGather), HOOK_ENTRY(ncclScatter),
      HOOK_ENTRY(ncclSend), HOOK_ENTRY(ncclRecv), HOOK_ENTRY(ncclGroupStart),
      HOOK_ENTRY(ncclGroupEnd), HOOK_ENTRY(ncclGroupSimulateEnd), HOOK_ENTRY(ncclCommInitRank),
      HOOK_ENTRY(ncclCommInitRankConfig), HOOK_ENTRY(ncclCommInitRankScalable),
      HOOK_ENTRY(ncclCommInitAll), HOOK_ENTRY(ncclCommSplit), HOOK_ENTRY(ncclCommShrink),
      HOOK_ENTRY(ncclCommFinalize), HOOK_ENTRY(ncclCommDestroy), HOOK_ENTRY(ncclCommAbort),
      HOOK_ENTRY(ncclCommRevoke), HOOK_ENTRY(ncclCommRegister), HOOK_ENTRY(ncclCommDeregister),
      HOOK_ENTRY(ncclCommWindowRegister), HOOK_ENTRY(ncclCommWindowDeregister),
      HOOK_ENTRY(ncclCommGetAsyncError),
  };
  if (slot < 0 || slot >= kNcclSlots || !name) return nullptr;
  if (name[0] == 'p') name++;  // pncclX: the same hook
  for (const Entry& e : table)
    if (strcmp(e.name, name) == 0) return e.hooks[slot];
  return nullptr;
}
}  // namespace lockstep::rec

// Benchmarking only (bench_knobs.h): switches hot-path parts off at run time; returns the old mask.
extern "C" __attribute__((visibility("default"))) unsigned lockstep_bench_set_off(unsigned mask) {
  static std::atomic<unsigned> ever{0};  // meta bench_off: every part that was ever off
  unsigned old = g_bench_off.exchange(mask);
  if ((old ^ mask) & kOffPyGuard) lockstep::python_frames_bench_exact_guard(mask & kOffPyGuard);
  unsigned before = ever.fetch_or(mask);
  if ((before | mask) != before)
    if (Recorder* r = current_recorder())
      r->writer->set_meta("bench_off", std::to_string(before | mask));
  return old;
}

// Benchmarking only: copies up to n of the profile counters (bench_knobs.h, BenchCounter order)
// into out, then the TSC now; returns how many counters there are.
extern "C" __attribute__((visibility("default"))) unsigned lockstep_bench_counters(uint64_t* out,
                                                                                   unsigned n) {
  unsigned i = 0;
  for (; out && i < n && i < kCntCount; i++) out[i] = g_bench_counters[i].load(std::memory_order_relaxed);
  if (out && i < n) out[i] = bench_ticks();
  return kCntCount;
}
