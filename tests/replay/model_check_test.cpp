// Model checker on in-memory schedules: one test per semantic rule of docs/replay.md.
#include <gtest/gtest.h>

#include <random>

#include "model_builder.h"
#include "model_check.h"

namespace lockstep {
namespace {

using model::Verdict;
using testing::RowsBuilder;

model::Result check(const Trace& t, model::Options o = {}) {
  return model::check(schedule_from_trace(t), o);
}

std::string dump(const model::Result& r) { return "\n--- checker output ---\n" + model::format_text(r); }

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The seed: FSDP reduce_scatter and the Ulysses all_to_all on one process group, issued in a
// rank-dependent order after 3749 common collectives.
RowsBuilder seed_schedule(bool fixed, int steps_before = 3749) {
  RowsBuilder b(2);
  b.comm_all("X", {0, 1});
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < steps_before; ++i) b.op(r, "X", i % 2 ? "all_gather" : "reduce_scatter");
    const bool a2a_first = fixed ? true : r == 1;
    if (a2a_first) {
      b.op(r, "X", "all_to_all");
      b.op(r, "X", "reduce_scatter");
    } else {
      b.op(r, "X", "reduce_scatter");
      b.op(r, "X", "all_to_all");
    }
  }
  return b;
}

TEST(ModelCheck, SeedRankDependentOrderDeadlocksWithSeq3750Witness) {
  auto b = seed_schedule(false);
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
  EXPECT_EQ(r.summary, "comm X seq 3750: rank 0 at reduce_scatter, rank 1 at all_to_all: no matching op") << dump(r);
  ASSERT_EQ(r.ranks.size(), 2u) << dump(r);
  EXPECT_TRUE(contains(r.ranks[0].blocked_in, "comm X seq 3750 reduce_scatter")) << dump(r);
  EXPECT_TRUE(contains(r.ranks[1].blocked_in, "comm X seq 3750 all_to_all")) << dump(r);
  EXPECT_EQ(r.completed_ops, 2 * 3749) << dump(r);
}

TEST(ModelCheck, SeedFixedOrderCanComplete) {
  auto b = seed_schedule(true);
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kCanComplete) << dump(r);
  EXPECT_EQ(r.ops, 2 * 3751);
  EXPECT_EQ(r.completed_ops, r.ops);
}

TEST(ModelCheck, CountMismatchIsNoMatchingOp) {
  RowsBuilder b(2);
  b.comm_all("X", {0, 1});
  b.op(0, "X", "all_reduce", 7, 1024);
  b.op(1, "X", "all_reduce", 7, 2048);
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
  EXPECT_TRUE(contains(r.summary, "no matching op")) << dump(r);
}

TEST(ModelCheck, TwoCommsOnOneStreamInOppositeOrderDeadlockWithCycle) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather");
  b.op(0, "B", "all_reduce");
  b.op(1, "B", "all_reduce");
  b.op(1, "A", "all_gather");
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
  EXPECT_EQ(r.model, "concurrent");
  ASSERT_EQ(r.cycle.size(), 4u) << dump(r);
  int queued = 0, waits = 0;
  for (const auto& line : r.cycle) {
    queued += contains(line, "queued on stream 0x7 behind");
    waits += contains(line, "(not there yet)");
  }
  EXPECT_EQ(queued, 2) << dump(r);
  EXPECT_EQ(waits, 2) << dump(r);
}

TEST(ModelCheck, TwoCommsOnTwoStreamsInOppositeOrderIsLatent) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather", 1);
  b.op(0, "B", "all_reduce", 2);
  b.op(1, "B", "all_reduce", 2);
  b.op(1, "A", "all_gather", 1);
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kMayDeadlock) << dump(r);
  EXPECT_EQ(r.model, "serialized");
  EXPECT_FALSE(r.cycle.empty()) << dump(r);
  model::Options concurrent_only;
  concurrent_only.check_serialized = false;
  EXPECT_EQ(check(b.trace, concurrent_only).verdict, Verdict::kCanComplete);
}

TEST(ModelCheck, OppositeOrderInsideOneGroupCanComplete) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather").group_id = 5;
  b.op(0, "B", "all_reduce").group_id = 5;
  b.op(1, "B", "all_reduce").group_id = 9;
  b.op(1, "A", "all_gather").group_id = 9;
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kCanComplete) << dump(r);
}

TEST(ModelCheck, PointToPointIsMatchedPairwiseNotAcrossTheComm) {
  // Pipeline: 0->1 and 2->3 on one 4-rank comm; ranks 2 and 3 never talk to 0 and 1.
  RowsBuilder b(4);
  b.comm_all("PP", {0, 1, 2, 3});
  for (int i = 0; i < 3; ++i) {
    b.send(0, "PP", 1);
    b.recv(1, "PP", 0);
  }
  b.send(2, "PP", 3);
  b.recv(3, "PP", 2);
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kCanComplete) << dump(r);
}

TEST(ModelCheck, SendWithoutReceiveDeadlocks) {
  RowsBuilder b(2);
  b.comm_all("PP", {0, 1});
  b.send(0, "PP", 1);
  b.send(0, "PP", 1);
  b.recv(1, "PP", 0);
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
  ASSERT_EQ(r.ranks.size(), 1u) << dump(r);
  EXPECT_EQ(r.ranks[0].label, "rank 0");
  EXPECT_TRUE(contains(r.ranks[0].waits_for, "rank 1, which never posts the matching recv")) << dump(r);
}

TEST(ModelCheck, UngroupedSendsFirstOnBothSidesDeadlockGroupedComplete) {
  for (bool grouped : {false, true}) {
    RowsBuilder b(2);
    b.comm_all("PP", {0, 1});
    for (int r = 0; r < 2; ++r) {
      // Two rows of one group (what a recorder that splits groups per call would write).
      b.send(r, "PP", 1 - r).group_id = grouped ? 1 : -1;
      b.recv(r, "PP", 1 - r).group_id = grouped ? 1 : -1;
    }
    auto r = check(b.trace);
    EXPECT_EQ(r.verdict, grouped ? Verdict::kCanComplete : Verdict::kDeadlock) << "grouped=" << grouped << dump(r);
  }
}

TEST(ModelCheck, SendRecvPartsAreMatchedPerPeer) {
  // A ring exchange recorded as one send_recv row per rank (send right, recv left).
  const int n = 4;
  RowsBuilder b(n);
  b.comm_all("R", {0, 1, 2, 3});
  for (int r = 0; r < n; ++r) {
    Op& o = b.op(r, "R", "send_recv");
    o.parts.push_back(OpPart{lockstep::vocab::Op::Send, lockstep::vocab::Dtype::Float32, 8, -1, (r + 1) % n, lockstep::vocab::RedOp::None});
    o.parts.push_back(OpPart{lockstep::vocab::Op::Recv, lockstep::vocab::Dtype::Float32, 8, -1, (r + n - 1) % n, lockstep::vocab::RedOp::None});
  }
  EXPECT_EQ(check(b.trace).verdict, Verdict::kCanComplete);
  // Rank 3 receives from the wrong neighbour: rank 2's send to 3 is never received.
  b.trace.processes[3].ops.back().parts[1].peer = 0;
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
}

TEST(ModelCheck, StreamSyncBetweenOppositeOrdersDeadlocksOnTheHost) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather", 1);
  b.wait(0, "stream_sync", 1);
  b.op(0, "B", "all_reduce", 2);
  b.op(1, "B", "all_reduce", 2);
  b.wait(1, "stream_sync", 2);
  b.op(1, "A", "all_gather", 1);
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
  EXPECT_TRUE(contains(format_text(r), "host thread is blocked in stream_sync(stream 0x1)")) << dump(r);
  EXPECT_EQ(r.cycle.size(), 4u) << dump(r);
}

// Serialized model: a stream sync waits for everything issued on its stream, so rank 0's host
// never issues B, which rank 1's device needs first. (Kills model-serialized-not-serial: a
// stream's end position not kept for a plain op lets the sync pass at once; the deadlock is
// then the device order's alone and no host thread is blocked.)
TEST(ModelCheck, SerializedStreamSyncWaitsForTheOpBeforeIt) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather", 1);
  b.wait(0, "stream_sync", 1);
  b.op(0, "B", "all_reduce", 2);
  b.op(1, "B", "all_reduce", 2);
  b.op(1, "A", "all_gather", 1);
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kMayDeadlock) << dump(r);
  EXPECT_EQ(r.model, "serialized") << dump(r);
  EXPECT_TRUE(contains(format_text(r), "host thread is blocked in stream_sync(stream 0x1)")) << dump(r);
  EXPECT_EQ(check(b.trace, {.check_serialized = false}).verdict, Verdict::kCanComplete);
}

TEST(ModelCheck, StreamWaitEventOrdersStreams) {
  // Rank 0: B on stream 2 waits (via event) for A on stream 1; rank 1 the other way round.
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather", 1);
  b.wait(0, "event_record", 1, 0xe0);
  b.wait(0, "stream_wait_event", 2, 0xe0);
  b.op(0, "B", "all_reduce", 2);
  b.op(1, "B", "all_reduce", 2);
  b.wait(1, "event_record", 2, 0xe1);
  b.wait(1, "stream_wait_event", 1, 0xe1);
  b.op(1, "A", "all_gather", 1);
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
  EXPECT_TRUE(contains(format_text(r), "stream_wait_event(event 0xe")) << dump(r);
  // Without the event dependency on rank 1 it completes (streams are independent).
  b.trace.processes[1].waits.clear();
  auto ok = check(b.trace, {.check_serialized = false});
  EXPECT_EQ(ok.verdict, Verdict::kCanComplete) << dump(ok);
}

TEST(ModelCheck, HostThreadsBlockIndependently) {
  // Rank 0's main thread syncs stream 1 while its second thread issues the op that the other
  // rank needs first: the sync only blocks its own thread.
  RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_gather", 1);
  b.wait(0, "stream_sync", 1);
  b.op(0, "B", "all_reduce", 2).tid = 555;
  b.op(1, "B", "all_reduce", 2);
  b.wait(1, "stream_sync", 2);
  b.op(1, "A", "all_gather", 1);
  auto r = check(b.trace, {.check_serialized = false});
  EXPECT_EQ(r.verdict, Verdict::kCanComplete) << dump(r);
  // On one thread, the same calls deadlock.
  b.trace.processes[0].ops.back().tid = 100;
  EXPECT_EQ(check(b.trace).verdict, Verdict::kDeadlock);
}

TEST(ModelCheck, GraphLaunchedOpsCountAndCapturedRowsDoNot) {
  RowsBuilder b(2);
  b.comm_all("X", {0, 1});
  // Rank 0 captured one all_reduce and launched the graph twice; rank 1 ran two eagerly.
  const int64_t captured = b.unsequenced(0, "X", "all_reduce", lockstep::vocab::State::Captured).call_index;
  for (int i = 0; i < 2; ++i) {
    Op& g = b.op(0, "X", "all_reduce");
    g.state = lockstep::vocab::State::GraphLaunched;
    g.origin_call = captured;
  }
  b.op(1, "X", "all_reduce");
  b.op(1, "X", "all_reduce");
  EXPECT_EQ(check(b.trace).verdict, Verdict::kCanComplete);
  // A third launch on rank 0 only: that all_reduce has no partner.
  Op& g = b.op(0, "X", "all_reduce");
  g.state = lockstep::vocab::State::GraphLaunched;
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
  EXPECT_TRUE(contains(r.summary, "rank 1, which never issues collective #3")) << dump(r);
}

TEST(ModelCheck, FailedOpsAreIgnored) {
  RowsBuilder b(2);
  b.comm_all("X", {0, 1});
  Op& f = b.unsequenced(0, "X", "broadcast", lockstep::vocab::State::Failed);
  f.rc = 4;
  b.op(0, "X", "all_reduce");
  b.op(1, "X", "all_reduce");
  EXPECT_EQ(check(b.trace).verdict, Verdict::kCanComplete);
}

// A member with no trace file: what it issued is unknown, so waiting on it proves no deadlock
// (it was "never issues", a deadlock on records we do not have).
TEST(ModelCheck, MissingMemberIsReportedAsProblemAndWaitingOnItIsUnknown) {
  RowsBuilder b(1);
  b.comm(0, "X", 2, 0);
  b.op(0, "X", "all_reduce");
  auto r = model::check(schedule_from_trace(b.trace));
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_TRUE(contains(r.problems[0], "rank 1 of 2 has no trace file")) << r.problems[0];
  EXPECT_EQ(r.verdict, Verdict::kUnknown) << dump(r);
  ASSERT_EQ(r.ranks.size(), 1u) << dump(r);
  EXPECT_TRUE(r.ranks[0].waits_on_missing) << dump(r);
  EXPECT_TRUE(contains(r.ranks[0].waits_for, "(no trace file): what it issued is unknown")) << dump(r);
}

// A live job read mid-run: rank 1 is one collective behind rank 0. Read as finished, the model
// proves a deadlock; read as live (the analyzer's live ranks), rank 1 has not issued it yet, and
// nothing is proven (before: "deadlock ... which never issues collective #3" on a healthy job).
TEST(ModelCheck, ALiveRankThatHasNotIssuedYetIsNoDeadlock) {
  RowsBuilder b(2);
  b.comm_all("X", {0, 1});
  for (int k = 0; k < 3; ++k) b.op(0, "X", "all_reduce");
  for (int k = 0; k < 2; ++k) b.op(1, "X", "all_reduce");
  EXPECT_EQ(check(b.trace).verdict, Verdict::kDeadlock) << "read as finished";
  model::Options o;
  o.live_procs = {1};
  auto r = check(b.trace, o);
  EXPECT_EQ(r.verdict, Verdict::kUnknown) << dump(r);
  EXPECT_TRUE(contains(r.summary, "the job is still running")) << dump(r);
  ASSERT_FALSE(r.ranks.empty()) << dump(r);
  EXPECT_TRUE(contains(r.ranks[0].waits_for, "which is still running and has not issued collective #3 yet")) << dump(r);
  // A mismatch between live ranks is still proven.
  b.op(1, "X", "broadcast");
  EXPECT_EQ(check(b.trace, o).verdict, Verdict::kDeadlock);
}

// Both ranks' recorders dropped the record of collective #3 (a queue that overflowed on every
// rank at once): the model stops at the hole, and that everything before it completes proves
// nothing about the job (before: "can complete" of the ops before the hole, of a job that hung).
TEST(ModelCheck, CompletingUpToAHoleIsUnknownNotCanComplete) {
  RowsBuilder b(2);
  b.comm_all("X", {0, 1});
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 5; ++k) b.op(r, "X", "all_reduce");
  EXPECT_EQ(check(b.trace).verdict, Verdict::kCanComplete);
  for (Process& p : b.trace.processes) {
    std::erase_if(p.ops, [](const Op& o) { return o.seq == 3; });
    p.dropped_records = 1;
  }
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kUnknown) << dump(r);
  EXPECT_TRUE(contains(r.summary, "completion not proven")) << dump(r);
  EXPECT_FALSE(contains(model::format_text(r), "stuck state")) << dump(r);
}

// With a member missing, a mismatch among the members present is still a proven deadlock.
TEST(ModelCheck, MismatchAmongPresentMembersIsADeadlockDespiteAMissingOne) {
  RowsBuilder b(2);
  b.comm(0, "X", 3, 0);
  b.comm(1, "X", 3, 1);
  b.op(0, "X", "all_reduce");
  b.op(1, "X", "broadcast");
  auto r = model::check(schedule_from_trace(b.trace));
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
}

TEST(ModelCheck, BadInputIsRejectedWithAClearMessage) {
  RowsBuilder b(2);
  b.comm_all("X", {0, 1});
  // An op name the vocabulary does not know never reaches the model: the loader skips its file
  // (tests/analyzer/identity_test.cpp, replay_test v-unknown-op). What the model itself rejects:
  Op& o = b.op(0, "X", "send_recv");
  o.parts.push_back(OpPart{lockstep::vocab::Op::AllReduce, lockstep::vocab::Dtype::Float32, 8, -1, -1, lockstep::vocab::RedOp::Sum});
  try {
    model::check(schedule_from_trace(b.trace));
    FAIL() << "expected an error for a send_recv with a collective part";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "has a 'all_reduce' part")) << e.what();
  }
  Trace empty;
  empty.dir = "/nowhere";
  EXPECT_THROW(model::check(schedule_from_trace(empty)), std::runtime_error);
}

TEST(ModelCheck, SplitCommsOfFourRanksMatchIndependently) {
  // Two TP pairs {0,1},{2,3} and a DP world comm; the pairs interleave differently w.r.t. each
  // other, which is fine: they share no member.
  RowsBuilder b(4);
  b.comm_all("W", {0, 1, 2, 3}).comm_all("tp0", {0, 1}).comm_all("tp1", {2, 3});
  for (int r = 0; r < 4; ++r) {
    const std::string tp = r < 2 ? "tp0" : "tp1";
    if (r < 2) { b.op(r, tp, "all_reduce"); b.op(r, "W", "all_gather"); }
    else { b.op(r, "W", "all_gather"); b.op(r, tp, "all_reduce"); }
  }
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kCanComplete) << dump(r);
}

// Random small schedules: the verdict and the stuck state do not depend on the order in which
// enabled transitions are taken (the confluence the algorithm relies on).
TEST(ModelCheck, VerdictIsIndependentOfTransitionOrder) {
  std::mt19937 rng(1234);
  const char* kinds[] = {"all_reduce", "all_gather", "broadcast"};
  int deadlocks = 0, latent = 0, complete = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + rng() % 3;
    RowsBuilder b(n);
    b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
    if (n > 2) b.comm(0, "C", 2, 0).comm(2, "C", 2, 1);
    for (int r = 3; r < n; ++r) b.comm(r, "solo" + std::to_string(r), 1, 0);
    // Each rank issues the same multiset of ops per comm, in a random interleaving and on
    // random streams, with random syncs.
    std::vector<std::pair<std::string, std::string>> ops01 = {{"A", kinds[rng() % 3]}, {"A", kinds[rng() % 3]},
                                                              {"B", kinds[rng() % 3]}};
    for (int r = 0; r < n; ++r) {
      std::vector<std::pair<std::string, std::string>> mine;
      if (r < 2) mine = ops01;
      if (r == 0 || r == 2) { if (n > 2) mine.push_back({"C", "all_reduce"}); }
      if (r >= 3) mine.push_back({"solo" + std::to_string(r), "all_reduce"});
      // Keep per-comm order; shuffle across comms by a random merge.
      std::vector<std::pair<std::string, std::string>> order;
      std::map<std::string, std::vector<std::pair<std::string, std::string>>> by_comm;
      for (auto& o : mine) by_comm[o.first].push_back(o);
      while (!by_comm.empty()) {
        auto it = by_comm.begin();
        std::advance(it, rng() % by_comm.size());
        order.push_back(it->second.front());
        it->second.erase(it->second.begin());
        if (it->second.empty()) by_comm.erase(it);
      }
      for (auto& [c, k] : order) {
        const uint64_t stream = 1 + rng() % 2;
        b.op(r, c, k, stream, 64);
        if (rng() % 4 == 0) b.wait(r, "stream_sync", stream);
      }
    }
    const auto s = schedule_from_trace(b.trace);
    const auto base = model::check(s);
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      model::Options o;
      o.shuffle_seed = seed;
      const auto other = model::check(s, o);
      ASSERT_EQ(other.verdict, base.verdict) << "trial " << trial << " seed " << seed << dump(base) << dump(other);
      ASSERT_EQ(other.completed_ops, base.completed_ops) << "trial " << trial << " seed " << seed;
      ASSERT_EQ(model::format_text(other), model::format_text(base)) << "trial " << trial << " seed " << seed;
    }
    deadlocks += base.verdict == Verdict::kDeadlock;
    latent += base.verdict == Verdict::kMayDeadlock;
    complete += base.verdict == Verdict::kCanComplete;
  }
  // The generator must exercise all three outcomes, or the test proves little.
  EXPECT_GT(deadlocks, 10);
  EXPECT_GT(latent, 10);
  EXPECT_GT(complete, 10);
}

TEST(ModelCheck, ManyRanksManyOpsAreCheckedQuickly) {
  // 64 ranks x 2,000 ops: a world comm plus pairs; correctness at a size no search could do.
  const int n = 64, steps = 1000;
  RowsBuilder b(n);
  std::vector<int> all;
  for (int r = 0; r < n; ++r) b.comm(r, "W", n, r);
  for (int r = 0; r < n; r += 2) b.comm(r, "P" + std::to_string(r), 2, 0).comm(r + 1, "P" + std::to_string(r), 2, 1);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < steps; ++i) {
      b.op(r, "W", "all_reduce", 1);
      b.op(r, "P" + std::to_string(r & ~1), "all_gather", 2);
    }
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kCanComplete) << dump(r);
  EXPECT_EQ(r.completed_ops, int64_t{n} * steps * 2);
  // Rank 63 skips its last world all_reduce: every rank ends blocked in it.
  b.trace.processes[63].ops.erase(b.trace.processes[63].ops.end() - 2);
  r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock);
  EXPECT_EQ(r.ranks.size(), 63u);
  EXPECT_TRUE(contains(r.summary, "rank 63, which never issues collective #1000")) << r.summary;
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

TEST(ModelCheck, TruncatedCrossCommunicatorHangIsACycleBetweenRanks) {
  // What a recorded cross-communicator hang looks like: each rank's schedule stops at the op it
  // hung in, on a communicator the other rank never reached.
  testing::RowsBuilder b(2);
  b.comm_all("A", {0, 1}).comm_all("B", {0, 1});
  b.op(0, "A", "all_reduce");
  b.op(1, "A", "all_reduce");
  b.op(0, "A", "reduce_scatter");
  b.op(1, "B", "all_to_all");
  auto r = model::check(schedule_from_trace(b.trace));
  EXPECT_EQ(r.verdict, model::Verdict::kDeadlock) << model::format_text(r);
  ASSERT_EQ(r.cycle.size(), 2u) << model::format_text(r);
  EXPECT_NE(r.cycle[0].find("rank 0: comm A seq 2 reduce_scatter"), std::string::npos) << r.cycle[0];
  EXPECT_NE(r.cycle[1].find("rank 1: comm B seq 1 all_to_all"), std::string::npos) << r.cycle[1];
  EXPECT_NE(r.summary.find("wait-for cycle of 2 waits"), std::string::npos) << r.summary;
}

// The fields the model matches a collective and a message on (each test kills the one-line bug
// that stops comparing that field: scripts/mutation-test-mutants.txt).
TEST(ModelCheck, BroadcastFromDifferentRootsIsNoMatchingOp) {
  RowsBuilder b(2);
  b.comm_all("X", {0, 1});
  b.op(0, "X", "broadcast").root = 0;
  b.op(1, "X", "broadcast").root = 1;
  auto r = check(b.trace);
  EXPECT_EQ(r.verdict, Verdict::kDeadlock) << dump(r);
  EXPECT_TRUE(contains(r.summary, "no matching op")) << dump(r);
}

TEST(ModelCheck, SendAndRecvOfDifferentCountsNeverMatch) {
  RowsBuilder b(2);
  b.comm_all("PP", {0, 1});
  b.send(0, "PP", 1).count = 1024;
  b.recv(1, "PP", 0).count = 2048;
  auto r = check(b.trace);
  EXPECT_NE(r.verdict, Verdict::kCanComplete) << dump(r);
  EXPECT_EQ(r.completed_ops, 0) << dump(r);
}

TEST(ModelCheck, CommRankEqualToNranksIsRejected) {
  RowsBuilder b(2);
  b.comm(0, "X", 2, 0).comm(1, "X", 2, 2);
  b.op(0, "X", "all_reduce");
  b.op(1, "X", "all_reduce");
  try {
    check(b.trace);
    ADD_FAILURE() << "comm rank 2 of 2 members was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "rank 2 is out of range")) << e.what();
  }
}

}  // namespace
}  // namespace lockstep
