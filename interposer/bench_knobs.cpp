#include "bench_knobs.h"

#include <cstring>
#include <string>

namespace lockstep::rec {

std::atomic<unsigned> g_bench_off{0};
std::atomic<uint64_t> g_bench_counters[kCntCount];

bool parse_bench_off(const char* s, unsigned* mask) {
  static const struct { const char* name; unsigned bit; } parts[] = {
      {"recorder", kOffRecorder}, {"stack", kOffStack}, {"capture", kOffCapture},
      {"clock", kOffClock},       {"event", kOffEvent}, {"queue", kOffQueue},
      {"watchdog", kOffWatchdog}, {"waits", kOffWaits}, {"memop", kOffMemop},
      {"python", kOffPython},     {"unwind", kOffUnwind}, {"pyguard", kOffPyGuard},
      {"profile", kProfile},      {"unwindcap", kOffUnwindCap},
      {"covering", kOffCovering}, {"eager", kOffEagerWriter},
      {"donerows", kOffDoneRows}, {"waitrow", kOffWaitRow},
      {"stackmemo", kOffStackMemo}, {"pycache", kOffPyCache}, {"adopt", kOffAdopt}};
  unsigned m = 0;
  std::string all(s ? s : "");
  if (all.empty()) {
    *mask = 0;
    return true;
  }
  for (size_t i = 0;;) {  // every comma-separated name must be a part (no empty names)
    size_t j = all.find(',', i);
    std::string name = all.substr(i, j == std::string::npos ? std::string::npos : j - i);
    bool found = false;
    for (const auto& p : parts)
      if (name == p.name) {
        m |= p.bit;
        found = true;
      }
    if (!found) return false;
    if (j == std::string::npos) break;
    i = j + 1;
  }
  *mask = m;
  return true;
}

}  // namespace lockstep::rec
