#include "bench_knobs.h"

#include <cstring>
#include <string>

namespace lockstep::rec {

std::atomic<unsigned> g_bench_off{0};

bool parse_bench_off(const char* s, unsigned* mask) {
  static const struct { const char* name; unsigned bit; } parts[] = {
      {"recorder", kOffRecorder}, {"stack", kOffStack}, {"capture", kOffCapture},
      {"clock", kOffClock},       {"event", kOffEvent}, {"queue", kOffQueue},
      {"watchdog", kOffWatchdog}, {"waits", kOffWaits}};
  unsigned m = 0;
  std::string all(s ? s : "");
  size_t i = 0;
  while (i < all.size()) {
    size_t j = all.find(',', i);
    if (j == std::string::npos) j = all.size();
    std::string name = all.substr(i, j - i);
    bool found = false;
    for (const auto& p : parts)
      if (name == p.name) {
        m |= p.bit;
        found = true;
      }
    if (!found) return false;
    i = j + 1;
  }
  *mask = m;
  return true;
}

}  // namespace lockstep::rec
