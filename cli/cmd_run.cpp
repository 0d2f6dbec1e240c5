// lockstep run: runs a command with the recorder preloaded and returns the command's exit code.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "exit_codes.h"

namespace lockstep::cli {
namespace {

volatile sig_atomic_t g_child = 0;

// Forward signals sent to us by another process (scheduler, kill). A Ctrl-C from the terminal
// already reached the child through the foreground process group: forwarding it would deliver it
// twice (two KeyboardInterrupts in Python).
void forward(int sig, siginfo_t* info, void*) {
  if (g_child > 0 && info && info->si_code != SI_KERNEL) kill(g_child, sig);
}

struct RunArgs {
  std::string dir = "lockstep-trace";
  std::string stacks;
  double hang_timeout = -1;
  std::vector<std::string> cmd;
};

int run(const RunArgs& a) {
  if (a.cmd.empty()) {
    std::cerr << "lockstep run: no command given (usage: lockstep run [-o DIR] -- CMD ARGS...)\n";
    return kExitUsage;
  }
  std::string lib = preload_library_path();
  if (!file_exists(lib)) {
    std::cerr << "lockstep run: recorder library not found at " << lib
              << " (build target lockstep_recorder, or set LOCKSTEP_PRELOAD)\n";
    return kExitUsage;
  }
  std::error_code ec;
  std::filesystem::create_directories(a.dir, ec);
  if (ec) {
    std::cerr << "lockstep run: cannot create trace directory " << a.dir << ": " << ec.message() << "\n";
    return kExitUsage;
  }
  // Absolute: the job may chdir, and its ranks may start elsewhere.
  std::string dir = std::filesystem::absolute(a.dir).string();
  const char* old = std::getenv("LD_PRELOAD");
  std::string preload = lib + (old && *old ? ":" + std::string(old) : "");
  setenv("LD_PRELOAD", preload.c_str(), 1);
  setenv("LOCKSTEP_DIR", dir.c_str(), 1);
  setenv("LOCKSTEP_ANALYZER", self_exe().c_str(), 1);
  if (!a.stacks.empty()) setenv("LOCKSTEP_STACKS", a.stacks.c_str(), 1);
  if (a.hang_timeout >= 0) setenv("LOCKSTEP_HANG_TIMEOUT", std::to_string(a.hang_timeout).c_str(), 1);

  struct sigaction sa {};
  sa.sa_sigaction = forward;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) sigaction(sig, &sa, nullptr);

  pid_t pid = fork();
  if (pid < 0) {
    std::cerr << "lockstep run: fork failed: " << std::strerror(errno) << "\n";
    return kExitUsage;
  }
  if (pid == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) sigaction(sig, &dfl, nullptr);
    std::vector<char*> argv;
    for (auto& s : a.cmd) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::cerr << "lockstep run: cannot run " << a.cmd[0] << ": " << std::strerror(errno) << "\n";
    _exit(errno == ENOENT ? 127 : 126);  // as a shell does
  }
  g_child = pid;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      std::cerr << "lockstep run: waitpid failed: " << std::strerror(errno) << "\n";
      return kExitUsage;
    }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitUsage;
}

}  // namespace

void add_run_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  if (const char* d = std::getenv("LOCKSTEP_DIR"); d && *d) args->dir = d;
  auto* sub = app.add_subcommand("run", "Run CMD with the recorder preloaded; every process writes into DIR");
  sub->add_option("-o,--output", args->dir, "Trace directory (created; default $LOCKSTEP_DIR or ./lockstep-trace)");
  sub->add_option("--stacks", args->stacks, "Call stacks per op: none, native or python (recorder default if unset)")
      ->check(CLI::IsMember({"none", "native", "python"}));
  sub->add_option("--hang-timeout", args->hang_timeout,
                  "Seconds without progress before the recorder reports a hang and runs `lockstep analyze`")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("cmd", args->cmd, "Command and its arguments (after --)")->required();
  sub->footer("Example: lockstep run -o traces -- torchrun --nproc-per-node 8 train.py\n"
              "Exit code: the command's own, or 128+N when it was killed by signal N.");
  sub->callback([args, exit_code] { *exit_code = run(*args); });
}

}  // namespace lockstep::cli
