// For benchmarking only: switches parts of the recorder's hot path off, one at a time, so that
// bench/nccl_call_overhead.cpp and bench/recorder_bench.cpp can time what each part costs in
// alternating rounds of one process. Set at start by LOCKSTEP_BENCH_OFF=part[,part...] (names
// below) or at run time by the exported lockstep_bench_set_off(mask). A trace recorded with any
// part off is not evidence (meta `bench_off` names the mask); never set it in a real job.
#pragma once

#include <atomic>

namespace lockstep::rec {

enum BenchOff : unsigned {
  kOffRecorder = 1u << 0,   // "recorder": NCCL hooks forward only (what is left: hook entry)
  kOffStack = 1u << 1,      // "stack": no stack capture
  kOffCapture = 1u << 2,    // "capture": no capture-status query (stream taken as not capturing)
  kOffClock = 1u << 3,      // "clock": no clock reads (timestamps 0)
  kOffEvent = 1u << 4,      // "event": no completion tracking (no context query, event, watchdog)
  kOffQueue = 1u << 5,      // "queue": the op's record is not pushed to the writer
  kOffWatchdog = 1u << 6,   // "watchdog": the watchdog hands events back without querying them
  kOffWaits = 1u << 7,      // "waits": CUDA runtime hooks forward only
  kOffMemop = 1u << 8,      // "memop": completion by event even where stream memops work
};

// Parses "stack,clock" (unknown names: false). "" is 0.
bool parse_bench_off(const char* s, unsigned* mask);

extern std::atomic<unsigned> g_bench_off;
inline unsigned bench_off() { return g_bench_off.load(std::memory_order_relaxed); }

}  // namespace lockstep::rec
