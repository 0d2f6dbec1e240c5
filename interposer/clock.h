// Host clocks in integer nanoseconds (vDSO: no syscall on the hot path).
#pragma once

#include <time.h>

#include <cstdint>

namespace lockstep::rec {

inline int64_t now_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
inline int64_t mono_ns() { return now_ns(CLOCK_MONOTONIC); }
inline int64_t wall_ns() { return now_ns(CLOCK_REALTIME); }

}  // namespace lockstep::rec
