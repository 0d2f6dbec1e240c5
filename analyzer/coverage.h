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
#include "trace_validation.h"

namespace lockstep {

struct MissedCall {
  std::string op;         // as ops.op; NCCL's own name when lockstep has none
  std::string dtype;      // empty: unknown
  int64_t count = 0;
  std::string nccl_comm;  // NCCL's commHash (16 hex digits)
  int64_t nccl_seq = -1;  // NCCL's per-communicator, per-collective-type number; -1: none
  int64_t call_index = -1;  // the ops row the plugin wrote; -1: none
};

struct ProcessCoverage {
  int proc = 0;                // index into Schedule::procs
  bool interposer = false;     // liblockstep was preloaded: its hooks could see NCCL calls
  int64_t plugin_calls = 0;    // NCCL calls the plugin saw
  int64_t missed = 0;          // of which the interposer did not see
  std::vector<MissedCall> examples;  // the first missed calls, in issue order
  int64_t dropped = 0;         // meta profiler_dropped: plugin rows lost (queue full)
  std::string error;           // the plugin's tables could not be read
};

struct Coverage {
  std::vector<ProcessCoverage> procs;  // processes where NCCL loaded the plugin, in Schedule order
  int64_t missed() const;
  // Calls the interposer missed although it was loaded (a static or private NCCL beside it).
  int64_t missed_by_loaded_interposer() const;
};

Coverage read_coverage(const Schedule& s, size_t max_examples = 5);

// Lost plugin rows: incomplete evidence (kDroppedRecords), one issue per process.
std::vector<EvidenceIssue> coverage_evidence(const Schedule& s, const Coverage& c);

// The report section ("" when no process loaded the plugin), its JSON (a JSON object, as text),
// and the JUnit case interposer_coverage (failure: calls missed by a loaded interposer).
std::string coverage_text(const Schedule& s, const Coverage& c);
std::string coverage_json(const Schedule& s, const Coverage& c);
// The JSON report (render_json's text) with a "coverage" member added (always: plugin_processes 0
// when no process loaded the plugin).
std::string add_coverage_json(const std::string& report_json, const Schedule& s, const Coverage& c);
std::string coverage_junit_failure(const Schedule& s, const Coverage& c);

}  // namespace lockstep
