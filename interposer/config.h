// Every environment variable the recorder reads, in one place (in the spirit of NCCL's
// NCCL_PARAM): name, type, default and accepted range. A value that does not parse or is out
// of range gives one warning and the default. docs/recorder.md lists the same table.
// The rank variables (LOCKSTEP_RANK, RANK, SLURM_PROCID, ...) are schema/rank_env.h's table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "env_vars.h"

namespace lockstep::rec {

enum class StacksSetting { Auto, None, Native, Python };

// Names, defaults and ranges: schema/env_vars.h (declared once, for the CLI and the docs too).
using schema::env::kDefaultHangTimeoutS;
using schema::env::kMaxHangTimeoutS;
using schema::env::kDefaultMaxMb;
using schema::env::kMinMaxMb;
using schema::env::kMaxMaxMb;
using schema::env::kDefaultCompletionWindow;
using schema::env::kMaxCompletionWindow;
using schema::env::kDefaultQueueRecords;

struct Config {
  std::string dir = schema::env::kDefaultDir;      // LOCKSTEP_DIR (relative: to the cwd)
  StacksSetting stacks = StacksSetting::Auto;      // LOCKSTEP_STACKS none|native|python
  double hang_timeout_s = kDefaultHangTimeoutS;    // LOCKSTEP_HANG_TIMEOUT, 0 = off
  std::string analyzer;                            // LOCKSTEP_ANALYZER ("" = no diagnosis)
  unsigned bench_off = 0;                          // LOCKSTEP_BENCH_OFF (bench_knobs.h; benchmarks only)
  int64_t max_mb = kDefaultMaxMb;                  // LOCKSTEP_MAX_MB, 0 = no cap
  bool completion_memop = false;                   // LOCKSTEP_COMPLETION event|memop|covering
  bool completion_covering = false;
  int64_t completion_window = kDefaultCompletionWindow;  // LOCKSTEP_COMPLETION_WINDOW (covering)
  bool sigusr1_flush_only = false;                 // LOCKSTEP_SIGUSR1 default|flush
  int64_t queue_records = kDefaultQueueRecords;    // LOCKSTEP_QUEUE_RECORDS (tests: force drops)
  int64_t spill_mb = schema::env::kDefaultSpillMb; // LOCKSTEP_SPILL_MB, 0 = no spill
  double exit_wait_s = schema::env::kDefaultExitWaitS;  // LOCKSTEP_EXIT_WAIT: without progress
};

using EnvLookup = std::function<const char*(const char*)>;

// Pure: reads through `env`, appends one message per rejected value to `warnings`.
Config parse_config(const EnvLookup& env, std::vector<std::string>* warnings);

// Parsers with range checks, shared with the tests. false: not a value (out untouched).
bool parse_seconds(const char* s, double min, double max, double* out);
// A plain decimal integer in [min, max].
bool parse_int(const char* s, int64_t min, int64_t max, int64_t* out);

// The process's configuration, read from the environment on first use (warnings go to stderr,
// once). Called when the recorder starts, not on the hot path.
const Config& config();

}  // namespace lockstep::rec
