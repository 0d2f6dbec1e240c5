// Loads a trace directory (every *.lockstep.sqlite in it) in parallel, read-only, validating
// each file. The importer only imports: analyses live in their own files and never touch SQLite.
#pragma once

#include <stdexcept>
#include <string>

#include "schedule.h"
#include "trace_file.h"
#include "trace_model.h"

namespace lockstep {

struct LoadOptions {
  unsigned threads = 0;        // 0: hardware concurrency (at least 1)
  int busy_timeout_ms = 2000;  // per statement, while a live recorder holds the write lock
  int busy_retries = 5;        // whole-file retries after SQLITE_BUSY beyond the timeout
  bool host_waits = false;     // load_schedule: also the model checker's side data (schedule_waits.h)
  // load_schedule: read each file's header and checkpoints and its op rows from the end back to
  // the newest checkpoint at which every member of each communicator agrees by digest; the
  // collectives before it are not read (SchedProcess::unread, aligned like retired history). A
  // file whose cut is not proven (point-to-point ops before it, no checkpoints, retired or
  // dropped records, digests that disagree) is read whole. docs/scaling.md.
  bool summary_first = false;
  // Summary-first: a node summary in the directory (`lockstep summarize`, node_summary.h) stands
  // for the files it covers when every one of them is unchanged; the others are read.
  bool use_summaries = false;
};

// Raised for errors about the directory itself (missing, not a directory, no trace files, no
// usable file). Per-file problems are not errors: the file lands in skipped with its reason.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The trace as its one model: the compact Schedule (sequenced ops only, no stacks; the few rows a
// report names are read on demand, trace_details.h).
Schedule load_schedule(const std::string& dir, const LoadOptions& options = {});

// The same Schedule with only each process's header (Schedule::procs[i].info: meta, env, comms,
// hangs, resolved rank; no ops): finding a rank's file, or a view that reads one process's rows
// at a time (load_process_file), is cheap. With LoadOptions::use_summaries, the headers of the
// files a consistent node summary covers are taken from it.
Schedule load_headers(const std::string& dir, const LoadOptions& options = {});

// load_schedule of only some processes of load_headers(dir) (indices into headers.procs): the
// views of one communicator or rank read only its files. Ranks are the headers' (resolved over
// every file); skipped: the headers' skipped files, then the picked files unusable for their rows.
Schedule load_schedule_of(const Schedule& headers, const std::vector<int>& procs, const LoadOptions& options = {});

// One file as the summary-first read loads it on its own, from its own cuts (before they are
// agreed across files): what a node summary stores for it and gives back (node_summary.h).
struct LoadedFile {
  SchedProcess proc;
  std::vector<Signature> sigs;  // proc.ops[i].sig indexes these
  std::string reason;           // not empty: the file is unusable (its skip reason)
};
LoadedFile load_file_summary_first(const std::string& path, const LoadOptions& options = {});
// A LoadedFile that did not come from this loader (a node summary is untrusted input): its
// header fields derived again from its meta, and what the loader guarantees of its rows checked
// (ranges, order, distinct signatures). Empty: usable; else why not.
std::string check_loaded_file(LoadedFile& f);

// A meta value of a loaded process as an integer, by the one parser of the trace's integer text
// (trace_file::parse_int: range-checked, never throws); kAbsent when the key is absent or empty.
trace_file::TextInt meta_int(const Process& p, const char* key);

// One file's full rows (ops with parts, completions, stacks, waits, hangs), as trace_model.h
// row types: read one process at a time by the views that print every row (ops, timeline).
// The process's rank is as recorded (rank inference needs the directory: use load_headers').
// Throws LoadError with the skip reason when the file is unusable.
Process load_process_file(const std::string& path, const LoadOptions& options = {});

// How many records of each kind one file holds (lockstep doctor).
struct RecordCounts {
  int64_t op_rows = 0;         // every op row, sequenced or not
  int64_t captured = 0;        // rows captured into a CUDA graph
  int64_t graph_launches = 0;
  int64_t plugin_calls = 0;    // NCCL calls NCCL's profiler plugin saw (profiler_schema.h)
  int64_t plugin_only = 0;     // of them, not seen by the interposer
};
// One file's header (meta, env, comms, hangs; no ops) and its record counts. Throws LoadError
// with the skip reason when the file is unusable.
Process load_process_counts(const std::string& path, RecordCounts& counts, const LoadOptions& options = {});

// NCCL's profiler plugin's tables of one file (schema/profiler_schema.h), the loader's part of
// analyzer/coverage.h: the calls it saw and those the interposer did not.
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
// Fills plugin_calls, missed, examples and error. false: the file has none.
bool load_plugin_coverage(const std::string& path, size_t max_examples, ProcessCoverage* out);

}  // namespace lockstep
