// Timeline views over built traces: the Chrome Trace Event JSON (tracks, in-flight ops, flows,
// clock alignment, filters) and the text view (divergence row, grouped ranks).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <mutex>
#include <sstream>

#include "analysis.h"
#include "timeline.h"
#include "trace_builder.h"
#include "trace_loader.h"

using lockstep::Analysis;
using lockstep::analyze;
using lockstep::Frame;
using lockstep::HangMarker;
using lockstep::schedule_from_trace;
using lockstep::timeline_text;
using lockstep::TimelineError;
using lockstep::TimelineOptions;
using lockstep::TextTimelineOptions;
using lockstep::Trace;
using lockstep::Wait;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;
using nlohmann::json;

namespace {

std::string timeline_of_files(const std::string& dir) {
  const lockstep::Schedule headers = lockstep::load_headers(dir);
  return lockstep::timeline_json(headers, [&](size_t i) { return lockstep::load_process_file(headers.procs[i].info.path); });
}

json parse(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "timeline is not valid JSON: " << e.what() << "\n" << text.substr(0, 2000);
    return json::object();
  }
}

// Process tracks are numbered from 1 (Perfetto treats pid 0 specially): pid = position + 1.
std::vector<json> events(const json& j, const std::string& ph, int proc = -1) {
  std::vector<json> out;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == ph && (proc < 0 || e["pid"] == proc + 1)) out.push_back(e);
  return out;
}

std::string meta_name(const json& j, const std::string& what, int proc, int tid = -1) {
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "M" && e["name"] == what && e["pid"] == proc + 1 && (tid < 0 || e["tid"] == tid))
      return e["args"]["name"];
  return "(none)";
}

// Viewers draw the slices of one track as a stack: two slices either nest or do not overlap.
std::string overlapping_slices(const json& j) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "X") tracks[{e["pid"], e["tid"]}].push_back({e["ts"], e["ts"].get<double>() + e["dur"].get<double>()});
  for (auto& [key, slices] : tracks)
    for (size_t a = 0; a < slices.size(); ++a)
      for (size_t b = 0; b < slices.size(); ++b) {
        auto [s1, e1] = slices[a];
        auto [s2, e2] = slices[b];
        if (a != b && s1 < s2 && s2 < e1 && e1 < e2)
          return "pid " + std::to_string(key.first) + " tid " + std::to_string(key.second) + ": [" + std::to_string(s1) + "," +
                 std::to_string(e1) + "] and [" + std::to_string(s2) + "," + std::to_string(e2) + "]";
      }
  return "";
}

// Rank 0 and 1 agree for 3 all_to_alls, then rank 0 issues a reduce_scatter and rank 1 an
// all_to_all, neither ever completes: the seed's shape.
TraceBuilder seed_like() {
  TraceBuilder b(2);
  b.comm("aaaa1111", {0, 1});
  b.all({0, 1}, "aaaa1111", {.op = "all_to_all"}, 3);
  b.add(0, "aaaa1111", {.op = "reduce_scatter", .completed = false});
  b.add(1, "aaaa1111", {.op = "all_to_all", .completed = false});
  b.running(0).running(1);
  return b;
}

TEST(TimelineJson, has_one_named_process_track_per_rank_and_one_complete_event_per_op) {
  TraceBuilder b(3);
  b.comm("c0ffee00", {0, 1, 2});
  b.all({0, 1, 2}, "c0ffee00", {}, 4);
  b.add(2, "c0ffee00", {});
  json j = parse(timeline_json(b.trace()));
  for (int pid = 0; pid < 3; ++pid) {
    EXPECT_EQ(meta_name(j, "process_name", pid), "rank " + std::to_string(pid) + " (node0 " + std::to_string(1000 + pid) + ")");
    EXPECT_EQ(events(j, "X", pid).size(), pid == 2 ? 5u : 4u) << "complete events of rank " << pid;
  }
  json x = events(j, "X", 0)[1];
  EXPECT_EQ(x["name"], "all_reduce #2");
  EXPECT_EQ(x["cat"], "collective");
  EXPECT_EQ(x["args"]["seq"], 2);
  EXPECT_EQ(x["args"]["dtype"], "float32");
  EXPECT_EQ(x["args"]["count"], 1024);
  EXPECT_EQ(x["args"]["comm"], "c0ffee00");
  EXPECT_EQ(x["args"]["role"], "init0");
  EXPECT_EQ(x["dur"], 0.5) << "completed 500 ns after issue: " << x.dump();
  EXPECT_EQ(meta_name(j, "thread_name", 0, x["tid"]), "comm c0ffee00 (init0)");
}

TEST(TimelineJson, ops_never_completed_last_until_the_end_of_the_trace_and_are_marked_in_flight) {
  TraceBuilder b = seed_like();
  json j = parse(timeline_json(b.trace()));
  for (int pid = 0; pid < 2; ++pid) {
    auto xs = events(j, "X", pid);
    ASSERT_EQ(xs.size(), 4u);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(xs[k]["cat"], "collective") << xs[k].dump();
    const json& last = xs[3];
    EXPECT_EQ(last["cat"], "in_flight") << last.dump();
    EXPECT_EQ(last["args"]["in_flight"], true) << last.dump();
    EXPECT_EQ(last["args"]["seq"], 4);
    // Issued at call 5 (5 us; call 1 is the comm init), the trace ends at the last flush (5 s);
    // the origin is the first op (call 2, 2 us).
    EXPECT_DOUBLE_EQ(last["ts"].get<double>(), 3.0) << last.dump();
    EXPECT_DOUBLE_EQ(last["dur"].get<double>(), 5'000'000.0 - 5.0) << last.dump();
  }
  EXPECT_EQ(overlapping_slices(j), "");
  EXPECT_EQ(events(j, "X", 0)[3]["args"]["op"], "reduce_scatter");
  EXPECT_EQ(events(j, "X", 1)[3]["args"]["op"], "all_to_all");
}

TEST(TimelineJson, ops_that_overlap_on_one_stream_without_nesting_go_to_an_extra_lane) {
  TraceBuilder b(1);
  b.comm("aaaa1111", {0});
  lockstep::Op& a = b.add(0, "aaaa1111", {});
  a.issue_mono_ns = 1000;
  a.complete_mono_ns = 5000;
  lockstep::Op& second = b.add(0, "aaaa1111", {});
  second.issue_mono_ns = 2000;  // issued while the first still runs, completes after it
  second.complete_mono_ns = 6000;
  lockstep::Op& third = b.add(0, "aaaa1111", {});
  third.issue_mono_ns = 5500;
  third.complete_mono_ns = 5800;
  json j = parse(timeline_json(b.trace()));
  auto xs = events(j, "X", 0);
  ASSERT_EQ(xs.size(), 3u);
  EXPECT_EQ(overlapping_slices(j), "");
  EXPECT_NE(xs[0]["tid"], xs[1]["tid"]) << "partial overlap: another lane";
  EXPECT_EQ(xs[0]["tid"], xs[2]["tid"]) << "the first lane is free again after 5000 ns";
  EXPECT_EQ(meta_name(j, "thread_name", 0, xs[1]["tid"]), "comm aaaa1111 (init0) (overlap 1)");
}

TEST(TimelineJson, members_of_one_collective_are_linked_by_a_flow_and_a_divergent_pair_is_a_mismatch) {
  TraceBuilder b = seed_like();
  json j = parse(timeline_json(b.trace()));
  auto starts = events(j, "s");
  auto finishes = events(j, "f");
  ASSERT_EQ(starts.size(), 4u) << "one flow per collective of the two ranks";
  ASSERT_EQ(finishes.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(starts[k]["id"], finishes[k]["id"]);
    EXPECT_EQ(starts[k]["pid"], 1) << "rank 0";
    EXPECT_EQ(finishes[k]["pid"], 2) << "rank 1";
    EXPECT_EQ(finishes[k]["bp"], "e") << "binds to the enclosing slice";
    // Each end sits on the start of its op's slice, on the slice's track.
    const json x0 = events(j, "X", 0)[k];
    const json x1 = events(j, "X", 1)[k];
    EXPECT_EQ(starts[k]["ts"], x0["ts"]);
    EXPECT_EQ(starts[k]["tid"], x0["tid"]);
    EXPECT_EQ(finishes[k]["ts"], x1["ts"]);
    EXPECT_EQ(finishes[k]["tid"], x1["tid"]);
    EXPECT_EQ(starts[k]["cat"], k < 3 ? "match" : "mismatch") << starts[k].dump();
  }
}

TEST(TimelineJson, processes_are_aligned_on_their_wall_clock_start_not_their_monotonic_clocks) {
  TraceBuilder b(2);
  b.comm("aaaa1111", {0, 1});
  b.all({0, 1}, "aaaa1111", {}, 1);
  Trace& t = b.trace();
  // Two hosts: monotonic clocks with unrelated origins; rank 1 started 2 ms after rank 0.
  t.processes[0].meta["start_wall_ns"] = "1700000000000000000";
  t.processes[0].meta["start_mono_ns"] = "1000000000000";
  t.processes[1].meta["start_wall_ns"] = "1700000000002000000";
  t.processes[1].meta["start_mono_ns"] = "7000000";
  t.processes[0].ops[0].issue_mono_ns = 1000000000000 + 10'000;  // 10 us after its start
  t.processes[0].ops[0].complete_mono_ns = 1000000000000 + 50'000;
  t.processes[1].ops[0].issue_mono_ns = 7000000 + 30'000;        // 30 us after its start
  t.processes[1].ops[0].complete_mono_ns = 7000000 + 50'000;
  json j = parse(timeline_json(t));
  ASSERT_EQ(events(j, "X", 0).size(), 1u);
  ASSERT_EQ(events(j, "X", 1).size(), 1u);
  EXPECT_DOUBLE_EQ(events(j, "X", 0)[0]["ts"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(events(j, "X", 1)[0]["ts"].get<double>(), 2000.0 + 30.0);
  EXPECT_DOUBLE_EQ(events(j, "X", 1)[0]["dur"].get<double>(), 20.0);
  EXPECT_EQ(j["otherData"]["origin_wall_ns"], 1700000000000000000);
}

TEST(TimelineJson, op_args_carry_the_trimmed_stack_with_python_frames_first) {
  TraceBuilder b(1);
  b.comm("aaaa1111", {0});
  b.stack(0, 7, {{.kind = lockstep::vocab::FrameKind::Native, .function = "ncclAllReduce", .module = "libnccl.so.2"},
                 {.kind = lockstep::vocab::FrameKind::Native, .function = "c10d::ProcessGroupNCCL::allreduce", .module = "libtorch_cuda.so"},
                 {.kind = lockstep::vocab::FrameKind::Python, .function = "post_backward", .file = "fsdp.py", .line = 42}});
  b.add(0, "aaaa1111", {.stack = 7});
  json j = parse(timeline_json(b.trace()));
  const json key = events(j, "X", 0).at(0)["args"]["stack"];
  ASSERT_TRUE(key.is_string()) << events(j, "X", 0)[0].dump();
  const json stack = j["stacks"][key.get<std::string>()];
  ASSERT_TRUE(stack.is_array() && !stack.empty()) << j["stacks"].dump();
  EXPECT_EQ(events(j, "X", 0).at(0)["args"]["from"], stack[0]);
  EXPECT_EQ(stack[0].get<std::string>().rfind("py post_backward", 0), 0u) << stack.dump();
  for (const json& f : stack) EXPECT_EQ(f.get<std::string>().find("ncclAllReduce"), std::string::npos) << "NCCL frames are trimmed: " << stack.dump();
}

TEST(TimelineJson, waits_graph_launches_and_hang_markers_are_instant_events) {
  TraceBuilder b(1);
  b.comm("aaaa1111", {0});
  b.add(0, "aaaa1111", {.state = "captured"});
  lockstep::Op& replay = b.add(0, "aaaa1111", {.state = "graph_launched"});
  replay.graph_exec = 0xabc;
  Trace& t = b.trace();
  t.processes[0].waits.push_back(Wait{.call_index = 9, .kind = lockstep::vocab::Wait::StreamSync, .stream = 1, .tid = 5,
                                      .begin_mono_ns = 4000, .end_mono_ns = -1});
  t.processes[0].hangs.push_back(HangMarker{.mono_ns = 6000, .wall_ns = 6000, .in_flight = 1, .message = "no progress for 30 s"});
  json j = parse(timeline_json(t));
  std::map<std::string, int> cats;
  for (const json& e : events(j, "i")) cats[e["cat"]]++;
  EXPECT_EQ(cats["captured"], 1) << "a captured op ran nothing: an instant, not a slice";
  EXPECT_EQ(cats["graph_launch"], 1);
  EXPECT_EQ(cats["wait_blocked"], 1) << "a wait that never returned";
  EXPECT_EQ(cats["hang"], 1);
  ASSERT_EQ(events(j, "X").size(), 1u) << "only the replayed op ran";
  EXPECT_EQ(events(j, "X")[0]["args"]["graph_exec"], "0xabc");
}

TEST(TimelineJson, rank_comm_and_seq_filters_select_ops_and_bad_selections_say_what_exists) {
  TraceBuilder b(3);
  b.comm("aaaa1111", {0, 1, 2});
  b.comm("bbbb2222", {1, 2}, "aaaa1111", 1);
  b.all({0, 1, 2}, "aaaa1111", {}, 5);
  b.all({1, 2}, "bbbb2222", {.op = "all_gather"}, 2);
  TimelineOptions o;
  o.ranks = {1, 2};
  o.comm = "aaaa";
  o.from_seq = 2;
  o.to_seq = 4;
  json j = parse(timeline_json(b.trace(), o));
  EXPECT_EQ(events(j, "X", 0).size(), 0u) << "rank 0 not selected";
  for (int pid : {1, 2}) {
    auto xs = events(j, "X", pid);
    ASSERT_EQ(xs.size(), 3u) << "seq 2..4 of comm aaaa1111 on rank " << pid;
    EXPECT_EQ(xs[0]["args"]["seq"], 2);
    EXPECT_EQ(xs[2]["args"]["seq"], 4);
  }
  o = {};
  o.comm = "init0.split0(color=1)";
  j = parse(timeline_json(b.trace(), o));
  EXPECT_EQ(events(j, "X").size(), 4u) << "selected by role";

  o = {};
  o.ranks = {7};
  try {
    timeline_json(b.trace(), o);
    ADD_FAILURE() << "rank 7 does not exist: expected TimelineError";
  } catch (const TimelineError& e) {
    EXPECT_NE(std::string(e.what()).find("0-2"), std::string::npos) << e.what();
  }
  o = {};
  o.comm = "zzzz";
  try {
    timeline_json(b.trace(), o);
    ADD_FAILURE() << "comm zzzz does not exist: expected TimelineError";
  } catch (const TimelineError& e) {
    EXPECT_NE(std::string(e.what()).find("bbbb2222"), std::string::npos) << "lists the communicators: " << e.what();
  }
}

TEST(TimelineJson, output_from_loaded_files_is_byte_identical_across_loads) {
  TraceBuilder b = seed_like();
  std::string dir = lockstep::testing::fresh_dir("timeline-determinism");
  lockstep::testing::write_trace(b.trace(), dir);
  std::string first = timeline_of_files(dir);
  for (int k = 0; k < 3; ++k) ASSERT_EQ(timeline_of_files(dir), first) << "load " << k;
  json j = parse(first);
  EXPECT_EQ(events(j, "X").size(), 8u);
  std::filesystem::remove_all(dir);
}

// The timeline holds one process's rows at a time; a process whose rows cannot be read (its
// header could) keeps its track, named with the reason, is returned to the caller as missing
// evidence, and the other processes are still shown.
TEST(TimelineJson, a_process_whose_rows_cannot_be_read_is_named_and_returned_not_dropped) {
  TraceBuilder b = seed_like();
  for (auto& p : b.trace().processes) {  // the header places the process: no rows read for its clock
    p.meta["start_wall_ns"] = "1700000000000000000";
    p.meta["start_mono_ns"] = "1000";
  }
  const lockstep::Schedule headers = schedule_from_trace(b.trace());
  std::mutex mu;  // rows are read ahead on other threads
  std::vector<size_t> asked;
  auto rows = [&](size_t i) -> lockstep::Process {
    {
      std::lock_guard<std::mutex> lock(mu);
      asked.push_back(i);
    }
    if (i == 1) throw lockstep::LoadError("corrupt: op 3 has seq 0");
    return b.trace().processes.at(i);
  };
  std::ostringstream out;
  auto unread = lockstep::write_timeline_json(headers, rows, {}, out);
  ASSERT_EQ(unread.size(), 1u);
  EXPECT_EQ(unread[0].reason, "corrupt: op 3 has seq 0");
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<size_t>{0, 1})) << "each process's rows are read once";
  json j = parse(out.str());
  EXPECT_EQ(events(j, "X", 0).size(), 4u);
  EXPECT_EQ(events(j, "X", 1).size(), 0u);
  EXPECT_NE(meta_name(j, "process_name", 1).find("not read: corrupt: op 3 has seq 0"), std::string::npos)
      << meta_name(j, "process_name", 1);
}

std::string text_of(const Trace& t, TextTimelineOptions o = {}) {
  auto s = schedule_from_trace(t);
  Analysis a = analyze(s);
  return timeline_text(a, o);
}

std::string line_of(const std::string& text, const std::string& seq) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end - at);
    if (line.rfind(seq + " ", 0) == 0) return line;
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return "(no row " + seq + ")";
}

TEST(TimelineText, marks_the_row_where_ranks_diverge_and_shows_what_each_issued) {
  TraceBuilder b = seed_like();
  TextTimelineOptions o;
  o.unicode = false;
  std::string text = text_of(b.trace(), o);
  std::string row = line_of(text, "4");
  EXPECT_NE(row.find("reduce_scatter .."), std::string::npos) << text;
  EXPECT_NE(row.find("all_to_all .."), std::string::npos) << text;
  EXPECT_NE(row.find("<- diverges (op_type)"), std::string::npos) << text;
  EXPECT_LT(row.find("reduce_scatter"), row.find("all_to_all")) << "rank 0's column first\n" << text;
  EXPECT_EQ(line_of(text, "3").find("diverges"), std::string::npos) << text;
  EXPECT_NE(line_of(text, "3").find("all_to_all ok"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
}

TEST(TimelineText, an_order_inversion_is_marked_on_both_communicators) {
  TraceBuilder b(2);
  b.comm("aaaa1111", {0, 1}).comm("bbbb2222", {0, 1});
  b.all({0, 1}, "aaaa1111", {}, 3);
  b.add(0, "aaaa1111", {.op = "reduce_scatter"});
  b.add(0, "bbbb2222", {.op = "all_to_all", .redop = "", .stream = 1});
  b.add(1, "bbbb2222", {.op = "all_to_all", .redop = "", .stream = 1});
  b.add(1, "aaaa1111", {.op = "reduce_scatter"});
  TextTimelineOptions o;
  o.comm = "aaaa";
  std::string text = text_of(b.trace(), o);
  EXPECT_NE(line_of(text, "4").find("<- diverges (order_inversion)"), std::string::npos) << text;
  o.comm = "bbbb";
  text = text_of(b.trace(), o);
  EXPECT_NE(line_of(text, "1").find("<- diverges (order_inversion)"), std::string::npos) << text;
}

TEST(TimelineText, groups_identical_ranks_into_one_column) {
  TraceBuilder b(4);
  b.comm("aaaa1111", {0, 1, 2, 3});
  b.all({0, 1, 2, 3}, "aaaa1111", {}, 3);
  for (int r : {0, 1, 2}) b.add(r, "aaaa1111", {.op = "all_gather", .completed = false});
  b.add(3, "aaaa1111", {.op = "broadcast", .root = 0, .completed = false});
  std::string text = text_of(b.trace());
  EXPECT_NE(text.find("ranks 0-2"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 3"), std::string::npos) << text;
  EXPECT_EQ(text.find("rank 1 "), std::string::npos) << "rank 1 is in the group column\n" << text;
  EXPECT_NE(line_of(text, "4").find("all_gather …"), std::string::npos) << text;
  EXPECT_NE(line_of(text, "4").find("broadcast …"), std::string::npos) << text;
  EXPECT_NE(line_of(text, "3").find("all_reduce ✓"), std::string::npos) << text;
}

TEST(TimelineText, window_around_a_seq_shows_only_that_range_and_an_unknown_comm_is_an_error) {
  TraceBuilder b(2);
  b.comm("aaaa1111", {0, 1});
  b.all({0, 1}, "aaaa1111", {}, 20);
  TextTimelineOptions o;
  o.around = 10;
  o.window = 2;
  o.comm = "aaaa";
  std::string text = text_of(b.trace(), o);
  EXPECT_EQ(line_of(text, "7"), "(no row 7)") << text;
  EXPECT_NE(line_of(text, "8"), "(no row 8)") << text;
  EXPECT_NE(line_of(text, "12"), "(no row 12)") << text;
  EXPECT_EQ(line_of(text, "13"), "(no row 13)") << text;
  EXPECT_NE(text.find("no divergence"), std::string::npos) << text;
  o.comm = "ffff";
  EXPECT_THROW(text_of(b.trace(), o), TimelineError);
  o.comm = "aaaa";
  o.around = 100;
  try {
    text_of(b.trace(), o);
    ADD_FAILURE() << "seq 98..102 does not exist: expected TimelineError";
  } catch (const TimelineError& e) {
    EXPECT_NE(std::string(e.what()).find("its last seq is 20"), std::string::npos) << e.what();
  }
}

// Another run's file for rank 1, which issued a broadcast at seq 6 where this run's rank 1 and
// rank 0 all-reduce: analyze sets the finding aside (the files contradict: which is rank 1's
// history is unknown). The text view said "(no divergence on this communicator)"; it marks the
// row as contested and lists the finding not claimed, as analyze does.
TEST(TimelineText, a_finding_on_contradictory_files_is_listed_as_not_claimed_never_agreement) {
  TraceBuilder b(2);
  b.comm("aaaa1111", {0, 1});
  b.all({0, 1}, "aaaa1111", {}, 6);
  lockstep::Process other = b.trace().processes[1];
  other.pid += 1000;
  other.ops.back().op = lockstep::vocab::Op::Broadcast;
  other.ops.back().root = 0;
  other.ops.back().redop = lockstep::vocab::RedOp::None;
  b.trace().processes.push_back(other);
  const std::string text = text_of(b.trace());
  EXPECT_EQ(text.find("(no divergence on this communicator)"), std::string::npos) << text;
  EXPECT_NE(line_of(text, "6").find("<- contested ("), std::string::npos) << text;
  EXPECT_NE(text.find("not claimed: rank 1: collective #6 on comm aaaa1111 (init0)"), std::string::npos) << text;
  EXPECT_NE(text.find("contradictory: global rank 1 is claimed by two files"), std::string::npos) << text;
}

}  // namespace

// Issue 18: a trace with large stacks made `timeline -o` write 15 GB (each op embedded its full
// stack). Stacks are one table now, ops name theirs, and a frame's text is bounded.
TEST(TimelineJson, stacks_are_written_once_and_frames_are_bounded) {
  TraceBuilder b(1);
  b.comm("aaaa1111", {0});
  b.stack(0, 3, {{.kind = lockstep::vocab::FrameKind::Python, .function = std::string(100000, 'f'), .file = "x.py", .line = 1}});
  for (int i = 0; i < 1000; ++i) b.add(0, "aaaa1111", {.stack = 3});
  std::string out = timeline_json(b.trace());
  json j = parse(out);
  ASSERT_EQ(j["stacks"].size(), 1u);
  EXPECT_LT(j["stacks"].begin()->at(0).get<std::string>().size(), 1000u);
  // 1000 ops with a 100 kB frame each were > 100 MB; now the events and one bounded stack.
  EXPECT_LT(out.size(), 2'000'000u) << out.size();
}

TEST(TimelineJson, non_utf8_strings_give_valid_json) {
  TraceBuilder b(1);
  b.comm("aaaa1111", {0});
  b.trace().processes[0].host = "node\xff\xfe";
  b.stack(0, 1, {{.kind = lockstep::vocab::FrameKind::Native, .function = "f\xc3", .module = "m"}});
  b.add(0, "aaaa1111", {.stack = 1});
  std::string out;
  ASSERT_NO_THROW(out = timeline_json(b.trace()));
  EXPECT_NO_THROW(json::parse(out));
}
