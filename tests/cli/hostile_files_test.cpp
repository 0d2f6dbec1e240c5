// Hostile trace files (issue 29): a file whose bytes were written by anyone must not hang, exhaust
// or mislead any command that reads it. Each case starts from a good two-rank trace and changes
// rank 1's file the way an attacker (or a broken copy) could, then runs every reading command.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "trace_builder.h"
#include "trace_schema.h"

using namespace lockstep::testing;

namespace {

const std::string kLockstep = LOCKSTEP_EXE;

std::string both(const ProcResult& r) { return "stdout:\n" + r.out + "\nstderr:\n" + r.err; }

// A clean two-rank trace with rank 1's file changed by `sql`. Returns the directory.
std::string hostile_dir(const std::string& name, const std::string& sql) {
  TraceBuilder b(2);
  b.comm("aaaaaaaa00000001", {0, 1});
  b.all({0, 1}, "aaaaaaaa00000001", OpSpec{.count = 64}, 5);
  auto dir = fresh_dir(name);
  write_trace(b.trace(), dir);
  const std::string f = dir + "/rank-1" + lockstep::schema::kFileSuffix;
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(f.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
  return dir;
}

// Every command that reads the directory finishes (well within the runner's limit, a hang is a
// timeout) and names `reason` for rank 1's file; the verdict commands never say clean.
// `op_rows`: the defect is in the op rows, which doctor (headers and counts only) does not read.
void every_reader_skips(const std::string& dir, const std::string& reason, bool op_rows = false) {
  struct Cmd {
    std::vector<std::string> args;
    int exit_code;  // -1: any
  };
  const std::vector<Cmd> cmds = {
      {{"analyze", dir}, 4},
      {{"analyze", dir, "--json"}, 4},
      {{"check", dir}, 4},
      {{"replay", "--model", dir}, 4},
      {{"report", dir, "-o", dir + "/report.html"}, 0},
      {{"doctor", dir}, 0},
      {{"ops", dir, "--rank", "1"}, -1},
  };
  for (const Cmd& c : cmds) {
    if (op_rows && c.args[0] == "doctor") continue;
    std::vector<std::string> argv = c.args;
    argv.insert(argv.begin(), kLockstep);
    ProcResult r = run_program(argv, {}, 60);
    std::string what;
    for (const auto& a : c.args) what += a + " ";
    ASSERT_FALSE(r.timed_out) << what << "hung\n" << both(r);
    if (c.exit_code >= 0) {
      EXPECT_EQ(r.exit_code, c.exit_code) << what << "\n" << both(r);
    }
    std::string out = r.out + r.err;
    if (c.args[0] == "report") out = slurp_file(dir + "/report.html");
    EXPECT_NE(out.find(reason), std::string::npos) << what << "does not name '" << reason << "'\n" << both(r);
    EXPECT_EQ(r.out.find("lockstep: clean"), std::string::npos) << what << "\n" << both(r);
    EXPECT_EQ(r.out.find("\"clean\": true"), std::string::npos) << what << "\n" << both(r);
  }
}

}  // namespace

// The repro: env replaced by a view over an endless recursive CTE (every reader ran
// forever).
TEST(CliHostileFile, endless_view_for_env_is_skipped_with_its_reason) {
  auto dir = hostile_dir("hostile-view-env",
                         "DROP TABLE env; CREATE VIEW env AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                         "SELECT x+1 FROM c) SELECT 'a' AS name, 'b' AS value FROM c WHERE x<0;");
  every_reader_skips(dir, "env is a view, not a table");
}

// A view of 100 MB blobs (1 GB and 16 s from a 144 KB file).
TEST(CliHostileFile, blob_view_for_hangs_is_skipped_with_its_reason) {
  auto dir = hostile_dir("hostile-view-blob",
                         "DROP TABLE hangs; CREATE VIEW hangs AS SELECT 1 AS id, 0 AS mono_ns, 0 AS wall_ns, "
                         "0 AS in_flight, randomblob(100000000) AS message FROM (SELECT 1 UNION ALL SELECT 2);");
  every_reader_skips(dir, "hangs is a view, not a table");
}

TEST(CliHostileFile, trigger_on_a_read_table_is_skipped_with_its_reason) {
  auto dir = hostile_dir("hostile-trigger",
                         "CREATE TRIGGER t AFTER INSERT ON comms BEGIN SELECT 1; END;");
  every_reader_skips(dir, "comms table has a trigger");
}

// A generated column computes its value at every read (zeroblob here: 1 GB a row).
TEST(CliHostileFile, generated_column_is_skipped_with_its_reason) {
  auto dir = hostile_dir("hostile-generated",
                         "ALTER TABLE env ADD COLUMN pad BLOB GENERATED ALWAYS AS (zeroblob(1000000000)) VIRTUAL;");
  every_reader_skips(dir, "env table has a generated column");
}

// The reader asks SQLite about generated columns only for tables whose SQL has the word AS: the
// shortest spellings SQLite accepts (no GENERATED ALWAYS, no spaces, lower case, after a quoted
// name) must still be asked.
TEST(CliHostileFile, generated_column_in_its_shortest_spellings_is_skipped) {
  const char* spellings[] = {
      "ALTER TABLE comms ADD COLUMN pad as(zeroblob(1000000000));",
      "ALTER TABLE signatures ADD COLUMN \"pad\"As(zeroblob(1000000000)) VIRTUAL;",
      "ALTER TABLE meta ADD COLUMN [pad]aS\n(zeroblob(1000000000));",
  };
  const char* tables[] = {"comms", "signatures", "meta"};
  for (size_t i = 0; i < std::size(spellings); ++i) {
    auto dir = hostile_dir("hostile-generated-" + std::to_string(i), spellings[i]);
    every_reader_skips(dir, std::string(tables[i]) + " table has a generated column");
  }
}

// drops is read like the other tables: a view of that name is not (it was ignored, as if the
// file had no drops table).
TEST(CliHostileFile, view_for_drops_is_skipped_with_its_reason) {
  auto dir = hostile_dir("hostile-view-drops",
                         "DROP TABLE IF EXISTS drops; CREATE VIEW drops AS SELECT 0 AS comm_id, 1 AS first_seq, 2 AS last_seq, "
                         "1 AS records, 'x' AS reason;");
  every_reader_skips(dir, "drops is a view, not a table");
}

// ---- item 5: fields with a meaning are parsed strictly, and every command reads them alike ----

// An op state the vocabulary does not know: check said clean, ops said corrupt.
TEST(CliHostileFile, unknown_op_state_is_corrupt_for_every_command) {
  auto dir = hostile_dir("hostile-state", "UPDATE op_rows SET state=15 WHERE seq=3;");
  every_reader_skips(dir, "unknown op state", true);
}

// A failed op holds no seq (the recorder numbers only enqueued work): a failed state on a
// sequenced row, the last one, was read as clean.
TEST(CliHostileFile, failed_state_on_a_sequenced_row_is_corrupt_for_every_command) {
  auto dir = hostile_dir("hostile-failed", "UPDATE op_rows SET state=1 WHERE seq=(SELECT max(seq) FROM op_rows);");
  every_reader_skips(dir, "is failed but holds a seq", true);
}

// recorder_stopped='' was clean for analyze and incomplete for replay --model.
TEST(CliHostileFile, empty_recorder_stopped_is_corrupt_for_every_command) {
  auto dir = hostile_dir("hostile-stopped", "INSERT OR REPLACE INTO meta VALUES('recorder_stopped','');");
  every_reader_skips(dir, "recorder_stopped '' is not a reason");
}

// Counters read as 0 when unparsable or negative.
TEST(CliHostileFile, unparsable_or_negative_dropped_records_is_corrupt_for_every_command) {
  for (const char* v : {"abc", "-1", " 1", ""}) {
    auto dir = hostile_dir(std::string("hostile-dropped-") + (v[0] == '-' ? "neg" : v[0] == ' ' ? "blank" : v[0] ? v : "empty"),
                           std::string("INSERT OR REPLACE INTO meta VALUES('dropped_records','") + v + "');");
    every_reader_skips(dir, std::string("dropped_records '") + v + "' is not a count");
  }
}

// comms.nranks=0 (a communicator with a handle: not the NULL-comm placeholder): replay --model
// invented "rank 0 (no trace file) never issues collective #1".
TEST(CliHostileFile, communicator_of_zero_ranks_is_corrupt_for_every_command) {
  auto dir = hostile_dir("hostile-nranks0", "UPDATE comms SET nranks=0;");
  every_reader_skips(dir, "has nranks 0");
}

// ---- item 6: format characters that reorder text are escaped in text and the report --------
TEST(CliHostileFile, bidi_override_in_a_trace_string_is_escaped_in_text_json_and_report) {
  // U+202E (RIGHT-TO-LEFT OVERRIDE) and U+2066 (LEFT-TO-RIGHT ISOLATE) in the comm name and host.
  auto dir = hostile_dir("hostile-bidi",
                         "UPDATE comms SET name='tp' || char(0x202E) || 'evil' || char(0x2066);"
                         "UPDATE meta SET value='node' || char(0x202E) || '1' WHERE key='host';");
  const std::string rlo = "\xe2\x80\xae", lri = "\xe2\x81\xa6";
  for (std::vector<std::string> args : {std::vector<std::string>{"ops", dir, "--rank", "1"},
                                        std::vector<std::string>{"analyze", dir, "--json"},
                                        std::vector<std::string>{"report", dir, "-o", dir + "/bidi.html"}}) {
    args.insert(args.begin(), kLockstep);
    ProcResult r = run_program(args, {}, 60);
    std::string out = r.out + r.err;
    if (args[1] == "report") out = slurp_file(dir + "/bidi.html");
    EXPECT_EQ(out.find(rlo), std::string::npos) << args[1] << ": raw U+202E\n" << out.substr(0, 3000);
    EXPECT_EQ(out.find(lri), std::string::npos) << args[1] << ": raw U+2066";
    if (args[1] != "ops") {
      EXPECT_NE(out.find("202e"), std::string::npos) << args[1] << ": not shown escaped\n" << out.substr(0, 3000);
    }
  }
}

// A junk file's name is any bytes: invalid UTF-8 (replay --model --json threw nlohmann's
// type_error.316, exit 2, no verdict) or C1 and bidi characters (analyze --json wrote them raw).
// Both JSON documents parse, name the file escaped, and exit with the verdict's code (4: a file skipped).
TEST(CliHostileFile, hostile_file_names_are_escaped_in_analyze_and_replay_model_json) {
  for (const std::string name : {"b\xfe\xc0-7", "b\xc2\x9b" "2J\xe2\x80\xae-7"}) {
    auto dir = hostile_dir("hostile-name", "");
    const std::string junk = dir + "/" + name + lockstep::schema::kFileSuffix;
    ASSERT_TRUE(std::ofstream(junk) << "junk");
    for (std::vector<std::string> args : {std::vector<std::string>{"analyze", "--json", dir},
                                          std::vector<std::string>{"replay", "--model", "--json", dir}}) {
      args.insert(args.begin(), kLockstep);
      ProcResult r = run_program(args, {}, 60);
      EXPECT_EQ(r.exit_code, 4) << args[1] << "\n" << both(r);
      for (const std::string raw : {"\xfe", "\xc2\x9b", "\xe2\x80\xae"})
        EXPECT_EQ(r.out.find(raw), std::string::npos) << args[1] << ": a raw byte of the name\n" << r.out.substr(0, 3000);
      nlohmann::json j;
      ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << args[1] << "\n" << both(r);
      const std::string shown = name[1] == '\xfe' ? "b\\xfe\\xc0-7" : "b\\u009b2J\\u202e-7";
      const std::string quoted = nlohmann::json(shown).dump();
      EXPECT_NE(j.dump().find(quoted.substr(1, quoted.size() - 2)), std::string::npos)
          << args[1] << ": the file not named escaped\n" << r.out.substr(0, 3000);
    }
    // The timeline's trace file names it escaped too (before: raw C1 and bidi bytes in its
    // otherData). (The report page keeps trace strings as data: ReportEscaping.*.)
    const std::string timeline = dir + "/timeline.json";
    for (std::vector<std::string> args : {std::vector<std::string>{"timeline", dir, "-o", timeline}}) {
      args.insert(args.begin(), kLockstep);
      ProcResult r = run_program(args, {}, 60);
      std::string written = r.out;
      if (args[1] == "timeline") {
        std::ifstream f(timeline);
        written.assign(std::istreambuf_iterator<char>(f), {});
      }
      ASSERT_FALSE(written.empty()) << args[1] << "\n" << both(r);
      for (const std::string raw : {"\xfe", "\xc2\x9b", "\xe2\x80\xae"})
        EXPECT_EQ(written.find(raw), std::string::npos) << args[1] << ": a raw byte of the name";
    }
  }
}

// ---- seq order: a recorder numbers a communicator's ops in call order --------------------------
// Two collectives' seqs swapped (3 and 4): their call order says one thing, their seqs another.
// Before: the full read aligned by call order and said clean while stacks and timeline (by seq)
// showed the two ops differ. Now the communicator is unknown from seq 3 on, in every command.
TEST(CliHostileFile, seqs_that_go_down_in_call_order_make_the_communicator_unknown_from_there) {
  auto dir = hostile_dir("hostile-seq-order", "UPDATE op_rows SET seq = 7 - seq WHERE seq IN (3, 4);");
  const std::string reason = "seq 3 comes after a higher seq in call order", ops_reason = "(seq_order)";
  for (std::vector<std::string> args : {std::vector<std::string>{"analyze", dir}, std::vector<std::string>{"analyze", dir, "--json"},
                                        std::vector<std::string>{"check", dir}, std::vector<std::string>{"check", dir, "--full-read"},
                                        std::vector<std::string>{"replay", "--model", dir},
                                        std::vector<std::string>{"ops", dir, "--rank", "1"},
                                        std::vector<std::string>{"report", dir, "-o", dir + "/report.html"}}) {
    const bool report = args[0] == "report";
    args.insert(args.begin(), kLockstep);
    ProcResult r = run_program(args, {}, 60);
    EXPECT_EQ(r.exit_code, report ? 0 : 4) << args[1] << "\n" << both(r);
    const std::string out = report ? slurp_file(dir + "/report.html") : r.out + r.err;
    EXPECT_NE(out.find(args[1] == "ops" ? ops_reason : reason), std::string::npos) << args[1] << " does not name it\n" << both(r);
    EXPECT_EQ(r.out.find("lockstep: clean"), std::string::npos) << args[1] << "\n" << both(r);
  }
}

// ---- side files of a directory: never block, exhaust or redirect -------------------------------
// What `lockstep import` writes beside the trace files (its skipped dumps), read by every reader:
// a FIFO under its name hung analyze, check, report, ops, timeline and replay --model; a link to
// /dev/zero was read until memory ran out. Both are named unreadable: evidence not read, exit 4.
TEST(CliHostileFile, a_fifo_or_device_as_the_import_skipped_list_is_named_never_read) {
  for (const std::string kind : {"fifo", "device"}) {
    auto dir = hostile_dir("hostile-side-" + kind, "");
    const std::string side = dir + "/lockstep-fr-import-skipped.json";
    if (kind == "fifo")
      ASSERT_EQ(mkfifo(side.c_str(), 0644), 0);
    else
      std::filesystem::create_symlink("/dev/zero", side);
    for (std::vector<std::string> args : {std::vector<std::string>{"analyze", dir}, std::vector<std::string>{"check", dir},
                                          std::vector<std::string>{"replay", "--model", dir}}) {
      args.insert(args.begin(), kLockstep);
      ProcResult r = run_program(args, {}, 30);
      ASSERT_FALSE(r.timed_out) << kind << " " << args[1] << " hung\n" << both(r);
      EXPECT_EQ(r.exit_code, 4) << kind << " " << args[1] << "\n" << both(r);
      EXPECT_NE((r.out + r.err).find("not a regular file"), std::string::npos) << kind << " " << args[1] << "\n" << both(r);
    }
  }
}

// attach snapshots (*.attach.json) read by `report DIR` and `attach --from DIR`: a FIFO hung both.
TEST(CliHostileFile, a_fifo_named_like_an_attach_snapshot_is_skipped) {
  auto dir = fresh_dir("hostile-attach-fifo");
  ASSERT_EQ(mkfifo((dir + "/n.attach.json").c_str(), 0644), 0);
  for (std::vector<std::string> args : {std::vector<std::string>{"report", dir, "-o", dir + "/p.html"},
                                        std::vector<std::string>{"attach", "--from", dir}}) {
    args.insert(args.begin(), kLockstep);
    ProcResult r = run_program(args, {}, 30);
    ASSERT_FALSE(r.timed_out) << args[1] << " hung\n" << both(r);
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << args[1] << "\n" << both(r);
  }
}

// Fixed names lockstep writes into an output directory (import's skipped list, shrink's
// reproducer): a link planted under the name is replaced, never written through.
TEST(CliHostileFile, a_link_planted_in_an_output_directory_is_replaced_not_written_through) {
  auto base = fresh_dir("hostile-planted");
  const std::string victim = base + "/victim";
  ASSERT_TRUE(std::ofstream(victim) << "precious\n");
  // import: one readable dump, one that is not (so the skipped list is written).
  const std::string src = base + "/src", out = base + "/out";
  std::filesystem::create_directories(src);
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(std::string(LOCKSTEP_FR_DATA) + "/ws1-completed/nccl_trace_rank_0", src + "/nccl_trace_rank_0");
  ASSERT_TRUE(std::ofstream(src + "/nccl_trace_rank_1", std::ios::binary) << std::string("\x80\x02\x63os\nsystem\n"));
  std::filesystem::create_symlink(victim, out + "/lockstep-fr-import-skipped.json");
  ProcResult imp = run_program({kLockstep, "import", src, "-o", out}, {}, 60);
  EXPECT_FALSE(imp.timed_out) << both(imp);
  EXPECT_EQ(slurp_file(victim), "precious\n") << both(imp);
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(out + "/lockstep-fr-import-skipped.json")))
      << both(imp);
  // shrink: a two-rank divergence, its reproducer written into a directory with a planted link.
  TraceBuilder b(2);
  b.comm("aaaaaaaa00000002", {0, 1});
  b.all({0, 1}, "aaaaaaaa00000002", OpSpec{.count = 64}, 3);
  b.add(0, "aaaaaaaa00000002", OpSpec{.completed = false});
  b.add(1, "aaaaaaaa00000002", OpSpec{.op = lockstep::vocab::Op::AllGather, .completed = false});
  const std::string trace = base + "/trace", repro = base + "/repro";
  write_trace(b.trace(), trace);
  std::filesystem::create_directories(repro);
  std::filesystem::create_symlink(victim, repro + "/repro.py");
  ProcResult sh = run_program({kLockstep, "shrink", trace, "-o", repro, "--no-replay", "-q"}, {}, 120);
  EXPECT_FALSE(sh.timed_out) << both(sh);
  EXPECT_EQ(slurp_file(victim), "precious\n") << both(sh);
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(repro + "/repro.py"))) << both(sh);
  EXPECT_NE(slurp_file(repro + "/repro.py").find("import"), std::string::npos) << both(sh);
}
