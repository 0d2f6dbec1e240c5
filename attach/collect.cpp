#include "collect.h"

#include <glob.h>
#include <sys/stat.h>

#include <ctime>
#include <set>

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
  if (auto d = env.find(schema::env::kDir); d != env.end() && !d->second.empty()) {
    p.lockstep_dir = absolute_in(cwd, d->second);
    p.lockstep_dir_from = schema::env::kDir;
  } else if (maps_recorder(pid)) {
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
  if (o.ras) {
    std::set<std::string> asked;
    for (const ProcessSnapshot& p : n.procs)
      if (p.error.empty() && !p.nccl_library.empty() && asked.insert(p.ras_address).second) {
        n.ras.push_back(query_ras(p.ras_address, o.ras_timeout_s));
        release_late_threads(std::chrono::milliseconds(0));
      }
  }
  release_late_threads(std::chrono::milliseconds(0));
  return n;
}

}  // namespace lockstep::attach
