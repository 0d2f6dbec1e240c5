// Bounded traces (issue 11): retired history known by digest. Traces are built in memory with
// full history, then the oldest collectives of some members are retired the way the size cap
// does it (ops dropped, comms.retired_*, checkpoints from schema/op_digest.h kept).
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "analysis.h"
#include "op_digest.h"
#include "summary_read.h"
#include "trace_builder.h"

using namespace lockstep;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;

namespace {

const char* kComm = "c0c0000000000001";

struct Result {
  Schedule s;
  Analysis a;
  std::string text, json, junit;
};

std::unique_ptr<Result> run(TraceBuilder& b) {
  auto r = std::make_unique<Result>();
  r->s = schedule_from_trace(b.trace());
  r->a = analyze(r->s);
  auto details = details_from_trace(b.trace());
  r->text = render_text(r->a, *details);
  r->json = render_json(r->a, *details);
  r->junit = render_junit("t", junit_cases(r->a, false));
  return r;
}

uint64_t sig_hash(const Op& o) {
  Signature s{o.op, o.dtype, o.count, o.root, o.peer, o.redop, o.parts, OpClass::kCollective};
  return signature_digest(s);
}

// Gives process `proc` checkpoints every `interval` collectives on kComm, and retires its
// first `retire` collectives (and the ops before them), as the recorder's size cap does.
void cap(Trace& t, int proc, int64_t retire, int64_t interval = 4) {
  Process& p = t.processes[proc];
  p.checkpoint_interval = interval;
  Comm& c = p.comms[0];
  uint64_t d = digest::kEmpty;
  int64_t k = 0;
  for (const Op& o : p.ops) {
    if (o.seq <= 0 || vocab::is_p2p(o.op)) continue;
    d = digest::chain(d, sig_hash(o));
    ++k;
    if (digest::is_checkpoint(k, interval)) c.checkpoints.push_back({k, o.seq, d});
    if (k == retire) {
      c.retired_collectives = k;
      c.retired_digest = d;
      c.retired_through_seq = o.seq;
    }
  }
  // Every op up to the last retired collective goes, point-to-point ones included.
  std::vector<Op> kept;
  for (const Op& o : p.ops)
    if (retire == 0 || o.seq > c.retired_through_seq) kept.push_back(o);
  p.retired_ops = static_cast<int64_t>(p.ops.size() - kept.size());
  p.ops = kept;
}

// Two ranks, `n` all_reduces on one comm; rank 1's collective #`odd_at` (1-based, 0 = none)
// has another count.
TraceBuilder two_ranks(int n, int odd_at = 0) {
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  for (int k = 1; k <= n; ++k) {
    b.add(0, kComm, {.count = 1024});
    b.add(1, kComm, {.count = k == odd_at ? 2048 : 1024});
  }
  return b;
}

}  // namespace

TEST(Checkpoints, divergence_before_the_retained_window_is_located_by_checkpoint) {
  auto b = two_ranks(12, 3);
  cap(b.trace(), 0, 8);
  cap(b.trace(), 1, 8);
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << r->text;
  const Divergence& d = r->a.divergences[0];
  EXPECT_EQ(d.kind, FindingKind::kDigestMismatch) << d.detail;
  EXPECT_EQ(d.ordinal_first, 1);
  EXPECT_EQ(d.ordinal, 4);  // the first checkpoint where they differ
  ASSERT_EQ(d.groups.size(), 2u);
  EXPECT_EQ(r->a.verdict(), Verdict::kDivergent);
  EXPECT_TRUE(r->a.problems());  // analyze exits 1
  // Text, JSON and JUnit say it is located by checkpoint and known by digest only.
  EXPECT_NE(r->text.find("members diverge between collective ordinals 1 and 4; known by digest only"), std::string::npos)
      << r->text;
  EXPECT_NE(r->text.find("rank 0 | rank 1"), std::string::npos) << r->text;
  auto j = nlohmann::json::parse(r->json);
  EXPECT_EQ(j["first_divergence"]["kind"], "digest_mismatch");
  EXPECT_EQ(j["first_divergence"]["evidence"], "digest");
  EXPECT_EQ(j["first_divergence"]["ordinal_first"], 1);
  EXPECT_EQ(j["first_divergence"]["ordinal_last"], 4);
  EXPECT_EQ(j["first_divergence"]["groups"].size(), 2u);
  EXPECT_NE(r->junit.find("digest_mismatch"), std::string::npos) << r->junit;
  EXPECT_NE(r->junit.find("known by digest only"), std::string::npos) << r->junit;
}

TEST(Checkpoints, divergence_inside_the_window_is_reported_exactly_as_without_a_cap) {
  auto full = two_ranks(12, 10);
  auto uncapped = run(full);
  auto b = two_ranks(12, 10);
  cap(b.trace(), 0, 8);
  cap(b.trace(), 1, 6);
  auto r = run(b);
  ASSERT_EQ(r->a.divergences.size(), 1u) << r->text;
  ASSERT_EQ(uncapped->a.divergences.size(), 1u);
  const Divergence& d = r->a.divergences[0];
  EXPECT_EQ(d.kind, FindingKind::kCount);
  EXPECT_EQ(d.ordinal, 10);  // absolute ordinal, not the position in the retained window
  EXPECT_EQ(d.detail, uncapped->a.divergences[0].detail);
  EXPECT_EQ(d.ordinal, uncapped->a.divergences[0].ordinal);
  auto j = nlohmann::json::parse(r->json);
  EXPECT_EQ(j["first_divergence"]["evidence"], "exact");
  EXPECT_EQ(j["first_divergence"]["seq"], 10);
  // The ops before it: exact from #9, #1..8 retired on some member and proven by digest.
  EXPECT_NE(r->text.find("#1..8 (retired history, known by digest only)"), std::string::npos) << r->text;
}

TEST(Checkpoints, retired_history_that_digests_prove_identical_is_clean_and_named) {
  auto b = two_ranks(12);
  cap(b.trace(), 0, 8);
  cap(b.trace(), 1, 5);  // windows start at different ordinals: aligned by ordinal
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  EXPECT_TRUE(r->a.evidence.empty()) << r->text;
  EXPECT_EQ(r->a.verdict(), Verdict::kClean);
  ASSERT_EQ(r->a.checkpoints.comms.size(), 1u);
  const CommWindow& w = r->a.checkpoints.comms[0];
  EXPECT_EQ(w.digest_through, 8);
  EXPECT_EQ(w.exact_first, 9);
  EXPECT_EQ(w.exact_last, 12);
  EXPECT_FALSE(w.unverified);
  EXPECT_NE(r->text.find("known by digest only"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("collectives #9..12 exact"), std::string::npos) << r->text;
  auto j = nlohmann::json::parse(r->json);
  EXPECT_EQ(j["verdict"], "clean");
  EXPECT_EQ(j["comms"][0]["history"]["digest_through"], 8);
  EXPECT_EQ(j["comms"][0]["history"]["exact_first"], 9);
  EXPECT_TRUE(j["retired_history"].is_string());
  EXPECT_NE(r->junit.find("<system-out>retired history"), std::string::npos) << r->junit;
}

TEST(Checkpoints, inconsistent_digest_in_a_file_makes_the_verdict_incomplete) {
  auto b = two_ranks(12);
  cap(b.trace(), 0, 4);
  cap(b.trace(), 1, 4);
  // Rank 1's checkpoint after collective #8 (retained) does not match the ops it holds.
  for (auto& cp : b.trace().processes[1].comms[0].checkpoints)
    if (cp.ordinal == 8) cp.digest ^= 1;
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  ASSERT_FALSE(r->a.evidence.empty()) << r->text;
  EXPECT_EQ(r->a.evidence[0].kind, EvidenceKind::kDigestInconsistent);
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete);
  EXPECT_NE(r->text.find("does not match the collectives it holds"), std::string::npos) << r->text;
}

// Rank 1's row at collective #6 says another count than its own checkpoint at #8, written with
// the run, does (the row edited or damaged after the file was written): which of the two records
// is its history is unknown, so the difference is not claimed (before: exit 1, "count differs",
// next to "the file is inconsistent").
TEST(Checkpoints, a_row_its_own_checkpoint_contradicts_is_no_divergence) {
  auto b = two_ranks(12);
  cap(b.trace(), 0, 0);
  cap(b.trace(), 1, 0);
  int k = 0;
  for (Op& o : b.trace().processes[1].ops)
    if (o.seq > 0 && ++k == 6) o.count = 2048;
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete) << r->text;
  ASSERT_EQ(r->a.unproven.size(), 1u) << r->text;
  EXPECT_EQ(r->a.unproven[0].contested, std::vector<int>{1});
  EXPECT_NE(r->text.find("does not match the collectives it holds"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("not claimed: these files contradict another or themselves"), std::string::npos) << r->text;
  EXPECT_EQ(nlohmann::json::parse(r->json)["verdict"], "incomplete");
  // The same difference with the file's checkpoints agreeing with its rows is claimed.
  auto honest = two_ranks(12, 6);
  cap(honest.trace(), 0, 0);
  cap(honest.trace(), 1, 0);
  auto h = run(honest);
  ASSERT_EQ(h->a.divergences.size(), 1u) << h->text;
  EXPECT_EQ(h->a.verdict(), Verdict::kDivergent) << h->text;
}

TEST(Checkpoints, retired_history_without_checkpoints_is_unverified) {
  auto b = two_ranks(12);
  cap(b.trace(), 0, 8);
  b.trace().processes[0].checkpoint_interval = 0;  // schema 1: nothing to verify it with
  b.trace().processes[0].comms[0].checkpoints.clear();
  auto r = run(b);
  ASSERT_FALSE(r->a.evidence.empty()) << r->text;
  EXPECT_EQ(r->a.evidence[0].kind, EvidenceKind::kUnverifiedHistory);
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete);
  auto j = nlohmann::json::parse(r->json);
  EXPECT_EQ(j["evidence"][0]["kind"], "unverified_history");
}

TEST(Checkpoints, windows_that_do_not_overlap_without_a_common_checkpoint_are_unverified) {
  // Rank 0 issued 8 and kept them all; rank 1 issued 12 and retired the first 10 (checkpoints
  // every 4): they agree at #4 and #8, and nothing can compare #9..10.
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  b.all({0, 1}, kComm, OpSpec{}, 8);
  for (int k = 0; k < 4; ++k) b.add(1, kComm, {});
  cap(b.trace(), 0, 0);
  cap(b.trace(), 1, 10);
  auto r = run(b);
  ASSERT_EQ(r->a.checkpoints.comms.size(), 1u);
  EXPECT_EQ(r->a.checkpoints.comms[0].digest_through, 8);
  EXPECT_TRUE(r->a.checkpoints.comms[0].unverified);
  bool named = false;
  for (auto& e : r->a.evidence)
    named |= e.kind == EvidenceKind::kUnverifiedHistory && e.detail.find("#9..10 cannot be compared") != std::string::npos;
  EXPECT_TRUE(named) << r->text;
  EXPECT_NE(r->a.verdict(), Verdict::kClean);
}

TEST(Checkpoints, retired_point_to_point_messages_are_named_not_paired) {
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  for (int k = 0; k < 6; ++k) {
    b.add(0, kComm, {.op = "send", .peer = 1, .redop = ""});
    b.add(1, kComm, {.op = "recv", .peer = 0, .redop = ""});
    b.all({0, 1}, kComm, OpSpec{});
  }
  cap(b.trace(), 0, 2);  // retires sends too: rank 0's channel indices shift
  cap(b.trace(), 1, 0);
  auto r = run(b);
  EXPECT_TRUE(r->a.divergences.empty()) << r->text;  // not a pairing mismatch
  ASSERT_EQ(r->a.checkpoints.comms.size(), 1u);
  EXPECT_TRUE(r->a.checkpoints.comms[0].p2p_cut);
  EXPECT_EQ(r->a.verdict(), Verdict::kIncomplete);
}

// Scale: one host (8 ranks) lags on the world communicator of 4,096 ranks; the others are
// blocked waiting for it. What the finding lists is bounded, not one side per member.
TEST(Scale, never_issued_on_a_world_comm_of_thousands_of_ranks_lists_groups_not_every_side) {
  const int n = 4096, lagging = 8;
  TraceBuilder b(n);
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  b.comm(kComm, all);
  b.all(all, kComm, OpSpec{}, 20);
  for (int i = 0; i < n - lagging; ++i) {
    b.add(i, kComm, {.completed = false});
    b.running(i);
    b.trace().processes[i].last_flush_mono_ns = 1'000'000'000'000;
  }
  // The blocked ranks are live and a recorder's hang timeout fired: a hang, evidence complete.
  b.trace().processes[0].hangs.push_back({1'000'000'000'000, 0, 1, "hang timeout"});
  AnalyzeOptions opt;
  opt.hang.this_host = "node0";
  opt.hang.now_mono_ns = 1'000'000'000'001;
  opt.hang.pid_alive = [](int64_t) { return true; };
  auto r = std::make_unique<Result>();
  r->s = schedule_from_trace(b.trace());
  r->a = analyze(r->s, opt);
  EXPECT_TRUE(r->a.evidence.empty());
  EXPECT_TRUE(r->a.hang.hung);
  auto details = details_from_trace(b.trace());
  r->text = render_text(r->a, *details);
  r->json = render_json(r->a, *details);
  ASSERT_EQ(r->a.divergences.size(), 1u) << r->text.substr(0, 4000);
  const Divergence& d = r->a.divergences[0];
  EXPECT_EQ(d.kind, FindingKind::kNeverIssued);
  EXPECT_EQ(d.members, static_cast<size_t>(n));
  EXPECT_EQ(d.not_issued.size(), static_cast<size_t>(lagging));
  EXPECT_EQ(d.odd.size(), static_cast<size_t>(lagging));
  EXPECT_LE(d.sides.size(), kMaxListedSides + kSamplesPerGroup);
  ASSERT_EQ(d.groups.size(), 2u);
  EXPECT_EQ(d.groups[0].procs.size(), static_cast<size_t>(n - lagging));
  // Output bounded by what differs, not by ranks: one side per member would be ~1 MB of JSON.
  auto j = nlohmann::json::parse(r->json);
  EXPECT_LT(j["first_divergence"].dump().size(), 30'000u);
  EXPECT_LT(r->text.size(), 20'000u) << r->text.substr(0, 4000);
  EXPECT_EQ(r->a.hang.groups.size(), 2u) << r->text.substr(0, 4000);  // blocked ones | lagging host
}

// A summary-first read cuts every member of a communicator alike; where a member was read whole
// beside one read from a cut (a read that fell back for some files only), the order before the
// cut is not proven, whichever member comes first (before: the first member read whole skipped
// the communicator, and the order was called proven).
TEST(Checkpoints, members_read_to_different_cuts_leave_the_order_unproven) {
  for (int cut : {0, 1}) {
    auto b = two_ranks(8);
    Schedule s = schedule_from_trace(b.trace());
    SchedProcess& p = s.procs[size_t(cut)];
    p.unread.assign(p.info.comms.size(), {});
    p.unread[0].collectives = 4;
    p.info.comms[0].checkpoints.push_back({4, 4, 1, 4, 1});
    UnreadProof proof = prove_unread(s, build_comm_index(s));
    EXPECT_FALSE(proof.order) << "rank " << cut << " cut, the other read whole";
    EXPECT_NE(proof.order_open.find("read whole"), std::string::npos) << proof.order_open;
  }
}
