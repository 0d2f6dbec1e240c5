// Loading + analysis shared by analyze and check: errors on the directory become exit code 2.
#pragma once

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "analysis.h"
#include "commands.h"
#include "exit_codes.h"
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

// nullopt (after printing why) when nothing can be analysed.
inline std::optional<Schedule> load_for_analysis(const std::string& cmd, const std::string& dir) {
  try {
    Schedule s = load_schedule(dir);
    if (s.procs.empty()) {
      print_skipped(s.skipped);
      std::cerr << "lockstep " << cmd << ": no usable trace file in " << printable(dir) << "\n";
      return std::nullopt;
    }
    return s;
  } catch (const LoadError& e) {
    std::cerr << "lockstep " << cmd << ": " << printable(e.what()) << "\n";
    explain_no_trace_file(dir);
    return std::nullopt;
  }
}

// analyze: findings 1, else incomplete evidence 4, else 0 (clean, or a live job whose members
// are merely behind: named in the report).
inline int analyze_exit_code(const Analysis& a) {
  if (a.problems()) return kExitFound;
  if (a.incomplete()) return kExitIncomplete;
  return kExitOk;
}

// check (the CI gate) also wants the whole history: a job still running is incomplete.
inline int check_exit_code(const Analysis& a) {
  if (a.problems()) return kExitFound;
  if (a.incomplete() || !a.live.empty() || a.behind()) return kExitIncomplete;
  return kExitOk;
}

bool write_file(const std::string& cmd, const std::string& path, const std::string& text);

}  // namespace lockstep::cli
