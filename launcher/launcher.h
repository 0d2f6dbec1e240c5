// Starts N ranks of a program on this machine, the way torchrun/srun would, and watches them:
// each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and LOCKSTEP_RENDEZVOUS_DIR
// (a directory shared by the ranks, where examples exchange ncclUniqueIds through files; see
// examples/common/bootstrap.h), and LOCKSTEP_LAUNCH_ID (unique per launch_ranks call, so files
// of an earlier run in a reused rendezvous dir are not mistaken for this one's). Used by the
// tests, the demo and `lockstep replay`.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace lockstep {

struct LaunchOptions {
  int nranks = 2;
  std::vector<std::string> argv;                // program and arguments, run for every rank
  double timeout_s = 60;                        // then every rank still running is killed
  std::map<std::string, std::string> env;       // added to every rank's environment
  std::string rendezvous_dir;                   // empty: a fresh temporary directory
  bool capture_output = true;                   // false: ranks inherit stdout/stderr
  bool prefix_output = true;                    // echo captured lines as "[rank N] ..." to stderr
  int kill_signal = 15;                         // sent at timeout; SIGKILL 2 s later if needed
};

struct RankResult {
  int rank = 0;
  pid_t pid = 0;
  int exit_code = -1;     // valid when exited
  int term_signal = 0;    // nonzero when killed by a signal
  bool timed_out = false; // still running at the timeout (then killed)
  std::string output;     // stdout+stderr when captured
};

struct LaunchResult {
  bool timed_out = false;            // at least one rank was still running at the timeout
  std::vector<RankResult> ranks;     // index = rank
  bool all_succeeded() const;        // every rank exited 0
  std::string summary() const;       // one line per rank: "rank 1 (pid 123): still running at timeout, killed"
};

LaunchResult launch_ranks(const LaunchOptions& options);

// For executables: SIGINT/SIGTERM/SIGHUP received by this process are forwarded to every rank
// of a running launch_ranks (their process groups; SIGKILL 2 s later if needed), which then
// returns with the interrupted ranks marked as killed by that signal. Ranks also get SIGKILL
// if the launching process dies (PR_SET_PDEATHSIG), so a killed launcher leaves nothing behind.
void forward_termination_signals();

}  // namespace lockstep
