// The model checker behind `lockstep replay --model`: decides, without running anything, whether
// the per-rank schedules of a trace can deadlock under NCCL's semantics, and explains how.
//
// Semantics (docs/replay.md has the full statement and the confluence argument):
//  - a rank's host issues its recorded calls in call_index order, one sequence per thread; NCCL
//    calls only enqueue; stream_sync / event_sync / device_sync block that thread until the work
//    they name has completed; stream_wait_event makes later work on a stream wait for an event;
//  - an op (or a whole group: rows sharing group_id) occupies its stream and its communicator on
//    that rank until it completes; the k-th collective on a communicator meets the k-th on every
//    member and completes only when all have reached it with the same operation; sends and
//    receives are matched pairwise per (communicator, sender, receiver) in issue order;
//  - ops with state graph_launched are what ran at a CUDA graph launch and are modelled as such;
//    captured, failed and simulated rows enqueued nothing and are ignored.
// Two models: "concurrent" (different streams progress independently) and "serialized" (a rank's
// NCCL kernels run one at a time in issue order, the worst case of GPU scheduling). A deadlock in
// the first is a deadlock; one only in the second is a latent "may deadlock".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace_model.h"

namespace lockstep::model {

// Compact, self-contained input of the checker (a Trace has strings everywhere; at 1,024 ranks x
// 10,000 ops that would be gigabytes). Built from a Trace by schedule_from_trace(), or directly
// by generators and benchmarks.
using OpKind = vocab::Op;
enum class ItemKind : uint8_t {
  kOp,               // one ops row
  kStreamSync,       // host blocks until `stream`'s work issued so far completed
  kEventSync,        // host blocks until the work before `event`'s last record completed
  kDeviceSync,       // host blocks until all work issued so far completed
  kStreamWaitEvent,  // later work on `stream` waits for `event`
  kEventRecord,      // `event` marks the current end of `stream`
};

struct Part {         // one send or recv of a p2p op (lone send/recv: one part)
  bool is_send = false;
  int32_t peer = -1;  // rank in the communicator
  int64_t count = 0;
  vocab::Dtype dtype = vocab::Dtype::Mixed;
};

struct Item {
  ItemKind kind = ItemKind::kOp;
  OpKind op = OpKind::AllReduce;  // kOp items only
  int64_t call_index = 0;
  int64_t seq = 0;
  int32_t comm = -1;       // index into Schedule::comms
  int32_t stream = 0;      // index into ProcSchedule::streams
  int32_t thread = 0;      // index into ProcSchedule::threads
  int64_t group = -1;      // rows of one rank with the same group >= 0 progress together
  int64_t count = 0;
  vocab::Dtype dtype = vocab::Dtype::Mixed;
  vocab::RedOp redop = vocab::RedOp::None;
  int32_t root = -1;
  int64_t event = 0;
  int32_t first_part = 0;  // into ProcSchedule::parts (p2p ops only)
  int32_t nparts = 0;
  int16_t coalesced_sig = -1;  // coalesced ops: index into Schedule::names of the parts' op list
};

struct CommInfo {
  std::string label;          // name, or the first 8 hex digits of the hash
  std::string hash;
  int nranks = 0;
  std::vector<int32_t> members;  // process index for each comm rank (-1 = not in the trace)
};

struct ProcSchedule {
  std::string label;                       // "rank 3" (global rank) or the file name
  std::vector<uint64_t> streams;           // recorded stream values
  std::vector<int64_t> threads;            // recorded tids
  std::vector<int32_t> comm_rank;          // by Schedule comm index: this rank's rank in it, -1
  // By Schedule comm index: collectives the size cap retired before the first one in `items`
  // (comms.retired_collectives). Members align collectives by absolute ordinal; one that some
  // member retired counts as reached by it (its digest is checked by the analyzer, not here).
  std::vector<int64_t> retired_colls;
  std::vector<Item> items;                 // ops and waits, sorted by call_index
  std::vector<Part> parts;
};

struct Schedule {
  std::vector<CommInfo> comms;
  std::vector<ProcSchedule> procs;
  std::vector<std::string> names;          // interned coalesced part lists
  int16_t intern(const std::string& s);    // -1 for ""
  std::vector<std::string> problems;       // input problems found while building (shown to user)
};

// Builds the schedule of a loaded trace. Throws std::runtime_error with a clear message when the
// trace cannot be checked (no processes, a communicator whose members are missing from it...).
Schedule schedule_from_trace(const Trace& trace);

enum class Verdict { kCanComplete, kMayDeadlock, kDeadlock };
const char* verdict_name(Verdict v);  // "can complete" | "may deadlock" | "deadlock"

struct RankWitness {
  int proc = 0;
  std::string label;        // "rank 1"
  std::string blocked_in;   // "comm X seq 3750 all_to_all on stream 0x7", "host: stream_sync ...",
                            // or "" when the rank finished its schedule
  std::string waits_for;    // why it cannot progress
  int waits_on = -1;        // the process it waits for, -1: none / unknown
  int32_t item = -1;        // index into Schedule::procs[proc].items of the first row of what it is blocked in
  bool never_issued = false; // it waits for an op that `waits_on` never issues (a schedule cut short)
};

// A witness line in machine-readable form (tools that compare witnesses: shrink/).
struct WitnessStep {
  int32_t proc = -1;
  int32_t item = -1;        // index into Schedule::procs[proc].items (the unit's first row)
  bool never_issued = false; // it waits for an op its peer never issues
};

struct Result {
  Verdict verdict = Verdict::kCanComplete;
  std::string model;                    // "concurrent" or "serialized": the model of the witness
  std::string summary;                  // one line: the first stuck point
  std::vector<RankWitness> ranks;       // per rank in the stuck state (only blocked ranks)
  std::vector<std::string> cycle;       // wait-for cycle across ranks/streams/comms, if any
  std::vector<WitnessStep> cycle_steps; // the same cycle, one step per line of `cycle`
  std::vector<WitnessStep> mismatch;    // the first mismatched collective: each member that issued it
  int64_t ops = 0;                      // ops modelled (all ranks)
  int64_t completed_ops = 0;            // in the witness model (or all of them)
  std::vector<std::string> problems;    // Schedule::problems: input the model had to skip or assume
};

struct Options {
  bool check_serialized = true;  // also run the serialized model (latent deadlocks)
  uint64_t shuffle_seed = 0;     // tests: take enabled transitions in a seeded random order
};

Result check(const Schedule& schedule, const Options& options = {});
std::string format_text(const Result& result);
std::string format_json(const Result& result);

}  // namespace lockstep::model
