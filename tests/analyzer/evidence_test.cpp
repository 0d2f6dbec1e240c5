// A verdict is never stronger than its evidence (docs/analyzer.md "What lockstep promises"):
// files skipped, members missing, histories lost, records dropped, recorders stopped,
// contradictory files and live jobs, each named in every report and never called clean.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis.h"
#include "model_check.h"
#include "op_digest.h"
#include "text_escape.h"
#include "trace_builder.h"
#include "trace_loader.h"
#include "trace_schema.h"
#include "trace_validation.h"

using namespace lockstep;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kComm = "cccccccc00000001";

TraceBuilder two_ranks(int ops = 5) {
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  b.all({0, 1}, kComm, {}, ops);
  return b;
}

struct Run {
  Schedule s;
  Analysis a;
  std::string text, json_text;
  json j;
};

std::unique_ptr<Run> run_schedule(Schedule s, const AnalyzeOptions& opt = {}) {
  auto r = std::make_unique<Run>();
  r->s = std::move(s);
  r->a = analyze(r->s, opt);
  Trace empty;
  auto details = details_from_files(r->s);
  r->text = render_text(r->a, *details);
  r->json_text = render_json(r->a, *details);
  r->j = json::parse(r->json_text);
  return r;
}

std::unique_ptr<Run> run(TraceBuilder& b, const AnalyzeOptions& opt = {}) {
  auto r = std::make_unique<Run>();
  r->s = schedule_from_trace(b.trace());
  r->a = analyze(r->s, opt);
  auto details = details_from_trace(b.trace());
  r->text = render_text(r->a, *details);
  r->json_text = render_json(r->a, *details);
  r->j = json::parse(r->json_text);
  return r;
}

bool has_kind(const Analysis& a, EvidenceKind k) {
  for (auto& e : a.evidence)
    if (e.kind == k) return true;
  return false;
}

std::string kinds(const Analysis& a) {
  std::string s;
  for (auto& e : a.evidence) s += std::string(evidence_kind_name(e.kind)) + ": " + e.detail + "\n";
  return s;
}

void sql(const std::string& path, const std::string& text) { lockstep::testing::exec_sql(path, text); }

// Incomplete: the verdict, every format, and never the word "clean" as the verdict.
void expect_incomplete(const Run& r, const std::string& needle) {
  EXPECT_EQ(r.a.verdict(), Verdict::kIncomplete) << r.text;
  EXPECT_TRUE(r.a.incomplete()) << r.text;
  EXPECT_EQ(r.text.find("lockstep: clean"), std::string::npos) << r.text;
  EXPECT_EQ(r.a.verdict() == Verdict::kClean, false);
  EXPECT_NE(r.text.find(needle), std::string::npos) << "text report should name: " << needle << "\n" << r.text;
  EXPECT_EQ(r.j["verdict"], "incomplete") << r.json_text;
  EXPECT_EQ(r.j["clean"], false) << r.json_text;
  EXPECT_FALSE(r.j["evidence"].empty()) << r.json_text;
  EXPECT_NE(r.j["warnings"].dump().find(needle), std::string::npos) << r.json_text;
  std::string junit;
  for (auto& c : junit_cases(r.a, false))
    if (c.name == "evidence_complete") junit = c.failure;
  EXPECT_NE(junit.find(needle), std::string::npos) << "JUnit evidence_complete must fail naming: " << needle;
}

}  // namespace

TEST(Evidence, complete_finished_job_is_clean) {
  TraceBuilder b = two_ranks();
  auto r = run(b);
  EXPECT_EQ(r->a.verdict(), Verdict::kClean) << r->text << kinds(r->a);
  EXPECT_EQ(r->a.exit_code(false), 0);
  EXPECT_EQ(r->a.exit_code(true), 0);
  EXPECT_EQ(r->j["verdict"], "clean");
  EXPECT_TRUE(r->j["evidence"].empty());
}

TEST(Evidence, truncated_file_of_one_rank_is_incomplete_not_clean) {
  auto dir = lockstep::testing::fresh_dir("ev-truncated");
  lockstep::testing::write_trace(two_ranks(200).trace(), dir);
  std::string f = dir + "/rank-1" + schema::kFileSuffix;
  fs::resize_file(f, fs::file_size(f) / 2);
  auto r = run_schedule(load_schedule(dir));
  expect_incomplete(*r, "rank-1");
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kSkippedFile)) << kinds(r->a);
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kMissingMember)) << kinds(r->a);
}

TEST(Evidence, communicator_member_without_a_file_is_named) {
  auto dir = lockstep::testing::fresh_dir("ev-missing");
  lockstep::testing::write_trace(two_ranks().trace(), dir);
  fs::remove(dir + "/rank-1" + schema::kFileSuffix);
  auto r = run_schedule(load_schedule(dir));
  expect_incomplete(*r, "no usable file of comm rank 1");
}

TEST(Evidence, dropped_records_are_in_json_warnings_and_make_it_incomplete) {
  TraceBuilder b = two_ranks();
  b.trace().processes[1].dropped_records = 17;
  auto r = run(b);
  expect_incomplete(*r, "dropped 17 records");
}

TEST(Evidence, recorder_that_stopped_recording_makes_it_incomplete) {
  TraceBuilder b = two_ranks();
  b.trace().processes[0].meta["recorder_stopped"] = "disk_full";
  b.trace().processes[0].meta["recorder_stopped_detail"] = "ENOSPC on /tmp";
  auto r = run(b);
  expect_incomplete(*r, "disk_full");
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kRecorderStopped));
}

TEST(Evidence, a_trace_recorded_with_benchmark_switches_is_not_evidence) {
  TraceBuilder b = two_ranks();
  b.trace().processes[1].meta["bench_off"] = "8";
  auto r = run(b);
  expect_incomplete(*r, "benchmark switches");
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kBenchmarkSwitches));
}

TEST(Evidence, late_ops_the_retired_range_could_not_take_make_retired_history_unverified) {
  TraceBuilder b = two_ranks();
  b.trace().processes[0].meta["late_retired_ops"] = "3";
  auto r = run(b);
  expect_incomplete(*r, "returned after the size cap retired their range");
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kUnverifiedHistory));
}

// The SIGKILL report of issue 18: the peer completed seq 6, the killed rank's trace (no exit
// record) ends at seq 5. A collective cannot complete without all members: the killed rank
// issued it and its record was lost. Not "never issued", not "in host code".
TEST(Evidence, killed_rank_whose_peer_completed_the_op_lost_history_and_never_issued_is_not_claimed) {
  TraceBuilder b = two_ranks(5);
  b.add(0, kComm, {.completed = true});
  b.running(0).running(1);  // rank 0 blocked later, rank 1 killed by SIGKILL: no exit record
  b.add(0, kComm, {.completed = false});
  auto r = run(b);
  for (auto& d : r->a.divergences) EXPECT_NE(d.kind, FindingKind::kNeverIssued) << d.detail << "\n" << r->text;
  ASSERT_EQ(r->a.unproven.size(), 1u) << r->text;
  EXPECT_TRUE(r->a.unproven[0].peer_completed);
  EXPECT_EQ(r->a.history[1], History::kLost);
  EXPECT_NE(r->a.hang.ranks[1].status, RankStatus::kNoCollective) << r->text;
  EXPECT_EQ(r->text.find("never issued"), std::string::npos) << r->text;
  EXPECT_EQ(r->text.find("host code"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("history lost"), std::string::npos) << r->text;
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kHistoryLost)) << kinds(r->a);
  EXPECT_EQ(r->j["processes"][1]["history"], "lost");
}

// TraceBuilder's issue times (call_index us; its traces end at 5 s), as the loader would read them.
AnalyzeOptions issue_times_of_the_builder() {
  AnalyzeOptions o;
  o.hang.issue_mono_ns = [](int, int64_t call_index) -> std::optional<int64_t> { return call_index * 1000; };
  return o;
}

// Rank 0 waited in seq 6 for longer than a stuck op (HangOptions::stuck_ns) when its trace ends;
// rank 1 exited with a record before issuing it: it never did.
TEST(Evidence, rank_that_exited_with_a_record_did_never_issue) {
  TraceBuilder b = two_ranks(5);
  b.add(0, kComm, {.completed = false});
  b.running(0).stopped(1, "SIGTERM");
  AnalyzeOptions o = issue_times_of_the_builder();
  o.hang.stuck_ns = 1'000'000'000;  // rank 0's op was in flight ~5 s at its trace's end
  auto r = run(b, o);
  ASSERT_EQ(r->a.divergences.size(), 1u) << r->text;
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kNeverIssued);
  EXPECT_TRUE(r->a.unproven.empty()) << r->text;
  EXPECT_EQ(r->a.exit_code(false), 1);
}

// Rank 1 of `b` had not issued seq 6 when the job's end stopped both ranks, rank 0's op young:
// unproven (exit 4), no divergence, no hang. With stuck_ns under the ops' age, the same trace is a
// proven wait in which rank 1 never issued it (exit 1). Returns the first run.
std::unique_ptr<Run> expect_not_issued_yet_unless_stuck(TraceBuilder& b) {
  auto r = run(b, issue_times_of_the_builder());
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  EXPECT_FALSE(r->a.hang.hung) << r->text;
  EXPECT_EQ(r->a.unproven.size(), 1u) << r->text;
  if (!r->a.unproven.empty()) {
    EXPECT_EQ(r->a.unproven[0].stopped, std::vector<int>{1});
  }
  EXPECT_EQ(r->a.exit_code(false), 4) << r->text;
  AnalyzeOptions o = issue_times_of_the_builder();
  o.hang.stuck_ns = 1'000'000'000;
  auto stuck = run(b, o);
  EXPECT_EQ(stuck->a.divergences.size(), 1u) << stuck->text;
  if (!stuck->a.divergences.empty()) {
    EXPECT_EQ(stuck->a.divergences[0].kind, FindingKind::kNeverIssued);
  }
  EXPECT_EQ(stuck->a.exit_code(false), 1);
  return r;
}

// Review G1: a healthy job ended by SIGTERM (scancel, a time limit) stops its ranks at different
// points: rank 0 had issued seq 6 moments before (in flight ~5 s, under stuck_ns), rank 1 was in
// host code about to. Not issued yet, not "never issued": no divergence, no hang, and not clean.
TEST(Evidence, rank_the_jobs_end_stopped_in_host_code_had_not_issued_yet) {
  TraceBuilder b = two_ranks(5);
  b.add(0, kComm, {.completed = false});
  b.stopped(0, "SIGTERM").stopped(1, "SIGTERM");
  auto r = expect_not_issued_yet_unless_stuck(b);
  EXPECT_EQ(r->j["unproven"][0]["stopped_ranks"], json::array({1})) << r->json_text;
  EXPECT_EQ(r->text.find("never issued"), std::string::npos) << r->text;
  // Neither seen to agree there nor to disagree: incomplete (exit 4), named in every format.
  expect_incomplete(*r, "rank 1: collective #6 on comm cccccccc (init0) not issued yet when the job's end stopped it in "
                        "host code; its peers' oldest op in flight was ");
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kStoppedBeforeIssue)) << kinds(r->a);
}

// The same with rank 1's own GPU queue cut short (seen in CI: a healthy 2-rank job SIGTERMed with
// hundreds of ops in flight): its seq 5 in flight, which rank 0 issued too, and not seq 6 yet.
// Its host thread was between two calls on that communicator: not issued yet, not "never issued".
TEST(Evidence, rank_stopped_with_its_own_young_ops_in_flight_had_not_issued_yet) {
  TraceBuilder b = two_ranks(4);
  b.add(0, kComm, {.completed = false});
  b.add(0, kComm, {.completed = false});
  b.add(1, kComm, {.completed = false});
  b.stopped(0, "SIGTERM").stopped(1, "SIGTERM");
  expect_not_issued_yet_unless_stuck(b);
}

namespace {
AnalyzeOptions live_on_node0(TraceBuilder& b) {
  AnalyzeOptions o;
  o.hang.this_host = "node0";
  int64_t newest = 0;
  for (auto& p : b.trace().processes) newest = std::max(newest, p.last_flush_mono_ns);
  o.hang.now_mono_ns = newest + 1'000'000'000;  // one second after the newest flush
  o.hang.pid_alive = [](int64_t) { return true; };
  return o;
}
}  // namespace

TEST(Evidence, live_job_whose_peer_has_not_issued_the_newest_op_is_behind_not_divergent) {
  TraceBuilder b = two_ranks(5);
  b.add(0, kComm, {.completed = false});
  b.add(0, kComm, {.completed = false});
  b.running(0).running(1);
  auto r = run(b, live_on_node0(b));
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  EXPECT_FALSE(r->a.hang.hung) << r->text;
  EXPECT_EQ(r->a.verdict(), Verdict::kBehind) << r->text;
  EXPECT_EQ(r->j["verdict"], "behind");
  // One ladder (Analysis::exit_code): not proven clean, so 4 for analyze and check alike.
  EXPECT_EQ(r->a.exit_code(false), 4);
  EXPECT_EQ(r->a.exit_code(true), 4);
  EXPECT_NE(r->text.find("rank 1 behind"), std::string::npos) << r->text;
  EXPECT_EQ(r->j["unproven"][0]["behind_ranks"], json::array({1})) << r->json_text;
  // JUnit fails where the exit code does (a CI system may read only the XML).
  for (bool check : {false, true}) {
    std::string failed;
    for (auto& c : junit_cases(r->a, check))
      if (!c.failure.empty()) failed += c.name + ": " + c.failure;
    EXPECT_NE(failed.find("evidence_complete: rank 1 behind"), std::string::npos) << failed;
  }
}

// Clean so far, still running: analyze 0; check (the CI gate) 4, and its JUnit fails with it.
TEST(Evidence, live_job_clean_so_far_fails_checks_junit_as_its_exit_code) {
  TraceBuilder b = two_ranks(5);
  b.running(0).running(1);
  auto r = run(b, live_on_node0(b));
  ASSERT_EQ(r->a.verdict(), Verdict::kClean) << r->text;
  ASSERT_FALSE(r->a.live.empty());
  EXPECT_EQ(r->a.exit_code(false), 0);
  EXPECT_EQ(r->a.exit_code(true), 4);
  for (bool check : {false, true}) {
    std::string failed;
    for (auto& c : junit_cases(r->a, check))
      if (!c.failure.empty()) failed += c.name + ": " + c.failure;
    if (check)
      EXPECT_EQ(failed, "job_finished: ranks 0-1 still running: the job has not finished\n");
    else
      EXPECT_EQ(failed, "");
  }
  // check's words are its exit code's: never "clean" beside exit 4 (before: "lockstep: clean: ...
  // (so far: 2 processes still running)" on a gate that failed).
  EXPECT_EQ(summary_line(r->a).rfind("clean: ", 0), 0u) << summary_line(r->a);
  const std::string gate = summary_line(r->a, true);
  EXPECT_EQ(gate.rfind("incomplete: the job is still running (2 processes); so far: ", 0), 0u) << gate;
  auto details = details_from_trace(b.trace());
  ReportOptions ro;
  ro.require_finished = true;
  const std::string text = render_text(r->a, *details, ro);
  EXPECT_EQ(text.find("clean"), std::string::npos) << text;
}

TEST(Evidence, live_job_whose_hang_timeout_fired_keeps_never_issued) {
  TraceBuilder b = two_ranks(5);
  b.add(0, kComm, {.completed = false});
  b.running(0).running(1);
  b.trace().processes[0].hangs.push_back({b.trace().processes[0].last_flush_mono_ns, 0, 1, "no progress for 60s"});
  auto r = run(b, live_on_node0(b));
  ASSERT_EQ(r->a.divergences.size(), 1u) << r->text;
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kNeverIssued);
  EXPECT_TRUE(r->a.hang.hung);
}

TEST(Evidence, live_job_on_another_host_is_not_assumed_alive) {
  TraceBuilder b = two_ranks(5);
  b.add(0, kComm, {.completed = false});
  b.running(0).running(1);
  AnalyzeOptions o = live_on_node0(b);
  o.hang.this_host = "elsewhere";
  auto r = run(b, o);
  EXPECT_NE(r->a.verdict(), Verdict::kClean);
  EXPECT_NE(r->a.verdict(), Verdict::kBehind);
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kHistoryLost)) << kinds(r->a);
}

TEST(Evidence, two_files_claiming_one_global_rank_are_named) {
  TraceBuilder b = two_ranks();
  b.trace().processes[1].global_rank = 0;
  b.trace().processes[1].pid = 4242;
  auto r = run(b);
  expect_incomplete(*r, "global rank 0 is claimed by two files");
}

TEST(Evidence, two_files_claiming_one_comm_rank_are_named) {
  TraceBuilder b = two_ranks();
  b.trace().processes[1].comms[0].rank = 0;
  auto r = run(b);
  expect_incomplete(*r, "rank 0 of comm cccccccc is claimed by two files");
}

TEST(Evidence, members_that_disagree_on_nranks_are_named) {
  TraceBuilder b = two_ranks();
  b.trace().processes[1].comms[0].nranks = 3;
  auto r = run(b);
  expect_incomplete(*r, "has 2 ranks in");
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kNranksMismatch));
}

// The last ranks' files lost, and no communicator spans the job to tell: the job's size as the
// launcher gave it (WORLD_SIZE beside RANK) names them (before: clean).
TEST(Evidence, ranks_missing_above_the_highest_file_are_named_by_the_launchers_world_size) {
  TraceBuilder b = two_ranks();
  for (Process& p : b.trace().processes) {
    p.global_rank_source = "RANK";
    p.meta["launcher_world_size"] = "4";
  }
  auto r = run(b);
  expect_incomplete(*r, "global ranks 0..3 (the job's size as its launcher gave it): no usable file of ranks 2-3");
  EXPECT_EQ(r->a.exit_code(false), 4);
}

// A size that is not the rank's own launcher's (the rank set by LOCKSTEP_RANK), or not a
// size at all, says nothing.
TEST(Evidence, a_world_size_beside_another_rank_variable_or_malformed_is_not_used) {
  for (auto [source, size] : {std::pair{"LOCKSTEP_RANK", "4"}, {"RANK", "4x"}, {"RANK", "-4"}, {"RANK", "0"},
                               {"RANK", "99999999999"}}) {
    TraceBuilder b = two_ranks();
    for (Process& p : b.trace().processes) {
      p.global_rank_source = source;
      p.meta["launcher_world_size"] = size;
    }
    auto r = run(b);
    EXPECT_EQ(r->a.verdict(), Verdict::kClean) << source << " " << size << "\n" << r->text;
  }
}

TEST(Evidence, duplicated_file_is_named) {
  TraceBuilder b = two_ranks();
  b.trace().processes.push_back(b.trace().processes[1]);
  b.trace().processes.back().path = "copy-of-rank-1";
  auto r = run(b);
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kDuplicateFile)) << kinds(r->a);
  EXPECT_NE(r->a.verdict(), Verdict::kClean);
}

TEST(Evidence, two_jobs_in_one_directory_are_named) {
  TraceBuilder b(4);
  b.comm("aaaaaaaa00000001", {0, 1});
  b.comm("bbbbbbbb00000001", {2, 3});
  b.all({0, 1}, "aaaaaaaa00000001", {}, 3);
  b.all({2, 3}, "bbbbbbbb00000001", {}, 3);
  auto r = run(b);
  expect_incomplete(*r, "share no communicator");
  EXPECT_TRUE(has_kind(r->a, EvidenceKind::kMixedJobs));
}

TEST(Evidence, rank_out_of_range_file_is_skipped_by_loader_and_refused_alike_by_the_model_checker) {
  auto dir = lockstep::testing::fresh_dir("ev-range");
  lockstep::testing::write_trace(two_ranks().trace(), dir);
  sql(dir + "/rank-1" + schema::kFileSuffix, "UPDATE comms SET rank=5");
  Schedule s = load_schedule(dir);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].reason.find("out of range"), std::string::npos) << s.skipped[0].reason;
  Schedule checked = load_schedule(dir, {.host_waits = true});
  ASSERT_EQ(checked.skipped.size(), 1u);  // the model checker's input: the same file is left out
  auto r = run_schedule(std::move(s));
  expect_incomplete(*r, "out of range");
  const model::Result m = model::check(checked);
  std::string problems;
  for (auto& p : m.problems) problems += p + "\n";
  EXPECT_NE(problems.find("out of range"), std::string::npos) << problems;
}

// A fuzz finding: a global_rank of 2^31-1 made replay list two billion missing ranks (and size
// a table by it). Out of [-1, 2^24) the file is corrupt, as an out-of-range comm rank is.
TEST(Evidence, global_rank_out_of_range_skips_the_file_with_its_reason) {
  for (const char* rank : {"2147483647", "99999999999", "-7"}) {
    auto dir = lockstep::testing::fresh_dir("ev-grank");
    lockstep::testing::write_trace(two_ranks().trace(), dir);
    sql(dir + "/rank-1" + schema::kFileSuffix, std::string("UPDATE meta SET value='") + rank + "' WHERE key='global_rank'");
    Schedule s = load_schedule(dir);
    ASSERT_EQ(s.skipped.size(), 1u) << rank;
    EXPECT_NE(s.skipped[0].reason.find("global_rank"), std::string::npos) << s.skipped[0].reason;
    auto r = run_schedule(std::move(s));
    expect_incomplete(*r, "global_rank");
  }
}

// A stale copy of rank 1's file (another run's, the same communicators) beside the real one:
// the copy disagrees with rank 0 at collective #3, the real rank 1 does not. Which file is rank
// 1's history is unknown, so no divergence is claimed on it (before: "op type differs", exit 1).
TEST(Evidence, a_finding_on_files_that_contradict_each_other_is_not_claimed) {
  TraceBuilder b = two_ranks();
  Process stale = b.trace().processes[1];
  stale.pid = 4242;
  stale.path = "stale-rank-1";
  for (Op& o : stale.ops)
    if (o.seq == 3) o.op = vocab::Op::AllGather;
  b.trace().processes.push_back(stale);
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete) << r->text;
  EXPECT_EQ(r->a.exit_code(false), 4);
  ASSERT_EQ(r->a.unproven.size(), 1u) << r->text;
  EXPECT_FALSE(r->a.unproven[0].contested.empty());
  EXPECT_NE(r->text.find("not claimed: these files contradict another or themselves"), std::string::npos) << r->text;
  EXPECT_EQ(r->j["unproven"][0]["contested_ranks"], json::array({1})) << r->json_text;
  EXPECT_EQ(r->j["verdict"], "incomplete");
}

// Findings among ranks whose files nobody contradicts are still claimed: comm A of ranks 0-1
// diverges; rank 3 of comm B has a stale copy.
TEST(Evidence, a_finding_among_uncontested_ranks_is_still_claimed) {
  TraceBuilder b(4);
  b.comm("aaaaaaaa", {0, 1}).comm("bbbbbbbb", {2, 3});
  b.all({0, 1}, "aaaaaaaa", {}, 2);
  b.add(0, "aaaaaaaa", {.op = "all_gather", .redop = ""});
  b.add(1, "aaaaaaaa", {.op = "broadcast", .root = 0, .redop = ""});
  b.all({2, 3}, "bbbbbbbb", {}, 3);
  Process stale = b.trace().processes[3];
  stale.pid = 4242;
  stale.path = "stale-rank-3";
  b.trace().processes.push_back(stale);
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << r->text;
  EXPECT_EQ(r->a.verdict(), Verdict::kDivergent) << r->text;
  EXPECT_TRUE(r->a.incomplete()) << "the stale copy is still named";
}

TEST(Evidence, contradictory_directory_is_refused_by_the_model_checker) {
  TraceBuilder b = two_ranks();
  b.trace().processes[1].comms[0].rank = 0;
  EXPECT_THROW(model::check(schedule_from_trace(b.trace())), std::runtime_error);
  auto r = run(b);
  EXPECT_TRUE(r->a.evidence[0].contradictory);
}

// seq was packed as comm_id * 2^32 + seq in SQL: a huge or negative seq shifted into comm_id
// and the file was skipped for an "unknown comm_id". Now it is range-checked and named.
TEST(Evidence, huge_or_negative_seq_is_named_as_such_by_both_loaders) {
  for (const char* seq : {"8589934593", "-3"}) {
    auto dir = lockstep::testing::fresh_dir("ev-seq");
    lockstep::testing::write_trace(two_ranks().trace(), dir);
    sql(dir + "/rank-1" + schema::kFileSuffix, std::string("UPDATE op_rows SET seq=") + seq + " WHERE call_index=(SELECT max(call_index) FROM op_rows)");
    Schedule s = load_schedule(dir);
    ASSERT_EQ(s.skipped.size(), 1u) << seq;
    EXPECT_NE(s.skipped[0].reason.find("has seq " + std::string(seq)), std::string::npos) << s.skipped[0].reason;
    // The row reader (one process's full rows) names it the same way.
    try {
      load_process_file(s.skipped[0].path);
      ADD_FAILURE() << "load_process_file read a file with seq " << seq;
    } catch (const LoadError& e) {
      EXPECT_EQ(std::string(e.what()), s.skipped[0].reason);
    }
  }
}

TEST(Evidence, negative_count_is_refused) {
  auto dir = lockstep::testing::fresh_dir("ev-count");
  lockstep::testing::write_trace(two_ranks().trace(), dir);
  sql(dir + "/rank-0" + schema::kFileSuffix, "UPDATE signatures SET count=-5");
  Schedule s = load_schedule(dir);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].reason.find("count -5"), std::string::npos) << s.skipped[0].reason;
}

// A FIFO blocks open(2) for reading until a writer comes: the loader must not open it. (Before
// the fix this test hung until ctest's timeout.)
TEST(Evidence, fifo_and_directory_named_like_traces_are_skipped_without_opening) {
  auto dir = lockstep::testing::fresh_dir("ev-fifo");
  lockstep::testing::write_trace(two_ranks().trace(), dir);
  ASSERT_EQ(mkfifo((dir + "/fifo" + schema::kFileSuffix).c_str(), 0600), 0);
  fs::create_directory(dir + "/dir" + schema::kFileSuffix);
  Schedule s = load_schedule(dir);
  EXPECT_EQ(s.procs.size(), 2u);
  ASSERT_EQ(s.skipped.size(), 2u);
  std::string reasons = s.skipped[0].reason + " | " + s.skipped[1].reason;
  EXPECT_NE(reasons.find("FIFO"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("directory"), std::string::npos) << reasons;
  Schedule t = load_headers(dir);
  EXPECT_EQ(t.skipped.size(), 2u);
  EXPECT_THROW(load_process_file(dir + "/fifo" + schema::kFileSuffix), LoadError);
}

TEST(Escape, printable_keeps_utf8_and_makes_controls_and_bad_bytes_visible) {
  EXPECT_EQ(printable("node-1.example"), "node-1.example");
  EXPECT_EQ(printable("h\xc3\xa9t\xc3\xa9"), "h\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(printable("a\x1b]0;pwned\x07z"), "a\\x1b]0;pwned\\x07z");
  EXPECT_EQ(printable("line\nverdict: clean\r"), "line\\nverdict: clean\\r");
  EXPECT_EQ(printable("bad\xff\xfe"), "bad\\xff\\xfe");
  EXPECT_EQ(printable("\xc2\x9b" "31m"), "\\u009b31m");       // C1 CSI
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");    // a surrogate is not UTF-8
  EXPECT_TRUE(is_printable("ok"));
  EXPECT_FALSE(is_printable("\x7f"));
}

TEST(Escape, printable_lines_keeps_newlines_and_escapes_every_other_control) {
  EXPECT_EQ(printable_lines("a\nb\x1b[2J\n"), "a\nb\\x1b[2J\n");
  EXPECT_EQ(printable_lines("\r\n\n"), "\\r\n\n");
  EXPECT_EQ(printable_lines(""), "");
  EXPECT_EQ(printable_lines("one line"), "one line");
}

// Crafted strings in a trace file: the text report shows them escaped, and the JSON report is
// valid UTF-8 instead of an uncaught encoder exception (exit 134 before).
TEST(Escape, hostile_strings_in_a_trace_file_are_escaped_in_text_and_json) {
  auto dir = lockstep::testing::fresh_dir("ev-escape-\xff");
  TraceBuilder b = two_ranks();
  b.add(0, kComm, {.op = "broadcast", .root = 0, .completed = false});
  b.add(1, kComm, {.op = "all_gather", .completed = false});
  b.running(0).stopped(1, "SIGTERM");
  lockstep::testing::write_trace(b.trace(), dir);
  sql(dir + "/rank-0" + schema::kFileSuffix,
      "UPDATE meta SET value=CAST(X'6E6F64651B5D303B7077656E6407FF0A7665726469637420636C65616E' AS TEXT) WHERE key='host';"
      "UPDATE comms SET name=CAST(X'FF1B5B326A' AS TEXT)");
  sql(dir + "/rank-1" + schema::kFileSuffix, "UPDATE comms SET name=CAST(X'FF1B5B326A' AS TEXT)");
  auto r = run_schedule(load_schedule(dir));
  EXPECT_EQ(r->text.find('\x1b'), std::string::npos) << r->text;
  EXPECT_EQ(r->text.find('\x07'), std::string::npos);
  EXPECT_EQ(r->text.find("\nverdict clean"), std::string::npos);
  EXPECT_EQ(r->json_text.find('\xff'), std::string::npos);
  EXPECT_NE(r->json_text.find("node\\\\x1b"), std::string::npos) << r->json_text.substr(0, 2000);
}

// SIGUSR1 only flushes: the process lives on, so its trace is a snapshot, not a full history.
TEST(Evidence, sigusr1_flush_is_not_an_exit_record) {
  TraceBuilder b = two_ranks(5);
  b.add(0, kComm, {.completed = false});
  b.running(0).stopped(1, "SIGUSR1");
  auto r = run(b);
  for (auto& d : r->a.divergences) EXPECT_NE(d.kind, FindingKind::kNeverIssued) << r->text;
  EXPECT_EQ(r->a.history[1], History::kLost) << r->text;
}

// The SIGKILL case of issue 18 as it looked live: the killed rank's file was flushed a moment
// ago on this host, but its process is gone. Not behind: its history is lost.
TEST(Evidence, fresh_trace_of_a_process_that_is_gone_is_lost_not_behind) {
  TraceBuilder b = two_ranks(5);
  b.add(0, kComm, {.completed = true});
  b.add(0, kComm, {.completed = false});
  b.running(0).running(1);
  AnalyzeOptions o = live_on_node0(b);
  o.hang.pid_alive = [&](int64_t pid) { return pid != b.trace().processes[1].pid; };
  auto r = run(b, o);
  EXPECT_EQ(r->a.history[1], History::kLost) << r->text;
  EXPECT_EQ(r->a.hang.ranks[1].status, RankStatus::kEnded) << r->text;
  ASSERT_EQ(r->a.unproven.size(), 1u) << r->text;
  EXPECT_TRUE(r->a.unproven[0].lost.size() == 1 && r->a.unproven[0].peer_completed) << r->text;
  EXPECT_NE(r->a.verdict(), Verdict::kBehind);
  EXPECT_NE(r->a.verdict(), Verdict::kClean);
}

// Review G3: a job killed on every rank (SIGKILL, a lost allocation) left one "trace ends without
// an exit record" line per rank, 4,096 of them before anything else. The same gap of many ranks
// is one line with their ranges, in the text, the verdict line, JSON warnings and JUnit; JSON
// `evidence` keeps one entry per rank.
TEST(Evidence, identical_gaps_of_many_ranks_are_one_line) {
  TraceBuilder b(8);
  b.comm(kComm, {0, 1, 2, 3, 4, 5, 6, 7});
  b.all({0, 1, 2, 3, 4, 5, 6, 7}, kComm, {}, 5);
  for (int r = 0; r < 8; ++r) b.running(r);
  auto r = run(b);
  expect_incomplete(*r, "ranks 0-7: trace ends without an exit record");
  EXPECT_NE(r->text.find("incomplete: ranks 0-7: trace ends without an exit record"), std::string::npos) << r->text;
  EXPECT_EQ(r->text.find("incomplete: rank "), std::string::npos) << r->text;
  const std::string verdict = summary_line(r->a);
  EXPECT_NE(verdict.find("ranks 0-7: trace ends without an exit record"), std::string::npos) << verdict;
  EXPECT_EQ(verdict.find("more"), std::string::npos) << verdict;
  ASSERT_EQ(r->j["evidence"].size(), 8u) << r->json_text;
  EXPECT_EQ(r->j["evidence"][3]["ranks"], json::array({3}));
  ASSERT_EQ(r->j["evidence_groups"].size(), 1u) << r->json_text;
  EXPECT_EQ(r->j["evidence_groups"][0]["kind"], "history_lost");
  EXPECT_EQ(r->j["evidence_groups"][0]["ranks"], "0-7");
  EXPECT_EQ(r->j["evidence_groups"][0]["count"], 8);
  size_t lines = 0;
  for (auto& w : r->j["warnings"]) lines += w.get<std::string>().find("trace ends without") != std::string::npos;
  EXPECT_EQ(lines, 1u) << r->json_text;
  const std::string xml = render_junit("s", junit_cases(r->a, false));
  EXPECT_NE(xml.find("history_lost: ranks 0-7: trace ends"), std::string::npos) << xml;
}

// Grouping keys on the issue's kind and its text apart from the rank: other texts, issues about
// no single rank, and a rank that two files claim stay lines of their own.
TEST(Evidence, grouping_keeps_other_texts_and_twice_claimed_ranks_apart) {
  auto about = [](EvidenceKind k, int rank, const std::string& what) {
    EvidenceIssue e;
    e.kind = k;
    e.procs = {rank};
    e.ranks = {rank};
    e.what = what;
    e.detail = "rank " + std::to_string(rank) + ": " + what;
    return e;
  };
  EvidenceIssue skipped;
  skipped.detail = "skipped x.lockstep.sqlite: truncated";
  std::vector<EvidenceIssue> in = {about(EvidenceKind::kHistoryLost, 0, "lost"), skipped,
                                   about(EvidenceKind::kHistoryLost, 1, "lost"),
                                   about(EvidenceKind::kHistoryLost, 2, "lost; a peer completed #6"),
                                   about(EvidenceKind::kRecorderStopped, 3, "lost"),
                                   about(EvidenceKind::kHistoryLost, 1, "lost"),
                                   about(EvidenceKind::kHistoryLost, 3, "lost")};
  auto g = group_evidence(in);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_EQ(g[0].detail, "ranks 0-1,3: lost");
  EXPECT_EQ(g[0].issues, (std::vector<size_t>{0, 2, 6}));
  EXPECT_EQ(g[1].detail, "skipped x.lockstep.sqlite: truncated");
  EXPECT_EQ(g[2].detail, "rank 2: lost; a peer completed #6");
  EXPECT_EQ(g[3].detail, "rank 3: lost");
  EXPECT_EQ(g[3].kind, EvidenceKind::kRecorderStopped);
  EXPECT_EQ(g[4].detail, "rank 1: lost") << "rank 1 claimed twice stays a line of its own";
  EXPECT_EQ(evidence_summary(in, 2), "ranks 0-1,3: lost; skipped x.lockstep.sqlite: truncated; 3 more");
  // Every other rank of 4,096: the line names the first 16 ranges, then counts the rest.
  std::vector<EvidenceIssue> sparse;
  for (int r = 0; r < 4096; r += 2) sparse.push_back(about(EvidenceKind::kHistoryLost, r, "lost"));
  g = group_evidence(sparse);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].ranks.size(), 2048u);
  EXPECT_EQ(g[0].detail, "ranks 0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,... (+2032 more): lost");
}

// Gaps are unknown, never different (issue 29): a record the recorder dropped, or that a
// stopped recorder never wrote, is compared with nothing. The verdict names where each rank's
// evidence stops being whole and is incomplete, unless a difference lies before it.
namespace {

// Two ranks issue the same rotating schedule (all_reduce, all_gather, reduce_scatter, ...):
// a missing record shifts every later collective onto a different op type.
TraceBuilder rotating(int n) {
  static const char* ops[] = {"all_reduce", "all_gather", "reduce_scatter"};
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  for (int k = 0; k < n; ++k) b.all({0, 1}, kComm, {.op = ops[k % 3]});
  return b;
}

void drop_seq(Process& p, int64_t seq) {
  std::erase_if(p.ops, [&](const Op& o) { return o.seq == seq; });
}

const EvidenceIssue* gap_of(const Analysis& a, int rank) {
  for (auto& e : a.evidence)
    if (e.kind == EvidenceKind::kEvidenceGap && e.ranks == std::vector<int>{rank}) return &e;
  return nullptr;
}

}  // namespace

TEST(EvidenceGaps, exactly_one_dropped_record_is_unknown_not_a_different_op) {
  TraceBuilder b = rotating(6);
  drop_seq(b.trace().processes[1], 3);
  b.trace().processes[1].dropped_records = 1;
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;  // was: "op type differs: reduce_scatter vs all_reduce"
  expect_incomplete(*r, "seq 3 is missing");
  const EvidenceIssue* g = gap_of(r->a, 1);
  ASSERT_NE(g, nullptr) << kinds(r->a);
  EXPECT_EQ(g->from_seq, 3);
  EXPECT_EQ(gap_of(r->a, 0), nullptr) << "rank 0's evidence is whole";
  bool named = false;
  for (auto& e : r->j["evidence"]) named |= e["kind"] == "evidence_gap" && e["from_seq"] == 3 && e["comm"] == kComm;
  EXPECT_TRUE(named) << r->json_text;
}

TEST(EvidenceGaps, a_dropped_last_record_named_by_the_drops_table_is_not_never_issued) {
  TraceBuilder b = rotating(5);
  Process& p = b.trace().processes[1];
  drop_seq(p, 5);
  p.dropped_records = 1;
  p.drops_known = true;
  p.drops = {DropRange{0, 5, 5, 1, "queue_full"}};
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;  // was: "1 of 2 members never issued collective #5"
  expect_incomplete(*r, "dropped records from seq 5 on");
  ASSERT_NE(gap_of(r->a, 1), nullptr) << kinds(r->a);
  EXPECT_EQ(gap_of(r->a, 1)->from_seq, 5);
}

TEST(EvidenceGaps, drops_the_file_does_not_locate_leave_its_tail_unknown) {
  TraceBuilder b = rotating(5);
  drop_seq(b.trace().processes[1], 5);
  b.trace().processes[1].dropped_records = 1;  // a file from before the drops table
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  expect_incomplete(*r, "does not say which");
  ASSERT_NE(gap_of(r->a, 1), nullptr) << kinds(r->a);
  EXPECT_EQ(gap_of(r->a, 1)->from_seq, 5);
}

TEST(EvidenceGaps, a_grouped_op_whose_part_rows_were_dropped_is_unknown) {
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  b.all({0, 1}, kComm, {}, 2);
  const OpSpec group{.op = "coalesced", .dtype = "", .count = 0, .redop = "",
                     .parts = {OpPart{vocab::Op::AllReduce, vocab::Dtype::Float32, 32, -1, -1, vocab::RedOp::Sum},
                               OpPart{vocab::Op::AllReduce, vocab::Dtype::Float32, 16, -1, -1, vocab::RedOp::Sum}},
                     .group = 7};
  b.add(0, kComm, group);
  b.add(1, kComm, group).parts.clear();  // its op row kept, its part rows dropped
  b.all({0, 1}, kComm, {}, 2);
  b.trace().processes[1].dropped_records = 2;
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;  // was: "grouped calls differ: coalesced [...] vs coalesced (no parts)"
  expect_incomplete(*r, "part rows of its grouped op at seq 3 were dropped");
}

// Two communicators issued in the same order by both ranks (A, B, A, B, ...); rank 1's
// recorder dropped one record. Past the hole its ordinals are unknown: no order inversion may
// be read into them (before: "rank 1 issues A #2 before B #4, rank 0 after it").
namespace {
TraceBuilder interleaved(int steps) {
  TraceBuilder b(2);
  b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
  for (int k = 0; k < steps; ++k) {
    b.all({0, 1}, "aaaa", {});
    b.all({0, 1}, "bbbb", {.op = "all_gather", .redop = ""});
  }
  return b;
}
// Rank 1's recorder dropped the op at `seq` of communicator `comm` (its `comm_index` in the
// file), and says so.
void drop_recorded_op(Process& p, const std::string& comm, int comm_index, int64_t seq) {
  std::erase_if(p.ops, [&](const Op& o) { return p.comms[size_t(o.comm)].hash == comm && o.seq == seq; });
  p.dropped_records = 1;
  p.drops_known = true;
  p.drops = {DropRange{comm_index, seq, seq, 1, "queue_full"}};
}
void expect_no_inversion_past_a_hole(const std::string& comm, int comm_index) {
  TraceBuilder b = interleaved(6);
  drop_recorded_op(b.trace().processes[1], comm, comm_index, 3);
  auto r = run(b);
  EXPECT_TRUE(r->a.inversions.empty()) << r->text;
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete) << r->text;
}
}  // namespace

TEST(EvidenceGaps, a_hole_in_the_later_communicator_is_no_order_inversion) {
  expect_no_inversion_past_a_hole("bbbb", 1);
}

TEST(EvidenceGaps, a_hole_in_the_earlier_communicator_is_no_order_inversion) {
  expect_no_inversion_past_a_hole("aaaa", 0);
}

// Before the hole the order is still compared: an inversion both ranks hold whole is found.
TEST(EvidenceGaps, an_inversion_before_a_hole_is_still_found) {
  TraceBuilder b(2);
  b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
  b.add(0, "aaaa", {});
  b.add(0, "bbbb", {.op = "all_gather", .redop = ""});
  b.add(1, "bbbb", {.op = "all_gather", .redop = ""});
  b.add(1, "aaaa", {});
  for (int k = 0; k < 4; ++k) {
    b.all({0, 1}, "aaaa", {});
    b.all({0, 1}, "bbbb", {.op = "all_gather", .redop = ""});
  }
  drop_recorded_op(b.trace().processes[1], "bbbb", 1, 4);
  auto r = run(b);
  ASSERT_EQ(r->a.inversions.size(), 1u) << r->text;
  EXPECT_EQ(r->a.inversions[0].ordinal, 1);
  EXPECT_EQ(r->a.inversions[0].ordinal_b, 1);
}

TEST(EvidenceGaps, a_recorder_stopped_mid_run_is_compared_up_to_its_hole) {
  // The ulimit -f report: rank 1's rows resume after a hole; its seq 6 was compared with rank
  // 0's seq 4.
  TraceBuilder b = rotating(9);
  Process& p = b.trace().processes[1];
  drop_seq(p, 4);
  drop_seq(p, 5);
  p.meta["recorder_stopped"] = "file_size_limit";
  p.finished = false;
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete) << r->text;
  ASSERT_NE(gap_of(r->a, 1), nullptr) << kinds(r->a);
  EXPECT_EQ(gap_of(r->a, 1)->from_seq, 4);
  EXPECT_NE(r->text.find("rank 1: comm"), std::string::npos) << r->text;
}

TEST(EvidenceGaps, a_divergence_before_the_hole_is_still_a_divergence) {
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  b.all({0, 1}, kComm, {}, 1);
  b.add(0, kComm, {.count = 1024});
  b.add(1, kComm, {.count = 2048});
  b.all({0, 1}, kComm, {.op = "all_gather"}, 4);
  drop_seq(b.trace().processes[1], 4);
  b.trace().processes[1].dropped_records = 1;
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << r->text;
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kCount);
  EXPECT_EQ(r->a.divergences[0].ordinal, 2);
  EXPECT_EQ(r->a.verdict(), Verdict::kDivergent);
  ASSERT_NE(gap_of(r->a, 1), nullptr) << "the hole is still named";
}

TEST(EvidenceGaps, a_divergence_after_the_hole_between_whole_members_is_found) {
  // Three ranks: rank 2 lost seq 2; ranks 0 and 1 hold everything and differ at seq 4.
  TraceBuilder b(3);
  b.comm(kComm, {0, 1, 2});
  b.all({0, 1, 2}, kComm, {}, 3);
  b.add(0, kComm, {.count = 1024});
  b.add(1, kComm, {.count = 2048});
  b.add(2, kComm, {.count = 1024});
  drop_seq(b.trace().processes[2], 2);
  b.trace().processes[2].dropped_records = 1;
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << r->text;
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kCount);
  EXPECT_EQ(r->a.divergences[0].ordinal, 4);
  EXPECT_EQ(r->a.divergences[0].members, 2u) << "rank 2 is past its hole: not compared";
}

TEST(EvidenceGaps, a_capped_member_whose_hole_the_size_cap_retired_is_not_a_digest_mismatch) {
  // Rank 1 lost seq 6. Its recorder's digest chain and retired count skipped it (it counts the
  // collectives it saw), so its checkpoint "#8" is at seq 9 and rank 0's at seq 8: the digests
  // differ although the job did not. Both retired through seq 10.
  TraceBuilder b = rotating(16);
  drop_seq(b.trace().processes[1], 6);
  b.trace().processes[1].dropped_records = 1;
  b.trace().processes[1].drops_known = true;
  b.trace().processes[1].drops = {DropRange{0, 6, 6, 1, "queue_full"}};
  for (int proc : {0, 1}) {
    Process& p = b.trace().processes[proc];
    Comm& c = p.comms[0];
    p.checkpoint_interval = 4;
    uint64_t d = digest::kEmpty;
    int64_t k = 0;
    for (const Op& o : p.ops) {
      d = digest::chain(d, signature_digest(Signature{o.op, o.dtype, o.count, o.root, o.peer, o.redop, o.parts,
                                                      OpClass::kCollective}));
      if (digest::is_checkpoint(++k, 4)) c.checkpoints.push_back({k, o.seq, d});
      if (o.seq == 10) c.retired_collectives = k, c.retired_digest = d, c.retired_through_seq = 10;
    }
    std::erase_if(p.ops, [](const Op& o) { return o.seq <= 10; });
  }
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;  // was: digest_mismatch between #5 and #8
  EXPECT_FALSE(has_kind(r->a, EvidenceKind::kDigestInconsistent)) << kinds(r->a);
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete) << r->text;
  ASSERT_NE(gap_of(r->a, 1), nullptr) << kinds(r->a);
  EXPECT_EQ(gap_of(r->a, 1)->from_seq, 6);
}

// The recorder's stop point (issue 29): a stopped recorder writes, per communicator, the first
// seq it did not commit (a drops row, reason recorder_stopped, last_seq open). Every seq from
// there on is unknown: named, never "never issued", never a divergence.
namespace {

void stop_at(Process& p, int64_t seq, bool with_row) {
  std::erase_if(p.ops, [&](const Op& o) { return o.seq >= seq; });
  p.meta["recorder_stopped"] = "file_size_limit";
  p.finished = false;
  p.drops_known = true;
  if (with_row) {
    DropRange d{0, seq, INT64_MAX, 0, "recorder_stopped"};
    d.stop_point = true;
    p.drops.push_back(d);
  }
}

}  // namespace

TEST(EvidenceGaps, a_stopped_recorders_stop_point_is_where_its_evidence_ends) {
  for (bool with_row : {true, false}) {
    TraceBuilder b = rotating(9);
    stop_at(b.trace().processes[1], 5, with_row);
    auto r = run(b);
    EXPECT_TRUE(r->a.divergences.empty()) << r->text;
    expect_incomplete(*r, "its recorder stopped (file_size_limit) before seq 5");
    const EvidenceIssue* g = gap_of(r->a, 1);
    ASSERT_NE(g, nullptr) << kinds(r->a);
    EXPECT_EQ(g->from_seq, 5);
    EXPECT_EQ(g->gap_cause, "recorder_stopped");
    bool named = false;
    for (auto& e : r->j["evidence"])
      named |= e["kind"] == "evidence_gap" && e["from_seq"] == 5 && e.value("gap_cause", "") == "recorder_stopped";
    EXPECT_TRUE(named) << r->json_text;
    EXPECT_EQ(r->text.find("never issued"), std::string::npos) << r->text;
  }
}

TEST(EvidenceGaps, a_stop_point_row_before_the_files_last_row_wins) {
  // Rows past the stop point (written out of seq order, committed) are not whole evidence.
  TraceBuilder b = rotating(9);
  Process& p = b.trace().processes[1];
  p.meta["recorder_stopped"] = "disk_full";
  p.finished = false;
  p.drops_known = true;
  DropRange d{0, 6, INT64_MAX, 0, "recorder_stopped"};
  d.stop_point = true;
  p.drops.push_back(d);
  std::erase_if(p.ops, [](const Op& o) { return o.seq == 7; });  // 6 and 8, 9 kept
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  ASSERT_NE(gap_of(r->a, 1), nullptr) << kinds(r->a);
  EXPECT_EQ(gap_of(r->a, 1)->from_seq, 6);
  EXPECT_EQ(gap_of(r->a, 1)->gap_cause, "recorder_stopped");
}

TEST(EvidenceGaps, capped_windows_ending_at_different_collectives_are_not_a_divergence) {
  // Both ranks retired through seq 10 (no checkpoint in their windows); rank 1's recorder
  // stopped after seq 13, rank 0 holds 11..16. The windows end at different collectives.
  TraceBuilder b = rotating(16);
  for (int proc : {0, 1}) {
    Process& p = b.trace().processes[proc];
    Comm& c = p.comms[0];
    uint64_t d = digest::kEmpty;
    int64_t k = 0;
    for (const Op& o : p.ops) {
      d = digest::chain(d, signature_digest(Signature{o.op, o.dtype, o.count, o.root, o.peer, o.redop, o.parts,
                                                      OpClass::kCollective}));
      ++k;
      if (o.seq == 10) c.retired_collectives = k, c.retired_digest = d, c.retired_through_seq = 10;
    }
    std::erase_if(p.ops, [](const Op& o) { return o.seq <= 10; });
  }
  stop_at(b.trace().processes[1], 14, true);
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete) << r->text;
  ASSERT_NE(gap_of(r->a, 1), nullptr) << kinds(r->a);
  EXPECT_EQ(gap_of(r->a, 1)->from_seq, 14);
  EXPECT_EQ(r->text.find("never issued"), std::string::npos) << r->text;
}

// Hang explanations built only on records we have.
TEST(EvidenceGaps, a_blocked_rank_does_not_say_a_peer_with_a_hole_has_not_issued_it) {
  TraceBuilder b = rotating(6);
  b.add(0, kComm, {.completed = false});  // seq 7, in flight when rank 0 was killed
  b.stopped(0, "SIGTERM");
  Process& p = b.trace().processes[1];
  drop_seq(p, 3);
  p.dropped_records = 1;
  p.drops_known = true;
  p.drops = {DropRange{0, 3, 3, 1, "queue_full"}};
  auto r = run(b);
  const RankHang& rh = r->a.hang.ranks[0];
  ASSERT_FALSE(rh.blocked.empty()) << r->text;
  ASSERT_EQ(rh.blocked[0].waits.size(), 1u) << r->text;
  EXPECT_TRUE(rh.blocked[0].waits[0].unknown) << rh.blocked[0].waits[0].reason;
  EXPECT_EQ(r->text.find("has not issued it"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("whether it issued it is unknown"), std::string::npos) << r->text;
}

TEST(EvidenceGaps, a_rank_blocked_past_its_own_hole_claims_no_wait) {
  // Rank 1 lost seq 3: its op at seq 7 sits at position 6, but which collective it is, is
  // unknown. Rank 0 finished after 5 collectives: "rank 0 has not issued #6" would be a claim
  // built on rank 1's missing record.
  TraceBuilder b = rotating(5);
  b.add(1, kComm, {.op = "reduce_scatter"});                // seq 6
  b.add(1, kComm, {.op = "all_reduce", .completed = false});  // seq 7, in flight
  b.stopped(1, "SIGTERM");
  Process& p = b.trace().processes[1];
  drop_seq(p, 3);
  p.dropped_records = 1;
  p.drops_known = true;
  p.drops = {DropRange{0, 3, 3, 1, "queue_full"}};
  auto r = run(b);
  const RankHang& rh = r->a.hang.ranks[1];
  ASSERT_FALSE(rh.blocked.empty()) << r->text;
  EXPECT_EQ(rh.blocked[0].own_hole_from_seq, 3) << r->text;
  EXPECT_TRUE(rh.blocked[0].waits.empty()) << r->text;
  EXPECT_EQ(r->text.find("has not issued it"), std::string::npos) << r->text;
  EXPECT_EQ(r->text.find("every peer issued it"), std::string::npos) << r->text;
}

TEST(EvidenceGaps, a_stopped_recorders_ops_in_flight_prove_no_hang) {
  // Completions after the stop were never written: rank 1's last op reads as in flight. Rank
  // 0's trace ends without an exit record after #6 (no peer finished without #7).
  TraceBuilder b = rotating(6);
  b.add(1, kComm, {.op = "all_reduce", .completed = false});
  b.running(0);
  stop_at(b.trace().processes[1], 8, true);
  auto r = run(b);
  EXPECT_FALSE(r->a.hang.hung) << r->text;
  EXPECT_NE(r->a.verdict(), Verdict::kHang) << r->text;
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete) << r->text;
}

// replay --model: a rank's schedule is modelled up to its hole; peers that wait past it wait
// for records we do not have: no deadlock, no "never issues".
TEST(EvidenceGaps, the_model_check_stops_a_rank_at_its_hole_and_claims_no_deadlock) {
  TraceBuilder b = rotating(9);
  stop_at(b.trace().processes[1], 5, true);
  const model::Result m = model::check(schedule_from_trace(b.trace()));
  EXPECT_NE(m.verdict, model::Verdict::kDeadlock) << model::format_text(m);
  EXPECT_NE(m.verdict, model::Verdict::kMayDeadlock) << model::format_text(m);
  const std::string text = model::format_text(m), js = model::format_json(m);
  EXPECT_EQ(text.find("never issues"), std::string::npos) << text;
  EXPECT_NE(text.find("from seq 5 on are missing (recorder_stopped)"), std::string::npos) << text;
  EXPECT_NE(js.find("from seq 5 on are missing (recorder_stopped)"), std::string::npos) << js;
  for (const model::RankWitness& w : m.ranks) EXPECT_FALSE(w.never_issued) << w.waits_for;
}

TEST(EvidenceGaps, the_model_check_still_finds_a_mismatch_before_the_hole) {
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  b.all({0, 1}, kComm, {}, 2);
  b.add(0, kComm, {.count = 1024});
  b.add(1, kComm, {.count = 2048});
  b.all({0, 1}, kComm, {}, 4);
  stop_at(b.trace().processes[1], 5, true);
  const model::Result m = model::check(schedule_from_trace(b.trace()));
  EXPECT_EQ(m.verdict, model::Verdict::kDeadlock) << model::format_text(m);
}
