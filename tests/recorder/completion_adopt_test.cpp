// The default completion signal with adopted events (interposer/completion.h) on the CPU NCCL
// fixture and fake driver: a program that records an event on the op's stream right after each
// op (PyTorch's work end event) has those events adopted as the ops' signals, completions read
// as with our own per-op events, and a hang is still named as exactly one op; an event recorded
// on another stream is never taken for an op's signal, and an adopted event recorded again
// before its op completed leaves that op with no signal, named as a range.
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

  Job(std::vector<std::string> args, std::map<std::string, std::string> extra, double timeout_s = 30) {
    std::map<std::string, std::string> env = {{"LD_PRELOAD", LIBLOCKSTEP_PATH},
                                              {"LD_LIBRARY_PATH", FIXTURE_LIB_DIR},
                                              {"LOCKSTEP_DIR", dir.path + "/trace"},
                                              {"LOCKSTEP_STACKS", "none"}};
    for (auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {LAUNCHER_PATH, "-n", "2", "--timeout",
                                     std::to_string(timeout_s), "--", PROGRAM_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    result = run(argv, env, timeout_s + 15);
    for (auto& f : trace_files(dir.path + "/trace"))
      by_rank[std::stoi(Trace(f).meta("global_rank"))] = f;
  }
  std::string describe() const {
    return "launcher exit " + std::to_string(result.exit_code) + "\n" + result.err;
  }
  // The recorder's hang line of rank r ("" when none).
  std::string hang_line(int r) const {
    const std::string line = "[rank " + std::to_string(r) + "] lockstep: rank " + std::to_string(r);
    const size_t at = result.err.find(line);
    return at == std::string::npos ? "" : result.err.substr(at, result.err.find('\n', at) - at);
  }
};

// Sequenced ops without a completion row, as "first..last count" (empty when none).
std::string uncompleted(const Trace& t) {
  return t.scalar("SELECT ifnull(min(o.seq) || '..' || max(o.seq) || ' ' || count(*), '') FROM ops o "
                  "LEFT JOIN completions c USING(call_index) WHERE c.call_index IS NULL AND "
                  "o.seq IS NOT NULL");
}

// meta completion_adopted "adopted=A own_after=O lost=L" -> the value of `key`.
int64_t adopted_count(const Trace& t, const std::string& key) {
  const std::string m = t.meta("completion_adopted");
  const size_t at = m.find(key + "=");
  return at == std::string::npos ? -1 : std::stoll(m.substr(at + key.size() + 1));
}

const char* kOpsAndCompletions =
    "SELECT group_concat(x, ' ') FROM (SELECT ifnull(o.seq,'-') || ':' || o.op || ':' || o.state || ':' || "
    "(c.call_index IS NOT NULL) AS x FROM ops o LEFT JOIN completions c USING(call_index) ORDER BY o.call_index)";

}  // namespace

// 600 ops (groups among them) each followed by its end event, except ops 51 and 351: the ops and
// their completions read exactly as with our own event after every op (adoption switched off),
// every op completes, and the meta counts show the events were adopted (and our own recorded
// for the ops after a miss, until the thread is seen recording on the op's stream again). The
// same on the legacy default stream (handle 0), where PyTorch's synchronous collectives run,
// where an event recorded on handle 0 of another device (ops 17, 34, ...: 35 times) is not taken
// for the op's signal (our own event instead).
class AdoptedOnStream : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(AdoptedCompletion, AdoptedOnStream, ::testing::Values("clean", "default"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });
TEST_P(AdoptedOnStream, ops_with_the_callers_end_events_complete_as_with_our_own) {
  Job adopt({"torch", "600", GetParam()}, {});
  Job own({"torch", "600", GetParam()}, {{"LOCKSTEP_BENCH_OFF", "adopt"}});
  ASSERT_EQ(adopt.result.exit_code, 0) << adopt.describe();
  ASSERT_EQ(own.result.exit_code, 0) << own.describe();
  ASSERT_EQ(adopt.by_rank.size(), 2u) << adopt.describe();
  ASSERT_EQ(own.by_rank.size(), 2u) << own.describe();
  for (int rank = 0; rank < 2; rank++) {
    Trace a(adopt.by_rank[rank]), o(own.by_rank[rank]);
    EXPECT_EQ(a.meta("completion_signal"), "event");
    EXPECT_EQ(a.scalar(kOpsAndCompletions), o.scalar(kOpsAndCompletions)) << "rank " << rank;
    EXPECT_EQ(uncompleted(a), "") << "rank " << rank;
    EXPECT_EQ(a.scalar("SELECT count(*) FROM ops WHERE seq IS NOT NULL"), "600") << "rank " << rank;
    // The two ops without an end event get our own event when the next op comes; the op
    // after each is recorded at once (the thread then records its end event again: adopted
    // from the next op on). An index entry held by another live event would take a few more
    // (a hash collision of the program's event handles), hence the bounds.
    const int64_t adopted = adopted_count(a, "adopted"), own_after = adopted_count(a, "own_after");
    EXPECT_GE(own_after, GetParam() == std::string("default") ? 35 : 2) << a.meta("completion_adopted");
    EXPECT_LE(adopted, 600 - 2 - 2) << a.meta("completion_adopted");
    EXPECT_GE(adopted, 500) << a.meta("completion_adopted");
    EXPECT_EQ(adopted_count(o, "adopted"), 0) << o.meta("completion_adopted");
  }
}

// The seed's shape: 20 matching ops with end events and no synchronize, then rank 0 issues a
// reduce_scatter where rank 1 issues an all_to_all, each followed by its end event. The hang is
// named as that one op (seq 21), by the recorder's hang line and by the analyzer, as with our
// own events; `elsewhere` records an event on another stream first (our own event then).
TEST(AdoptedCompletion, a_hang_is_named_exactly_with_adopted_or_own_events) {
  const char* op[] = {"reduce_scatter", "all_to_all"};
  for (const char* how : {"diverge", "elsewhere"}) {
    Job job({"torch", "20", how}, {{"LOCKSTEP_HANG_TIMEOUT", "1"}}, 4);
    EXPECT_EQ(job.result.exit_code, 124) << how << ": " << job.describe();
    ASSERT_EQ(job.by_rank.size(), 2u) << job.describe();
    for (int r = 0; r < 2; r++) {
      Trace t(job.by_rank.at(r));
      EXPECT_EQ(uncompleted(t), "21..21 1") << how << " rank " << r;
      const std::string hang = job.hang_line(r);
      EXPECT_NE(hang.find(std::string("seq 21 ") + op[r]), std::string::npos) << how << ": " << job.result.err;
      EXPECT_EQ(hang.find("or a later op"), std::string::npos) << how << ": " << hang;
    }
    ProcResult json = run({LOCKSTEP_CLI_PATH, "analyze", "--json", job.dir.path + "/trace"}, {}, 60);
    EXPECT_EQ(json.exit_code, 1) << json.err;
    EXPECT_NE(json.out.find("\"seq\": 21,"), std::string::npos) << how << ": " << json.out;
    EXPECT_EQ(json.out.find("\"stuck_in_one_up_to\""), std::string::npos) << how << ": " << json.out;
  }
}

// The divergent op's end event is recorded again on another stream before the op could
// complete, and an all-reduce follows: that op has no signal left, so the hang line names the
// range from it up to the all-reduce (whose own event is pending), never one op as certain.
TEST(AdoptedCompletion, an_adopted_event_recorded_again_too_early_leaves_a_range) {
  const char* op[] = {"reduce_scatter", "all_to_all"};
  Job job({"torch", "20", "reuse"}, {{"LOCKSTEP_HANG_TIMEOUT", "1"}}, 4);
  EXPECT_EQ(job.result.exit_code, 124) << job.describe();
  ASSERT_EQ(job.by_rank.size(), 2u) << job.describe();
  for (int r = 0; r < 2; r++) {
    Trace t(job.by_rank.at(r));
    EXPECT_EQ(uncompleted(t), "21..22 2") << "rank " << r;
    const std::string hang = job.hang_line(r);
    EXPECT_NE(hang.find(std::string("seq 21 ") + op[r] + " count=64 or a later op up to comm"), std::string::npos)
        << hang << "\n" << job.result.err;
    EXPECT_NE(hang.find("seq 22 all_reduce"), std::string::npos) << hang;
  }
}
