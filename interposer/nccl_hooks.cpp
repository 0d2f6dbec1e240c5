// The NCCL entry points liblockstep.so interposes, and nothing else: each hook describes its
// call (an OpDesc, or what a communicator call created/ended), forwards to the real function
// unchanged and returns its result. All logic is in recorder.cpp.
#include <nccl.h>

#include <cstdio>

#include "log.h"
#include "recorder.h"
#include "symbol_lookup.h"

using namespace lockstep::rec;

namespace {

// The real function, resolved once per entry point (see symbol_lookup.h).
#define REAL(name)                                                                   \
  ([]() {                                                                           \
    static std::atomic<void*> slot{nullptr};                                        \
    return real_fn<decltype(&name)>(slot, Library::Nccl, #name);                    \
  }())

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
  return rc;
}
auto nothing = [](CallStart&) {};

void* handle_of(ncclComm_t c) { return static_cast<void*>(c); }

}  // namespace

#pragma GCC visibility push(default)  // the hooks are the only exported symbols
extern "C" {

// ---- collectives and point-to-point --------------------------------------------------------
ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t st) {
  return op_hook("ncclAllReduce", REAL(ncclAllReduce),
                 {OpKind::AllReduce, t, n, -1, -1, op, comm, st}, s, r, n, t, op, comm, st);
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t st) {
  return op_hook("ncclBroadcast", REAL(ncclBroadcast),
                 {OpKind::Broadcast, t, n, root, -1, -1, comm, st}, s, r, n, t, root, comm, st);
}
ncclResult_t ncclBcast(void* b, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                       cudaStream_t st) {
  return op_hook("ncclBcast", REAL(ncclBcast), {OpKind::Broadcast, t, n, root, -1, -1, comm, st},
                 b, n, t, root, comm, st);
}
ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t st) {
  return op_hook("ncclReduce", REAL(ncclReduce), {OpKind::Reduce, t, n, root, -1, op, comm, st},
                 s, r, n, t, op, root, comm, st);
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t st) {
  return op_hook("ncclAllGather", REAL(ncclAllGather),
                 {OpKind::AllGather, t, n, -1, -1, -1, comm, st}, s, r, n, t, comm, st);
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t st) {
  return op_hook("ncclReduceScatter", REAL(ncclReduceScatter),
                 {OpKind::ReduceScatter, t, n, -1, -1, op, comm, st}, s, r, n, t, op, comm, st);
}
ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm,
                          cudaStream_t st) {
  return op_hook("ncclAlltoAll", REAL(ncclAlltoAll),
                 {OpKind::AllToAll, t, n, -1, -1, -1, comm, st}, s, r, n, t, comm, st);
}
ncclResult_t ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                        ncclComm_t comm, cudaStream_t st) {
  return op_hook("ncclGather", REAL(ncclGather), {OpKind::Gather, t, n, root, -1, -1, comm, st},
                 s, r, n, t, root, comm, st);
}
ncclResult_t ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                         ncclComm_t comm, cudaStream_t st) {
  return op_hook("ncclScatter", REAL(ncclScatter),
                 {OpKind::Scatter, t, n, root, -1, -1, comm, st}, s, r, n, t, root, comm, st);
}
ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t st) {
  return op_hook("ncclSend", REAL(ncclSend), {OpKind::Send, t, n, -1, peer, -1, comm, st}, s, n,
                 t, peer, comm, st);
}
ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t st) {
  return op_hook("ncclRecv", REAL(ncclRecv), {OpKind::Recv, t, n, -1, peer, -1, comm, st}, r, n,
                 t, peer, comm, st);
}

// ---- groups --------------------------------------------------------------------------------
ncclResult_t ncclGroupStart() {
  auto real = REAL(ncclGroupStart);
  if (!real) return no_nccl("ncclGroupStart");
  HookGuard guard;
  if (guard.nested()) return real();
  ncclResult_t rc = real();
  if (rc == ncclSuccess) group_start();
  return rc;
}
ncclResult_t ncclGroupEnd() {
  auto real = REAL(ncclGroupEnd);
  if (!real) return no_nccl("ncclGroupEnd");
  HookGuard guard;
  if (guard.nested()) return real();
  ncclResult_t rc = real();
  group_end(rc, false);
  return rc;
}
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  auto real = REAL(ncclGroupSimulateEnd);
  if (!real) return no_nccl("ncclGroupSimulateEnd");
  HookGuard guard;
  if (guard.nested()) return real(info);
  ncclResult_t rc = real(info);
  group_end(rc, true);
  return rc;
}

// ---- communicator lifecycle ----------------------------------------------------------------
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return call_hook(
      "ncclCommInitRank", REAL(ncclCommInitRank), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        comm_created(c, {CommOrigin::UniqueIds, &id, 1}, comm ? handle_of(*comm) : nullptr,
                     nranks, rank, nullptr, rc);
      },
      comm, nranks, id, rank);
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  return call_hook(
      "ncclCommInitRankConfig", REAL(ncclCommInitRankConfig), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        comm_created(c, {CommOrigin::UniqueIds, &id, 1}, comm ? handle_of(*comm) : nullptr,
                     nranks, rank, config, rc);
      },
      comm, nranks, id, rank, config);
}
ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId,
                                      ncclUniqueId* ids, ncclConfig_t* config) {
  return call_hook(
      "ncclCommInitRankScalable", REAL(ncclCommInitRankScalable), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        comm_created(c, {CommOrigin::UniqueIds, ids, nId}, comm ? handle_of(*comm) : nullptr,
                     nranks, rank, config, rc);
      },
      comm, nranks, rank, nId, ids, config);
}
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
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
      comms, ndev, devlist);
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
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
      comm, color, key, newcomm, config);
}
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excluded, int nexcluded, ncclComm_t* newcomm,
                            ncclConfig_t* config, int flags) {
  return call_hook(
      "ncclCommShrink", REAL(ncclCommShrink), [&](CallStart& c) { take_split_counter(c, comm); },
      [&](CallStart& c, ncclResult_t rc) {
        CommOrigin o{CommOrigin::Shrink};
        o.parent = comm;
        o.excluded = excluded;
        o.n_excluded = nexcluded;
        comm_created(c, o, newcomm ? handle_of(*newcomm) : nullptr, -1, -1, config, rc);
      },
      comm, excluded, nexcluded, newcomm, config, flags);
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return call_hook(
      "ncclCommFinalize", REAL(ncclCommFinalize), nothing,
      [&](CallStart& c, ncclResult_t rc) { comm_ended(c, comm, CommEnd::Finalize, rc); }, comm);
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return call_hook(
      "ncclCommDestroy", REAL(ncclCommDestroy), nothing,
      [&](CallStart& c, ncclResult_t rc) { comm_ended(c, comm, CommEnd::Destroy, rc); }, comm);
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return call_hook(
      "ncclCommAbort", REAL(ncclCommAbort), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        comm_ended(c, comm, CommEnd::Abort, rc);
        flush_trace();  // an abort usually precedes the process's end: get it on disk now
      },
      comm);
}
ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  return call_hook(
      "ncclCommRevoke", REAL(ncclCommRevoke), nothing,
      [&](CallStart& c, ncclResult_t rc) { comm_ended(c, comm, CommEnd::Revoke, rc); }, comm,
      flags);
}

// ---- registration and async errors ---------------------------------------------------------
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return call_hook(
      "ncclCommRegister", REAL(ncclCommRegister), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        char d[64];
        snprintf(d, sizeof d, "buff=%p size=%zu", buff, size);
        api_call(c, "ncclCommRegister", comm, rc, d);
      },
      comm, buff, size, handle);
}
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return call_hook(
      "ncclCommDeregister", REAL(ncclCommDeregister), nothing,
      [&](CallStart& c, ncclResult_t rc) { api_call(c, "ncclCommDeregister", comm, rc, nullptr); },
      comm, handle);
}
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int flags) {
  return call_hook(
      "ncclCommWindowRegister", REAL(ncclCommWindowRegister), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        char d[64];
        snprintf(d, sizeof d, "buff=%p size=%zu flags=%d", buff, size, flags);
        api_call(c, "ncclCommWindowRegister", comm, rc, d);
      },
      comm, buff, size, win, flags);
}
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return call_hook(
      "ncclCommWindowDeregister", REAL(ncclCommWindowDeregister), nothing,
      [&](CallStart& c, ncclResult_t rc) {
        api_call(c, "ncclCommWindowDeregister", comm, rc, nullptr);
      },
      comm, win);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
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
  return rc;
}

}  // extern "C"
#pragma GCC visibility pop
