// The shrinker on generated schedules: sizes of the reproducers and the signature they keep.
#include <gtest/gtest.h>

#include "schedules.h"
#include "shrink.h"

using namespace lockstep;
using namespace lockstep::testing;

namespace {

std::vector<std::string> ops_of(const Process& p) {
  std::vector<std::string> v;
  for (const Op& o : p.ops) v.push_back(lockstep::vocab::name(o.op));
  return v;
}

shrink::Signature signature(const Trace& t) {
  const Schedule s = schedule_from_trace(t);
  return shrink::signature_of(s, model::check(s));
}

}  // namespace

TEST(Shrink, SeedLikeDivergenceAt3750ShrinksToOneOpPerRank) {
  Trace t = seed_like(3750);
  shrink::Result r = shrink::shrink(t);
  EXPECT_EQ(r.before.ops, 7500);
  EXPECT_EQ(r.signature.kind, "mismatch");
  EXPECT_EQ(r.signature.field, "op_type");
  EXPECT_EQ(r.signature.steps, (std::vector<std::string>{"all_to_all", "reduce_scatter"}));
  ASSERT_EQ(r.after.ranks, 2);
  EXPECT_LE(r.after.ops, 4);
  EXPECT_EQ(r.after.comms, 1);
  EXPECT_EQ(r.after.waits, 0);
  EXPECT_EQ(r.after.max_count, 1);
  EXPECT_EQ(r.minimal_check.verdict, model::Verdict::kDeadlock);
  EXPECT_EQ(signature(r.minimal), r.signature);
  EXPECT_EQ(ops_of(r.minimal.processes[0]).back(), "reduce_scatter");
  EXPECT_EQ(ops_of(r.minimal.processes[1]).back(), "all_to_all");
}

TEST(Shrink, HiddenCrossCommunicatorCycleShrinksToTwoRanksOnTwoCommunicators) {
  Trace t = hidden_cycle();
  shrink::Result r = shrink::shrink(t);
  EXPECT_EQ(r.signature.kind, "cycle");
  EXPECT_EQ(r.signature.comms, 2);
  EXPECT_EQ(r.signature.field, "issued") << "every op of the cycle is issued, as in the original";
  EXPECT_EQ(r.after.ranks, 2);
  EXPECT_EQ(r.after.comms, 2);
  EXPECT_EQ(r.after.ops, 4) << "each rank issues both ops, in opposite orders";
  EXPECT_EQ(signature(r.minimal), r.signature);
  // Kept ranks are the swapped one and one that issues the other order.
  ASSERT_EQ(r.kept_ranks.size(), 2u);
  EXPECT_TRUE(r.kept_ranks[0] == 1 || r.kept_ranks[1] == 1);
  // Re-ranked: every communicator of the reproducer has 2 members, ranks 0 and 1.
  for (const Process& p : r.minimal.processes)
    for (const Comm& c : p.comms) EXPECT_EQ(c.nranks, 2);
}

TEST(Shrink, DivergenceAmong4096RanksShrinksToTwoRanks) {
  Trace t = wide_divergence(4096, 3);
  shrink::Result r = shrink::shrink(t);
  EXPECT_EQ(r.before.ranks, 4096);
  EXPECT_EQ(r.signature.kind, "mismatch");
  EXPECT_EQ(r.signature.steps, (std::vector<std::string>{"all_gather", "all_reduce"}));
  EXPECT_LE(r.after.ranks, 3);
  EXPECT_EQ(r.after.comms, 1);
  EXPECT_LE(r.after.ops, 4);
  EXPECT_NE(std::find(r.kept_ranks.begin(), r.kept_ranks.end(), 4095), r.kept_ranks.end()) << "the odd rank is kept";
  EXPECT_EQ(signature(r.minimal), r.signature);
}

TEST(Shrink, LatentInversionBecomesADeadlockOnOneStream) {
  Trace t = latent_inversion();
  shrink::Result r = shrink::shrink(t);
  EXPECT_EQ(r.signature.verdict, model::Verdict::kMayDeadlock);
  EXPECT_EQ(r.signature.kind, "cycle");
  EXPECT_EQ(r.signature.comms, 2);
  EXPECT_TRUE(r.forced_one_stream);
  EXPECT_EQ(r.minimal_check.verdict, model::Verdict::kDeadlock);
  EXPECT_TRUE(signature(r.minimal).same_bug(r.signature));
  EXPECT_EQ(r.after.ranks, 2);
  EXPECT_EQ(r.after.ops, 4);
}

TEST(Shrink, ScheduleThatCompletesIsRefused) {
  RowsBuilder b(2);
  b.comm_all("world", {0, 1});
  for (int r = 0; r < 2; ++r) b.op(r, "world", "all_reduce");
  EXPECT_THROW(shrink::shrink(b.trace), std::runtime_error);
}

TEST(Shrink, CountDivergenceKeepsDifferentCounts) {
  RowsBuilder b(3);
  b.comm_all("world", {0, 1, 2});
  for (int k = 0; k < 20; ++k)
    for (int r = 0; r < 3; ++r) b.op(r, "world", "all_reduce", 7, k == 10 && r == 2 ? 4096 : 1024);
  shrink::Result r = shrink::shrink(b.trace);
  EXPECT_EQ(r.signature.field, "count");
  EXPECT_EQ(r.after.ranks, 2);
  EXPECT_EQ(r.after.ops, 2);
  EXPECT_EQ(r.after.max_count, 2) << "counts 1024 and 4096 become 1 and 2";
}

TEST(ShrinkSignature, CycleIgnoresCommunicatorNamesAndRotationButNotOpTypes) {
  auto cycle = [](const std::string& a, const std::string& b, const std::string& op_a, const std::string& op_b) {
    RowsBuilder s(2);
    s.comm_all(a, {0, 1});
    s.comm_all(b, {0, 1});
    s.op(0, a, op_a);
    s.op(0, b, op_b);
    s.op(1, b, op_b);
    s.op(1, a, op_a);
    return signature(s.trace);
  };
  const auto x = cycle("A", "B", "all_gather", "all_reduce");
  EXPECT_EQ(x.kind, "cycle");
  EXPECT_EQ(x.comms, 2);
  EXPECT_EQ(x, cycle("zz", "aa", "all_gather", "all_reduce"));
  EXPECT_FALSE(x == cycle("A", "B", "all_gather", "broadcast"));
  EXPECT_FALSE(x == cycle("A", "B", "reduce_scatter", "all_reduce"));
}

TEST(ShrinkSignature, MismatchNamesTheFieldThatDiffers) {
  RowsBuilder s(2);
  s.comm_all("w", {0, 1});
  s.op(0, "w", "all_reduce", 7, 8, "float32");
  s.op(1, "w", "all_reduce", 7, 8, "bfloat16");
  auto sig = signature(s.trace);
  EXPECT_EQ(sig.kind, "mismatch");
  EXPECT_EQ(sig.field, "dtype");
  EXPECT_EQ(sig.steps, std::vector<std::string>{"all_reduce"});
}
