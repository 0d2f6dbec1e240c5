// The canonical schedule: stable across runs (roles, not hashes), sensitive to order changes.
#include <gtest/gtest.h>

#include "baseline.h"
#include "trace_builder.h"

using namespace lockstep;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;

namespace {

// Two comms (a world and a split of it), `swap` reverses the order of one step on every rank.
std::string schedule_of(const std::string& salt, bool swap, int64_t count = 8) {
  TraceBuilder b(2);
  b.comm("world" + salt, {0, 1}).comm("split" + salt, {0, 1}, "world" + salt, 3);
  for (int step = 0; step < 4; ++step)
    for (int p : {0, 1}) {
      bool flip = swap && step == 2;
      if (!flip) b.add(p, "world" + salt, {.count = count});
      b.add(p, "split" + salt, {.op = "all_gather", .count = count, .redop = ""});
      if (flip) b.add(p, "world" + salt, {.count = count});
    }
  Schedule s = schedule_from_trace(b.trace());
  Analysis a = analyze(s);
  EXPECT_FALSE(a.problems()) << summary_line(a);
  return canonical_schedule(a);
}

}  // namespace

TEST(Baseline, same_program_with_new_comm_hashes_matches) {
  auto first = schedule_of("-run1", false);
  auto second = schedule_of("-run2", false);
  EXPECT_TRUE(compare_baseline(first, second).equal) << compare_baseline(first, second).text;
  EXPECT_NE(first.find("comm init0 nranks=2 collectives=4\n  all_reduce float32 count=8 sum x4\n"), std::string::npos)
      << first;
  EXPECT_NE(first.find("comm init0.split0(color=3) nranks=2"), std::string::npos) << first;
}

TEST(Baseline, changed_interleaving_between_comms_is_a_readable_difference) {
  auto blessed = schedule_of("-a", false);
  auto changed = schedule_of("-b", true);
  BaselineDiff d = compare_baseline(blessed, changed);
  EXPECT_FALSE(d.equal);
  EXPECT_NE(d.text.find("in section: order ranks 0-1"), std::string::npos) << d.text;
  // Step 2 issues the split's collective first: the 4x repeated step pattern breaks there.
  EXPECT_NE(d.text.find("-   repeat x4:\n+   repeat x2:\n"), std::string::npos) << d.text;
}

TEST(Baseline, changed_op_size_differs_and_comments_are_ignored) {
  auto blessed = "# reviewed by someone\n" + schedule_of("-a", false, 8);
  EXPECT_TRUE(compare_baseline(blessed, schedule_of("-z", false, 8)).equal);
  BaselineDiff d = compare_baseline(blessed, schedule_of("-b", false, 16));
  EXPECT_FALSE(d.equal);
  EXPECT_NE(d.text.find("-   all_reduce float32 count=8 sum x4"), std::string::npos) << d.text;
  EXPECT_NE(d.text.find("+   all_reduce float32 count=16 sum x4"), std::string::npos) << d.text;
}
