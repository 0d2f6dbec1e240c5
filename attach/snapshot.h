// What `lockstep attach` reads from a live process, from outside (docs/attach.md): typed data
// between the collectors (ptrace_stacks, remote_python, ras_client, procfs) and the analysis
// (attach_analysis). Serialized as one JSON file per node (snapshot_json.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::attach {

struct NativeFrame {
  uint64_t ip = 0;
  std::string function;  // demangled symbol, "" when unknown
  uint64_t function_offset = 0;
  std::string module;  // path of the mapped file holding ip, "" when anonymous
  uint64_t module_offset = 0;
};

struct PythonFrame {
  std::string file;
  std::string function;
  int line = 0;  // 0: unknown
};

struct ThreadSnapshot {
  int tid = 0;
  std::string name;   // /proc/PID/task/TID/comm
  char state = '?';   // /proc/.../stat state before the stop (R, S, D, ...)
  std::string wchan;  // /proc/.../wchan: the kernel function it sleeps in
  uint64_t pthread_self = 0;  // its pthread_t (x86-64: fs base while stopped), 0 when unknown
  std::vector<NativeFrame> native;  // innermost first
  std::string native_error;         // why the native stack is missing or short
  bool exited = false;              // it exited while being attached (no stack to read: not a gap)
  bool has_python = false;          // a CPython thread state belongs to this thread
  bool gil_holder = false;
  std::vector<PythonFrame> python;  // innermost first
  // voluntary_ctxt_switches of /proc/.../status, read with the process running (after a stop),
  // when switches_read: the times the thread went to sleep; unchanged between two looks, it did
  // not wake in between.
  bool switches_read = false;
  uint64_t voluntary_switches = 0;
};

// NCCL RAS (src/ras/ in NVIDIA/nccl): one answer covers every communicator of the job that the
// queried process's RAS network knows.
struct RasRank {
  int rank = -1;
  std::string host;
  int pid = -1;
  int cuda_dev = -1;
  int init_state = 0;
  int async_error = 0;
  bool finalize_called = false, destroy_flag = false, abort_flag = false;
  std::map<std::string, uint64_t> coll_counts;  // "AllReduce" -> collectives enqueued
};
struct RasMissingRank {
  int rank = -1;
  std::string host;
  int pid = -1;
  bool unresponsive = false, considered_dead = false;
};
struct RasComm {
  std::string hash;  // "0x..." (NCCL's commHash)
  int size = 0;
  std::vector<RasRank> ranks;
  std::vector<RasMissingRank> missing;
};
struct RasAnswer {
  std::string address;  // host:port asked
  bool reached = false;
  std::string error;  // why not (connection refused, timeout, protocol)
  int server_protocol = 0;
  std::string nccl_version;
  bool json = false;     // the server accepted SET FORMAT json
  std::string raw;       // the reply as received (bounded)
  std::vector<RasComm> comms;  // parsed from the JSON reply
};

// Where a process's stop went (milliseconds; they add up to stopped_ms).
struct StopBreakdown {
  double interrupt_ms = 0;  // PTRACE_INTERRUPT of every thread until the last one is stopped
  double unwind_ms = 0;     // registers and native frames of every thread
  double python_ms = 0;     // the Python frames, read with the threads stopped
  double detach_ms = 0;     // PTRACE_DETACH of every thread
  double cpu_ms = 0;  // lockstep's own CPU time in the stop: far below stopped_ms, it waited for a core
};

struct ProcessSnapshot {
  int pid = 0;
  std::string host;
  std::vector<std::string> cmdline;
  int rank = -1;  // RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK of its environment
  int world_size = -1;
  std::string error;  // the process could not be read at all (refused, gone)
  std::string fix;    // what to do about error
  // Native stacks: every listed thread is stopped (ptrace interrupt), unwound and resumed.
  double stopped_ms = 0;  // from the first thread's stop to the last thread's resume
  int threads_stopped = 0;
  StopBreakdown stop;
  std::vector<ThreadSnapshot> threads;
  std::string python_status;  // "CPython 3.12.1", "no CPython", or why frames were not read
  bool python_cut_short = false;  // the stop's read budget ran out before every thread state was read
  std::string nccl_library;   // path of the libnccl mapped, "" when none
  std::string ras_address;    // NCCL_RAS_ADDR of its environment, or the default
  // The job's own evidence, found from its environment (attach_analysis reads it):
  std::string lockstep_dir;       // its lockstep trace directory (absolute): the job was recorded
  std::string lockstep_dir_from;  // how that was found: "LOCKSTEP_DIR", or the recorder mapped
                                  // without it (the default directory in its cwd)
  bool recorder_mapped = false;   // liblockstep.so is mapped: its recorder runs in the process
  double start_time = 0;          // when the process started, seconds since the epoch; 0: unknown
  std::string fr_dump_prefix;     // Flight Recorder's dump prefix (absolute), "" when not set
  std::string fr_dump_variable;   // TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE
  std::vector<std::string> fr_dumps;        // files at that prefix written since the process started
  std::vector<std::string> fr_dumps_stale;  // files there older than the process: another job's
  std::map<std::string, std::string> nccl_env;  // NCCL_* variables of its environment
};

// The second look (docs/attach.md, "One instant proves no hang"): `after_ms` after the first,
// NCCL RAS asked again, and, unless the RAS counts already moved, each process's stacks read
// again. A hang or a count divergence is proven only when this look shows the same as the first.
struct SecondLook {
  bool taken = false;
  double after_ms = 0;  // from the end of the first look to the start of this one
  std::vector<RasAnswer> ras;          // one per RAS address asked in the first look
  std::vector<ProcessSnapshot> procs;  // stacks read again (empty: not needed or not asked)
  std::string stacks_skipped;          // why the stacks were not read again
};

struct NodeSnapshot {
  std::string host;
  std::string taken_at;  // UTC, ISO 8601
  // The attach this snapshot is of (one per `lockstep attach`: its --slurm collectors share
  // their coordinator's): snapshots of several attaches in one directory are never one job.
  std::string session;
  std::string lockstep_version;
  std::vector<ProcessSnapshot> procs;
  std::vector<RasAnswer> ras;  // one per distinct RAS address of the processes
  SecondLook second;
};

}  // namespace lockstep::attach
