// Tests written for the mutants that survived the suite (issue 18, "Tests that catch bugs"):
// each one fails with the one-line bug named above it (scripts/mutation-test.py applies them).
#include <gtest/gtest.h>

#include <memory>

#include "analysis.h"
#include "baseline.h"
#include "trace_builder.h"

using namespace lockstep;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;
using lockstep::testing::recv_from;
using lockstep::testing::send_to;

namespace {

struct Result {
  Schedule s;
  Analysis a;
};

std::unique_ptr<Result> run(TraceBuilder& b) {
  auto r = std::make_unique<Result>();
  r->s = schedule_from_trace(b.trace());
  r->a = analyze(r->s);
  return r;
}

std::string kinds(const Analysis& a) {
  std::string k;
  for (auto& d : a.divergences) k += std::string(kind_name(d.kind)) + " (" + d.detail + ") ";
  for (auto& d : a.inversions) k += std::string(kind_name(d.kind)) + " (" + d.detail + ") ";
  return k;
}

int rank_of(const Result& r, const Side& s) { return display_rank(r.s, s.proc); }

}  // namespace

// Mutant: divergence.cpp, p2p `a.dtype != b.dtype` no longer compared.
TEST(Survivors, p2p_send_and_recv_of_different_dtypes_is_a_dtype_divergence) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.add(0, "c1", {.op = "send", .dtype = "float32", .count = 100, .peer = 1, .redop = ""});
  b.add(1, "c1", {.op = "recv", .dtype = "int32", .count = 100, .peer = 0, .redop = ""});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kP2PDtype) << r->a.divergences[0].detail;
  EXPECT_NE(r->a.divergences[0].detail.find("float32"), std::string::npos) << r->a.divergences[0].detail;
  EXPECT_NE(r->a.divergences[0].detail.find("int32"), std::string::npos) << r->a.divergences[0].detail;
}

TEST(Survivors, grouped_p2p_parts_of_different_dtypes_are_a_dtype_divergence) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.add(0, "c1", {.op = "send", .count = 8, .peer = 1, .redop = "", .parts = {send_to(1, 8, "bfloat16")}, .group = 1});
  b.add(1, "c1", {.op = "recv", .count = 8, .peer = 0, .redop = "", .parts = {recv_from(0, 8, "float16")}, .group = 1});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kP2PDtype) << r->a.divergences[0].detail;
}

// Mutant: divergence.cpp first_in_causal_order, `ci < it->second` made `<=`. A divergence and an
// order inversion share A#1: rank 1 reached the inversion (B#1) before the divergent A#1, rank 0
// reached both at A#1 — the inversion is first. With `<=`, the shared op makes each "precede"
// the other and the divergence (listed first) would be named.
TEST(Survivors, inversion_sharing_an_op_with_a_divergence_is_first_when_a_rank_reached_it_first) {
  TraceBuilder b(2);
  b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
  b.add(0, "aaaa", {.count = 1});
  b.add(0, "bbbb", {.op = "all_gather", .redop = "", .stream = 1});
  b.add(1, "bbbb", {.op = "all_gather", .redop = "", .stream = 1});
  b.add(1, "aaaa", {.count = 2});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kCount);
  ASSERT_EQ(r->a.inversions.size(), 1u) << kinds(r->a);
  ASSERT_NE(r->a.first, nullptr);
  EXPECT_EQ(r->a.first, &r->a.inversions[0]) << "first: " << r->a.first->detail;
}

// The same shapes, where the divergence is reached strictly first on a rank: it stays first.
TEST(Survivors, divergence_reached_before_the_inversion_is_first) {
  TraceBuilder b(2);
  b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
  b.add(0, "aaaa", {.count = 1});
  b.add(1, "aaaa", {.count = 2});
  b.add(0, "aaaa", {});
  b.add(0, "bbbb", {.op = "all_gather", .redop = "", .stream = 1});
  b.add(1, "bbbb", {.op = "all_gather", .redop = "", .stream = 1});
  b.add(1, "aaaa", {});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  ASSERT_EQ(r->a.inversions.size(), 1u) << kinds(r->a);
  ASSERT_NE(r->a.first, nullptr);
  EXPECT_EQ(r->a.first, &r->a.divergences[0]) << "first: " << r->a.first->detail;
}

// Mutant: hang.cpp, a stale rank (trace stopped flushing long before its neighbours) with an op
// in flight classified as blocked: it is dead, and its peer waits for it.
TEST(Survivors, stale_rank_with_an_op_in_flight_is_dead_not_blocked) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.all({0, 1}, "c1", {}, 2);
  b.add(0, "c1", {.completed = false});
  b.add(1, "c1", {.completed = false});
  b.running(0).running(1);
  b.trace().processes[0].last_flush_mono_ns = 100'000'000'000;
  b.trace().processes[1].last_flush_mono_ns = 30'000'000'000;
  auto r = run(b);
  EXPECT_EQ(r->a.hang.ranks[1].status, RankStatus::kDead) << r->a.hang.ranks[1].why;
  EXPECT_EQ(r->a.hang.ranks[1].in_flight, 1u);
  EXPECT_NE(r->a.hang.ranks[1].why.find("before its neighbours"), std::string::npos) << r->a.hang.ranks[1].why;
}

// Mutant: inversion.cpp, early and late ranks swapped. Rank 0 issues A#1 before B#1 (early),
// rank 1 after it (late): sides and detail name them so, whichever rank is the reference.
TEST(Survivors, inversion_names_which_rank_issued_the_op_early) {
  for (bool ref_is_early : {true, false}) {
    TraceBuilder b(2);
    b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
    int early = ref_is_early ? 0 : 1, late = 1 - early;
    b.add(early, "aaaa", {.op = "reduce_scatter"});
    b.add(early, "bbbb", {.op = "all_to_all", .redop = "", .stream = 1});
    b.add(late, "bbbb", {.op = "all_to_all", .redop = "", .stream = 1});
    b.add(late, "aaaa", {.op = "reduce_scatter"});
    auto r = run(b);
    ASSERT_EQ(r->a.inversions.size(), 1u) << kinds(r->a);
    const Divergence& d = r->a.inversions[0];
    ASSERT_EQ(d.sides.size(), 2u);
    ASSERT_EQ(d.sides_b.size(), 2u);
    EXPECT_EQ(rank_of(*r, d.sides[0]), early) << d.detail;
    EXPECT_EQ(rank_of(*r, d.sides[1]), late) << d.detail;
    EXPECT_EQ(rank_of(*r, d.sides_b[0]), early) << d.detail;
    // The early rank's A op comes before its B op in call order; the late rank's after.
    const auto& e_ops = r->s.procs[d.sides[0].proc].ops;
    const auto& l_ops = r->s.procs[d.sides[1].proc].ops;
    EXPECT_LT(e_ops[d.sides[0].op].call_index, e_ops[d.sides_b[0].op].call_index);
    EXPECT_GT(l_ops[d.sides[1].op].call_index, l_ops[d.sides_b[1].op].call_index);
    EXPECT_EQ(d.detail.rfind("rank " + std::to_string(early) + " issues", 0), 0u) << d.detail;
    EXPECT_NE(d.detail.find("rank " + std::to_string(late) + " after it"), std::string::npos) << d.detail;
  }
}

// A rank that is merely behind on A (A, B against A, A, B: it has not issued A#2 yet) has not
// inverted anything, whichever rank is the reference.
TEST(Survivors, rank_merely_behind_on_one_comm_is_not_an_inversion) {
  for (int behind : {0, 1}) {
    TraceBuilder b(2);
    b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
    int ahead = 1 - behind;
    b.add(ahead, "aaaa", {});
    b.add(ahead, "aaaa", {.completed = false});
    b.add(ahead, "bbbb", {.op = "all_gather", .redop = "", .completed = false, .stream = 1});
    b.add(behind, "aaaa", {});
    b.add(behind, "bbbb", {.op = "all_gather", .redop = "", .completed = false, .stream = 1});
    b.running(0).running(1);
    auto r = run(b);
    EXPECT_TRUE(r->a.inversions.empty()) << "behind=" << behind << ": " << kinds(r->a);
  }
}

// Mutant: baseline.cpp, an even all_to_all (no per-peer parts) loses its count like an uneven
// one: a changed count must still differ from the baseline; uneven splits still must not.
TEST(Survivors, even_all_to_all_keeps_its_count_in_the_baseline) {
  auto schedule_of = [](int64_t count, bool uneven) {
    TraceBuilder b(2);
    b.comm("c1", {0, 1});
    for (int p : {0, 1}) {
      OpSpec op{.op = "all_to_all", .count = count, .redop = ""};
      if (uneven) op.parts = {send_to(0, count), recv_from(0, count), send_to(1, count), recv_from(1, count)};
      b.add(p, "c1", op);
    }
    Schedule s = schedule_from_trace(b.trace());
    Analysis a = analyze(s);
    EXPECT_FALSE(a.problems()) << summary_line(a);
    return canonical_schedule(a).text;
  };
  std::string even8 = schedule_of(8, false);
  EXPECT_NE(even8.find("count=8"), std::string::npos) << even8;
  EXPECT_FALSE(compare_baseline(even8, schedule_of(16, false)).equal) << even8;
  EXPECT_TRUE(compare_baseline(schedule_of(8, true), schedule_of(16, true)).equal) << schedule_of(8, true);
}

// Mutant: trace_model.h `sequenced()` made `o.seq >= 0`. A row that enqueued work but holds no
// seq (an imported Flight Recorder entry with collective_seq_id 0 comes out so) is counted and
// never compared: taking it for collective #0 would invent an op the other member never issued.
TEST(Survivors, an_enqueued_row_without_a_seq_is_counted_never_compared) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.all({0, 1}, "c1", {}, 3);
  b.add(0, "c1", {.op = "all_gather", .count = 64, .redop = ""}).seq = 0;
  b.all({0, 1}, "c1", {}, 2);
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << kinds(r->a);
  EXPECT_TRUE(r->a.inversions.empty()) << kinds(r->a);
  EXPECT_EQ(r->s.procs[0].unsequenced_ops, 1);
  EXPECT_EQ(r->s.procs[1].unsequenced_ops, 0);
}

// Mutant: divergence.cpp, the majority test `groups[0] > groups[1]` made `>=`: a tie would name
// half of the members the odd ones out. Two against two has no majority: no rank is odd.
TEST(Survivors, two_against_two_names_no_odd_rank_out) {
  TraceBuilder b(4);
  b.comm("c1", {0, 1, 2, 3});
  b.all({0, 1, 2, 3}, "c1", {}, 10);
  for (int p : {0, 1}) b.add(p, "c1", {.op = "all_gather", .redop = ""});
  for (int p : {2, 3}) b.add(p, "c1", {.op = "broadcast", .root = 0, .redop = ""});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  const Divergence& d = r->a.divergences[0];
  EXPECT_EQ(d.kind, FindingKind::kOpType);
  EXPECT_EQ(d.ordinal, 11);
  ASSERT_EQ(d.groups.size(), 2u);
  EXPECT_TRUE(d.odd.empty()) << d.odd.size() << " ranks named odd in a 2-2 tie";
  for (auto& g : d.groups) EXPECT_FALSE(g.odd);
}
