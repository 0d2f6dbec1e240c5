// Exit codes of `lockstep` (also in `lockstep --help` and docs/cli.md) and small helpers shared
// by the subcommands.
#pragma once

#include <string>

namespace lockstep::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFound = 1;     // divergence, order inversion or hang
inline constexpr int kExitUsage = 2;     // usage or input error
inline constexpr int kExitBaseline = 3;  // check: schedule differs from the baseline
// Incomplete evidence: some expected rank's history is missing, torn, skipped, dropped or its
// recorder stopped (docs/analyzer.md "What lockstep promises"). Never reported as clean.
inline constexpr int kExitIncomplete = 4;
// `replay`: the replay could not run (replay::Outcome::kCannotRun); `shrink`: the reproducer is
// written but its replay did not confirm it.
inline constexpr int kExitCannotRun = 5;

bool file_exists(const std::string& path);
// Path of this executable (/proc/self/exe).
std::string self_exe();
// true when stdout is a terminal and NO_COLOR is unset.
bool stdout_color();

}  // namespace lockstep::cli
