// The canonical schedule: stable across runs (roles, not hashes), sensitive to order changes.
#include <gtest/gtest.h>

#include <filesystem>

#include "baseline.h"
#include "trace_loader.h"
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
  return canonical_schedule(a).text;
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

// check --baseline reads the canonical schedule a batch of files at a time: whatever the batch,
// the text of every file read at once, from the summary-first read's headers or the headers alone.
TEST(Baseline, read_a_batch_of_files_at_a_time_it_is_the_schedule_of_every_file_read_at_once) {
  const int n = 6;
  TraceBuilder b(n);
  b.comm("0000000000000a11", {0, 1, 2, 3, 4, 5});
  for (int pair = 0; pair < 3; ++pair) b.comm("00000000000000b" + std::to_string(pair), {2 * pair, 2 * pair + 1}, "0000000000000a11", pair);
  for (int step = 0; step < 5; ++step)
    for (int p = 0; p < n; ++p) {
      const std::string tp = "00000000000000b" + std::to_string(p / 2);
      // Ranks 4 and 5 issue their group's collective before the world's in step 3: another order.
      const bool flip = p >= 4 && step == 3;
      if (!flip) b.add(p, "0000000000000a11", {.count = 8 + step});
      b.add(p, tp, {.op = "all_gather", .count = 16, .redop = ""});
      if (p % 2 == 0) b.add(p, tp, {.op = "send", .count = 4, .peer = 1, .redop = ""});
      else b.add(p, tp, {.op = "recv", .count = 4, .peer = 0, .redop = ""});
      if (flip) b.add(p, "0000000000000a11", {.count = 8 + step});
    }
  auto dir = lockstep::testing::fresh_dir("baseline-batches");
  lockstep::testing::write_trace(b.trace(), dir);
  const Schedule full = load_schedule(dir);
  ASSERT_TRUE(full.skipped.empty()) << full.skipped[0].reason;
  const CanonicalText all = canonical_schedule(analyze(full));
  const std::string& every = all.text;
  ASSERT_NE(every.find("order ranks 4-5"), std::string::npos) << every;
  EXPECT_EQ(all.order_groups, 2u) << every;  // ranks 0-3, ranks 4-5
  EXPECT_FALSE(all.order_windowed) << every;
  ASSERT_NE(every.find("comm init0.split0(color=2) nranks=2"), std::string::npos) << every;
  const Schedule first = load_schedule(dir, {.summary_first = true});
  const Analysis an = analyze(first);
  const Schedule headers = load_headers(dir);
  const CommIndex hidx = build_comm_index(headers);
  // A file's bytes or more (one file a batch), two files' or three's, and every file at once.
  const uint64_t file = std::filesystem::file_size(full.procs[0].info.path);
  for (uint64_t batch : {uint64_t(1), file + 1, 2 * file + 1, kBaselineBatchBytes}) {
    SCOPED_TRACE("batch " + std::to_string(batch) + " bytes");
    for (const CanonicalText& c : {canonical_schedule_of_files(first, an.index, batch), canonical_schedule_of_files(headers, hidx, batch)}) {
      EXPECT_EQ(c.text, every);
      EXPECT_EQ(c.order_groups, all.order_groups);
      EXPECT_EQ(c.order_windowed, all.order_windowed);
    }
  }
}

// What check --baseline decides from (whether the order across communicators is proven by the
// baseline) is data beside the text: its order sections and whether a rank's order was not kept
// (a capped trace), the same as the text lists.
TEST(Baseline, its_order_sections_are_data_as_the_text_lists_them) {
  auto sections = [](const std::string& text) {
    size_t n = 0;
    for (size_t at = 0; (at = text.find("\norder ", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  TraceBuilder b(3);
  b.comm("world", {0, 1, 2}).comm("split", {0, 1, 2}, "world", 3);
  for (int p : {0, 1, 2}) {
    b.add(p, "world");
    b.add(p, "split", {.op = "all_gather", .redop = ""});
  }
  // analyze keeps a pointer to the schedule: each held while its schedule is built.
  const Schedule s1 = schedule_from_trace(b.trace());
  const CanonicalText one = canonical_schedule(analyze(s1));
  EXPECT_EQ(one.order_groups, 1u) << one.text;
  EXPECT_EQ(sections(one.text), 1u) << one.text;
  EXPECT_FALSE(one.order_windowed) << one.text;
  // Rank 2's size cap retired ops: its order is not kept, and the text says so.
  b.trace().processes[2].retired_ops = 1;
  const Schedule s2 = schedule_from_trace(b.trace());
  const CanonicalText capped = canonical_schedule(analyze(s2));
  EXPECT_TRUE(capped.order_windowed) << capped.text;
  EXPECT_NE(capped.text.find("# order of ranks 2 not kept"), std::string::npos) << capped.text;
  EXPECT_EQ(capped.order_groups, 1u) << capped.text;
  EXPECT_EQ(sections(capped.text), 1u) << capped.text;
  // Rank 1 issues the split's first: two orders.
  TraceBuilder two(3);
  two.comm("world", {0, 1, 2}).comm("split", {0, 1, 2}, "world", 3);
  for (int p : {0, 1, 2}) {
    if (p != 1) two.add(p, "world");
    two.add(p, "split", {.op = "all_gather", .redop = ""});
    if (p == 1) two.add(p, "world");
  }
  const Schedule s3 = schedule_from_trace(two.trace());
  const CanonicalText swapped = canonical_schedule(analyze(s3));
  EXPECT_EQ(swapped.order_groups, 2u) << swapped.text;
  EXPECT_EQ(sections(swapped.text), 2u) << swapped.text;
}

// Windowed sections (capped runs): the last ordinal is the count of collectives issued, so two
// counts differ whatever the windows share; a section whose lines are not the count its header
// says is no section (compared as text), so an edited header cannot hide a changed op.
TEST(Baseline, windows_of_runs_of_different_lengths_differ_and_a_section_must_hold_its_declared_count) {
  const std::string head = std::string(kBaselineHeader) + "\n";
  auto section = [](const std::string& header, int n, const std::string& op) {
    std::string s = header + "\n";
    for (int i = 0; i < n; ++i) s += "  " + op + "\n";
    return s;
  };
  const std::string a = head + section("comm init0 nranks=2 collectives=#3..#6", 4, "all_reduce float32 count=8 sum");
  const std::string same_len = head + section("comm init0 nranks=2 collectives=#5..#6", 2, "all_reduce float32 count=8 sum");
  const std::string longer = head + section("comm init0 nranks=2 collectives=#5..#7", 3, "all_reduce float32 count=8 sum");
  BaselineDiff ok = compare_baseline(a, same_len);
  EXPECT_TRUE(ok.equal) << ok.text;
  EXPECT_NE(ok.compared.find("compared #5..#6"), std::string::npos) << ok.compared;
  BaselineDiff more = compare_baseline(a, longer);
  EXPECT_FALSE(more.equal);
  EXPECT_NE(more.text.find("issued 6 collectives, this run 7"), std::string::npos) << more.text;
  // A baseline whose header claims #1..#2 over lines cut short, against a run whose op differs.
  const std::string run = head + section("comm init0 nranks=2 collectives=#1..#4", 4, "all_reduce float32 count=16 sum");
  const std::string edited = head + section("comm init0 nranks=2 collectives=#1..#2", 4, "all_reduce float32 count=8 sum");
  EXPECT_FALSE(compare_baseline(edited, run).equal);
  const std::string plain_short = head + section("comm init0 nranks=2 collectives=14", 4, "all_reduce float32 count=16 sum");
  EXPECT_FALSE(compare_baseline(plain_short, run).equal) << "14 declared, 4 held: not the run's section";
}
