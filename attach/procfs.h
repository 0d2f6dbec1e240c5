// Reading another process through /proc, bounded and read-only (attach/, docs/attach.md).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::attach {

// Whole file, at most max_bytes; nullopt when it cannot be opened.
std::optional<std::string> read_small_file(const std::string& path, size_t max_bytes = 1 << 20);

std::vector<int> thread_ids(int pid);                         // /proc/PID/task
std::map<std::string, std::string> environment_of(int pid);   // /proc/PID/environ
std::vector<std::string> cmdline_of(int pid);                 // /proc/PID/cmdline
char thread_state(int pid, int tid);                          // stat field 3, '?' if unknown
// voluntary_ctxt_switches of /proc/PID/task/TID/status (how often the thread went to sleep).
std::optional<uint64_t> voluntary_switches(int pid, int tid);
int parent_of(int pid);                                       // stat field 4, -1 if unknown
// When the process started (stat field 22 over /proc/stat's btime), seconds since the epoch; 0
// when unknown.
double start_time_of(int pid);
// The process's working directory (/proc/PID/cwd), "" when unreadable; `path` made absolute
// against it (unchanged when already absolute or when the cwd is unknown).
std::string cwd_of(int pid);
std::string absolute_in(const std::string& cwd, const std::string& path);
// pid and all its descendants (children first found through /proc/PID/task/*/children, else a
// scan of /proc), in breadth-first order.
std::vector<int> process_tree(int pid);
// Processes whose cmdline does not look like a shell or launcher: the tree's leaves that run a
// program (pid itself included when it has no children).
std::vector<int> leaf_processes(const std::vector<int>& tree);

struct Mapping {
  uint64_t start = 0, end = 0, offset = 0;
  bool exec = false, read = false, write = false;
  std::string path;
};
std::vector<Mapping> mappings_of(int pid);  // /proc/PID/maps

// The first process rank variable of env (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK),
// -1 when none is an integer. world: WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE.
// A rank at or above this is no rank (as the analyzer's limit on a job's ranks).
inline constexpr int kMaxEnvRank = 1 << 24;
int rank_from_env(const std::map<std::string, std::string>& env);
int world_from_env(const std::map<std::string, std::string>& env);

// Why this process may not ptrace `pid`, with the fix, or nullopt when nothing forbids it as
// far as /proc tells (ptrace_scope, CAP_SYS_PTRACE, owner, an existing tracer).
struct Refusal {
  std::string reason;
  std::string fix;
};
std::optional<Refusal> ptrace_refusal(int pid);
// What to tell the user when ptrace refused a process: the refusal's own fix where
// ptrace_refusal found one; else, without CAP_SYS_PTRACE, to run as the job's user or root; with
// it (root already), that running as root is no fix: the process was changing identity or
// something other than permissions refused.
std::string refusal_fix(const std::optional<Refusal>& found, bool have_cap_sys_ptrace);
bool have_cap_sys_ptrace();

std::string hostname();

}  // namespace lockstep::attach
