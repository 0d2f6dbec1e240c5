// What the recorder says when the watchdog (completion.cpp) sees no progress: the hang line on
// stderr and in the trace (hangs table), and the in-job diagnosis — once per job, the lowest
// rank with a trace file runs `$LOCKSTEP_ANALYZER analyze DIR`. Runs on the watchdog thread.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "op_desc.h"

namespace lockstep::rec {

class Writer;

struct InFlightOp {
  int64_t call_index;
  uint64_t comm_hash;
  int64_t seq;
  int64_t count;
  OpKind op;
};

// What a stream is stuck on: its first incomplete op is one of first..last, in issue order
// (first == last with a per-op completion signal).
struct StuckOps {
  const InFlightOp* first;
  const InFlightOp* last;
};

class HangReporter {
 public:
  HangReporter(Writer* writer, int global_rank, std::string trace_dir)
      : writer_(writer), global_rank_(global_rank), trace_dir_(std::move(trace_dir)) {}
  // heads: per stream, the op it is stuck on (what the process is stuck on);
  // n_in_flight: every op in flight.
  void report(int64_t now, int64_t stalled_ns, std::vector<StuckOps> heads,
              size_t n_in_flight);
  // Reaps finished diagnoses without blocking.

 private:
  void maybe_spawn_analyzer();

  Writer* writer_;
  int global_rank_;
  std::string trace_dir_;
  bool analyzer_spawned_ = false;
};

}  // namespace lockstep::rec
