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
#include <functional>
#include <string>
#include <vector>

#include "schedule.h"

namespace lockstep::model {

// The input is the shared compact schedule (schedule.h) with the checker's side data: host waits
// and each op's thread (load_schedule with LoadOptions::host_waits, or schedule_from_trace).
// The checker's own per-rank queues are built from it inside check().

// kUnknown: the model got stuck only where a rank's records stop being whole (dropped records,
// a stopped recorder): what lies past the hole is unknown, so no deadlock is claimed.
enum class Verdict { kCanComplete, kMayDeadlock, kDeadlock, kUnknown };
const char* verdict_name(Verdict v);  // "can complete" | "may deadlock" | "deadlock" | "unknown"

struct RankWitness {
  int proc = 0;
  std::string label;        // "rank 1"
  std::string blocked_in;   // "comm X seq 3750 all_to_all on stream 0x7", "host: stream_sync ...",
                            // or "" when the rank finished its schedule
  std::string waits_for;    // why it cannot progress
  int waits_on = -1;        // the process it waits for, -1: none / unknown
  int32_t op = -1;          // index into Schedule::procs[proc].ops of the first op of what it is
                            // blocked in; -1: a host wait or stream_wait_event
  bool never_issued = false; // it waits for an op that `waits_on` never issues (a schedule cut short)
  bool waits_on_missing = false;  // it waits for a communicator member with no trace file
};

// A witness line in machine-readable form (tools that compare witnesses: shrink/).
struct WitnessStep {
  int32_t proc = -1;
  int32_t op = -1;          // index into Schedule::procs[proc].ops (the unit's first op); -1: a host wait
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
  std::vector<std::string> problems;    // input the model had to skip or assume
};

struct Options {
  bool check_serialized = true;  // also run the serialized model (latent deadlocks)
  uint64_t shuffle_seed = 0;     // tests: take enabled transitions in a seeded random order
  // Processes (indices of Schedule::procs) the job's end stopped in host code before they issued
  // what their peers had just issued (the analyzer's Unproven::stopped): their schedules end
  // there, and what they would have issued next is unknown, as past a hole in their records.
  std::vector<int32_t> stopped_procs;
  // Processes still running when their traces were read (the analyzer's Analysis::live): their
  // schedules are what they issued so far; a peer waiting past that waits for what they have not
  // issued yet, not for what they never issue.
  std::vector<int32_t> live_procs;
  // Called after each step of the check ("work list", "serialized model", "concurrent model",
  // "witness"): `replay --model --timing`.
  std::function<void(const char* step)> on_step;
};

// The check's peak memory per op and host wait of the schedule, measured (docs/scaling.md:
// 1,156 MiB for 16,384 ranks x 500 ops, 1,061 MiB for 2,048 x 4,000): the work list's item, the
// engine's unit, their indices and the collectives' member slots, with some margin.
inline constexpr uint64_t kPeakBytesPerItem = 150;

// Throws std::runtime_error with a clear message when the schedule cannot be checked (no
// processes, contradictory files, a communicator whose members disagree, a schedule loaded
// without its side data...).
Result check(const Schedule& schedule, const Options& options = {});
// The same check; the schedule is freed as soon as the model's own index of it is built (the
// model's engines need only that index: 16,384 ranks x 500 ops, some 170 MB less at the peak).
Result check(Schedule&& schedule, const Options& options = {});
std::string format_text(const Result& result);
std::string format_json(const Result& result);

}  // namespace lockstep::model
