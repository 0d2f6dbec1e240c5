// Writes an in-memory trace (built with model_builder.h) as real trace files, in the recorder's
// format (schema/trace_schema.h), including what the replay reads beyond the analyzer's test
// writer: split keys, host waits.
#pragma once

#include <string>

#include "trace_model.h"

namespace lockstep::testing {

// <dir>/rank-<r>.lockstep.sqlite per process; dir is created, old trace files in it removed.
void write_schedule_trace(const Trace& t, const std::string& dir);

}  // namespace lockstep::testing
