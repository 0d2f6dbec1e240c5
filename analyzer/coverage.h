// Coverage of the interposer, per process: the NCCL calls that NCCL's profiler plugin saw and the
// interposer's hooks did not (a statically linked or private NCCL). Read from the plugin's tables
// (schema/profiler_schema.h) of each loaded trace file, read-only; a file without them (no plugin,
// or an older recorder) has no coverage entry. Ops only the plugin saw are in the ops table too
// (the analyses compare them), without a reduction op; this report names them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule.h"
#include "trace_loader.h"
#include "trace_validation.h"

namespace lockstep {

struct Coverage {
  std::vector<ProcessCoverage> procs;  // processes where NCCL loaded the plugin, in Schedule order
  int64_t missed() const;
  // Calls the interposer missed although it was loaded (a static or private NCCL beside it).
  int64_t missed_by_loaded_interposer() const;
};

Coverage read_coverage(const Schedule& s, size_t max_examples = 5);

// Lost plugin rows: incomplete evidence (kDroppedRecords), one issue per process. analyze()
// (analysis.h) reads the coverage and adds these to Analysis::evidence.
std::vector<EvidenceIssue> coverage_evidence(const Schedule& s, const Coverage& c);

// The report section ("" when no process loaded the plugin), its JSON (a JSON object, as text;
// every JSON output has it, plugin_processes 0 when no process loaded the plugin), and the JUnit
// case interposer_coverage (its output: calls missed by a loaded interposer; never a failure).
std::string coverage_text(const Schedule& s, const Coverage& c);
std::string coverage_json(const Schedule& s, const Coverage& c);
std::string coverage_junit_text(const Schedule& s, const Coverage& c);

}  // namespace lockstep
