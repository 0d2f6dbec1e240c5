// Analyses over traces built in memory: each test is a small scenario and the finding expected.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "analysis.h"
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
  for (auto& d : a.divergences) k += std::string(kind_name(d.kind)) + " ";
  for (auto& d : a.inversions) k += std::string(kind_name(d.kind)) + " ";
  return k;
}

int rank_of(const Result& r, const Side& s) { return display_rank(r.s, s.proc); }

const Side& side_of_rank(const Result& r, const Divergence& d, int rank) {
  for (auto& s : d.sides)
    if (rank_of(r, s) == rank) return s;
  throw std::logic_error("no side for rank " + std::to_string(rank));
}

std::string op_of(const Result& r, const Side& s) {
  return s.op < 0 ? "(none)" : vocab::name(r.s.sigs[r.s.procs[s.proc].ops[s.op].sig].op);
}

}  // namespace

TEST(Divergence, seed_reduce_scatter_vs_all_to_all_found_at_seq_3750) {
  TraceBuilder b(2);
  b.comm("aaaa000000000001", {0, 1});
  b.all({0, 1}, "aaaa000000000001", OpSpec{.op = "all_reduce"}, 3749);
  b.add(0, "aaaa000000000001", {.op = "reduce_scatter", .count = 4096, .completed = false});
  b.add(1, "aaaa000000000001", {.op = "all_to_all", .count = 4096, .redop = "", .completed = false});
  b.running(0).running(1);
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  const Divergence& d = r->a.divergences[0];
  EXPECT_EQ(d.kind, FindingKind::kOpType) << d.detail;
  EXPECT_EQ(d.ordinal, 3750);
  EXPECT_EQ(op_of(*r, side_of_rank(*r, d, 0)), "reduce_scatter");
  EXPECT_EQ(op_of(*r, side_of_rank(*r, d, 1)), "all_to_all");
  EXPECT_EQ(r->s.procs[0].ops[side_of_rank(*r, d, 0).op].seq, 3750u);
  ASSERT_NE(r->a.first, nullptr);
  EXPECT_EQ(r->a.first, &r->a.divergences[0]);
  EXPECT_TRUE(r->a.hang.hung) << "both ranks are blocked in mismatched ops";
}

TEST(Divergence, each_attribute_mismatch_is_reported_as_its_own_kind) {
  struct Case {
    OpSpec other;
    FindingKind kind;
  };
  OpSpec base{.op = "reduce", .count = 64, .root = 0, .redop = "sum"};
  std::vector<Case> cases = {
      {{.op = "reduce", .dtype = "float16", .count = 64, .root = 0, .redop = "sum"}, FindingKind::kDtype},
      {{.op = "reduce", .count = 65, .root = 0, .redop = "sum"}, FindingKind::kCount},
      {{.op = "reduce", .count = 64, .root = 1, .redop = "sum"}, FindingKind::kRoot},
      {{.op = "reduce", .count = 64, .root = 0, .redop = "max"}, FindingKind::kRedOp},
  };
  for (auto& c : cases) {
    TraceBuilder b(2);
    b.comm("c1", {0, 1});
    b.all({0, 1}, "c1", base, 3);
    b.add(0, "c1", base);
    b.add(1, "c1", c.other);
    auto r = run(b);
    ASSERT_EQ(r->a.divergences.size(), 1u) << "expected " << kind_name(c.kind) << ", got: " << kinds(r->a);
    EXPECT_EQ(r->a.divergences[0].kind, c.kind) << r->a.divergences[0].detail;
    EXPECT_EQ(r->a.divergences[0].ordinal, 4);
  }
}

TEST(Divergence, majority_names_the_odd_rank_out_among_four) {
  TraceBuilder b(4);
  b.comm("c1", {0, 1, 2, 3});
  b.all({0, 1, 2, 3}, "c1", {}, 10);
  for (int p : {0, 1, 3}) b.add(p, "c1", {.op = "all_gather", .redop = ""});
  b.add(2, "c1", {.op = "broadcast", .root = 0, .redop = ""});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  const Divergence& d = r->a.divergences[0];
  ASSERT_EQ(d.odd.size(), 1u);
  EXPECT_EQ(display_rank(r->s, d.odd[0]), 2);
  EXPECT_EQ(d.kind, FindingKind::kOpType);
}

TEST(Divergence, member_that_never_issued_is_reported) {
  TraceBuilder b(3);
  b.comm("c1", {0, 1, 2});
  b.all({0, 1, 2}, "c1", {}, 5);
  b.add(0, "c1", {.completed = false});
  b.add(1, "c1", {.completed = false});
  // Rank 2's history is complete (it was stopped with an exit record): it never issued #6.
  b.running(0).running(1).stopped(2, "SIGTERM");
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  const Divergence& d = r->a.divergences[0];
  EXPECT_EQ(d.kind, FindingKind::kNeverIssued);
  EXPECT_EQ(d.ordinal, 6);
  EXPECT_EQ(side_of_rank(*r, d, 2).op, -1);
  ASSERT_EQ(d.odd.size(), 1u);
  EXPECT_EQ(display_rank(r->s, d.odd[0]), 2);
  // Hang view: ranks 0 and 1 wait for rank 2, which is in no collective.
  EXPECT_TRUE(r->a.hang.hung);
  EXPECT_EQ(r->a.hang.ranks[2].status, RankStatus::kNoCollective);
  ASSERT_EQ(r->a.hang.ranks[0].blocked.size(), 1u);
  ASSERT_EQ(r->a.hang.ranks[0].blocked[0].waits.size(), 1u);
  EXPECT_EQ(r->a.hang.ranks[0].blocked[0].waits[0].proc, 2);
}

TEST(Divergence, uneven_all_to_all_that_pairs_up_is_clean) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  // Rank 0 sends 3 to itself and 5 to rank 1; rank 1 sends 7 to rank 0 and 2 to itself.
  b.add(0, "c1", {.op = "all_to_all", .count = 8, .redop = "", .parts = {send_to(0, 3), recv_from(0, 3), send_to(1, 5), recv_from(1, 7)}});
  b.add(1, "c1", {.op = "all_to_all", .count = 9, .redop = "", .parts = {send_to(0, 7), recv_from(0, 5), send_to(1, 2), recv_from(1, 2)}});
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << kinds(r->a) << (r->a.divergences.empty() ? "" : r->a.divergences[0].detail);
  EXPECT_FALSE(r->a.problems());
}

TEST(Divergence, all_to_all_whose_splits_do_not_pair_up_is_a_split_divergence) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.add(0, "c1", {.op = "all_to_all", .count = 8, .redop = "", .parts = {send_to(0, 3), recv_from(0, 3), send_to(1, 5), recv_from(1, 7)}});
  b.add(1, "c1", {.op = "all_to_all", .count = 9, .redop = "", .parts = {send_to(0, 7), recv_from(0, 4), send_to(1, 2), recv_from(1, 2)}});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kAllToAllSplit);
  EXPECT_NE(r->a.divergences[0].detail.find("sends 5"), std::string::npos) << r->a.divergences[0].detail;
}

TEST(PointToPoint, pipeline_neighbour_pairs_with_different_amounts_are_clean) {
  TraceBuilder b(4);
  b.comm("c1", {0, 1, 2, 3});
  b.all({0, 1, 2, 3}, "c1", {}, 2);
  // Pairs (0,1) and (2,3) exchange different numbers and sizes of messages.
  for (int i = 0; i < 3; ++i) {
    b.add(0, "c1", {.op = "send", .count = 100, .peer = 1, .redop = ""});
    b.add(1, "c1", {.op = "recv", .count = 100, .peer = 0, .redop = ""});
  }
  b.add(2, "c1", {.op = "send", .count = 7, .peer = 3, .redop = ""});
  b.add(3, "c1", {.op = "recv", .count = 7, .peer = 2, .redop = ""});
  b.all({0, 1, 2, 3}, "c1", {}, 2);
  auto r = run(b);
  EXPECT_FALSE(r->a.problems()) << kinds(r->a) << summary_line(r->a);
}

TEST(PointToPoint, send_and_recv_counts_that_differ_are_reported) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.add(0, "c1", {.op = "send", .count = 100, .peer = 1, .redop = ""});
  b.add(1, "c1", {.op = "recv", .count = 50, .peer = 0, .redop = ""});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kP2PCount);
}

TEST(PointToPoint, send_without_matching_recv_is_a_pairing_divergence) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.add(0, "c1", {.op = "send", .count = 10, .peer = 1, .redop = ""});
  b.add(1, "c1", {.op = "recv", .count = 10, .peer = 0, .redop = ""});
  b.add(0, "c1", {.op = "send", .count = 10, .peer = 1, .redop = "", .completed = false});
  b.running(0);
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kP2PPairing);
  EXPECT_EQ(r->a.divergences[0].ordinal, 2);
}

TEST(PointToPoint, send_and_recv_on_opposite_sides_of_a_collective_is_an_interleave_divergence) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.add(0, "c1", {.op = "send", .count = 10, .peer = 1, .redop = ""});
  b.all({0, 1}, "c1", {});
  b.add(1, "c1", {.op = "recv", .count = 10, .peer = 0, .redop = ""});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << kinds(r->a);
  EXPECT_EQ(r->a.divergences[0].kind, FindingKind::kP2PInterleave);
}

TEST(OrderInversion, two_comms_issued_in_opposite_orders_are_reported_even_when_completed) {
  TraceBuilder b(2);
  b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
  b.all({0, 1}, "aaaa", {}, 3);
  b.add(0, "aaaa", {.op = "reduce_scatter"});
  b.add(0, "bbbb", {.op = "all_to_all", .redop = "", .stream = 1});
  b.add(1, "bbbb", {.op = "all_to_all", .redop = "", .stream = 1});
  b.add(1, "aaaa", {.op = "reduce_scatter"});
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << kinds(r->a);
  ASSERT_EQ(r->a.inversions.size(), 1u) << kinds(r->a);
  const Divergence& d = r->a.inversions[0];
  EXPECT_EQ(d.kind, FindingKind::kOrderInversion);
  EXPECT_EQ(d.ordinal, 4) << "reduce_scatter is the 4th collective of comm aaaa";
  EXPECT_EQ(d.ordinal_b, 1);
  EXPECT_TRUE(r->a.problems());
}

// A process whose file has no global rank is named by its file, never "rank -1" (before:
// inversion.cpp printed the raw global_rank).
TEST(OrderInversion, a_process_without_a_global_rank_is_named_not_rank_minus_one) {
  TraceBuilder b(2);
  b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
  b.add(0, "aaaa", {.op = "reduce_scatter"});
  b.add(0, "bbbb", {.op = "all_to_all", .redop = "", .stream = 1});
  b.add(1, "bbbb", {.op = "all_to_all", .redop = "", .stream = 1});
  b.add(1, "aaaa", {.op = "reduce_scatter"});
  b.trace().processes[1].global_rank = -1;
  auto r = run(b);
  ASSERT_EQ(r->a.inversions.size(), 1u) << kinds(r->a);
  const std::string& detail = r->a.inversions[0].detail;
  EXPECT_EQ(detail.find("rank -1"), std::string::npos) << detail;
  EXPECT_NE(detail.find("process 1"), std::string::npos) << detail;
}

TEST(OrderInversion, same_order_on_every_rank_is_clean) {
  TraceBuilder b(3);
  b.comm("aaaa", {0, 1, 2}).comm("bbbb", {0, 1, 2});
  for (int i = 0; i < 5; ++i) {
    b.all({0, 1, 2}, "aaaa", {});
    b.all({0, 1, 2}, "bbbb", {.op = "all_gather", .redop = ""}, 2);
  }
  auto r = run(b);
  EXPECT_FALSE(r->a.problems()) << kinds(r->a) << summary_line(r->a);
}

TEST(OrderInversion, ops_of_one_group_are_not_ordered) {
  TraceBuilder b(2);
  b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
  b.add(0, "aaaa", {.group = 7});
  b.add(0, "bbbb", {.group = 7});
  b.add(1, "bbbb", {.group = 9});
  b.add(1, "aaaa", {.group = 9});
  auto r = run(b);
  EXPECT_TRUE(r->a.inversions.empty()) << kinds(r->a);
}

TEST(CausalOrder, first_divergence_is_the_one_a_process_reached_first_not_the_first_comm) {
  TraceBuilder b(2);
  b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
  b.all({0, 1}, "bbbb", {}, 2);
  // Comm bbbb diverges before comm aaaa on both processes' call order.
  b.add(0, "bbbb", {.count = 1});
  b.add(1, "bbbb", {.count = 2});
  b.add(0, "aaaa", {.op = "broadcast", .root = 0, .redop = ""});
  b.add(1, "aaaa", {.op = "all_gather", .redop = ""});
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 2u) << kinds(r->a);
  ASSERT_NE(r->a.first, nullptr);
  EXPECT_EQ(r->a.index.comms[r->a.first->gcomm].hash, "bbbb") << r->a.first->detail;
  EXPECT_EQ(r->a.first->kind, FindingKind::kCount);
}

TEST(Sequencing, captured_rows_are_not_compared_and_graph_replays_are) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.add(0, "c1", {.op = "all_gather", .redop = "", .state = "captured"});
  b.add(0, "c1", {.state = "graph_launched"});
  b.add(1, "c1", {.state = "graph_launched"});
  b.add(0, "c1", {.state = "failed"});
  auto r = run(b);
  EXPECT_FALSE(r->a.problems()) << kinds(r->a);
  EXPECT_EQ(r->s.procs[0].ops.size(), 1u);
  EXPECT_EQ(r->s.procs[0].unsequenced_ops, 2);
}

TEST(Hang, wait_cycle_across_two_communicators_on_one_stream) {
  // The seed with two process groups on one stream: rank 0 issues A then B, rank 1 B then A.
  TraceBuilder b(2);
  b.comm("aaaa", {0, 1}).comm("bbbb", {0, 1});
  b.all({0, 1}, "aaaa", {}, 2);
  b.add(0, "aaaa", {.op = "reduce_scatter", .completed = false});
  b.add(0, "bbbb", {.op = "all_to_all", .redop = "", .completed = false});
  b.add(1, "bbbb", {.op = "all_to_all", .redop = "", .completed = false});
  b.add(1, "aaaa", {.op = "reduce_scatter", .completed = false});
  b.running(0).running(1);
  auto r = run(b);
  EXPECT_TRUE(r->a.hang.hung);
  ASSERT_EQ(r->a.hang.cycles.size(), 1u);
  EXPECT_EQ(r->a.hang.cycles[0].comms, 2);
  EXPECT_EQ(r->a.hang.cycles[0].hops.size(), 2u);
  ASSERT_EQ(r->a.inversions.size(), 1u);
}

// A collective every other member completed has completed on a member whose completion row is
// missing; one that two members or more have not completed (or not issued) stays in flight on
// each of them, wherever those members sit in the communicator (the tally stops at the second).
TEST(Hang, an_op_in_flight_is_done_only_when_every_other_member_completed_it) {
  auto hang_of = [](std::vector<int> in_flight, std::vector<int> not_issued) {
    TraceBuilder b(4);
    b.comm("c1", {0, 1, 2, 3});
    b.all({0, 1, 2, 3}, "c1", {}, 3);
    for (int r = 0; r < 4; ++r) {
      if (std::find(not_issued.begin(), not_issued.end(), r) != not_issued.end()) continue;
      const bool flying = std::find(in_flight.begin(), in_flight.end(), r) != in_flight.end();
      b.add(r, "c1", {.completed = !flying});
    }
    for (int r = 0; r < 4; ++r) b.running(r);
    auto r = run(b);
    std::vector<size_t> n;
    for (int p = 0; p < 4; ++p) n.push_back(r->a.hang.ranks[p].in_flight);
    return n;
  };
  EXPECT_EQ(hang_of({0}, {}), (std::vector<size_t>{0, 0, 0, 0}));
  EXPECT_EQ(hang_of({3}, {}), (std::vector<size_t>{0, 0, 0, 0}));
  EXPECT_EQ(hang_of({0, 1}, {}), (std::vector<size_t>{1, 1, 0, 0}));
  EXPECT_EQ(hang_of({2, 3}, {}), (std::vector<size_t>{0, 0, 1, 1}));
  EXPECT_EQ(hang_of({0, 3}, {}), (std::vector<size_t>{1, 0, 0, 1}));
  EXPECT_EQ(hang_of({0}, {3}), (std::vector<size_t>{1, 0, 0, 0}));
  EXPECT_EQ(hang_of({3}, {0}), (std::vector<size_t>{0, 0, 0, 1}));
  EXPECT_EQ(hang_of({0, 1, 2, 3}, {}), (std::vector<size_t>{1, 1, 1, 1}));
}

TEST(Hang, stopped_trace_is_a_dead_rank_and_peers_wait_for_it) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.all({0, 1}, "c1", {}, 4);
  b.add(0, "c1", {.completed = false});
  b.running(0).stopped(1, "SIGKILL");
  auto r = run(b);
  EXPECT_EQ(r->a.hang.ranks[1].status, RankStatus::kDead);
  EXPECT_EQ(r->a.hang.ranks[0].status, RankStatus::kBlocked);
  ASSERT_FALSE(r->a.hang.ranks[0].blocked.empty());
  ASSERT_EQ(r->a.hang.ranks[0].blocked[0].waits.size(), 1u);
  EXPECT_NE(r->a.hang.ranks[0].blocked[0].waits[0].reason.find("trace stopped"), std::string::npos)
      << r->a.hang.ranks[0].blocked[0].waits[0].reason;
}

TEST(Hang, trace_that_stopped_flushing_long_before_its_neighbours_is_dead) {
  TraceBuilder b(2);
  b.comm("c1", {0, 1});
  b.all({0, 1}, "c1", {}, 2);
  b.running(0).running(1);
  b.trace().processes[0].last_flush_mono_ns = 100'000'000'000;
  b.trace().processes[1].last_flush_mono_ns = 30'000'000'000;
  auto r = run(b);
  EXPECT_EQ(r->a.hang.ranks[1].status, RankStatus::kDead) << r->a.hang.ranks[1].why;
  // Rank 0 has no exit record and is not seen running here (another host's clock): unknown.
  EXPECT_EQ(r->a.hang.ranks[0].status, RankStatus::kEnded);
}

TEST(Hang, ranks_that_look_the_same_are_grouped) {
  const int n = 256;
  TraceBuilder b(n);
  std::vector<int> all;
  for (int i = 0; i < n; ++i) all.push_back(i);
  b.comm("world", all);
  b.all(all, "world", {}, 3);
  for (int i = 0; i < n; ++i)
    if (i != 77) b.add(i, "world", {.completed = false});
  for (int i = 0; i < n; ++i) b.running(i);
  auto r = run(b);
  ASSERT_EQ(r->a.hang.groups.size(), 2u);
  EXPECT_EQ(r->a.hang.groups[0].procs.size(), 255u) << r->a.hang.groups[0].summary;
  EXPECT_NE(r->a.hang.groups[0].summary.find("waits for rank 77 "), std::string::npos) << r->a.hang.groups[0].summary;
  EXPECT_EQ(r->a.hang.groups[1].procs, std::vector<int>{77});
}

TEST(Clean, correct_program_with_splits_groups_and_many_comms_has_no_finding) {
  TraceBuilder b(4);
  b.comm("world", {0, 1, 2, 3});
  b.comm("tp0", {0, 1}, "world", 0).comm("tp1", {2, 3}, "world", 1);
  b.comm("dp0", {0, 2}, "world", 0).comm("dp1", {1, 3}, "world", 1);
  for (int step = 0; step < 20; ++step) {
    for (int p = 0; p < 4; ++p) {
      std::string tp = p < 2 ? "tp0" : "tp1", dp = p % 2 ? "dp1" : "dp0";
      b.add(p, tp, {.op = "all_gather", .count = 32, .redop = ""});
      b.add(p, dp, {.op = "reduce_scatter", .count = 64, .group = step});
      b.add(p, tp, {.count = 8, .group = step});
      b.add(p, "world", {.op = "all_to_all", .count = 16, .redop = ""});
    }
  }
  auto r = run(b);
  EXPECT_FALSE(r->a.problems()) << kinds(r->a) << summary_line(r->a);
  EXPECT_EQ(r->a.index.comms.size(), 5u);
}
