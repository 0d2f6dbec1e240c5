// Writes an in-memory trace (analyzer/trace_model.h) as trace files in the recorder's format
// (schema/trace_schema.h): what `lockstep analyze` and `lockstep replay` read, including split
// keys and host waits. (Started as tests/replay/schedule_writer.cpp.)
#pragma once

#include <string>

#include "trace_model.h"

namespace lockstep::shrink {

// <dir>/rank-<r>.lockstep.sqlite per process; dir is created, old trace files in it removed.
void write_trace(const Trace& t, const std::string& dir);

}  // namespace lockstep::shrink
