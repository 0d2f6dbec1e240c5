// Loading + analysis shared by analyze and check: errors on the directory become exit code 2.
#pragma once

#include <iostream>
#include <optional>

#include "analysis.h"
#include "trace_loader.h"

namespace lockstep::cli {

// nullopt (after printing why) when nothing can be analysed.
inline std::optional<Schedule> load_for_analysis(const std::string& cmd, const std::string& dir) {
  try {
    Schedule s = load_schedule(dir);
    if (s.procs.empty()) {
      for (auto& sk : s.skipped) std::cerr << "skipped " << sk.path << ": " << sk.reason << "\n";
      std::cerr << "lockstep " << cmd << ": no usable trace file in " << dir << "\n";
      return std::nullopt;
    }
    return s;
  } catch (const LoadError& e) {
    std::cerr << "lockstep " << cmd << ": " << e.what() << "\n";
    return std::nullopt;
  }
}

bool write_file(const std::string& cmd, const std::string& path, const std::string& text);

}  // namespace lockstep::cli
