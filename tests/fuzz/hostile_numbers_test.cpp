// Numbers a crafted trace can hold, and the rules that keep them from overflowing or blowing
// up the analyses (found by fuzzing and by reading the code; the fuzz target's UBSan build
// catches the overflows themselves, these tests pin down the rules and their results).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "analysis.h"
#include "model_check.h"
#include "report.h"
#include "saturating.h"
#include "timeline.h"
#include "trace_builder.h"
#include "trace_validation.h"

using namespace lockstep;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;
using nlohmann::json;

namespace {

const char* kComm = "c0c0000000000001";

TEST(HostileNumbers, saturating_arithmetic_stops_at_the_int64_limits) {
  EXPECT_EQ(sat_add(INT64_MAX, 1), INT64_MAX);
  EXPECT_EQ(sat_add(INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(sat_sub(INT64_MAX, -1), INT64_MAX);
  EXPECT_EQ(sat_sub(INT64_MIN, 1), INT64_MIN);
  EXPECT_EQ(sat_sub(0, INT64_MIN), INT64_MAX);
  EXPECT_EQ(sat_add(40, 2), 42);
  EXPECT_EQ(sat_sub(40, -2), 42);
}

// Retired counts, checkpoint ordinals and seqs are collective ordinals or seqs: 32-bit.
TEST(HostileNumbers, a_retired_count_or_checkpoint_beyond_the_seq_range_makes_the_file_corrupt) {
  Process p;
  p.global_rank = 0;
  Comm c;
  c.hash = "abcdef0123456789";
  c.nranks = 2;
  p.comms.push_back(c);
  EXPECT_EQ(header_defect(p), "");
  p.comms[0].retired_collectives = kMaxSeq;
  EXPECT_EQ(header_defect(p), "");
  p.comms[0].retired_collectives = kMaxSeq + 1;
  EXPECT_EQ(header_defect(p), "corrupt: comm abcdef01 has retired_collectives 4294967296 (valid: 0..4294967295)");
  p.comms[0].retired_collectives = 0;
  p.comms[0].retired_through_seq = INT64_MAX;
  EXPECT_NE(header_defect(p).find("retired_through_seq 9223372036854775807"), std::string::npos);
  p.comms[0].retired_through_seq = 0;
  p.comms[0].checkpoints.push_back({-1, 1, 0});
  EXPECT_NE(header_defect(p).find("a checkpoint at ordinal -1"), std::string::npos);
  p.comms[0].checkpoints = {{1, INT64_MAX, 0}};
  EXPECT_NE(header_defect(p).find("a checkpoint at seq"), std::string::npos);
  p.comms[0].checkpoints.clear();
  p.checkpoint_interval = int64_t(1) << 40;
  EXPECT_NE(header_defect(p).find("checkpoint_interval 1099511627776"), std::string::npos);
}

// One member retired (nearly) every ordinal a seq can have, the other holds 1..10: the
// analysis compares the ordinals someone holds and skips the gap, instead of walking four
// billion ordinals (a hang), and names what it found.
TEST(HostileNumbers, a_gap_of_billions_of_ordinals_between_windows_is_skipped_not_walked) {
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  for (int k = 0; k < 10; ++k) b.add(0, kComm, {});
  b.add(1, kComm, {});
  Comm& c = b.trace().processes[1].comms[0];
  c.retired_collectives = kMaxSeq - 1;
  c.retired_through_seq = kMaxSeq - 1;
  b.trace().processes[1].ops[0].seq = kMaxSeq;
  auto t0 = std::chrono::steady_clock::now();
  Schedule s = schedule_from_trace(b.trace());
  Analysis a = analyze(s);
  // Not a timing rule: a walk of 4e9 ordinals takes minutes, the skip microseconds.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  ASSERT_FALSE(a.divergences.empty());
  EXPECT_EQ(a.divergences[0].ordinal, kMaxSeq);
  EXPECT_EQ(a.divergences[0].kind, FindingKind::kNeverIssued);
  EXPECT_TRUE(a.incomplete());  // retired history without checkpoints: unverified
}

// start_wall_ns = INT64_MAX, start_mono_ns = -10: the offset between the clocks saturates
// (a wrapped one would put the origin at INT64_MIN - 1, i.e. wrap again).
TraceBuilder extreme_clocks() {
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  b.all({0, 1}, kComm, {}, 3);
  for (Process& p : b.trace().processes) {
    p.meta["start_wall_ns"] = std::to_string(INT64_MAX);
    p.meta["start_mono_ns"] = "-10";
    for (Op& o : p.ops) o.issue_mono_ns = INT64_MIN + 5, o.complete_mono_ns = INT64_MAX - 5;
    p.waits.push_back({0, vocab::Wait::StreamSync, 0, 0, 1, INT64_MIN, INT64_MAX});
  }
  return b;
}

TEST(HostileNumbers, timeline_clocks_saturate_instead_of_wrapping) {
  auto b = extreme_clocks();
  json j = json::parse(timeline_json(b.trace()));
  EXPECT_EQ(j["otherData"]["origin_wall_ns"].get<int64_t>(), INT64_MAX - 10);
  bool waited = false;
  for (auto& e : j["traceEvents"]) {
    if (e.contains("dur")) {
      EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
    }
    if (e["args"].contains("waited_us")) {
      EXPECT_DOUBLE_EQ(e["args"]["waited_us"].get<double>(), static_cast<double>(INT64_MAX) / 1000.0) << e.dump();
      waited = true;
    }
  }
  EXPECT_TRUE(waited);
}

TEST(HostileNumbers, report_timeline_times_saturate_and_stay_ordered) {
  auto b = extreme_clocks();
  for (Process& p : b.trace().processes) p.finished = false;
  Schedule s = schedule_from_trace(b.trace());
  Analysis a = analyze(s);
  auto details = details_from_trace(b.trace());
  json d = json::parse(report::report_data_json(a, *details, {}));
  ASSERT_FALSE(d["timeline"]["lanes"].empty());
  EXPECT_GE(d["timeline"]["span_us"].get<double>(), 0);
  for (auto& lane : d["timeline"]["lanes"])
    for (auto& o : lane["ops"]) {
      EXPECT_GE(o["t0"].get<double>(), 0) << o.dump();
      EXPECT_GE(o["t1"].get<double>(), o["t0"].get<double>()) << o.dump();
    }
}

// Communicators of kMaxRanks ranks (valid), each with one traced member, many of them: the
// missing members are counted and a few named, without a walk over every rank of every one.
TraceBuilder huge_comms(int ncomms, int collectives) {
  TraceBuilder b(2);
  for (int k = 0; k < ncomms; ++k) {
    std::string hash = "e" + std::to_string(100000000000000 + k);
    b.comm(hash, {0, 1});
    for (Process& p : b.trace().processes) p.comms.back().nranks = kMaxRanks;
    b.all({0, 1}, hash, {}, collectives);
  }
  return b;
}

TEST(HostileNumbers, missing_members_of_huge_communicators_are_counted_not_listed) {
  auto b = huge_comms(200, 1);
  std::vector<const Process*> procs;
  for (const Process& p : b.trace().processes) procs.push_back(&p);
  auto t0 = std::chrono::steady_clock::now();
  auto issues = validate_evidence(procs, {});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));  // a walk: 3.4 G lookups
  size_t missing = 0;
  for (auto& e : issues)
    if (e.kind == EvidenceKind::kMissingMember) {
      ++missing;
      EXPECT_NE(e.detail.find("no usable file of comm ranks 2,3,4,5,6,7,8,9,... (16777214 in all)"), std::string::npos)
          << e.detail;
    }
  EXPECT_EQ(missing, 200u);
}

TEST(HostileNumbers, the_model_names_missing_ranks_in_one_line_and_refuses_what_it_cannot_hold) {
  {
    auto b = huge_comms(1, 2);
    model::Result r = model::check(schedule_from_trace(b.trace()));
    size_t lines = 0;
    for (auto& p : r.problems)
      if (p.find("no trace file") != std::string::npos) {
        ++lines;
        EXPECT_NE(p.find("ranks 2,3,4,5,6,7,8,9,... (16777214 in all) of 16777216 have no trace file"), std::string::npos) << p;
      }
    EXPECT_EQ(lines, 1u);
    EXPECT_NE(r.verdict, model::Verdict::kCanComplete);  // the missing members never issue
  }
  {
    // 20 collectives x 2^24 ranks: beyond the model's 2^28 instance slots.
    auto b = huge_comms(1, 20);
    try {
      model::check(schedule_from_trace(b.trace()));
      ADD_FAILURE() << "modeled 335 M rank slots";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("too large to model"), std::string::npos) << e.what();
    }
  }
  {
    // Five communicators of 2^24 ranks: beyond 2^26 member ranks in all.
    auto b = huge_comms(5, 1);
    try {
      model::check(schedule_from_trace(b.trace()));
      ADD_FAILURE() << "modeled 5 x 2^24 member ranks";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("member ranks"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
