// Loading + analysis shared by analyze and check: errors on the directory become exit code 2.
#pragma once

#include <iostream>
#include <optional>

#include "analysis.h"
#include "exit_codes.h"
#include "text_escape.h"
#include "trace_loader.h"

namespace lockstep::cli {

// nullopt (after printing why) when nothing can be analysed.
inline std::optional<Schedule> load_for_analysis(const std::string& cmd, const std::string& dir) {
  try {
    Schedule s = load_schedule(dir);
    if (s.procs.empty()) {
      for (auto& sk : s.skipped) std::cerr << "skipped " << printable(sk.path) << ": " << printable(sk.reason) << "\n";
      std::cerr << "lockstep " << cmd << ": no usable trace file in " << printable(dir) << "\n";
      return std::nullopt;
    }
    return s;
  } catch (const LoadError& e) {
    std::cerr << "lockstep " << cmd << ": " << printable(e.what()) << "\n";
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
