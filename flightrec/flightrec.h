// PyTorch Flight Recorder dumps as lockstep traces (docs/flight-recorder.md).
//   read:    dump.h (typed dump) over pickle.h (safe pickle VM) / json_reader.h
//   map:     to_process(): one dump -> one trace_model.h Process; align_windows() across ranks
//   write:   write_trace_file(): a Process as a lockstep trace file (schema/trace_schema.h)
//   dirs:    load_dir() / import_dir() / converted_trace_files() (the trace loader's hook)
#pragma once

#include <string>
#include <vector>

#include "dump.h"
#include "trace_model.h"

namespace lockstep::flightrec {

// p2p ops (is_p2p) are sequenced in their own space on the process group's communicator:
// seq = kP2PSeqBase + p2p_seq_id, so they never collide with collective_seq_id.
inline constexpr int64_t kP2PSeqBase = 1000000000;

// The rank in FR's file naming (<prefix><rank>, optionally .json/.pkl/.pickle): -1 when none.
int rank_from_file_name(const std::string& path);

// Throws DumpError when the dump cannot be mapped (e.g. its rank is unknown in a multi-rank group).
Process to_process(const FrDump& dump, int global_rank);

// Members of one process group can hold different windows of the ring: drop each member's
// collectives older than the newest first seq among members (meta fr_aligned_from_seq.<comm>).
void align_windows(std::vector<Process>& procs);

struct DirDumps {
  std::vector<Process> processes;               // sorted by global rank
  std::vector<SkippedFile> skipped;             // dumps that could not be read, with why
  std::vector<std::string> dump_files;          // every file read as a dump
};
// Every FR dump directly in `dir` (detected by content; other files are ignored).
DirDumps load_dir(const std::string& dir);

// Writes `p` as a lockstep trace file at `path` (replaced if present). Throws std::runtime_error.
void write_trace_file(const Process& p, const std::string& path);

// lockstep import: converts every dump of `src` into DST/<dump name>.lockstep.sqlite.
// Returns the files written; `skipped` gets the unreadable dumps.
std::vector<std::string> import_dir(const std::string& src, const std::string& dst, std::vector<SkippedFile>& skipped);

// The trace loader's hook: when `dir` holds FR dumps, converts them once per run into a private
// temporary directory (removed at exit) and returns those trace files; else nothing.
struct Converted {
  std::vector<std::string> trace_files;
  std::vector<SkippedFile> skipped;
};
Converted converted_trace_files(const std::string& dir);

}  // namespace lockstep::flightrec
