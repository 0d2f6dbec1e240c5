// launch_ranks: fork/exec N ranks, each in its own process group (so a timeout kills whatever a
// rank started too), pump their output through pipes, reap them, enforce the timeout.
#include "launcher.h"
#include "env_vars.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace lockstep {

bool LaunchResult::all_succeeded() const {
  if (ranks.empty()) return false;
  for (const auto& r : ranks)
    if (r.timed_out || r.term_signal != 0 || r.exit_code != 0) return false;
  return true;
}

std::string LaunchResult::summary() const {
  std::string s;
  for (const auto& r : ranks) {
    s += "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + "): ";
    if (r.timed_out) s += "still running at timeout, killed";
    else if (r.term_signal) s += "killed by signal " + std::to_string(r.term_signal) + " (" + strsignal(r.term_signal) + ")";
    else s += "exited " + std::to_string(r.exit_code);
    s += "\n";
  }
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_forwarded_signal{0};  // set by the handler, acted on by the launch loop

void on_termination_signal(int sig) { g_forwarded_signal.store(sig); }

struct Child {
  pid_t pid = -1;
  int out_fd = -1;     // read end of the rank's stdout+stderr pipe
  std::string line;    // partial line not yet echoed
  bool running = true;
};

// A TCP port free on the loopback now (0: none found), for PyTorch's env:// rendezvous
// (MASTER_ADDR / MASTER_PORT, as torchrun sets them): rank 0's store binds it.
int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

[[noreturn]] void exec_rank(const LaunchOptions& o, int rank, const std::string& rdv, const std::string& launch_id,
                            int master_port, int out_fd, pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the launcher died before prctl took effect
  if (out_fd >= 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
  }
  // Back to default dispositions: the launcher's own handlers must not leak into ranks.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  std::string n = std::to_string(o.nranks), r = std::to_string(rank);
  setenv("RANK", r.c_str(), 1);
  setenv("WORLD_SIZE", n.c_str(), 1);
  setenv("LOCAL_RANK", r.c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", n.c_str(), 1);
  setenv(schema::env::kRendezvousDir, rdv.c_str(), 1);
  setenv(schema::env::kLaunchId, launch_id.c_str(), 1);
  // torchrun's rendezvous for PyTorch ranks, unless the caller set its own.
  setenv("MASTER_ADDR", "127.0.0.1", 0);
  if (master_port > 0) setenv("MASTER_PORT", std::to_string(master_port).c_str(), 0);
  for (const auto& [k, v] : o.env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "lockstep-launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

void echo_lines(Child& c, int rank, bool final) {
  size_t pos;
  while ((pos = c.line.find('\n')) != std::string::npos) {
    std::fprintf(stderr, "[rank %d] %.*s\n", rank, int(pos), c.line.data());
    c.line.erase(0, pos + 1);
  }
  if (final && !c.line.empty()) {
    std::fprintf(stderr, "[rank %d] %s\n", rank, c.line.c_str());
    c.line.clear();
  }
}

}  // namespace

void forward_termination_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_termination_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

LaunchResult launch_ranks(const LaunchOptions& o) {
  if (o.nranks < 1) throw std::invalid_argument("launch_ranks: nranks must be >= 1, got " + std::to_string(o.nranks));
  if (o.argv.empty()) throw std::invalid_argument("launch_ranks: no program given");
  if (!(o.timeout_s > 0)) throw std::invalid_argument("launch_ranks: timeout must be > 0 s");

  std::string rdv = o.rendezvous_dir;
  bool own_rdv = false;
  if (rdv.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lockstep-rdv-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error(std::string("launch_ranks: mkdtemp: ") + std::strerror(errno));
    rdv = tmpl;
    own_rdv = true;
  } else {
    std::filesystem::create_directories(rdv);
  }

  LaunchResult res;
  res.ranks.resize(o.nranks);
  std::vector<Child> kids(o.nranks);
  std::fflush(nullptr);  // no duplicated buffered output in the children
  const pid_t self = getpid();
  static std::atomic<unsigned> launches{0};
  const std::string launch_id = std::to_string(self) + "-" +
                                std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) + "-" +
                                std::to_string(launches++);
  const int master_port = getenv("MASTER_PORT") ? 0 : free_loopback_port();
  for (int r = 0; r < o.nranks; ++r) {
    int fds[2] = {-1, -1};
    if (o.capture_output && pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("launch_ranks: pipe: ") + std::strerror(errno));
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("launch_ranks: fork: ") + std::strerror(errno));
    if (pid == 0) exec_rank(o, r, rdv, launch_id, master_port, fds[1], self);
    setpgid(pid, pid);  // also here: no race with a kill before the child ran setpgid
    if (o.capture_output) {
      close(fds[1]);
      kids[r].out_fd = fds[0];
    }
    kids[r].pid = pid;
    res.ranks[r].rank = r;
    res.ranks[r].pid = pid;
  }

  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));
  bool killing = false;
  Clock::time_point kill_at{};
  auto running = [&] {
    for (auto& k : kids)
      if (k.running) return true;
    return false;
  };
  auto pipes_open = [&] {
    for (auto& k : kids)
      if (k.out_fd >= 0) return true;
    return false;
  };

  while (running() || pipes_open()) {
    // Reap.
    for (int r = 0; r < o.nranks; ++r) {
      Child& k = kids[r];
      if (!k.running) continue;
      siginfo_t info{};
      if (waitid(P_PID, id_t(k.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == k.pid) {
        // Kill whatever the rank left behind in its group while the zombie still pins the
        // group id (no reuse), then reap.
        kill(-k.pid, SIGKILL);
        int st;
        waitpid(k.pid, &st, 0);
        k.running = false;
        if (WIFEXITED(st)) res.ranks[r].exit_code = WEXITSTATUS(st);
        else if (WIFSIGNALED(st)) res.ranks[r].term_signal = WTERMSIG(st);
      }
    }
    auto now = Clock::now();
    if (int sig = g_forwarded_signal.exchange(0); sig && running()) {
      for (auto& k : kids)
        if (k.running) kill(-k.pid, sig);
      if (!killing) {
        killing = true;
        kill_at = now + std::chrono::seconds(2);
      }
    }
    if (!killing && running() && now >= deadline) {
      res.timed_out = true;
      for (int r = 0; r < o.nranks; ++r)
        if (kids[r].running) {
          res.ranks[r].timed_out = true;
          kill(-kids[r].pid, o.kill_signal);
        }
      killing = true;
      kill_at = now + std::chrono::seconds(2);
    }
    if (killing && running() && now >= kill_at) {
      for (auto& k : kids)
        if (k.running) kill(-k.pid, SIGKILL);
      kill_at = now + std::chrono::hours(1);
    }
    // A rank's children may keep its pipe open after it exited: stop reading once all are
    // reaped and nothing arrives.
    bool all_reaped = !running();
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 0; r < o.nranks; ++r)
      if (kids[r].out_fd >= 0) {
        pfds.push_back({kids[r].out_fd, POLLIN, 0});
        who.push_back(r);
      }
    if (pfds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    int n = poll(pfds.data(), pfds.size(), all_reaped ? 0 : 20);
    if (n <= 0) {
      if (all_reaped)
        for (int r : who) {
          close(kids[r].out_fd);
          kids[r].out_fd = -1;
        }
      continue;
    }
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int r = who[i];
      char buf[65536];
      ssize_t got = read(kids[r].out_fd, buf, sizeof buf);
      if (got > 0) {
        res.ranks[r].output.append(buf, size_t(got));
        if (o.prefix_output) {
          kids[r].line.append(buf, size_t(got));
          echo_lines(kids[r], r, false);
        }
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(kids[r].out_fd);
        kids[r].out_fd = -1;
        if (o.prefix_output) echo_lines(kids[r], r, true);
      }
    }
  }
  for (int r = 0; r < o.nranks; ++r)
    if (o.prefix_output) echo_lines(kids[r], r, true);
  if (own_rdv) {
    std::error_code ec;
    std::filesystem::remove_all(rdv, ec);
  }
  return res;
}

}  // namespace lockstep
