// Node summaries: what the summary-first read loads of each trace file of one node (its header,
// checkpoints, the op rows after its own cut, the issue times of its ops in flight), in one file
// per node beside the traces, written by `lockstep summarize` on the node itself. The analyzing
// machine then opens one file per node instead of one per rank, and checks each covered trace
// file's identity (a stat and two page reads, no SQLite). Format: docs/schema.md "Node summaries";
// use: docs/scaling.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trace_loader.h"

namespace lockstep {

inline constexpr const char* kSummarySuffix = ".lockstep-summary";

// What ties a summary's entry to the file it stood for: a file rewritten, truncated, appended to
// or replaced after summarizing differs in one of these.
struct FileIdentity {
  std::string name;      // the file's name in the directory
  int64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t content = 0;  // summary_hash of the file's first and last 4 KiB (SQLite's header, its newest page)
  // A live recorder's file (content generation in PRAGMA user_version, schema::kUserVersionOffset):
  // summary_hash of its first page (at most 4 KiB) without the two counters every commit moves
  // (SQLite's file change counter and version-valid-for), generation included. Equal, with the
  // same size: only heartbeats were committed in between. 0: the file does not say (a finished
  // file, another writer's, an older recorder's): any change is a change.
  uint64_t settled = 0;
  uint32_t commits = 0;  // SQLite's file change counter (bytes 24-27): every commit moves it
  bool operator==(const FileIdentity&) const = default;
};
// The identity of a regular file (a symlink is not followed). `why` empty on success.
FileIdentity file_identity(const std::string& path, std::string* why);
// `now` is `then` refreshed only by its recorder's heartbeat (meta last_flush_mono_ns): the rows
// a summary took of it are still every row it has, and SQLite committed since (a copy, `touch`
// or a rollback moves the mtime, not the change counter: not a heartbeat). The heartbeat moved by
// about the files' mtime difference (both set by the same clock, whatever its offset from the
// recorder's).
bool only_heartbeats_since(const FileIdentity& then, const FileIdentity& now);

// The format's 64-bit hash (docs/schema.md "Node summaries"): of a file's first 4 KiB with seed 0,
// then of its last 4 KiB with that as the seed (FileIdentity::content); of the summary's bytes
// (its checksum). It catches damage and a changed file, not a forger.
uint64_t summary_hash(const void* data, size_t n, uint64_t seed = 0);

// <host>.lockstep-summary, the host made one safe file-name component.
std::string summary_file_name(const std::string& host);

// The codec's unit: one covered file, its identity and what the summary-first read loaded of it.
struct SummaryEntry {
  FileIdentity id;
  LoadedFile file;
};

// `lockstep summarize`: loads `files` as the summary-first read does (in parallel). entries: the
// usable, unchanged ones; not_covered: the files left out and why (unusable, changed while read,
// a -wal beside it), which the analyzer reads itself.
struct Summarized {
  std::vector<SummaryEntry> entries;
  std::vector<SkippedFile> not_covered;
};
Summarized summarize_files(const std::vector<std::string>& files, const LoadOptions& options);
// Writes `entries` as the summary file `out` (a temporary file beside it, renamed over it).
// Throws LoadError when it cannot.
void write_node_summary(const std::string& out, const std::string& host, const std::vector<SummaryEntry>& entries);

// The loader's side: every *.lockstep-summary of dir, decoded and checked against the trace files
// (`files`, the loader's listing). A summary is used only when all of it is consistent: every
// file it covers is in `files` with the recorded identity and no -wal beside it, and
// every entry passes check_loaded_file. Otherwise it is ignored as a whole, with why.
struct SummaryCover {
  // What each summary used holds: entries[k] stands for files[file[k]] (index into `files`). Kept
  // as decoded: a SchedProcess is moved once, into the loader's array (each move touches memory
  // the size of the process's header; 16,384 of them are 12 MB).
  struct Block {
    std::vector<SummaryEntry> entries;
    std::vector<size_t> file;
  };
  std::vector<Block> blocks;
  Schedule::SummaryUse use;  // use.refreshed: covered files only their heartbeat changed since
  // f(index into `files`, LoadedFile&) for every covered file.
  template <class F>
  void each(F&& f) {
    for (Block& b : blocks)
      for (size_t k = 0; k < b.entries.size(); ++k) f(b.file[k], b.entries[k].file);
  }
};
// headers_only: each entry keeps its process header (SchedProcess::info) once checked, its rows
// dropped (load_headers: memory is one summary's rows a thread, not every file's).
SummaryCover cover_from_summaries(const std::string& dir, const std::vector<std::string>& files, unsigned threads,
                                  bool headers_only = false);

// The codec, for tests: the summary file's bytes of `entries` and back. decode throws
// std::runtime_error on anything it would not have written (wrong magic or version, a length or
// count beyond the bytes, a value out of range, trailing bytes, a checksum that does not match).
std::string encode_node_summary(const std::string& host, const std::vector<SummaryEntry>& entries);
// max_entries: more entries than this (the trace files it could cover) are refused undecoded.
std::vector<SummaryEntry> decode_node_summary(std::string_view bytes, std::string* host = nullptr,
                                              size_t max_entries = SIZE_MAX);

}  // namespace lockstep
