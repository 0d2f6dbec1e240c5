// One analysis of a trace directory: the findings of every analysis file, combined, and the
// renderers (human text, versioned JSON, JUnit XML). Analyses are pure functions of the Schedule.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoints.h"
#include "comm_index.h"
#include "coverage.h"
#include "findings.h"
#include "hang.h"
#include "job_identity.h"
#include "schedule.h"
#include "trace_details.h"
#include "trace_validation.h"

namespace lockstep {

inline constexpr int kJsonReportVersion = 2;  // docs/analyzer.md "JSON report" (2: sides and odd_ranks capped, groups)

struct AnalyzeOptions {
  HangOptions hang;
};

// What a process's trace says about the ops it does not show.
enum class History {
  kComplete,  // finished, or stopped with an exit record: an op it does not show, it never issued
  kBehind,    // live (RankHang::live): it may not have issued it yet
  kLost,      // trace ends without an exit record, or its recorder stopped: unknown
};
const char* history_name(History h);  // complete behind lost

// A member that a divergence would call "never issued" although its history does not show
// that: live (behind) or lost. Kept out of Analysis::divergences.
struct Unproven {
  Divergence finding;       // as find_divergences reported it
  std::vector<int> behind;  // procs: live, not issued yet
  std::vector<int> lost;    // procs: history after the last flush unknown
  // procs: stopped by the job's end (SIGTERM/SIGINT) in host code while the members that issued
  // it had it in flight for less than HangOptions::stuck_ns: not issued yet, not never.
  std::vector<int> stopped;
  // What is known of `stopped` members, said once: their stopped_before_issue evidence and the
  // unproven finding's detail both print it.
  std::string stopped_what;
  bool peer_completed = false;  // a peer completed the op: the lost members issued it
  // procs whose files contradict another's (two files claim one rank or comm rank, members
  // disagree on the communicator's size, a copy): which file is the rank's history is unknown,
  // so nothing is claimed on their records.
  std::vector<int> contested;
  // Said in the outputs' notes (the stopped members are said by their evidence items instead).
  bool noted() const { return !behind.empty() || !lost.empty() || !contested.empty(); }
};

enum class Verdict { kClean, kDivergent, kHang, kIncomplete, kBehind };
const char* verdict_name(Verdict v);  // clean divergent hang incomplete behind

struct Analysis {
  const Schedule* schedule = nullptr;
  CommIndex index;
  std::vector<Divergence> divergences;  // first per communicator, first per point-to-point pair
  // Bounded traces: per communicator, what is exact (retained on every member) and what is
  // known by digest only; digest disagreements are in `divergences` as kDigestMismatch.
  CheckpointReport checkpoints;
  std::vector<Divergence> inversions;   // first per pair of communicators
  HangReport hang;
  std::vector<HostGroup> hosts;         // job_identity.h
  const Divergence* first = nullptr;    // the first finding in causal order, or null
  int64_t total_ops = 0;

  // Evidence: what the verdict does not cover (files skipped, members missing, histories lost,
  // records dropped, contradictions). Any entry makes the verdict at most incomplete.
  std::vector<EvidenceIssue> evidence;
  std::vector<History> history;         // per process
  std::vector<Unproven> unproven;       // never-issued findings the evidence does not support
  std::vector<int> live;                // procs whose trace is still being written
  // NCCL's profiler plugin: the calls the interposer missed (its lost rows are in `evidence`).
  Coverage coverage;

  bool problems() const { return !divergences.empty() || !inversions.empty() || hang.hung; }
  bool incomplete() const { return !evidence.empty(); }
  bool behind() const;                  // some live member has not issued ops its peers did
  // Findings first (1), then incomplete evidence (4), then behind, then clean.
  Verdict verdict() const;
  // The exit code of the verdict, the one ladder every command uses (docs/cli.md): divergent
  // or hang 1; incomplete or behind 4 (a live rank that has not issued its peers' ops yet: its
  // history does not show the job is clean); clean 0. require_finished (check, the CI gate):
  // a job still running is incomplete (4) even when no rank is behind.
  int exit_code(bool require_finished) const;
};

// Exit codes (cli/exit_codes.h names them for the commands).
inline constexpr int kVerdictExitClean = 0;
inline constexpr int kVerdictExitFound = 1;
inline constexpr int kVerdictExitIncomplete = 4;

// The one evidence-and-verdict result every command and format renders (analyze, check, report,
// replay, shrink): findings, evidence (plugin coverage included), verdict and exit code.
Analysis analyze(const Schedule& s, const AnalyzeOptions& options = {});
// The evidence as lines for a command that refuses incomplete evidence (replay, shrink): one per
// group (group_evidence), at most max_lines and then "and more"; empty: the evidence is complete.
std::vector<std::string> evidence_lines(const Analysis& a, size_t max_lines = 24);
// The kDigestMismatch finding of a digest disagreement in retired history (analyze() reports it
// unless an exact finding on the communicator comes at or before it).
Divergence digest_finding(const Schedule& s, const DigestDivergence& dd);

struct ReportOptions {
  int ops_before = 5;       // ops listed before the divergence, per side
  size_t max_frames = 8;    // per stack, after trimming
  size_t max_findings = 10; // further findings listed (the rest counted)
  bool color = false;       // bold headings (only when writing to a terminal)
  bool require_finished = false;  // check: a job still running is incomplete, never worded clean
};

std::string render_text(const Analysis& a, TraceDetails& details, const ReportOptions& options = {});
std::string render_json(const Analysis& a, TraceDetails& details, const ReportOptions& options = {});
// The same report written through `put` as it is made: its per-rank arrays (processes, evidence,
// comms, hang.ranks; 200 MB of text at 131,072 ranks) are never held whole. `add_members`, when
// given, adds top-level members to the report (add_json_member) before it is written.
void write_json(const Analysis& a, TraceDetails& details, const ReportOptions& options,
                const std::function<std::string(std::string)>& add_members,
                const std::function<void(std::string_view)>& put);

struct JUnitCase {
  std::string name;
  std::string failure;  // empty: passed
  std::string output;   // <system-out>: e.g. what is exact and what is known by digest only
};
std::string render_junit(const std::string& suite, const std::vector<JUnitCase>& cases);
// The analysis as CI test cases: ranks_agree, communicator_order, no_hang, evidence_complete,
// job_finished with require_finished (check), and interposer_coverage where NCCL loaded the
// profiler plugin. A case fails whenever exit_code(require_finished) is not 0.
std::vector<JUnitCase> junit_cases(const Analysis& a, bool require_finished);
// One line per problem, for JUnit failure messages and `check`. require_finished (check): a job
// still running whose ranks agree so far is worded incomplete (check exits 4), not clean.
std::string summary_line(const Analysis& a, bool require_finished = false);

}  // namespace lockstep
