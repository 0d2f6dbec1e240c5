// The loader over real trace files: round trip, every skip reason, live files, never writing.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "coverage.h"
#include "timeline.h"
#include "trace_builder.h"
#include "trace_loader.h"
#include "trace_schema.h"

using namespace lockstep;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;
namespace fs = std::filesystem;

namespace {

TraceBuilder two_rank_trace(int ops = 10) {
  TraceBuilder b(2);
  b.comm("00000000000000aa", {0, 1});
  b.all({0, 1}, "00000000000000aa", OpSpec{.stack = 1}, ops);
  for (int p : {0, 1})
    b.stack(p, 1, {Frame{lockstep::vocab::FrameKind::Python, "train_step", "", 0, "train.py", 42}, Frame{lockstep::vocab::FrameKind::Native, "ncclAllReduce", "libnccl.so.2", 0x1234, "", 0}});
  return b;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void sql(const std::string& path, const std::string& text) { lockstep::testing::exec_sql(path, text); }

std::string reason_for(const Schedule& s, const std::string& file) {
  for (auto& sk : s.skipped)
    if (fs::path(sk.path).filename() == file) return sk.reason;
  return "(not skipped)";
}

// A writer that dies mid-transaction, after its page cache spilled into the file: `path` keeps
// a hot journal beside it (its uncommitted change: every signature's op 1, the rows doubled).
void leave_hot_journal(const std::string& path) {
  pid_t child = fork();
  if (child == 0) {
    sqlite3* w = nullptr;
    sqlite3_open(path.c_str(), &w);
    sqlite3_exec(w, "PRAGMA journal_mode=DELETE; PRAGMA cache_size=2; BEGIN; UPDATE signatures SET op=1; "
                    "INSERT INTO op_rows SELECT call_index+100000, sig, seq+1000, t, ret, done, wall, state, group_id "
                    "FROM op_rows",
                 nullptr, nullptr, nullptr);
    _exit(0);  // no COMMIT, no close: the journal stays hot
  }
  int status = 0;
  waitpid(child, &status, 0);
}

}  // namespace

TEST(Loader, reads_back_every_field_the_writer_stored) {
  auto dir = lockstep::testing::fresh_dir("roundtrip");
  TraceBuilder b = two_rank_trace();
  b.add(0, "00000000000000aa", {.op = "all_to_all", .count = 5, .redop = "",
                               .parts = {lockstep::testing::send_to(1, 5), lockstep::testing::recv_from(1, 5)}});
  b.trace().processes[1].hangs.push_back({7, 8, 1, "hang!"});
  lockstep::testing::write_trace(b.trace(), dir);
  const Schedule t = lockstep::load_headers(dir);
  ASSERT_TRUE(t.skipped.empty()) << t.skipped[0].reason;
  ASSERT_EQ(t.procs.size(), 2u);
  const Process p0 = lockstep::load_process_file(t.procs[0].info.path);
  EXPECT_EQ(p0.global_rank, 0);
  EXPECT_EQ(p0.host, "node0");
  EXPECT_TRUE(p0.finished);
  ASSERT_EQ(p0.comms.size(), 1u);
  EXPECT_EQ(p0.comms[0].hash, "00000000000000aa");
  ASSERT_EQ(p0.ops.size(), 11u);
  EXPECT_EQ(p0.ops[0].op, lockstep::vocab::Op::AllReduce);
  EXPECT_EQ(p0.ops[0].redop, lockstep::vocab::RedOp::Sum);
  EXPECT_EQ(p0.ops[0].seq, 1);
  EXPECT_TRUE(p0.ops[0].completed);
  EXPECT_EQ(p0.ops[10].parts.size(), 2u);
  ASSERT_EQ(p0.stacks.at(1).size(), 2u);
  EXPECT_EQ(p0.stacks.at(1)[0].file, "train.py");
  EXPECT_EQ(p0.stacks.at(1)[1].offset, 0x1234u);
  ASSERT_EQ(t.procs[1].info.hangs.size(), 1u);
  EXPECT_EQ(t.procs[1].info.hangs[0].message, "hang!");

  Schedule s = load_schedule(dir);
  ASSERT_EQ(s.procs.size(), 2u);
  EXPECT_EQ(s.procs[0].ops.size(), 11u);
  EXPECT_TRUE(s.procs[0].completion_known);
  // Equal descriptions intern to one signature across files.
  EXPECT_EQ(s.procs[0].ops[0].sig, s.procs[1].ops[0].sig);
  EXPECT_EQ(s.sigs[s.procs[0].ops[10].sig].cls, OpClass::kAllToAll);
}

TEST(Loader, skips_each_unusable_file_with_its_reason_and_keeps_the_good_ones) {
  auto dir = lockstep::testing::fresh_dir("skips");
  lockstep::testing::write_trace(two_rank_trace(200).trace(), dir);
  std::string good = dir + "/rank-0" + schema::kFileSuffix;
  auto put = [&](const std::string& name, const std::string& bytes) { std::ofstream(dir + "/" + name) << bytes; };
  put(std::string("text") + schema::kFileSuffix, std::string(200, 'x'));
  put(std::string("empty") + schema::kFileSuffix, "");
  fs::copy_file(good, dir + "/foreign" + schema::kFileSuffix);
  sql(dir + "/foreign" + schema::kFileSuffix, "PRAGMA application_id=1234");
  fs::copy_file(good, dir + "/newer" + schema::kFileSuffix);
  sql(dir + "/newer" + schema::kFileSuffix, "UPDATE meta SET value='99' WHERE key='schema_version'");
  fs::copy_file(good, dir + "/older" + schema::kFileSuffix);
  sql(dir + "/older" + schema::kFileSuffix, "UPDATE meta SET value='0' WHERE key='schema_version'");
  fs::copy_file(good, dir + "/truncated" + schema::kFileSuffix);
  fs::resize_file(dir + "/truncated" + schema::kFileSuffix, fs::file_size(good) / 2);
  fs::copy_file(good, dir + "/corrupt" + schema::kFileSuffix);
  {
    // Same size, garbage over the pages after the first: the b-trees no longer parse.
    std::fstream f(dir + "/corrupt" + schema::kFileSuffix, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    std::string junk(fs::file_size(good) - 4096, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  put("notes.txt", "ignored: not a trace file name");

  Schedule s = load_schedule(dir);
  EXPECT_EQ(s.procs.size(), 2u);
  EXPECT_EQ(s.skipped.size(), 7u);
  auto expect = [&](const std::string& file, const std::string& needle) {
    std::string r = reason_for(s, file + schema::kFileSuffix);
    EXPECT_NE(r.find(needle), std::string::npos) << file << ": expected reason containing '" << needle << "', got '" << r << "'";
  };
  expect("text", "not an SQLite database");
  expect("empty", "empty file");
  expect("foreign", "not a lockstep trace");
  expect("newer", "newer than this lockstep");
  expect("older", "older than this lockstep");
  expect("truncated", "truncated");
  expect("corrupt", "corrupt");
}

TEST(Loader, missing_or_empty_directory_is_an_error_that_says_so) {
  try {
    load_schedule("/nonexistent/lockstep-dir");
    FAIL() << "expected LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("no such directory"), std::string::npos) << e.what();
  }
  auto dir = lockstep::testing::fresh_dir("empty-dir");
  try {
    load_schedule(dir);
    FAIL() << "expected LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("no trace files"), std::string::npos) << e.what();
  }
}

TEST(Loader, reads_a_file_while_its_writer_holds_an_open_transaction) {
  auto dir = lockstep::testing::fresh_dir("live");
  lockstep::testing::write_trace(two_rank_trace(5).trace(), dir);
  std::string path = dir + "/rank-0" + schema::kFileSuffix;
  sqlite3* w = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &w), SQLITE_OK);
  // Uncommitted rows (RESERVED lock): readers see the last committed state.
  ASSERT_EQ(sqlite3_exec(w, "BEGIN IMMEDIATE; INSERT INTO op_rows(call_index, sig, seq, t, wall, state) "
                            "VALUES(1000, 1, 6, 0, 0, 0)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  Schedule s = load_schedule(dir);
  EXPECT_TRUE(s.skipped.empty()) << s.skipped[0].reason;
  EXPECT_EQ(s.procs[0].ops.size(), 5u);
  // An exclusive lock (the writer committing) held longer than one statement: the loader waits.
  ASSERT_EQ(sqlite3_exec(w, "PRAGMA locking_mode=EXCLUSIVE; COMMIT; BEGIN EXCLUSIVE; "
                            "UPDATE op_rows SET done = 1 WHERE call_index = 1000",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sqlite3_exec(w, "COMMIT; PRAGMA locking_mode=NORMAL; SELECT 1 FROM meta", nullptr, nullptr, nullptr);
  });
  Schedule s2 = load_schedule(dir);
  release.join();
  sqlite3_close(w);
  ASSERT_TRUE(s2.skipped.empty()) << s2.skipped[0].reason;
  EXPECT_EQ(s2.procs[0].ops.size(), 6u);
  EXPECT_TRUE(s2.procs[0].ops.back().completed());
}

TEST(Loader, never_modifies_a_trace_even_one_with_a_hot_journal) {
  auto dir = lockstep::testing::fresh_dir("readonly");
  lockstep::testing::write_trace(two_rank_trace(50).trace(), dir);
  std::string path = dir + "/rank-0" + schema::kFileSuffix;
  leave_hot_journal(path);
  ASSERT_TRUE(fs::exists(path + "-journal")) << "test setup: expected a hot journal";
  std::string before = slurp(path), journal = slurp(path + "-journal");
  const Process p = lockstep::load_process_file(path);
  ASSERT_EQ(p.ops.size(), 50u) << "the uncommitted transaction must be rolled back";
  EXPECT_EQ(p.ops[0].op, lockstep::vocab::Op::AllReduce);
  EXPECT_EQ(slurp(path), before) << "the trace file was modified";
  EXPECT_EQ(slurp(path + "-journal"), journal) << "the journal was modified";
}

// Readers name a file by its path as given (read_ahead_vfs.h: no lstat of every directory level):
// a trace reached through a linked directory, a linked file or a relative path is still read
// with the hot journal beside it rolled back, and never modified.
TEST(Loader, a_trace_through_a_linked_directory_a_linked_file_or_a_relative_path_finds_its_journal) {
  auto dir = lockstep::testing::fresh_dir("linked");
  lockstep::testing::write_trace(two_rank_trace(50).trace(), dir);
  const std::string name = std::string("rank-0") + schema::kFileSuffix;
  const std::string path = dir + "/" + name;
  leave_hot_journal(path);
  ASSERT_TRUE(fs::exists(path + "-journal")) << "test setup: expected a hot journal";
  const std::string before = slurp(path);
  const std::string links = lockstep::testing::fresh_dir("linked-links");
  fs::create_directory_symlink(fs::absolute(dir), links + "/dir");
  fs::create_symlink(fs::absolute(path), links + "/file" + schema::kFileSuffix);
  const fs::path cwd = fs::current_path();
  fs::current_path(fs::path(dir).parent_path());
  const std::string relative = fs::path(dir).filename().string() + "/" + name;
  for (const std::string& p : {links + "/dir/" + name, links + "/file" + schema::kFileSuffix, relative}) {
    SCOPED_TRACE(p);
    try {
      const Process proc = lockstep::load_process_file(p);
      EXPECT_EQ(proc.ops.size(), 50u) << "the uncommitted transaction must be rolled back";
      if (!proc.ops.empty()) {
        EXPECT_EQ(proc.ops[0].op, lockstep::vocab::Op::AllReduce);
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not read: " << e.what();
    }
  }
  fs::current_path(cwd);
  EXPECT_EQ(slurp(path), before) << "the trace file was modified";
  // A link to an SQLite database of another application: skipped for what it is, not as "not an
  // SQLite database".
  const std::string other = links + "/other.sqlite";
  sql(other, "CREATE TABLE t(x); INSERT INTO t VALUES (1);");
  fs::create_symlink(other, links + "/other" + schema::kFileSuffix);
  try {
    lockstep::load_process_file(links + "/other" + schema::kFileSuffix);
    ADD_FAILURE() << "another application's database was read as a trace";
  } catch (const lockstep::LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("application_id"), std::string::npos) << e.what();
  }
}

// A journal far larger than any rollback of its trace could need (a 1 GiB sparse file beside a
// small trace) is not copied into $TMPDIR: the file is skipped, the reason names the journal.
TEST(Loader, oversized_hot_journal_is_skipped_not_copied) {
  auto dir = lockstep::testing::fresh_dir("huge-journal");
  lockstep::testing::write_trace(two_rank_trace(50).trace(), dir);
  std::string path = dir + "/rank-0" + schema::kFileSuffix;
  leave_hot_journal(path);
  ASSERT_TRUE(fs::exists(path + "-journal")) << "test setup: expected a hot journal";
  fs::resize_file(path + "-journal", uintmax_t(1) << 30);  // sparse: no disk used
  const std::string tmp = lockstep::testing::fresh_dir("huge-journal-tmp");
  setenv("TMPDIR", tmp.c_str(), 1);
  try {
    lockstep::load_process_file(path);
    ADD_FAILURE() << "a trace with a 1 GiB journal was read";
  } catch (const lockstep::LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("-journal"), std::string::npos) << e.what();
  }
  unsetenv("TMPDIR");
  EXPECT_TRUE(fs::is_empty(tmp)) << "something was copied into $TMPDIR";
}

// The one parser of the trace's integer text (trace_file::parse_int): hostile meta values never
// throw and never wrap; what is not an integer reads as absent, what passes int64 saturates.
TEST(MetaInt, hostile_text_is_absent_malformed_or_saturated_never_a_throw) {
  using trace_file::TextInt;
  struct Case {
    const char* text;
    TextInt::Kind kind;
    int64_t value;
  } cases[] = {
      {"", TextInt::kAbsent, 0},
      {"42", TextInt::kValue, 42},
      {"-1", TextInt::kValue, -1},
      {"-9223372036854775808", TextInt::kValue, INT64_MIN},
      {"9223372036854775807", TextInt::kValue, INT64_MAX},
      {"9223372036854775808", TextInt::kOutOfRange, INT64_MAX},
      {"99999999999999999999999", TextInt::kOutOfRange, INT64_MAX},
      {"-99999999999999999999999", TextInt::kOutOfRange, INT64_MIN},
      {"12abc", TextInt::kMalformed, 0},
      {"999999999999999999999x", TextInt::kMalformed, 0},  // out of range and trailing junk
      {" 3", TextInt::kMalformed, 0},
      {"3 ", TextInt::kMalformed, 0},
      {"+3", TextInt::kMalformed, 0},
      {"-", TextInt::kMalformed, 0},
      {"0x10", TextInt::kMalformed, 0},
      {"NaN", TextInt::kMalformed, 0},
      {"1e9", TextInt::kMalformed, 0},
      {"\x1b[31m", TextInt::kMalformed, 0},
  };
  for (const Case& c : cases) {
    TextInt r;
    ASSERT_NO_THROW(r = trace_file::parse_int(c.text)) << c.text;
    EXPECT_EQ(r.kind, c.kind) << c.text;
    EXPECT_EQ(r.value, c.value) << c.text;
    EXPECT_EQ(r.or_default(-5), c.kind == TextInt::kValue || c.kind == TextInt::kOutOfRange ? c.value : -5) << c.text;
  }
  // A string with an embedded NUL is not an integer, although its prefix is.
  EXPECT_EQ(trace_file::parse_int(std::string_view("7\0" "1", 3)).kind, TextInt::kMalformed);
  EXPECT_EQ(trace_file::global_rank_from_meta("abc"), -1);
  EXPECT_EQ(trace_file::global_rank_from_meta("3"), 3);
  EXPECT_EQ(trace_file::global_rank_from_meta("99999999999"), INT32_MAX);
  EXPECT_EQ(trace_file::global_rank_from_meta("-99999999999999999999999"), INT32_MIN);
}

// Hostile meta values in real files, through every reader of meta integers: the loader's header,
// the recorder's in-job reader of its peers' ranks, the timeline's clocks and the coverage counts.
TEST(MetaInt, hostile_meta_values_in_a_file_reach_no_reader_as_a_throw_or_a_wrapped_value) {
  auto dir = lockstep::testing::fresh_dir("meta-int");
  lockstep::testing::write_trace(two_rank_trace(4).trace(), dir);
  const std::string r0 = dir + "/rank-0" + schema::kFileSuffix, r1 = dir + "/rank-1" + schema::kFileSuffix;
  EXPECT_EQ(trace_file::read_global_rank(r1, 100), 1);
  sql(r1, "UPDATE meta SET value='1abc' WHERE key='global_rank'");
  EXPECT_EQ(trace_file::read_global_rank(r1, 100), -1);  // was 1 through sqlite3_column_int
  sql(r1, "UPDATE meta SET value=NULL WHERE key='global_rank'");
  EXPECT_EQ(trace_file::read_global_rank(r1, 100), -1);
  sql(r1, "UPDATE meta SET value='1' WHERE key='global_rank'");
  EXPECT_EQ(trace_file::read_global_rank(dir + "/absent" + schema::kFileSuffix, 100), -1);
  // Values with no meaning to the verdict read as absent.
  for (const char* key : {"start_wall_ns", "start_mono_ns", "pid", "profiler_dropped", "interposer_preloaded"})
    sql(r0, std::string("INSERT OR REPLACE INTO meta(key, value) VALUES('") + key + "', '99999999999999999999999999x')");
  Schedule s;
  ASSERT_NO_THROW(s = load_headers(dir));
  ASSERT_EQ(s.procs.size(), 2u);
  const Process& p = s.procs[0].info;
  EXPECT_EQ(p.pid, 0);
  EXPECT_FALSE(meta_int(p, "start_wall_ns").integer());
  EXPECT_EQ(meta_int(p, "no such key").kind, trace_file::TextInt::kAbsent);
  // Counters the verdict rests on (issue 29): a value that is not a count is a corrupt file,
  // skipped with its reason, never read as 0 (none dropped) or saturated.
  for (const char* key : {"dropped_records", "checkpoint_interval", "retired_ops"})
    for (const char* value : {"99999999999999999999999999x", "99999999999999999999999999", "-1"}) {
      sql(r0, std::string("INSERT OR REPLACE INTO meta(key, value) VALUES('") + key + "', '" + value + "')");
      ASSERT_NO_THROW(s = load_headers(dir));
      ASSERT_EQ(s.procs.size(), 1u) << key << "=" << value;
      ASSERT_EQ(s.skipped.size(), 1u) << key << "=" << value;
      EXPECT_NE(s.skipped[0].reason.find(std::string(key) + " '" + value + "' is not a count"), std::string::npos)
          << s.skipped[0].reason;
      sql(r0, std::string("INSERT OR REPLACE INTO meta(key, value) VALUES('") + key + "', '0')");
    }
  sql(r0, "UPDATE meta SET value='99999999999999999999999999x' WHERE key='dropped_records'");
  ASSERT_NO_THROW(s = load_headers(dir));
  std::string timeline;
  ASSERT_NO_THROW(timeline = timeline_json(s, [&](size_t i) { return load_process_file(s.procs[i].info.path); }));
  EXPECT_NE(timeline.find("traceEvents"), std::string::npos);
  ASSERT_NO_THROW(read_coverage(load_schedule(dir)));
}

// One builder of the index (schedule.h ScheduleBuilder): the rows in memory and the file written
// from them index the same ops, with the same streams (overflow bucket included), groups,
// completion and signatures. A failed row that still carries a seq is unsequenced on both paths.
TEST(Loader, the_file_and_the_rows_it_was_written_from_index_the_same_ops) {
  auto dir = lockstep::testing::fresh_dir("one-index");
  TraceBuilder b(2);
  b.comm("00000000000000aa", {0, 1});
  for (int i = 0; i < 300; ++i)  // 300 streams: 255 buckets and the overflow list
    b.all({0, 1}, "00000000000000aa",
          OpSpec{.count = 8 + i % 7, .completed = i % 3 != 0, .group = i % 5 == 0 ? i : -1, .stream = 100 + uint64_t(i)});
  Op& failed = b.add(0, "00000000000000aa", {.completed = true, .state = lockstep::vocab::State::Failed});
  failed.seq = 999;
  b.add(1, "00000000000000aa", {.completed = false, .state = lockstep::vocab::State::Captured});
  lockstep::testing::write_trace(b.trace(), dir);
  const Schedule f = load_schedule(dir);
  const Schedule m = lockstep::schedule_from_trace(b.trace());
  ASSERT_TRUE(f.skipped.empty()) << f.skipped[0].reason;
  ASSERT_EQ(f.procs.size(), m.procs.size());
  for (size_t p = 0; p < f.procs.size(); ++p) {
    const lockstep::SchedProcess &a = f.procs[p], &c = m.procs[p];
    ASSERT_EQ(a.ops.size(), 300u);
    ASSERT_EQ(a.ops.size(), c.ops.size());
    EXPECT_EQ(a.unsequenced_ops, 1);
    EXPECT_EQ(a.unsequenced_ops, c.unsequenced_ops);
    EXPECT_EQ(a.completion_known, c.completion_known);
    EXPECT_EQ(a.streams, c.streams);
    EXPECT_EQ(a.overflow_streams, c.overflow_streams);
    EXPECT_EQ(a.overflow_streams.size(), 45u);
    for (size_t i = 0; i < a.ops.size(); ++i) {
      SCOPED_TRACE("proc " + std::to_string(p) + " op " + std::to_string(i));
      EXPECT_EQ(a.ops[i].call_index, c.ops[i].call_index);
      EXPECT_EQ(a.ops[i].seq, c.ops[i].seq);
      EXPECT_EQ(a.ops[i].comm, c.ops[i].comm);
      EXPECT_EQ(a.ops[i].flags, c.ops[i].flags);
      EXPECT_EQ(a.stream_of(i), c.stream_of(i));
      EXPECT_EQ(a.stream_of(i), 100 + i);
      EXPECT_EQ(a.group_of(i), c.group_of(i));
      EXPECT_EQ(lockstep::describe_signature(f.sigs[a.ops[i].sig]), lockstep::describe_signature(m.sigs[c.ops[i].sig]));
    }
  }
}

// stacks looks up an op before a file's cut by bisection on call_index: from the file and from
// the rows it was written from alike, every seq found, none invented; a file whose seqs do not
// grow is never answered wrongly (nullopt: the caller reads every row).
TEST(Details, an_op_is_found_by_its_seq_with_a_bisection_on_call_index) {
  auto dir = lockstep::testing::fresh_dir("find-by-seq");
  TraceBuilder b(2);
  b.comm("00000000000000aa", {0, 1});
  b.comm("00000000000000bb", {0, 1});
  for (int i = 0; i < 400; ++i) {
    b.all({0, 1}, "00000000000000aa", OpSpec{.count = 8 + i, .completed = i % 3 != 0});
    if (i % 7 == 0) b.all({0, 1}, "00000000000000bb", OpSpec{.count = 1});
    if (i % 11 == 0) b.add(0, "00000000000000aa", {.completed = true, .state = lockstep::vocab::State::Failed});  // no seq
  }
  lockstep::testing::write_trace(b.trace(), dir);
  const Schedule f = load_schedule(dir);
  ASSERT_TRUE(f.skipped.empty()) << f.skipped[0].reason;
  auto files = lockstep::details_from_files(f);
  auto memory = lockstep::details_from_trace(b.trace());
  for (int p = 0; p < 2; ++p) {
    const int proc = [&] {  // the loader sorts its processes: find the trace's process p in it
      for (size_t i = 0; i < f.procs.size(); ++i)
        if (f.procs[i].info.pid == b.trace().processes[p].pid) return static_cast<int>(i);
      return -1;
    }();
    ASSERT_GE(proc, 0);
    for (int comm = 0; comm < 2; ++comm) {
      const int64_t last = comm == 0 ? 400 : 58;
      for (int64_t seq : {int64_t(1), int64_t(2), int64_t(57), int64_t(58), int64_t(199), last, last + 1, int64_t(0)}) {
        SCOPED_TRACE("proc " + std::to_string(p) + " comm " + std::to_string(comm) + " seq " + std::to_string(seq));
        auto from_file = lockstep::find_op_by_seq(*files, proc, comm, seq, 0, lockstep::kMaxCallIndex);
        auto from_memory = lockstep::find_op_by_seq(*memory, p, comm, seq, 0, lockstep::kMaxCallIndex);
        ASSERT_EQ(from_file.has_value(), seq >= 1 && seq <= last);
        ASSERT_EQ(from_memory.has_value(), from_file.has_value());
        if (!from_file) continue;
        EXPECT_EQ(from_file->seq, seq);
        EXPECT_EQ(from_file->comm, comm);
        EXPECT_EQ(from_file->call_index, from_memory->call_index);
        EXPECT_EQ(from_file->count, from_memory->count);
        EXPECT_EQ(from_file->completed, from_memory->completed);
        // Bounded below the op: not found.
        EXPECT_FALSE(lockstep::find_op_by_seq(*files, proc, comm, seq, 0, from_file->call_index - 1));
      }
    }
  }
  // The lookups leave no file locked: a writer (a live recorder) commits at once.
  for (const lockstep::SchedProcess& sp : f.procs) {
    sqlite3* w = nullptr;
    ASSERT_EQ(sqlite3_open(sp.info.path.c_str(), &w), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(w, "BEGIN EXCLUSIVE; COMMIT", nullptr, nullptr, nullptr), SQLITE_OK) << sp.info.path;
    sqlite3_close(w);
  }
  // Crafted: rank 0's seqs of communicator aa no longer grow with call_index (reversed).
  const Process& p0 = f.procs[0].info;
  sql(p0.path, "UPDATE op_rows SET seq = 401 - seq WHERE seq IS NOT NULL AND sig IN (SELECT id FROM signatures WHERE comm_id = " +
                   std::to_string(p0.comms[0].local_id) + ")");
  auto crafted = lockstep::details_from_files(f);
  for (int64_t seq = 1; seq <= 400; ++seq) {
    auto op = lockstep::find_op_by_seq(*crafted, 0, 0, seq, 0, lockstep::kMaxCallIndex);
    if (op) {
      EXPECT_EQ(op->seq, seq);  // found only where the bisection met it: never another op
    }
  }
  EXPECT_FALSE(lockstep::find_op_by_seq(*crafted, 0, 0, 1, 0, lockstep::kMaxCallIndex));  // the first op now says 400
}

// Readers open trace files through the read-ahead VFS (schema/read_ahead_vfs.h): a window of the
// file is kept only under one shared lock. One read-only connection, a writer committing between
// its reads (and while it opens the file, before any lock): every read sees the latest commit.
TEST(ReadAheadVfs, a_window_never_outlives_the_shared_lock_it_was_read_under) {
  auto dir = lockstep::testing::fresh_dir("read-ahead");
  lockstep::testing::write_trace(two_rank_trace(5).trace(), dir);
  const std::string path = dir + "/rank-0" + schema::kFileSuffix;
  sqlite3* w = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &w), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(w, "PRAGMA synchronous=OFF", nullptr, nullptr, nullptr), SQLITE_OK);
  lockstep::trace_file::Db r;
  ASSERT_EQ(r.open_untrusted(path), SQLITE_OK);  // SQLite reads the header here, without a lock
  auto count = [&] {
    lockstep::trace_file::Stmt st(r.get(), "SELECT count(*), coalesce(sum(CASE WHEN call_index >= 1000 THEN done END), 0) FROM op_rows",
                                  false);
    EXPECT_TRUE(st.ok()) << sqlite3_errmsg(r.get());
    EXPECT_EQ(st.step(), SQLITE_ROW);
    return std::pair<int64_t, int64_t>(st.column_i64(0), st.column_i64(1));
  };
  EXPECT_EQ(count().first, 5);
  for (int i = 0; i < 200; ++i) {  // enough rows to move pages past the first window's
    const std::string sql = "INSERT INTO op_rows(call_index, sig, seq, t, wall, state, done) VALUES(" +
                            std::to_string(1000 + i) + ", 1, " + std::to_string(6 + i) + ", 0, 0, 0, 1)";
    ASSERT_EQ(sqlite3_exec(w, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    if (i % 50 == 49) {
      EXPECT_EQ(count(), std::make_pair(int64_t(6 + i), int64_t(i + 1)));
    }
  }
  ASSERT_EQ(sqlite3_exec(w, "UPDATE op_rows SET done = 7 WHERE call_index = 1000", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_EQ(count(), std::make_pair(int64_t(205), int64_t(199 + 7)));
  sqlite3_close(w);
}
