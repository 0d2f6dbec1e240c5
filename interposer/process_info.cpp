#include "process_info.h"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "config.h"
#include "rank_env.h"

extern char** environ;

namespace lockstep::rec {

ProcessInfo read_process_info() {
  ProcessInfo p;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  p.host = host;
  p.pid = getpid();

  // LOCKSTEP_RANK, then the launchers' variables: schema/rank_env.h.
  RankFromEnv rank = global_rank_from_env();
  if (rank.rank >= 0) {
    p.global_rank = rank.rank;
    p.global_rank_source = rank.source;
  }

  for (const char* var : kLauncherVars) {
    const char* v = getenv(var);
    if (!v || !*v) continue;
    p.launcher.emplace_back(launcher_meta_key(var), std::string(v, strnlen(v, 4096)));  // a node list can be long
  }

  std::ifstream cmd("/proc/self/cmdline", std::ios::binary);
  p.cmdline.assign(std::istreambuf_iterator<char>(cmd), {});
  while (!p.cmdline.empty() && p.cmdline.back() == '\0') p.cmdline.pop_back();
  for (char& c : p.cmdline)
    if (c == '\0') c = ' ';
  char exe[PATH_MAX] = {};
  if (readlink("/proc/self/exe", exe, sizeof exe - 1) > 0) p.exe = exe;

  p.trace_dir = config().dir;
  if (p.trace_dir[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd)) p.trace_dir = std::string(cwd) + "/" + p.trace_dir;
  }

  for (char** e = environ; e && *e; e++) {
    const char* s = *e;
    if (strncmp(s, "NCCL_", 5) && strncmp(s, "TORCH_NCCL_", 11) && strncmp(s, "CUDA_", 5) &&
        strncmp(s, "LOCKSTEP_", 9))
      continue;
    const char* eq = strchr(s, '=');
    if (!eq) continue;
    p.env.emplace_back(std::string(s, eq), std::string(eq + 1));
  }
  return p;
}

}  // namespace lockstep::rec
