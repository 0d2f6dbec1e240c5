// An in-memory trace (analyzer/trace_model.h) as trace files, through trace_file.h: the one
// writer of the Flight Recorder converter, shrink, the test builders and replay tests.
#pragma once

#include <string>

#include "trace_model.h"

namespace lockstep::trace_file {

struct ModelWriteOptions {
  // Written in one go and re-creatable: no journal, no fsync (4,096 files in seconds).
  bool fast = true;
  // Fill what the recorder fills but the model does not hold (handles, times) with plausible
  // values derived from call indices, as the replay tests and shrink need.
  bool synthesize_times = false;
};

// What replay tests and shrink write: schedules without times.
inline constexpr ModelWriteOptions kSchedule{.fast = true, .synthesize_times = true};

// One file at `path` (replaced). Throws trace_file::Error.
void write_process(const Process& p, const std::string& path, const ModelWriteOptions& options = {});

// <dir>/rank-<global_rank>.lockstep.sqlite per process; dir is created, old trace files in it
// removed.
void write_trace_dir(const Trace& t, const std::string& dir, const ModelWriteOptions& options = {});

}  // namespace lockstep::trace_file
