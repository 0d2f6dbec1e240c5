// Facts about this process recorded once per trace file (meta and env tables).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lockstep::rec {

struct ProcessInfo {
  std::string host;
  int pid = 0;
  int global_rank = -1;
  std::string global_rank_source;  // the variable it came from, "" if unknown
  std::string cmdline;
  std::string exe;
  std::string trace_dir;           // LOCKSTEP_DIR (default ./lockstep-trace), absolute
  std::vector<std::pair<std::string, std::string>> env;  // NCCL_*, TORCH_NCCL_*, CUDA_*, LOCKSTEP_*
};

ProcessInfo read_process_info();

}  // namespace lockstep::rec
