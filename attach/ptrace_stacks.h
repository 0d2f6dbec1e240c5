// Native stacks of every thread of a live process, from outside: PTRACE_SEIZE each thread,
// PTRACE_INTERRUPT (a ptrace-stop: no signal is delivered), unwind with libunwind's ptrace
// accessors, PTRACE_DETACH. Nothing is written into the process.
//
// Every stopped thread is resumed on every path: errors detach what was seized; SIGINT,
// SIGTERM and SIGHUP detach through install_detach_on_signals(); and if lockstep is killed
// (SIGKILL, a crash) the kernel detaches its tracees as it exits (exit_ptrace), which resumes a
// thread in a ptrace-stop. Only a thread that was already in a group-stop (the whole process
// SIGSTOPped before we came) stays stopped, as it was.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "snapshot.h"

namespace lockstep::attach {

struct NativeCapture {
  std::string error;  // empty: the stop and unwind happened (threads may still carry errors)
  bool refused = false;  // the error is a ptrace refusal (permissions), not a process that exited
  double stopped_ms = 0;
  int threads_stopped = 0;
  StopBreakdown stop;
};

// How long the reads of a stop may take once its threads stopped (the unwinds, then the Python
// frames): past it, the threads not read yet are named so and the process is let go.
inline constexpr std::chrono::milliseconds kStopReadBudget{1000};

// Stops every thread of pid (the ones listed in /proc/PID/task when called), unwinds each into
// threads (which it fills: tid, name, state, wchan, native frames), calls while_stopped(deadline)
// with the process still stopped (Python frames are read there, consistent with the native
// ones; what is not read by `deadline` is left), then resumes every thread. Symbolization
// happens after the resume.
// Threads left seized by an earlier capture because they had not stopped when their process
// was let go (uninterruptible sleep: their stop comes when the system call returns): detaches
// those that have stopped since, waiting up to `wait` for the rest. Returns how many remain
// (the kernel detaches them when lockstep exits). Each capture calls it with no wait.
size_t release_late_threads(std::chrono::milliseconds wait);

NativeCapture capture_native_stacks(
    int pid, std::vector<ThreadSnapshot>& threads,
    const std::function<void(std::chrono::steady_clock::time_point deadline)>& while_stopped,
    std::chrono::milliseconds read_budget = kStopReadBudget);

// SIGINT/SIGTERM/SIGHUP: detach every thread stopped at that moment, then die of the signal
// with its default action. Call once per process before capturing.
void install_detach_on_signals();

}  // namespace lockstep::attach
