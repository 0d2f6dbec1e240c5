// Call-stack capture on the hot path: native return addresses (libunwind's unw_backtrace, or
// glibc backtrace() when libunwind.so.8 is absent), hashed for deduplication. Symbolization
// happens later in the writer thread (symbolize.h). In python mode the calling thread's Python
// frames (python_frames.h) are captured too and take part in the hash.
#pragma once

#include <cstddef>
#include <cstdint>

#include "python_frames.h"

namespace lockstep::rec {

enum class StackMode { None, Native, Python };
inline const char* stack_mode_name(StackMode m) {
  return m == StackMode::None ? "none" : m == StackMode::Native ? "native" : "python";
}

inline constexpr int kMaxNativeFrames = 64;
inline constexpr int kMaxPythonFrames = 64;

struct StackBuf {
  uintptr_t pcs[kMaxNativeFrames];
  int n = 0;
  PyFrameRaw py[kMaxPythonFrames];
  int npy = 0;
};

// Chooses the unwinder and the mode (LOCKSTEP_STACKS=none|native|python; default python when
// CPython is in the process, else native). Returns the mode actually in effect.
StackMode stacks_init();

// Fills buf with the caller's native frames (liblockstep's own frames skipped) and, in python
// mode, its Python frames; returns the stack's hash (never 0). Allocation-free (except the first
// sight of a Python code object, interned by python_frames.cpp). `off`: the bench knobs
// (bench_knobs.h: kOffPython, kOffUnwind, kProfile); 0 in a real job.
uint64_t capture_stack(StackMode mode, StackBuf& buf, unsigned off = 0);

// Name of the unwinder in use ("libunwind", "glibc-backtrace").
const char* unwinder_name();

}  // namespace lockstep::rec
