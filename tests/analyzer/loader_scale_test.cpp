// The loader at scale (issue 11): files read in parallel give the same schedule and the same
// report as one thread; grouped ops keep their groups in the 16-byte SchedOp; a capped trace's
// retired ops are never loaded.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "analysis.h"
#include "trace_builder.h"
#include "trace_details.h"
#include "trace_loader.h"
#include "trace_schema.h"

using namespace lockstep;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;
namespace fs = std::filesystem;

namespace {

// 12 ranks: a world communicator and two halves; grouped pairs on the halves; rank 11 diverges
// near the end and nothing completes after it.
TraceBuilder mixed_trace() {
  const int n = 12;
  TraceBuilder b(n);
  std::vector<int> all, lo, hi;
  for (int p = 0; p < n; ++p) (p < n / 2 ? lo : hi).push_back(p), all.push_back(p);
  b.comm("00000000000000aa", all);
  b.comm("00000000000000b0", lo, "00000000000000aa", 0);
  b.comm("00000000000000b1", hi, "00000000000000aa", 1);
  for (int step = 0; step < 40; ++step)
    for (int p = 0; p < n; ++p) {
      const std::string half = p < n / 2 ? "00000000000000b0" : "00000000000000b1";
      const bool late = step >= 36;
      b.add(p, "00000000000000aa", {.count = 4096 + step, .completed = !late});
      b.add(p, half, {.op = "all_gather", .redop = "", .completed = !late, .group = step, .stream = 7});
      b.add(p, half, {.op = p == n - 1 && step == 37 ? "broadcast" : "reduce_scatter", .completed = !late, .group = step, .stream = 7});
    }
  for (int p = 0; p < n; ++p) b.running(p);
  return b;
}

std::string report_json(const Schedule& s) {
  Analysis a = analyze(s);
  auto details = details_from_files(s);
  return render_json(a, *details);
}

std::string report_text(const Schedule& s) {
  Analysis a = analyze(s);
  auto details = details_from_files(s);
  return render_text(a, *details);
}

void expect_same_schedule(const Schedule& a, const Schedule& b) {
  ASSERT_EQ(a.procs.size(), b.procs.size());
  ASSERT_EQ(a.sigs.size(), b.sigs.size());
  for (size_t i = 0; i < a.sigs.size(); ++i) EXPECT_EQ(signature_key(a.sigs[i]), signature_key(b.sigs[i])) << i;
  ASSERT_EQ(a.skipped.size(), b.skipped.size());
  for (size_t i = 0; i < a.skipped.size(); ++i) {
    EXPECT_EQ(a.skipped[i].path, b.skipped[i].path);
    EXPECT_EQ(a.skipped[i].reason, b.skipped[i].reason);
  }
  for (size_t p = 0; p < a.procs.size(); ++p) {
    const SchedProcess &x = a.procs[p], &y = b.procs[p];
    EXPECT_EQ(x.info.path, y.info.path);
    ASSERT_EQ(x.ops.size(), y.ops.size());
    for (size_t i = 0; i < x.ops.size(); ++i) {
      EXPECT_EQ(x.ops[i].call_index, y.ops[i].call_index);
      EXPECT_EQ(x.ops[i].sig, y.ops[i].sig);
      EXPECT_EQ(x.ops[i].seq, y.ops[i].seq);
      EXPECT_EQ(x.ops[i].comm, y.ops[i].comm);
      EXPECT_EQ(x.ops[i].stream, y.ops[i].stream);
      EXPECT_EQ(x.ops[i].flags, y.ops[i].flags);
      EXPECT_EQ(x.group_of(i), y.group_of(i));
    }
    EXPECT_EQ(x.streams, y.streams);
    EXPECT_EQ(x.unsequenced_ops, y.unsequenced_ops);
  }
}

void sql(const std::string& path, const std::string& text) { lockstep::testing::exec_sql(path, text); }

int64_t num(const std::string& path, const std::string& query) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, query.c_str(), -1, &st, nullptr), SQLITE_OK) << query;
  int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

}  // namespace

TEST(LoaderScale, parallel_load_reports_byte_identical_to_one_thread_with_skipped_and_torn_files) {
  auto dir = lockstep::testing::fresh_dir("scale-parallel");
  lockstep::testing::write_trace(mixed_trace().trace(), dir);
  const std::string good = dir + "/rank-3" + schema::kFileSuffix;
  // Torn: a copy cut mid-file (a partial copy; the header says more pages than there are).
  fs::copy_file(good, dir + "/torn" + schema::kFileSuffix);
  fs::resize_file(dir + "/torn" + schema::kFileSuffix, fs::file_size(good) / 2);
  std::ofstream(dir + "/empty" + schema::kFileSuffix) << "";
  std::ofstream(dir + "/garbage" + schema::kFileSuffix) << std::string(300, 'g');
  // Rank 5's file loses its op_rows table: skipped as corrupt, so rank 5's history is missing.
  sql(dir + "/rank-5" + schema::kFileSuffix, "DROP VIEW ops; DROP VIEW op_parts; DROP VIEW completions; DROP TABLE op_rows");

  LoadOptions one, many;
  one.threads = 1;
  many.threads = 8;
  Schedule s1 = load_schedule(dir, one);
  Schedule s8 = load_schedule(dir, many);
  ASSERT_EQ(s1.procs.size(), 11u);
  EXPECT_EQ(s1.skipped.size(), 4u);
  expect_same_schedule(s1, s8);
  const std::string j1 = report_json(s1), j8 = report_json(s8);
  EXPECT_EQ(j1, j8);
  EXPECT_NE(j1.find("torn"), std::string::npos) << "the torn file is named in the report";
  EXPECT_NE(j1.find("op_rows"), std::string::npos) << "the corrupt file's reason is in the report";
  EXPECT_EQ(report_text(s1), report_text(s8));
  // Repeated parallel loads (threads race for files differently each time) agree too.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(report_json(load_schedule(dir, many)), j1);
}

TEST(LoaderScale, grouped_ops_keep_their_groups_and_every_field_fits_the_compact_op) {
  auto dir = lockstep::testing::fresh_dir("scale-groups");
  TraceBuilder b(2);
  b.comm("00000000000000aa", {0, 1});
  b.comm("00000000000000bb", {0, 1});
  for (int p : {0, 1}) {
    b.add(p, "00000000000000aa", {.group = 41});
    b.add(p, "00000000000000bb", {.group = 41, .stream = 9});
    b.add(p, "00000000000000aa", {.completed = false});
    b.add(p, "00000000000000bb", {.completed = false, .group = 4000000000});
  }
  lockstep::testing::write_trace(b.trace(), dir);
  Schedule s = load_schedule(dir);
  ASSERT_EQ(s.procs.size(), 2u);
  for (const SchedProcess& p : s.procs) {
    ASSERT_EQ(p.ops.size(), 4u);
    EXPECT_NE(p.group_of(0), 0u);
    EXPECT_EQ(p.group_of(0), p.group_of(1));
    EXPECT_EQ(p.group_of(2), 0u);
    EXPECT_NE(p.group_of(3), 0u);
    EXPECT_NE(p.group_of(3), p.group_of(0));
    EXPECT_EQ(p.ops[0].seq, 1u);
    EXPECT_EQ(p.ops[3].seq, 2u);
    EXPECT_TRUE(p.ops[1].completed());
    EXPECT_FALSE(p.ops[3].completed());
    EXPECT_EQ(p.streams.at(p.ops[1].stream), 9u);
    EXPECT_LT(p.ops[0].call_index, p.ops[3].call_index);
    EXPECT_EQ(p.ops[0].call_index + 3, p.ops[3].call_index);
  }
  // The same as the in-memory path (schedule_from_trace) gives.
  Schedule m = schedule_from_trace(b.trace());
  for (size_t p = 0; p < 2; ++p)
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(m.procs[p].ops[i].call_index, s.procs[p].ops[i].call_index);
      EXPECT_EQ(m.procs[p].group_of(i) != 0, s.procs[p].group_of(i) != 0);
    }
}

TEST(LoaderScale, a_call_index_beyond_the_compact_range_skips_the_file_with_its_reason) {
  auto dir = lockstep::testing::fresh_dir("scale-callindex");
  TraceBuilder b(2);
  b.comm("00000000000000aa", {0, 1});
  b.all({0, 1}, "00000000000000aa", OpSpec{}, 3);
  lockstep::testing::write_trace(b.trace(), dir);
  sql(dir + "/rank-1" + schema::kFileSuffix,
      "UPDATE op_rows SET call_index = " + std::to_string(kMaxCallIndex + 1) + " WHERE call_index = (SELECT max(call_index) FROM op_rows)");
  Schedule s = load_schedule(dir);
  ASSERT_EQ(s.procs.size(), 1u);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].reason.find("call_index"), std::string::npos) << s.skipped[0].reason;
  EXPECT_NE(s.skipped[0].reason.find("out of range"), std::string::npos) << s.skipped[0].reason;
}

// A capped trace as the size cap leaves it (rows retired from the front of op_rows, meta
// retired_ops, comms.retired_*): the model holds exactly the retained sequenced rows.
TEST(LoaderScale, a_capped_traces_retired_ops_are_never_loaded) {
  auto dir = lockstep::testing::fresh_dir("scale-capped");
  TraceBuilder b(2);
  b.comm("00000000000000aa", {0, 1});
  b.all({0, 1}, "00000000000000aa", OpSpec{}, 500);
  b.add(0, "00000000000000aa", {.state = "failed"});  // unsequenced: counted, not kept
  lockstep::testing::write_trace(b.trace(), dir);
  const std::string f0 = dir + "/rank-0" + schema::kFileSuffix;
  const int64_t first = num(f0, "SELECT min(call_index) FROM op_rows");
  sql(f0, "DELETE FROM op_rows WHERE call_index < " + std::to_string(first + 400) +
              "; INSERT OR REPLACE INTO meta(key, value) VALUES('retired_ops', '400')"
              "; UPDATE comms SET retired_collectives=400, retired_through_seq=400");
  const int64_t rows = num(f0, "SELECT count(*) FROM op_rows");
  const int64_t sequenced = num(f0, "SELECT count(*) FROM op_rows WHERE seq IS NOT NULL");
  ASSERT_EQ(rows, 101);
  ASSERT_EQ(sequenced, 100);
  Schedule s = load_schedule(dir);
  ASSERT_EQ(s.procs.size(), 2u);
  const SchedProcess& p0 = s.procs[0];
  EXPECT_EQ(p0.info.retired_ops, 400);
  EXPECT_EQ(int64_t(p0.ops.size()), sequenced);
  EXPECT_EQ(p0.unsequenced_ops, rows - sequenced);
  EXPECT_EQ(p0.ops.front().seq, 401u);
  EXPECT_EQ(p0.ops.front().call_index, first + 400);
  EXPECT_EQ(p0.ops.capacity(), size_t(rows)) << "reserved for the retained rows only";
  EXPECT_EQ(s.procs[1].ops.size(), 500u);
}

// A job hung at its first collectives has no completion in any file: every op counts as in
// flight, and the hang explanation asks the age of each communicator's newest op. The loader
// keeps those issue times (only those), so the analysis never opens a rank's file again: the
// same ages with the files gone after loading (at 16,384 ranks reopening them took 18 s, 1.3 GB).
TEST(LoaderScale, without_completions_the_newest_ops_issue_times_are_kept_and_no_file_is_reopened) {
  auto dir = lockstep::testing::fresh_dir("scale-no-completions");
  TraceBuilder b(4);
  b.comm("00000000000000aa", {0, 1, 2, 3});
  b.comm("00000000000000b0", {0, 1}, "00000000000000aa", 0);
  b.comm("00000000000000b1", {2, 3}, "00000000000000aa", 1);
  for (int step = 0; step < 5; ++step)
    for (int p = 0; p < 4; ++p) {
      b.add(p, "00000000000000aa", {.completed = false});
      b.add(p, p < 2 ? "00000000000000b0" : "00000000000000b1", {.op = "all_gather", .redop = "", .completed = false, .stream = 7});
    }
  for (int p = 0; p < 4; ++p) b.running(p);
  lockstep::testing::write_trace(b.trace(), dir);

  Schedule s = load_schedule(dir);
  ASSERT_EQ(s.procs.size(), 4u);
  for (const SchedProcess& p : s.procs) {
    ASSERT_FALSE(p.completion_known) << p.info.path;
    std::vector<int64_t> newest(p.info.comms.size(), -1);
    for (const SchedOp& o : p.ops) newest[o.comm] = std::max<int64_t>(newest[o.comm], o.call_index);
    std::vector<int64_t> expected;
    for (int64_t ci : newest)
      if (ci >= 0) expected.push_back(ci);
    std::sort(expected.begin(), expected.end());
    std::vector<int64_t> kept;
    for (const auto& [ci, t] : p.in_flight_issue) {
      kept.push_back(ci);
      EXPECT_EQ(t, ci * 1000) << "the op's issue time as written";
    }
    EXPECT_EQ(kept, expected) << p.info.path;
  }
  const HangReport with_files = analyze(s).hang;
  fs::remove_all(dir);
  const HangReport without_files = analyze(s).hang;
  ASSERT_EQ(with_files.ranks.size(), 4u);
  ASSERT_EQ(without_files.ranks.size(), 4u);
  for (size_t p = 0; p < 4; ++p) {
    EXPECT_GT(with_files.ranks[p].in_flight, 0u);
    EXPECT_GT(with_files.ranks[p].in_flight_for_ns, 0) << "the age is known";
    EXPECT_EQ(without_files.ranks[p].in_flight_for_ns, with_files.ranks[p].in_flight_for_ns) << p;
    EXPECT_EQ(without_files.ranks[p].stopped_in_flight, with_files.ranks[p].stopped_in_flight) << p;
  }
}
