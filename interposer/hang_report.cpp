#include "hang_report.h"

#include <dirent.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "trace_file.h"
#include "trace_schema.h"
#include "writer.h"

extern char** environ;

namespace lockstep::rec {

void HangReporter::report(int64_t now, int64_t stalled_ns, std::vector<StuckOps> heads,
                          size_t n_in_flight) {
  std::sort(heads.begin(), heads.end(), [](const StuckOps& a, const StuckOps& b) {
    return a.first->call_index < b.first->call_index;
  });
  char rank[32];
  if (global_rank_ >= 0) snprintf(rank, sizeof rank, "rank %d", global_rank_);
  else snprintf(rank, sizeof rank, "rank ?");
  std::string msg = std::string(rank) + " (pid " + std::to_string(getpid()) +
                    "): no NCCL progress for " + std::to_string(stalled_ns / 1000000000) +
                    "s; in flight:";
  size_t shown = 0;
  for (const StuckOps& h : heads) {
    if (shown == 8) break;
    const InFlightOp* op = h.first;
    char buf[320];
    int n = snprintf(buf, sizeof buf, "%s comm %016llx seq %lld %s count %lld", shown ? "," : "",
                     static_cast<unsigned long long>(op->comm_hash),
                     static_cast<long long>(op->seq), op_name(op->op),
                     static_cast<long long>(op->count));
    if (h.last != h.first && n > 0 && size_t(n) < sizeof buf)  // covering completion
      snprintf(buf + n, sizeof buf - size_t(n), " or a later op up to comm %016llx seq %lld %s",
               static_cast<unsigned long long>(h.last->comm_hash),
               static_cast<long long>(h.last->seq), op_name(h.last->op));
    msg += buf;
    shown++;
  }
  if (n_in_flight > shown) msg += " (+" + std::to_string(n_in_flight - shown) + " more queued)";
  msg += "; trace: " + trace_dir_;
  warn("%s", msg.c_str());
  writer_->add_hang(now, wall_ns(), int(n_in_flight), "lockstep: " + msg);
  maybe_spawn_analyzer();
}

namespace {
// Lowest global rank among the trace files this process can see (INT32_MAX if none readable).
int lowest_rank_in(const std::string& dir) {
  int lowest = INT32_MAX;
  DIR* d = opendir(dir.c_str());
  if (!d) return lowest;
  size_t suffix = strlen(schema::kFileSuffix);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() <= suffix || name.compare(name.size() - suffix, suffix,
                                              schema::kFileSuffix) != 0)
      continue;
    int r = trace_file::read_global_rank(dir + "/" + name, 200);
    if (r >= 0 && r < lowest) lowest = r;
  }
  closedir(d);
  return lowest;
}
}  // namespace

void HangReporter::maybe_spawn_analyzer() {
  const char* analyzer = config().analyzer.c_str();
  if (!*analyzer || analyzer_spawned_) return;
  // One diagnosis per job: only the lowest rank that has a trace here runs it.
  if (global_rank_ != 0 && (global_rank_ < 0 || lowest_rank_in(trace_dir_) < global_rank_))
    return;
  analyzer_spawned_ = true;
  std::vector<std::string> env_store;
  for (char** e = environ; e && *e; e++)
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) env_store.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string a0 = analyzer, a1 = "analyze", a2 = trace_dir_;
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);  // the report goes to the job's log (stderr)
  pid_t pid = 0;
  writer_->flush(1000);  // this process's own hang rows first
  int rc = posix_spawn(&pid, analyzer, &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) warn("cannot start the analyzer %s: %s", analyzer, strerror(rc));
  else children_.push_back(pid);
}

void HangReporter::reap_children() {
  for (size_t i = 0; i < children_.size();) {
    if (waitpid(children_[i], nullptr, WNOHANG) != 0) children_.erase(children_.begin() + i);
    else i++;
  }
}

}  // namespace lockstep::rec
