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
  // Capped runs (sections "collectives=#first..#last"): per communicator, the ordinals each
  // side holds and those compared; partial when a communicator had none in common.
  std::string compared;
  bool partial = false;
};

// Compares a baseline file's text with the run's canonical schedule; comment lines ('#') and
// trailing blanks are ignored so reviewers can annotate the file. When either side holds a
// window of a communicator's history (a capped run), collectives are aligned by ordinal.
BaselineDiff compare_baseline(const std::string& baseline, const std::string& actual);

}  // namespace lockstep
