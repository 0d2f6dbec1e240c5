#include "hang_report.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "sqlite_section.h"
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
    // The communicator as analyze names it (identity.h short_hash: the first 8 hex digits), so
    // the line's "comm 331d2a30" is a --comm selector too.
    int n = snprintf(buf, sizeof buf, "%s comm %08llx seq %lld %s count=%lld", shown ? "," : "",
                     static_cast<unsigned long long>(op->comm_hash >> 32),
                     static_cast<long long>(op->seq), op_name(op->op),
                     static_cast<long long>(op->count));
    if (h.last != h.first && n > 0 && size_t(n) < sizeof buf)  // covering completion
      snprintf(buf + n, sizeof buf - size_t(n), " or a later op up to comm %08llx seq %lld %s",
               static_cast<unsigned long long>(h.last->comm_hash >> 32),
               static_cast<long long>(h.last->seq), op_name(h.last->op));
    msg += buf;
    shown++;
  }
  if (n_in_flight > shown) msg += " (+" + std::to_string(n_in_flight - shown) + " more queued)";
  msg += "; trace: " + trace_dir_;
  // Without an analyzer to run (plain LD_PRELOAD), the line says what to run next.
  if (config().analyzer.empty()) msg += " (run: lockstep analyze " + trace_dir_ + ")";
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
    int r;
    {
      SqliteSection in_sqlite;
      r = trace_file::read_global_rank(dir + "/" + name, 200);
    }
    if (r >= 0 && r < lowest) lowest = r;
  }
  closedir(d);
  return lowest;
}

// The analyzer must not be the program's child: its exit would send the program a SIGCHLD it
// never asked for (a DataLoader's or a supervisor's handler runs, a wait(-1) loop reaps it;
// docs/review-2026-12-02.md L10). exec resets a child's exit signal to SIGCHLD, so it is started
// by an intermediate clone whose own exit signals nobody (exit signal 0, CLONE_VM | CLONE_VFORK:
// the program's memory, the program waits meanwhile): the intermediate forks the analyzer with the
// raw syscall (no pthread_atfork handler of the program runs) and exits; the analyzer is then
// reparented to init. Every signal stays blocked until the analyzer has reset the program's
// handlers; then it restores the program's mask and execs. An exec failure comes back as errno
// through a close-on-exec pipe.
struct SpawnRequest {
  const char* path;
  char** argv;
  char** envp;
  sigset_t mask{};
  int status_pipe[2] = {-1, -1};
  int error = 0;
};

[[noreturn]] void exec_analyzer(SpawnRequest* req) {
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
  int e = errno;
  ssize_t ignored = write(req->status_pipe[1], &e, sizeof e);
  (void)ignored;
  _exit(127);
}

int start_analyzer_detached(void* arg) {
  auto* req = static_cast<SpawnRequest*>(arg);
  long pid = syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr);  // fork, no atfork
  if (pid == 0) exec_analyzer(req);
  if (pid < 0) req->error = errno;  // shared memory: the program reads it
  _exit(0);
}

bool spawn_detached(SpawnRequest& req) {
  constexpr size_t kStack = 64 * 1024;
  if (pipe2(req.status_pipe, O_CLOEXEC) != 0) {
    req.error = errno;
    return false;
  }
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    req.error = errno;
    close(req.status_pipe[0]);
    close(req.status_pipe[1]);
    return false;
  }
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &req.mask);
  pid_t mid = clone(start_analyzer_detached, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK, &req);
  if (mid < 0) req.error = errno;
  pthread_sigmask(SIG_SETMASK, &req.mask, nullptr);
  if (mid > 0) waitpid(mid, nullptr, __WALL);  // it has exited (CLONE_VFORK)
  munmap(stack, kStack);
  close(req.status_pipe[1]);
  if (req.error == 0) {  // the analyzer exec'd (EOF) or says why it could not
    // Bounded: a child another thread forked meanwhile may hold the write end open.
    pollfd p{req.status_pipe[0], POLLIN, 0};
    int e = 0;
    if (poll(&p, 1, 2000) > 0 && read(req.status_pipe[0], &e, sizeof e) == ssize_t(sizeof e)) req.error = e;
  }
  close(req.status_pipe[0]);
  return req.error == 0;
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
  if (!spawn_detached(req)) warn("cannot start the analyzer %s: %s", analyzer, strerror(req.error));
}

}  // namespace lockstep::rec
