// The replay worker: re-issues one rank's recorded schedule on whatever libnccl.so.2 and
// libcuda.so.1 the dynamic loader finds (real NCCL on GPUs, the CPU fixture in CI), through
// dlsym(RTLD_DEFAULT) so a preloaded recorder sees every call.
#pragma once

#include <cstdint>
#include <string>

namespace lockstep::replay {

struct WorkerOptions {
  std::string trace_file;        // this rank's recorded file
  std::string order_from_file;   // --order-from: the file whose order to follow (empty: own)
  std::string rendezvous_dir;    // unique ids are exchanged here (LOCKSTEP_RENDEZVOUS_DIR)
  int local_rank = 0;            // picks the CUDA device: local_rank % device count
  uint64_t delay_seed = 0;       // 0: no perturbation
  int max_delay_us = 0;          // perturbation: host delay before an op, and stream delays
  double timeout_s = 0;          // > 0: give up (SIGTERM to self, so the recorder flushes)
  double init_timeout_s = 60;    // waiting for a peer's unique id file
  bool verbose = false;
};

// The worker's exit status, read by the orchestrator (replay.cpp): 0 every op completed;
// kWorkerExitCannotRun when it could not replay (invalid schedule, unsupported op, NCCL/CUDA
// call failed); kWorkerExitUsage for bad arguments. A hang ends the worker with SIGTERM (so a
// preloaded recorder flushes); any other signal is a crash.
inline constexpr int kWorkerExitCannotRun = 5;
inline constexpr int kWorkerExitUsage = 2;

// Runs the worker; returns its exit status (above). Errors go to stderr prefixed
// "lockstep replay:".
int run_worker(const WorkerOptions& options);

}  // namespace lockstep::replay
