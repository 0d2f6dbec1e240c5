#include "hang_report.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "clock.h"
#include "config.h"
#include "log.h"
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
    sqlite3* db = nullptr;
    std::string path = dir + "/" + name;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_busy_timeout(db, 200);
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='global_rank'", -1, &st,
                             nullptr) == SQLITE_OK &&
          sqlite3_step(st) == SQLITE_ROW) {
        int r = sqlite3_column_int(st, 0);
        if (r >= 0 && r < lowest) lowest = r;
      }
      sqlite3_finalize(st);
    }
    sqlite3_close(db);
  }
  closedir(d);
  return lowest;
}

// The analyzer is started as a clone whose exit signals nobody (exit signal 0): a posix_spawn'd
// child would send the program a SIGCHLD it never asked for (a DataLoader's or a supervisor's
// handler would run; docs/review-2026-12-02.md L10). CLONE_VFORK: the parent waits until the
// child has exec'd (or failed, leaving its errno in the shared request). All signals stay
// blocked until the child has reset the program's handlers, which must not run in a child that
// shares the program's memory; then it restores the program's mask, and execve.
struct SpawnRequest {
  const char* path;
  char** argv;
  char** envp;
  sigset_t mask{};
  int error = 0;
};

int exec_analyzer(void* arg) {
  auto* req = static_cast<SpawnRequest*>(arg);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa;
    if (sigaction(sig, nullptr, &sa) != 0) continue;
    if ((sa.sa_flags & SA_SIGINFO) || (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN)) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(sig, &dfl, nullptr);
    }
  }
  dup2(2, 1);  // the report goes to the job's log (stderr)
  sigprocmask(SIG_SETMASK, &req->mask, nullptr);
  execve(req->path, req->argv, req->envp);
  req->error = errno;
  _exit(127);
}

pid_t spawn_without_sigchld(SpawnRequest& req) {
  constexpr size_t kStack = 64 * 1024;
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    req.error = errno;
    return -1;
  }
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &req.mask);
  pid_t pid = clone(exec_analyzer, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK, &req);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &req.mask, nullptr);
  munmap(stack, kStack);
  if (pid < 0) {
    req.error = clone_errno;
    return -1;
  }
  if (req.error != 0) {  // execve failed: the child has exited
    waitpid(pid, nullptr, __WALL);
    return -1;
  }
  return pid;
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
  writer_->flush(1000);  // this process's own hang rows first
  SpawnRequest req{analyzer, argv, envp.data()};
  pid_t pid = spawn_without_sigchld(req);
  if (pid < 0) warn("cannot start the analyzer %s: %s", analyzer, strerror(req.error));
  else children_.push_back(pid);
}

void HangReporter::reap_children() {
  for (size_t i = 0; i < children_.size();) {
    if (waitpid(children_[i], nullptr, WNOHANG | __WALL) != 0) children_.erase(children_.begin() + i);
    else i++;
  }
}

}  // namespace lockstep::rec
