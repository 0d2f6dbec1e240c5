// Timeline views of a trace (docs/timeline.md): Chrome Trace Event Format JSON for
// ui.perfetto.dev / chrome://tracing, and a text view of a window of sequence numbers on one
// communicator, one column per group of identical ranks. Pure functions of the schedule's headers
// and of each process's rows, read one process at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis.h"
#include "schedule.h"
#include "trace_model.h"
#include "trace_validation.h"

namespace lockstep {

// A bad selection (no such rank, no communicator matches): the message says what exists.
struct TimelineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TimelineOptions {
  std::vector<int> ranks;  // global ranks to show; empty: all
  std::string comm;        // hash prefix, role or ncclConfig_t.commName; empty: all
  int64_t from_seq = 0;    // with to_seq: sequenced ops in [from_seq, to_seq] only; 0: unbounded
  int64_t to_seq = 0;
  size_t max_frames = 8;   // trimmed stack frames per op (trim_stack)
};

// The full rows (ops, stacks, waits) of headers.procs[proc], read when the timeline reaches that
// process: one process's rows are held at a time, so memory does not grow with the rank count.
// Throws (LoadError) when they cannot be read. From files: load_process_file(info.path).
using ProcessRows = std::function<Process(size_t proc)>;

// The trace as a Chrome Trace Event Format object ({"traceEvents": [...], ...}). `headers` is the
// directory's headers (load_headers: meta, comms, ranks; no ops needed). Each process is placed on
// the wall clock by its meta start_wall_ns/start_mono_ns; timestamps are microseconds since the
// earliest event. Stable output: the same trace gives the same bytes. Written event by event.
// Returns the files whose rows could not be read: their process track is named "not read: why"
// and holds no events (the caller names them as missing evidence).
std::vector<SkippedFile> write_timeline_json(const Schedule& headers, const ProcessRows& rows, const TimelineOptions& options,
                                             std::ostream& out);
// What a timeline of `headers` does not cover, once `unread` (the files whose rows could not be
// read) is known: validate_evidence over the files read (skipped files, members without a file,
// contradictory files, dropped records, stopped recorders; communicators named with their role)
// and each trace whose history does not reach its process's end (trace_end). The JSON's
// otherData.evidence and the command's stderr both say these.
std::vector<EvidenceIssue> timeline_evidence(const Schedule& headers, const std::vector<SkippedFile>& unread);
// Throws the TimelineError write_timeline_json would throw, before any output is made.
void check_timeline_options(const Schedule& headers, const TimelineOptions& options);
std::string timeline_json(const Schedule& headers, const ProcessRows& rows, const TimelineOptions& options = {});

struct TextTimelineOptions {
  std::string comm;     // hash prefix, role or name; empty: the first finding's, else the first
  int64_t around = -1;  // centre seq; -1: the divergence on that comm, else its last seq
  int window = 5;       // seqs shown on each side of the centre
  // The rows shown instead of around/window when > 0: from_seq..to_seq; one alone shows
  // 2*window+1 rows from (or up to) it.
  int64_t from_seq = 0;
  int64_t to_seq = 0;
  std::vector<int> ranks;  // empty: every member
  bool unicode = true;  // ✓ … markers; false: ASCII (ok, ..) for pipes and logs
};

// What the text view showed that the caller's exit code must not deny.
struct TextTimelineInfo {
  bool unknown_shown = false;  // some cell is unknown ("?"): a record we do not have
};

// The terminal view: rows = seqs, one column per group of ranks with identical cells, the
// divergence row marked. `a` is the analysis of the schedule its index was built from.
std::string timeline_text(const Analysis& a, const TextTimelineOptions& options = {}, TextTimelineInfo* info = nullptr);

}  // namespace lockstep
