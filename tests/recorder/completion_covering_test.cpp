// LOCKSTEP_COMPLETION=covering on the CPU NCCL fixture and fake driver (tests/fixture): a
// covering event completes every op of its stream before it, a successful stream synchronize
// completes the syncing thread's ops, at most `window` ops follow a stream's last covering
// event, and a hang is reported with the precision the signal has (a bounded range of ops, in
// the recorder's hang line and in the analyzer's JSON).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "trace_test_util.h"

using namespace lockstep::test;

namespace {

struct Job {
  TempDir dir;
  ProcResult result;
  std::map<int, std::string> by_rank;  // global rank -> trace file

  Job(const std::string& program, std::vector<std::string> args,
      std::map<std::string, std::string> extra, double timeout_s = 30) {
    std::map<std::string, std::string> env = {{"LD_PRELOAD", LIBLOCKSTEP_PATH},
                                              {"LD_LIBRARY_PATH", FIXTURE_LIB_DIR},
                                              {"LOCKSTEP_DIR", dir.path + "/trace"},
                                              {"LOCKSTEP_STACKS", "none"},
                                              {"LOCKSTEP_COMPLETION", "covering"}};
    for (auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {LAUNCHER_PATH, "-n", "2", "--timeout",
                                     std::to_string(timeout_s), "--", program};
    argv.insert(argv.end(), args.begin(), args.end());
    result = run(argv, env, timeout_s + 15);
    for (auto& f : trace_files(dir.path + "/trace"))
      by_rank[std::stoi(Trace(f).meta("global_rank"))] = f;
  }
  std::string describe() const {
    return "launcher exit " + std::to_string(result.exit_code) + "\n" + result.err;
  }
};

// Sequenced ops without a completion row, as "first..last count" (empty when none).
std::string uncompleted(const Trace& t) {
  return t.scalar("SELECT ifnull(min(o.seq) || '..' || max(o.seq) || ' ' || count(*), '') FROM ops o "
                  "LEFT JOIN completions c USING(call_index) WHERE c.call_index IS NULL AND "
                  "o.seq IS NOT NULL");
}

int64_t completed_prefix(const Trace& t) {
  // The completed ops must be seq 1..m with nothing completed after m.
  return std::stoll(t.scalar("SELECT ifnull(max(o.seq), 0) FROM ops o JOIN completions USING(call_index)"));
}

}  // namespace

// The trace says which signal and window were used, every op completes (covering events and
// the program's stream synchronizes), and captured ops are untouched: the graph scenario reads
// exactly as with per-op events.
TEST(CoveringCompletion, every_op_completes_and_capture_is_unaffected) {
  for (const char* scenario : {"mixed", "graph", "nonblocking"}) {
    Job covering(PROGRAM_PATH, {scenario}, {});
    Job event(PROGRAM_PATH, {scenario}, {{"LOCKSTEP_COMPLETION", "event"}});
    ASSERT_EQ(covering.result.exit_code, 0) << scenario << ": " << covering.describe();
    ASSERT_EQ(covering.by_rank.size(), 2u) << covering.describe();
    ASSERT_EQ(event.by_rank.size(), 2u) << event.describe();
    for (int rank = 0; rank < 2; rank++) {
      Trace t(covering.by_rank[rank]), e(event.by_rank[rank]);
      EXPECT_EQ(t.meta("completion_signal"), "covering");
      EXPECT_EQ(t.meta("completion_window"), "8");
      const char* q = "SELECT group_concat(x, ' ') FROM (SELECT ifnull(o.seq,'-') || ':' || o.state || ':' || "
                      "(c.call_index IS NOT NULL) AS x FROM ops o LEFT JOIN completions c "
                      "USING(call_index) ORDER BY o.call_index)";
      EXPECT_EQ(t.scalar(q), e.scalar(q)) << scenario << " rank " << rank;
      EXPECT_EQ(uncompleted(t), "") << scenario << " rank " << rank;
    }
  }
}

// Without the synchronize markers (runtime hooks off), what completes by exit is what the
// covering events cover: the final poll of the stop path writes their rows, and only the ops
// after the stream's last covering event stay without one, fewer than the window.
TEST(CoveringCompletion, at_exit_only_the_uncovered_tail_lacks_rows_and_it_is_shorter_than_the_window) {
  for (int window : {1, 8, 64}) {
    Job job(PROGRAM_PATH, {"many", "300"},
            {{"LOCKSTEP_BENCH_OFF", "waits"}, {"LOCKSTEP_COMPLETION_WINDOW", std::to_string(window)}});
    ASSERT_EQ(job.result.exit_code, 0) << job.describe();
    ASSERT_EQ(job.by_rank.size(), 2u) << job.describe();
    for (int rank = 0; rank < 2; rank++) {
      Trace t(job.by_rank[rank]);
      EXPECT_EQ(t.meta("completion_window"), std::to_string(window));
      const int64_t m = completed_prefix(t);
      const int64_t n = std::stoll(t.scalar("SELECT max(seq) FROM ops"));
      EXPECT_EQ(n, 300) << "rank " << rank;
      EXPECT_GT(m, n - window) << "rank " << rank << ": at most window-1 ops uncovered";
      if (m < n)
        EXPECT_EQ(uncompleted(t), std::to_string(m + 1) + ".." + std::to_string(n) + " " +
                                      std::to_string(n - m))
            << "rank " << rank << ": the uncompleted ops are the tail";
      else
        EXPECT_EQ(uncompleted(t), "") << "rank " << rank;
    }
  }
  // With the runtime hooks on, the program's final cudaStreamSynchronize completes the tail.
  Job job(PROGRAM_PATH, {"many", "300"}, {{"LOCKSTEP_COMPLETION_WINDOW", "64"}});
  ASSERT_EQ(job.by_rank.size(), 2u) << job.describe();
  for (int rank = 0; rank < 2; rank++) EXPECT_EQ(uncompleted(Trace(job.by_rank[rank])), "") << rank;
}

// One thread alternating over more streams than it keeps cached (completion.cpp
// ThreadCovers): each stream is its own FIFO. Without the synchronize markers, each stream's
// completed ops are a prefix of that stream's ops (in call order) and fewer than `window` of
// them lack a row; with them, every op completes.
TEST(CoveringCompletion, a_thread_alternating_over_many_streams_keeps_each_streams_order) {
  const std::string q_per_stream =
      "SELECT stream, count(*), sum(c.call_index IS NOT NULL), "
      "ifnull(max(CASE WHEN c.call_index IS NOT NULL THEN o.call_index END), 0), "
      "ifnull(min(CASE WHEN c.call_index IS NULL THEN o.call_index END), 9223372036854775807) "
      "FROM ops o LEFT JOIN completions c USING(call_index) WHERE o.seq IS NOT NULL GROUP BY stream";
  for (int nstreams : {6, 11}) {
    Job job(PROGRAM_PATH, {"streams", std::to_string(nstreams), "660"},
            {{"LOCKSTEP_BENCH_OFF", "waits"}, {"LOCKSTEP_COMPLETION_WINDOW", "8"}});
    ASSERT_EQ(job.result.exit_code, 0) << job.describe();
    ASSERT_EQ(job.by_rank.size(), 2u) << job.describe();
    for (int rank = 0; rank < 2; rank++) {
      Trace t(job.by_rank[rank]);
      auto rows = t.rows(q_per_stream);
      ASSERT_EQ(rows.size(), size_t(nstreams)) << "rank " << rank;
      for (const auto& row : rows) {
        const int64_t ops = std::stoll(row[1]), done = std::stoll(row[2]);
        EXPECT_EQ(ops, 660 / nstreams) << "rank " << rank << " stream " << row[0];
        EXPECT_GT(done, ops - 8) << "rank " << rank << " stream " << row[0] << ": at most window-1 uncovered";
        EXPECT_LT(std::stoll(row[3]), std::stoll(row[4]))
            << "rank " << rank << " stream " << row[0] << ": an op completed after one that did not";
      }
    }
    Job synced(PROGRAM_PATH, {"streams", std::to_string(nstreams), "660"}, {});
    ASSERT_EQ(synced.by_rank.size(), 2u) << synced.describe();
    for (int rank = 0; rank < 2; rank++) EXPECT_EQ(uncompleted(Trace(synced.by_rank[rank])), "") << rank;
  }
}

// A sync before the divergent op completes everything before it, so the hang is named
// exactly, as with per-op events.
TEST(CoveringCompletion, a_hang_after_a_synchronize_is_named_exactly) {
  Job job(PROGRAM_PATH, {"diverge", "20"}, {{"LOCKSTEP_HANG_TIMEOUT", "1"}}, 4);
  EXPECT_EQ(job.result.exit_code, 124) << job.describe();
  ASSERT_EQ(job.by_rank.size(), 2u) << job.describe();
  const char* op[] = {"reduce_scatter", "all_to_all"};
  for (int r = 0; r < 2; r++) {
    Trace t(job.by_rank.at(r));
    EXPECT_EQ(uncompleted(t), "21..21 1") << "rank " << r;
    EXPECT_EQ(t.scalar("SELECT count(*) FROM hangs"), "1") << "rank " << r;
    EXPECT_NE(job.result.err.find(std::string("seq 21 ") + op[r]), std::string::npos) << job.result.err;
  }
  EXPECT_EQ(job.result.err.find("or a later op"), std::string::npos) << job.result.err;
}

#ifdef SEED_DEADLOCK_PATH
// The seed schedule issues its ops without a synchronize: with window W the ops after the last
// completed covering event (at most W of them up to the hung seq) read as in flight; the
// recorder's hang line and the analyzer name that range, never one op as the certain one.
// The divergence is in the seed's second step (seq 374, not the demo's 3750): a tenth of the ops
// to issue before the hang timeout can fire, and to analyze.
TEST(CoveringCompletion, a_hang_is_reported_as_a_range_bounded_by_the_window) {
  constexpr int kHung = 374;
  for (int window : {1, 8}) {
    Job job(SEED_DEADLOCK_PATH, {"--diverge-at", std::to_string(kHung)},
            {{"LOCKSTEP_HANG_TIMEOUT", "1"}, {"LOCKSTEP_COMPLETION_WINDOW", std::to_string(window)}}, 5);
    EXPECT_EQ(job.result.exit_code, 124) << job.describe();
    ASSERT_EQ(job.by_rank.size(), 2u) << job.describe();
    for (int r = 0; r < 2; r++) {
      Trace t(job.by_rank.at(r));
      const int64_t m = completed_prefix(t);
      EXPECT_GE(m, kHung - window) << "window " << window << " rank " << r;
      EXPECT_LE(m, kHung - 1) << "window " << window << " rank " << r;
      EXPECT_EQ(uncompleted(t), std::to_string(m + 1) + ".." + std::to_string(kHung) + " " + std::to_string(kHung - m))
          << "window " << window << " rank " << r;
      const std::string line = "[rank " + std::to_string(r) + "] lockstep: rank " + std::to_string(r);
      const size_t at = job.result.err.find(line);
      ASSERT_NE(at, std::string::npos) << job.result.err;
      const std::string hang = job.result.err.substr(at, job.result.err.find('\n', at) - at);
      EXPECT_NE(hang.find("seq " + std::to_string(m + 1) + " "), std::string::npos) << hang;
      if (m < kHung - 1) {
        EXPECT_NE(hang.find("or a later op up to comm"), std::string::npos) << hang;
      }
    }
    // The analyzer: each rank blocked in its oldest op not known complete (a collective every
    // peer completed is complete: seq max(m)+1 on both), "or one up to" an op within the window
    // of its own last completed one (typed JSON field), and the text says the precision.
    ProcResult json = run({LOCKSTEP_CLI_PATH, "analyze", "--json", job.dir.path + "/trace"}, {}, 60);
    ProcResult text = run({LOCKSTEP_CLI_PATH, "analyze", job.dir.path + "/trace"}, {}, 60);
    EXPECT_EQ(json.exit_code, 1) << json.err;
    int64_t m[2] = {completed_prefix(Trace(job.by_rank.at(0))), completed_prefix(Trace(job.by_rank.at(1)))};
    const int64_t first = std::max(m[0], m[1]) + 1;
    EXPECT_NE(json.out.find("\"seq\": " + std::to_string(first) + ","), std::string::npos) << json.out;
    const bool range = first < kHung;
    EXPECT_EQ(json.out.find("\"stuck_in_one_up_to\"") != std::string::npos, range) << json.out;
    EXPECT_EQ(text.out.find("or a later op up to") != std::string::npos, range) << text.out;
    if (range) {
      EXPECT_NE(text.out.find("seq " + std::to_string(first) + " or a later op up to"), std::string::npos) << text.out;
      EXPECT_NE(text.out.find("(covering completion, window " + std::to_string(window) + ")"), std::string::npos)
          << text.out;
    }
  }
}
#endif
