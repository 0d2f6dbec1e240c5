// lockstep: record NCCL collectives of a job (run), find why it deadlocked (analyze), gate CI on
// consistent collective order (check). Subcommands live in cmd_<name>.cpp (commands.h).
#include <cstdlib>
#include <iostream>
#ifdef LOCKSTEP_MIMALLOC
#include <mimalloc.h>
#endif

#include "commands.h"
#include "exit_codes.h"
#include "lockstep_version.h"

namespace {

constexpr const char* kFooter = R"(Exit codes:
  0  clean: ranks agree (and match the baseline); `replay`: the schedule completes;
     `report`, `import`, `summarize`, `doctor`: done; `run`: the command's own exit code
  1  a divergence, order inversion or hang was found; `replay`: the schedule hangs or may deadlock
  2  could not run: usage or input error (no such directory, no usable trace file, bad option,
     unreadable baseline)
  3  `check --baseline`: ranks agree but the schedule differs from the baseline
  4  incomplete evidence: a rank's history is missing, torn, skipped, dropped or its recorder
     stopped (never reported as clean); `check` also when the job is still running
  5  `replay`: the replay could not run; `shrink`: reproducer written, its replay did not confirm it
 128+N  `run`: the command was killed by signal N (127: not found, 126: not executable)
See docs/cli.md "Exit codes".)";

}  // namespace

int main(int argc, char** argv) {
#ifdef LOCKSTEP_MIMALLOC
  // The analyzer's memory is mostly fresh arrays touched once (op rows, the model's units): on
  // 4 KiB pages their first-touch faults were a fifth to a third of analyzing 16,384 files
  // (docs/scaling.md). 2 MiB pages, unless MIMALLOC_LARGE_OS_PAGES says otherwise. `run` execs
  // the traced command, which keeps its own allocator and environment.
  if (!std::getenv("MIMALLOC_LARGE_OS_PAGES")) mi_option_set_enabled(mi_option_large_os_pages, true);
#endif
  lockstep::Command app{"lockstep: find why a multi-GPU job deadlocked on NCCL collectives", "lockstep"};
  app.footer(kFooter);
  app.version_flag("--version", "lockstep " LOCKSTEP_VERSION);
  bool preload_path = false;
  app.add_flag("--preload-path", preload_path, "Print the path of liblockstep.so (for LD_PRELOAD in sbatch scripts)");
  int exit_code = lockstep::cli::kExitOk;
  lockstep::cli::add_run_command(app, &exit_code);
  lockstep::cli::add_analyze_command(app, &exit_code);
  lockstep::cli::add_check_command(app, &exit_code);
  lockstep::cli::add_stacks_command(app, &exit_code);
  lockstep::cli::add_ops_command(app, &exit_code);
  lockstep::cli::add_replay_command(app, &exit_code);
  lockstep::cli::add_timeline_command(app, &exit_code);
  lockstep::cli::add_report_command(app, &exit_code);
  lockstep::cli::add_doctor_command(app, &exit_code);
  lockstep::cli::add_shrink_command(app, &exit_code);
  lockstep::cli::add_import_command(app, &exit_code);
  lockstep::cli::add_attach_command(app, &exit_code);
  lockstep::cli::add_summarize_command(app, &exit_code);
  if (auto code = app.parse(argc, argv, lockstep::cli::kExitUsage)) return *code;
  if (preload_path) {
    std::string path = lockstep::cli::preload_library_path();
    std::cout << path << "\n";
    if (!lockstep::cli::file_exists(path)) {
      std::cerr << "lockstep: warning: " << path << " does not exist (build the recorder, or set LOCKSTEP_PRELOAD)\n";
      return lockstep::cli::kExitUsage;
    }
    return lockstep::cli::kExitOk;
  }
  if (!app.subcommand_chosen()) {
    std::cerr << app.help();
    return lockstep::cli::kExitUsage;
  }
  return exit_code;
}
