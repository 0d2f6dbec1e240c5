// Diff-test style (after Perfetto's): a small trace written as files, the report, the expected
// fields. The seed scenario is the reference: reduce_scatter vs all_to_all at seq 3750.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "analysis.h"
#include "summary_read.h"
#include "text_escape.h"
#include "trace_builder.h"
#include "trace_loader.h"

using namespace lockstep;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;
using nlohmann::json;

namespace {

// Rank 0: FSDP's reduce_scatter from post_backward; rank 1: Ulysses' all_to_all from the
// autograd backward, both after 3749 agreeing all_reduces.
TraceBuilder seed_trace() {
  TraceBuilder b(2);
  b.comm("3f2a9c0100000001", {0, 1});
  b.all({0, 1}, "3f2a9c0100000001", OpSpec{.stack = 1}, 3749);
  b.add(0, "3f2a9c0100000001", {.op = "reduce_scatter", .count = 4096, .completed = false, .stack = 2});
  b.add(1, "3f2a9c0100000001", {.op = "all_to_all", .count = 2048, .redop = "", .completed = false, .stack = 3});
  for (int p : {0, 1}) {
    b.running(p);
    b.stack(p, 1, {Frame{lockstep::vocab::FrameKind::Native, "train_step", "/app/seed", 0x10, "", 0}});
  }
  b.stack(0, 2, {Frame{lockstep::vocab::FrameKind::Native, "ncclReduceScatter", "/x/liblockstep.so", 1, "", 0},
                 Frame{lockstep::vocab::FrameKind::Native, "ncclReduceScatter", "/x/libnccl.so.2", 2, "", 0},
                 Frame{lockstep::vocab::FrameKind::Python, "_reduce_scatter", "", 0, "/site/torch/distributed/c10d_logger.py", 80},
                 Frame{lockstep::vocab::FrameKind::Python, "post_backward", "", 0, "/site/torch/distributed/fsdp/_runtime_utils.py", 733},
                 Frame{lockstep::vocab::FrameKind::Native, "fsdp_post_backward_reduce_scatter", "/app/seed", 0x40, "seed_deadlock.cpp", 120}});
  b.stack(1, 3, {Frame{lockstep::vocab::FrameKind::Python, "backward", "", 0, "/app/ulysses.py", 57},
                 Frame{lockstep::vocab::FrameKind::Native, "ulysses_all_to_all_backward", "/app/seed", 0x80, "seed_deadlock.cpp", 140}});
  return b;
}

struct Report {
  Schedule s;
  Analysis a;
  std::unique_ptr<TraceDetails> d;
};

std::unique_ptr<Report> report_of(TraceBuilder b, const std::string& name) {
  auto dir = lockstep::testing::fresh_dir(name);
  lockstep::testing::write_trace(b.trace(), dir);
  auto r = std::make_unique<Report>();
  r->s = load_schedule(dir);
  r->a = analyze(r->s);
  r->d = details_from_files(r->s);
  return r;
}

}  // namespace

TEST(Report, json_names_seed_divergence_with_ops_seq_and_user_frames) {
  auto r = report_of(seed_trace(), "seed-json");
  json j = json::parse(render_json(r->a, *r->d));
  EXPECT_EQ(j["schema"], "lockstep.analysis");
  EXPECT_EQ(j["version"], kJsonReportVersion);
  EXPECT_EQ(j["clean"], false);
  const json& f = j["first_divergence"];
  ASSERT_TRUE(f.is_object()) << j.dump(2);
  EXPECT_EQ(f["kind"], "op_type");
  EXPECT_EQ(f["comm"], "3f2a9c0100000001");
  EXPECT_EQ(f["role"], "init0");
  EXPECT_EQ(f["seq"], 3750);
  ASSERT_EQ(f["sides"].size(), 2u);
  const json& r0 = f["sides"][0];
  const json& r1 = f["sides"][1];
  EXPECT_EQ(r0["rank"], 0);
  EXPECT_EQ(r0["op"], "reduce_scatter");
  EXPECT_EQ(r0["count"], 4096);
  EXPECT_EQ(r0["state"], "in flight");
  EXPECT_EQ(r1["op"], "all_to_all");
  // Python frames first; NCCL, lockstep and c10d's wrapper trimmed.
  ASSERT_EQ(r0["stack"].size(), 2u) << r0["stack"].dump();
  EXPECT_EQ(r0["stack"][0]["function"], "post_backward");
  EXPECT_EQ(r0["stack"][1]["function"], "fsdp_post_backward_reduce_scatter");
  EXPECT_EQ(r1["from"], "backward (ulysses.py:57)");
  EXPECT_EQ(j["hang"]["hung"], true);
  EXPECT_EQ(j["hang"]["ranks"][0]["blocked"][0]["waits_for"][0]["rank"], 1);
}

TEST(Report, text_report_names_both_sides_stacks_and_the_agreed_prefix) {
  auto r = report_of(seed_trace(), "seed-text");
  std::string text = render_text(r->a, *r->d);
  for (const char* needle :
       {"FIRST DIVERGENCE: comm 3f2a9c01 (init0) seq 3750", "rank 0: reduce_scatter float32 count=4096 sum",
        "rank 1: all_to_all float32", "from post_backward (_runtime_utils.py:733)",
        "both members completed seq 1..3749", "fsdp_post_backward_reduce_scatter (seed_deadlock.cpp:120)",
        "ops just before on rank 0:", "seq 3749  all_reduce"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << "missing '" << needle << "' in:\n" << text;
  }
  EXPECT_EQ(text.find("\033["), std::string::npos) << "no colour unless asked";
}

TEST(Report, clean_run_is_one_line_with_counts) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.all({0, 1}, "c1", {}, 7);
  auto r = report_of(b, "clean");
  std::string text = render_text(r->a, *r->d);
  EXPECT_EQ(text, "lockstep: clean: 2 processes, 1 communicator, 14 ops; ranks agree, no order inversion, no hang\n");
}

TEST(Report, junit_has_one_failing_case_per_problem_class) {
  auto r = report_of(seed_trace(), "junit");
  std::string xml = render_junit("suite", junit_cases(r->a, false));
  EXPECT_NE(xml.find("<testcase classname=\"lockstep\" name=\"ranks_agree\">"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testcase classname=\"lockstep\" name=\"communicator_order\"/>"), std::string::npos) << xml;
  // The seed trace's ranks have no exit record (running, then killed without one): their
  // history after the last flush is unknown, so evidence_complete fails too.
  EXPECT_NE(xml.find("failures=\"3\""), std::string::npos) << "ranks_agree, no_hang, evidence_complete fail:\n" << xml;
  EXPECT_NE(xml.find("name=\"evidence_complete\">"), std::string::npos) << xml;
}

// U+FFFE and U+FFFF are UTF-8 that XML 1.0 does not allow (a communicator named with them made
// check's JUnit file not well-formed): written escaped.
TEST(Report, junit_escapes_the_characters_xml_does_not_allow) {
  const std::string ffff = "\xef\xbf\xbf", fffe = "\xef\xbf\xbe";
  std::string xml = render_junit("suite " + ffff, {{"a" + fffe, "failed at " + ffff + "\n", "out " + fffe}});
  EXPECT_EQ(xml.find(ffff), std::string::npos) << xml;
  EXPECT_EQ(xml.find(fffe), std::string::npos) << xml;
  EXPECT_NE(xml.find("\\uffff"), std::string::npos) << xml;
}

TEST(StackTrim, keeps_user_frames_python_first_and_shortens_cpp_names) {
  std::vector<Frame> frames = {
      {lockstep::vocab::FrameKind::Native, "ncclAllReduce", "/usr/lib/libnccl.so.2", 0x10, "", 0},
      {lockstep::vocab::FrameKind::Native, "lockstep::rec::hook", "/b/lib/liblockstep.so", 0x20, "", 0},
      {lockstep::vocab::FrameKind::Native, "c10d::ProcessGroupNCCL::allreduce(std::vector<at::Tensor>&)", "/t/libtorch_cuda.so", 0x30, "", 0},
      {lockstep::vocab::FrameKind::Native, "(anonymous namespace)::step(Model&, int) [clone .constprop.0]", "/app/train", 0x40, "", 0},
      {lockstep::vocab::FrameKind::Native, "_PyEval_EvalFrameDefault", "/usr/bin/python3.11", 0x50, "", 0},
      {lockstep::vocab::FrameKind::Python, "wrapper", "", 0, "/site/torch/distributed/c10d_logger.py", 83},
      {lockstep::vocab::FrameKind::Python, "all_reduce", "", 0, "/site/torch/distributed/distributed_c10d.py", 2501},
      {lockstep::vocab::FrameKind::Python, "_call_impl", "", 0, "/site/torch/nn/modules/module.py", 1750},
      {lockstep::vocab::FrameKind::Python, "Function.apply", "", 0, "/site/torch/autograd/function.py", 596},
      {lockstep::vocab::FrameKind::Python, "clip_grad_norm", "", 0, "/app/train.py", 120},
      {lockstep::vocab::FrameKind::Python, "<module>", "", 0, "<frozen runpy>", 88},
  };
  auto kept = trim_stack(frames);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(format_frame(kept[0]), "clip_grad_norm (train.py:120)");
  EXPECT_EQ(format_frame(kept[1]), "step (train+0x40)");
  EXPECT_EQ(frame_origin(kept), "clip_grad_norm (train.py:120)");
  EXPECT_EQ(trim_stack(frames, 1).size(), 1u);
}

TEST(Report, communicator_with_a_member_whose_file_is_missing_says_how_many_were_traced) {
  TraceBuilder b(2);
  b.comm("c1c1c1c100000000", {0, 1});
  b.all({0, 1}, "c1c1c1c100000000", {}, 3);
  b.add(0, "c1c1c1c100000000", {.count = 1});
  b.add(1, "c1c1c1c100000000", {.count = 2});
  // Rank 2 of this 3-rank communicator left no trace file: its absence is not a divergence.
  for (auto& p : b.trace().processes) p.comms[0].nranks = 3;
  auto r = report_of(b, "missing-member");
  ASSERT_EQ(r->a.divergences.size(), 1u);
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kCount);
  std::string text = render_text(r->a, *r->d);
  EXPECT_NE(text.find("comm c1c1c1c1 (init0) (2 of 3 ranks traced) seq 4"), std::string::npos) << text;
}

// The per-rank arrays (processes, evidence, comms, hang.ranks) are dumped element by element and
// spliced into the report (analysis_json.cpp SplicedArrays): the text is what dumping the whole
// report at once writes, byte for byte.
TEST(Report, json_spliced_arrays_read_as_one_dump_writes_them) {
  auto r = report_of(seed_trace(), "seed-json-spliced");
  const std::string text = render_json(r->a, *r->d);
  const json j = json::parse(text);
  ASSERT_EQ(j["processes"].size(), 2u);
  ASSERT_EQ(j["hang"]["ranks"].size(), 2u);
  EXPECT_FALSE(j["comms"].empty());
  EXPECT_EQ(text, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

// `analyze --json` writes the report as it is made, the commands' members added to it before
// its arrays are written: the same text as adding them to the whole report.
TEST(Report, json_written_as_made_with_members_added_is_the_whole_report_with_them) {
  auto r = report_of(seed_trace(), "seed-json-streamed");
  const std::string whole = add_json_member(render_json(r->a, *r->d), "extra", "{\n  \"n\": 1\n}", 2);
  std::string streamed;
  size_t writes = 0;
  write_json(r->a, *r->d, {}, [](std::string t) { return add_json_member(std::move(t), "extra", "{\n  \"n\": 1\n}", 2); },
             [&](std::string_view t) { streamed.append(t), ++writes; });
  EXPECT_EQ(streamed, whole);
  EXPECT_EQ(json::parse(streamed)["extra"]["n"], 1);
  EXPECT_GE(writes, 9u);  // four arrays, each between two pieces of the rest
}

// A directory path that holds a placeholder's text: the arrays go into the report all the same.
TEST(Report, json_of_a_directory_named_like_a_placeholder_keeps_its_arrays) {
  auto r = report_of(seed_trace(), "seed-json-placeholder");
  const json plain = json::parse(render_json(r->a, *r->d));
  r->s.dir += std::string("/\x01lockstep:spliced:0\x01/\x01lockstep:spliced:1\x01/\x01lockstep:spliced:3\x01");
  const std::string text = render_json(r->a, *r->d);
  const json j = json::parse(text);
  EXPECT_EQ(j["dir"], lockstep::printable(r->s.dir));  // as every string of the report: control bytes escaped
  for (const char* key : {"processes", "evidence", "comms", "hang"}) EXPECT_EQ(j[key], plain[key]) << key;
  EXPECT_EQ(text, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}
