// What a trace directory's evidence does and does not cover, decided once for every reader
// (analyze, check, timeline, the model checker): files skipped, members of a communicator with
// no file, ranks claimed twice, ranks out of range, members that disagree on a communicator's
// size, two jobs in one directory, recorders that dropped records or stopped recording.
// Pure functions of the loaded headers (no SQLite, no clock).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trace_model.h"

namespace lockstep {

enum class EvidenceKind {
  kSkippedFile,       // a *.lockstep.sqlite the loader could not use (reason in detail)
  kMissingMember,     // a communicator names nranks members, some have no loaded file
  kDuplicateRank,     // two files claim the same global rank
  kDuplicateCommRank, // two files claim the same rank of one communicator
  kRankOutOfRange,    // comm rank outside [0, nranks)
  kNranksMismatch,    // members of one communicator disagree on its size
  kDuplicateFile,     // two files of the same process (host, pid, start time): a copy
  kMixedJobs,         // processes that share no communicator: traces of separate jobs
  kDroppedRecords,    // the recorder dropped records (meta dropped_records > 0)
  kRecorderStopped,   // the recorder stopped recording (meta recorder_stopped)
  kHistoryLost,       // the trace ends without an exit record (killed): history after its last flush is unknown
  kDigestInconsistent,// a file's checkpoints do not match the collectives it holds (analyzer/checkpoints.h)
  kUnverifiedHistory, // history the size cap retired that no checkpoint proves: no checkpoints, windows
                      // that do not overlap with no common checkpoint, retired point-to-point messages,
                      // late ops the retired range could not take in (meta late_retired_ops)
  kBenchmarkSwitches, // benchmark switches turned parts of the recorder off (meta bench_off): not evidence
  kFrHistoryDropped,  // a Flight Recorder dump whose ring lost entries (meta fr_history_dropped = 1):
                      // what the lost entries held is unknown
  kEvidenceGap,       // a member's records on a communicator have a hole (dropped): compared only up to it
  kStoppedBeforeIssue,// the job's end (SIGTERM/SIGINT) stopped a member in host code before an op its peers had
                      // issued moments before (Unproven::stopped): not issued yet, whether it would have is unknown
  kOrderNotRead,      // a summary-first read left each communicator's collectives before its cut unread: their
                      // sequence is proven by digest, their order across communicators (an inversion) is not
                      // (no order digest, or members' differ: summary_read.h prove_unread)
  kAllToAllNotRead,   // the same read's unread all-to-alls: their per-peer splits or counts are not in the
                      // digest and not proven by their signatures
};
// "skipped_file", "missing_member", ... (the JSON spelling; docs/analyzer.md).
const char* evidence_kind_name(EvidenceKind k);

struct EvidenceIssue {
  EvidenceKind kind = EvidenceKind::kSkippedFile;
  // The files contradict each other: no single job's schedule can be built from them. The model
  // checker refuses such a directory; the analyzer reports it as incomplete (exit 4).
  bool contradictory = false;
  std::vector<int> procs;   // indices into the process list given (empty: none loaded)
  std::vector<int> ranks;   // global ranks concerned (-1 entries dropped), for reports
  std::string detail;       // one line, for humans
  // An issue about one process (one entry in procs and in ranks): the detail without the rank
  // that leads it ("trace ends without an exit record ..."), so that ranks with the same text
  // group into one line (group_evidence). Empty for the other issues.
  std::string what;
  // kEvidenceGap: the communicator (hash) and the first seq whose evidence is not whole.
  std::string comm;
  int64_t from_seq = 0;
  // kEvidenceGap: why the evidence stops there (gap_cause_name, comm_index.h): seq_gap,
  // dropped_range, parts_dropped, unlocated, recorder_stopped.
  std::string gap_cause;
};

// Issues of one kind and one text (EvidenceIssue::what) about several ranks, as one: "ranks
// 0-4095: trace ends without an exit record ..."; every other issue alone. In the order of each
// group's first issue.
struct EvidenceGroup {
  EvidenceKind kind = EvidenceKind::kSkippedFile;
  bool contradictory = false;
  std::vector<size_t> issues;  // indices into the issues grouped
  std::vector<int> ranks;      // of every issue, sorted
  std::string what;            // the shared text; an issue alone: its `what`, else its detail
  std::string detail;          // "ranks 0-4095: <what>"; an issue alone: its own detail
};
std::vector<EvidenceGroup> group_evidence(const std::vector<EvidenceIssue>& issues);

// Per-file checks of the header, before any analysis trusts it: nranks in [1, kMaxRanks],
// rank in [0, nranks), retired counts and checkpoints within kMaxSeq. Empty: usable; else the
// skip reason.
inline constexpr int kMaxRanks = 1 << 24;
// Seqs, collective ordinals and retired counts are 32-bit (the loader rejects a larger seq).
inline constexpr int64_t kMaxSeq = UINT32_MAX;
std::string header_defect(const Process& p);

// Cross-file checks over the processes of one directory (the loaded ones, in order) and the
// files that were skipped. Every issue makes a verdict incomplete. comm_label: how a
// communicator is named, from its hash ("comm 05163667 (init0)" once the analysis knows its
// role); without it "comm 05163667".
std::vector<EvidenceIssue> validate_evidence(const std::vector<const Process*>& procs,
                                             const std::vector<SkippedFile>& skipped,
                                             const std::function<std::string(const std::string&)>& comm_label = {});

// A one-line summary of the first `max_items` groups (group_evidence): "comm 3f2a9c01 has 2
// ranks, 1 traced: ...; ranks 0-63: trace ends without an exit record ...; 2 more"
std::string evidence_summary(const std::vector<EvidenceIssue>& issues, size_t max_items = 4);

}  // namespace lockstep
