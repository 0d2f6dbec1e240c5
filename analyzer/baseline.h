// The canonical schedule of a run, as a reviewable text file (the CI baseline): per communicator
// role, the sequence of collective signatures, run-length encoded; then, per group of ranks
// with the same interleaving, the order in which they issued the roles' collectives.
// Roles, not comm hashes, name communicators: hashes change every run (comm_index.h).
#pragma once

#include <string>

#include "analysis.h"

namespace lockstep {

inline constexpr const char* kBaselineHeader = "# lockstep baseline 1";

std::string canonical_schedule(const Analysis& a);

struct BaselineDiff {
  bool equal = true;
  std::string text;  // readable diff: the section and the lines that differ
};

// Compares a baseline file's text with the run's canonical schedule; comment lines ('#') and
// trailing blanks are ignored so reviewers can annotate the file.
BaselineDiff compare_baseline(const std::string& baseline, const std::string& actual);

}  // namespace lockstep
