// One rank of a replay: create the recorded communicators, issue the recorded ops in recorded
// order (groups as recorded), then synchronize. Everything NCCL/CUDA is looked up at run time,
// so one binary runs on a GPU box and on the CPU fixture, and a preloaded recorder sees it all.
#include "worker.h"

#include "identity.h"

#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "rank_schedule.h"
#include "schedule_check.h"

namespace lockstep::replay {

namespace {

namespace fs = std::filesystem;

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The entry points the worker calls, found with dlsym(RTLD_DEFAULT) after loading the libraries
// globally: a preloaded recorder's hooks come first, as they would for the recorded program.
struct Api {
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*AlltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Gather)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Scatter)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  const char* (*GetErrorString)(ncclResult_t);
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)();
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*LaunchHostFunc)(CUstream, CUhostFn, void*);
};

template <typename F>
void resolve(F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  if (!fn) throw Error(std::string("symbol ") + name + " not found in the loaded libnccl.so.2 / libcuda.so.1");
}

Api load_api() {
  for (const char* lib : {"libcuda.so.1", "libnccl.so.2"})
    if (!dlopen(lib, RTLD_NOW | RTLD_GLOBAL))
      throw Error(std::string("cannot load ") + lib + ": " + dlerror() +
                  " (on a machine without a GPU, put the CPU fixture's directory (build/fixture-lib) in LD_LIBRARY_PATH)");
  Api a{};
  resolve(a.GetUniqueId, "ncclGetUniqueId");
  resolve(a.CommInitRank, "ncclCommInitRank");
  resolve(a.CommSplit, "ncclCommSplit");
  resolve(a.CommDestroy, "ncclCommDestroy");
  resolve(a.GroupStart, "ncclGroupStart");
  resolve(a.GroupEnd, "ncclGroupEnd");
  resolve(a.AllReduce, "ncclAllReduce");
  resolve(a.Broadcast, "ncclBroadcast");
  resolve(a.Reduce, "ncclReduce");
  resolve(a.AllGather, "ncclAllGather");
  resolve(a.ReduceScatter, "ncclReduceScatter");
  resolve(a.AlltoAll, "ncclAlltoAll");
  resolve(a.Gather, "ncclGather");
  resolve(a.Scatter, "ncclScatter");
  resolve(a.Send, "ncclSend");
  resolve(a.Recv, "ncclRecv");
  resolve(a.GetErrorString, "ncclGetErrorString");
  resolve(a.Init, "cuInit");
  resolve(a.DeviceGetCount, "cuDeviceGetCount");
  resolve(a.DeviceGet, "cuDeviceGet");
  resolve(a.PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  resolve(a.CtxSetCurrent, "cuCtxSetCurrent");
  resolve(a.CtxSynchronize, "cuCtxSynchronize");
  resolve(a.MemAlloc, "cuMemAlloc_v2");
  resolve(a.MemFree, "cuMemFree_v2");
  resolve(a.EventDestroy, "cuEventDestroy_v2");
  resolve(a.MemsetD8, "cuMemsetD8_v2");
  resolve(a.StreamCreate, "cuStreamCreate");
  resolve(a.StreamSynchronize, "cuStreamSynchronize");
  resolve(a.EventCreate, "cuEventCreate");
  resolve(a.EventRecord, "cuEventRecord");
  resolve(a.EventSynchronize, "cuEventSynchronize");
  resolve(a.StreamWaitEvent, "cuStreamWaitEvent");
  resolve(a.LaunchHostFunc, "cuLaunchHostFunc");
  return a;
}

// vocab::Dtype is ncclDataType_t's numbering; NULL (mixed) dtype: count bytes.
ncclDataType_t dtype_of(vocab::Dtype d) {
  return d == vocab::Dtype::Mixed ? ncclInt8 : static_cast<ncclDataType_t>(static_cast<int>(d));
}

// vocab::RedOp is ncclRedOp_t's numbering for the built-in ops; premulsum (its scalar is not
// recorded) and none run as sum: the same matching.
ncclRedOp_t redop_of(vocab::RedOp r) {
  return r == vocab::RedOp::None || r == vocab::RedOp::PreMulSum ? ncclSum : static_cast<ncclRedOp_t>(static_cast<int>(r));
}

// One NCCL call: an ungrouped op, or a part of a grouped one.
struct Call {
  vocab::Op op = vocab::Op::AllReduce;
  vocab::Dtype dtype = vocab::Dtype::Mixed;
  int64_t count = 0;
  int root = -1, peer = -1;
  vocab::RedOp redop = vocab::RedOp::None;
};

// Bytes of the send and receive buffers a call needs (NCCL's count conventions). The schedule
// was validated (schedule_problems), so the values are in range.
std::pair<size_t, size_t> buffer_bytes(const Call& c, int nranks) {
  uint64_t send = 0, recv = 0;
  if (!call_buffer_bytes(c.op, c.dtype, c.count, nranks, &send, &recv))
    throw Error(std::string("call of ") + vocab::name(c.op) + ": count " + std::to_string(c.count) + " is out of range");
  return {static_cast<size_t>(send), static_cast<size_t>(recv)};
}

std::vector<Call> calls_of(const Op& o) {
  if (!o.parts.empty()) {
    std::vector<Call> v;
    for (const OpPart& p : o.parts) v.push_back(Call{p.op, p.dtype == vocab::Dtype::Mixed ? o.dtype : p.dtype, p.count, p.root, p.peer, p.redop});
    return v;
  }
  return {Call{o.op, o.dtype, o.count, o.root, o.peer, o.redop}};
}

// Progress of this rank: bumped by the host loop and, through a host function enqueued after
// each op, by every op that completes on its stream. The watchdog declares a hang when it stops.
std::atomic<uint64_t> g_progress{0};
void bump_progress(void*) { g_progress.fetch_add(1, std::memory_order_relaxed); }

void host_sleep(void* us) { std::this_thread::sleep_for(std::chrono::microseconds(reinterpret_cast<uintptr_t>(us))); }

class Worker {
 public:
  explicit Worker(const WorkerOptions& o) : o_(o) {}
  int run();

 private:
  void check(ncclResult_t r, const std::string& what) {
    if (r != ncclSuccess) throw Error(what + ": " + api_.GetErrorString(r));
  }
  void check(CUresult r, const std::string& what) {
    if (r != CUDA_SUCCESS) throw Error(what + ": CUDA error " + std::to_string(static_cast<int>(r)));
  }
  void create_comms();
  ncclUniqueId exchange_id(const Comm& c, int occurrence);
  CUstream stream(uint64_t recorded);
  void prepare_buffers();
  void issue(const Op& o);
  void issue_call(const Call& c, const Op& o);
  void wait(const Wait& w);
  void perturb_host();
  int64_t issue_all();
  void perturb_stream(CUstream s);

  WorkerOptions o_;
  Api api_{};
  RankSchedule sched_;
  std::string label_;
  std::vector<ncclComm_t> comms_;
  std::map<uint64_t, CUstream> streams_;
  std::map<uint64_t, std::pair<CUdeviceptr, CUdeviceptr>> bufs_;  // per recorded stream
  std::map<uint64_t, CUevent> events_;
  std::mt19937_64 rng_;
  CUcontext ctx_ = nullptr;
};

ncclUniqueId Worker::exchange_id(const Comm& c, int occurrence) {
  const fs::path file = fs::path(o_.rendezvous_dir) / ("uid-" + c.hash + "-" + std::to_string(occurrence));
  ncclUniqueId id{};
  if (c.rank == 0) {
    check(api_.GetUniqueId(&id), "ncclGetUniqueId");
    const fs::path tmp = file.string() + ".tmp." + std::to_string(getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(id.internal, sizeof id.internal);
      if (!out) throw Error("cannot write " + tmp.string());
    }
    fs::rename(tmp, file);  // readers never see a partial id
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o_.init_timeout_s);
  while (true) {
    std::ifstream in(file, std::ios::binary);
    if (in && in.read(id.internal, sizeof id.internal)) return id;
    if (std::chrono::steady_clock::now() > deadline)
      throw Error("rank 0 of communicator " + c.hash + " did not publish its unique id in " + file.string() +
                  " within " + std::to_string(o_.init_timeout_s) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void Worker::create_comms() {
  const auto& comms = sched_.proc.comms;
  comms_.assign(comms.size(), nullptr);
  struct Ev { int64_t call; int comm; int parent; };
  std::vector<Ev> evs;
  for (size_t i = 0; i < comms.size(); ++i)
    if (comms[i].init_rc == 0 && comms[i].nranks > 0) evs.push_back({comms[i].init_call, static_cast<int>(i), comms[i].parent});
  for (const auto& n : sched_.proc.nocolor_splits) evs.push_back({n.call_index, -1, n.parent});
  std::sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return a.call < b.call; });
  // What the worker cannot re-create: say so instead of hanging in init.
  for (const Comm& c : comms)
    if (c.created_before_tracing && c.init_rc == 0)
      throw Error("communicator " + c.hash + " was created before tracing started: its membership is unknown "
                  "(record the job from its start)");
  for (const Comm& c : comms)
    if (c.shrunk) throw Error("communicator " + c.hash + " was created by ncclCommShrink, which replay does not re-create");
  std::map<std::string, int> rank_of;
  for (const Comm& c : comms)
    if (c.init_rc == 0 && !rank_of.try_emplace(c.hash, c.rank).second && rank_of[c.hash] != c.rank)
      throw Error("communicator " + c.hash + " has several ranks in this process (ncclCommInitAll or "
                  "ncclCommInitRankScalable over devices), which replay does not re-create");
  std::map<std::string, int> occurrences;
  for (const Ev& e : evs) {
    if (e.parent >= 0 && !comms_[e.parent])
      throw Error("communicator " + comms[e.parent].hash + " is split but was never created in the trace");
    if (e.comm < 0) {
      ncclComm_t none = nullptr;
      check(api_.CommSplit(comms_[e.parent], NCCL_SPLIT_NOCOLOR, 0, &none, nullptr), "ncclCommSplit(NOCOLOR)");
      continue;
    }
    const Comm& c = comms[e.comm];
    if (e.parent < 0) {
      ncclUniqueId id = exchange_id(c, occurrences[c.hash]++);
      check(api_.CommInitRank(&comms_[e.comm], c.nranks, id, c.rank), "ncclCommInitRank for " + c.hash);
    } else {
      check(api_.CommSplit(comms_[e.parent], c.split_color, c.split_key, &comms_[e.comm], nullptr),
            "ncclCommSplit for " + c.hash);
    }
    bump_progress(nullptr);
    if (o_.verbose)
      std::fprintf(stderr, "lockstep replay: %s: communicator %s ready (rank %d of %d)\n", label_.c_str(),
                   c.hash.c_str(), c.rank, c.nranks);
  }
}

CUstream Worker::stream(uint64_t recorded) {
  auto it = streams_.find(recorded);
  if (it != streams_.end()) return it->second;
  CUstream s = nullptr;
  // Every recorded stream, the legacy default one included, becomes its own non-blocking stream:
  // the model checker does not model the default stream's implicit synchronization either.
  check(api_.StreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  streams_[recorded] = s;
  return s;
}

void Worker::prepare_buffers() {
  std::map<uint64_t, std::pair<size_t, size_t>> need;
  for (const Op& o : sched_.proc.ops) {
    if (!replayable(o)) continue;
    const int n = o.comm >= 0 ? sched_.proc.comms[o.comm].nranks : 1;
    for (const Call& c : calls_of(o)) {
      auto [s, r] = buffer_bytes(c, n);
      auto& nd = need[o.stream];
      nd.first = std::max(nd.first, s);
      nd.second = std::max(nd.second, r);
    }
  }
  for (const Wait& w : sched_.proc.waits) stream(w.stream);  // created here: threads only look up
  for (auto& [st, nd] : need) {
    CUdeviceptr sb = 0, rb = 0;
    check(api_.MemAlloc(&sb, std::max<size_t>(nd.first, 256)), "cuMemAlloc of " + std::to_string(nd.first) + " bytes");
    check(api_.MemAlloc(&rb, std::max<size_t>(nd.second, 256)), "cuMemAlloc of " + std::to_string(nd.second) + " bytes");
    check(api_.MemsetD8(sb, 1, std::max<size_t>(nd.first, 256)), "cuMemsetD8");
    bufs_[st] = {sb, rb};
    stream(st);
  }
}

void Worker::issue_call(const Call& c, const Op& o) {
  ncclComm_t comm = comms_.at(o.comm);
  CUstream s = stream(o.stream);
  const auto [sbp, rbp] = bufs_.at(o.stream);
  const void* sb = reinterpret_cast<const void*>(sbp);
  void* rb = reinterpret_cast<void*>(rbp);
  const ncclDataType_t dt = dtype_of(c.dtype);
  const size_t n = static_cast<size_t>(std::max<int64_t>(c.count, 0));
  const ncclRedOp_t rop = redop_of(c.redop);
  const int root = std::max(c.root, 0);
  const std::string what = std::string("nccl ") + vocab::name(c.op) + " (call " + std::to_string(o.call_index) + ")";
  using vocab::Op;
  switch (c.op) {
    case Op::AllReduce: return check(api_.AllReduce(sb, rb, n, dt, rop, comm, s), what);
    case Op::Broadcast: return check(api_.Broadcast(sb, rb, n, dt, root, comm, s), what);
    case Op::Reduce: return check(api_.Reduce(sb, rb, n, dt, rop, root, comm, s), what);
    case Op::AllGather: return check(api_.AllGather(sb, rb, n, dt, comm, s), what);
    case Op::ReduceScatter: return check(api_.ReduceScatter(sb, rb, n, dt, rop, comm, s), what);
    case Op::AllToAll: return check(api_.AlltoAll(sb, rb, n, dt, comm, s), what);
    case Op::Gather: return check(api_.Gather(sb, rb, n, dt, root, comm, s), what);
    case Op::Scatter: return check(api_.Scatter(sb, rb, n, dt, root, comm, s), what);
    case Op::Send: return check(api_.Send(sb, n, dt, c.peer, comm, s), what);
    case Op::Recv: return check(api_.Recv(rb, n, dt, c.peer, comm, s), what);
    case Op::SendRecv:
    case Op::Coalesced: break;  // grouped rows: issued part by part
  }
  throw Error("call " + std::to_string(o.call_index) + ": cannot replay op '" + vocab::name(c.op) + "'");
}

void Worker::issue(const Op& o) {
  perturb_stream(stream(o.stream));
  const auto calls = calls_of(o);
  // Grouped rows (all_to_all from sends/recvs, send_recv, coalesced) go back inside a group.
  const bool group = !o.parts.empty();
  if (group) check(api_.GroupStart(), "ncclGroupStart");
  for (const Call& c : calls) issue_call(c, o);
  if (group) check(api_.GroupEnd(), "ncclGroupEnd");
  check(api_.LaunchHostFunc(stream(o.stream), bump_progress, nullptr), "cuLaunchHostFunc");
}

void Worker::wait(const Wait& w) {
  auto event = [&](bool create) -> CUevent {
    auto it = events_.find(w.event);
    if (it != events_.end()) return it->second;
    if (!create) return nullptr;
    CUevent e = nullptr;
    check(api_.EventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    return events_[w.event] = e;
  };
  switch (w.kind) {
    case vocab::Wait::StreamSync: check(api_.StreamSynchronize(stream(w.stream)), "cuStreamSynchronize"); break;
    case vocab::Wait::DeviceSync: check(api_.CtxSynchronize(), "cuCtxSynchronize"); break;
    case vocab::Wait::EventRecord: check(api_.EventRecord(event(true), stream(w.stream)), "cuEventRecord"); break;
    case vocab::Wait::EventSync:
      if (CUevent e = event(false)) check(api_.EventSynchronize(e), "cuEventSynchronize");
      break;
    case vocab::Wait::StreamWaitEvent:
      if (CUevent e = event(false)) check(api_.StreamWaitEvent(stream(w.stream), e, 0), "cuStreamWaitEvent");
      break;
  }
}

void Worker::perturb_host() {
  if (!o_.delay_seed || o_.max_delay_us <= 0) return;
  if (rng_() % 2) std::this_thread::sleep_for(std::chrono::microseconds(rng_() % (o_.max_delay_us + 1)));
}

void Worker::perturb_stream(CUstream s) {
  if (!o_.delay_seed || o_.max_delay_us <= 0 || rng_() % 4) return;
  // Delays this stream only: the others run ahead, another interleaving between streams.
  const uintptr_t us = rng_() % (o_.max_delay_us + 1);
  check(api_.LaunchHostFunc(s, host_sleep, reinterpret_cast<void*>(us)), "cuLaunchHostFunc");
}

// Steps: one ungrouped op, one group (rows of one thread sharing group_id), or one host wait, in
// call order. Each recorded thread replays its own steps on its own std::thread, so a host wait
// blocks only its thread (as in the model checker). A step is issued only once every earlier step
// on the same stream or communicator has been: the order on each stream and communicator is the
// recorded one, whatever the threads' timing.
int64_t Worker::issue_all() {
  const auto& ops = sched_.proc.ops;
  const auto& waits = sched_.proc.waits;
  struct Step {
    std::vector<size_t> ops;   // indices into ops (one, or a group's rows)
    int64_t wait = -1;         // index into waits
    std::vector<int> keys;     // streams (2k) and communicators (2k+1) it is ordered on
  };
  std::vector<Step> steps;
  std::map<int64_t, std::vector<size_t>> by_thread;  // tid -> its steps in order
  std::map<uint64_t, int> stream_key;
  auto skey = [&](uint64_t st) { return stream_key.try_emplace(st, static_cast<int>(stream_key.size())).first->second * 2; };
  for (const Op& o : ops)
    if (replayable(o)) skey(o.stream);
  for (const Wait& w : waits) skey(w.stream);
  std::map<int64_t, std::pair<int64_t, size_t>> open;  // tid -> (group_id, step) of its open group
  std::map<uint64_t, uint64_t> event_stream;           // event -> stream of its last record
  auto add_key = [](Step& st, int k) {
    if (std::find(st.keys.begin(), st.keys.end(), k) == st.keys.end()) st.keys.push_back(k);
  };
  size_t oi = 0, wi = 0;
  while (oi < ops.size() || wi < waits.size()) {
    if (wi < waits.size() && (oi >= ops.size() || waits[wi].call_index < ops[oi].call_index)) {
      const Wait& w = waits[wi];
      open.erase(w.tid);
      Step st;
      st.wait = static_cast<int64_t>(wi++);
      if (w.kind == vocab::Wait::DeviceSync) {
        for (auto& [v, k] : stream_key) add_key(st, k * 2);
      } else if (w.kind == vocab::Wait::EventSync) {
        auto e = event_stream.find(w.event);
        if (e != event_stream.end()) add_key(st, skey(e->second));
      } else {
        add_key(st, skey(w.stream));
        if (w.kind == vocab::Wait::EventRecord) event_stream[w.event] = w.stream;
        if (w.kind == vocab::Wait::StreamWaitEvent && event_stream.count(w.event)) add_key(st, skey(event_stream[w.event]));
      }
      by_thread[w.tid].push_back(steps.size());
      steps.push_back(std::move(st));
      continue;
    }
    const size_t i = oi++;
    const Op& o = ops[i];
    if (!replayable(o)) continue;
    if (o.comm < 0 || o.comm >= static_cast<int>(comms_.size()) || !comms_[o.comm])
      throw Error("call " + std::to_string(o.call_index) + " is on a communicator that was not created");
    size_t si;
    auto it = open.find(o.tid);
    if (o.group_id >= 0 && it != open.end() && it->second.first == o.group_id) {
      si = it->second.second;
    } else {
      si = steps.size();
      steps.emplace_back();
      by_thread[o.tid].push_back(si);
      if (o.group_id >= 0) open[o.tid] = {o.group_id, si};
      else open.erase(o.tid);
    }
    steps[si].ops.push_back(i);
    add_key(steps[si], skey(o.stream));
    add_key(steps[si], o.comm * 2 + 1);
  }
  // Per key, its steps in order, and how many have been issued.
  std::map<int, std::vector<size_t>> queue;
  for (size_t i = 0; i < steps.size(); ++i)
    for (int k : steps[i].keys) queue[k].push_back(i);
  std::map<int, size_t> next;

  std::mutex mu;
  std::condition_variable cv;
  std::string error;
  int64_t issued = 0;
  auto ready = [&](size_t i) {
    for (int k : steps[i].keys)
      if (queue[k][next[k]] != i) return false;
    return true;
  };
  auto run_thread = [&](const std::vector<size_t>& mine) {
    try {
      check(api_.CtxSetCurrent(ctx_), "cuCtxSetCurrent");
      for (size_t i : mine) {
        const Step& st = steps[i];
        CUevent sync_event = nullptr;
        std::vector<CUevent> device_events;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return !error.empty() || ready(i); });
          if (!error.empty()) return;
          perturb_host();
          if (st.wait >= 0) {
            const Wait& w = waits[st.wait];
            // Blocking waits: mark "everything before this point" with events while holding the
            // turn, then block outside it, so later steps of other threads are not waited for.
            if (w.kind == vocab::Wait::StreamSync) {
              check(api_.EventCreate(&sync_event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
              check(api_.EventRecord(sync_event, stream(w.stream)), "cuEventRecord");
            } else if (w.kind == vocab::Wait::DeviceSync) {
              for (auto& [v, strm] : streams_) {
                CUevent e = nullptr;
                check(api_.EventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
                check(api_.EventRecord(e, strm), "cuEventRecord");
                device_events.push_back(e);
              }
            } else if (w.kind == vocab::Wait::EventSync) {
              auto e = events_.find(w.event);
              if (e != events_.end()) sync_event = e->second;
            } else {
              wait(w);
            }
          } else {
            const bool group = st.ops.size() > 1 || ops[st.ops[0]].group_id >= 0;
            if (group) check(api_.GroupStart(), "ncclGroupStart");
            for (size_t oi2 : st.ops) issue(ops[oi2]);
            if (group) check(api_.GroupEnd(), "ncclGroupEnd");
            issued += static_cast<int64_t>(st.ops.size());
          }
          for (int k : st.keys) ++next[k];
        }
        cv.notify_all();
        if (sync_event) check(api_.EventSynchronize(sync_event), "cuEventSynchronize");
        if (sync_event && waits[st.wait].kind == vocab::Wait::StreamSync) api_.EventDestroy(sync_event);
        for (CUevent e : device_events) {
          check(api_.EventSynchronize(e), "cuEventSynchronize");
          api_.EventDestroy(e);
        }
        bump_progress(nullptr);
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu);
      if (error.empty()) error = e.what();
      cv.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (auto& [tid, mine] : by_thread) threads.emplace_back(run_thread, std::cref(mine));
  for (auto& t : threads) t.join();
  if (!error.empty()) throw Error(error);
  return issued;
}

int Worker::run() {
  sched_ = load_rank_schedule(o_.trace_file);
  label_ = sched_.proc.global_rank >= 0 ? rank_label(sched_.proc, 0) : o_.trace_file;
  if (!o_.order_from_file.empty()) {
    RankSchedule source = load_rank_schedule(o_.order_from_file);
    const int moved = reorder_like(sched_, source);
    if (o_.verbose) std::fprintf(stderr, "lockstep replay: %s: order of %s: %d ops moved\n", label_.c_str(), o_.order_from_file.c_str(), moved);
  }
  // Untrusted input: every value checked before a buffer is sized or a call issued.
  const std::vector<std::string> problems = schedule_problems(sched_);
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += "\n  " + p;
    throw Error("the schedule cannot be replayed as recorded:" + all);
  }
  rng_.seed(o_.delay_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(sched_.proc.global_rank + 1));
  api_ = load_api();
  check(api_.Init(0), "cuInit");
  int ndev = 0;
  check(api_.DeviceGetCount(&ndev), "cuDeviceGetCount");
  if (ndev <= 0) throw Error("no CUDA device");
  CUdevice dev = 0;
  check(api_.DeviceGet(&dev, o_.local_rank % ndev), "cuDeviceGet");
  check(api_.PrimaryCtxRetain(&ctx_, dev), "cuDevicePrimaryCtxRetain");
  check(api_.CtxSetCurrent(ctx_), "cuCtxSetCurrent");

  create_comms();
  prepare_buffers();

  const int64_t issued = issue_all();
  if (o_.verbose) std::fprintf(stderr, "lockstep replay: %s: %lld ops issued, synchronizing\n", label_.c_str(), (long long)issued);
  for (auto& [rec, s] : streams_) check(api_.StreamSynchronize(s), "cuStreamSynchronize");
  for (ncclComm_t c : comms_)
    if (c) check(api_.CommDestroy(c), "ncclCommDestroy");
  for (auto& [st, b] : bufs_) {
    api_.MemFree(b.first);
    api_.MemFree(b.second);
  }
  for (auto& [ev, e] : events_) api_.EventDestroy(e);
  std::fprintf(stderr, "lockstep replay: %s: completed %lld ops\n", label_.c_str(), (long long)issued);
  return 0;
}

}  // namespace

int run_worker(const WorkerOptions& options) {
  if (options.rendezvous_dir.empty()) {
    std::fprintf(stderr, "lockstep replay: no rendezvous directory (set LOCKSTEP_RENDEZVOUS_DIR to a directory every rank sees)\n");
    return kWorkerExitUsage;
  }
  // The timeout: a hung rank ends itself with SIGTERM so the recorder flushes its trace.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog;
  if (options.timeout_s > 0) {
    watchdog = std::thread([&] {
      // A hang is no progress (no op completing, no host step) for timeout_s: slow perturbed
      // trials are not hangs.
      uint64_t last = g_progress.load();
      auto last_change = std::chrono::steady_clock::now();
      std::unique_lock<std::mutex> lk(mu);
      while (!cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return done; })) {
        const uint64_t now_value = g_progress.load(std::memory_order_relaxed);
        const auto now = std::chrono::steady_clock::now();
        if (now_value != last) {
          last = now_value;
          last_change = now;
          continue;
        }
        if (now - last_change < std::chrono::duration<double>(options.timeout_s)) continue;
        std::fprintf(stderr, "lockstep replay: %s: no progress for %.1f s: the schedule hangs\n",
                     options.trace_file.c_str(), options.timeout_s);
        std::fflush(stderr);
        kill(getpid(), SIGTERM);
        return;
      }
    });
  }
  int rc;
  try {
    Worker w(options);
    rc = w.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep replay: %s: %s\n", options.trace_file.c_str(), e.what());
    rc = kWorkerExitCannotRun;
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    done = true;
  }
  cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  return rc;
}

}  // namespace lockstep::replay
