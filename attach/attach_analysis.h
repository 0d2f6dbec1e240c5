// The analysis of live snapshots (docs/attach.md): a new kind of evidence next to the recorder's
// rows and Flight Recorder entries, its level said per rank:
//   proven   — NCCL RAS collective counts (what each rank's NCCL enqueued, per communicator and
//              collective type), missing ranks RAS names;
//   inferred — a stack: a thread blocked under an NCCL or CUDA wait, and the Python or native
//              caller that issued it;
//   none     — no snapshot of that rank.
// Other evidence the job left is read too and said per rank: its lockstep trace directory
// (recorder rows) and its Flight Recorder dumps, both analysed by the trace analyzer
// (analyzer/analysis.h): proven, and their first divergence names the op.
// Output: where each rank's host waits, ranks grouped by identical stacks with the odd ones out,
// per communicator which collective each rank enqueued last (by count), the wait-for edges the
// counts prove, ranks with no snapshot, and a verdict never stronger than that evidence.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "snapshot.h"

namespace lockstep::attach {

enum class Evidence { kProven, kInferred, kNone };
const char* evidence_name(Evidence e);

// Trace evidence of the job besides the snapshots: found in a rank's environment, or given.
enum class TraceKind { kRecorder, kFlightRecorder };
const char* trace_kind_name(TraceKind k);  // "recorder" "flight_recorder"
// A process read that named a trace source: only its own files count (pid and host in the
// file's meta, and the recorder running in it or the file written since it started).
struct TraceOwner {
  std::string host;
  int pid = 0;
  double start_time = 0;
  bool recorder_mapped = false;
};
struct TraceSource {
  TraceKind kind = TraceKind::kRecorder;
  std::string path;                // recorder: its trace directory; FR: a directory of dumps
  std::vector<std::string> files;  // FR from an environment: the dump files at its prefix
  std::string found_by;            // "LOCKSTEP_DIR of host pid 123", "--trace", "--fr"
  std::vector<TraceOwner> owners;  // found from environments: the processes that named it
};
struct TraceEvidence {
  TraceSource source;
  bool read = false;
  std::string error;                 // why nothing could be read
  std::vector<std::string> skipped;  // "file: reason" of the files the loader could not use
  // "file: why" of the files there that are no process's read (another job's): named, not used.
  std::vector<std::string> not_this_job;
  std::string verdict;               // the analyzer's: clean divergent hang incomplete behind
  std::string summary;               // its summary line (names the first divergence)
  int exit_code = 0;                 // its exit code (Analysis::exit_code)
  std::vector<int> divergence_ranks; // global ranks on the first divergence's sides
  std::map<int, int64_t> ops_per_rank;  // global rank -> sequenced records read
};

// What backs a rank's part of the verdict: "nccl_ras", "recorder", "flight_recorder" (proven),
// "stack" (inferred), with what was read.
struct RankEvidence {
  std::string source;
  Evidence level = Evidence::kNone;
  std::string detail;
};

struct RankFinding {
  int rank = -1;  // global rank (environment), else -1
  std::string host;
  int pid = 0;
  bool snapshot = false;
  std::string error;  // could not be read (refused, gone)
  Evidence level = Evidence::kNone;
  double stopped_ms = 0;
  int threads = 0;
  // The thread that matters (the GIL holder, else one blocked in NCCL/CUDA, else the main one).
  int tid = 0;
  std::string waits_in;    // innermost NCCL/CUDA/libc wait: "cuStreamSynchronize"
  std::string called_from; // first caller outside NCCL/CUDA/libc: native function or Python file:line
  std::string python_where;  // innermost Python frame of that thread, "" when none
  std::string collective_in_stack;  // an NCCL collective on the stack (inferred)
  std::vector<std::string> signature;  // stack used for grouping
  // RAS: comm hash -> type -> count (proven)
  std::map<std::string, std::map<std::string, uint64_t>> ras_counts;
  std::string python_status;
  // Threads whose native stack was not read (did not stop, the stop's read budget ran out, not
  // seized), and whether the Python frames were cut short: what they were doing is unknown.
  int threads_unread = 0;
  bool python_cut_short = false;
  std::vector<RankEvidence> evidence;  // every source that speaks for this rank, proven first
  // At the second look (SecondLook): "same" (in the same wait, not woken in between), "moved"
  // (now elsewhere), "woke" (same wait, but it went to sleep again in between), "not read
  // again"; "" when the stacks were not read twice.
  std::string second;
  std::string second_waits_in;
};

struct CountDivergence {  // proven by RAS
  std::string comm;
  int comm_size = 0;
  std::string collective;               // "ReduceScatter"
  std::map<uint64_t, std::vector<int>> ranks_by_count;  // count -> global ranks
  std::vector<std::pair<int, int>> waits_for;           // (rank ahead, rank behind)
  // Ranks RAS counted that this attach did not read (no process of theirs snapshotted): RAS
  // names them by communicator rank and pid. count -> "comm rank 1 (pid 4321, not attached)".
  std::map<uint64_t, std::vector<std::string>> unattached_by_count;
};

struct StackGroup {
  std::vector<int> ranks;
  std::vector<std::string> signature;
};

inline constexpr size_t kListedNoSnapshot = 4096;

struct AttachReport {
  int expected_ranks = 0;  // largest world size any process reports
  std::vector<RankFinding> ranks;  // sorted by rank
  // Expected ranks no process was found for: every one as ranges, and the first
  // kListedNoSnapshot of them one by one.
  std::vector<int> no_snapshot;
  std::vector<std::pair<int, int>> no_snapshot_ranges;  // first, last
  int64_t no_snapshot_count = 0;
  std::vector<StackGroup> groups;  // largest first
  std::vector<CountDivergence> divergences;
  std::vector<std::string> ras_notes;  // RAS not reached, missing ranks, async errors
  std::vector<std::string> ras_dead;   // ranks RAS reports missing and considered dead (proven)
  std::vector<TraceEvidence> traces;  // the job's recorder traces and FR dumps, analysed
  std::vector<std::string> stale_fr_dumps;  // at the job's FR prefix but older than the job: not read
  bool all_blocked = false;  // every snapshotted rank's host waits in NCCL/CUDA
  // The second look (every node took one), how long after the first, and what RAS said then:
  // counts moved (the job progresses), or every communicator counted the same at both looks.
  bool second_look = false;
  double second_after_ms = 0;
  bool ras_moved = false;
  bool ras_unchanged = false;
  // Count differences of the first look that the second look did not confirm (the counts moved,
  // or there was no second look): not proven, named.
  std::vector<CountDivergence> unconfirmed;
  double longest_stop_ms = 0;
  std::string verdict;
  int exit_code = 0;  // as `lockstep analyze` (docs/cli.md): 1 found, 4 incomplete, 0 clean
};

// Whether the process's thread that matters waits in NCCL or CUDA (as `all_blocked` counts it).
bool waits_in_nccl_or_cuda(const ProcessSnapshot& p);
// Whether any rank's RAS counts differ between two looks (matched by communicator, comm rank, pid).
bool ras_counts_moved(const std::vector<RasAnswer>& first, const std::vector<RasAnswer>& second);

// `given`: trace evidence named on the command line (--trace, --fr), read besides what the
// snapshots' environments name.
AttachReport analyze_snapshots(const std::vector<NodeSnapshot>& nodes, const std::vector<TraceSource>& given = {});
std::string render_text(const AttachReport& r);
// Every string of it printable (schema/text_escape.h): safe for a terminal, an encoder, a page.
nlohmann::json render_json(const AttachReport& r);

}  // namespace lockstep::attach
