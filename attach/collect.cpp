#include "collect.h"

#include <glob.h>

#include <ctime>
#include <set>

#include "lockstep_version.h"
#include "procfs.h"
#include "ptrace_stacks.h"
#include "ras_client.h"
#include "remote_python.h"

namespace lockstep::attach {

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
  if (auto d = env.find("LOCKSTEP_DIR"); d != env.end()) p.lockstep_dir = d->second;
  if (auto fr = env.find("TORCH_FR_DUMP_TEMP_FILE"); fr != env.end() && !fr->second.empty()) {
    glob_t g{};
    if (::glob((fr->second + "*").c_str(), GLOB_NOSORT, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc && i < 4096; ++i) p.fr_dumps.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
  }
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
  NativeCapture nc = capture_native_stacks(pid, p.threads, [&] {
    if (python.found()) py = python.read();
  });
  p.stopped_ms = nc.stopped_ms;
  p.threads_stopped = nc.threads_stopped;
  if (!nc.error.empty()) {
    p.error = nc.error;
    auto r = ptrace_refusal(pid);
    p.fix = r ? r->reason + "; " + r->fix : "run as the job's user or as root (CAP_SYS_PTRACE)";
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
  if (o.ras) {
    std::set<std::string> asked;
    for (const ProcessSnapshot& p : n.procs)
      if (p.error.empty() && !p.nccl_library.empty() && asked.insert(p.ras_address).second) n.ras.push_back(query_ras(p.ras_address, o.ras_timeout_s));
  }
  return n;
}

}  // namespace lockstep::attach
