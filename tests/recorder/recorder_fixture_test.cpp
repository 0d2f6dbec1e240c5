// The recorder on multi-rank programs over the CPU NCCL fixture (tests/fixture), started by
// lockstep-launch: traces of all ranks are compared with each other.
#include <gtest/gtest.h>

#include <map>

#include "trace_test_util.h"

using namespace lockstep::test;

namespace {

struct Job {
  TempDir dir;
  ProcResult result;
  std::map<int, std::string> by_rank;  // global rank -> trace file

  Job(int nranks, std::vector<std::string> args, std::map<std::string, std::string> extra = {},
      double timeout_s = 30) {
    std::map<std::string, std::string> env = {{"LD_PRELOAD", LIBLOCKSTEP_PATH},
                                              {"LD_LIBRARY_PATH", FIXTURE_LIB_DIR},
                                              {"LOCKSTEP_DIR", dir.path + "/trace"},
                                              {"LOCKSTEP_STACKS", "native"}};
    for (auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {LAUNCHER_PATH, "-n", std::to_string(nranks), "--timeout",
                                     std::to_string(timeout_s), "--", PROGRAM_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    result = run(argv, env, timeout_s + 15);
    for (auto& f : trace_files(dir.path + "/trace")) by_rank[std::stoi(Trace(f).meta("global_rank"))] = f;
  }
  std::string describe() const {
    return "launcher exit " + std::to_string(result.exit_code) + "\n" + result.err;
  }
};

std::vector<std::string> world_ops(const Trace& t) {
  // The world communicator is the first one created.
  return t.column("SELECT seq || ':' || op FROM ops WHERE comm_id=(SELECT min(id) FROM comms) "
                  "ORDER BY call_index");
}

}  // namespace

TEST(RecorderOnFixture, ranks_record_the_same_sequence_and_identities_on_every_member) {
  for (int nranks : {2, 3}) {
    Job job(nranks, {"mixed"});
    ASSERT_EQ(job.result.exit_code, 0) << job.describe();
    ASSERT_EQ(int(job.by_rank.size()), nranks) << job.describe();
    Trace t0(job.by_rank[0]);
    EXPECT_EQ(join(world_ops(t0)),
              "1:all_reduce,2:all_reduce,3:all_reduce,4:all_gather,5:reduce_scatter,"
              "6:broadcast,7:all_to_all,8:coalesced");
    std::string world0 = t0.scalar("SELECT comm_hash FROM comms ORDER BY id LIMIT 1");
    std::string even_split = t0.scalar("SELECT comm_hash FROM comms WHERE parent_id IS NOT NULL");
    for (int r = 1; r < nranks; r++) {
      Trace t(job.by_rank[r]);
      EXPECT_EQ(world_ops(t), world_ops(t0)) << "rank " << r;
      EXPECT_EQ(t.scalar("SELECT comm_hash FROM comms ORDER BY id LIMIT 1"), world0) << "rank " << r;
      std::string split = t.scalar("SELECT comm_hash FROM comms WHERE parent_id IS NOT NULL");
      if (r % 2 == 0) EXPECT_EQ(split, even_split) << "rank " << r << " is in the even half";
      else EXPECT_NE(split, even_split) << "rank " << r << " is in the odd half";
      EXPECT_EQ(t.scalar("SELECT nranks || '/' || rank FROM comms ORDER BY id LIMIT 1"),
                std::to_string(nranks) + "/" + std::to_string(r));
    }
  }
}

TEST(RecorderOnFixture, all_to_all_parts_keep_each_ranks_uneven_counts) {
  Job job(3, {"mixed"});
  ASSERT_EQ(job.result.exit_code, 0) << job.describe();
  for (int r = 0; r < 3; r++) {
    Trace t(job.by_rank.at(r));
    std::string expect;
    int total = 0;
    for (int p = 0; p < 3; p++) {
      int n = 4 + r + p;
      total += n;
      expect += (p ? "," : "") + ("send:" + std::to_string(p) + ":" + std::to_string(n)) +
                ",recv:" + std::to_string(p) + ":" + std::to_string(n);
    }
    EXPECT_EQ(t.scalar("SELECT group_concat(x) FROM (SELECT op || ':' || peer || ':' || count AS x "
                       "FROM op_parts WHERE call_index=(SELECT call_index FROM ops WHERE "
                       "op='all_to_all') ORDER BY part)"),
              expect)
        << "rank " << r;
    EXPECT_EQ(t.scalar("SELECT count FROM ops WHERE op='all_to_all'"), std::to_string(total));
  }
}

TEST(RecorderOnFixture, every_op_completes_and_stacks_name_the_caller) {
  Job job(2, {"mixed"});
  ASSERT_EQ(job.result.exit_code, 0) << job.describe();
  for (auto& [rank, file] : job.by_rank) {
    Trace t(file);
    EXPECT_EQ(t.scalar("SELECT count(*) FROM ops o LEFT JOIN completions c USING(call_index) "
                       "WHERE c.call_index IS NULL"),
              "0")
        << "rank " << rank << ": ops without completion";
    EXPECT_EQ(t.meta("completion_signal"), "event") << "the default signal";
    EXPECT_EQ(t.scalar("SELECT count(DISTINCT o.call_index) FROM ops o JOIN frames f "
                       "ON f.stack_id=o.stack_id WHERE f.function='train_step'"),
              "3")
        << "rank " << rank;
    EXPECT_NE(t.scalar("SELECT count(*) FROM waits WHERE kind='stream_sync'"), "0");
  }
}

TEST(RecorderOnFixture, graph_replays_advance_the_sequence_on_every_rank) {
  Job job(2, {"graph"});
  ASSERT_EQ(job.result.exit_code, 0) << job.describe();
  for (auto& [rank, file] : job.by_rank) {
    Trace t(file);
    EXPECT_EQ(t.scalar("SELECT group_concat(x, ' ') FROM (SELECT ifnull(seq,'-') || ':' || state "
                       "AS x FROM ops ORDER BY call_index)"),
              "1:enqueued -:captured 2:graph_launched 3:graph_launched 4:graph_launched "
              "5:enqueued")
        << "rank " << rank;
    EXPECT_EQ(t.scalar("SELECT count(*) FROM graph_launches"), "3");
    EXPECT_EQ(t.scalar("SELECT count(*) FROM ops o JOIN completions USING(call_index) "
                       "WHERE o.state='graph_launched'"),
              "3")
        << "rank " << rank << ": replayed ops complete";
  }
}

TEST(RecorderOnFixture, in_progress_ops_of_a_nonblocking_communicator_complete) {
  Job job(2, {"nonblocking"});
  ASSERT_EQ(job.result.exit_code, 0) << job.describe();
  ASSERT_EQ(job.by_rank.size(), 2u) << job.describe();
  for (auto& [rank, file] : job.by_rank) {
    Trace t(file);
    EXPECT_EQ(t.scalar("SELECT group_concat(x, ' ') FROM (SELECT seq || ':' || op || ':' || "
                       "state || ':' || rc AS x FROM ops ORDER BY call_index)"),
              "1:all_reduce:enqueued:7 2:all_reduce:enqueued:7 3:all_reduce:enqueued:7 "
              "4:coalesced:enqueued:7")
        << "rank " << rank << ": every op returned ncclInProgress (7) and is enqueued";
    EXPECT_EQ(t.scalar("SELECT count(*) FROM ops o LEFT JOIN completions c USING(call_index) "
                       "WHERE c.call_index IS NULL"),
              "0")
        << "rank " << rank << ": ops without completion";
  }
}

TEST(RecorderOnFixture, diverging_ranks_leave_the_hang_in_their_traces_and_on_stderr) {
  Job job(2, {"diverge", "20"}, {{"LOCKSTEP_HANG_TIMEOUT", "1"}}, 4);
  EXPECT_EQ(job.result.exit_code, 124) << "the launcher kills the hung job: " << job.describe();
  ASSERT_EQ(job.by_rank.size(), 2u) << job.describe();
  const char* expect_op[] = {"reduce_scatter", "all_to_all"};
  for (int r = 0; r < 2; r++) {
    Trace t(job.by_rank.at(r));
    EXPECT_EQ(t.scalar("SELECT count(*) FROM ops o JOIN completions USING(call_index) "
                       "WHERE o.seq BETWEEN 1 AND 20"),
              "20")
        << "rank " << r << ": seq 1..20 completed";
    EXPECT_EQ(t.scalar("SELECT o.op || ':' || (c.call_index IS NULL) FROM ops o LEFT JOIN "
                       "completions c USING(call_index) WHERE o.seq=21"),
              std::string(expect_op[r]) + ":1")
        << "rank " << r << ": seq 21 enqueued, never completed";
    EXPECT_EQ(t.scalar("SELECT count(*) FROM hangs"), "1") << "rank " << r;
    std::string line = "[rank " + std::to_string(r) + "] lockstep: rank " + std::to_string(r) +
                       " (pid ";
    EXPECT_NE(job.result.err.find(line), std::string::npos) << job.result.err;
    EXPECT_NE(job.result.err.find(std::string("seq 21 ") + expect_op[r]), std::string::npos)
        << job.result.err;
  }
}

#ifdef SEED_DEADLOCK_PATH
namespace {
// Runs the seed demo on 2 ranks; checks what both signals must show and returns, per rank, the
// completion state of every sequenced op ("seq:op:completed").
std::map<int, std::vector<std::string>> seed_demo(const std::map<std::string, std::string>& extra,
                                                  const std::string& signal_meta) {
  TempDir dir;
  std::map<std::string, std::string> env = {{"LD_PRELOAD", LIBLOCKSTEP_PATH},
                                            {"LD_LIBRARY_PATH", FIXTURE_LIB_DIR},
                                            {"LOCKSTEP_DIR", dir.path},
                                            {"LOCKSTEP_HANG_TIMEOUT", "1"}};
  for (auto& [k, v] : extra) env[k] = v;
  ProcResult r = run({LAUNCHER_PATH, "-n", "2", "--timeout", "5", "--", SEED_DEADLOCK_PATH}, env, 25);
  EXPECT_EQ(r.exit_code, 124) << "the seed order hangs until the launcher's timeout\n" << r.err;
  std::map<int, std::string> by_rank;
  for (auto& f : trace_files(dir.path)) by_rank[std::stoi(Trace(f).meta("global_rank"))] = f;
  std::map<int, std::vector<std::string>> states;
  EXPECT_EQ(by_rank.size(), 2u) << r.err;
  if (by_rank.size() != 2u) return states;
  std::string hash[2];
  const char* op[] = {"reduce_scatter", "all_to_all"};
  const char* caller[] = {"fsdp_post_backward_reduce_scatter", "ulysses_all_to_all_backward"};
  for (int rank = 0; rank < 2; rank++) {
    Trace t(by_rank[rank]);
    EXPECT_EQ(t.meta("completion_signal").substr(0, signal_meta.size()), signal_meta)
        << "rank " << rank;
    EXPECT_EQ(t.scalar("SELECT count(*) || ',' || min(o.seq) || ',' || max(o.seq) FROM ops o "
                       "JOIN completions USING(call_index) WHERE o.seq IS NOT NULL"),
              "3749,1,3749")
        << "rank " << rank << ": seq 1..3749 completed";
    auto last = t.rows("SELECT o.op, o.state, c.call_index IS NULL, o.stack_id FROM ops o LEFT JOIN "
                       "completions c USING(call_index) WHERE o.seq=3750");
    EXPECT_EQ(last.size(), 1u) << "rank " << rank;
    if (last.size() != 1u) continue;
    EXPECT_EQ(join({last[0][0], last[0][1], last[0][2]}), std::string(op[rank]) + ",enqueued,1")
        << "rank " << rank << ": seq 3750 enqueued, never completed";
    EXPECT_EQ(t.scalar("SELECT count(*) FROM frames WHERE stack_id=" + last[0][3] +
                       " AND function LIKE '%" + caller[rank] + "%'"),
              "1")
        << "rank " << rank << ": the stack of seq 3750 names " << caller[rank];
    EXPECT_EQ(t.scalar("SELECT count(*) FROM ops WHERE seq > 3750"), "0");
    EXPECT_EQ(t.meta("exit_reason"), "SIGTERM") << "flushed when the launcher stopped it";
    hash[rank] = t.scalar("SELECT c.comm_hash FROM ops o JOIN comms c ON c.id=o.comm_id "
                          "WHERE o.seq=3750");
    std::string line = "[rank " + std::to_string(rank) + "] lockstep: rank " +
                       std::to_string(rank) + " (pid ";
    size_t at = r.err.find(line);
    EXPECT_NE(at, std::string::npos) << r.err;
    if (at != std::string::npos) {
      EXPECT_NE(r.err.find(std::string("seq 3750 ") + op[rank], at), std::string::npos) << r.err;
    }
    states[rank] = t.column("SELECT o.seq || ':' || o.op || ':' || (c.call_index IS NOT NULL) "
                            "FROM ops o LEFT JOIN completions c USING(call_index) "
                            "WHERE o.seq IS NOT NULL ORDER BY o.comm_id, o.seq");
  }
  EXPECT_EQ(hash[0], hash[1]) << "both ops are on the same communicator";
  return states;
}
}  // namespace

// The seed demo (examples/seed_deadlock) under the recorder: the acceptance scenario, with the
// stream-memory-write completion signal (LOCKSTEP_COMPLETION=memop, which the fake driver
// implements), then asking for it on a device without stream memory operations, which falls
// back to events (the default signal): every op's completion state is the same.
TEST(RecorderOnFixture, seed_demo_traces_show_3749_completed_then_the_divergent_op_3750) {
  auto memop = seed_demo({{"LOCKSTEP_COMPLETION", "memop"}}, "memop");
  auto event = seed_demo({{"LOCKSTEP_COMPLETION", "memop"}, {"LOCKSTEP_FAKE_NO_MEMOPS", "1"}},
                         "event: the device does not support");
  ASSERT_EQ(memop.size(), 2u);
  ASSERT_EQ(event.size(), 2u);
  for (int rank = 0; rank < 2; rank++) {
    EXPECT_GE(memop[rank].size(), 3750u) << "rank " << rank;
    EXPECT_EQ(memop[rank], event[rank]) << "rank " << rank;
  }
}
#endif
