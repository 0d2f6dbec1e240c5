// lockstep run: runs a command with the recorder preloaded. It sets the environment and then
// becomes the command (exec), so there is no process in between: every signal (a terminal's
// Ctrl-C, srun forwarding SIGTERM/SIGUSR1/SIGCONT to each task, scancel --signal, a time limit's
// SIGTERM then SIGKILL, kill of one pid or of a process group) reaches the command exactly once,
// and its exit status, or its death by a signal, is the one its parent sees (docs/slurm.md).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "env_vars.h"
#include "commands.h"
#include "exit_codes.h"

namespace lockstep::cli {
namespace {

struct RunArgs {
  std::string dir = "lockstep-trace";
  std::string stacks;
  double hang_timeout = -1;
  int64_t max_mb = -1;  // -1: the recorder's default (LOCKSTEP_MAX_MB)
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
              << " (build the CMake target lockstep, or set LOCKSTEP_PRELOAD)\n";
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
  namespace env = schema::env;
  setenv(env::kDir, dir.c_str(), 1);
  setenv(env::kAnalyzer, self_exe().c_str(), 1);
  if (!a.stacks.empty()) setenv(env::kStacks, a.stacks.c_str(), 1);
  if (a.hang_timeout >= 0) setenv(env::kHangTimeout, std::to_string(a.hang_timeout).c_str(), 1);
  if (a.max_mb >= 0) setenv(env::kMaxMb, std::to_string(a.max_mb).c_str(), 1);
  // Under `lockstep run`, SIGUSR1 (`scancel --signal=USR1`, `kill -USR1`) flushes the traces of
  // a running job and lets it run on (docs/slurm.md); a value the user set is kept.
  setenv(env::kSigusr1, env::kSigusr1Flush, 0);

  std::vector<char*> argv;
  for (auto& s : a.cmd) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  execvp(argv[0], argv.data());
  int err = errno;
  std::cerr << "lockstep run: cannot run " << a.cmd[0] << ": " << std::strerror(err) << "\n";
  return err == ENOENT ? 127 : 126;  // as a shell does
}

}  // namespace

void add_run_command(Command& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  if (const char* d = std::getenv(schema::env::kDir); d && *d) args->dir = d;
  auto* sub = app.add_subcommand("run", "Run CMD with the recorder preloaded; every process writes into DIR");
  sub->add_option("-o,--output", args->dir, "Trace directory (created; default $LOCKSTEP_DIR or ./lockstep-trace)");
  sub->add_option("--stacks", args->stacks, "Call stacks per op: none, native or python (default: python when CPython is in the process, else native)")
      ->one_of({"none", "native", "python"});
  sub->add_option("--hang-timeout", args->hang_timeout,
                  "Seconds without progress before the recorder reports a hang and runs `lockstep analyze` (default 60)")
      ->non_negative();
  sub->add_option("--max-mb", args->max_mb,
                  "Trace size cap per process in MiB (0 = none; default 256): the oldest ops are retired, "
                  "digest checkpoints keep them verifiable")
      ->range(int64_t(0), int64_t(1) << 22);
  sub->add_option("cmd", args->cmd, "Command and its arguments (after --)")->required();
  sub->footer("Example: lockstep run -o traces -- torchrun --nproc-per-node 8 train.py\n"
              "lockstep run becomes CMD (exec): signals reach CMD once, and its exit status is CMD's own\n"
              "(a shell shows 128+N when CMD was killed by signal N; 127: not found, 126: not executable).");
  sub->callback([args, exit_code] { *exit_code = run(*args); });
}

}  // namespace lockstep::cli
