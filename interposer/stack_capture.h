// Call-stack capture on the hot path: native return addresses (libunwind's unw_backtrace, or
// glibc backtrace() when libunwind.so.8 is absent), hashed for deduplication. Symbolization
// happens later in the writer thread (symbolize.h). In python mode the calling thread's Python
// frames (python_frames.h) are captured too and take part in the hash.
#pragma once

#include <atomic>
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

struct StackBuf {
  uintptr_t pcs[kMaxNativeFrames];
  int n = 0;
  PyFrameRaw py[kMaxPythonFrames];
  int npy = 0;
};

// Chooses the unwinder and the mode (LOCKSTEP_STACKS=none|native|python; default python when
// CPython is in the process, else native). Returns the mode actually in effect.
StackMode stacks_init();

// Fills buf with the caller's native frames (liblockstep's own frames skipped; in python mode
// the innermost kNativeFramesUnderPython when the thread has Python frames) and, in python
// mode, its Python frames; returns the stack's hash (never 0). Allocation-free (except the first
// sight of a Python code object, interned by python_frames.cpp). `off`: the bench knobs
// (bench_knobs.h: kOffPython, kOffUnwind, kOffUnwindCap, kProfile); 0 in a real job.
uint64_t capture_stack(StackMode mode, StackBuf& buf, unsigned off = 0);

// The innermost `want` frames of the caller of liblockstep (`own`: a frame of ours) into out;
// returns how many. Exactly the frames `unwind` gives when asked for want + kOwnFrames, asking
// it for fewer: want + the most own frames seen so far (own_seen, learnt here), and once more
// for want + kOwnFrames when that cut the caller's frames short (a deeper path of ours). Each
// frame unwound costs ~55 ns under PyTorch (docs/gpu-results.md, cost session 4), and only 4
// of the kOwnFrames are ours there (cost session 8). *unwound: frames the unwinder returned; *retried: asked twice.
template <class Unwind, class Own>
__attribute__((always_inline)) inline int innermost_frames(Unwind unwind, Own own,
                                                           std::atomic<int>& own_seen, int want,
                                                           uintptr_t* out, int* unwound,
                                                           bool* retried) {
  void* raw[kMaxNativeFrames + kOwnFrames];
  if (want > kMaxNativeFrames) want = kMaxNativeFrames;
  auto count_own = [&](int n) {
    int skip = 0;
    while (skip < n && own(raw[skip])) skip++;
    return skip;
  };
  const int seen = own_seen.load(std::memory_order_relaxed);
  const int ask = want + (seen >= 0 && seen < kOwnFrames ? seen : kOwnFrames);
  int n = unwind(raw, ask);
  int skip = count_own(n);
  *retried = false;
  if (n == ask && n - skip < want && ask < want + kOwnFrames) {  // a deeper path of ours
    *retried = true;
    n = unwind(raw, want + kOwnFrames);
    skip = count_own(n);
  }
  if (skip > seen && skip < n) {  // a frame of the caller's was reached: skip is exact
    int cur = seen;
    while (cur < skip && !own_seen.compare_exchange_weak(cur, skip, std::memory_order_relaxed)) {
    }
  }
  int kept = 0;
  for (int i = skip; i < n && kept < want; i++) out[kept++] = reinterpret_cast<uintptr_t>(raw[i]);
  *unwound = n;
  return kept;
}

// Name of the unwinder in use ("libunwind", "glibc-backtrace").
const char* unwinder_name();

}  // namespace lockstep::rec
