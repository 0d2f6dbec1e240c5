// Rank identity (analyzer/rank_identity.h) and job/host grouping (analyzer/job_identity.h) on
// written trace directories: inferred ranks, conflicts, replay's file-per-rank mapping, Slurm
// job lines, and hosts whose clocks disagree or whose traces all stopped.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "analysis.h"
#include "job_identity.h"
#include "rank_identity.h"
#include "replay.h"
#include "trace_builder.h"
#include "trace_loader.h"

using namespace lockstep;
using namespace lockstep::testing;

namespace {

// The file keeps its name (rank-<i>, from Process::global_rank); the recorded rank is `rank`.
void record_rank(Process& p, int rank, const std::string& source = "") {
  p.meta["global_rank"] = std::to_string(rank);
  p.meta["global_rank_source"] = source;
}

std::string report(const std::string& dir, int64_t stale_ns = 10'000'000'000) {
  Schedule s = load_schedule(dir);
  AnalyzeOptions o;
  o.hang.stale_ns = stale_ns;
  Analysis a = analyze(s, o);
  auto d = details_from_files(s);
  return render_text(a, *d) + "\n--json--\n" + render_json(a, *d);
}

}  // namespace

TEST(RankIdentity, infers_the_rank_from_the_communicator_spanning_every_process) {
  TraceBuilder b(2);
  b.comm("aaaa1111", {1, 0});  // process 1 is rank 0 of the world communicator
  b.all({0, 1}, "aaaa1111", {}, 3);
  for (auto& p : b.trace().processes) record_rank(p, -1);
  auto dir = fresh_dir("identity-infer");
  write_trace(b.trace(), dir);

  Schedule t = load_headers(dir);
  ASSERT_EQ(t.procs.size(), 2u);
  EXPECT_EQ(t.procs[0].info.global_rank, 0);
  EXPECT_EQ(t.procs[0].info.path, dir + "/rank-1.lockstep.sqlite");
  EXPECT_EQ(t.procs[0].info.global_rank_source, "inferred:comm aaaa1111");
  EXPECT_EQ(t.procs[1].info.global_rank, 1);
  EXPECT_TRUE(t.procs[1].info.rank_conflict.empty());
  // Replay maps files to ranks through the inferred ranks instead of refusing rank -1.
  auto files = replay::rank_files(load_schedule(dir));
  EXPECT_EQ(files[0], dir + "/rank-1.lockstep.sqlite");
  std::string r = report(dir);
  EXPECT_NE(r.find("clean: 2 processes"), std::string::npos) << r;
  EXPECT_NE(r.find("\"global_rank_source\": \"inferred:comm aaaa1111\""), std::string::npos) << r;
}

TEST(RankIdentity, a_single_process_that_set_its_own_rank_is_rank_0_of_its_only_communicator) {
  TraceBuilder b(1);  // init_process_group(rank=0, world_size=1) without RANK in the environment
  b.comm("c0ffee00", {0});
  b.all({0}, "c0ffee00", {}, 2);
  record_rank(b.trace().processes[0], -1);
  auto dir = fresh_dir("identity-single");
  write_trace(b.trace(), dir);
  Schedule t = load_headers(dir);
  EXPECT_EQ(t.procs[0].info.global_rank, 0);
  EXPECT_EQ(t.procs[0].info.global_rank_source, "inferred:comm c0ffee00");
  EXPECT_EQ(replay::rank_files(load_schedule(dir)).size(), 1u);
}

TEST(RankIdentity, no_communicator_spans_every_process_so_nothing_is_guessed) {
  TraceBuilder b(2);
  b.comm("aaaa0000", {0});
  b.comm("bbbb0000", {1});
  for (auto& p : b.trace().processes) record_rank(p, -1);
  auto dir = fresh_dir("identity-none");
  write_trace(b.trace(), dir);
  Schedule t = load_headers(dir);
  EXPECT_EQ(t.procs[0].info.global_rank, -1);
  EXPECT_EQ(t.procs[1].info.global_rank, -1);
  EXPECT_THROW(replay::rank_files(load_schedule(dir)), std::runtime_error);
}

TEST(RankIdentity, conflicting_sources_are_reported_not_resolved) {
  TraceBuilder b(3);
  b.comm("wwww0000", {0, 1, 2});
  b.all({0, 1, 2}, "wwww0000", {}, 2);
  auto& ps = b.trace().processes;
  record_rank(ps[0], 2, "RANK");  // RANK says 2, the world communicator says 0
  record_rank(ps[1], -1);         // inferred 1
  record_rank(ps[2], 2, "RANK");
  auto dir = fresh_dir("identity-conflict");
  write_trace(b.trace(), dir);
  Schedule t = load_headers(dir);
  // RANK kept: two processes now claim rank 2; each conflict is named.
  std::string all;
  for (auto& p : t.procs) all += p.info.rank_conflict + "\n";
  EXPECT_NE(all.find("RANK says rank 2 but communicator wwww0000, which spans every process, says rank 0"),
            std::string::npos) << all;
  EXPECT_NE(all.find("rank 2 is claimed by 2 processes"), std::string::npos) << all;
  std::string r = report(dir);
  EXPECT_NE(r.find("warning: rank identity of node0 pid"), std::string::npos) << r;
  EXPECT_NE(r.find("\"rank_conflict\": \"RANK says rank 2"), std::string::npos) << r;
}

TEST(JobIdentity, the_report_names_the_slurm_job_and_groups_ranks_by_host) {
  TraceBuilder b(4);
  b.comm("aaaa2222", {0, 1, 2, 3});
  b.all({0, 1, 2, 3}, "aaaa2222", {}, 3);
  b.add(0, "aaaa2222");  // ranks 0 and 1 issue one more: they hang on it
  b.add(1, "aaaa2222");
  const int64_t day = 86'400'000'000'000;
  for (int p = 0; p < 4; ++p) {
    auto& pr = b.trace().processes[p];
    pr.finished = false;
    pr.host = p < 2 ? "node-0" : "node-1";
    pr.meta["launcher_slurm_job_id"] = "77";
    pr.meta["launcher_slurm_step_id"] = "0";
    pr.meta["launcher_slurm_procid"] = std::to_string(p);
    pr.meta["launcher_slurm_job_nodelist"] = "node-[0-1]";
    // node-1's monotonic clock is a day ahead; both hosts flushed at wall time 1000 s.
    int64_t mono0 = p < 2 ? 5'000'000'000 : day + 5'000'000'000;
    pr.meta["start_wall_ns"] = "900000000000";
    pr.meta["start_mono_ns"] = std::to_string(mono0);
    pr.last_flush_mono_ns = mono0 + 100'000'000'000;
  }
  auto dir = fresh_dir("identity-hosts");
  write_trace(b.trace(), dir);
  std::string r = report(dir);
  EXPECT_NE(r.find("job: Slurm job 77 step 0, nodes node-[0-1]: ranks 0-3\n"), std::string::npos) << r;
  EXPECT_NE(r.find("hosts: node-0 ranks 0-1; node-1 ranks 2-3\n"), std::string::npos) << r;
  EXPECT_EQ(r.find("host node-1: every trace"), std::string::npos) << "clocks that disagree made a host look dead:\n" << r;

  // node-1's traces stop 30 s (wall) before node-0's.
  for (int p = 2; p < 4; ++p) b.trace().processes[p].last_flush_mono_ns -= 30'000'000'000;
  write_trace(b.trace(), dir = fresh_dir("identity-dead-host"));
  r = report(dir);
  EXPECT_NE(r.find("host node-1: every trace (ranks 2-3) stopped 30 s before node-0's"), std::string::npos) << r;
  EXPECT_NE(r.find("\"stopped_before_host\": \"node-0\""), std::string::npos) << r;
  // A host whose ranks recorded a signal (scancel) was stopped, not silently dead.
  for (int p = 2; p < 4; ++p) b.trace().processes[p].exit_reason = "SIGTERM";
  write_trace(b.trace(), dir = fresh_dir("identity-stopped-host"));
  r = report(dir);
  EXPECT_EQ(r.find("host node-1: every trace"), std::string::npos) << r;
}

// Review G10: 512 hosts of 8 ranks each made a 12 KB `hosts:` line. Hosts named in sequence that
// each hold the next block of ranks are one entry; other hosts are listed, at most 16 entries.
namespace {
std::string hosts_line_of(int nhosts, int per_host, const std::function<std::string(int)>& name) {
  TraceBuilder b(nhosts * per_host);
  for (int p = 0; p < nhosts * per_host; ++p) b.trace().processes[p].host = name(p / per_host);
  Schedule s = schedule_from_trace(b.trace());
  std::string h = job_header_text(s, group_by_host(s, 10'000'000'000));
  size_t at = h.find("hosts:");
  return at == std::string::npos ? h : h.substr(at, h.find('\n', at) - at);
}
}  // namespace

TEST(JobIdentity, hosts_that_each_hold_the_next_block_of_ranks_are_one_entry) {
  EXPECT_EQ(hosts_line_of(512, 8, [](int h) { return "node" + std::to_string(h); }),
            "hosts: node0..node511 (512 hosts, 8 ranks each in order: ranks 0-4095)");
  char buf[16];
  EXPECT_EQ(hosts_line_of(12, 2, [&](int h) { std::snprintf(buf, sizeof buf, "gpu-%03d", h + 5); return std::string(buf); }),
            "hosts: gpu-005..gpu-016 (12 hosts, 2 ranks each in order: ranks 0-23)");
  // A host out of the sequence splits it; two in a row are named each.
  EXPECT_EQ(hosts_line_of(10, 2, [](int h) { return h == 5 ? std::string("spare") : "node" + std::to_string(h); }),
            "hosts: node0..node4 (5 hosts, 2 ranks each in order: ranks 0-9); spare ranks 10-11; "
            "node6..node9 (4 hosts, 2 ranks each in order: ranks 12-19)");
  EXPECT_EQ(hosts_line_of(2, 1, [](int h) { return "n" + std::to_string(h); }), "hosts: n0 rank 0; n1 rank 1");
  // Names out of any sequence: 16 listed, the rest counted.
  std::string capped = hosts_line_of(40, 2, [](int h) { return "h" + std::string(1, char('a' + h % 26)) + std::string(h / 26 + 1, 'x'); });
  EXPECT_NE(capped.find("; and 24 more hosts (--json lists them)"), std::string::npos) << capped;
  EXPECT_LT(capped.size(), 500u) << capped;
}
