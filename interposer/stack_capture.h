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
// Python mode, on a thread running Python code: native frames kept below the hook. Deeper
// ones are the interpreter's and the bindings' (the Python frames name the caller), and each
// frame unwound cost ~55 ns on the H200 host under PyTorch (docs/gpu-results.md, cost session 4).
inline constexpr int kNativeFramesUnderPython = 12;
inline constexpr int kOwnFrames = 8;  // liblockstep's own frames at most, skipped

struct NativeMemo;  // stack_capture.cpp: the thread's memoized native frames

struct StackBuf {
  uintptr_t pcs[kMaxNativeFrames];
  int n = 0;
  PyFrameRaw py[kMaxPythonFrames];
  int npy = 0;
  NativeMemo* memo = nullptr;  // per thread (one StackBuf per thread), made on first use
  StackBuf() = default;
  StackBuf(const StackBuf&) = delete;
  StackBuf& operator=(const StackBuf&) = delete;
  ~StackBuf();
};

// The NCCL hook's caller, as the outermost op hook saw it (nccl_hooks.cpp): its return address
// and the hook's frame address (a function of the caller's stack pointer). capture_stack reads
// and clears it; 0 (a capture not from an op hook: the profiler plugin) means no memo.
struct HookSite {
  uintptr_t ra = 0;
  uintptr_t frame = 0;
};
extern __attribute__((tls_model("initial-exec"))) thread_local HookSite t_hook_site;

// Native memo counters, process-wide (meta `native_stack_memo` at exit): stacks unwound because
// the memo had no entry or its slots did not verify, hits re-unwound by sampling, and samples
// that disagreed with the memo (the entry is then never trusted again).
struct NativeMemoStats {
  uint64_t unwound, sampled, disagreed, unverifiable;
};
NativeMemoStats native_memo_stats();

// Chooses the unwinder and the mode (LOCKSTEP_STACKS=none|native|python; default python when
// CPython is in the process, else native). Returns the mode actually in effect.
StackMode stacks_init();

// Fills buf with the caller's native frames (liblockstep's own frames skipped; in python mode
// the innermost kNativeFramesUnderPython when the thread has Python frames) and, in python
// mode, its Python frames; returns the stack's hash (never 0). Allocation-free (except the first
// sight of a Python code object, interned by python_frames.cpp). `off`: the bench knobs
// (bench_knobs.h: kOffPython, kOffUnwind, kOffUnwindCap, kProfile); 0 in a real job.
uint64_t capture_stack(StackMode mode, StackBuf& buf, unsigned off = 0);

// Name of the unwinder in use ("libunwind", "glibc-backtrace").
const char* unwinder_name();

}  // namespace lockstep::rec
