// `lockstep replay`: run a recorded schedule again, one worker process per recorded rank on this
// machine (through the launcher), under the recorder, and report "completed" or the hang with
// the analyzer's report of the replay's own trace. Also the model-only check (--model).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis.h"
#include "launcher.h"
#include "model_check.h"

namespace lockstep::replay {

// What a replay found, typed: the CLI maps it to its exit code (docs/replay.md) and never reads
// prose. Ordered by precedence: a trial that could not run says nothing about hangs.
enum class Outcome {
  kCompleted = 0,   // every rank issued its schedule and synchronized (--model: can complete)
  kHangs = 1,       // no progress for the timeout (--model: may deadlock / deadlock)
  kIncomplete = 4,  // the recorded evidence is incomplete: a rank's file missing or skipped, a
                    // recorder that stopped or dropped records
  kCannotRun = 5,   // replay could not run: invalid schedule values, unsupported op, NCCL/CUDA
                    // init or call failed, a worker crashed
};
inline int exit_code_of(Outcome o) { return static_cast<int>(o); }
const char* outcome_name(Outcome o);  // "completed" | "hangs" | "incomplete" | "cannot run"

// Thrown before anything runs; the message has no "replay: " prefix (the CLI adds its own).
enum class ErrorKind { kInputError, kIncomplete, kCannotRun };
struct ReplayError : std::runtime_error {
  ReplayError(ErrorKind k, const std::string& message) : std::runtime_error(message), kind(k) {}
  ErrorKind kind;
};

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
  Outcome outcome = Outcome::kCompleted;  // kCompleted, kHangs or kCannotRun
  std::string cannot_run_reason; // kCannotRun: which rank, and its own words (for humans)
  bool completed = false;
  bool timed_out = false;
  std::string trace_dir;         // the replay's trace
  std::string report;            // analyzer report when it did not complete
  std::string launch_summary;    // per-rank exit status
};

struct ReplayResult {
  std::vector<TrialResult> trials;
  int hung_trials() const;    // trials that did not complete (hung or could not run)
  Outcome outcome() const;    // the strongest over the trials: cannot run > hangs > completed
};

// Throws ReplayError before launching: kInputError (no trace, missing worker, duplicate or
// out-of-range ranks), kIncomplete (a rank's file missing, skipped, or from a recorder that
// stopped or dropped records), kCannotRun (a schedule value replay cannot honour).
ReplayResult run_replay(const ReplayOptions& options, std::ostream& log);

// The model check of a trace directory, with --order-from applied the same way as in the
// process replay. Throws ReplayError on bad input. incomplete (optional): why the evidence is
// incomplete (empty: complete); the verdict is then not to be trusted. retired (optional):
// what the check does not cover of a bounded trace.
// What the model check of a bounded trace does not cover: the history the size cap retired
// (analyzer/checkpoints.h). The model checks the retained collectives only; a divergence in the
// retired history is known by digest alone (the analyzer's digest_mismatch finding).
struct RetiredHistory {
  struct Window {
    std::string comm;  // identity.h comm_label (not escaped)
    CommWindow window;
  };
  struct Mismatch {
    std::string comm;  // identity.h comm_label (not escaped)
    Divergence finding;  // kDigestMismatch
  };
  std::vector<Window> windows;       // communicators whose history some member retired
  std::vector<Mismatch> mismatches;  // digest disagreements in that history
  bool empty() const { return windows.empty() && mismatches.empty(); }
};

// The lines said before the model's verdict (not escaped): that the model checked only the
// retained collectives, each window, each digest mismatch. Empty when nothing was retired.
std::vector<std::string> retired_history_lines(const RetiredHistory& h);
// model::format_json(r), with "incomplete" (the exit code's 4) and "incomplete_evidence" (the
// files the check could not cover), and "retired_history" (windows, digest_mismatch) when not empty.
std::string model_json(const model::Result& r, const RetiredHistory& h, const std::vector<std::string>& incomplete = {});

// on_step: called after each step ("load", "analysis", then model::Options::on_step's).
// memory_limit: bytes the check may use at its peak; 0: what this process can have (the
// machine's available memory, or its cgroup's limit, and what it holds already). Once the
// trace is loaded, a model that would need more (model::kPeakBytesPerItem an op or host wait)
// is not started: ReplayError kInputError says how much it needs and what is available.
model::Result model_check_dir(const std::string& trace_dir, int order_from, std::vector<std::string>* problems,
                              std::vector<std::string>* incomplete = nullptr, RetiredHistory* retired = nullptr,
                              const std::function<void(const char*)>& on_step = {}, uint64_t memory_limit = 0);

// Bytes this process can still grow to: MemAvailable (/proc/meminfo), bounded by its cgroup's
// limit less its usage but the page cache (v2 or v1), plus its own resident memory. 0: unknown.
uint64_t memory_this_process_can_use();

// The trace file of each global rank 0..N-1 in a trace directory. Throws ReplayError:
// kIncomplete if ranks are missing, kInputError if repeated or out of range.
std::vector<std::string> rank_files(const Schedule& trace);

}  // namespace lockstep::replay
