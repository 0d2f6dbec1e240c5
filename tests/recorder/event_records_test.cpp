// Event records held back (interposer/recorder.cpp): a cudaEventRecord's row is written only when
// a wait needs it (a cudaStreamWaitEvent on another stream, a cudaEventSynchronize), just before
// that wait's row; a wait for an event last recorded on the same stream writes no row. Run on
// the CPU NCCL fixture (recorder_fixture_program events): what the waits table holds, row by row,
// on a created stream and on the legacy default stream (one per context).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "trace_test_util.h"

using namespace lockstep::test;

namespace {

struct Job {
  TempDir dir;
  ProcResult result;
  std::vector<std::string> traces;

  explicit Job(std::vector<std::string> args) {
    std::map<std::string, std::string> env = {{"LD_PRELOAD", LIBLOCKSTEP_PATH},
                                              {"LD_LIBRARY_PATH", FIXTURE_LIB_DIR},
                                              {"LOCKSTEP_DIR", dir.path + "/trace"},
                                              {"LOCKSTEP_STACKS", "none"}};
    std::vector<std::string> argv = {LAUNCHER_PATH, "-n", "2", "--timeout", "60", "--", PROGRAM_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    result = run(argv, env, 90);
    traces = trace_files(dir.path + "/trace");
  }
};

// The kinds of the waits rows of one event handle, in call order, e.g. "event_record,stream_wait_event".
std::string kinds_of(const Trace& t, const std::string& event) {
  return t.scalar("SELECT ifnull(group_concat(kind, ','), '') FROM (SELECT kind FROM waits WHERE event = " +
                  event + " ORDER BY call_index)");
}

}  // namespace

class EventRecordsOn : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(EventRecords, EventRecordsOn, ::testing::Values("stream", "default"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

TEST_P(EventRecordsOn, a_record_is_written_only_before_a_wait_that_needs_it) {
  const int n = 50;
  const bool dflt = GetParam() == std::string("default");
  Job job({"events", std::to_string(n), GetParam()});
  ASSERT_EQ(job.result.exit_code, 0) << job.result.err;
  ASSERT_EQ(job.traces.size(), 2u) << job.result.err;
  for (const std::string& f : job.traces) {
    Trace t(f);
    // The program's events, by what was done with them: the first rows of the loop's events
    // come in the program's order (ea has none; eb's record comes first).
    const auto per_event = t.rows(
        "SELECT event, count(*), sum(kind = 'event_record'), sum(kind = 'stream_wait_event'), "
        "sum(kind = 'event_sync') FROM waits WHERE kind IN ('event_record', 'stream_wait_event', "
        "'event_sync') GROUP BY event HAVING count(*) >= " + std::to_string(n) + " ORDER BY min(call_index)");
    // eb: n records and n waits on another stream; ec: n records (the second of each pair),
    // n syncs; ee (default only): n records and n waits on another context's default stream.
    ASSERT_EQ(per_event.size(), dflt ? 3u : 2u) << f;
    const std::string N = std::to_string(n), N2 = std::to_string(2 * n);
    EXPECT_EQ(per_event[0][1] + "," + per_event[0][2] + "," + per_event[0][3] + "," + per_event[0][4],
              N2 + "," + N + "," + N + ",0") << "eb";
    EXPECT_EQ(per_event[1][1] + "," + per_event[1][2] + "," + per_event[1][3] + "," + per_event[1][4],
              N2 + "," + N + ",0," + N) << "ec";
    std::string alternating;
    for (int i = 0; i < n; i++) alternating += std::string(i ? "," : "") + "event_record,stream_wait_event";
    EXPECT_EQ(kinds_of(t, per_event[0][0]), alternating) << "eb: each wait after its record";
    if (dflt) {
      EXPECT_EQ(per_event[2][1] + "," + per_event[2][2] + "," + per_event[2][3], N2 + "," + N + "," + N) << "ee";
      EXPECT_EQ(kinds_of(t, per_event[2][0]), alternating) << "ee: each wait after its record";
    }
    // ec's record row is the second record of each pair: the one right before the sync.
    EXPECT_EQ(t.scalar("SELECT count(*) FROM waits s WHERE s.kind = 'event_sync' AND "
                       "(SELECT kind FROM waits p WHERE p.call_index < s.call_index "
                       "ORDER BY p.call_index DESC LIMIT 1) = 'event_record'"),
              N);
    // No wait on the stream its event was recorded on, no row of ea or of the destroyed events:
    // every stream_wait_event row waits on another stream than its event's record row.
    EXPECT_EQ(t.scalar("SELECT count(*) FROM waits w WHERE w.kind = 'stream_wait_event' AND "
                       "(SELECT r.stream FROM waits r WHERE r.event = w.event AND r.kind = 'event_record' "
                       "AND r.call_index < w.call_index ORDER BY r.call_index DESC LIMIT 1) = w.stream"),
              dflt ? N : "0")  // ee: handle 0 of another device: the same handle, another stream
        << f;
    // The 2,000 events recorded and then waited for on another stream: all written, each record
    // before its wait (more events than the recorder keeps back: some written when evicted).
    EXPECT_EQ(t.scalar("SELECT count(*) FROM (SELECT event FROM waits GROUP BY event HAVING "
                       "count(*) = 2 AND min(CASE kind WHEN 'event_record' THEN call_index END) < "
                       "min(CASE kind WHEN 'stream_wait_event' THEN call_index END))"),
              "2000") << f;
    // Nothing else: ea's same-stream waits left no row, nor did the syncs' first records, ea's
    // records or the destroyed events' records, but for a record written when another event took
    // its place in the recorder's table (the 2,000 events: a few, at most one per round's events).
    EXPECT_EQ(t.scalar("SELECT count(*) FROM waits WHERE kind IN ('stream_wait_event', 'event_sync')"),
              std::to_string(n + (dflt ? n : 0) + 2000 + n)) << f;
    const int records = std::stoi(t.scalar("SELECT count(*) FROM waits WHERE kind = 'event_record'"));
    const int needed = n + n + (dflt ? n : 0) + 2000;
    EXPECT_GE(records, needed) << f;
    EXPECT_LE(records, needed + 3 * n / 10) << f << ": records written though no wait needed them";
  }
}
