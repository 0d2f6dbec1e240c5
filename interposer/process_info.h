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
  // Where the launcher put this process: meta key "launcher_<variable, lower case>" -> value,
  // for the kLauncherVars that are set (docs/schema.md, "Launcher identity").
  std::vector<std::pair<std::string, std::string>> launcher;
};

// Slurm, torchrun and Open MPI variables that say which job, step, node and task a process is.
inline constexpr const char* kLauncherVars[] = {
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID", "SLURM_JOB_NODELIST",
    "SLURMD_NODENAME", "SLURM_NTASKS", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_NODE_RANK",
    "PMI_RANK", "PMI_SIZE"};

ProcessInfo read_process_info();

}  // namespace lockstep::rec
