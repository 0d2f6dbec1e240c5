#include "clock.h"

#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace lockstep::rec {
namespace {

std::atomic<bool> g_tsc{false};
uint64_t g_refresh_ticks = 0;  // ~10 ms of TSC ticks
uint64_t g_mult0 = 0;          // ns per tick << 32, from the start-up calibration

struct ThreadCal {
  uint64_t tsc_ref;
  int64_t mono_ref;
  uint64_t mult;  // ns per tick << 32
  int64_t last;   // last value returned: the clock never goes back within a thread
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadCal t_cal;

#if defined(__x86_64__)
uint64_t ticks() { return __rdtsc(); }
#else
uint64_t ticks() { return 0; }
#endif

bool clocksource_is_tsc() {
  FILE* f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
  if (!f) return false;
  char buf[32] = {};
  bool tsc = fgets(buf, sizeof buf, f) && strcmp(buf, "tsc\n") == 0;
  fclose(f);
  return tsc;
}

int64_t refresh(ThreadCal& c) {
  int64_t m = mono_ns();
  uint64_t t = ticks();
  if (c.mult && t > c.tsc_ref && t - c.tsc_ref >= g_refresh_ticks / 2 && m > c.mono_ref)
    c.mult = uint64_t((unsigned __int128)(m - c.mono_ref) << 32) / (t - c.tsc_ref);
  else if (!c.mult)
    c.mult = g_mult0;
  c.tsc_ref = t;
  c.mono_ref = m;
  if (m < c.last) m = c.last;
  c.last = m;
  return m;
}

}  // namespace

void hot_clock_init(bool force_tsc) {
#if defined(__x86_64__)
  if (!force_tsc && !clocksource_is_tsc()) {
    g_tsc.store(false);
    return;
  }
  int64_t m0 = mono_ns();
  uint64_t t0 = ticks();
  int64_t m1;
  while ((m1 = mono_ns()) - m0 < 2000000) {
  }
  uint64_t t1 = ticks();
  if (t1 <= t0) return;
  g_mult0 = uint64_t((unsigned __int128)(m1 - m0) << 32) / (t1 - t0);
  if (g_mult0 == 0) return;
  g_refresh_ticks = uint64_t((unsigned __int128)10000000 << 32) / g_mult0;  // 10 ms
  g_tsc.store(true, std::memory_order_release);
#else
  (void)force_tsc;
#endif
}

bool hot_clock_uses_tsc() { return g_tsc.load(std::memory_order_relaxed); }

int64_t hot_mono_ns() {
  if (!g_tsc.load(std::memory_order_relaxed)) return mono_ns();
  ThreadCal& c = t_cal;
  uint64_t t = ticks();
  // First use in this thread, ~10 ms since the last calibration, or a TSC behind the reference.
  if (t - c.tsc_ref >= g_refresh_ticks || !c.mult) return refresh(c);
  int64_t v = c.mono_ref + int64_t(((unsigned __int128)(t - c.tsc_ref) * c.mult) >> 32);
  if (v < c.last) v = c.last;
  c.last = v;
  return v;
}

}  // namespace lockstep::rec
