// Python stacks of another process, read from outside with process_vm_readv (no ptrace needed,
// nothing written, no Python code run): the interpreter is found through the ELF symbols of the
// libpython or python executable mapped in /proc/PID/maps (_PyRuntime; on 3.13+ its
// _Py_DebugOffsets), its structs read with the recorder's layouts (interposer/python_layouts.h)
// plus the thread-list offsets below. Every thread state of every interpreter, the GIL holder
// marked. Reads are consistent when the process is stopped (ptrace_stacks.h calls us there).
#pragma once

#include <cstdint>
#include <chrono>
#include <string>
#include <vector>

#include "snapshot.h"

namespace lockstep::attach {

struct PythonThread {
  uint64_t thread_id = 0;  // PyThreadState.thread_id: the thread's pthread_t
  int native_tid = 0;      // PyThreadState.native_thread_id (3.11+), 0 when unknown
  bool gil_holder = false;
  std::vector<PythonFrame> frames;  // innermost first
};

struct RemotePython {
  bool found = false;   // a supported CPython runs in the process
  std::string status;   // "CPython 3.12.1 (/usr/lib/libpython3.12.so.1.0)", or why not
  bool cut_short = false;  // the stop's read budget ran out before every thread state was read
  std::vector<PythonThread> threads;
};

// Finds the interpreter (no stop needed). Cheap to call again.
class RemotePythonReader {
 public:
  explicit RemotePythonReader(int pid);
  ~RemotePythonReader();
  RemotePythonReader(const RemotePythonReader&) = delete;
  RemotePythonReader& operator=(const RemotePythonReader&) = delete;
  const std::string& status() const;
  bool found() const;
  // Reads every thread's frames now; thread states not reached by `deadline` are not read
  // (status says so).
  RemotePython read(std::chrono::steady_clock::time_point deadline =
                        std::chrono::steady_clock::time_point::max()) const;

 private:
  struct Impl;
  Impl* impl_;
};

// Fills threads[i].python / has_python / gil_holder from py, matching by native thread id, else
// by pthread_t (the thread's fs base on x86-64, taken while it was stopped).
void merge_python_threads(const RemotePython& py, std::vector<ThreadSnapshot>& threads);

}  // namespace lockstep::attach
