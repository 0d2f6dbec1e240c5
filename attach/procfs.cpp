#include "procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "rank_env.h"

namespace lockstep::attach {

std::optional<std::string> read_small_file(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[8192];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd, buf, std::min(sizeof buf, max_bytes - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

namespace {

std::vector<int> numeric_entries(const std::string& dir) {
  std::vector<int> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long v = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == 0 && v > 0) out.push_back(static_cast<int>(v));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find('\0', i);
    if (j == std::string::npos) j = s.size();
    out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// Fields after "(comm)" of /proc/.../stat (comm may hold spaces and parentheses).
std::vector<std::string> stat_fields(const std::string& path) {
  auto s = read_small_file(path, 4096);
  std::vector<std::string> out;
  if (!s) return out;
  size_t r = s->rfind(')');
  if (r == std::string::npos) return out;
  std::istringstream in(s->substr(r + 1));
  std::string f;
  while (in >> f) out.push_back(f);
  return out;  // out[0] = state (field 3), out[1] = ppid (field 4)
}

int int_of(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return -1;
  char* end = nullptr;
  long v = std::strtol(it->second.c_str(), &end, 10);
  return (*end == 0 && v >= 0 && v < (1L << 30)) ? static_cast<int>(v) : -1;
}

}  // namespace

std::optional<uint64_t> voluntary_switches(int pid, int tid) {
  auto s = read_small_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/status", 1 << 16);
  if (!s) return std::nullopt;
  const char* key = "\nvoluntary_ctxt_switches:";
  size_t p = s->find(key);
  if (p == std::string::npos) return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s->c_str() + p + std::strlen(key), &end, 10);
  if (end == s->c_str() + p + std::strlen(key)) return std::nullopt;
  return static_cast<uint64_t>(v);
}

std::vector<int> thread_ids(int pid) { return numeric_entries("/proc/" + std::to_string(pid) + "/task"); }

std::map<std::string, std::string> environment_of(int pid) {
  std::map<std::string, std::string> env;
  auto s = read_small_file("/proc/" + std::to_string(pid) + "/environ", 4 << 20);
  if (!s) return env;
  for (const std::string& kv : split_nul(*s)) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos && eq > 0) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

std::vector<std::string> cmdline_of(int pid) {
  auto s = read_small_file("/proc/" + std::to_string(pid) + "/cmdline", 64 << 10);
  return s ? split_nul(*s) : std::vector<std::string>{};
}

char thread_state(int pid, int tid) {
  auto f = stat_fields("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
  return f.empty() || f[0].empty() ? '?' : f[0][0];
}

int parent_of(int pid) {
  auto f = stat_fields("/proc/" + std::to_string(pid) + "/stat");
  return f.size() < 2 ? -1 : std::atoi(f[1].c_str());
}

double start_time_of(int pid) {
  auto f = stat_fields("/proc/" + std::to_string(pid) + "/stat");
  auto st = read_small_file("/proc/stat");
  if (f.size() < 20 || !st) return 0;
  const size_t b = st->find("\nbtime ");
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (b == std::string::npos || ticks <= 0) return 0;
  return std::strtod(st->c_str() + b + 7, nullptr) + std::strtod(f[19].c_str(), nullptr) / double(ticks);
}

std::string cwd_of(int pid) {
  char buf[4096];
  ssize_t n = ::readlink(("/proc/" + std::to_string(pid) + "/cwd").c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

std::string absolute_in(const std::string& cwd, const std::string& path) {
  if (path.empty() || path[0] == '/' || cwd.empty()) return path;
  return cwd + "/" + path;
}

std::vector<int> process_tree(int root) {
  std::vector<int> out{root};
  std::map<int, std::vector<int>> children;
  bool scanned = false;
  for (size_t i = 0; i < out.size() && out.size() < 100000; ++i) {
    const int pid = out[i];
    std::set<int> kids;
    bool have_children_file = false;
    for (int tid : thread_ids(pid)) {
      auto s = read_small_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/children", 1 << 16);
      if (!s) continue;
      have_children_file = true;
      std::istringstream in(*s);
      int c;
      while (in >> c) kids.insert(c);
    }
    if (!have_children_file) {  // kernel without CONFIG_PROC_CHILDREN: one scan of /proc
      if (!scanned) {
        for (int p : numeric_entries("/proc")) children[parent_of(p)].push_back(p);
        scanned = true;
      }
      kids.insert(children[pid].begin(), children[pid].end());
    }
    for (int c : kids)
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

std::vector<int> leaf_processes(const std::vector<int>& tree) {
  std::set<int> parents;
  for (int p : tree) parents.insert(parent_of(p));
  std::vector<int> out;
  for (int p : tree)
    if (!parents.count(p)) out.push_back(p);
  return out;
}

std::vector<Mapping> mappings_of(int pid) {
  std::vector<Mapping> out;
  auto s = read_small_file("/proc/" + std::to_string(pid) + "/maps", 64 << 20);
  if (!s) return out;
  std::istringstream in(*s);
  std::string line;
  while (std::getline(in, line)) {
    Mapping m;
    char perms[8] = {};
    unsigned long long start, end, off;
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %*s %*s%n", &start, &end, perms, &off, &consumed) < 4) continue;
    m.start = start, m.end = end, m.offset = off;
    m.read = perms[0] == 'r', m.write = perms[1] == 'w', m.exec = perms[2] == 'x';
    std::string rest = line.substr(static_cast<size_t>(consumed));
    size_t p = rest.find_first_not_of(' ');
    if (p != std::string::npos) m.path = rest.substr(p);
    out.push_back(std::move(m));
  }
  return out;
}

// The target's rank and job size from its environment, by the variables and in the order the
// recorder labels its files (schema/rank_env.h): attach and the trace name a process alike.
int rank_from_env(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  const int rank = lockstep::rank_from_env(kGlobalRankVariables, get).rank;
  return rank < kMaxEnvRank ? rank : -1;
}

int world_from_env(const std::map<std::string, std::string>& env) {
  for (const RankVariable& v : kWorldSizeVariables)
    if (int n = int_of(env, v.name); n > 0) return n <= kMaxEnvRank ? n : -1;  // a job's ranks are below kMaxEnvRank
  return -1;
}

bool have_cap_sys_ptrace() {
  auto s = read_small_file("/proc/self/status", 1 << 16);
  if (!s) return false;
  size_t p = s->find("CapEff:");
  if (p == std::string::npos) return false;
  unsigned long long caps = std::strtoull(s->c_str() + p + 7, nullptr, 16);
  return caps & (1ull << 19);  // CAP_SYS_PTRACE
}

namespace {

long status_field(int pid, const char* key) {
  auto s = read_small_file("/proc/" + std::to_string(pid) + "/status", 1 << 16);
  if (!s) return -1;
  size_t p = s->find(key);
  if (p == std::string::npos) return -1;
  return std::strtol(s->c_str() + p + std::strlen(key), nullptr, 10);
}

}  // namespace

std::optional<Refusal> ptrace_refusal(int pid) {
  struct stat st;
  const std::string dir = "/proc/" + std::to_string(pid);
  if (::stat(dir.c_str(), &st) != 0) return Refusal{"no such process", "check the PID (it may have exited)"};
  const bool cap = have_cap_sys_ptrace();
  if (st.st_uid != ::geteuid() && !cap)
    return Refusal{"the process belongs to user " + std::to_string(st.st_uid) + ", lockstep runs as " +
                       std::to_string(::geteuid()) + " without CAP_SYS_PTRACE",
                   "run lockstep attach as the job's user (srun --overlap --jobid does), or as root"};
  if (long tracer = status_field(pid, "TracerPid:"); tracer > 0)
    return Refusal{"the process is already traced by PID " + std::to_string(tracer) + " (a debugger or profiler)",
                   "detach that tracer (gdb: detach; py-spy/strace: stop it) and run again"};
  auto scope = read_small_file("/proc/sys/kernel/yama/ptrace_scope", 16);
  if (scope && !scope->empty() && !cap) {
    const int v = std::atoi(scope->c_str());
    if (v == 3)
      return Refusal{"kernel.yama.ptrace_scope is 3: no process may ptrace another",
                     "only a reboot lowers it; lockstep attach cannot read native stacks on this node"};
    if (v == 2)
      return Refusal{"kernel.yama.ptrace_scope is 2: only processes with CAP_SYS_PTRACE may ptrace",
                     "run as root, or give lockstep CAP_SYS_PTRACE (setcap cap_sys_ptrace+ep $(which lockstep))"};
    bool ancestor = false;
    for (int p = parent_of(pid), hops = 0; p > 0 && hops < 4096; p = parent_of(p), ++hops)
      if (p == ::getpid()) ancestor = true;
    if (v == 1 && !ancestor)
      return Refusal{"kernel.yama.ptrace_scope is 1: only a process's ancestors may ptrace it",
                     "run as root, or with CAP_SYS_PTRACE (setcap cap_sys_ptrace+ep $(which lockstep)), or set "
                     "kernel.yama.ptrace_scope=0 (sysctl, needs root)"};
  }
  return std::nullopt;
}

std::string refusal_fix(const std::optional<Refusal>& found, bool have_cap) {
  if (found) return found->reason + "; " + found->fix;
  if (!have_cap) return "run as the job's user or as root (CAP_SYS_PTRACE)";
  return "lockstep has CAP_SYS_PTRACE and was refused all the same: the process was exec'ing (a "
         "set-user-ID program) or a security module (SELinux, AppArmor) or its container forbids "
         "tracing; run attach again, and see the node's audit log if it persists";
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace lockstep::attach
