// The parts of lockstep attach that need no live process: the RAS JSON parser (NCCL 2.28's
// report shape), the snapshot file round trip, and the analysis' verdicts and exit codes.
#include <gtest/gtest.h>

#include <fstream>

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "attach_analysis.h"
#include "procfs.h"
#include "ptrace_stacks.h"
#include "ras_client.h"
#include "snapshot_json.h"

namespace at = lockstep::attach;

namespace {

// The shape of NCCL 2.28.9's VERBOSE STATUS in JSON (src/ras/client_support.cc).
const char* kRasReport = R"({
  "nccl_version": "2.28.9",
  "cuda_runtime_version": 13000,
  "cuda_driver_version": 13000,
  "timestamp": "2026-12-03 17:00:00",
  "communicators_count": 1,
  "communicators": [
    {
      "hash": "0xabc",
      "secondary_hash": "0x1:0x2",
      "size": 3,
      "ranks_count": 2,
      "missing_ranks_count": 1,
      "ranks": [
        { "rank": 0, "host": "10.0.0.1", "pid": 100, "cuda_dev": 0, "nvml_dev": 0,
          "status": { "init_state": 0, "async_error": 0, "finalize_called": false, "destroy_flag": false, "abort_flag": false },
          "collective_counts": { "Broadcast": 0, "Reduce": 0, "AllGather": 5, "ReduceScatter": 7, "AllReduce": 2 } },
        { "rank": 1, "host": "10.0.0.1", "pid": 101, "cuda_dev": 1, "nvml_dev": 1,
          "status": { "init_state": 0, "async_error": 6, "finalize_called": false, "destroy_flag": false, "abort_flag": false },
          "collective_counts": { "Broadcast": 0, "Reduce": 0, "AllGather": 5, "ReduceScatter": 6, "AllReduce": 2 } }
      ],
      "missing_ranks": [
        { "rank": 2, "host": "10.0.0.2", "pid": 300, "cuda_dev": 0, "nvml_dev": 0,
          "status": { "unresponsive": true, "considered_dead": true } }
      ]
    }
  ],
  "ras": { "collection_time_sec": 0.010, "timeouts_count": 0 }
}
)";

at::ProcessSnapshot proc(int pid, int rank, int world, const std::string& wait_fn) {
  at::ProcessSnapshot p;
  p.pid = pid;
  p.host = "node";
  p.rank = rank;
  p.world_size = world;
  at::ThreadSnapshot t;
  t.tid = pid;
  at::NativeFrame f;
  f.function = wait_fn;
  f.module = wait_fn.rfind("cu", 0) == 0 ? "/usr/lib/libcuda.so.1" : "/usr/lib/libc.so.6";
  t.native.push_back(f);
  at::NativeFrame caller;
  caller.function = "train_step";
  caller.module = "/job/train";
  t.native.push_back(caller);
  p.threads.push_back(t);
  return p;
}

// The second look as collect_node takes it when nothing changed in between: RAS answered the
// same, every process waits where it waited.
void same_second_look(at::NodeSnapshot& n, double after_ms = 1000) {
  n.second.taken = true;
  n.second.after_ms = after_ms;
  n.second.ras = n.ras;
  n.second.procs = n.procs;
}

}  // namespace

TEST(AttachRas, ParsesNccl228JsonReport) {
  at::RasAnswer a;
  ASSERT_TRUE(at::parse_ras_json(kRasReport, a));
  EXPECT_EQ(a.nccl_version, "2.28.9");
  ASSERT_EQ(a.comms.size(), 1u);
  const at::RasComm& c = a.comms[0];
  EXPECT_EQ(c.hash, "0xabc");
  EXPECT_EQ(c.size, 3);
  ASSERT_EQ(c.ranks.size(), 2u);
  EXPECT_EQ(c.ranks[1].pid, 101);
  EXPECT_EQ(c.ranks[1].async_error, 6);
  EXPECT_EQ(c.ranks[0].coll_counts.at("ReduceScatter"), 7u);
  ASSERT_EQ(c.missing.size(), 1u);
  EXPECT_TRUE(c.missing[0].considered_dead);
}

TEST(AttachRas, RejectsWhatIsNotAReport) {
  for (const char* text : {"", "SERVER PROTOCOL 2\n", "{\"communicators\": 3}", "[1,2]", "{\"communicators\": [1, {\"ranks\": 7}]}"}) {
    at::RasAnswer a;
    const bool ok = at::parse_ras_json(text, a);
    for (const at::RasComm& c : a.comms) EXPECT_TRUE(c.ranks.empty()) << text;
    if (std::string(text).find("communicators\": [") == std::string::npos) {
      EXPECT_FALSE(ok) << text;
    }
  }
}

TEST(AttachSnapshot, JsonRoundTripAndRejection) {
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, 0, 2, "cuStreamSynchronize"));
  n.procs[0].threads[0].python.push_back({"train.py", "step", 42});
  n.procs[0].threads[0].gil_holder = true;
  n.procs[0].lockstep_dir = "/job/trace";
  n.procs[0].lockstep_dir_from = "LOCKSTEP_DIR";
  n.procs[0].fr_dump_prefix = "/tmp/nccl_trace_rank_";
  n.procs[0].fr_dump_variable = "TORCH_FR_DUMP_TEMP_FILE";
  n.procs[0].fr_dumps = {"/tmp/nccl_trace_rank_0"};
  n.procs[0].fr_dumps_stale = {"/tmp/nccl_trace_rank_1"};
  n.procs[0].stopped_ms = 10;
  n.procs[0].stop = {1.5, 6.25, 2, 0.25, 4};
  at::RasAnswer a;
  a.reached = a.json = true;
  ASSERT_TRUE(at::parse_ras_json(kRasReport, a));
  n.ras.push_back(a);
  std::string why;
  auto back = at::node_from_json(at::to_json(n), why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(at::to_json(*back), at::to_json(n));
  // A Python caller inside torch.distributed names the collective (inferred).
  n.procs[0].threads[0].python.insert(n.procs[0].threads[0].python.begin(),
                                      {"/site-packages/torch/distributed/distributed_c10d.py", "all_reduce", 2950});
  at::AttachReport r = at::analyze_snapshots({n});
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].collective_in_stack, "torch.distributed.all_reduce");
  EXPECT_EQ(back->procs[0].fr_dumps_stale, n.procs[0].fr_dumps_stale);
  EXPECT_EQ(back->procs[0].lockstep_dir_from, "LOCKSTEP_DIR");
  EXPECT_EQ(at::to_json(n)["processes"][0]["stop"]["unwind_ms"], 6.25);
  EXPECT_EQ(back->procs[0].stop.python_ms, 2);
  // Fields of the wrong type keep their defaults; nothing throws on an untrusted file.
  nlohmann::json j = at::to_json(n);
  j["processes"][0]["rank"] = "zero";
  j["processes"][0]["pid"] = 1.5;
  j["processes"][0]["threads"][0]["state"] = 7;
  j["processes"][0]["threads"].push_back("not a thread");
  j["ras"][0]["communicators"][0]["ranks"][0]["collective_counts"] = {{"AllReduce", -3}, {"Broadcast", 4u}};
  auto odd = at::node_from_json(j, why);
  ASSERT_TRUE(odd) << why;
  EXPECT_EQ(odd->procs[0].rank, -1);
  EXPECT_EQ(odd->procs[0].pid, 0);
  EXPECT_EQ(odd->procs[0].threads[0].state, '?');
  EXPECT_EQ(odd->procs[0].threads.size(), 2u);
  EXPECT_EQ(odd->ras[0].comms[0].ranks[0].coll_counts, (std::map<std::string, uint64_t>{{"Broadcast", 4}}));
  EXPECT_FALSE(at::node_from_json(nlohmann::json::parse("{\"processes\": []}"), why));
  EXPECT_FALSE(at::node_from_json(nlohmann::json::parse("[]"), why));
}

// A rank whose threads were not all read (the stop's read budget ran out, a thread did not stop)
// or whose Python frames were cut short is known only in part: never "no hang proven" (exit 0).
TEST(AttachAnalysis, ARankReadInPartIsUnknownNotClean) {
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, 0, 2, "cuStreamSynchronize"));
  n.procs.push_back(proc(101, 1, 2, "epoll_wait"));
  EXPECT_EQ(at::analyze_snapshots({n}).exit_code, 0) << "whole: no hang proven";
  at::ThreadSnapshot unread;
  unread.tid = 2;
  unread.native_error = "not unwound: the stop's read budget of 1000 ms was spent on other threads";
  n.procs[1].threads.push_back(unread);
  at::AttachReport r = at::analyze_snapshots({n});
  EXPECT_EQ(r.exit_code, 4) << r.verdict;
  EXPECT_NE(r.verdict.find("rank 1 read in part"), std::string::npos) << r.verdict;
  EXPECT_EQ(r.ranks[1].threads_unread, 1);
  // A thread that exited while being attached is no gap.
  n.procs[1].threads.back().exited = true;
  EXPECT_EQ(at::analyze_snapshots({n}).exit_code, 0);
  // Python frames cut short: the same.
  n.procs[1].python_cut_short = true;
  EXPECT_EQ(at::analyze_snapshots({n}).exit_code, 4);
  std::string why;
  auto back = at::node_from_json(at::to_json(n), why);
  ASSERT_TRUE(back) << why;
  EXPECT_TRUE(back->procs[1].python_cut_short);
  EXPECT_TRUE(back->procs[1].threads.back().exited);
}

// A process without a rank variable, read in part, is named by its pid, never by the placeholder
// rank it sorts by (before: "rank 1048576 read in part"; the placeholders start at 2^24).
TEST(AttachAnalysis, AProcessWithoutARankReadInPartIsNamedByItsPid) {
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, -1, 0, "epoll_wait"));
  at::ThreadSnapshot unread;
  unread.tid = 7;
  unread.native_error = "did not stop within 200 ms (uninterruptible sleep?): its stack is not read";
  n.procs[0].threads.push_back(unread);
  at::AttachReport r = at::analyze_snapshots({n});
  EXPECT_EQ(r.exit_code, 4) << r.verdict;
  EXPECT_NE(r.verdict.find("pid 100 (no rank variable) read in part"), std::string::npos) << r.verdict;
  EXPECT_EQ(r.verdict.find("rank 16777216"), std::string::npos) << r.verdict;
}

// A target's rank comes from the variables the recorder labels its file by, in the same order
// (before: attach read RANK where the recorder read LOCKSTEP_RANK, so the two named one process
// differently, and PMIx/MVAPICH2 ranks were no rank to attach).
TEST(AttachEnvironment, RanksAreReadAsTheRecorderReadsThem) {
  using Env = std::map<std::string, std::string>;
  EXPECT_EQ(at::rank_from_env(Env{{"RANK", "3"}, {"LOCKSTEP_RANK", "7"}}), 7);
  EXPECT_EQ(at::rank_from_env(Env{{"PMIX_RANK", "5"}}), 5);
  EXPECT_EQ(at::rank_from_env(Env{{"MV2_COMM_WORLD_RANK", "6"}}), 6);
  EXPECT_EQ(at::rank_from_env(Env{{"RANK", "+3"}, {"SLURM_PROCID", "4"}}), 4) << "not a rank: the next variable";
  EXPECT_EQ(at::rank_from_env(Env{{"RANK", std::to_string(at::kMaxEnvRank)}}), -1)
      << "a rank the placeholders of processes without one would collide with";
  EXPECT_EQ(at::rank_from_env(Env{}), -1);
  EXPECT_EQ(at::world_from_env(Env{{"MV2_COMM_WORLD_SIZE", "16"}}), 16);
  EXPECT_EQ(at::world_from_env(Env{{"WORLD_SIZE", "0"}, {"SLURM_NTASKS", "8"}}), 8);
}

// ptrace refused without a reason lockstep can name: as root, "run as root" is no advice.
TEST(AttachEnvironment, ARefusalAsRootDoesNotAdviseRunningAsRoot) {
  EXPECT_NE(at::refusal_fix(std::nullopt, false).find("as root"), std::string::npos);
  const std::string as_root = at::refusal_fix(std::nullopt, true);
  EXPECT_EQ(as_root.find("run as"), std::string::npos) << as_root;
  EXPECT_NE(as_root.find("run attach again"), std::string::npos) << as_root;
  EXPECT_EQ(at::refusal_fix(at::Refusal{"the reason", "the fix"}, true), "the reason; the fix");
}

TEST(AttachAnalysis, RasCountsProveWhoIsBehind) {
  at::NodeSnapshot n;
  n.host = "node";
  for (int r = 0; r < 3; ++r) n.procs.push_back(proc(100 + r, r, 3, "cuStreamSynchronize"));
  at::RasAnswer a;
  a.reached = a.json = true;
  ASSERT_TRUE(at::parse_ras_json(kRasReport, a));
  a.comms[0].ranks.push_back(a.comms[0].ranks[0]);
  a.comms[0].ranks[2].rank = 2;
  a.comms[0].ranks[2].pid = 102;
  a.comms[0].missing.clear();
  n.ras.push_back(a);
  same_second_look(n);
  at::AttachReport r = at::analyze_snapshots({n});
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_EQ(r.divergences.size(), 1u);
  EXPECT_EQ(r.divergences[0].collective, "ReduceScatter");
  const std::vector<std::pair<int, int>> edges{{0, 1}, {2, 1}};
  EXPECT_EQ(r.divergences[0].waits_for, edges);
  EXPECT_NE(r.verdict.find("proven: NCCL RAS"), std::string::npos) << r.verdict;
  for (const at::RankFinding& f : r.ranks) {
    EXPECT_EQ(f.level, at::Evidence::kProven);
    EXPECT_EQ(f.waits_in, "cuStreamSynchronize");
    EXPECT_EQ(f.called_from, "train_step");
  }
  bool async_named = false;
  for (const std::string& s : r.ras_notes) async_named |= s.find("rank 1 has async error 6") != std::string::npos;
  EXPECT_TRUE(async_named);
}

TEST(AttachAnalysis, OddStackAndMissingRankAreNamedNeverClean) {
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, 0, 4, "cuStreamSynchronize"));
  n.procs.push_back(proc(101, 1, 4, "cuStreamSynchronize"));
  n.procs.push_back(proc(102, 2, 4, "epoll_wait"));  // in host code, not in NCCL/CUDA
  at::AttachReport r = at::analyze_snapshots({n});
  EXPECT_EQ(r.no_snapshot, std::vector<int>{3});
  EXPECT_EQ(r.exit_code, 4);  // nothing proven, and a rank unknown: incomplete, not clean
  ASSERT_EQ(r.groups.size(), 2u);
  EXPECT_EQ(r.groups[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.groups[1].ranks, std::vector<int>{2});
  EXPECT_NE(at::render_text(r).find("odd one out: rank 2"), std::string::npos) << at::render_text(r);
  // every rank read and blocked in CUDA: a hang (inferred), exit 1
  n.procs[2] = proc(102, 2, 3, "cuStreamSynchronize");
  n.procs[0].world_size = n.procs[1].world_size = 3;
  same_second_look(n);
  at::AttachReport h = at::analyze_snapshots({n});
  EXPECT_TRUE(h.all_blocked);
  EXPECT_EQ(h.exit_code, 1);
  EXPECT_TRUE(h.no_snapshot.empty());
}

// RAS counts every rank of a communicator, attached to or not: with only rank 0's process read,
// rank 1's smaller ReduceScatter count (RAS names it by comm rank and pid) is still a proven
// divergence, never "RAS counts agree" (it was: only the ranks read were compared).
TEST(AttachAnalysis, RasCountsOfRanksNotAttachedToStillProveADivergence) {
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, 0, 2, "cuStreamSynchronize"));
  at::RasAnswer a;
  a.reached = a.json = true;
  ASSERT_TRUE(at::parse_ras_json(kRasReport, a));
  a.comms[0].missing.clear();
  n.ras.push_back(a);
  same_second_look(n);
  at::AttachReport r = at::analyze_snapshots({n});
  EXPECT_EQ(r.exit_code, 1) << r.verdict;
  ASSERT_EQ(r.divergences.size(), 1u) << r.verdict;
  EXPECT_EQ(r.divergences[0].collective, "ReduceScatter");
  EXPECT_NE(r.verdict.find("rank 0 enqueued 7 ReduceScatter, comm rank 1 (pid 101, not attached) enqueued 6 ReduceScatter"),
            std::string::npos) << r.verdict;
  EXPECT_EQ(r.verdict.find("agree"), std::string::npos) << r.verdict;
  EXPECT_EQ(at::render_json(r)["divergences"][0]["counts_not_attached"][0]["count"], 6);
}

// RAS's missing rank considered dead is proven, and said in the verdict (it was "no NCCL RAS
// counts to prove which collective" while the counts and the dead rank were printed below).
TEST(AttachAnalysis, ARankRasConsidersDeadIsInTheVerdict) {
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, 0, 3, "cuStreamSynchronize"));
  n.procs.push_back(proc(101, 1, 3, "cuStreamSynchronize"));
  at::RasAnswer a;
  a.reached = a.json = true;
  ASSERT_TRUE(at::parse_ras_json(kRasReport, a));
  a.comms[0].ranks[1].coll_counts = a.comms[0].ranks[0].coll_counts;  // counts agree
  n.ras.push_back(a);
  at::AttachReport r = at::analyze_snapshots({n});
  EXPECT_EQ(r.exit_code, 1) << r.verdict;
  EXPECT_NE(r.verdict.find("NCCL RAS reports comm rank 2 (pid 300) of communicator 0xabc missing and considered dead"),
            std::string::npos) << r.verdict;
}

// No process could be read (gone, refused): nothing is proven or inferred, and the verdict says
// that instead of "not every rank waits in NCCL or CUDA, RAS counts agree". A process without a
// rank variable is shown by its pid, never by its placeholder number, in text and JSON.
TEST(AttachAnalysis, NothingReadIsSaidAndAProcessWithoutARankIsNamedByItsPid) {
  at::NodeSnapshot n;
  n.host = "node";
  at::ProcessSnapshot gone = proc(4242, -1, 0, "cuStreamSynchronize");
  gone.threads.clear();
  gone.error = "no such process";
  n.procs.push_back(gone);
  at::AttachReport r = at::analyze_snapshots({n});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.verdict.find("nothing read: no process could be attached to"), std::string::npos) << r.verdict;
  EXPECT_EQ(r.verdict.find("agree"), std::string::npos) << r.verdict;
  at::NodeSnapshot m;
  m.host = "node";
  m.procs.push_back(proc(4243, -1, 0, "epoll_wait"));
  at::AttachReport p = at::analyze_snapshots({m});
  const std::string text = at::render_text(p);
  EXPECT_EQ(text.find("16777216"), std::string::npos) << text;
  EXPECT_NE(text.find("pid 4243 (no rank variable)"), std::string::npos) << text;
  const nlohmann::json j = at::render_json(p);
  EXPECT_TRUE(j["ranks"][0]["rank"].is_null()) << j.dump();
  EXPECT_EQ(j["stack_groups"][0]["pids_without_rank"][0], 4243) << j.dump();
  EXPECT_EQ(j.dump().find("16777216"), std::string::npos) << j.dump();
}

// The stop is bounded: with a read budget spent before the first unwind, no thread is unwound
// (each says why), the Python read is handed a deadline already past, and the process runs on.
// A thread that cannot stop within the bound (here in vfork while its child sleeps 1.5 s) stays
// seized: its stop comes when vfork returns, and release_late_threads lets it go then (before:
// it was held in a tracing stop until lockstep exited, through the RAS wait).
TEST(AttachStop, AThreadThatStopsLateIsLetGoWhenItStops) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::thread t([&] {
      char c = 1;
      if (write(ready[1], &c, 1) != 1) _exit(3);
      const pid_t v = vfork();
      if (v == 0) {
        usleep(1500 * 1000);
        _exit(0);
      }
      waitpid(v, nullptr, 0);
      pause();
    });
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  usleep(200 * 1000);  // the thread is inside vfork now
  std::vector<lockstep::attach::ThreadSnapshot> threads;
  const auto nc = lockstep::attach::capture_native_stacks(child, threads, nullptr, std::chrono::milliseconds(1000));
  EXPECT_TRUE(nc.error.empty()) << nc.error;
  int late = 0;
  for (const auto& t : threads) late += t.native_error.find("did not stop within") != std::string::npos;
  EXPECT_EQ(late, 1) << "the test did not catch a thread in vfork";
  EXPECT_EQ(lockstep::attach::release_late_threads(std::chrono::milliseconds(5000)), 0u);
  // Nothing of the child is traced any more.
  for (const auto& t : threads) {
    std::ifstream f("/proc/" + std::to_string(child) + "/task/" + std::to_string(t.tid) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("TracerPid:", 0) == 0) EXPECT_EQ(line, "TracerPid:\t0") << "thread " << t.tid;
  }
  EXPECT_EQ(waitpid(child, nullptr, WNOHANG), 0);
  kill(child, SIGKILL);
  // A thread still traced by this process must be reaped here first: wait for every child, with
  // a bound, so that a failure above fails instead of hanging.
  for (int i = 0; i < 500 && waitpid(child, nullptr, WNOHANG) == 0; ++i) {
    while (waitpid(-1, nullptr, __WALL | WNOHANG) > 0) {
    }
    usleep(10 * 1000);
  }
}

// A process whose main thread exited (SYS_exit, as pthread_exit) lives on in its other threads: they are read
// (before: "the process exited (a zombie ...)", nothing read).
TEST(AttachStop, AProcessWhoseMainThreadExitedIsReadInItsOtherThreads) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    static int fd = ready[1];
    pthread_t t;
    pthread_create(&t, nullptr, [](void*) -> void* {
      char c = 1;
      if (write(fd, &c, 1) != 1) _exit(3);
      pause();
      return nullptr;
    }, nullptr);
    syscall(SYS_exit, 0);  // this thread only, as pthread_exit does, without unwinding gtest's frames
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  usleep(100 * 1000);  // the main thread has exited by now
  std::vector<lockstep::attach::ThreadSnapshot> threads;
  const auto nc = lockstep::attach::capture_native_stacks(child, threads, nullptr, std::chrono::milliseconds(1000));
  EXPECT_TRUE(nc.error.empty()) << nc.error;
  EXPECT_EQ(nc.threads_stopped, 1);
  EXPECT_EQ(waitpid(child, nullptr, WNOHANG), 0) << "let go: it still runs";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST(AttachStop, AReadBudgetSpentLeavesThreadsUnreadAndTheProcessRunning) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::thread a([] { pause(); }), b([] { pause(); });
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(3);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  std::vector<lockstep::attach::ThreadSnapshot> threads;
  bool called = false;
  bool deadline_past = false;
  const auto nc = lockstep::attach::capture_native_stacks(
      child, threads,
      [&](std::chrono::steady_clock::time_point deadline) {
        called = true;
        deadline_past = std::chrono::steady_clock::now() >= deadline;
      },
      std::chrono::milliseconds(0));
  EXPECT_TRUE(nc.error.empty()) << nc.error;
  EXPECT_EQ(nc.threads_stopped, 3);
  ASSERT_EQ(threads.size(), 3u);
  for (const auto& t : threads) {
    EXPECT_TRUE(t.native.empty());
    EXPECT_NE(t.native_error.find("read budget of 0 ms was spent"), std::string::npos) << t.native_error;
#if defined(__x86_64__)
    EXPECT_NE(t.pthread_self, 0u) << "the thread pointer is read even unwound: Python states match by it";
#endif
  }
  EXPECT_TRUE(called);
  EXPECT_TRUE(deadline_past);
  // Let go: it still runs (a signal ends it as it would have without the attach).
  EXPECT_EQ(waitpid(child, nullptr, WNOHANG), 0);
  kill(child, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
}

// One instant proves no hang (review): a job making progress also waits in NCCL or CUDA most of
// the time, and its RAS counts may differ for a moment. A hang needs a second look that shows no
// progress; counts that moved are progress, never a divergence; one look only is "waiting now".
TEST(AttachAnalysis, AHangOrACountDivergenceNeedsASecondLookThatShowsNoProgress) {
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, 0, 2, "cuStreamSynchronize"));
  n.procs.push_back(proc(101, 1, 2, "cuStreamSynchronize"));
  at::RasAnswer a;
  a.reached = a.json = true;
  ASSERT_TRUE(at::parse_ras_json(kRasReport, a));
  a.comms[0].missing.clear();
  a.comms[0].size = 2;  // rank 0: 7 ReduceScatter, rank 1: 6
  n.ras.push_back(a);
  // One look: the counts differ and every rank waits, but nothing is proven.
  at::AttachReport one = at::analyze_snapshots({n});
  EXPECT_EQ(one.exit_code, 4) << one.verdict;
  EXPECT_TRUE(one.divergences.empty()) << one.verdict;
  EXPECT_NE(one.verdict.find("waiting now, not proven hung"), std::string::npos) << one.verdict;
  EXPECT_NE(one.verdict.find("not proven"), std::string::npos) << one.verdict;
  EXPECT_EQ(one.verdict.find("the job hangs"), std::string::npos) << one.verdict;
  // The counts moved between the looks: the job progresses (exit 0), no divergence.
  same_second_look(n);
  n.second.ras[0].comms[0].ranks[0].coll_counts["AllGather"] = 60;
  n.second.ras[0].comms[0].ranks[1].coll_counts["AllGather"] = 61;
  at::AttachReport moving = at::analyze_snapshots({n});
  EXPECT_EQ(moving.exit_code, 0) << moving.verdict;
  EXPECT_TRUE(moving.divergences.empty()) << moving.verdict;
  EXPECT_TRUE(moving.ras_moved);
  EXPECT_NE(moving.verdict.find("the job is making progress"), std::string::npos) << moving.verdict;
  EXPECT_EQ(moving.verdict.find("diverged"), std::string::npos) << moving.verdict;
  // The same counts at both looks: the divergence is proven, exit 1.
  same_second_look(n);
  at::AttachReport still = at::analyze_snapshots({n});
  EXPECT_EQ(still.exit_code, 1) << still.verdict;
  ASSERT_EQ(still.divergences.size(), 1u) << still.verdict;
  EXPECT_NE(still.verdict.find("the same at two looks 1000 ms apart"), std::string::npos) << still.verdict;
  // No RAS: the stacks decide. The same waits, the waiting thread never woke: a hang.
  n.ras.clear();
  same_second_look(n);
  for (auto* ps : {&n.procs, &n.second.procs})
    for (at::ProcessSnapshot& p : *ps) p.threads[0].switches_read = true, p.threads[0].voluntary_switches = 5;
  at::AttachReport hung = at::analyze_snapshots({n});
  EXPECT_EQ(hung.exit_code, 1) << hung.verdict;
  EXPECT_NE(hung.verdict.find("in the same place at two looks"), std::string::npos) << hung.verdict;
  // The same wait, but rank 1's thread slept again in between (a loop of collectives): not proven.
  n.second.procs[1].threads[0].voluntary_switches = 9;
  at::AttachReport woke = at::analyze_snapshots({n});
  EXPECT_EQ(woke.exit_code, 4) << woke.verdict;
  EXPECT_NE(woke.verdict.find("rank 1 woke between two looks"), std::string::npos) << woke.verdict;
  // Rank 1 elsewhere at the second look: progress.
  n.second.procs[1] = proc(101, 1, 2, "epoll_wait");
  at::AttachReport left = at::analyze_snapshots({n});
  EXPECT_EQ(left.exit_code, 0) << left.verdict;
  EXPECT_NE(left.verdict.find("rank 1 left its wait"), std::string::npos) << left.verdict;
  // The second look survives the snapshot file.
  std::string why;
  auto back = at::node_from_json(at::to_json(n), why);
  ASSERT_TRUE(back) << why;
  EXPECT_TRUE(back->second.taken);
  EXPECT_EQ(back->second.procs.size(), 2u);
  EXPECT_EQ(back->procs[0].threads[0].voluntary_switches, 5u);
  EXPECT_EQ(at::analyze_snapshots({*back}).exit_code, 0);
}

// "No hang proven" needs the evidence it rests on (review): a rank with no native stack read
// (--no-native) and a RAS address that was not reached leave the verdict incomplete (exit 4,
// the missing evidence named); before, both exited 0 ("RAS counts (if any) agree").
TEST(AttachAnalysis, NoHangProvenNeedsEveryStackAndTheRasThatWasAsked) {
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, 0, 2, "cuStreamSynchronize"));
  n.procs.push_back(proc(101, 1, 2, "epoll_wait"));
  EXPECT_EQ(at::analyze_snapshots({n}).exit_code, 0);
  at::NodeSnapshot no_native = n;
  for (at::ProcessSnapshot& p : no_native.procs) p.threads[0].native.clear();
  at::AttachReport r = at::analyze_snapshots({no_native});
  EXPECT_EQ(r.exit_code, 4) << r.verdict;
  EXPECT_NE(r.verdict.find("no native stack of ranks 0-1 was read"), std::string::npos) << r.verdict;
  at::RasAnswer refused;
  refused.address = "127.0.0.1:1";
  refused.error = "connect: Connection refused";
  n.ras.push_back(refused);
  at::AttachReport q = at::analyze_snapshots({n});
  EXPECT_EQ(q.exit_code, 4) << q.verdict;
  EXPECT_NE(q.verdict.find("NCCL RAS at 127.0.0.1:1 not read: its counts are unknown"), std::string::npos) << q.verdict;
  EXPECT_EQ(q.verdict.find("agree"), std::string::npos) << q.verdict;
}

// A job's size comes from its environment or a snapshot file, both untrusted (review): above
// kMaxEnvRank it is no size, and the ranks without a snapshot are ranges between the ranks read,
// never a loop over every rank (WORLD_SIZE=200000000 ran out of memory).
TEST(AttachAnalysis, AHugeWorldSizeIsCappedAndMissingRanksAreRanges) {
  EXPECT_EQ(at::world_from_env({{"WORLD_SIZE", "200000000"}}), -1);
  EXPECT_EQ(at::world_from_env({{"WORLD_SIZE", "16777216"}}), 16777216);
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, 0, 1 << 29, "epoll_wait"));  // as a crafted --from snapshot says
  const auto t0 = std::chrono::steady_clock::now();
  at::AttachReport r = at::analyze_snapshots({n});
  EXPECT_EQ(r.expected_ranks, 0);
  EXPECT_EQ(r.no_snapshot_count, 0);
  n.procs[0].world_size = at::kMaxEnvRank;
  n.procs.push_back(proc(101, 5, at::kMaxEnvRank, "epoll_wait"));
  r = at::analyze_snapshots({n});
  const nlohmann::json j = at::render_json(r);
  const std::string text = at::render_text(r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.no_snapshot_count, at::kMaxEnvRank - 2);
  EXPECT_EQ(r.no_snapshot.size(), at::kListedNoSnapshot);
  EXPECT_NE(r.verdict.find("no snapshot of ranks 1-4,6-16777215"), std::string::npos) << r.verdict;
  EXPECT_NE(text.find("Ranks with no snapshot: 1-4,6-16777215"), std::string::npos) << text;
  EXPECT_EQ(j["no_snapshot_ranges"].size(), 2u);
}

// Two processes claiming one rank (a forked DataLoader worker inherits RANK) are named, and the
// verdict is never clean (review: it said "no hang proven", exit 0). RAS counts are never given
// to a process by its pid alone across nodes (pids repeat there) or when two RAS ranks share it.
TEST(AttachAnalysis, ARankClaimedTwiceAndRasCountsOfAnAmbiguousPidAreNamedNotUsed) {
  at::NodeSnapshot n;
  n.host = "node";
  n.procs.push_back(proc(100, 0, 2, "cuStreamSynchronize"));
  n.procs.push_back(proc(101, 1, 2, "epoll_wait"));
  n.procs.push_back(proc(102, 1, 2, "epoll_wait"));
  at::AttachReport d = at::analyze_snapshots({n});
  EXPECT_EQ(d.exit_code, 4) << d.verdict;
  EXPECT_NE(d.verdict.find("rank 1 is claimed by several processes (node pid 101, node pid 102)"), std::string::npos)
      << d.verdict;
  // Two nodes, RAS names hosts by address: pid 100 is on both, so neither count is attributed.
  at::NodeSnapshot a, b;
  a.host = "a", b.host = "b";
  a.procs.push_back(proc(100, 0, 2, "cuStreamSynchronize"));
  a.procs[0].host = "a";
  b.procs.push_back(proc(100, 1, 2, "cuStreamSynchronize"));
  b.procs[0].host = "b";
  at::RasAnswer ras;
  ras.reached = ras.json = true;
  ASSERT_TRUE(at::parse_ras_json(kRasReport, ras));
  ras.comms[0].missing.clear();
  ras.comms[0].ranks[1].pid = 100;  // both RAS ranks have pid 100, on hosts 10.0.0.1
  a.ras.push_back(ras);
  same_second_look(a);
  same_second_look(b);
  at::AttachReport r = at::analyze_snapshots({a, b});
  for (const at::RankFinding& f : r.ranks) EXPECT_TRUE(f.ras_counts.empty()) << f.rank;
  EXPECT_TRUE(r.divergences.empty()) << r.verdict;
  bool named = false;
  for (const std::string& s : r.ras_notes) named |= s.find("not attributed") != std::string::npos;
  EXPECT_TRUE(named);
}
