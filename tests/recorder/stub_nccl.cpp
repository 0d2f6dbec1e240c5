// A do-nothing NCCL for the recorder's unit tests and per-call benchmark: every entry point
// succeeds at once (no data moves), except where a test asks for an error. Exported the way
// real NCCL is: strong pnccl* symbols and weak ncclX aliases; ncclBcast calls ncclBroadcast
// through the PLT, as NCCL 2.28 does, so the recorder's re-entrancy guard is exercised.
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {
struct StubComm {
  int nranks, rank, device;
  bool nonblocking = false;  // config->blocking == 0
  // Nonblocking: how many more ncclCommGetAsyncError calls report ncclInProgress (as NCCL
  // finishing the last op's enqueue in the background).
  std::atomic<int> in_progress_polls{0};
};
// A nonblocking communicator's op is "enqueued in the background" for this many polls.
constexpr int kInProgressPolls = 3;
// SIZE_MAX as a count makes an op fail, like NCCL's argument checks.
constexpr size_t kFailCount = SIZE_MAX;
thread_local int g_depth = 0;
thread_local bool g_group_failed = false;
}  // namespace

#define STRONG extern "C" __attribute__((visibility("default")))
#define ALIAS(name) \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) decltype(p##name) name;

STRONG ncclResult_t pncclGetVersion(int* v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }
ALIAS(ncclGetVersion)
STRONG ncclResult_t pncclGetUniqueId(ncclUniqueId* id) { memset(id, 7, sizeof *id); return ncclSuccess; }
ALIAS(ncclGetUniqueId)

static ncclResult_t make_comm(ncclComm_t* comm, int nranks, int rank, bool nonblocking = false) {
  if (!comm || nranks <= 0 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto* c = new StubComm{nranks, rank, 0};
  c->nonblocking = nonblocking;
  *comm = reinterpret_cast<ncclComm_t>(c);
  return ncclSuccess;
}
STRONG ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  return make_comm(comm, nranks, rank);
}
ALIAS(ncclCommInitRank)
STRONG ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t* cfg) {
  return make_comm(comm, nranks, rank, cfg && cfg->blocking == 0);
}
ALIAS(ncclCommInitRankConfig)
STRONG ncclResult_t pncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int, ncclUniqueId*, ncclConfig_t*) {
  return make_comm(comm, nranks, rank);
}
ALIAS(ncclCommInitRankScalable)
STRONG ncclResult_t pncclCommShrink(ncclComm_t comm, int* excluded, int n, ncclComm_t* newcomm, ncclConfig_t*, int) {
  auto* c = reinterpret_cast<StubComm*>(comm);
  int below = 0;
  for (int i = 0; i < n; i++) below += excluded[i] < c->rank;
  return make_comm(newcomm, c->nranks - n, c->rank - below);
}
ALIAS(ncclCommShrink)
STRONG ncclResult_t pncclCommRevoke(ncclComm_t, int) { return ncclSuccess; }
ALIAS(ncclCommRevoke)
STRONG ncclResult_t pncclCommInitAll(ncclComm_t* comms, int n, const int*) {
  for (int i = 0; i < n; i++) make_comm(&comms[i], n, i);
  return ncclSuccess;
}
ALIAS(ncclCommInitAll)
STRONG ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  auto* c = reinterpret_cast<StubComm*>(comm);
  if (color == NCCL_SPLIT_NOCOLOR) { *newcomm = nullptr; return ncclSuccess; }
  // Test convention: split into halves by rank parity.
  int n = (c->nranks + (color == 0 ? 1 : 0)) / 2;
  return make_comm(newcomm, n > 0 ? n : 1, c->rank / 2);
}
ALIAS(ncclCommSplit)
STRONG ncclResult_t pncclCommDestroy(ncclComm_t comm) { delete reinterpret_cast<StubComm*>(comm); return ncclSuccess; }
ALIAS(ncclCommDestroy)
STRONG ncclResult_t pncclCommAbort(ncclComm_t comm) { delete reinterpret_cast<StubComm*>(comm); return ncclSuccess; }
ALIAS(ncclCommAbort)
STRONG ncclResult_t pncclCommFinalize(ncclComm_t) { return ncclSuccess; }
ALIAS(ncclCommFinalize)
STRONG ncclResult_t pncclCommCount(const ncclComm_t comm, int* n) { *n = reinterpret_cast<StubComm*>(comm)->nranks; return ncclSuccess; }
ALIAS(ncclCommCount)
STRONG ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* r) { *r = reinterpret_cast<StubComm*>(comm)->rank; return ncclSuccess; }
ALIAS(ncclCommUserRank)
STRONG ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* d) { *d = reinterpret_cast<StubComm*>(comm)->device; return ncclSuccess; }
ALIAS(ncclCommCuDevice)
// Test convention: a communicator of 3 ranks reports a remote error.
// A nonblocking one reports ncclInProgress for a few polls after each op.
STRONG ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* e) {
  auto* c = reinterpret_cast<StubComm*>(comm);
  if (c->nonblocking && c->in_progress_polls.load() > 0) {
    c->in_progress_polls.fetch_sub(1);
    *e = ncclInProgress;
    return ncclSuccess;
  }
  *e = c->nranks == 3 ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}
ALIAS(ncclCommGetAsyncError)
STRONG ncclResult_t pncclCommRegister(const ncclComm_t, void*, size_t, void** h) { *h = nullptr; return ncclSuccess; }
ALIAS(ncclCommRegister)
STRONG ncclResult_t pncclCommDeregister(const ncclComm_t, void*) { return ncclSuccess; }
ALIAS(ncclCommDeregister)

static ncclResult_t op(size_t count, ncclComm_t comm = reinterpret_cast<ncclComm_t>(1)) {
  if (count == kFailCount || !comm) {
    if (g_depth > 0) g_group_failed = true;
    return ncclInvalidArgument;
  }
  auto* c = reinterpret_cast<StubComm*>(comm);
  if (reinterpret_cast<uintptr_t>(comm) != 1 && c->nonblocking && g_depth == 0) {
    c->in_progress_polls.store(kInProgressPolls);
    return ncclInProgress;
  }
  return ncclSuccess;
}
STRONG ncclResult_t pncclAllReduce(const void*, void*, size_t n, ncclDataType_t, ncclRedOp_t, ncclComm_t c, cudaStream_t) { return op(n, c); }
ALIAS(ncclAllReduce)
STRONG ncclResult_t pncclBroadcast(const void*, void*, size_t n, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return op(n); }
ALIAS(ncclBroadcast)
STRONG ncclResult_t pncclBcast(void* b, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t s) {
  return ncclBroadcast(b, b, n, t, root, c, s);  // through the PLT, like NCCL 2.28
}
ALIAS(ncclBcast)
STRONG ncclResult_t pncclReduce(const void*, void*, size_t n, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t) { return op(n); }
ALIAS(ncclReduce)
STRONG ncclResult_t pncclAllGather(const void*, void*, size_t n, ncclDataType_t, ncclComm_t, cudaStream_t) { return op(n); }
ALIAS(ncclAllGather)
STRONG ncclResult_t pncclReduceScatter(const void*, void*, size_t n, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) { return op(n); }
ALIAS(ncclReduceScatter)
STRONG ncclResult_t pncclAlltoAll(const void*, void*, size_t n, ncclDataType_t, ncclComm_t, cudaStream_t) { return op(n); }
ALIAS(ncclAlltoAll)
STRONG ncclResult_t pncclGather(const void*, void*, size_t n, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return op(n); }
ALIAS(ncclGather)
STRONG ncclResult_t pncclScatter(const void*, void*, size_t n, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return op(n); }
ALIAS(ncclScatter)
STRONG ncclResult_t pncclSend(const void*, size_t n, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return op(n); }
ALIAS(ncclSend)
STRONG ncclResult_t pncclRecv(void*, size_t n, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return op(n); }
ALIAS(ncclRecv)
STRONG ncclResult_t pncclGroupStart() { g_depth++; return ncclSuccess; }
ALIAS(ncclGroupStart)
STRONG ncclResult_t pncclGroupEnd() {
  if (g_depth == 0) return ncclInvalidUsage;
  if (--g_depth > 0) return ncclSuccess;
  bool failed = g_group_failed;
  g_group_failed = false;
  return failed ? ncclInvalidArgument : ncclSuccess;
}
ALIAS(ncclGroupEnd)
STRONG ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* info) {
  if (info) info->estimatedTime = 1.0f;
  return pncclGroupEnd();
}
ALIAS(ncclGroupSimulateEnd)
