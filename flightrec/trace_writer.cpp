// A Process as a lockstep trace file: the one model writer (schema/trace_file_model.h).
#include "flightrec.h"
#include "trace_file_model.h"

namespace lockstep::flightrec {

void write_trace_file(const Process& p, const std::string& path) {
  // Kept as a cache of the dump: journaled, so a crash never leaves a half-written file.
  trace_file::write_process(p, path, {.fast = false, .synthesize_times = false});
}

}  // namespace lockstep::flightrec
