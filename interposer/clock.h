// Host clocks in integer nanoseconds. clock_gettime goes through the vDSO (no syscall) but costs
// ~33 ns per read on the H200 host (docs/gpu-results.md), so the hot path uses hot_mono_ns(): the
// same CLOCK_MONOTONIC, read from the TSC where the kernel itself uses the TSC, and derives the
// wall time from it (wall_from_mono).
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

namespace lockstep::rec {

inline int64_t now_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
inline int64_t mono_ns() { return now_ns(CLOCK_MONOTONIC); }
inline int64_t wall_ns() { return now_ns(CLOCK_REALTIME); }

// CLOCK_MONOTONIC for the hot path. Where the kernel's clocksource is the TSC (invariant and
// synchronized across CPUs, or the kernel would not use it), rdtsc scaled by a per-thread
// calibration against clock_gettime, refreshed every ~10 ms: within ~0.1 µs of clock_gettime and
// never decreasing within a thread. Elsewhere (kvm-clock, hpet, non-x86): clock_gettime. The
// choice is made when the recorder starts: a kernel that later demotes the TSC (unstable) leaves
// this clock on it: its error is then what the cores' TSCs disagree by (unbounded here).
int64_t hot_mono_ns();
// Decides (once, when the recorder starts) which of the two hot_mono_ns uses; force_tsc: use the
// TSC whatever the clocksource (tests). Spins ~2 ms to calibrate when the TSC is used.
void hot_clock_init(bool force_tsc = false);
// True when hot_mono_ns reads the TSC.
bool hot_clock_uses_tsc();

// CLOCK_REALTIME at the moment CLOCK_MONOTONIC read `mono`, from an offset re-read at most every
// millisecond of monotonic time: off by the wall clock's slew over that millisecond (NTP: at most
// 0.5 µs), and a step of the wall clock shows within 1 ms. Saves one clock read per op.
inline int64_t wall_from_mono(int64_t mono) {
  static std::atomic<int64_t> offset{0};
  static std::atomic<int64_t> refreshed{INT64_MIN / 2};
  constexpr int64_t kRefreshNs = 1000000;
  int64_t at = refreshed.load(std::memory_order_acquire);
  if (mono - at >= kRefreshNs || mono < at) {
    int64_t m0 = mono_ns();
    int64_t w = wall_ns();
    int64_t m1 = mono_ns();
    offset.store(w - (m0 + (m1 - m0) / 2), std::memory_order_relaxed);
    refreshed.store(m1, std::memory_order_release);
  }
  return mono + offset.load(std::memory_order_relaxed);
}

}  // namespace lockstep::rec
