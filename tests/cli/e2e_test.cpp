// End to end on the CPU NCCL fixture: real programs (tests/cli/programs/scenarios.cpp and the
// seed demo) recorded under `lockstep run`, then `lockstep analyze --json` / `check`, asserting
// what they report. Hang scenarios are stopped by the launcher's timeout (SIGTERM: the recorder
// flushes), exactly as a scheduler would stop a hung job.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_runner.h"

using lockstep::testing::ProcResult;
using lockstep::testing::run_program;
using nlohmann::json;

namespace {

std::string temp_dir(const std::string& name) {
  std::string t = (std::filesystem::temp_directory_path() / ("lockstep-e2e-" + name + "-XXXXXX")).string();
  if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
  return t;
}

std::map<std::string, std::string> job_env() {
  return {{"LD_LIBRARY_PATH", FIXTURE_LIB_DIR}, {"LOCKSTEP_PRELOAD", LOCKSTEP_RECORDER}};
}

struct Recorded {
  std::string dir;
  ProcResult job;
  std::string describe() const { return "job exit " + std::to_string(job.exit_code) + "\nstderr:\n" + job.err; }
};

// `lockstep run -o DIR -- lockstep-launch -n N --timeout T -- PROGRAM ARGS...`
Recorded record(const std::string& name, int nranks, double launcher_timeout, std::vector<std::string> program,
                std::vector<std::string> run_flags = {}, bool quiet = true) {
  Recorded r;
  r.dir = temp_dir(name);
  std::vector<std::string> argv = {LOCKSTEP_EXE, "run", "-o", r.dir};
  argv.insert(argv.end(), run_flags.begin(), run_flags.end());
  for (std::string a : {"--", LAUNCHER, "-n"}) argv.push_back(a);
  argv.push_back(std::to_string(nranks));
  argv.push_back("--timeout");
  argv.push_back(std::to_string(launcher_timeout));
  if (quiet) argv.push_back("--quiet");
  argv.push_back("--");
  argv.insert(argv.end(), program.begin(), program.end());
  r.job = run_program(argv, job_env(), launcher_timeout + 30);
  return r;
}

Recorded scenario(const std::string& mode, int nranks = 2, double timeout = 3) {
  return record(mode, nranks, timeout, {SCENARIOS, mode});
}

struct Analysis {
  int exit_code = -1;
  json j;
  std::string raw;
};

// A lockstep command's exit code and JSON output ({} when it printed none).
Analysis run_json(const std::vector<std::string>& argv, double timeout_s) {
  ProcResult r = run_program(argv, {}, timeout_s);
  Analysis a;
  a.exit_code = r.exit_code;
  a.raw = r.out + r.err;
  try {
    a.j = json::parse(r.out);
  } catch (const std::exception& e) {
    a.j = json::object();
  }
  return a;
}

Analysis analyze(const std::string& dir) { return run_json({LOCKSTEP_EXE, "analyze", dir, "--json"}, 30); }

// replay --model --json (its verdict and witness).
Analysis model(const std::string& dir) { return run_json({LOCKSTEP_EXE, "replay", "--model", "--json", dir}, 60); }

const json& side(const json& finding, int rank) {
  for (auto& s : finding["sides"])
    if (s["rank"] == rank) return s;
  static json none;
  return none;
}

// A two-rank hang at op 4 of the world communicator, of the given kind.
void expect_divergence(const std::string& mode, const std::string& kind) {
  auto rec = scenario(mode);
  EXPECT_EQ(rec.job.exit_code, 124) << "the launcher stops the hung job\n" << rec.describe();
  auto a = analyze(rec.dir);
  ASSERT_EQ(a.exit_code, 1) << a.raw;
  const json& f = a.j["first_divergence"];
  ASSERT_TRUE(f.is_object()) << a.raw;
  EXPECT_EQ(f["kind"], kind) << a.raw;
  EXPECT_EQ(f["ordinal"], 4) << "3 agreeing all_reduces come first\n" << a.raw;
  EXPECT_EQ(a.j["hang"]["hung"], true) << a.raw;
  std::filesystem::remove_all(rec.dir);
}

}  // namespace

TEST(E2E, seed_demo_names_reduce_scatter_on_rank_0_and_all_to_all_on_rank_1_at_seq_3750_with_stacks) {
  auto rec = record("seed", 2, 10, {SEED_DEADLOCK}, {"--stacks", "native"});
  EXPECT_EQ(rec.job.exit_code, 124) << rec.describe();
  auto a = analyze(rec.dir);
  ASSERT_EQ(a.exit_code, 1) << a.raw;
  const json& f = a.j["first_divergence"];
  ASSERT_TRUE(f.is_object()) << a.raw;
  EXPECT_EQ(f["kind"], "op_type");
  EXPECT_EQ(f["seq"], 3750);
  EXPECT_EQ(side(f, 0)["op"], "reduce_scatter") << f.dump(2);
  EXPECT_EQ(side(f, 1)["op"], "all_to_all") << f.dump(2);
  EXPECT_FALSE(side(f, 0)["stack"].empty()) << "rank 0 has a stack\n" << f.dump(2);
  EXPECT_FALSE(side(f, 1)["stack"].empty()) << "rank 1 has a stack\n" << f.dump(2);
  std::filesystem::remove_all(rec.dir);
}

TEST(E2E, count_mismatch_is_reported_as_count) { expect_divergence("count", "count"); }
TEST(E2E, dtype_mismatch_is_reported_as_dtype) { expect_divergence("dtype", "dtype"); }
TEST(E2E, reduction_op_mismatch_is_reported_as_redop) { expect_divergence("redop", "redop"); }
TEST(E2E, broadcast_root_mismatch_is_reported_as_root) { expect_divergence("root", "root"); }
TEST(E2E, different_collectives_are_reported_as_op_type) { expect_divergence("optype", "op_type"); }
TEST(E2E, all_to_all_whose_splits_do_not_pair_up_is_reported_as_split) { expect_divergence("a2a-split", "all_to_all_split"); }

TEST(E2E, unmatched_send_is_reported_as_pairing_and_the_sender_waits_for_the_receiver) {
  auto rec = scenario("p2p-unmatched");
  auto a = analyze(rec.dir);
  ASSERT_EQ(a.exit_code, 1) << a.raw;
  EXPECT_EQ(a.j["first_divergence"]["kind"], "p2p_pairing") << a.raw;
  const json& r0 = a.j["hang"]["ranks"][0];
  EXPECT_EQ(r0["status"], "blocked") << a.raw;
  EXPECT_EQ(r0["blocked"][0]["waits_for"][0]["rank"], 1) << a.raw;
  std::filesystem::remove_all(rec.dir);
}

TEST(E2E, send_and_receive_of_different_sizes_are_reported_as_p2p_count) {
  auto rec = scenario("p2p-count");
  auto a = analyze(rec.dir);
  ASSERT_EQ(a.exit_code, 1) << a.raw;
  EXPECT_EQ(a.j["first_divergence"]["kind"], "p2p_count") << a.raw;
  EXPECT_EQ(side(a.j["first_divergence"], 0)["op"], "send") << a.raw;
  EXPECT_EQ(side(a.j["first_divergence"], 1)["op"], "recv") << a.raw;
  std::filesystem::remove_all(rec.dir);
}

TEST(E2E, send_and_receive_on_opposite_sides_of_a_collective_are_reported_as_p2p_interleave) {
  auto rec = scenario("p2p-interleave");
  auto a = analyze(rec.dir);
  ASSERT_EQ(a.exit_code, 1) << a.raw;
  EXPECT_EQ(a.j["first_divergence"]["kind"], "p2p_interleave") << a.raw;
  std::filesystem::remove_all(rec.dir);
}

// Rank 2 sits in host code; ranks 0 and 1 wait in collective #4 until the launcher's SIGTERM at
// 3 s. The recorder's hang timeout (1 s) fired while they waited: rank 2 never issued it.
TEST(E2E, rank_stuck_in_host_code_never_issued_and_is_in_no_collective) {
  auto rec = record("never", 3, 3, {SCENARIOS, "never"}, {"--hang-timeout", "1"});
  auto a = analyze(rec.dir);
  ASSERT_EQ(a.exit_code, 1) << a.raw;
  const json& f = a.j["first_divergence"];
  EXPECT_EQ(f["kind"], "never_issued") << a.raw;
  EXPECT_EQ(f["odd_ranks"], json::array({2})) << a.raw;
  EXPECT_EQ(side(f, 2)["issued"], false) << a.raw;
  // Stopped by the launcher's SIGTERM while in host code, like the others: not dead.
  EXPECT_EQ(a.j["hang"]["ranks"][2]["status"], "no_collective") << a.raw;
  EXPECT_EQ(a.j["hang"]["ranks"][0]["status"], "blocked") << a.raw;
  // The model checker says so too: rank 2 never issues it (a deadlock of the recorded schedules).
  const Analysis m = model(rec.dir);
  EXPECT_EQ(m.j["verdict"], "deadlock") << m.raw;
  EXPECT_NE(m.raw.find("rank 2, which never issues collective #4"), std::string::npos) << m.raw;
  std::filesystem::remove_all(rec.dir);
}

// The same job without a hang timeout: its peers had waited 3 s when the launcher's SIGTERM
// stopped rank 2 in host code, far under the 60 s of a stuck op. A job stopped mid-step looks
// the same (review G1): rank 2 had not issued it yet, unknown whether it would have. Not
// "never issued", not clean: incomplete (4), named.
TEST(E2E, rank_the_launcher_stopped_in_host_code_moments_after_its_peers_issued_is_not_proven_divergent) {
  auto rec = scenario("never", 3);
  auto a = analyze(rec.dir);
  ASSERT_EQ(a.exit_code, 4) << a.raw;
  EXPECT_TRUE(a.j["divergences"].empty()) << a.raw;
  EXPECT_EQ(a.j["hang"]["hung"], false) << a.raw;
  bool named = false;
  for (auto& e : a.j["evidence"]) named |= e["kind"] == "stopped_before_issue" && e["ranks"] == json::array({2});
  EXPECT_TRUE(named) << a.raw;
  EXPECT_EQ(a.j["unproven"][0]["stopped_ranks"], json::array({2})) << a.raw;
  // replay --model: rank 2's schedule ends where the job stopped it, so no deadlock is proven
  // there (not "never issues"), and the evidence stays incomplete (4).
  const Analysis m = model(rec.dir);
  EXPECT_EQ(m.exit_code, 4) << m.raw;
  EXPECT_EQ(m.j["verdict"], "unknown") << m.raw;
  EXPECT_EQ(m.raw.find("never issues"), std::string::npos) << m.raw;
  EXPECT_NE(m.raw.find("rank 2, which the job's end stopped in host code before collective #4"), std::string::npos)
      << m.raw;
  std::filesystem::remove_all(rec.dir);
}

TEST(E2E, rank_that_died_is_dead_and_its_peer_waits_for_it) {
  auto rec = scenario("dead");
  auto a = analyze(rec.dir);
  ASSERT_EQ(a.exit_code, 1) << a.raw;
  EXPECT_EQ(a.j["hang"]["ranks"][1]["status"], "dead") << a.raw;
  EXPECT_EQ(a.j["hang"]["ranks"][0]["status"], "blocked") << a.raw;
  EXPECT_EQ(a.j["hang"]["ranks"][0]["blocked"][0]["waits_for"][0]["rank"], 1) << a.raw;
  std::filesystem::remove_all(rec.dir);
}

// Issue 18: after SIGKILL of rank 1 (no exit record; what its recorder had not flushed is
// lost) the report said "never issued" for ops rank 0 had completed with it, and put rank 1
// "in no collective (host code?)". Now: its history after the last flush is lost, named as
// incomplete evidence, and never_issued is not claimed for it.
TEST(E2E, rank_killed_by_sigkill_has_lost_history_not_never_issued) {
  auto rec = scenario("killed", 2, 8);
  auto a = analyze(rec.dir);
  ASSERT_TRUE(a.j.is_object() && a.j.contains("hang")) << a.raw;
  EXPECT_NE(a.exit_code, 0) << a.raw;
  EXPECT_NE(a.exit_code, 134) << a.raw;
  for (auto& d : a.j["divergences"]) EXPECT_NE(d["kind"], "never_issued") << a.raw;
  const json& r1 = a.j["hang"]["ranks"][1];
  EXPECT_NE(r1["status"], "no_collective") << a.raw;
  EXPECT_EQ(a.j["processes"][1]["history"], "lost") << a.raw;
  bool named = false;
  for (auto& e : a.j["evidence"]) named |= e["kind"] == "history_lost" && e["ranks"] == json::array({1});
  EXPECT_TRUE(named) << a.raw;
  ProcResult text = run_program({LOCKSTEP_EXE, "analyze", rec.dir}, {}, 30);
  EXPECT_EQ(text.out.find("never issued"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("host code"), std::string::npos) << text.out;
  ProcResult check = run_program({LOCKSTEP_EXE, "check", rec.dir}, {}, 30);
  EXPECT_NE(check.exit_code, 0) << check.out;
  std::filesystem::remove_all(rec.dir);
}

TEST(E2E, opposite_order_on_one_stream_deadlocks_in_a_cycle_across_two_communicators) {
  auto rec = scenario("cycle");
  EXPECT_EQ(rec.job.exit_code, 124) << rec.describe();
  auto a = analyze(rec.dir);
  ASSERT_EQ(a.exit_code, 1) << a.raw;
  ASSERT_EQ(a.j["hang"]["cycles"].size(), 1u) << a.raw;
  EXPECT_EQ(a.j["hang"]["cycles"][0]["communicators"], 2) << a.raw;
  EXPECT_EQ(a.j["order_inversions"].size(), 1u) << a.raw;
  std::filesystem::remove_all(rec.dir);
}

TEST(E2E, opposite_order_on_separate_streams_completes_but_analyze_and_check_report_the_inversion) {
  auto rec = scenario("inversion", 2, 20);
  ASSERT_EQ(rec.job.exit_code, 0) << "the run completes\n" << rec.describe();
  auto a = analyze(rec.dir);
  EXPECT_EQ(a.exit_code, 1) << a.raw;
  ASSERT_EQ(a.j["order_inversions"].size(), 1u) << a.raw;
  EXPECT_EQ(a.j["first_divergence"]["kind"], "order_inversion") << a.raw;
  EXPECT_EQ(a.j["hang"]["hung"], false) << a.raw;
  auto check = run_program({LOCKSTEP_EXE, "check", rec.dir}, {}, 30);
  EXPECT_EQ(check.exit_code, 1) << check.out << check.err;
  EXPECT_NE(check.out.find("order inversion between comm"), std::string::npos) << check.out;
  std::filesystem::remove_all(rec.dir);
}

TEST(E2E, correct_program_with_splits_groups_and_uneven_all_to_all_is_clean_and_matches_its_baseline) {
  auto rec = scenario("clean", 4, 20);
  ASSERT_EQ(rec.job.exit_code, 0) << rec.describe();
  auto a = analyze(rec.dir);
  EXPECT_EQ(a.exit_code, 0) << a.raw;
  EXPECT_EQ(a.j["clean"], true) << a.raw;
  EXPECT_EQ(a.j["comms"].size(), 5u) << "world + 2 tp + 2 dp\n" << a.raw;
  std::string base = rec.dir + ".baseline";
  auto bless = run_program({LOCKSTEP_EXE, "check", rec.dir, "--write-baseline", base}, {}, 30);
  ASSERT_EQ(bless.exit_code, 0) << bless.out << bless.err;
  auto again = scenario("clean", 4, 20);
  auto same = run_program({LOCKSTEP_EXE, "check", again.dir, "--baseline", base}, {}, 30);
  EXPECT_EQ(same.exit_code, 0) << "a second run (new comm hashes) matches\n" << same.out << same.err;
  auto other = scenario("pipeline", 4, 20);
  auto differs = run_program({LOCKSTEP_EXE, "check", other.dir, "--baseline", base}, {}, 30);
  EXPECT_EQ(differs.exit_code, 3) << differs.out << differs.err;
  for (auto& d : {rec.dir, again.dir, other.dir}) std::filesystem::remove_all(d);
  std::filesystem::remove(base);
}

TEST(E2E, pipeline_point_to_point_between_neighbour_pairs_passes_check) {
  auto rec = scenario("pipeline", 4, 20);
  ASSERT_EQ(rec.job.exit_code, 0) << rec.describe();
  auto check = run_program({LOCKSTEP_EXE, "check", rec.dir}, {}, 30);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  std::filesystem::remove_all(rec.dir);
}

namespace {
std::atomic<int> g_job_pid{0};
void remember_job(int pid) { g_job_pid = pid; }
}  // namespace

TEST(E2E, analyze_works_on_the_trace_of_a_job_that_is_still_hung) {
  std::string dir = temp_dir("live");
  ProcResult job;
  std::thread t([&] {
    job = run_program({LOCKSTEP_EXE, "run", "-o", dir, "--", LAUNCHER, "-n", "2", "--timeout", "40", "--quiet", "--",
                       SCENARIOS, "count"},
                      job_env(), 50, remember_job);
  });
  Analysis a;
  // The ranks hang at op 4 within a second or two; the recorder commits every few ms.
  for (int i = 0; i < 60; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    a = analyze(dir);
    if (a.exit_code == 1 && a.j["first_divergence"].is_object()) break;
  }
  int pid = g_job_pid.load();
  if (pid > 0) kill(-pid, SIGTERM);  // the whole job: lockstep run, launcher, ranks
  t.join();
  ASSERT_EQ(a.exit_code, 1) << a.raw;
  EXPECT_EQ(a.j["first_divergence"]["kind"], "count") << a.raw;
  EXPECT_EQ(a.j["hang"]["ranks"][0]["status"], "blocked") << "alive and blocked, not dead\n" << a.raw;
  std::filesystem::remove_all(dir);
}

TEST(E2E, recorder_hang_timeout_prints_the_diagnosis_into_the_jobs_own_log) {
  auto rec = record("injob", 2, 8, {SCENARIOS, "count"}, {"--hang-timeout", "1"}, /*quiet=*/false);
  EXPECT_EQ(rec.job.exit_code, 124) << rec.describe();
  EXPECT_NE(rec.job.err.find("FIRST DIVERGENCE"), std::string::npos) << rec.describe();
  EXPECT_NE(rec.job.err.find("count differs: 256 vs 300"), std::string::npos) << rec.describe();
  std::filesystem::remove_all(rec.dir);
}

// Issue 18: a healthy job analysed while it runs ended with exit 1 and a never_issued
// divergence (the newest ops of one rank not yet issued by its peer). Now such ranks are
// "behind": never exit 1 while the job is healthy.
TEST(E2E, healthy_job_analysed_live_is_never_divergent) {
  std::string dir = temp_dir("live-healthy");
  ProcResult job;
  std::thread t([&] {
    job = run_program({LOCKSTEP_EXE, "run", "-o", dir, "--", LAUNCHER, "-n", "2", "--timeout", "60", "--quiet", "--",
                       SCENARIOS, "steady"},
                      job_env(), 70);
  });
  std::vector<Analysis> seen;
  for (int i = 0; i < 40 && seen.size() < 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    Analysis a = analyze(dir);
    if (a.exit_code == 2) continue;  // no trace file yet
    seen.push_back(a);
  }
  t.join();
  ASSERT_EQ(job.exit_code, 0) << job.err;
  ASSERT_FALSE(seen.empty());
  for (auto& a : seen) {
    EXPECT_NE(a.exit_code, 1) << a.raw;
    EXPECT_TRUE(a.j.is_object() && a.j["divergences"].empty()) << a.raw;
  }
  Analysis after = analyze(dir);
  EXPECT_EQ(after.exit_code, 0) << after.raw;
  EXPECT_EQ(after.j["verdict"], "clean") << after.raw;
  std::filesystem::remove_all(dir);
}
