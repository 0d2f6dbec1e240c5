#include "collect.h"

#include <glob.h>
#include <sys/stat.h>

#include <ctime>
#include <algorithm>
#include <set>

#include <thread>

#include "attach_analysis.h"
#include "env_vars.h"
#include "lockstep_version.h"
#include "procfs.h"
#include "ptrace_stacks.h"
#include "ras_client.h"
#include "remote_python.h"

namespace lockstep::attach {

namespace {

bool maps_recorder(int pid) {
  for (const Mapping& m : mappings_of(pid))
    if (m.path.find("/liblockstep.so") != std::string::npos) return true;
  return false;
}

// Where the job keeps evidence of its own: its lockstep trace directory (LOCKSTEP_DIR, or the
// recorder's default directory when the recorder is mapped without it) and its Flight Recorder
// dumps (the prefix torch writes them at). A dump older than the process is another job's.
void find_job_evidence(int pid, const std::map<std::string, std::string>& env, ProcessSnapshot& p) {
  const std::string cwd = cwd_of(pid);
  p.recorder_mapped = maps_recorder(pid);
  p.start_time = start_time_of(pid);
  if (auto d = env.find(schema::env::kDir); d != env.end() && !d->second.empty()) {
    p.lockstep_dir = absolute_in(cwd, d->second);
    p.lockstep_dir_from = schema::env::kDir;
  } else if (p.recorder_mapped) {
    p.lockstep_dir = absolute_in(cwd, schema::env::kDefaultDir);
    p.lockstep_dir_from = std::string("liblockstep.so mapped, no ") + schema::env::kDir + ": its default directory";
  }
  for (const char* var : {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}) {
    auto fr = env.find(var);
    if (fr == env.end() || fr->second.empty()) continue;
    p.fr_dump_prefix = absolute_in(cwd, fr->second);
    p.fr_dump_variable = var;
    break;
  }
  if (p.fr_dump_prefix.empty()) return;
  const double started = start_time_of(pid);
  glob_t g{};
  if (::glob((p.fr_dump_prefix + "*").c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc && i < 4096; ++i) {
      struct stat st{};
      if (::stat(g.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const double mtime = double(st.st_mtim.tv_sec) + double(st.st_mtim.tv_nsec) * 1e-9;
      // The start time has clock-tick resolution: a second of slack.
      (started > 0 && mtime + 1 < started ? p.fr_dumps_stale : p.fr_dumps).emplace_back(g.gl_pathv[i]);
    }
  ::globfree(&g);
}

// Each thread's voluntary context switches, read while the process runs (never during a stop:
// the stop itself is a switch).
void read_switches(int pid, std::vector<ThreadSnapshot>& threads) {
  for (ThreadSnapshot& t : threads)
    if (auto v = voluntary_switches(pid, t.tid)) t.switches_read = true, t.voluntary_switches = *v;
}

}  // namespace

ProcessSnapshot snapshot_process(int pid, const CollectOptions& o) {
  ProcessSnapshot p;
  p.pid = pid;
  p.host = hostname();
  p.cmdline = cmdline_of(pid);
  const auto env = environment_of(pid);
  p.rank = rank_from_env(env);
  p.world_size = world_from_env(env);
  for (const auto& [k, v] : env)
    if (k.rfind("NCCL_", 0) == 0 || k.rfind("TORCH_NCCL_", 0) == 0) p.nccl_env[k] = v;
  auto ras = env.find("NCCL_RAS_ADDR");
  p.ras_address = ras != env.end() && !ras->second.empty() ? ras->second : kDefaultRasAddress;
  find_job_evidence(pid, env, p);
  if (p.cmdline.empty() && env.empty()) {
    if (auto r = ptrace_refusal(pid)) {
      p.error = r->reason, p.fix = r->fix;
      return p;
    }
  }
  for (const Mapping& m : mappings_of(pid))
    if (m.path.find("/libnccl.so") != std::string::npos || m.path.find("/libnccl-") != std::string::npos) {
      p.nccl_library = m.path;
      break;
    }
  RemotePythonReader python(pid);
  p.python_status = python.status();
  RemotePython py;
  if (!o.native) {
    for (int tid : thread_ids(pid)) {
      ThreadSnapshot t;
      t.tid = tid;
      t.state = thread_state(pid, tid);
      p.threads.push_back(t);
    }
    if (python.found()) py = python.read();
    merge_python_threads(py, p.threads);
    return p;
  }
  if (auto r = ptrace_refusal(pid)) {
    p.error = r->reason, p.fix = r->fix;
    return p;
  }
  NativeCapture nc = capture_native_stacks(pid, p.threads, [&](std::chrono::steady_clock::time_point deadline) {
    if (python.found()) py = python.read(deadline);
  });
  if (python.found()) p.python_status = py.status, p.python_cut_short = py.cut_short;
  p.stopped_ms = nc.stopped_ms;
  p.threads_stopped = nc.threads_stopped;
  p.stop = nc.stop;
  if (!nc.error.empty()) {
    p.error = nc.error;
    // A process that exited is no permission problem: no fix to give.
    if (nc.refused) p.fix = refusal_fix(ptrace_refusal(pid), have_cap_sys_ptrace());
  }
  merge_python_threads(py, p.threads);
  return p;
}

NodeSnapshot collect_node(const std::vector<int>& pids, const CollectOptions& o) {
  NodeSnapshot n;
  n.host = hostname();
  n.lockstep_version = LOCKSTEP_VERSION;
  char when[64];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  n.taken_at = when;
  install_detach_on_signals();
  for (int pid : pids) n.procs.push_back(snapshot_process(pid, o));
  // A thread that had not stopped within the stop's bound is still seized (ptrace_stacks.h):
  // let go as soon as its system call returns, here and between the RAS queries.
  release_late_threads(std::chrono::milliseconds(200));
  std::vector<std::string> asked;
  if (o.ras) {
    for (const ProcessSnapshot& p : n.procs)
      if (p.error.empty() && !p.nccl_library.empty() &&
          std::find(asked.begin(), asked.end(), p.ras_address) == asked.end()) {
        asked.push_back(p.ras_address);
        n.ras.push_back(query_ras(p.ras_address, o.ras_timeout_s));
        release_late_threads(std::chrono::milliseconds(0));
      }
  }
  if (o.confirm_ms <= 0) return release_late_threads(std::chrono::milliseconds(0)), n;
  // The second look: one instant proves no hang. RAS again; the stacks again only when the job
  // may be hung (the counts did not move, every rank read waited), since each read stops it.
  for (ProcessSnapshot& p : n.procs)
    if (p.error.empty()) read_switches(p.pid, p.threads);
  const auto first_done = std::chrono::steady_clock::now();
  const auto until = first_done + std::chrono::milliseconds(o.confirm_ms);
  release_late_threads(std::chrono::milliseconds(o.confirm_ms));
  std::this_thread::sleep_until(until);
  n.second.taken = true;
  n.second.after_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_done).count();
  for (const std::string& addr : asked) {
    n.second.ras.push_back(query_ras(addr, o.ras_timeout_s));
    release_late_threads(std::chrono::milliseconds(0));
  }
  bool all_wait = false;
  for (const ProcessSnapshot& p : n.procs) {
    if (!p.error.empty()) continue;
    if (!waits_in_nccl_or_cuda(p)) {
      all_wait = false;
      break;
    }
    all_wait = true;
  }
  if (ras_counts_moved(n.ras, n.second.ras))
    n.second.stacks_skipped = "NCCL RAS counts moved between the looks";
  else if (!o.native)
    n.second.stacks_skipped = "--no-native";
  else if (!all_wait)
    n.second.stacks_skipped = "not every process read waited in NCCL or CUDA at the first look";
  else
    for (const ProcessSnapshot& p : n.procs) {
      if (!p.error.empty()) continue;
      std::vector<ThreadSnapshot> before;
      for (int tid : thread_ids(p.pid)) {
        ThreadSnapshot t;
        t.tid = tid;
        before.push_back(t);
      }
      read_switches(p.pid, before);
      ProcessSnapshot again = snapshot_process(p.pid, o);
      for (ThreadSnapshot& t : again.threads)
        for (const ThreadSnapshot& b : before)
          if (b.tid == t.tid) t.switches_read = b.switches_read, t.voluntary_switches = b.voluntary_switches;
      n.second.procs.push_back(std::move(again));
      release_late_threads(std::chrono::milliseconds(0));
    }
  release_late_threads(std::chrono::milliseconds(0));
  return n;
}

}  // namespace lockstep::attach
