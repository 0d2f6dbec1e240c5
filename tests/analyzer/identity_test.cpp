// The identity rules (analyzer/identity.h): roles, --comm selectors, rank labels, p2p channels,
// and the loader's typed data they read (NOCOLOR splits, created_before_tracing).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "comm_index.h"
#include "identity.h"
#include "schedule.h"
#include "trace_builder.h"
#include "trace_loader.h"
#include "trace_schema.h"

namespace lockstep {
namespace {

using testing::TraceBuilder;

void exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg << " in " << sql;
}

// World of 2; split #0 with rank 0 passing NCCL_SPLIT_NOCOLOR (no communicator on rank 0, "solo"
// on rank 1); split #1 with both ranks joining "pair". Before the fix the analyzer named "pair"
// init0.split0 on rank 0 and init0.split1 on rank 1, while --order-from counted the NOCOLOR
// call: a baseline and --order-from named one communicator differently.
TraceBuilder nocolor_job() {
  TraceBuilder b(2);
  b.comm("aaaa000000000001", {0, 1});
  b.comm("bbbb000000000002", {1}, "aaaa000000000001", 7);  // rank 1's split #0
  b.comm("cccc000000000003", {0, 1}, "aaaa000000000001", 3);
  // Rank 0's split #0: NOCOLOR, between the world and "pair".
  Process& p0 = b.trace().processes[0];
  p0.comms[1].init_call += 1;
  p0.nocolor_splits.push_back({p0.comms[1].init_call - 1, 0});
  return b;
}

TEST(Identity, a_nocolor_split_counts_so_every_member_names_the_next_split_alike) {
  TraceBuilder b = nocolor_job();
  const Trace& t = b.trace();
  auto r0 = comm_roles(t.processes[0]), r1 = comm_roles(t.processes[1]);
  ASSERT_EQ(r0.size(), 2u);
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_EQ(r0[1], "init0.split1(color=3)");
  EXPECT_EQ(r1[2], "init0.split1(color=3)");
  EXPECT_EQ(r1[1], "init0.split0(color=7)");
  // The analyzer's index (baselines) and --order-from's structure agree.
  Schedule s = schedule_from_trace(t);
  CommIndex idx = build_comm_index(s);
  EXPECT_TRUE(idx.warnings.empty()) << idx.warnings[0];
  EXPECT_EQ(structural_comm_roles(t.processes[0])[1], "init0.split1");
  EXPECT_EQ(structural_comm_roles(t.processes[1])[2], "init0.split1");
}

TEST(Identity, commname_wins_over_structure_and_names_children) {
  TraceBuilder b(1);
  b.comm("aaaa000000000001", {0}, "", 0, "world");
  b.comm("bbbb000000000002", {0}, "aaaa000000000001", 4);
  auto roles = comm_roles(b.trace().processes[0]);
  EXPECT_EQ(roles[0], "world");
  EXPECT_EQ(roles[1], "world.split0(color=4)");
  EXPECT_EQ(structural_comm_roles(b.trace().processes[0])[1], "init0.split0");
}

TEST(Identity, a_family_is_built_from_the_structure_not_cut_from_the_role_text) {
  TraceBuilder b(1);
  b.comm("aaaa000000000001", {0}, "", 0, "");
  b.comm("bbbb000000000002", {0}, "aaaa000000000001", 4);
  b.comm("cccc000000000003", {0}, "bbbb000000000002", 1);
  b.comm("dddd000000000004", {0}, "aaaa000000000001", 2, "tp(color=7)");
  const Process& p = b.trace().processes[0];
  auto roles = comm_roles(p);
  auto families = comm_families(p);
  EXPECT_EQ(roles[2], "init0.split0(color=4).split0(color=1)");
  EXPECT_EQ(families[0], "init0");
  EXPECT_EQ(families[2], "init0.split0.split0");
  // A commName is the role and the family as it is, whatever characters it holds.
  EXPECT_EQ(roles[3], "tp(color=7)");
  EXPECT_EQ(families[3], "tp(color=7)");
  EXPECT_EQ(match_comm("tp", "dddd", roles[3], families[3], "tp(color=7)"), CommMatch::kNone);
  EXPECT_EQ(match_comm("init0.split0", "bbbb", roles[1], families[1], ""), CommMatch::kFamily);
}

TEST(Identity, one_join_names_every_member_once_in_the_order_of_creation) {
  TraceBuilder b(3);
  b.comm("aaaa000000000001", {0, 1, 2});
  b.comm("bbbb000000000002", {2, 1});
  Trace& t = b.trace();
  t.processes[1].comms.push_back(t.processes[1].comms[0]);  // the same hash twice in one file
  std::vector<const Process*> procs;
  for (const Process& p : t.processes) procs.push_back(&p);
  const CommJoin j = join_comms(procs);
  ASSERT_EQ(j.comms.size(), 2u);
  EXPECT_EQ(j.comms[0].hash, "aaaa000000000001");
  EXPECT_EQ(j.comms[0].members.size(), 3u);
  // Members sorted by comm rank: process 2 is comm rank 0 of the second communicator.
  ASSERT_EQ(j.comms[1].members.size(), 2u);
  EXPECT_EQ(j.comms[1].members[0].proc, 2);
  EXPECT_EQ(j.comms[1].members[0].rank, 0);
  EXPECT_EQ(j.gcomm[1], (std::vector<int>{0, 1, -1}));  // the repeat maps nowhere
  bool named = false;
  for (const std::string& w : j.warnings) named |= w.find("appears twice") != std::string::npos;
  EXPECT_TRUE(named);
  EXPECT_EQ(j.comms[0].family, "init0");
}

TEST(Identity, comm_selector_prefers_an_exact_role_or_name_over_a_hash_prefix) {
  EXPECT_EQ(match_comm("tp", "aaaa", "init0", "init0", "tp"), CommMatch::kExact);
  EXPECT_EQ(match_comm("init0", "aaaa", "init0", "init0", ""), CommMatch::kExact);
  EXPECT_EQ(match_comm("aa", "aaaa", "init0", "init0", ""), CommMatch::kHashPrefix);
  EXPECT_EQ(match_comm("zz", "aaaa", "init0", "init0", "tp"), CommMatch::kNone);
  EXPECT_EQ(match_comm("", "aaaa", "init0", "init0", ""), CommMatch::kNone);
  // "abc" is one communicator's name and a prefix of another's hash: the name wins.
  std::vector<Comm> comms(2);
  comms[0].hash = "abc0000000000001";
  comms[1].hash = "ffff000000000002";
  comms[1].name = "abc";
  std::vector<std::string> roles = {"init0", "abc"};
  auto hits = select_comms("abc", 2, [&](int i) -> const std::string& { return roles[i]; },
                           [&](int i) -> const std::string& { return roles[i]; },
                           [&](int i) -> const Comm& { return comms[i]; });
  EXPECT_EQ(hits, std::vector<int>{1});
}

TEST(Identity, rank_labels_and_p2p_channels) {
  Process p;
  p.global_rank = 3;
  p.host = "n1";
  p.pid = 42;
  EXPECT_EQ(shown_rank(p, 7), 3);
  EXPECT_EQ(rank_label(p, 7), "rank 3");
  EXPECT_EQ(rank_label(p, 7, false), "process 7 (n1 pid 42)");
  p.global_rank = -1;
  EXPECT_EQ(shown_rank(p, 7), 7);
  // The n-th send from 1 to 2 meets the n-th receive on 2 from 1: one channel, seen from both.
  EXPECT_EQ(p2p_channel(5, 1, 2, true), p2p_channel(5, 2, 1, false));
  EXPECT_NE(p2p_channel(5, 1, 2, true).key(), p2p_channel(5, 2, 1, true).key());
  EXPECT_EQ(last_op_on_comm({1, 4}, {2, 7}), 7);
  EXPECT_EQ(last_op_on_comm({1, 9}, {2, 7}), 9);
  EXPECT_EQ(last_op_on_comm({}, {3}), 3);
  EXPECT_EQ(last_op_on_comm({}, {}), -1);
}

// F24: a Flight Recorder dump gives no host and no pid: the label shows neither, but the file.
TEST(Identity, process_label_shows_only_what_the_file_gives) {
  Process p;
  p.path = "/d/nccl_trace_rank_0.lockstep.sqlite";
  EXPECT_EQ(process_label(p), "file nccl_trace_rank_0.lockstep.sqlite");
  p.meta["fr_dump_file"] = "/dumps/nccl_trace_rank_0";
  EXPECT_EQ(process_label(p), "file nccl_trace_rank_0");
  p.host = "n1";
  EXPECT_EQ(process_label(p), "n1");
  p.pid = 42;
  EXPECT_EQ(process_label(p), "n1 pid 42");
  p.host.clear();
  EXPECT_EQ(process_label(p), "pid 42");
}

// F16/F15: one label per communicator, one word per op's progress.
TEST(Identity, comm_label_and_progress_word) {
  EXPECT_EQ(comm_label("331d2a30ba1f9e60", "init0.split0(color=0)"), "comm 331d2a30 (init0.split0(color=0))");
  EXPECT_EQ(comm_label("331d2a30ba1f9e60"), "comm 331d2a30");
  EXPECT_EQ(comm_family_label("init0.split0", 32), "comm init0.split0 (one of 32 communicators of that family)");
  using vocab::State;
  EXPECT_STREQ(progress_word(State::Enqueued, true), "completed");
  EXPECT_STREQ(progress_word(State::Enqueued, false), "in flight");
  EXPECT_STREQ(progress_word(State::Enqueued, false, false), "issued");
  EXPECT_STREQ(progress_word(State::GraphLaunched, false), "in flight");
  EXPECT_STREQ(progress_word(State::Captured, false), "captured");
  EXPECT_STREQ(progress_word(State::Failed, false), "failed");
  EXPECT_EQ(plural(1, "rank", "ranks"), "1 rank");
  EXPECT_EQ(plural(2, "rank", "ranks"), "2 ranks");
}

TEST(IdentityLoader, nocolor_splits_and_created_before_tracing_are_typed_data_of_the_model) {
  TraceBuilder b(1);
  b.comm("aaaa000000000001", {0});
  b.comm("bbbb000000000002", {0});
  b.comm("cccc000000000003", {0});
  b.add(0, "aaaa000000000001");
  auto dir = testing::fresh_dir("identity-loader");
  testing::write_trace(b.trace(), dir);
  std::string file;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().string().ends_with(schema::kFileSuffix)) file = e.path().string();
  ASSERT_FALSE(file.empty());
  // A NOCOLOR split as the recorder writes it, an old trace's sentinel name, the new flag.
  exec(file, "INSERT INTO api_calls(call_index, name, comm_id, rc, detail, mono_ns) "
             "VALUES(100, 'ncclCommSplit', 1, 0, 'color=NCCL_SPLIT_NOCOLOR (no new comm)', 0)");
  exec(file, "UPDATE comms SET name='(created before tracing)' WHERE id=2");
  exec(file, "UPDATE comms SET created_before_tracing=1 WHERE id=3");
  Process p = load_process_file(file);
  ASSERT_EQ(p.nocolor_splits.size(), 1u);
  EXPECT_EQ(p.nocolor_splits[0].call_index, 100);
  EXPECT_EQ(p.nocolor_splits[0].parent, 0);
  ASSERT_EQ(p.comms.size(), 3u);
  EXPECT_FALSE(p.comms[0].created_before_tracing);
  EXPECT_TRUE(p.comms[1].created_before_tracing);
  EXPECT_EQ(p.comms[1].name, "");
  EXPECT_TRUE(p.comms[2].created_before_tracing);
  EXPECT_EQ(comm_roles(p)[1], "(created before tracing)");
}

TEST(IdentityLoader, a_name_the_vocabulary_does_not_know_skips_the_file_with_the_reason) {
  TraceBuilder b(2);
  b.comm("aaaa000000000001", {0, 1});
  b.all({0, 1}, "aaaa000000000001", {}, 2);
  auto dir = testing::fresh_dir("identity-vocab");
  testing::write_trace(b.trace(), dir);
  std::string victim;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().string().ends_with(schema::kFileSuffix)) victim = e.path().string();
  // Schema 2 stores an op's name in its signature (as text when it is not a vocabulary value).
  exec(victim, "UPDATE signatures SET op='all_reduce_v2' WHERE id=(SELECT min(id) FROM signatures)");
  Schedule t = load_schedule(dir);
  ASSERT_EQ(t.skipped.size(), 1u);
  EXPECT_NE(t.skipped[0].reason.find("unknown op 'all_reduce_v2'"), std::string::npos) << t.skipped[0].reason;
  EXPECT_EQ(t.procs.size(), 1u);
}

}  // namespace
}  // namespace lockstep
