// lockstep-replay-worker: one rank of `lockstep replay` (started by it through the launcher).
//   lockstep-replay-worker (--file F | --files F0 F1 ...) [--timeout S] [--order-from-file F]
//                          [--delay-seed N --max-delay-us US] [--verbose]
// With --files, the rank comes from the rank variables (schema/rank_env.h: RANK set by the
// launcher, torchrun; SLURM_PROCID under srun, ...). Unique ids are exchanged through files in
// $LOCKSTEP_RENDEZVOUS_DIR. Exit status: worker.h.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "command_line.h"
#include "env_vars.h"
#include "lockstep_version.h"
#include "rank_env.h"
#include "worker.h"

int main(int argc, char** argv) {
  lockstep::replay::WorkerOptions o;
  std::vector<std::string> files;
  lockstep::Command app{"One rank of `lockstep replay`: re-issues a recorded schedule", "lockstep-replay-worker"};
  app.version_flag("--version", "lockstep-replay-worker " LOCKSTEP_VERSION);
  auto* file = app.add_option("--file", o.trace_file, "This rank's trace file");
  auto* many = app.add_option("--files", files, "Every rank's trace file, in rank order (this rank's: by $RANK)")
                   ->expected(1, -1);
  file->excludes(many);
  app.add_option("--timeout", o.timeout_s, "Seconds without progress before the worker declares a hang (0: never)")
      ->range(0.0, 1e7);
  app.add_option("--order-from-file", o.order_from_file, "Issue ops in this file's order (--order-from)");
  app.add_option("--delay-seed", o.delay_seed, "Perturbation seed (0: none)");
  app.add_option("--max-delay-us", o.max_delay_us, "Largest perturbation delay in microseconds")
      ->range(0, 60000000);
  app.add_flag("--verbose", o.verbose, "Progress on stderr");
  if (auto code = app.parse(argc, argv, lockstep::replay::kWorkerExitUsage)) return *code;
  if (o.trace_file.empty()) {
    if (files.empty()) {
      std::fprintf(stderr, "lockstep-replay-worker: no trace file (--file or --files)\n");
      return lockstep::replay::kWorkerExitUsage;
    }
    const lockstep::RankFromEnv rank = lockstep::global_rank_from_env();
    if (rank.rank < 0 || rank.rank >= static_cast<int>(files.size())) {
      std::fprintf(stderr, "lockstep-replay-worker: the rank (%s) must be 0..%zu\n",
                   lockstep::rank_variable_list(lockstep::kGlobalRankVariables).c_str(), files.size() - 1);
      return lockstep::replay::kWorkerExitUsage;
    }
    o.trace_file = files[rank.rank];
  }
  const lockstep::RankFromEnv local = lockstep::local_rank_from_env();
  o.local_rank = local.rank >= 0 ? local.rank : 0;
  if (const char* d = std::getenv(lockstep::schema::env::kRendezvousDir)) o.rendezvous_dir = d;
  return lockstep::replay::run_worker(o);
}
