#include "stack_capture.h"

#include <dlfcn.h>
#include <execinfo.h>

#include <cstdlib>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bench_knobs.h"
#include "config.h"
#include "log.h"
#include "python_frames.h"
#include "symbol_lookup.h"

namespace lockstep::rec {
namespace {

using UnwBacktrace = int (*)(void**, int);
UnwBacktrace g_unw = nullptr;

int glibc_backtrace(void** buf, int n) { return backtrace(buf, n); }

}  // namespace

StackMode stacks_init() {
  // RTLD_LOCAL, never DT_NEEDED: libunwind.so.8 exports the C++ exception ABI and a weak
  // backtrace(); in the global scope they would take over the application's (DESIGN.md).
  if (void* h = dlopen("libunwind.so.8", RTLD_LOCAL | RTLD_NOW)) {
    g_unw = reinterpret_cast<UnwBacktrace>(dlsym(h, "unw_backtrace"));
    // libunwind's default global cache takes a process-wide lock in every unw_step: a fork while
    // another thread unwinds leaves it locked in the child, whose first stack then hangs. A
    // per-thread cache takes no lock (UNW_CACHE_PER_THREAD = 2 in libunwind-common.h).
    using SetCachingPolicy = int (*)(void* addr_space, int policy);
    auto set_policy = reinterpret_cast<SetCachingPolicy>(dlsym(h, "_ULx86_64_set_caching_policy"));
    auto* local_as = static_cast<void**>(dlsym(h, "_ULx86_64_local_addr_space"));
    if (set_policy && local_as && *local_as) set_policy(*local_as, 2);
  }
  if (!g_unw) {
    // glibc's backtrace() loads libgcc_s on first use; do it now, not on the hot path.
    void* warm[4];
    backtrace(warm, 4);
  }

  const StacksSetting setting = config().stacks;  // bad values: warned there, default here
  bool has_python = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState") != nullptr;
  StackMode want = has_python ? StackMode::Python : StackMode::Native;
  if (setting == StacksSetting::None) want = StackMode::None;
  else if (setting == StacksSetting::Native) want = StackMode::Native;
  else if (setting == StacksSetting::Python) want = StackMode::Python;
  if (want == StackMode::Python && !lockstep::python_frames_available()) {
    if (setting == StacksSetting::Python)
      warn("LOCKSTEP_STACKS=python but %s; recording native stacks only",
           lockstep::python_frames_status());
    want = StackMode::Native;
  }
  return want;
}

const char* unwinder_name() { return g_unw ? "libunwind" : "glibc-backtrace"; }

uint64_t capture_stack(StackMode mode, StackBuf& buf, unsigned off) {
  buf.n = 0;
  buf.npy = 0;
  if (mode == StackMode::None) return 0;
  const bool profile = off & kProfile;
  uint64_t t0 = profile ? bench_ticks() : 0;
  const bool python = mode == StackMode::Python && !(off & kOffPython);
  if (python) {
    buf.npy = int(lockstep::capture_python_frames(buf.py, kMaxPythonFrames));
    if (profile) {
      uint64_t t1 = bench_ticks();
      bench_count(kCntPythonTicks, t1 - t0);
      bench_count(kCntPythonFrames, uint64_t(buf.npy));
      t0 = t1;
    }
  }
  if (!python || !(off & kOffUnwind)) {
    // Below Python frames the native stack is the interpreter's: only the innermost frames
    // (the C/C++ path from the Python call to NCCL) say more than the Python frames do.
    const int want = python && buf.npy > 0 && !(off & kOffUnwindCap) ? kNativeFramesUnderPython
                                                                      : kMaxNativeFrames;
    void* raw[kMaxNativeFrames + kOwnFrames];
    int n = g_unw ? g_unw(raw, want + kOwnFrames) : glibc_backtrace(raw, want + kOwnFrames);
    int skip = 0;
    while (skip < n && in_own_module(raw[skip])) skip++;
    for (int i = skip; i < n && buf.n < want; i++)
      buf.pcs[buf.n++] = reinterpret_cast<uintptr_t>(raw[i]);
    if (profile) {
      bench_count(kCntUnwindTicks, bench_ticks() - t0);
      bench_count(kCntUnwindFrames, uint64_t(n));
    }
  }
  uint64_t h = XXH3_64bits(buf.pcs, sizeof(uintptr_t) * buf.n);
  if (buf.npy > 0) h = lockstep::python_frames_hash(buf.py, size_t(buf.npy), h);
  return h ? h : 1;
}

}  // namespace lockstep::rec
