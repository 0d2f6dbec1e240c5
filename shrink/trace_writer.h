// Writes an in-memory trace (analyzer/trace_model.h) as trace files in the recorder's format:
// what `lockstep analyze` and `lockstep replay` read. The writer is schema/trace_file_model.h.
#pragma once

#include <string>

#include "trace_file_model.h"

namespace lockstep::shrink {

// <dir>/rank-<r>.lockstep.sqlite per process; dir is created, old trace files in it removed.
inline void write_trace(const Trace& t, const std::string& dir) { trace_file::write_trace_dir(t, dir, trace_file::kSchedule); }

}  // namespace lockstep::shrink
