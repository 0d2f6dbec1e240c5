// Process replay on the CPU NCCL fixture, and its agreement with the model checker.
// Recorded schedules come from examples/seed_deadlock run under the recorder; the others are
// written with the trace schema by tests/replay/schedule_writer.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>

#include "launcher.h"
#include "model_builder.h"
#include "model_check.h"
#include "rank_schedule.h"
#include "replay.h"
#include "trace_file_model.h"
#include "trace_loader.h"
#include "trace_schema.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using model::Verdict;
using testing::RowsBuilder;

const fs::path& scratch() {
  // Never destroyed: the cleanup below runs at exit, after function-local statics are gone.
  static const fs::path* dir = [] {
    auto* d = new fs::path(fs::temp_directory_path() / ("lockstep-replay-test-" + std::to_string(getpid())));
    fs::create_directories(*d);
    return d;
  }();
  return *dir;
}

struct Cleanup {
  ~Cleanup() {
    std::error_code ec;
    if (!std::getenv("LOCKSTEP_KEEP_TEST_DIRS")) fs::remove_all(scratch(), ec);
  }
} cleanup;

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::map<std::string, std::string> fixture_env() { return {{"LD_LIBRARY_PATH", FIXTURE_LIB_DIR}}; }

// Runs seed_deadlock on 2 ranks under the recorder; returns the trace directory.
std::string record_seed(const std::string& name, bool fixed) {
  const std::string dir = (scratch() / name).string();
  LaunchOptions lo;
  lo.nranks = 2;
  lo.argv = {SEED_EXE, "--elems", "16"};
  if (fixed) lo.argv.push_back("--fixed");
  lo.timeout_s = fixed ? 60 : 4;  // the broken order hangs by design: stop it after 4 s
  lo.env = fixture_env();
  lo.env["LD_PRELOAD"] = LIBLOCKSTEP;
  lo.env["LOCKSTEP_DIR"] = dir;
  lo.prefix_output = false;
  LaunchResult r = launch_ranks(lo);
  EXPECT_EQ(r.all_succeeded(), fixed) << "seed_deadlock" << (fixed ? " --fixed" : "") << ":\n" << r.summary();
  return dir;
}

replay::ReplayResult replay_dir(const std::string& dir, const std::string& out, double timeout_s, int order_from = -1,
                                int perturb = 0, bool record = true) {
  replay::ReplayOptions o;
  o.trace_dir = dir;
  o.out_dir = (scratch() / out).string();
  o.timeout_s = timeout_s;
  o.order_from = order_from;
  o.perturb = perturb;
  o.max_delay_us = 300;
  o.worker_exe = WORKER_EXE;
  o.preload = record ? LIBLOCKSTEP : "";
  o.env = fixture_env();
  std::ostringstream log;
  return replay::run_replay(o, log);
}

std::string describe(const replay::ReplayResult& r) {
  std::string s;
  for (const auto& t : r.trials)
    s += "trial seed " + std::to_string(t.seed) + ": " + (t.completed ? "completed" : "hung/failed") + "\n" +
         t.launch_summary + t.report;
  return s;
}

// Recorded once per test program, and only by the tests that need them (ctest runs each test
// in its own process).
class SeedReplay : public ::testing::Test {
 protected:
  static const std::string& bad() {
    static const std::string dir = record_seed("seed-bad", false);
    return dir;
  }
  static const std::string& good() {
    static const std::string dir = record_seed("seed-good", true);
    return dir;
  }
};

TEST_F(SeedReplay, RankDependentOrderHangsUnderReplayAndModelRejectsItAtSeq3750) {
  std::vector<std::string> problems;
  model::Result m = replay::model_check_dir(bad(), -1, &problems);
  EXPECT_EQ(m.verdict, Verdict::kDeadlock) << model::format_text(m);
  EXPECT_TRUE(contains(m.summary, "seq 3750: rank 0 at reduce_scatter, rank 1 at all_to_all: no matching op"))
      << model::format_text(m);

  auto r = replay_dir(bad(), "seed-bad-replay", 3);
  ASSERT_EQ(r.trials.size(), 1u);
  EXPECT_FALSE(r.trials[0].completed) << describe(r);
  EXPECT_TRUE(r.trials[0].timed_out) << describe(r);
  // The analyzer's report on the replay's own trace names the same point.
  EXPECT_TRUE(contains(r.trials[0].report, "seq 3750")) << r.trials[0].report;
  EXPECT_TRUE(contains(r.trials[0].report, "reduce_scatter vs all_to_all")) << r.trials[0].report;
}

// A model larger than the memory it may use is not started: said with what it needs.
TEST_F(SeedReplay, ModelLargerThanTheMemoryItMayUseIsNotStartedAndSaysWhatItNeeds) {
  try {
    replay::model_check_dir(good(), -1, nullptr, nullptr, nullptr, {}, /*memory_limit=*/64 * 1024);
    ADD_FAILURE() << "a model of the seed's ops in 64 KiB was started";
  } catch (const replay::ReplayError& e) {
    EXPECT_EQ(e.kind, replay::ErrorKind::kInputError);
    EXPECT_TRUE(contains(e.what(), " ops and host waits needs about ")) << e.what();
    EXPECT_TRUE(contains(e.what(), "allowed (--max-memory): not started")) << e.what();
  }
  // What the machine has is more than the seed's model needs; so is a limit of 1 GiB.
  EXPECT_GT(replay::memory_this_process_can_use(), 64u << 20);
  EXPECT_EQ(replay::model_check_dir(good(), -1, nullptr, nullptr, nullptr, {}, uint64_t(1) << 30).verdict, Verdict::kCanComplete);
}

TEST_F(SeedReplay, FixedOrderPassesModelAndCompletesIn20PerturbedTrials) {
  model::Result m = replay::model_check_dir(good(), -1, nullptr);
  EXPECT_EQ(m.verdict, Verdict::kCanComplete) << model::format_text(m);
  auto r = replay_dir(good(), "seed-good-replay", 20, -1, 20, /*record=*/false);
  ASSERT_EQ(r.trials.size(), 20u);
  EXPECT_EQ(r.hung_trials(), 0) << describe(r);
  std::set<uint64_t> seeds;
  for (const auto& t : r.trials) seeds.insert(t.seed);
  EXPECT_EQ(seeds.size(), 20u) << "each trial must use its own seed";
}

// The seed's schedule, complete (as the compiled program would issue it, not cut at the hang):
// a repeating [all_to_all, all_gather, all_to_all, all_gather, reduce_scatter] step, where
// `swap_rank` issues the all_to_all of op `diverge_at + 1` before the reduce_scatter of op
// `diverge_at`.
RowsBuilder seed_like(int swap_rank, int diverge_at = 20, int nops = 30) {
  static const char* kPattern[] = {"all_to_all", "all_gather", "all_to_all", "all_gather", "reduce_scatter"};
  RowsBuilder b(2);
  b.comm_all("world", {0, 1});
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> ops;
    for (int i = 0; i < nops; ++i) ops.push_back(kPattern[i % 5]);
    if (r == swap_rank) std::swap(ops[diverge_at - 1], ops[diverge_at]);
    for (const auto& op : ops) b.op(r, "world", op, 7, 64);
  }
  return b;
}

// Pipeline stages: rank 0 sends then receives, rank 1 receives then sends. Correct only because
// the two ranks' orders differ.
RowsBuilder pipeline() {
  RowsBuilder b(2);
  b.comm_all("pp", {0, 1});
  for (int i = 0; i < 5; ++i) {
    b.send(0, "pp", 1);
    b.recv(0, "pp", 1);
    b.recv(1, "pp", 0);
    b.send(1, "pp", 0);
  }
  return b;
}

std::string write(const std::string& name, const RowsBuilder& b) {
  const std::string dir = (scratch() / name).string();
  trace_file::write_trace_dir(b.trace, dir, trace_file::kSchedule);
  return dir;
}

// Checks the model and the process replay on one schedule and that they agree.
void expect_agreement(const std::string& dir, int order_from, bool expect_complete, const std::string& what) {
  model::Result m = replay::model_check_dir(dir, order_from, nullptr);
  auto r = replay_dir(dir, fs::path(dir).filename().string() + "-replay-" + std::to_string(order_from), 2.5, order_from, 0,
                      /*record=*/false);
  ASSERT_EQ(r.trials.size(), 1u);
  EXPECT_EQ(r.trials[0].completed, expect_complete) << what << ": replay\n" << describe(r);
  // The fixture runs every stream on its own thread, like a GPU running kernels concurrently:
  // the replay must complete exactly when the concurrent model does ("may deadlock" included).
  EXPECT_EQ(m.verdict != Verdict::kDeadlock, r.trials[0].completed)
      << what << ": model and replay disagree\n" << model::format_text(m) << describe(r);
}

TEST(OrderFrom, TurnsTheSeedsHangingScheduleIntoOneThatCompletes) {
  const std::string dir = write("seed-swapped", seed_like(/*swap_rank=*/1));
  expect_agreement(dir, -1, false, "rank 1 swapped");
  expect_agreement(dir, 0, true, "--order-from 0");
  expect_agreement(dir, 1, true, "--order-from 1");
}

TEST(OrderFrom, TurnsAGoodPipelineScheduleIntoAHangingOneAndBack) {
  const std::string dir = write("pipeline", pipeline());
  expect_agreement(dir, -1, true, "as recorded");
  expect_agreement(dir, 0, false, "--order-from 0 (both send first)");
  expect_agreement(dir, 1, false, "--order-from 1 (both receive first)");
}

// replay --model --order-from reorders the compact schedule; the worker reorders its file's
// rows. Both must give every rank the same ops in the same order (groups and threads included).
TEST(OrderFrom, TheCompactScheduleAndTheWorkersRowsAreReorderedAlike) {
  RowsBuilder b(2);
  b.comm_all("dp", {0, 1}).comm_all("tp", {0, 1});
  for (int r = 0; r < 2; ++r) {
    for (int step = 0; step < 3; ++step) {
      // Rank 1 issues each step's group (a second thread) before its all_reduce.
      auto group = [&] {
        Op& g1 = b.op(r, "tp", "all_gather", 8, 64);
        Op& g2 = b.op(r, "tp", "all_gather", 8, 32);
        g1.group_id = g2.group_id = step;
        g1.tid = g2.tid = 200 + r;
      };
      if (r == 1) group();
      b.op(r, "dp", "all_reduce", 7, 64);
      if (r == 0) group();
      b.wait(r, "stream_sync", 7);
      b.op(r, "dp", "broadcast", 7, 16).root = 0;
    }
  }
  const std::string dir = write("order-from-alike", b);
  LoadOptions lo;
  lo.host_waits = true;
  lockstep::Schedule s = load_schedule(dir, lo);
  ASSERT_EQ(s.procs.size(), 2u);
  const SchedProcess source = s.procs[0];
  for (int r = 0; r < 2; ++r) {
    replay::RankSchedule rows = replay::load_rank_schedule(s.procs[r].info.path);
    const replay::RankSchedule src_rows = replay::load_rank_schedule(source.info.path);
    const int moved_rows = replay::reorder_like(rows, src_rows);
    SchedProcess& sp = s.procs[r];
    const int moved = replay::reorder_like(sp, source, s.sigs);
    EXPECT_EQ(moved, moved_rows) << "rank " << r;
    if (r == 1) {
      EXPECT_GT(moved, 0);
    }
    std::vector<std::string> want, got;
    std::map<int64_t, int64_t> group_of_row;  // row group -> schedule group, must be one-to-one
    for (const Op& o : rows.proc.ops)
      if (replay::replayable(o))
        want.push_back(std::to_string(o.call_index) + " " + rows.proc.comms[o.comm].name + " " + vocab::name(o.op) +
                       " seq " + std::to_string(o.seq) + " tid " + std::to_string(o.tid) +
                       (o.group_id >= 0 ? " grouped" : ""));
    for (size_t i = 0; i < sp.ops.size(); ++i) {
      const SchedOp& o = sp.ops[i];
      got.push_back(std::to_string(o.call_index) + " " + sp.info.comms[o.comm].name + " " + vocab::name(s.sigs[o.sig].op) +
                    " seq " + std::to_string(o.seq) + " tid " + std::to_string(sp.threads[sp.op_threads[i]]) +
                    (sp.group_of(i) ? " grouped" : ""));
    }
    EXPECT_EQ(got, want) << "rank " << r;
    EXPECT_TRUE(sp.waits.empty());
  }
  // As recorded the two ranks' kernels can meet in opposite orders; in rank 0's order they cannot.
  EXPECT_EQ(model::check(s).verdict, Verdict::kCanComplete);
  EXPECT_EQ(replay::model_check_dir(dir, -1, nullptr).verdict, Verdict::kMayDeadlock);
  EXPECT_EQ(replay::model_check_dir(dir, 0, nullptr).verdict, Verdict::kCanComplete);
}

TEST(ModelAgreesWithReplay, TwoCommunicatorsOnOneStreamInOppositeOrder) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather", 7, 32);
  b.op(0, "B", "all_reduce", 7, 32);
  b.op(1, "B", "all_reduce", 7, 32);
  b.op(1, "A", "all_gather", 7, 32);
  expect_agreement(write("two-comms-one-stream", b), -1, false, "one stream");
}

TEST(ModelAgreesWithReplay, TwoCommunicatorsOnTwoStreamsInOppositeOrderIsLatentAndCompletesOnTheFixture) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather", 1, 32);
  b.op(0, "B", "all_reduce", 2, 32);
  b.op(1, "B", "all_reduce", 2, 32);
  b.op(1, "A", "all_gather", 1, 32);
  const std::string dir = write("two-comms-two-streams", b);
  EXPECT_EQ(replay::model_check_dir(dir, -1, nullptr).verdict, Verdict::kMayDeadlock);
  expect_agreement(dir, -1, true, "two streams");
}

TEST(ModelAgreesWithReplay, HostStreamSyncBetweenOppositeOrdersDeadlocks) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather", 1, 32);
  b.wait(0, "stream_sync", 1);
  b.op(0, "B", "all_reduce", 2, 32);
  b.op(1, "B", "all_reduce", 2, 32);
  b.wait(1, "stream_sync", 2);
  b.op(1, "A", "all_gather", 1, 32);
  expect_agreement(write("stream-sync", b), -1, false, "stream syncs");
}

TEST(ModelAgreesWithReplay, OppositeOrderInsideOneGroupCompletes) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather", 7, 32).group_id = 1;
  b.op(0, "B", "all_reduce", 7, 32).group_id = 1;
  b.op(1, "B", "all_reduce", 7, 32).group_id = 1;
  b.op(1, "A", "all_gather", 7, 32).group_id = 1;
  expect_agreement(write("group", b), -1, true, "group");
}

TEST(ModelAgreesWithReplay, SplitCommunicatorsOfFourRanksComplete) {
  RowsBuilder b(4);
  b.comm_all("world", {0, 1, 2, 3});
  for (int r = 0; r < 4; ++r) b.split(r, "pair" + std::to_string(r / 2), "world", 2, r % 2, r / 2, r);
  for (int r = 0; r < 4; ++r) {
    const std::string pair = "pair" + std::to_string(r / 2);
    // The two pairs interleave their own comm and the world comm differently: fine.
    if (r < 2) { b.op(r, pair, "all_reduce", 7, 16); b.op(r, "world", "all_gather", 7, 16); }
    else { b.op(r, "world", "all_gather", 7, 16); b.op(r, pair, "all_reduce", 7, 16); }
    b.op(r, pair, "broadcast", 7, 16).root = 1;
  }
  expect_agreement(write("split", b), -1, true, "split");
}

TEST(ModelAgreesWithReplay, GraphLaunchedOpsAreReplayedAsTheyRan) {
  RowsBuilder b(2);
  b.comm_all("X", {0, 1});
  // Rank 0 captured an all_reduce once and launched its graph twice; rank 1 ran two eagerly.
  Op& c = b.unsequenced(0, "X", "all_reduce", lockstep::vocab::State::Captured);
  c.count = 32;
  const int64_t captured = c.call_index;
  for (int i = 0; i < 2; ++i) {
    b.op(0, "X", "all_reduce", 7, 32).state = lockstep::vocab::State::GraphLaunched;
    b.trace.processes[0].ops.back().origin_call = captured;
  }
  b.op(1, "X", "all_reduce", 7, 32);
  b.op(1, "X", "all_reduce", 7, 32);
  expect_agreement(write("graph", b), -1, true, "graph");
  b.op(1, "X", "all_reduce", 7, 32);  // one more on rank 1: its partner never runs
  expect_agreement(write("graph-extra", b), -1, false, "graph + extra eager op");
}

TEST(ModelAgreesWithReplay, GroupedSendRecvRingCompletesAndWrongPeerHangs) {
  RowsBuilder b(3);
  b.comm_all("R", {0, 1, 2});
  for (int r = 0; r < 3; ++r) {
    Op& o = b.op(r, "R", "send_recv", 7, 8);
    o.parts = {OpPart{lockstep::vocab::Op::Send, lockstep::vocab::Dtype::Float32, 8, -1, (r + 1) % 3, lockstep::vocab::RedOp::None}, OpPart{lockstep::vocab::Op::Recv, lockstep::vocab::Dtype::Float32, 8, -1, (r + 2) % 3, lockstep::vocab::RedOp::None}};
  }
  expect_agreement(write("ring", b), -1, true, "ring");
  b.trace.processes[2].ops.back().parts[1].peer = 0;
  expect_agreement(write("ring-wrong-peer", b), -1, false, "ring with a wrong peer");
}

// The CLI end to end: exit codes and the first lines users see.
std::pair<int, std::string> run_cli_with(const std::string& command) {
  const std::string cmd = "env LD_LIBRARY_PATH=" FIXTURE_LIB_DIR " " + command + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int status = pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}
std::pair<int, std::string> run_cli(const std::string& args) { return run_cli_with(LOCKSTEP_CLI " " + args); }

TEST(ReplayCli, ReportsModelVerdictAndReplayResultWithExitCodes) {
  const std::string good = write("cli-pipeline", pipeline());
  auto [rc1, out1] = run_cli("replay --model " + good);
  EXPECT_EQ(rc1, 0) << out1;
  EXPECT_TRUE(contains(out1, "model check: can complete")) << out1;
  auto [rc2, out2] = run_cli("replay --model --order-from 0 " + good);
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_TRUE(contains(out2, "model check: deadlock")) << out2;
  EXPECT_TRUE(contains(out2, "never posts the matching recv") || contains(out2, "matching recv")) << out2;
  auto [rc3, out3] = run_cli("replay --timeout 10 -o " + (scratch() / "cli-out").string() + " " + good);
  EXPECT_EQ(rc3, 0) << out3;
  EXPECT_TRUE(contains(out3, "completed")) << out3;
  auto [rc4, out4] = run_cli("replay --model " + (scratch() / "no-such-dir").string());
  EXPECT_EQ(rc4, 2) << out4;
  // Latent (two communicators on two streams in opposite orders): "may deadlock" is a hang, exit
  // 1 (docs/replay.md), not a completed run. (Kills cli-replay-model-exit.)
  RowsBuilder latent(2);
  latent.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  latent.op(0, "A", "all_gather", 1, 32);
  latent.op(0, "B", "all_reduce", 2, 32);
  latent.op(1, "B", "all_reduce", 2, 32);
  latent.op(1, "A", "all_gather", 1, 32);
  auto [rc5, out5] = run_cli("replay --model " + write("cli-latent", latent));
  EXPECT_EQ(rc5, 1) << out5;
  EXPECT_TRUE(contains(out5, "model check: may deadlock")) << out5;
}

// Without -o the replay's trace goes beside DIR, as DIR-replay, whether DIR is written with a
// trailing slash or not (before: "DIR/" wrote "DIR/-replay", inside the trace being replayed).
TEST(ReplayCli, DefaultOutputIsBesideTheTraceDirectoryWithOrWithoutATrailingSlash) {
  const std::string good = write("cli-slash", pipeline());
  std::error_code ec;
  std::filesystem::remove_all(good + "-replay", ec);
  auto [rc, out] = run_cli("replay --timeout 10 " + good + "/");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(std::filesystem::is_directory(good + "-replay")) << out;
  EXPECT_FALSE(std::filesystem::exists(good + "/-replay")) << out;
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// Under a launcher (srun, torchrun, lockstep-launch), each task runs only its own rank.
TEST(ReplayCli, RankFromEnvRunsOneRankPerLaunchedProcess) {
  const std::string dir = (scratch() / "rank-from-env").string();
  trace_file::write_trace_dir(pipeline().trace, dir, trace_file::kSchedule);
  auto [rc, out] = run_cli_with(LAUNCH_EXE " -n 2 --timeout 20 -- " LOCKSTEP_CLI " replay --rank-from-env --timeout 10 " + dir);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "rank 0: completed 10 ops")) << out;
  EXPECT_TRUE(contains(out, "rank 1: completed 10 ops")) << out;
  // Both ranks sending first hangs: each worker gives up at its timeout.
  auto [rc2, out2] =
      run_cli_with(LAUNCH_EXE " -n 2 --timeout 20 -- " LOCKSTEP_CLI " replay --rank-from-env --order-from 0 --timeout 2 " + dir);
  EXPECT_NE(rc2, 0) << out2;
  EXPECT_TRUE(contains(out2, "no progress for 2.0 s")) << out2;
  // Without a rendezvous directory it says what is missing.
  auto [rc3, out3] = run_cli_with("env -u LOCKSTEP_RENDEZVOUS_DIR RANK=0 " LOCKSTEP_CLI " replay --rank-from-env " + dir);
  EXPECT_EQ(rc3, 2) << out3;
  EXPECT_TRUE(contains(out3, "needs LOCKSTEP_RENDEZVOUS_DIR")) << out3;
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

TEST(Perturbation, ReportsEveryHangingTrialWithItsSeedAndTrace) {
  const std::string dir = (scratch() / "seed-swapped-perturbed").string();
  trace_file::write_trace_dir(seed_like(/*swap_rank=*/0).trace, dir, trace_file::kSchedule);
  replay::ReplayOptions o;
  o.trace_dir = dir;
  o.out_dir = (scratch() / "seed-swapped-perturbed-replay").string();
  o.timeout_s = 1.5;
  o.perturb = 2;
  o.seed = 41;
  o.max_delay_us = 200;
  o.worker_exe = WORKER_EXE;
  o.preload = LIBLOCKSTEP;
  o.env = fixture_env();
  std::ostringstream log;
  auto r = replay::run_replay(o, log);
  ASSERT_EQ(r.trials.size(), 2u);
  EXPECT_EQ(r.hung_trials(), 2) << describe(r);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(r.trials[k].seed, 41u + k);
    EXPECT_TRUE(r.trials[k].timed_out) << describe(r);
    EXPECT_TRUE(fs::exists(r.trials[k].trace_dir)) << r.trials[k].trace_dir;
    EXPECT_TRUE(contains(r.trials[k].report, "seq 20")) << r.trials[k].report;
  }
  EXPECT_TRUE(contains(log.str(), "trial 1 (seed 42): HANG")) << log.str();
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

TEST(ModelAgreesWithReplay, HostWaitBlocksOnlyItsOwnThread) {
  // Rank 0's main thread syncs stream 1 while its second thread issues the op rank 1 needs
  // first; on one thread the same calls deadlock.
  for (bool two_threads : {true, false}) {
    RowsBuilder b(2);
    b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
    b.op(0, "A", "all_gather", 1, 32);
    b.wait(0, "stream_sync", 1);
    b.op(0, "B", "all_reduce", 2, 32).tid = two_threads ? 555 : 100;
    b.op(1, "B", "all_reduce", 2, 32);
    b.wait(1, "stream_sync", 2);
    b.op(1, "A", "all_gather", 1, 32);
    expect_agreement(write(two_threads ? "threads-2" : "threads-1", b), -1, two_threads,
                     two_threads ? "two host threads" : "one host thread");
  }
}

// The checker reads the same schedule from files (load_schedule with the host-waits side data)
// as from the in-memory trace (schedule_from_trace): threads, waits, events, every verdict.
TEST(ModelFromFiles, LoaderSideDataGivesTheInMemoryVerdictAndWitness) {
  auto build = [](bool two_threads, bool broken) {
    RowsBuilder b(2);
    b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
    b.op(0, "A", "all_gather", 1, 32);
    b.wait(0, "event_record", 1, 0xe1);
    b.wait(0, "stream_wait_event", 3, 0xe1);
    b.wait(0, "stream_sync", 1);
    b.op(0, "B", "all_reduce", 2, 32).tid = two_threads ? 555 : 100;
    b.op(1, "B", "all_reduce", 2, 32);
    b.wait(1, "event_record", 2, 0xe2);
    b.wait(1, "event_sync", 0, 0xe2);
    b.op(1, "A", broken ? "all_reduce" : "all_gather", 1, 32);
    return b;
  };
  int verdicts[3] = {0, 0, 0};
  for (bool two_threads : {true, false})
    for (bool broken : {false, true}) {
      const RowsBuilder b = build(two_threads, broken);
      const std::string dir = write(std::string("files-") + (two_threads ? "t2" : "t1") + (broken ? "-broken" : ""), b);
      const model::Result memory = model::check(schedule_from_trace(b.trace));
      const model::Result files = replay::model_check_dir(dir, -1, nullptr);
      EXPECT_EQ(model::format_text(files), model::format_text(memory)) << dir;
      ++verdicts[static_cast<int>(files.verdict)];

      LoadOptions lo;
      lo.host_waits = true;
      const Schedule s = load_schedule(dir, lo);
      ASSERT_EQ(s.procs.size(), 2u);
      EXPECT_EQ(s.procs[0].threads.size(), two_threads ? 2u : 1u);
      EXPECT_EQ(s.procs[0].waits.size(), 3u);
      EXPECT_EQ(s.procs[0].op_threads.size(), s.procs[0].ops.size());
      // Without the side data the checker refuses rather than guessing one thread and no waits.
      EXPECT_THROW(model::check(load_schedule(dir)), std::runtime_error);
    }
  // The cases must reach more than one verdict, or the comparison proves little (two threads:
  // latent, the serialized model's device order deadlocks; one thread or a mismatch: deadlock).
  EXPECT_EQ(verdicts[static_cast<int>(Verdict::kMayDeadlock)], 1);
  EXPECT_EQ(verdicts[static_cast<int>(Verdict::kDeadlock)], 3);
}

}  // namespace
}  // namespace lockstep

// ---- Untrusted schedules and typed outcomes -------------------------------------------------
// Replay validates a schedule before running it and tells "the schedule hangs" (1) from
// "incomplete evidence" (4) and "replay could not run" (5). Before: a count of INT64_MAX
// overflowed the buffer size and the worker segfaulted, and that, an unknown op and a failed
// init were all reported as a hang or failure with exit 1.
namespace lockstep {
namespace {

void sql(const std::string& file, const std::string& statement) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, statement.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "") << statement;
  sqlite3_free(err);
  sqlite3_close(db);
}

std::string rank_file(const std::string& dir, int r) { return dir + "/rank-" + std::to_string(r) + schema::kFileSuffix; }

// The pipeline schedule with one statement applied to rank 0's file.
std::string mutated(const std::string& name, const std::string& statement) {
  const std::string dir = write(name, pipeline());
  sql(rank_file(dir, 0), statement);
  return dir;
}

std::pair<int, std::string> replay_cli(const std::string& dir, const std::string& extra = "") {
  return run_cli(extra + "replay --timeout 5 --no-record -o " + dir + "-out " + dir);
}

// Schema 2: an op's description is its signature row (shared by the ops that repeat it).
const char* kFirstOp = "(SELECT min(call_index) FROM op_rows)";
std::string first_op_signature(const std::string& set) {
  return "UPDATE signatures SET " + set + " WHERE id=(SELECT sig FROM op_rows WHERE call_index=" + kFirstOp + ")";
}

// The loader takes each op's thread from its signature's tid in its one pass over the op rows.
// A crafted signatures table whose ids repeat (no primary key) sends it back to the pass it made
// before, joining each op row to every signature row of its id: both tids are threads, as they
// were (the one pass would keep one). A table without tid is skipped for the same reason as before.
TEST(ModelFromFiles, OpThreadsOfCraftedSignaturesAreReadAsBefore) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1});
  for (int r = 0; r < 2; ++r) b.op(r, "A", "all_reduce", 1, 32);
  LoadOptions lo;
  lo.host_waits = true;
  const std::string plain = write("threads-plain", b);
  EXPECT_EQ(load_schedule(plain, lo).procs[0].threads, std::vector<int64_t>{100});

  const std::string repeated = write("threads-repeated-signature-ids", b);
  sql(rank_file(repeated, 0),
      "PRAGMA legacy_alter_table = ON; "  // the schema-1 views name signatures (the loader never runs them)
      "CREATE TABLE s2 AS SELECT * FROM signatures; INSERT INTO s2 SELECT * FROM signatures; "
      "UPDATE s2 SET tid = 777 WHERE rowid > (SELECT count(*) FROM signatures); "
      "DROP TABLE signatures; ALTER TABLE s2 RENAME TO signatures");
  const Schedule s = load_schedule(repeated, lo);
  ASSERT_EQ(s.procs.size(), 2u);
  std::vector<int64_t> threads = s.procs[0].threads;
  std::sort(threads.begin(), threads.end());
  EXPECT_EQ(threads, (std::vector<int64_t>{100, 777}));
  EXPECT_EQ(s.procs[0].op_threads.size(), s.procs[0].ops.size());

  const std::string no_tid = write("threads-no-tid-column", b);
  sql(rank_file(no_tid, 0),
      "DROP VIEW ops; DROP VIEW op_parts; DROP VIEW completions; DROP VIEW op_rows_all; "
      "ALTER TABLE signatures DROP COLUMN tid");
  const Schedule t = load_schedule(no_tid, lo);
  ASSERT_EQ(t.skipped.size(), 1u);
  EXPECT_TRUE(contains(t.skipped[0].reason, "op threads")) << t.skipped[0].reason;
}

TEST(ReplayValidation, HugeCountIsCannotRunWithTheReasonNotACrashReportedAsHang) {
  const std::string dir = mutated("v-huge-count", first_op_signature("count=9223372036854775807"));
  auto [rc, out] = replay_cli(dir);
  EXPECT_EQ(rc, 5) << out;
  EXPECT_TRUE(contains(out, "count 9223372036854775807")) << out;
  EXPECT_FALSE(contains(out, "HANG")) << out;
  // The worker on its own (no orchestrator check first) refuses it too, with status 5.
  auto [wrc, wout] = run_cli_with("env LOCKSTEP_RENDEZVOUS_DIR=" + dir + " " WORKER_EXE " --file " + rank_file(dir, 0) +
                                  " --timeout 5");
  EXPECT_EQ(wrc, 5) << wout;
  EXPECT_TRUE(contains(wout, "out of range")) << wout;
}

TEST(ReplayValidation, NegativeCountUnknownOpPeerAndRootOutOfRangeAreCannotRun) {
  struct Case {
    const char* name;
    std::string statement;
    const char* says;
  };
  const std::string first = kFirstOp;
  // Values the trace loader itself refuses (a negative count, a rank outside its communicator, a
  // name the vocabulary (schema/vocab.h) does not know) make the file unusable: incomplete
  // evidence (4), naming the skipped file and why; the analyzer and the model checker refuse the
  // same files.
  for (const Case& c : {Case{"v-negative", first_op_signature("count=-4"), "skipped"},
                        Case{"v-nranks", std::string("UPDATE comms SET rank=5"), "skipped"},
                        Case{"v-unknown-op", first_op_signature("op='all_gossip'"), "unknown op 'all_gossip'"},
                        Case{"v-dtype", first_op_signature("dtype='float128'"), "unknown dtype 'float128'"}}) {
    const std::string dir = mutated(c.name, c.statement);
    auto [rc, out] = replay_cli(dir);
    EXPECT_EQ(rc, 4) << c.name << "\n" << out;
    EXPECT_TRUE(contains(out, "skipped")) << c.name << "\n" << out;
    EXPECT_TRUE(contains(out, c.says)) << c.name << "\n" << out;
  }
  for (const Case& c : {Case{"v-peer", first_op_signature("peer=7"), "peer 7"},
                        Case{"v-root", first_op_signature("op=1, root=9, peer=NULL"), "root 9"}}) {  // 1: broadcast
    const std::string dir = mutated(c.name, c.statement);
    auto [rc, out] = replay_cli(dir);
    EXPECT_EQ(rc, 5) << c.name << "\n" << out;
    EXPECT_TRUE(contains(out, c.says)) << c.name << "\n" << out;
  }
}

TEST(ReplayValidation, WorkerCrashAndMissingDeviceAreCannotRunNotHang) {
  const std::string dir = write("v-crash", pipeline());
  const std::string crasher = (scratch() / "crashing-worker.sh").string();
  {
    FILE* f = std::fopen(crasher.c_str(), "w");
    std::fputs("#!/bin/sh\nkill -SEGV $$\n", f);
    std::fclose(f);
  }
  fs::permissions(crasher, fs::perms::owner_all);
  auto [rc, out] = replay_cli(dir, "");
  EXPECT_EQ(rc, 0) << "the schedule itself completes\n" << out;
  auto [rc2, out2] = run_cli_with("env LOCKSTEP_REPLAY_WORKER=" + crasher + " " LOCKSTEP_CLI " replay --timeout 5 --no-record -o " +
                                  dir + "-crash " + dir);
  EXPECT_EQ(rc2, 5) << out2;
  EXPECT_TRUE(contains(out2, "crashed (signal 11")) << out2;
  EXPECT_FALSE(contains(out2, "hangs")) << out2;
  // A worker that could not run (status 5, as when ncclCommInitRank or a CUDA call fails): the
  // reason it printed is passed on; its peer (hung waiting for it or not) does not make it a hang.
  const std::string failing = (scratch() / "failing-worker.sh").string();
  {
    FILE* f = std::fopen(failing.c_str(), "w");
    std::fputs("#!/bin/sh\nif [ \"$RANK\" = 1 ]; then echo 'lockstep replay: ncclCommInitRank: internal error' >&2; exit 5; fi\n"
               "sleep 2; kill -TERM $$\n", f);  // rank 0: hangs, then its timeout ends it
    std::fclose(f);
  }
  fs::permissions(failing, fs::perms::owner_all);
  auto [rc3, out3] = run_cli_with("env LOCKSTEP_REPLAY_WORKER=" + failing + " " LOCKSTEP_CLI " replay --timeout 3 --no-record -o " +
                                  dir + "-fail " + dir);
  EXPECT_EQ(rc3, 5) << out3;
  EXPECT_TRUE(contains(out3, "rank 1 could not replay: lockstep replay: ncclCommInitRank: internal error")) << out3;
}

TEST(ReplayValidation, AHangingScheduleStillExits1) {
  const std::string dir = write("v-hang", pipeline());
  auto [rc, out] = run_cli("replay --timeout 2 --no-record --order-from 0 -o " + dir + "-out " + dir);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(contains(out, "the replay hangs")) << out;
}

TEST(ReplayValidation, MissingRankFileOrStoppedRecorderIsIncompleteEvidence) {
  const std::string dir = write("v-missing", pipeline());
  fs::remove(rank_file(dir, 1));
  auto [rc, out] = replay_cli(dir);
  EXPECT_EQ(rc, 4) << out;
  auto [mrc, mout] = run_cli("replay --model " + dir);
  EXPECT_EQ(mrc, 4) << "before: 'deadlock' (exit 1) for a rank that has no file\n" << mout;
  EXPECT_TRUE(contains(mout, "incomplete evidence")) << mout;

  const std::string stopped = mutated("v-stopped", "INSERT OR REPLACE INTO meta(key,value) VALUES('recorder_stopped','disk_full')");
  auto [src, sout] = replay_cli(stopped);
  EXPECT_EQ(src, 4) << sout;
  EXPECT_TRUE(contains(sout, "recorder stopped recording (disk_full)")) << sout;
  auto [smrc, smout] = run_cli("replay --model " + stopped);
  EXPECT_EQ(smrc, 4) << smout;
}

// A capped trace whose size cap retired point-to-point ops: the model pairs sends and receives
// by their order per peer, which the cut breaks (p2p is outside the digest), so its verdict on
// them is not evidence: incomplete (4), naming the file and the count.
TEST(ReplayValidation, RetiredPointToPointIsIncompleteEvidenceForTheModel) {
  RowsBuilder b(3);
  b.comm_all("R", {0, 1, 2});
  for (int step = 0; step < 2; ++step)
    for (int r = 0; r < 3; ++r) {
      Op& o = b.op(r, "R", "send_recv", 7, 8);
      o.parts = {OpPart{vocab::Op::Send, vocab::Dtype::Float32, 8, -1, (r + 1) % 3, vocab::RedOp::None},
                 OpPart{vocab::Op::Recv, vocab::Dtype::Float32, 8, -1, (r + 2) % 3, vocab::RedOp::None}};
    }
  const std::string dir = write("capped-p2p", b);
  auto [rc0, out0] = run_cli("replay --model " + dir);
  EXPECT_EQ(rc0, 0) << out0;
  // Rank 0's first send_recv retired by the cap, as the writer leaves it (comms.retired_*).
  sql(rank_file(dir, 0), "DELETE FROM op_rows WHERE seq = 1; UPDATE comms SET retired_through_seq = 1; "
                         "INSERT OR REPLACE INTO meta(key,value) VALUES('retired_ops','1')");
  auto [rc, out] = run_cli("replay --model " + dir);
  EXPECT_EQ(rc, 4) << "before: a deadlock verdict from sends and receives paired across the cut\n" << out;
  EXPECT_TRUE(contains(out, "point-to-point messages were retired by the size cap on 1 member(s)")) << out;
}

}  // namespace
}  // namespace lockstep
