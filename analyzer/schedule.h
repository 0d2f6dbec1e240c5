// The analysis index of a trace: what the analyses need of every sequenced op row (16 bytes
// each), with op descriptions interned once per directory. The trace's content has one model, its
// rows (trace_model.h); the Schedule is an index of them, built by ScheduleBuilder only, from the
// files (trace_loader.h) or from rows in memory (schedule_from_trace), and never turned back into
// rows: whatever needs a row reads it (trace_details.h, load_process_file). A 256-rank x
// 100,000-op directory fits in ~400 MB instead of the ~8 GB its rows would take.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
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
  kOpCompleted = 1,  // completion recorded
  kOpGrouped = 2,    // issued inside ncclGroupStart/End: its group is SchedProcess::group_of
};

// 16 bytes: 164 M ops (16,384 ranks x 10,000) take 2.6 GB. call_index and sig are bit-fields
// (read and assigned like integers; ScheduleBuilder rejects values that do not fit:
// kMaxCallIndex, kMaxSignatures). The group id, needed only to compare two ops of one process, lives beside
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
  // Kept by ScheduleBuilder, on every path.
  std::vector<std::pair<uint32_t, uint64_t>> overflow_streams;
  // Summary-first read (trace_loader.h LoadOptions::summary_first): per info.comms entry, the
  // collectives before the cut that were not read, proven identical on every member by the
  // checkpoint digest at the cut (no point-to-point op precedes it: its seq equals its ordinal).
  // The analyses align them as retired history (comm_index.cpp ProcComm::base). Empty: all read.
  struct UnreadPrefix {
    int64_t collectives = 0;  // ordinals 1..collectives not read
    uint64_t digest = 0;      // op_digest.h chain after them (the file's checkpoint)
    // The digest holds an all-to-all's op and dtype only (op_digest.h): what else the full read
    // compares of the unread ones is proven only when the file's signatures on this communicator
    // hold one all-to-all, without per-peer parts (all_to_all_key: its fields' hash), and every
    // member's is the same. kAllToAllOpen: several, or per-peer parts (their pairing is unread).
    enum : uint8_t { kNoAllToAll = 0, kOneAllToAll = 1, kAllToAllOpen = 2 };
    uint8_t all_to_all = kNoAllToAll;
    uint64_t all_to_all_key = 0;
  };
  std::vector<UnreadPrefix> unread;
  int64_t unread_ops = 0;  // sequenced ops not read (in no SchedOp)
  // Summary-first: (call_index, issue_mono_ns) of the ops read that did not complete, by
  // call_index: the hang explanation's ages of ops in flight without opening the file again.
  std::vector<std::pair<int64_t, int64_t>> in_flight_issue;
  // The stream value of ops[i] (kUnknownStream: in the overflow bucket without side data).
  uint64_t stream_of(size_t i) const;
  static constexpr uint64_t kUnknownStream = ~uint64_t(0);
};

// Why an op row cannot enter the index (a value that does not fit it). The loader skips the file
// with this reason ("corrupt: " + what()).
struct IndexError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The one builder of a process's part of the index: its sequenced op rows, appended in
// call_index order. The rules by which a row becomes a SchedOp -- the range limits, the stream
// buckets, the group and completion flags, what completion_known and unsequenced_ops count -- are
// written here once, for the loader's readers (both schemas) and for rows in memory
// (schedule_from_trace). Which rows are sequenced is the row model's rule (trace_model.h
// sequenced), which the writer applies when it writes seq.
class ScheduleBuilder {
 public:
  explicit ScheduleBuilder(SchedProcess& sp) : sp_(sp) {}
  struct Row {
    int64_t call_index = 0;
    int64_t seq = 0;        // >= 1
    int comm = 0;           // index into SchedProcess::info.comms
    uint32_t sig = 0;       // index into the caller's SignatureTable
    uint64_t stream = 0;
    int64_t group_id = -1;  // the row's group_id; -1: not grouped
    bool completed = false;
  };
  // Appends a sequenced op; throws IndexError when a value does not fit the index.
  void add_op(const Row& r);
  // A row that enqueued nothing (failed, simulated, captured): counted, never compared.
  void add_unsequenced(bool completed);

 private:
  uint8_t stream_bucket(uint64_t stream);
  SchedProcess& sp_;
  uint64_t last_stream_ = 0;
  int last_bucket_ = -1;
};

// Builds the threads / op_threads side data one row at a time (schedule_from_trace, the loader).
class ThreadTable {
 public:
  explicit ThreadTable(SchedProcess& sp) : sp_(sp) {}
  uint32_t index(int64_t tid);
  // Indexes the threads sp already has (read with its ops), so that later ones are added after them.
  void adopt() {
    for (size_t i = 0; i < sp_.threads.size(); ++i) index_.try_emplace(sp_.threads[i], static_cast<uint32_t>(i));
  }

 private:
  SchedProcess& sp_;
  std::unordered_map<int64_t, uint32_t> index_;
};

struct Schedule {
  std::string dir;
  std::vector<SchedProcess> procs;  // sorted by global_rank, then host, pid
  std::vector<Signature> sigs;
  std::vector<SkippedFile> skipped;
  // Summary-first read: true when it was asked for (even where everything had to be read).
  bool summary_first = false;
  // Node summaries (`lockstep summarize`) used in place of their files, and those ignored
  // (stale, incomplete or corrupt: path and why).
  struct SummaryUse {
    int64_t used = 0;   // summaries
    int64_t files = 0;  // trace files they stood for
    int64_t refreshed = 0;  // of them, files whose recorder committed only heartbeats since
                            // (their last flush taken forward by the file's mtime)
    std::vector<SkippedFile> ignored;
  };
  SummaryUse summaries;
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
// signature_key(a) == signature_key(b), without building either (the same fields, compared).
bool same_signature(const Signature& a, const Signature& b);

// The index of rows in memory (test builders, shrink's candidates), through ScheduleBuilder as
// the loader builds it from files, with the model checker's side data (host waits, op threads).
// Processes keep the order of trace.processes.
Schedule schedule_from_trace(const Trace& trace);

// Elements an all-to-all moves to (send) or from (!send) one peer; ncclAlltoAll (no parts)
// moves `count` to and from every peer.
int64_t all_to_all_amount(const Signature& s, bool send, int peer);

// Human form: "all_reduce float32 count=1024 sum", "all_to_all float32 [r0:8 r1:8]".
std::string describe_signature(const Signature& s);

}  // namespace lockstep
