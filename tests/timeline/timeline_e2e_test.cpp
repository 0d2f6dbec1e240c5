// End to end on the CPU NCCL fixture: the seed demo recorded under `lockstep run` (stopped by the
// launcher's timeout once it hangs), then `lockstep timeline`: the two ops of the divergent seq
// are in flight and linked by a flow; the text view marks that row.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

using lockstep::testing::ProcResult;
using lockstep::testing::run_program;
using nlohmann::json;

namespace {

// With --layers 2 a step is 15 ops; its 11th is a reduce_scatter followed by an all_to_all.
constexpr int kDivergeAt = 15 * 2 + 11;

std::string temp_dir(const std::string& name) {
  std::string t = (std::filesystem::temp_directory_path() / ("lockstep-timeline-" + name + "-XXXXXX")).string();
  if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
  return t;
}

struct SeedRecording {
  std::string dir;
  ProcResult job;
  SeedRecording() {
    dir = temp_dir("seed");
    job = run_program({LOCKSTEP_EXE, "run", "-o", dir, "--stacks", "native", "--", LAUNCHER, "-n", "2", "--timeout", "4",
                       "--quiet", "--", SEED_DEADLOCK, "--layers", "2", "--diverge-at", std::to_string(kDivergeAt)},
                      {{"LD_LIBRARY_PATH", FIXTURE_LIB_DIR}, {"LOCKSTEP_PRELOAD", LOCKSTEP_RECORDER}}, 40);
  }
  ~SeedRecording() { std::filesystem::remove_all(dir); }
};

TEST(TimelineE2E, seed_demo_timeline_has_the_two_divergent_ops_in_flight_linked_by_a_flow) {
  SeedRecording rec;
  ASSERT_EQ(rec.job.exit_code, 124) << "the launcher stops the hung job\nstderr:\n" << rec.job.err;
  std::string out = rec.dir + "/timeline.json";
  ProcResult r = run_program({LOCKSTEP_EXE, "timeline", rec.dir, "-o", out}, {}, 30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j;
  try {
    j = json::parse(lockstep::testing::slurp_file(out));
  } catch (const std::exception& e) {
    FAIL() << "not JSON: " << e.what();
  }
  std::vector<json> in_flight;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "in_flight") in_flight.push_back(e);
  ASSERT_EQ(in_flight.size(), 2u) << "one op in flight per rank";
  std::map<std::string, json> by_op;
  for (const json& e : in_flight) {
    EXPECT_EQ(e["args"]["seq"], kDivergeAt) << e.dump();
    by_op[e["args"]["op"]] = e;
  }
  ASSERT_TRUE(by_op.count("reduce_scatter") && by_op.count("all_to_all")) << in_flight[0].dump() << "\n" << in_flight[1].dump();
  EXPECT_NE(by_op["reduce_scatter"]["pid"], by_op["all_to_all"]["pid"]) << "on different ranks";
  EXPECT_TRUE(by_op["reduce_scatter"]["args"].contains("stack")) << by_op["reduce_scatter"].dump();

  // A flow whose start sits on one of the two slices and whose end sits on the other.
  auto on = [](const json& flow, const json& slice) {
    return flow["pid"] == slice["pid"] && flow["tid"] == slice["tid"] && flow["ts"] == slice["ts"];
  };
  std::map<int64_t, json> starts;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "s") starts[e["id"]] = e;
  bool linked = false;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] != "f" || !starts.count(e["id"])) continue;
    const json& s = starts[e["id"]];
    if ((on(s, in_flight[0]) && on(e, in_flight[1])) || (on(s, in_flight[1]) && on(e, in_flight[0]))) {
      linked = true;
      EXPECT_EQ(s["cat"], "mismatch") << s.dump();
    }
  }
  EXPECT_TRUE(linked) << "no flow links the two in-flight ops";

  ProcResult text = run_program({LOCKSTEP_EXE, "timeline", rec.dir, "--text", "--window", "2"}, {}, 30);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  std::string row;
  for (size_t at = 0; at < text.out.size();) {
    size_t end = text.out.find('\n', at);
    std::string line = text.out.substr(at, end - at);
    if (line.rfind(std::to_string(kDivergeAt) + " ", 0) == 0) row = line;
    at = end == std::string::npos ? text.out.size() : end + 1;
  }
  EXPECT_NE(row.find("reduce_scatter .."), std::string::npos) << text.out;
  EXPECT_NE(row.find("all_to_all .."), std::string::npos) << "ASCII markers: stdout is a pipe\n" << text.out;
  EXPECT_NE(row.find("<- diverges (op_type)"), std::string::npos) << text.out;
}

}  // namespace
