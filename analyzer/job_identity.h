// Which job, step and host each process belongs to, for the report header: the launcher's
// variables the recorder keeps as meta keys launcher_* (Slurm job/step/task/node list, torchrun,
// Open MPI; docs/schema.md), processes grouped by job and by host, and hosts whose every trace
// stopped long before the other hosts' (a dead node takes all its ranks with it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "schedule.h"

namespace lockstep {

struct JobGroup {
  std::string launcher;   // slurm, torchrun, mpi, or "" (no launcher variable recorded)
  std::string job_id;     // SLURM_JOB_ID (+ array task) / TORCHELASTIC_RUN_ID; "" when none
  std::string step_id;    // SLURM_STEP_ID
  std::string nodelist;   // SLURM_JOB_NODELIST
  std::vector<int> procs; // indices into Schedule::procs
};

struct HostGroup {
  std::string host;
  std::vector<int> procs;
  // Every trace of the host stopped (no clean exit, no recorded signal) this long before the
  // newest trace of another host (wall clock at each trace's last flush); 0 = not stale.
  int64_t stopped_before_ns = 0;
  std::string stopped_before_host;
};

std::vector<JobGroup> group_by_job(const Schedule& s);
// stale_ns as HangOptions::stale_ns. Hosts in order of their lowest process index.
std::vector<HostGroup> group_by_host(const Schedule& s, int64_t stale_ns);

// The meta keys launcher_* of a process, without the prefix.
std::map<std::string, std::string> launcher_vars(const Process& p);

// Report lines (each ending in '\n'): identity warnings (rank conflicts), always shown.
std::string identity_warnings_text(const Schedule& s);
// The job and host lines of a report header (ranks as display_rank shows them).
std::string job_header_text(const Schedule& s, const std::vector<HostGroup>& hosts);
// Adds "jobs" and "hosts" to the JSON report and, when j["processes"] is an array (one entry per
// Schedule::procs, same order), add_process_identity_json to each entry.
void add_identity_json(nlohmann::json& j, const Schedule& s, const std::vector<HostGroup>& hosts);
// Adds "launcher", "global_rank_source" and "rank_conflict" to a process's entry of the report.
void add_process_identity_json(nlohmann::json& proc, const Process& p);

}  // namespace lockstep
