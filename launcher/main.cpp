// lockstep-launch -n N [--timeout S] [--env K=V]... [--rendezvous DIR] [--quiet] -- prog args...
// Runs N ranks of a program on this machine (see launcher.h). Exit status: 0 when every rank
// exited 0, 124 when the timeout killed ranks, 2 for a usage error, otherwise the first failing
// rank's status (128 + signal when it was killed by one).
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "command_line.h"
#include "launcher.h"
#include "lockstep_version.h"

int main(int argc, char** argv) {
  lockstep::LaunchOptions o;
  o.nranks = 0;
  std::vector<std::string> env;
  bool quiet = false;
  lockstep::Command app{"Runs N ranks of a program on this machine", "lockstep-launch"};
  app.version_flag("--version", "lockstep-launch " LOCKSTEP_VERSION);
  app.add_option("-n,--nranks", o.nranks, "Number of ranks (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE are set)")
      ->required()
      ->range(1, 1 << 20);
  app.add_option("--timeout", o.timeout_s, "Kill every rank still running after S seconds (default 60)")
      ->positive();
  app.add_option("--env", env, "Add K=V to every rank's environment (repeatable)")
      ->one_value_per_occurrence()  // one K=V per --env: a following "--" starts the program
      ->check([](const std::string& kv) {
        auto eq = kv.find('=');
        return eq == std::string::npos || eq == 0 ? "--env expects K=V, got '" + kv + "'" : std::string();
      });
  app.add_option("--rendezvous", o.rendezvous_dir, "Directory for ncclUniqueId exchange (default: a fresh temporary one)");
  app.add_flag("--quiet", quiet, "Do not echo the ranks' output");
  app.add_option("program", o.argv, "The program and its arguments, after --")->required();
  app.footer("usage: lockstep-launch -n N [options] -- prog [args...]");
  if (auto code = app.parse(argc, argv, 2)) return *code;
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    o.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  o.prefix_output = !quiet;

  lockstep::forward_termination_signals();
  lockstep::LaunchResult r;
  try {
    r = lockstep::launch_ranks(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep-launch: %s\n", e.what());
    return 2;
  }
  if (r.all_succeeded()) return 0;
  std::fprintf(stderr, "lockstep-launch: %s\n%s", r.timed_out ? "timeout" : "a rank failed", r.summary().c_str());
  if (r.timed_out) return 124;
  for (const auto& rk : r.ranks) {
    if (rk.term_signal) return 128 + rk.term_signal;
    if (rk.exit_code != 0) return rk.exit_code;
  }
  return 1;
}
