// The report's data (report/report.h) over traces built in memory: ranks aggregated into runs and
// groups, evidence gaps named, stacks stored once, hostile strings made safe for the page.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "analysis.h"
#include "report.h"
#include "text_escape.h"
#include "trace_builder.h"

using namespace lockstep;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;
using nlohmann::json;

namespace {

struct Built {
  Schedule s;
  Analysis a;
  std::unique_ptr<TraceDetails> details;
  json data;
  std::string raw;
};

std::unique_ptr<Built> build(TraceBuilder& b, const report::ReportOptions& opt = {}) {
  auto r = std::make_unique<Built>();
  r->s = schedule_from_trace(b.trace());
  r->a = analyze(r->s);
  r->details = details_from_trace(b.trace());
  r->raw = report::report_data_json(r->a, *r->details, opt);
  r->data = json::parse(r->raw);
  return r;
}

std::vector<int> range(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// n ranks on one communicator, 10 all_reduces each, the last in flight (a hang); `laggard`
// stops after 8 (blocked in its 8th).
TraceBuilder laggard_job(int n, int laggard) {
  TraceBuilder b(n);
  b.comm("aaaa0000", range(n));
  for (int p = 0; p < n; ++p) {
    b.running(p);
    int ops = p == laggard ? 8 : 10;
    for (int i = 0; i < ops; ++i) b.add(p, "aaaa0000", OpSpec{.completed = i + 1 < ops});
  }
  return b;
}

const json& family(const json& d, const std::string& name) {
  for (auto& f : d["families"])
    if (f["family"] == name) return f;
  throw std::runtime_error("no family " + name + " in " + d["families"].dump());
}

TEST(ReportData, ranks_with_identical_standing_form_one_run_and_the_odd_rank_its_own_group) {
  auto b = laggard_job(64, 37);
  auto r = build(b);
  const json& f = family(r->data, "init0");
  // Runs cover every rank exactly once: 0-36, 37, 38-63.
  ASSERT_EQ(f["runs"].size(), 3u) << f["runs"].dump();
  int64_t covered = 0;
  for (auto& run : f["runs"]) covered += run[0].get<int64_t>();
  EXPECT_EQ(covered, 64);
  EXPECT_EQ(f["runs"][0][0], 37);
  EXPECT_EQ(f["runs"][0][1], 10) << "last issued";
  EXPECT_EQ(f["runs"][0][2], 9) << "last completed";
  EXPECT_EQ(f["runs"][1][0], 1);
  EXPECT_EQ(f["runs"][1][1], 8);
  EXPECT_EQ(f["runs"][1][2], 7);
  EXPECT_EQ(f["max_issued"], 10);
  ASSERT_EQ(f["groups"]["count"], 2);
  EXPECT_EQ(f["groups"]["list"][0]["count"], 63);
  EXPECT_EQ(f["groups"]["list"][0]["ranks"], "0-36,38-63");
  EXPECT_EQ(f["groups"]["list"][1]["count"], 1);
  EXPECT_EQ(f["groups"]["list"][1]["ranks"], "37");
  EXPECT_EQ(f["groups"]["list"][1]["issued"], 8);
  EXPECT_EQ(r->data["evidence"]["ranks_read"]["count"], 64);
  EXPECT_EQ(r->data["evidence"]["missing_ranks"]["count"], 0);
  EXPECT_EQ(r->data["verdict"]["state"], "problems");
  // No rank has an exit record and none was seen running: the analyzer counts their history after
  // the last flush as lost, so the page says incomplete too (it said complete before review
  // finding 4). The finding itself stands: state "problems".
  EXPECT_TRUE(r->data["verdict"]["evidence_incomplete"].get<bool>());
  // One row for the 63 ranks' identical gap (review G3), not 63 rows; rank 37's differs (a peer
  // completed what its trace does not show).
  const json& issues = r->data["evidence"]["issues"];
  EXPECT_EQ(issues["issues"], 64);
  ASSERT_EQ(issues["count"], 2) << issues.dump();
  EXPECT_EQ(issues["items"][0]["kind"], "history_lost");
  EXPECT_EQ(issues["items"][0]["ranks"], "0-36,38-63");
  EXPECT_EQ(issues["items"][0]["detail"].get<std::string>().rfind("trace ends without an exit record", 0), 0u) << issues.dump();
  EXPECT_EQ(issues["items"][1]["ranks"], "37");
  EXPECT_NE(issues["items"][1]["detail"].get<std::string>().find("a peer completed collective #9"), std::string::npos) << issues.dump();
}

TEST(ReportData, rank_status_row_is_run_length_encoded_over_global_ranks) {
  auto b = laggard_job(64, 37);
  b.stopped(5, "SIGABRT");  // nothing in flight is not guaranteed; status comes from the analyzer
  auto r = build(b);
  int64_t covered = 0;
  for (auto& run : r->data["ranks"]["runs"]) covered += run[0].get<int64_t>();
  EXPECT_EQ(covered, 64);
  EXPECT_LE(r->data["ranks"]["runs"].size(), 5u) << r->data["ranks"]["runs"].dump();
  std::vector<std::string> statuses = r->data["ranks"]["statuses"];
  std::map<std::string, int> by_status;
  for (size_t p = 0; p < r->a.hang.ranks.size(); ++p) ++by_status[status_name(r->a.hang.ranks[p].status)];
  std::map<std::string, int> drawn;
  for (auto& run : r->data["ranks"]["runs"]) drawn[statuses[run[2].get<int>()]] += run[0].get<int>();
  EXPECT_EQ(drawn, by_status);
}

TEST(ReportData, the_data_does_not_grow_with_ranks_that_look_alike) {
  auto small = laggard_job(128, 100);
  auto large = laggard_job(2048, 2000);
  auto rs = build(small);
  auto rl = build(large);
  EXPECT_EQ(family(rl->data, "init0")["runs"].size(), 3u);
  EXPECT_EQ(rl->data["ranks"]["runs"].size(), rs->data["ranks"]["runs"].size());
  // The wait-for graph aggregates the 2047 ranks waiting for the laggard into one edge.
  EXPECT_LE(rl->data["wait_graph"]["edges"].size(), 4u) << rl->data["wait_graph"]["edges"].dump();
  EXPECT_LT(rl->raw.size(), rs->raw.size() * 3 / 2) << "2048 ranks: " << rl->raw.size() << " bytes, 128: " << rs->raw.size();
}

TEST(ReportData, ranks_without_a_trace_file_are_missing_and_make_the_evidence_incomplete) {
  TraceBuilder b(6);
  b.comm("bbbb0000", range(6));
  b.all(range(6), "bbbb0000", OpSpec{}, 3);
  for (auto& p : b.trace().processes) p.comms[0].nranks = 8;  // ranks 6 and 7 never wrote a file
  auto r = build(b);
  EXPECT_EQ(r->data["evidence"]["world"], 8);
  EXPECT_EQ(r->data["evidence"]["missing_ranks"]["count"], 2);
  EXPECT_EQ(r->data["evidence"]["missing_ranks"]["ranges"], "6-7");
  EXPECT_EQ(r->data["evidence"]["partial_comms"]["count"], 1);
  EXPECT_TRUE(r->data["verdict"]["evidence_incomplete"].get<bool>());
  EXPECT_NE(r->data["verdict"]["state"], "clean") << "never clean with ranks missing";
  std::vector<std::string> statuses = r->data["ranks"]["statuses"];
  const json& last = r->data["ranks"]["runs"].back();
  EXPECT_EQ(last[0], 2);
  EXPECT_EQ(statuses[last[2].get<int>()], "missing");
}

TEST(ReportData, skipped_files_dropped_records_and_stopped_recorders_are_listed) {
  TraceBuilder b(2);
  b.comm("cccc0000", {0, 1});
  b.all({0, 1}, "cccc0000", OpSpec{}, 2);
  b.trace().skipped.push_back({"/t/rank-9.lockstep.sqlite", "not a lockstep trace"});
  b.trace().processes[1].dropped_records = 12;
  b.trace().processes[0].meta["recorder_stopped"] = "disk_full";
  auto r = build(b);
  const json& e = r->data["evidence"];
  ASSERT_EQ(e["skipped"]["count"], 1);
  EXPECT_EQ(e["skipped"]["files"][0]["reason"], "not a lockstep trace");
  ASSERT_EQ(e["dropped"]["count"], 1);
  EXPECT_EQ(e["dropped"]["ranks"][0]["rank"], 1);
  EXPECT_EQ(e["dropped"]["ranks"][0]["records"], 12);
  ASSERT_EQ(e["recorder_stopped"]["count"], 1);
  EXPECT_EQ(e["recorder_stopped"]["ranks"][0]["reason"], "disk_full");
  EXPECT_EQ(r->data["verdict"]["state"], "incomplete");
}

TEST(ReportData, an_identical_stack_is_stored_once_and_referenced_by_every_op) {
  TraceBuilder b(4);
  b.comm("dddd0000", range(4));
  std::vector<Frame> frames = {{.kind = lockstep::vocab::FrameKind::Python, .function = "train_step", .file = "train.py", .line = 42},
                               {.kind = lockstep::vocab::FrameKind::Native, .function = "main", .module = "/usr/bin/trainer", .offset = 0x40}};
  for (int p = 0; p < 4; ++p) {
    b.stack(p, 7, frames);
    b.running(p);
    for (int i = 0; i < 5; ++i) b.add(p, "dddd0000", OpSpec{.op = p == 2 && i == 4 ? "broadcast" : "all_reduce", .root = p == 2 && i == 4 ? 0 : -1, .stack = 7});
  }
  auto r = build(b);
  ASSERT_EQ(r->data["stacks"].size(), 1u) << r->data["stacks"].dump();
  EXPECT_EQ(r->data["stacks"][0][0][1], "train_step");
  const json& fl = r->data["findings"]["list"];
  ASSERT_FALSE(fl.empty());
  EXPECT_EQ(fl[0]["kind"], "op_type");
  EXPECT_EQ(fl[0]["field"], "op");
  EXPECT_EQ(fl[0]["odd_ranks"], json::array({2}));
  size_t refs = 0;
  for (auto& lane : fl[0]["lanes"])
    for (auto& op : lane["ops"]) {
      EXPECT_EQ(op["st"], 0) << op.dump();
      ++refs;
    }
  EXPECT_GE(refs, 4u * 5u - 4u) << "every lane shows its ops around the divergence";
  // The odd rank's lane holds the broadcast at the divergence row.
  bool found = false;
  for (auto& lane : fl[0]["lanes"])
    if (lane["rank"] == 2) {
      ASSERT_GE(lane["at"].get<int>(), 0);
      EXPECT_EQ(lane["ops"][lane["at"].get<int>()]["op"], "broadcast");
      EXPECT_TRUE(lane["odd"].get<bool>());
      found = true;
    }
  EXPECT_TRUE(found);
}

TEST(ReportData, lanes_per_finding_are_bounded_and_the_rest_counted) {
  auto b = laggard_job(64, 37);
  // Stopped by the launcher: every history is complete, so "never issued" is proven.
  for (int p = 0; p < 64; ++p) b.stopped(p, "SIGTERM");
  report::ReportOptions opt;
  opt.max_lanes = 5;
  auto r = build(b, opt);
  const json& fl = r->data["findings"]["list"];
  ASSERT_FALSE(fl.empty());
  EXPECT_EQ(fl[0]["lanes"].size(), 4u) << "the rank that never issued it and three of the majority";
  EXPECT_EQ(fl[0]["more_sides"], 64 - 4);
  bool laggard_shown = false;
  for (auto& lane : fl[0]["lanes"]) laggard_shown |= lane["rank"] == 37;
  EXPECT_TRUE(laggard_shown) << "the rank that never issued it comes first";
}

// ---- escaping ----

std::string data_block(const std::string& page) {
  std::string open = "<script type=\"application/json\" id=\"report-data\">";
  size_t a = page.find(open);
  if (a == std::string::npos) return "";
  a += open.size();
  size_t e = page.find("</script>", a);
  return page.substr(a, e - a);
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

TEST(ReportEscaping, hostile_trace_strings_stay_data_in_the_page) {
  const std::string host = "</script><script>alert(1)</script><!--";
  const std::string fn = std::string("evil\x01\x1b[31m\xff\xfe") + "\xe2\x80\xa8" + "end";
  TraceBuilder b(2);
  b.comm("eeee0000", {0, 1});
  for (int p = 0; p < 2; ++p) {
    b.trace().processes[p].host = host;
    b.stack(p, 1, {{.kind = lockstep::vocab::FrameKind::Native, .function = fn, .module = "</SCRIPT>", .offset = 1}});
    b.running(p);
    b.add(p, "eeee0000", OpSpec{.stack = 1});
    b.add(p, "eeee0000", OpSpec{.op = p ? "all_gather" : "all_reduce", .completed = false, .stack = 1});
  }
  auto r = build(b);
  std::string page = report::render_page(r->raw);
  const std::string& t = report::page_template();
  EXPECT_EQ(count(page, "</script"), count(t, "</script")) << "no script end tag from the data";
  EXPECT_EQ(count(page, "</SCRIPT"), 0u);
  EXPECT_EQ(count(page, "<!--"), count(t, "<!--"));
  EXPECT_EQ(page.find("\xe2\x80\xa8"), std::string::npos) << "U+2028 escaped";
  EXPECT_EQ(page.find('\x01'), std::string::npos) << "control characters escaped";
  EXPECT_EQ(page.find('\x1b'), std::string::npos);
  std::string block = data_block(page);
  ASSERT_FALSE(block.empty());
  json back = json::parse(block);  // still valid JSON after escaping
  EXPECT_EQ(back, r->data);
  EXPECT_EQ(back["hosts"][0], host);
  std::string f = back["stacks"][0][0][1];
  EXPECT_EQ(f, lockstep::printable(fn)) << "the frame as the text output prints it";
  EXPECT_TRUE(lockstep::is_printable(f));
  EXPECT_EQ(f.find('\x1b'), std::string::npos);
}

TEST(ReportEscaping, script_safe_json_round_trips) {
  json j = {{"a", "</script>&<b>"}, {"u", "x\u2028y\u2029z"}, {"n", 3}};
  std::string safe = report::script_safe_json(j.dump(-1, ' ', false));
  EXPECT_EQ(safe.find('<'), std::string::npos);
  EXPECT_EQ(safe.find('>'), std::string::npos);
  EXPECT_EQ(safe.find('&'), std::string::npos);
  EXPECT_NE(safe.find("\\u2028"), std::string::npos);
  EXPECT_EQ(json::parse(safe), j);
}

TEST(ReportPage, template_has_the_sections_the_browser_test_looks_for) {
  const std::string& t = report::page_template();
  for (const char* id : {"id=\"verdict\"", "id=\"standing\"", "id=\"ladder\"", "id=\"waitgraph\"", "id=\"timeline\"",
                         "id=\"report-data\"", "report-ready", "data-report-error"})
    EXPECT_NE(t.find(id), std::string::npos) << id;
  EXPECT_EQ(count(t, "/*LOCKSTEP_REPORT_DATA*/"), 1u);
  // Self-contained: nothing is loaded from elsewhere.
  for (const char* ext : {"src=\"http", "href=\"http", "@import", "url(http"}) EXPECT_EQ(t.find(ext), std::string::npos) << ext;
}

TEST(ReportGraph, a_two_communicator_cycle_is_drawn_with_its_edges_marked) {
  // rank 0 issues A then B, rank 1 issues B then A, on one stream each: each waits for the other.
  TraceBuilder b(2);
  b.comm("f0000000", {0, 1});
  b.comm("f1111111", {0, 1});
  for (int p = 0; p < 2; ++p) b.running(p);
  b.add(0, "f0000000", OpSpec{.completed = false});
  b.add(0, "f1111111", OpSpec{.completed = false});
  b.add(1, "f1111111", OpSpec{.completed = false});
  b.add(1, "f0000000", OpSpec{.completed = false});
  auto r = build(b);
  ASSERT_EQ(r->a.hang.cycles.size(), 1u) << "the analyzer finds the cycle";
  const json& g = r->data["wait_graph"];
  ASSERT_EQ(g["cycles"].size(), 1u);
  EXPECT_EQ(g["cycles"][0]["communicators"], 2);
  size_t cycle_edges = 0;
  for (auto& e : g["edges"]) cycle_edges += e["cycle"].get<bool>();
  EXPECT_EQ(cycle_edges, 2u) << g.dump();
  for (auto& n : g["nodes"]) EXPECT_TRUE(n["cycle"].get<bool>()) << n.dump();
}

}  // namespace
