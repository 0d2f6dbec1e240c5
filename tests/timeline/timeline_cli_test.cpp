// `lockstep timeline` as a user runs it, on trace files written with the recorder's schema: the
// JSON file, stdout, the text view through a pipe, and exit code 2 for bad selections.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include <time.h>
#include <unistd.h>

#include "cli_runner.h"
#include "trace_builder.h"

using lockstep::testing::OpSpec;
using lockstep::testing::ProcResult;
using lockstep::testing::run_program;
using lockstep::testing::TraceBuilder;
using nlohmann::json;

namespace {

// The seed's shape on 3 ranks: rank 2 issues an all_to_all where ranks 0 and 1 reduce-scatter.
struct Written {
  std::string dir;
  explicit Written(bool running = false) {
    TraceBuilder b(3);
    b.comm("aaaa1111", {0, 1, 2});
    b.all({0, 1, 2}, "aaaa1111", {.op = "all_to_all", .redop = ""}, 3);
    for (int r : {0, 1}) b.add(r, "aaaa1111", {.op = "reduce_scatter", .completed = false});
    b.add(2, "aaaa1111", {.op = "all_to_all", .redop = "", .completed = false});
    // Stopped by the launcher's SIGTERM (an exit record): the traces hold each rank's whole
    // history. Without one (running), what a rank did after its last flush is unknown: exit 4
    // (TimelineCli.a_trace_without_an_exit_record_is_written_and_named_incomplete).
    for (int r : {0, 1, 2}) running ? b.running(r) : b.stopped(r, "SIGTERM");
    dir = lockstep::testing::fresh_dir("timeline-cli");
    lockstep::testing::write_trace(b.trace(), dir);
  }
  ~Written() { std::filesystem::remove_all(dir); }
};

TEST(TimelineCli, a_trace_without_an_exit_record_is_written_and_named_incomplete) {
  Written w(/*running=*/true);
  std::string out = w.dir + "/t.json";
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", w.dir, "-o", out});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("incomplete: ranks 0-2: trace ends without an exit record"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(out));
  ProcResult text = run_program({LOCKSTEP_EXE, "timeline", w.dir, "--text"});
  EXPECT_EQ(text.exit_code, 4) << text.out << text.err;
  EXPECT_NE(text.err.find("incomplete:"), std::string::npos) << text.err;
}

TEST(TimelineCli, writes_a_json_file_that_parses_with_every_rank_and_stdout_gives_the_same_bytes) {
  Written w;
  std::string out = w.dir + "/t.json";
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", w.dir, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string text = lockstep::testing::slurp_file(out);
  json j = json::parse(text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON:\n" << text.substr(0, 1000);
  std::set<int> pids;
  int in_flight = 0;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "X") pids.insert(e["pid"].get<int>());
    if (e["ph"] == "X" && e["cat"] == "in_flight") ++in_flight;
  }
  EXPECT_EQ(pids, (std::set<int>{1, 2, 3})) << "pid = position + 1";
  EXPECT_EQ(in_flight, 3);
  ProcResult s = run_program({LOCKSTEP_EXE, "timeline", w.dir, "-o", "-"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(s.out, text) << "-o - writes the same document to stdout";
}

// -o a path that is not a regular file is written through, never replaced: renaming the finished
// file over it replaced /dev/null itself with a regular file when run as root.
TEST(TimelineCli, output_through_a_symbolic_link_writes_its_target_and_keeps_the_link) {
  Written w;
  std::string target = w.dir + "/real.json", link = w.dir + "/link.json";
  std::filesystem::create_symlink(target, link);
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", w.dir, "-o", link});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::is_symlink(link)) << "the link was replaced";
  json j = json::parse(lockstep::testing::slurp_file(target), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "the link's target holds the document";
  ProcResult n = run_program({LOCKSTEP_EXE, "timeline", w.dir, "-o", "/dev/null"});
  EXPECT_EQ(n.exit_code, 0) << n.err;
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

// A timeline of thousands of ranks can be a gigabyte: past --large-mb (256 by default) the CLI says
// so and how to narrow it (docs/review-2026-12-02-field.md G11).
TEST(TimelineCli, a_file_past_the_size_a_browser_loads_is_named_with_how_to_narrow_it) {
  Written w;
  std::string out = w.dir + "/t.json";
  ProcResult small = run_program({LOCKSTEP_EXE, "timeline", w.dir, "-o", out});
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_EQ(small.err.find("more than a browser tab"), std::string::npos) << small.err;
  ProcResult big = run_program({LOCKSTEP_EXE, "timeline", w.dir, "-o", out, "--large-mb", "0"});
  ASSERT_EQ(big.exit_code, 0) << big.err;
  EXPECT_NE(big.err.find("more than a browser tab"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("--ranks, --comm or --from-seq/--to-seq"), std::string::npos) << big.err;
  ProcResult piped = run_program({LOCKSTEP_EXE, "timeline", w.dir, "-o", "-", "--large-mb", "0"});
  EXPECT_EQ(piped.err.find("more than a browser tab"), std::string::npos) << "stdout has no size to name";
}

TEST(TimelineCli, text_view_through_a_pipe_groups_agreeing_ranks_and_marks_the_divergence_in_ascii) {
  Written w;
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", w.dir, "--text"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ranks 0-1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("✓"), std::string::npos) << "no UTF-8 markers into a pipe\n" << r.out;
  bool marked = false;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("4 ", 0) == 0)
      marked = line.find("reduce_scatter ..") != std::string::npos && line.find("all_to_all ..") != std::string::npos &&
               line.find("<- diverges") != std::string::npos;
  EXPECT_TRUE(marked) << "row 4: reduce_scatter .. | all_to_all .. <- diverges\n" << r.out;
}

TEST(TimelineCli, ranks_option_shows_only_those_ranks) {
  Written w;
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", w.dir, "--ranks", "2,0", "-o", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out.substr(0, 1000);
  std::vector<std::string> names;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") names.push_back(e["args"]["name"]);
  ASSERT_EQ(names.size(), 2u) << r.out.substr(0, 1000);
  EXPECT_EQ(names[0].rfind("rank 0 (", 0), 0u) << names[0];
  EXPECT_EQ(names[1].rfind("rank 2 (", 0), 0u) << names[1];
  // One numbering of process tracks: a process's pid is its position in the directory + 1, with
  // or without --ranks (the CLI used to renumber the selected ranks 1, 2, ... unless some file
  // lacked a global rank, so rank 2 was pid 2 here and pid 3 in the full timeline).
  ProcResult all = run_program({LOCKSTEP_EXE, "timeline", w.dir, "-o", "-"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  json full = json::parse(all.out, nullptr, false);
  auto pid_of = [](const json& doc, const std::string& rank) {
    for (const json& e : doc["traceEvents"])
      if (e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"].get<std::string>().rfind(rank + " (", 0) == 0)
        return e["pid"].get<int>();
    return -1;
  };
  EXPECT_EQ(pid_of(j, "rank 2"), 3);
  EXPECT_EQ(pid_of(j, "rank 2"), pid_of(full, "rank 2"));
  EXPECT_EQ(pid_of(j, "rank 0"), pid_of(full, "rank 0"));
}

// --ranks takes ranks as every command prints them: "1-2" is ranks 1 and 2 (as "2,1" is); a
// backwards range, a negative rank or one that is no number is a usage error naming the item.
TEST(TimelineCli, ranks_option_takes_ranges_as_the_commands_print_them) {
  Written w;
  ProcResult range = run_program({LOCKSTEP_EXE, "timeline", w.dir, "--ranks", "1-2", "-o", "-"});
  ProcResult list = run_program({LOCKSTEP_EXE, "timeline", w.dir, "--ranks", "2,1", "-o", "-"});
  ASSERT_EQ(range.exit_code, 0) << range.err;
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(range.out, list.out);
  EXPECT_NE(range.out.find("rank 1 ("), std::string::npos) << range.out.substr(0, 1000);
  EXPECT_EQ(range.out.find("rank 0 ("), std::string::npos) << range.out.substr(0, 1000);
  ProcResult text = run_program({LOCKSTEP_EXE, "timeline", w.dir, "--text", "--ranks", "0-1"});
  EXPECT_NE(text.out.find("ranks 0-1"), std::string::npos) << text.out << text.err;
  for (const char* bad : {"2-1", "-1", "x", "1-", "0-99999999"}) {
    ProcResult r = run_program({LOCKSTEP_EXE, "timeline", w.dir, "--ranks", bad, "-o", "-"});
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.err;
    EXPECT_NE(r.err.find("lockstep timeline: --ranks: "), std::string::npos) << bad << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << bad;
  }
}

TEST(TimelineCli, unknown_rank_or_comm_exits_2_with_what_exists_and_creates_no_file) {
  Written w;
  std::string out = w.dir + "/t.json";
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", w.dir, "--ranks", "0,9", "-o", out});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no trace of rank 9 (ranks in the trace: 0-2)"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  r = run_program({LOCKSTEP_EXE, "timeline", w.dir, "--comm", "ffff", "-o", out});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("aaaa1111"), std::string::npos) << "lists the communicators\n" << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  r = run_program({LOCKSTEP_EXE, "timeline", w.dir});
  EXPECT_EQ(r.exit_code, 2) << "neither -o nor --text\n" << r.err;
  r = run_program({LOCKSTEP_EXE, "timeline", w.dir + "/missing", "--text"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

// Two ranks, six all-reduces, both finished; `drop` removes those seqs from rank `proc`'s file,
// which says its recorder dropped them (a hole in its records).
std::string two_ranks(const std::string& name, std::map<int, std::vector<int64_t>> drop = {}) {
  TraceBuilder b(2);
  b.comm("aaaaaaaa00000002", {0, 1});
  b.all({0, 1}, "aaaaaaaa00000002", OpSpec{}, 6);
  for (auto& [proc, seqs] : drop) {
    std::erase_if(b.trace().processes[proc].ops,
                  [&](const auto& o) { return std::find(seqs.begin(), seqs.end(), o.seq) != seqs.end(); });
    b.trace().processes[proc].dropped_records = static_cast<int64_t>(seqs.size());
  }
  std::string dir = lockstep::testing::fresh_dir(name);
  lockstep::testing::write_trace(b.trace(), dir);
  return dir;
}

std::string row(const std::string& out, const std::string& seq) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(seq + " ", 0) == 0) return line;
  return "";
}

// A rank whose records of seqs 3 and 4 were dropped showed "-" (not issued) there while its peer
// completed them, then "(no divergence on this communicator)", exit 4 only from stderr. Its
// cells are unknown ("?", in the legend), and the closing line claims no agreement.
TEST(TimelineCli, text_view_shows_dropped_records_as_unknown_and_claims_no_agreement_past_them) {
  std::string dir = two_ranks("timeline-cli-hole", {{1, {3, 4}}});
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", dir, "--text"});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_NE(r.out.find("? unknown"), std::string::npos) << "the legend names the unknown mark\n" << r.out;
  const std::string three = row(r.out, "3");
  EXPECT_NE(three.find("all_reduce ok"), std::string::npos) << three << "\n" << r.out;
  EXPECT_NE(three.find("?"), std::string::npos) << "rank 1's record of seq 3 was dropped: unknown\n" << r.out;
  EXPECT_EQ(three.find(" -"), std::string::npos) << "never 'not issued'\n" << r.out;
  EXPECT_EQ(r.out.find("(no divergence on this communicator)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no divergence in what was read"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1: comm aaaaaaaa (init0): evidence is whole through seq 2"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

// Every rank's record of seq 3 dropped: "no rank issued seq 3..3" with exit 2 (as if nobody had
// issued it) where stacks says unknown (4). The row shows unknown cells, exit 4.
TEST(TimelineCli, a_window_whose_every_record_was_dropped_is_unknown_not_never_issued) {
  std::string dir = two_ranks("timeline-cli-all-dropped", {{0, {3}}, {1, {3}}});
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", dir, "--text", "--around", "3", "--window", "0"});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_EQ(r.err.find("no rank issued"), std::string::npos) << r.err;
  EXPECT_NE(row(r.out, "3").find("?"), std::string::npos) << r.out << r.err;
  ProcResult stacks = run_program({LOCKSTEP_EXE, "stacks", dir, "--comm", "init0", "--seq", "3"});
  EXPECT_EQ(stacks.exit_code, r.exit_code) << "stacks and timeline agree\n" << stacks.out << stacks.err;
  // Seqs past every member's end on whole records: never issued, as before (exit 2).
  std::string whole = two_ranks("timeline-cli-past-end");
  ProcResult past = run_program({LOCKSTEP_EXE, "timeline", whole, "--text", "--around", "20", "--window", "0"});
  EXPECT_EQ(past.exit_code, 2) << past.out << past.err;
  EXPECT_NE(past.err.find("no rank issued seq 20..20"), std::string::npos) << past.err;
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(whole);
}

// A copied file (rank 1's file twice): the text view named no contradiction on its closing line
// ("(no divergence on this communicator)"); it names it as analyze does.
TEST(TimelineCli, text_view_names_contradictory_files_instead_of_claiming_agreement) {
  std::string dir = two_ranks("timeline-cli-copied");
  std::filesystem::copy_file(dir + "/rank-1.lockstep.sqlite", dir + "/copy-1.lockstep.sqlite");
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", dir, "--text"});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_EQ(r.out.find("(no divergence on this communicator)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("contradictory: "), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

// The JSON file carried only otherData.skipped: the evidence gaps stderr names (dropped records,
// a member without a file, contradictory files) are in the file too, and stderr names the
// communicator with its role as every other output does.
TEST(TimelineCli, json_file_carries_the_evidence_gaps_and_names_communicators_with_their_role) {
  std::string dir = two_ranks("timeline-cli-json-evidence", {{1, {3, 4}}});
  std::string out = dir + "/../timeline-cli-json-evidence.json";
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", dir, "-o", out});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  json j = json::parse(lockstep::testing::slurp_file(out), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_TRUE(j["otherData"]["evidence"].is_array()) << j["otherData"].dump();
  std::set<std::string> kinds;
  for (const json& e : j["otherData"]["evidence"]) kinds.insert(e["kind"].get<std::string>());
  EXPECT_TRUE(kinds.count("dropped_records")) << j["otherData"].dump();
  // A member without a file: named with the communicator's role, in the file and on stderr.
  std::filesystem::remove(dir + "/rank-1.lockstep.sqlite");
  r = run_program({LOCKSTEP_EXE, "timeline", dir, "-o", out});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("incomplete: comm aaaaaaaa (init0) has 2 ranks, 1 traced"), std::string::npos) << r.err;
  j = json::parse(lockstep::testing::slurp_file(out), nullptr, false);
  bool missing = false;
  for (const json& e : j["otherData"]["evidence"])
    missing |= e["kind"] == "missing_member" && e["detail"].get<std::string>().find("(init0)") != std::string::npos;
  EXPECT_TRUE(missing) << j["otherData"].dump();
  // Whole evidence: an empty list.
  std::string whole = two_ranks("timeline-cli-json-whole");
  r = run_program({LOCKSTEP_EXE, "timeline", whole, "-o", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  j = json::parse(lockstep::testing::slurp_file(out), nullptr, false);
  EXPECT_EQ(j["otherData"]["evidence"], json::array()) << j["otherData"].dump();
  std::filesystem::remove(out);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(whole);
}

// Two ranks still running on this host (no exit record, flushed just now), no hang timeout fired:
// whether they issue seq 8 yet is unknown, and stacks says so (exit 4). The text view said "no rank
// issued seq 8..8" (exit 2); it shows the row unknown, says why, and exits 4 as stacks does.
TEST(TimelineCli, a_seq_live_ranks_may_issue_yet_is_unknown_as_stacks_says) {
  TraceBuilder b(2);
  b.comm("aaaaaaaa00000002", {0, 1});
  b.all({0, 1}, "aaaaaaaa00000002", OpSpec{}, 6);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  for (int r : {0, 1}) {
    b.running(r);
    auto& p = b.trace().processes[r];
    p.host = host;
    p.pid = r == 0 ? getpid() : getppid();
    p.last_flush_mono_ns = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }
  std::string dir = lockstep::testing::fresh_dir("timeline-cli-live");
  lockstep::testing::write_trace(b.trace(), dir);
  ProcResult stacks = run_program({LOCKSTEP_EXE, "stacks", dir, "--comm", "init0", "--seq", "8"});
  EXPECT_EQ(stacks.exit_code, 4) << stacks.out << stacks.err;
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", dir, "--text", "--around", "8", "--window", "0"});
  EXPECT_EQ(r.exit_code, stacks.exit_code) << r.out << r.err;
  EXPECT_NE(row(r.out, "8").find("?"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("ranks 0-1: unknown: its trace ends without an exit record"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(no divergence on this communicator)"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
