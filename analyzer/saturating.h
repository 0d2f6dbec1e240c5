// Arithmetic on numbers read from untrusted files (clock values, counts): saturates at the int64
// limits instead of overflowing (signed overflow is undefined behaviour; a crafted trace can hold
// any int64). Use where a value's range was not checked when it was read.
#pragma once

#include <cstdint>

namespace lockstep {

inline int64_t sat_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

inline int64_t sat_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) return b < 0 ? INT64_MAX : INT64_MIN;
  return r;
}

}  // namespace lockstep
