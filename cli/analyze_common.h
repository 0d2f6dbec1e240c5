// Loading + analysis shared by analyze and check: errors on the directory become exit code 2.
#pragma once

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "analysis.h"
#include "commands.h"
#include "exit_codes.h"
#include "meta_keys.h"
#include "text_escape.h"
#include "trace_loader.h"

namespace lockstep::cli {

// "skipped FILE: reason" on stderr for each file the loader could not use: the one place every
// command names them.
inline void print_skipped(const std::vector<SkippedFile>& skipped) {
  for (auto& sk : skipped) std::cerr << "skipped " << printable(sk.path) << ": " << printable(sk.reason) << "\n";
}

// Why a directory may hold no trace file at all (doctor, and every command that reads one).
inline constexpr const char* kNoTraceFileWhy =
    "no process made an NCCL call that lockstep saw. NCCL reached only through a static copy, or a "
    "process that never loaded liblockstep (LD_PRELOAD not inherited), leaves nothing here";

// nullopt (after printing why) when DIR holds no usable trace file. LOAD reads the directory
// (load_schedule, load_headers); NOTHING ends the "no usable trace file" line.
template <class Load>
std::optional<Schedule> load_or_explain(const std::string& cmd, const std::string& dir, Load load,
                                        const char* nothing = "") {
  try {
    Schedule s = load(dir);
    if (s.procs.empty()) {
      print_skipped(s.skipped);
      std::cerr << "lockstep " << cmd << ": no usable trace file in " << printable(dir) << nothing << "\n";
      return std::nullopt;
    }
    return s;
  } catch (const LoadError& e) {
    std::cerr << "lockstep " << cmd << ": " << printable_lines(e.what()) << "\n";
    explain_no_trace_file(dir);
    return std::nullopt;
  }
}

// How the verdict commands (analyze, check, report) read a directory: every op row of every file
// while its trace files add up to kFullReadBytes or less, so that a verdict rests on every op
// (order inversions across communicators included); summary first above that, or where `lockstep
// summarize` wrote node summaries (docs/scaling.md): what it does not read is evidence
// (kOrderNotRead: never "clean" on it). One definition of the flags and of the rule.
inline constexpr uint64_t kFullReadBytes = uint64_t(1) << 30;
struct ReadArgs {
  bool full_read = false;      // --full-read
  bool summary_first = false;  // --summary-first
  int threads = 0;             // --threads (0: one per hardware thread)
};
void add_read_options(Command* sub, ReadArgs& r);
// The trace files (*.lockstep.sqlite) of DIR add up to at most n bytes (false: more, or DIR
// unreadable); *summaries: DIR holds a node summary (*.lockstep-summary).
bool trace_bytes_at_most(const std::string& dir, uint64_t n, bool* summaries = nullptr);
inline bool read_summary_first(const std::string& dir, const ReadArgs& r) {
  if (r.full_read) return false;
  bool summaries = false;
  return r.summary_first || !trace_bytes_at_most(dir, kFullReadBytes, &summaries) || summaries;
}

// summary_first: LoadOptions::summary_first (read_summary_first); threads:
// LoadOptions::threads (--threads; 0: one per hardware thread).
inline std::optional<Schedule> load_for_analysis(const std::string& cmd, const std::string& dir, bool summary_first = false,
                                                 unsigned threads = 0) {
  LoadOptions lo;
  lo.summary_first = summary_first;
  lo.use_summaries = summary_first;
  lo.threads = threads;
  return load_or_explain(cmd, dir, [&lo](const std::string& d) { return load_schedule(d, lo); });
}

// The verdict's exit code is the analyzer's (Analysis::exit_code): analyze takes a live job as
// it is; check (the CI gate) also wants the whole history, so a job still running is incomplete.
static_assert(kExitOk == kVerdictExitClean && kExitFound == kVerdictExitFound &&
              kExitIncomplete == kVerdictExitIncomplete);
inline int analyze_exit_code(const Analysis& a) { return a.exit_code(false); }
inline int check_exit_code(const Analysis& a) { return a.exit_code(true); }

// Seqs 1..c.retired_through_seq of a bounded trace's communicator were retired by the size cap
// (schema/trace_model.h): their rows are gone from the file. The ops a member issued on c are the
// retired ones plus the `kept` rows it holds (seqs kept_first..kept_last).
inline int64_t issued_on_comm(const Comm& c, int64_t kept) { return std::max<int64_t>(c.retired_through_seq, 0) + kept; }

// What a listing says of a seq the size cap retired: "seq 500 was retired by the size cap (max_mb
// 1): this file keeps seq 36865..60000 of the 60000 ops issued on the comm". Empty when `seq` is
// not retired.
inline std::string retired_seq_text(const Process& info, const Comm& c, int64_t seq, int64_t kept, int64_t kept_first,
                                    int64_t kept_last) {
  if (seq <= 0 || seq > c.retired_through_seq) return "";
  auto mb = info.meta.find(schema::meta::kMaxMb);
  std::string text = "seq " + std::to_string(seq) + " was retired by the size cap" +
                     (mb != info.meta.end() ? " (max_mb " + printable(mb->second) + ")" : "") + ": this file keeps ";
  text += kept > 0 ? "seq " + std::to_string(kept_first) + ".." + std::to_string(kept_last) + " of the " +
                         std::to_string(issued_on_comm(c, kept)) + " ops issued on the comm"
                   : "none of the " + std::to_string(issued_on_comm(c, kept)) + " ops issued on the comm";
  return text;
}

bool write_file(const std::string& cmd, const std::string& path, const std::string& text);

}  // namespace lockstep::cli
