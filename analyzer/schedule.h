// Compact, analysis-ready form of a trace directory: what the analyses need of every sequenced
// op (16 bytes each), with op descriptions interned once per directory. A 256-rank x 100,000-op
// directory fits in ~400 MB instead of the ~8 GB the full trace_model.h structs would take.
// Details of the few ops a report names (stacks, thread, parts) are read back on demand
// (analyzer/trace_details.h). Built by the loader from SQLite files, or from an in-memory Trace.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "identity.h"
#include "trace_model.h"

namespace lockstep {

// How an op involves the members of its communicator.
enum class OpClass : uint8_t {
  kCollective,  // every member issues the same op (all_reduce, broadcast, coalesced, ...)
  kAllToAll,    // every member takes part; per-peer counts may differ but must pair up
  kP2P,         // send, recv, send_recv: only the two ranks of each message take part
};

// An op description without identity: equal signatures are the same operation.
struct Signature {
  vocab::Op op = vocab::Op::AllReduce;
  vocab::Dtype dtype = vocab::Dtype::Mixed;
  int64_t count = 0;
  int root = -1;
  int peer = -1;
  vocab::RedOp redop = vocab::RedOp::None;
  std::vector<OpPart> parts;
  OpClass cls = OpClass::kCollective;
};

constexpr OpClass classify_op(vocab::Op op) {
  return vocab::is_p2p(op) ? OpClass::kP2P : op == vocab::Op::AllToAll ? OpClass::kAllToAll : OpClass::kCollective;
}

enum OpFlags : uint8_t {
  kOpCompleted = 1,      // completion recorded
  kOpGraphLaunched = 2,  // ran as part of a CUDA graph replay (set from in-memory traces only)
  kOpGrouped = 4,        // issued inside ncclGroupStart/End: its group is SchedProcess::group_of
};

// 16 bytes: 164 M ops (16,384 ranks x 10,000) take 2.6 GB. call_index and sig are bit-fields
// (read and assigned like integers; the loader rejects values that do not fit: kMaxCallIndex,
// kMaxSignatures). The group id, needed only to compare two ops of one process, lives beside
// the ops (SchedProcess::groups) since most ops are not grouped.
struct SchedOp {
  int64_t call_index : 40 = 0;  // process-wide order
  uint64_t sig : 24 = 0;        // index into Schedule::sigs
  uint32_t seq = 0;             // per-communicator sequence number (>= 1)
  uint16_t comm = 0;            // index into SchedProcess::info.comms
  uint8_t stream = 0;           // index into SchedProcess::streams (255 = overflow bucket)
  uint8_t flags = 0;            // OpFlags
  bool completed() const { return flags & kOpCompleted; }
};
static_assert(sizeof(SchedOp) == 16, "SchedOp is the per-op memory cost of the analyzer");
inline constexpr int64_t kMaxCallIndex = (int64_t(1) << 39) - 1;
inline constexpr uint32_t kMaxSignatures = uint32_t(1) << 24;

// A grouped op: its index in SchedProcess::ops and its group (equal for the ops of one
// ncclGroupStart/End of this process; never 0).
struct OpGroup {
  uint32_t op = 0;
  uint32_t group = 0;
};

// A host-side wait or event record (trace_model.h Wait), as the model checker reads it.
struct HostWait {
  int64_t call_index = 0;
  vocab::Wait kind = vocab::Wait::StreamSync;
  uint64_t stream = 0;
  uint64_t event = 0;
  uint32_t thread = 0;  // index into SchedProcess::threads
};

struct SchedProcess {
  Process info;                  // meta, env, comms, hangs; info.ops/stacks stay empty
  std::vector<SchedOp> ops;      // sequenced ops only, by call_index
  std::vector<OpGroup> groups;   // the grouped ops (flag kOpGrouped), by op
  std::vector<uint64_t> streams; // distinct stream values, in first-seen order
  bool completion_known = false; // at least one completion was recorded
  int64_t unsequenced_ops = 0;   // failed / simulated / captured rows (never compared)
  // The group of ops[op]; 0 = not grouped.
  uint32_t group_of(size_t op) const {
    if (!(ops[op].flags & kOpGrouped)) return 0;
    auto it = std::lower_bound(groups.begin(), groups.end(), op, [](const OpGroup& g, size_t v) { return g.op < v; });
    return it != groups.end() && it->op == op ? it->group : 0;
  }

  // What only the model checker needs (analyzer/model_check.h): the host thread of each op and
  // the host waits. Filled by schedule_from_trace, and by the loader only when asked
  // (LoadOptions::host_waits, analyzer/schedule_waits.h); empty otherwise.
  bool host_waits_loaded = false;
  std::vector<int64_t> threads;      // distinct tids, first seen in ops, then in waits
  std::vector<uint32_t> op_threads;  // per ops[i]: index into threads
  std::vector<HostWait> waits;       // by call_index
  // The exact stream of each op in the overflow bucket (SchedOp::stream 255): (op index, stream).
  std::vector<std::pair<uint32_t, uint64_t>> overflow_streams;
  // The stream value of ops[i] (kUnknownStream: in the overflow bucket without side data).
  uint64_t stream_of(size_t i) const;
  static constexpr uint64_t kUnknownStream = ~uint64_t(0);
};

// Builds the threads / op_threads side data one row at a time (schedule_from_trace, the loader).
class ThreadTable {
 public:
  explicit ThreadTable(SchedProcess& sp) : sp_(sp) {}
  uint32_t index(int64_t tid);

 private:
  SchedProcess& sp_;
  std::unordered_map<int64_t, uint32_t> index_;
};

struct Schedule {
  std::string dir;
  std::vector<SchedProcess> procs;  // sorted by global_rank, then host, pid
  std::vector<Signature> sigs;
  std::vector<SkippedFile> skipped;
};

// The rank a report shows for a process (identity.h shown_rank).
inline int display_rank(const Schedule& s, int proc) { return shown_rank(s.procs[proc].info, proc); }

// Interns signatures by value: equal descriptions get the same index, so comparing two ops is
// comparing two integers.
class SignatureTable {
 public:
  uint32_t intern(Signature sig);
  const std::vector<Signature>& table() const { return sigs_; }
  std::vector<Signature> take() { return std::move(sigs_); }

 private:
  std::vector<Signature> sigs_;
  std::unordered_map<std::string, uint32_t> index_;
};

std::string signature_key(const Signature& s);

// The compact form of a fully loaded trace (tests, small traces, replay --order-from), with the
// model checker's side data (host waits, op threads).
Schedule schedule_from_trace(const Trace& trace);

// The op row of schedule op `i` of `sp`, with the fields the schedule keeps (no times, no stack):
// the inverse of schedule_from_trace for what shrink writes and the benchmarks time.
Op op_row(const Schedule& s, const SchedProcess& sp, size_t i);

// Elements an all-to-all moves to (send) or from (!send) one peer; ncclAlltoAll (no parts)
// moves `count` to and from every peer.
int64_t all_to_all_amount(const Signature& s, bool send, int peer);

// Human form: "all_reduce float32 count=1024 sum", "all_to_all float32 [r0:8 r1:8]".
std::string describe_signature(const Signature& s);

}  // namespace lockstep
