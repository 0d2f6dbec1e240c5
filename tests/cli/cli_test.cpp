// The lockstep executable as users and CI run it: exit codes, messages, files it writes.
// Traces are written by the test writer (tests/analyzer/trace_builder.h); programs recorded
// for real are in e2e_test.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_runner.h"
#include "trace_builder.h"
#include "trace_schema.h"

using namespace lockstep::testing;
using nlohmann::json;

namespace {

const std::string kLockstep = LOCKSTEP_EXE;

ProcResult lockstep_cli(std::vector<std::string> args, const std::map<std::string, std::string>& env = {}) {
  args.insert(args.begin(), kLockstep);
  return run_program(args, env, 30);
}

std::string both(const ProcResult& r) { return "stdout:\n" + r.out + "\nstderr:\n" + r.err; }

std::string write(TraceBuilder b, const std::string& name) {
  auto dir = fresh_dir(name);
  write_trace(b.trace(), dir);
  return dir;
}

TraceBuilder clean_two_ranks(int64_t count = 64) {
  TraceBuilder b(2);
  b.comm("aaaaaaaa00000001", {0, 1});
  b.all({0, 1}, "aaaaaaaa00000001", OpSpec{.count = count, .stack = 1}, 5);
  for (int p : {0, 1}) b.stack(p, 1, {lockstep::Frame{lockstep::vocab::FrameKind::Python, "train_step", "", 0, "train.py", 7}});
  return b;
}

TraceBuilder divergent_two_ranks() {
  TraceBuilder b = clean_two_ranks();
  b.add(0, "aaaaaaaa00000001", {.op = "broadcast", .root = 0, .completed = false, .stack = 1});
  b.add(1, "aaaaaaaa00000001", {.op = "all_gather", .completed = false, .stack = 1});
  b.running(0).running(1);
  return b;
}

}  // namespace

TEST(CliErrors, analyze_of_missing_directory_exits_2_and_names_it) {
  auto r = lockstep_cli({"analyze", "/nonexistent/traces"});
  EXPECT_EQ(r.exit_code, 2) << both(r);
  EXPECT_NE(r.err.find("no such directory: /nonexistent/traces"), std::string::npos) << both(r);
}

TEST(CliErrors, analyze_of_directory_without_traces_exits_2) {
  auto dir = fresh_dir("cli-empty");
  auto r = lockstep_cli({"analyze", dir});
  EXPECT_EQ(r.exit_code, 2) << both(r);
  EXPECT_NE(r.err.find("no trace files"), std::string::npos) << both(r);
}

TEST(CliErrors, analyze_of_only_unusable_files_lists_each_and_exits_2) {
  auto dir = fresh_dir("cli-foreign");
  std::ofstream(dir + "/a" + lockstep::schema::kFileSuffix) << "not a database at all, just some text that is long enough";
  std::ofstream(dir + "/b" + lockstep::schema::kFileSuffix);
  auto r = lockstep_cli({"analyze", dir});
  EXPECT_EQ(r.exit_code, 2) << both(r);
  EXPECT_NE(r.err.find("a.lockstep.sqlite: not a trace"), std::string::npos) << both(r);
  EXPECT_NE(r.err.find("b.lockstep.sqlite: empty file"), std::string::npos) << both(r);
  EXPECT_NE(r.err.find("no usable trace file"), std::string::npos) << both(r);
}

TEST(CliErrors, mixed_schema_versions_analyse_the_readable_files_and_say_which_were_skipped) {
  auto dir = write(clean_two_ranks(), "cli-mixed");
  std::filesystem::copy_file(dir + "/rank-1" + lockstep::schema::kFileSuffix, dir + "/future" + lockstep::schema::kFileSuffix);
  run_program({"sqlite3", dir + "/future" + lockstep::schema::kFileSuffix, "UPDATE meta SET value='99' WHERE key='schema_version'"});
  auto r = lockstep_cli({"analyze", dir});
  // A skipped file is evidence missing: incomplete (4), never clean (issue 18).
  EXPECT_EQ(r.exit_code, 4) << both(r);
  EXPECT_NE(r.out.find("future.lockstep.sqlite: schema version 99 is newer"), std::string::npos) << both(r);
  EXPECT_EQ(r.out.find("lockstep: clean"), std::string::npos) << both(r);
}

TEST(CliErrors, unknown_option_is_a_usage_error) {
  auto r = lockstep_cli({"analyze", "--frobnicate", "x"});
  EXPECT_EQ(r.exit_code, 2) << both(r);
}

TEST(CliAnalyze, clean_trace_exits_0_with_one_line) {
  auto r = lockstep_cli({"analyze", write(clean_two_ranks(), "cli-clean")});
  EXPECT_EQ(r.exit_code, 0) << both(r);
  EXPECT_EQ(r.out, "lockstep: clean: 2 processes, 1 communicator, 10 ops; ranks agree, no order inversion, no hang\n");
}

TEST(CliAnalyze, divergence_exits_1_and_json_names_it) {
  auto dir = write(divergent_two_ranks(), "cli-div");
  auto junit = dir + "/report.xml";
  auto r = lockstep_cli({"analyze", dir, "--json", "--junit", junit});
  EXPECT_EQ(r.exit_code, 1) << both(r);
  json j = json::parse(r.out);
  EXPECT_EQ(j["first_divergence"]["kind"], "op_type");
  EXPECT_EQ(j["first_divergence"]["seq"], 6);
  EXPECT_EQ(j["first_divergence"]["sides"][0]["op"], "broadcast");
  EXPECT_EQ(j["first_divergence"]["sides"][1]["op"], "all_gather");
  EXPECT_EQ(j["first_divergence"]["sides"][1]["from"], "train_step (train.py:7)");
  std::string xml = slurp_file(junit);
  EXPECT_NE(xml.find("<failure message=\"op_type on comm aaaaaaaa"), std::string::npos) << xml;
}

TEST(CliCheck, baseline_written_from_a_clean_run_passes_and_a_changed_run_fails_with_3) {
  auto dir = write(clean_two_ranks(64), "cli-base");
  auto base = dir + "/../cli-base.baseline";
  auto w = lockstep_cli({"check", dir, "--write-baseline", base});
  ASSERT_EQ(w.exit_code, 0) << both(w);
  EXPECT_NE(slurp_file(base).find("all_reduce float32 count=64 sum x5"), std::string::npos) << slurp_file(base);
  auto same = lockstep_cli({"check", write(clean_two_ranks(64), "cli-base-same"), "--baseline", base});
  EXPECT_EQ(same.exit_code, 0) << both(same);
  auto junit = dir + "/check.xml";
  auto changed = lockstep_cli({"check", write(clean_two_ranks(128), "cli-base-changed"), "--baseline", base, "--junit", junit});
  EXPECT_EQ(changed.exit_code, 3) << both(changed);
  EXPECT_NE(changed.out.find("+   all_reduce float32 count=128 sum x5"), std::string::npos) << both(changed);
  EXPECT_NE(slurp_file(junit).find("name=\"matches_baseline\">"), std::string::npos) << slurp_file(junit);
  std::filesystem::remove(base);
}

// The gate's inputs from a CI script (review): an empty path ("$UNSET") is refused, not taken
// as "no baseline"; a baseline that is no regular file (a FIFO hung check) is refused; a check
// that cannot run replaces an old JUnit file with one that fails; a JUnit write that fails
// (a full disk) is exit 2; a name with U+FFFF stays well-formed XML; a run that differs from
// its baseline is never worded "clean".
TEST(CliCheck, a_ci_scripts_inputs_are_refused_or_said_never_silently_passed) {
  auto dir = write(clean_two_ranks(64), "cli-gate-inputs");
  for (const char* flag : {"--baseline", "--junit", "--write-baseline"}) {
    auto r = lockstep_cli({"check", dir, flag, ""});
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << both(r);
  }
  const std::string fifo = dir + "/../cli-gate.fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  auto f = lockstep_cli({"check", dir, "--baseline", fifo});
  EXPECT_EQ(f.exit_code, 2) << both(f);
  EXPECT_NE(f.err.find("not a regular file"), std::string::npos) << both(f);
  const std::string junit = dir + "/../cli-gate.xml";
  auto pass = lockstep_cli({"check", dir, "--junit", junit});
  ASSERT_EQ(pass.exit_code, 0) << both(pass);
  ASSERT_NE(slurp_file(junit).find("failures=\"0\""), std::string::npos);
  auto cannot = lockstep_cli({"check", dir + "/no-such-dir", "--junit", junit});
  EXPECT_EQ(cannot.exit_code, 2) << both(cannot);
  EXPECT_EQ(slurp_file(junit).find("failures=\"0\""), std::string::npos) << slurp_file(junit);
  EXPECT_NE(slurp_file(junit).find("could not run"), std::string::npos) << slurp_file(junit);
  if (std::filesystem::exists("/dev/full")) {
    auto full = lockstep_cli({"check", dir, "--junit", "/dev/full"});
    EXPECT_EQ(full.exit_code, 2) << both(full);
  }
  std::filesystem::remove(fifo);
}

// Every file copied under a second name (two runs in one directory, or a copied file): the files
// read still match the baseline, but that is not the run matching it: exit 4, and the match line
// says it holds for the files read only.
TEST(CliCheck, a_baseline_match_on_incomplete_evidence_is_said_to_hold_for_the_files_read_only) {
  auto dir = write(clean_two_ranks(64), "cli-base-copies");
  auto base = dir + "/../cli-base-copies.baseline";
  ASSERT_EQ(lockstep_cli({"check", dir, "--write-baseline", base}).exit_code, 0);
  for (int r : {0, 1})
    std::filesystem::copy_file(dir + "/rank-" + std::to_string(r) + lockstep::schema::kFileSuffix,
                               dir + "/copy-" + std::to_string(r) + lockstep::schema::kFileSuffix);
  auto c = lockstep_cli({"check", dir, "--baseline", base});
  EXPECT_EQ(c.exit_code, 4) << both(c);
  EXPECT_NE(c.out.find("schedule matches baseline " + base + ", for the files read only: the evidence is incomplete"),
            std::string::npos) << both(c);
  std::filesystem::remove(base);
}

TEST(CliCheck, divergent_run_fails_with_1_and_is_not_blessed) {
  auto dir = write(divergent_two_ranks(), "cli-check-div");
  auto base = dir + "/should-not-exist.baseline";
  auto r = lockstep_cli({"check", dir, "--write-baseline", base});
  EXPECT_EQ(r.exit_code, 1) << both(r);
  EXPECT_FALSE(std::filesystem::exists(base));
  EXPECT_NE(r.err.find("not writing a baseline"), std::string::npos) << both(r);
}

// A communicator member with no trace file: what it issued is unknown, so a peer waiting on it is
// no proven deadlock (the model said "deadlock ... which never issues collective #1"), unless a
// mismatch among the files present proves one.
TEST(CliReplay, model_waiting_on_a_member_with_no_trace_file_is_unknown_not_deadlock) {
  auto dir = write(clean_two_ranks(), "cli-model-missing");
  std::filesystem::remove(dir + "/rank-1" + lockstep::schema::kFileSuffix);
  auto r = lockstep_cli({"replay", "--model", dir});
  EXPECT_EQ(r.exit_code, 4) << both(r);
  EXPECT_NE(r.out.find("model check: unknown"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("no deadlock proven: a rank waits for a communicator member that has no trace file"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("comm rank 1 (no trace file): what it issued is unknown"), std::string::npos) << both(r);
  EXPECT_EQ(r.out.find("never issues"), std::string::npos) << both(r);
  auto j = lockstep_cli({"replay", "--model", "--json", dir});
  EXPECT_EQ(j.exit_code, 4) << both(j);
  EXPECT_EQ(nlohmann::json::parse(j.out.substr(j.out.find('{')))["verdict"], "unknown") << both(j);
  // Both files, the same ops: a mismatch among the files present is still proven.
  auto div = write(divergent_two_ranks(), "cli-model-mismatch");
  auto d = lockstep_cli({"replay", "--model", div});
  EXPECT_NE(d.out.find("model check: deadlock"), std::string::npos) << both(d);
}

// A stack whose page is corrupt (the frames table's root page zeroed) is unreadable, and says so
// in text, JSON and stacks: it was "(no stack recorded: run with --stacks ...)", a claim about
// a recording that did happen.
TEST(CliAnalyze, a_stack_that_cannot_be_read_is_named_unreadable_not_unrecorded) {
  auto dir = write(divergent_two_ranks(), "cli-stack-corrupt");
  const std::string f = dir + "/rank-0" + lockstep::schema::kFileSuffix;
  auto root = run_program({"sqlite3", f, "SELECT rootpage FROM sqlite_schema WHERE name='frames'"});
  auto size = run_program({"sqlite3", f, "PRAGMA page_size"});
  ASSERT_EQ(root.exit_code, 0) << both(root);
  const long page = std::stol(size.out), at = (std::stol(root.out) - 1) * page;
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(at);
    const std::string zeros(static_cast<size_t>(page), '\0');
    io.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  auto r = lockstep_cli({"analyze", dir});
  EXPECT_EQ(r.exit_code, 1) << both(r);
  EXPECT_NE(r.out.find("stack of rank 0 (broadcast seq 6):\n    (stack 1 unreadable in its file: "), std::string::npos) << both(r);
  EXPECT_EQ(r.out.find("no stack recorded"), std::string::npos) << both(r);
  auto j = lockstep_cli({"analyze", dir, "--json"});
  auto side = nlohmann::json::parse(j.out)["first_divergence"]["sides"][0];
  EXPECT_EQ(side["rank"], 0) << j.out.substr(0, 2000);
  EXPECT_NE(side.value("stack_note", "").find("unreadable in its file"), std::string::npos) << side.dump();
  auto st = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "6"});
  EXPECT_NE(st.out.find("(stack 1 unreadable in its file: "), std::string::npos) << both(st);
  EXPECT_NE(st.out.find("py train_step (train.py:7)"), std::string::npos) << both(st);  // rank 1's, intact
}

TEST(CliCheck, baseline_file_that_is_not_one_is_an_input_error) {
  auto dir = write(clean_two_ranks(), "cli-badbase");
  std::ofstream(dir + "/x.txt") << "hello\n";
  auto r = lockstep_cli({"check", dir, "--baseline", dir + "/x.txt"});
  EXPECT_EQ(r.exit_code, 2) << both(r);
  EXPECT_NE(r.err.find("is not a lockstep baseline"), std::string::npos) << both(r);
}

TEST(CliStacks, prints_each_members_op_and_frames_at_a_seq) {
  auto dir = write(divergent_two_ranks(), "cli-stacks");
  auto r = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "6"});
  EXPECT_EQ(r.exit_code, 0) << both(r);
  EXPECT_NE(r.out.find("rank 0: broadcast float32 count=1024 root=0  in flight"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("rank 1: all_gather float32 count=1024  in flight"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("py train_step (train.py:7)"), std::string::npos) << both(r);
  auto by_role = lockstep_cli({"stacks", dir, "--comm", "init0", "--seq", "6"});
  EXPECT_EQ(by_role.out, r.out);
  auto none = lockstep_cli({"stacks", dir, "--comm", "ffff", "--seq", "6"});
  EXPECT_EQ(none.exit_code, 2) << both(none);
  EXPECT_NE(none.err.find("comm aaaaaaaa (init0)"), std::string::npos) << both(none);
}

// stacks reads the rows of the communicator's members only (field review G12): a file whose
// rows are unusable is named when it is a member's, and never read when it is not.
TEST(CliStacks, reads_only_the_members_files) {
  TraceBuilder b(3);
  b.comm("aaaaaaaa00000001", {0, 1});
  b.comm("cccccccc00000003", {1, 2});
  b.all({0, 1}, "aaaaaaaa00000001", {}, 3);
  b.all({1, 2}, "cccccccc00000003", {}, 3);
  auto dir = write(b, "cli-stacks-members");
  // Rank 2's header is fine, its rows are not (the full loader skips the file).
  auto bad = run_program({"sqlite3", dir + "/rank-2" + lockstep::schema::kFileSuffix,
                          "UPDATE signatures SET comm_id = 99"});
  ASSERT_EQ(bad.exit_code, 0) << both(bad);
  auto premise = lockstep_cli({"analyze", dir});
  ASSERT_NE(premise.out.find("rank-2.lockstep.sqlite"), std::string::npos) << "premise: rank 2's rows are unusable\n" << both(premise);
  auto r = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "2"});
  EXPECT_EQ(r.exit_code, 0) << both(r);
  EXPECT_NE(r.out.find("ranks 0-1 (2 members): all_reduce"), std::string::npos) << both(r);
  EXPECT_EQ(both(r).find("rank-2"), std::string::npos) << "rank 2 is no member: its file is not read\n" << both(r);
  auto member = lockstep_cli({"stacks", dir, "--comm", "cccccccc", "--seq", "2"});
  EXPECT_EQ(member.exit_code, 4) << both(member);
  EXPECT_NE(member.out.find("comm rank 1: no usable trace file"), std::string::npos) << both(member);
  EXPECT_NE(member.err.find("rank-2.lockstep.sqlite"), std::string::npos) << both(member);
}

// Members with the same op, state, thread and stack are one entry with their ranks (16,384
// ranks are the few distinct stacks, not 16,384 copies); --per-rank lists each.
TEST(CliStacks, members_with_the_same_op_and_stack_share_one_entry) {
  const std::string comm = "aaaaaaaa00000001";
  TraceBuilder b(6);
  b.comm(comm, {0, 1, 2, 3, 4, 5});
  b.all({0, 1, 2, 3, 4, 5}, comm, OpSpec{.stack = 1}, 3);
  for (int p : {0, 1, 2, 3, 5}) b.add(p, comm, {.completed = false, .stack = 1});
  b.add(4, comm, {.op = "all_gather", .completed = false, .stack = 2});
  for (int p = 0; p < 6; ++p) {
    b.stack(p, 1, {lockstep::Frame{lockstep::vocab::FrameKind::Python, "train_step", "", 0, "train.py", 7}});
    b.stack(p, 2, {lockstep::Frame{lockstep::vocab::FrameKind::Python, "gather_metrics", "", 0, "train.py", 40}});
  }
  for (int p = 0; p < 6; ++p) b.running(p);
  auto dir = write(b, "cli-stacks-grouped");
  auto r = lockstep_cli({"stacks", dir, "--comm", "init0", "--seq", "4"});
  EXPECT_EQ(r.exit_code, 0) << both(r);
  const std::string expected =
      "  ranks 0-3,5 (5 members): all_reduce float32 count=1024 sum  in flight  thread main\n"
      "    py train_step (train.py:7)\n"
      "  rank 4: all_gather float32 count=1024  in flight  thread main\n"
      "    py gather_metrics (train.py:40)\n";
  EXPECT_NE(r.out.find(expected), std::string::npos) << both(r);
  auto per_rank = lockstep_cli({"stacks", dir, "--comm", "init0", "--seq", "4", "--per-rank"});
  EXPECT_EQ(per_rank.exit_code, 0) << both(per_rank);
  for (int p : {0, 1, 2, 3, 5})
    EXPECT_NE(per_rank.out.find("  rank " + std::to_string(p) + ": all_reduce float32 count=1024 sum  in flight  thread main\n    py train_step"),
              std::string::npos) << both(per_rank);
  EXPECT_EQ(per_rank.out.find("ranks "), std::string::npos) << both(per_rank);
  // Ranks that hold no op at the seq are grouped by what is said of them too.
  // Traces without an exit record (and no recorder's hang timeout fired): whether they issued
  // seq 9 after their last flush is unknown, never "no op" (exit 4, as analyze's evidence).
  auto past = lockstep_cli({"stacks", dir, "--comm", "init0", "--seq", "9"});
  EXPECT_EQ(past.exit_code, 4) << both(past);
  EXPECT_NE(past.out.find("  ranks 0-5 (6 members): unknown: its trace ends without an exit record"), std::string::npos)
      << both(past);
}

// Finished traces say "no op" (never issued: exit 2); a member whose records have a hole there
// (dropped records), or whose recorder stopped, is unknown (exit 4), and never counted short.
TEST(CliStacks, a_member_whose_records_cannot_show_the_seq_is_unknown_not_never_issued) {
  auto two = [] {
    TraceBuilder b(2);
    b.comm("aaaaaaaa00000002", {0, 1});
    b.all({0, 1}, "aaaaaaaa00000002", OpSpec{}, 6);
    return b;
  };
  TraceBuilder whole = two();
  auto dir = write(whole, "cli-stacks-unknown");
  auto past = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "9"});
  EXPECT_EQ(past.exit_code, 2) << both(past);
  EXPECT_NE(past.out.find("no op with seq 9 (issued 6 ops on this comm)"), std::string::npos) << both(past);
  // Rank 1's records of seqs 3 and 4 dropped (its file says so).
  TraceBuilder holed = two();
  std::erase_if(holed.trace().processes[1].ops, [](const auto& o) { return o.seq == 3 || o.seq == 4; });
  holed.trace().processes[1].dropped_records = 2;
  dir = write(holed, "cli-stacks-hole");
  auto hole = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "3"});
  EXPECT_EQ(hole.exit_code, 4) << both(hole);
  EXPECT_NE(hole.out.find("rank 1: unknown: its records of this comm are whole through seq 2 only"), std::string::npos)
      << both(hole);
  // Rank 1's recorder stopped (disk full) after seq 6.
  TraceBuilder stopped = two();
  stopped.trace().processes[1].meta["recorder_stopped"] = "disk_full";
  dir = write(stopped, "cli-stacks-stopped");
  auto st = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "9"});
  EXPECT_EQ(st.exit_code, 4) << both(st);
  EXPECT_NE(st.out.find("rank 1: unknown:"), std::string::npos) << both(st);
  EXPECT_NE(st.out.find("recorder_stopped"), std::string::npos) << both(st);
}

// A recorder's hang timeout that fired proves the job stalled, so a member still running here
// (trace_end: live) shows everything it issued up to the stall: a seq it lacks was never issued,
// as analyze takes it. A member whose trace ends without an exit record and that is not seen
// running (SIGKILLed after the hang) lost its history all the same: unknown, as analyze says
// (history_lost), never "no op" (the marker once made both whole).
TEST(CliStacks, a_hang_timeout_makes_a_live_member_whole_but_not_a_lost_one) {
  auto two = [] {
    TraceBuilder b(2);
    b.comm("aaaaaaaa00000003", {0, 1});
    b.all({0, 1}, "aaaaaaaa00000003", OpSpec{}, 6);
    b.running(0), b.running(1);
    b.trace().processes[0].hangs.push_back({b.trace().processes[0].last_flush_mono_ns, 0, 1, "no progress for 60s"});
    return b;
  };
  // Traces from another host: not seen running, their history lost.
  TraceBuilder lost = two();
  auto dir = write(lost, "cli-stacks-marker-lost");
  auto r = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "9"});
  EXPECT_EQ(r.exit_code, 4) << both(r);
  EXPECT_NE(r.out.find("ranks 0-1 (2 members): unknown: its trace ends without an exit record"), std::string::npos) << both(r);
  // Both still running here (this host, this test's process, flushed just now): whole up to the stall.
  TraceBuilder live = two();
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  // Two live processes (this test's and its parent): two files of one pid are one process
  // written twice (a copied file: contradictory evidence), not two members.
  for (auto& p : live.trace().processes) {
    p.host = host;
    p.pid = &p == &live.trace().processes[0] ? getpid() : getppid();
    p.last_flush_mono_ns = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }
  dir = write(live, "cli-stacks-marker-live");
  r = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "9"});
  EXPECT_EQ(r.exit_code, 2) << both(r);
  EXPECT_NE(r.out.find("ranks 0-1 (2 members): no op with seq 9 (issued 6 ops on this comm)"), std::string::npos) << both(r);
  // No hang timeout fired: a live member may issue seq 9 yet.
  live.trace().processes[0].hangs.clear();
  dir = write(live, "cli-stacks-live");
  r = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "9"});
  EXPECT_EQ(r.exit_code, 4) << both(r);
  EXPECT_NE(r.out.find("unknown: its trace ends without an exit record"), std::string::npos) << both(r);
}

// A strided group (the even ranks of 40) lists its first 16 segments and how many more, as
// analyze lists ranks; --per-rank still names each rank.
TEST(CliStacks, a_strided_group_lists_its_first_segments_and_how_many_more) {
  const std::string comm = "aaaaaaaa00000001";
  TraceBuilder b(40);
  std::vector<int> all;
  for (int p = 0; p < 40; ++p) all.push_back(p);
  b.comm(comm, all);
  for (int p = 0; p < 40; ++p) b.add(p, comm, {.op = p % 2 ? "all_gather" : "all_reduce", .redop = p % 2 ? "" : "sum", .completed = false});
  for (int p = 0; p < 40; ++p) b.running(p);
  auto dir = write(b, "cli-stacks-strided");
  auto r = lockstep_cli({"stacks", dir, "--comm", "init0", "--seq", "1"});
  EXPECT_EQ(r.exit_code, 0) << both(r);
  EXPECT_NE(r.out.find("  ranks 0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,... (+4 more) (20 members): all_reduce"),
            std::string::npos) << both(r);
  EXPECT_NE(r.out.find("  ranks 1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31,... (+4 more) (20 members): all_gather"),
            std::string::npos) << both(r);
  auto per_rank = lockstep_cli({"stacks", dir, "--comm", "init0", "--seq", "1", "--per-rank"});
  EXPECT_NE(per_rank.out.find("  rank 38: all_reduce"), std::string::npos) << both(per_rank);
}

// Members without a file are one line of elided ranges and their count, however many the files
// claim (nranks comes from the file: a line per rank of 2^20 was 100 MB).
TEST(CliStacks, missing_members_are_one_line_of_ranges_and_their_count) {
  auto dir = write(clean_two_ranks(), "cli-stacks-missing-members");
  for (int p : {0, 1}) {
    auto claim = run_program({"sqlite3", dir + "/rank-" + std::to_string(p) + lockstep::schema::kFileSuffix,
                              "UPDATE comms SET nranks = 1048576"});
    ASSERT_EQ(claim.exit_code, 0) << both(claim);
  }
  auto r = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "3"});
  EXPECT_EQ(r.exit_code, 4) << both(r).substr(0, 4000);
  EXPECT_LT(r.out.size(), 2000u) << r.out.substr(0, 4000);
  EXPECT_NE(r.out.find("  comm ranks 2-1048575 (1048574 in all): no usable trace file (missing, skipped or of another job): their ops are unknown\n"),
            std::string::npos) << both(r).substr(0, 4000);
}

TEST(CliOps, around_marks_the_op_with_that_seq) {
  auto dir = write(divergent_two_ranks(), "cli-ops");
  auto r = lockstep_cli({"ops", dir, "--rank", "1", "--around", "6", "--window", "2"});
  EXPECT_EQ(r.exit_code, 0) << both(r);
  EXPECT_NE(r.out.find("> 7 "), std::string::npos) << "call 7 (seq 6; call 1 created the comm) should be marked\n" << both(r);
  EXPECT_NE(r.out.find("all_gather float32 count=1024  [in flight]"), std::string::npos) << both(r);
  auto missing = lockstep_cli({"ops", dir, "--rank", "5"});
  EXPECT_EQ(missing.exit_code, 2) << both(missing);
}

// --comm means the same in every command (identity.h): a role, a commName or a hash prefix.
TEST(CliOps, comm_selects_by_commname_role_or_hash_prefix) {
  TraceBuilder b(2);
  b.comm("aaaaaaaa00000001", {0, 1});
  b.comm("bbbbbbbb00000002", {0, 1}, "", 0, "tp");
  b.all({0, 1}, "aaaaaaaa00000001", {}, 3);  // calls 3..5 on rank 0 (1, 2 created the comms)
  b.all({0, 1}, "bbbbbbbb00000002", {.op = "broadcast", .root = 0}, 3);  // calls 6..8
  auto dir = write(b, "cli-ops-comm");
  for (std::string sel : {"tp", "bbbb"}) {
    auto r = lockstep_cli({"ops", dir, "--rank", "0", "--around", "2", "--comm", sel, "--window", "0"});
    EXPECT_EQ(r.exit_code, 0) << sel << "\n" << both(r);
    EXPECT_NE(r.out.find("> 7 "), std::string::npos) << sel << ": seq 2 of tp is call 7\n" << both(r);
  }
  auto init0 = lockstep_cli({"ops", dir, "--rank", "0", "--around", "2", "--comm", "init0", "--window", "0"});
  EXPECT_NE(init0.out.find("> 4 "), std::string::npos) << both(init0);
  auto none = lockstep_cli({"ops", dir, "--rank", "0", "--around", "2", "--comm", "dp"});
  EXPECT_EQ(none.exit_code, 2) << both(none);
}

// Two files that claim one rank (a copied file): stacks listed "ranks 0-1 (3 members)" for a
// 2-rank communicator, exit 0. Each contested file is named, the contradiction said as analyze
// says it, exit 4.
TEST(CliStacks, a_copied_file_is_named_as_a_contradiction_never_counted_as_a_member) {
  auto dir = write(clean_two_ranks(), "cli-stacks-copied");
  std::filesystem::copy_file(dir + "/rank-1" + lockstep::schema::kFileSuffix, dir + "/copy-1" + lockstep::schema::kFileSuffix);
  auto r = lockstep_cli({"stacks", dir, "--comm", "init0", "--seq", "1"});
  EXPECT_EQ(r.exit_code, 4) << both(r);
  EXPECT_EQ(r.out.find("(3 members)"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("  contradictory: "), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("copy-1" + std::string(lockstep::schema::kFileSuffix) + ", contradicted)"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("  rank 0: all_reduce"), std::string::npos) << "the uncontested member as before\n" << both(r);
}

// Another run's file for rank 1 beside this run's: ops showed one of them (the last file with
// that rank won), exit 0. Both are listed, each named, the contradiction said, exit 4.
TEST(CliOps, two_files_claiming_the_rank_are_both_listed_and_named_never_one_picked) {
  auto dir = write(clean_two_ranks(), "cli-ops-two-files");
  TraceBuilder other = clean_two_ranks(128);
  for (auto& p : other.trace().processes) p.pid += 1000;
  auto other_dir = write(other, "cli-ops-other-run");
  std::filesystem::copy_file(other_dir + "/rank-1" + lockstep::schema::kFileSuffix,
                             dir + "/other-1" + lockstep::schema::kFileSuffix);
  auto r = lockstep_cli({"ops", dir, "--rank", "1"});
  EXPECT_EQ(r.exit_code, 4) << both(r);
  EXPECT_NE(r.out.find("rank 1 is claimed by 2 files"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("count=64"), std::string::npos) << "this run's file\n" << both(r);
  EXPECT_NE(r.out.find("count=128"), std::string::npos) << "the other run's file\n" << both(r);
  EXPECT_NE(r.out.find("global rank 1 is claimed by two files"), std::string::npos) << both(r);
  // Rank 0 is claimed once: listed as before.
  auto zero = lockstep_cli({"ops", dir, "--rank", "0"});
  EXPECT_EQ(zero.exit_code, 0) << both(zero);
}

// A file whose recorder dropped records: ops said "6 ops, the last 6" as if whole, and
// "--around 3" said "rank 1 has no op with seq 3" (exit 2) where that record was dropped. The
// drops are named above the listing (exit 4), and the seq is unknown (exit 4).
TEST(CliOps, dropped_records_are_named_and_a_dropped_seq_is_unknown_not_absent) {
  TraceBuilder holed(2);
  holed.comm("aaaaaaaa00000002", {0, 1});
  holed.all({0, 1}, "aaaaaaaa00000002", OpSpec{}, 6);
  std::erase_if(holed.trace().processes[1].ops, [](const auto& o) { return o.seq == 3 || o.seq == 4; });
  holed.trace().processes[1].dropped_records = 2;
  auto dir = write(holed, "cli-ops-dropped");
  auto list = lockstep_cli({"ops", dir, "--rank", "1"});
  EXPECT_EQ(list.exit_code, 4) << both(list);
  EXPECT_NE(list.out.find("incomplete: rank 1 dropped 2 records"), std::string::npos) << both(list);
  EXPECT_NE(list.out.find("comm aaaaaaaa (init0): records whole through seq 2 only (seq_gap)"), std::string::npos) << both(list);
  auto around = lockstep_cli({"ops", dir, "--rank", "1", "--around", "3", "--comm", "init0"});
  EXPECT_EQ(around.exit_code, 4) << both(around);
  EXPECT_EQ(around.err.find("has no op with seq 3"), std::string::npos) << both(around);
  EXPECT_NE(around.err.find("unknown: its records of this comm are whole through seq 2 only"), std::string::npos) << both(around);
  // Rank 0's records are whole: a seq past its end was never issued (exit 2, as before).
  auto past = lockstep_cli({"ops", dir, "--rank", "0", "--around", "9"});
  EXPECT_EQ(past.exit_code, 2) << both(past);
  EXPECT_NE(past.err.find("rank 0 has no op with seq 9"), std::string::npos) << both(past);
}

TEST(CliRun, sets_preload_and_recorder_variables_and_returns_the_exit_code) {
  auto dir = fresh_dir("cli-run");
  std::string preload = LOCKSTEP_EMPTY_PRELOAD;
  auto r = lockstep_cli({"run", "-o", dir + "/t", "--stacks", "python", "--hang-timeout", "5", "--", "sh", "-c",
                         "echo LD_PRELOAD=$LD_PRELOAD; echo DIR=$LOCKSTEP_DIR; echo STACKS=$LOCKSTEP_STACKS; "
                         "echo HT=$LOCKSTEP_HANG_TIMEOUT; echo AN=$LOCKSTEP_ANALYZER; exit 7"},
                        {{"LOCKSTEP_PRELOAD", preload}, {"LD_PRELOAD", "/lib/other.so"}});
  EXPECT_EQ(r.exit_code, 7) << both(r);
  EXPECT_NE(r.out.find("LD_PRELOAD=" + preload + ":/lib/other.so\n"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("DIR=" + dir + "/t\n"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("STACKS=python\n"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("HT=5"), std::string::npos) << both(r);
  EXPECT_NE(r.out.find("AN=" + kLockstep), std::string::npos) << both(r);
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/t"));
}

namespace {
int g_run_pid = 0;
void remember(int pid) { g_run_pid = pid; }
}  // namespace

TEST(CliRun, forwards_sigterm_to_the_command_and_reports_death_by_signal) {
  auto dir = fresh_dir("cli-run-sig");
  std::thread killer([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill(g_run_pid, SIGTERM);
  });
  // The command traps SIGTERM and exits 42: that proves it got the forwarded signal.
  auto r = run_program({kLockstep, "run", "-o", dir, "--", "sh", "-c", "trap 'kill $!; exit 42' TERM; sleep 20 >/dev/null 2>&1 & wait"},
                       {{"LOCKSTEP_PRELOAD", LOCKSTEP_EMPTY_PRELOAD}}, 15, remember);
  killer.join();
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 42) << both(r);
  auto killed = lockstep_cli({"run", "-o", dir, "--", "sh", "-c", "kill -KILL $$"}, {{"LOCKSTEP_PRELOAD", LOCKSTEP_EMPTY_PRELOAD}});
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL) << both(killed);
}

TEST(CliRun, missing_recorder_library_or_command_is_a_usage_error) {
  auto r = lockstep_cli({"run", "--", "true"}, {{"LOCKSTEP_PRELOAD", "/nonexistent/liblockstep.so"}});
  EXPECT_EQ(r.exit_code, 2) << both(r);
  EXPECT_NE(r.err.find("recorder library not found at /nonexistent/liblockstep.so"), std::string::npos) << both(r);
  auto nocmd = lockstep_cli({"run"}, {{"LOCKSTEP_PRELOAD", LOCKSTEP_EMPTY_PRELOAD}});
  EXPECT_EQ(nocmd.exit_code, 2) << both(nocmd);
  auto notfound = lockstep_cli({"run", "-o", fresh_dir("cli-run-nf"), "--", "/nonexistent/program"},
                               {{"LOCKSTEP_PRELOAD", LOCKSTEP_EMPTY_PRELOAD}});
  EXPECT_EQ(notfound.exit_code, 127) << both(notfound);
}

TEST(CliRun, preload_path_prints_the_library_next_to_the_executable) {
  auto r = lockstep_cli({"--preload-path"}, {{"LOCKSTEP_PRELOAD", ""}});
  std::string expected = std::filesystem::weakly_canonical(std::filesystem::path(kLockstep).parent_path() / ".." / "lib" /
                                                           "liblockstep.so")
                             .string();
  EXPECT_EQ(r.out, expected + "\n") << both(r);
  EXPECT_EQ(r.exit_code, std::filesystem::exists(expected) ? 0 : 2) << both(r);
}

// ---- Issue 18: verdicts never stronger than their evidence, hostile input -------------------

namespace {
std::string truncated_rank_1(const std::string& name) {
  auto dir = write(clean_two_ranks(64), name);
  std::string f = dir + "/rank-1" + lockstep::schema::kFileSuffix;
  std::filesystem::resize_file(f, std::filesystem::file_size(f) / 2);
  return dir;
}
}  // namespace

TEST(CliEvidence, truncated_file_makes_analyze_and_check_exit_4_and_never_say_clean) {
  auto dir = truncated_rank_1("cli-ev-trunc");
  auto junit = dir + "/report.xml";
  auto a = lockstep_cli({"analyze", dir, "--junit", junit});
  EXPECT_EQ(a.exit_code, 4) << both(a);
  EXPECT_EQ(a.out.find("clean"), std::string::npos) << both(a);
  EXPECT_NE(a.out.find("incomplete evidence"), std::string::npos) << both(a);
  EXPECT_NE(a.out.find("rank-1.lockstep.sqlite"), std::string::npos) << both(a);
  EXPECT_NE(slurp_file(junit).find("evidence_complete\">"), std::string::npos) << slurp_file(junit);
  auto j = lockstep_cli({"analyze", dir, "--json"});
  EXPECT_EQ(j.exit_code, 4) << both(j);
  json report = json::parse(j.out);
  EXPECT_EQ(report["verdict"], "incomplete");
  EXPECT_EQ(report["clean"], false);
  EXPECT_FALSE(report["warnings"].empty());
  auto c = lockstep_cli({"check", dir});
  EXPECT_EQ(c.exit_code, 4) << both(c);
  EXPECT_NE(c.out.find("rank-1.lockstep.sqlite"), std::string::npos) << "check names the skipped file\n" << both(c);
  auto base = lockstep_cli({"check", dir, "--write-baseline", dir + "/base.txt"});
  EXPECT_EQ(base.exit_code, 4) << both(base);
  EXPECT_FALSE(std::filesystem::exists(dir + "/base.txt")) << "no baseline from incomplete evidence";
}

TEST(CliEvidence, help_lists_exit_code_4) {
  auto r = lockstep_cli({"--help"});
  EXPECT_NE(r.out.find("4  incomplete evidence"), std::string::npos) << both(r);
}

TEST(CliEvidence, non_utf8_and_escape_bytes_in_a_trace_give_valid_json_and_escaped_text) {
  auto dir = write(divergent_two_ranks(), "cli-ev-utf8");
  for (const char* f : {"/rank-0", "/rank-1"}) {
    auto r = run_program({"sqlite3", dir + f + lockstep::schema::kFileSuffix,
                          "UPDATE meta SET value=CAST(X'6E6F64651B5D323B7469746C6507FF' AS TEXT) WHERE key='host';"
                          "UPDATE comms SET name=CAST(X'636F6D6DFE0A' AS TEXT); UPDATE frames SET function=CAST(X'66FF' AS TEXT)"});
    ASSERT_EQ(r.exit_code, 0) << both(r);
  }
  auto j = lockstep_cli({"analyze", dir, "--json"});
  EXPECT_EQ(j.exit_code, 1) << both(j);
  EXPECT_NO_THROW(json::parse(j.out)) << j.out;
  auto t = lockstep_cli({"analyze", dir});
  EXPECT_EQ(t.exit_code, 1) << both(t);
  EXPECT_EQ(t.out.find('\x1b'), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find('\x07'), std::string::npos) << t.out;
  auto out = dir + "/t.json";
  auto tl = lockstep_cli({"timeline", dir, "-o", out});
  // Written; exit 4 as analyze's evidence says: these traces end without an exit record.
  EXPECT_EQ(tl.exit_code, 4) << both(tl);
  EXPECT_NE(tl.err.find("trace ends without an exit record"), std::string::npos) << both(tl);
  EXPECT_NO_THROW(json::parse(slurp_file(out)));
  auto st = lockstep_cli({"stacks", dir, "--comm", "aaaaaaaa", "--seq", "6"});
  EXPECT_EQ(st.out.find('\x1b'), std::string::npos) << st.out;
}

TEST(CliEvidence, fifo_named_like_a_trace_is_skipped_and_does_not_hang_analyze) {
  auto dir = write(clean_two_ranks(), "cli-ev-fifo");
  ASSERT_EQ(mkfifo((dir + "/x" + lockstep::schema::kFileSuffix).c_str(), 0600), 0);
  auto r = lockstep_cli({"analyze", dir});
  EXPECT_FALSE(r.timed_out) << both(r);
  EXPECT_EQ(r.exit_code, 4) << both(r);
  EXPECT_NE(r.out.find("not a regular file (a FIFO)"), std::string::npos) << both(r);
}

TEST(CliTimeline, unusable_input_exits_2_and_writes_no_file) {
  auto dir = fresh_dir("cli-tl-unusable");
  std::ofstream(dir + "/a" + lockstep::schema::kFileSuffix) << "not a database at all, just some text that is long enough";
  auto out = dir + "/t.json";
  auto r = lockstep_cli({"timeline", dir, "-o", out});
  EXPECT_EQ(r.exit_code, 2) << both(r);
  EXPECT_FALSE(std::filesystem::exists(out));
  for (auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("t.json"), std::string::npos) << "no partial file: " << e.path();
}

TEST(CliTimeline, skipped_file_is_named_and_exits_4_with_the_timeline_of_the_rest) {
  auto dir = truncated_rank_1("cli-tl-trunc");
  auto out = dir + "/t.json";
  auto r = lockstep_cli({"timeline", dir, "-o", out});
  EXPECT_EQ(r.exit_code, 4) << both(r);
  EXPECT_NE(r.err.find("rank-1.lockstep.sqlite"), std::string::npos) << both(r);
  json j = json::parse(slurp_file(out));
  EXPECT_EQ(j["otherData"]["skipped"].size(), 1u);
}

// The timeline reads headers first, then each process's rows: a file whose header reads but whose
// rows do not is still named (stderr, its track, exit 4), and the other rank is written.
TEST(CliTimeline, file_whose_rows_cannot_be_read_is_named_and_exits_4) {
  auto dir = write(clean_two_ranks(), "cli-tl-rows");
  lockstep::testing::exec_sql(dir + "/rank-1" + lockstep::schema::kFileSuffix,
                              "UPDATE op_rows SET seq=-3 WHERE call_index=(SELECT max(call_index) FROM op_rows)");
  auto out = dir + "/t.json";
  auto r = lockstep_cli({"timeline", dir, "-o", out});
  EXPECT_EQ(r.exit_code, 4) << both(r);
  EXPECT_NE(r.err.find("incomplete: "), std::string::npos) << both(r);
  EXPECT_NE(r.err.find("rank-1.lockstep.sqlite"), std::string::npos) << both(r);
  json j = json::parse(slurp_file(out));
  int slices_rank0 = 0, slices_rank1 = 0;
  std::string name1;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "X") (e["pid"] == 1 ? slices_rank0 : slices_rank1)++;
    if (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == 2) name1 = e["args"]["name"];
  }
  EXPECT_GT(slices_rank0, 0);
  EXPECT_EQ(slices_rank1, 0);
  EXPECT_NE(name1.find("not read: "), std::string::npos) << name1;
}

// doctor at scale: files whose reports are the same but for their counts share one report (the
// first file's line, the ranks and hosts of all, the counts as a range); an unreadable file
// keeps its own line unless others fail alike; --per-file lists every file.
TEST(CliDoctor, files_with_the_same_report_share_one_with_their_counts_as_a_range) {
  TraceBuilder b(4);
  b.comm("aaaaaaaa00000001", {0, 1, 2, 3});
  b.all({0, 1, 2, 3}, "aaaaaaaa00000001", {}, 5);
  b.add(3, "aaaaaaaa00000001", {});
  auto dir = write(b, "cli-doctor-grouped");
  auto r = lockstep_cli({"doctor", dir});
  EXPECT_EQ(r.exit_code, 0) << both(r);
  EXPECT_NE(r.out.find("rank-0.lockstep.sqlite: rank 0, pid 1000 on node0 (this report for 4 files: ranks 0-3, on 1 host)\n"),
            std::string::npos) << both(r);
  EXPECT_NE(r.out.find("  recorded: 5-6 op rows, 0 captured into graphs, 0 graph launches"), std::string::npos) << both(r);
  for (const char* other : {"rank-1.", "rank-2.", "rank-3."}) EXPECT_EQ(r.out.find(other), std::string::npos) << both(r);

  std::ofstream(dir + "/rank-8" + lockstep::schema::kFileSuffix) << "not a database";
  auto mixed = lockstep_cli({"doctor", dir});
  EXPECT_EQ(mixed.exit_code, 0) << both(mixed);
  EXPECT_NE(mixed.out.find("rank-8.lockstep.sqlite: unreadable: "), std::string::npos) << both(mixed);
  EXPECT_EQ(mixed.out.find("this report for 5 files"), std::string::npos) << both(mixed);

  auto per_file = lockstep_cli({"doctor", dir, "--per-file"});
  EXPECT_EQ(per_file.exit_code, 0) << both(per_file);
  for (int p = 0; p < 4; ++p)
    EXPECT_NE(per_file.out.find("rank-" + std::to_string(p) + ".lockstep.sqlite: rank " + std::to_string(p) + ", pid " +
                                std::to_string(1000 + p) + " on node0\n"),
              std::string::npos) << both(per_file);
  EXPECT_NE(per_file.out.find("  recorded: 6 op rows"), std::string::npos) << both(per_file);
  EXPECT_EQ(per_file.out.find("this report for"), std::string::npos) << both(per_file);
}
