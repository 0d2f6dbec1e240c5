// Runs a program (the lockstep CLI, a launcher) as a child with a timeout and captures its
// output: the CLI tests check exit codes and output the way a user or CI sees them.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace lockstep::testing {

struct ProcResult {
  int exit_code = -1;   // 128+N when killed by signal N
  bool timed_out = false;
  std::string out;      // stdout
  std::string err;      // stderr
};

// env entries are set (or, with an empty value, removed) on top of this process's environment.
// on_start, when given, is called with the child's pid right after it started.
ProcResult run_program(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
                       double timeout_s = 30, void (*on_start)(int pid) = nullptr);

std::string slurp_file(const std::string& path);

}  // namespace lockstep::testing
