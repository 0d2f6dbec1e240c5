// `lockstep replay`: run a recorded schedule again, one worker process per recorded rank on this
// machine (through the launcher), under the recorder, and report "completed" or the hang with
// the analyzer's report of the replay's own trace. Also the model-only check (--model).
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "launcher.h"
#include "model_check.h"

namespace lockstep::replay {

struct ReplayOptions {
  std::string trace_dir;         // recorded trace
  std::string out_dir;           // replay traces (trial-N/ under it with --perturb); required
  double timeout_s = 30;         // per trial: then the replay is declared hung
  int order_from = -1;           // global rank whose order every rank follows (-1: own)
  int perturb = 0;               // trials with seeded delays (0: one plain run)
  uint64_t seed = 1;             // trial k uses seed + k
  int max_delay_us = 2000;       // perturbation delays: up to this, host side and per stream
  std::string worker_exe;        // lockstep-replay-worker
  std::string preload;           // liblockstep.so ("" = replay without recording)
  std::map<std::string, std::string> env;  // extra environment for the workers
  bool echo_output = false;      // workers' output to stderr as "[rank N] ..."
};

struct TrialResult {
  uint64_t seed = 0;             // 0: no perturbation
  bool completed = false;
  bool timed_out = false;
  std::string trace_dir;         // the replay's trace
  std::string report;            // analyzer report when it did not complete
  std::string launch_summary;    // per-rank exit status
};

struct ReplayResult {
  std::vector<TrialResult> trials;
  int hung_trials() const;
};

// Throws std::runtime_error on bad input (no trace, missing worker, ranks not 0..N-1).
ReplayResult run_replay(const ReplayOptions& options, std::ostream& log);

// The model check of a trace directory, with --order-from applied the same way as in the
// process replay. Throws std::runtime_error on bad input.
model::Result model_check_dir(const std::string& trace_dir, int order_from, std::vector<std::string>* problems);

// The trace file of each global rank 0..N-1 in a trace directory (throws if ranks are missing
// or repeated).
std::vector<std::string> rank_files(const Trace& trace);

}  // namespace lockstep::replay
