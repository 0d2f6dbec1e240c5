// For benchmarking only: switches parts of the recorder's hot path off, one at a time, so that
// bench/nccl_call_overhead.cpp and bench/recorder_bench.cpp can time what each part costs in
// alternating rounds of one process. Set at start by LOCKSTEP_BENCH_OFF=part[,part...] (names
// below) or at run time by the exported lockstep_bench_set_off(mask). A trace recorded with any
// part off is not evidence (meta `bench_off` names the mask); never set it in a real job.
#pragma once

#include <atomic>
#include <cstdint>

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
  kOffPython = 1u << 9,     // "python": python stack mode captures native frames only
  kOffUnwind = 1u << 10,    // "unwind": python stack mode captures Python frames only
  kOffPyGuard = 1u << 11,   // "pyguard": Python frames take the exact guard (no code-watcher trust)
  kProfile = 1u << 12,      // "profile": not a part; accumulates the counters below (rdtsc)
  kOffUnwindCap = 1u << 13, // "unwindcap": python mode unwinds every native frame (as before)
  kOffCovering = 1u << 14,  // "covering": LOCKSTEP_COMPLETION=covering records an event per op
  // 1u << 15 was "prefetch" (removed: the queues no longer prefetch; cost session 6)
  kOffEagerWriter = 1u << 16,  // "eager": the writer sleeps a full interval after every round
  kOffDoneRows = 1u << 17,  // "donerows": the watchdog pushes no completion rows
  kOffWaitRow = 1u << 18,   // "waitrow": a recorded runtime call pushes no row (its hook's
                            // other work is done): with "queue" and "donerows", the writer idles
  // 1u << 19..20: taken by a benchmark branch's runtime-call switches (bench/step_overhead.py)
  kOffStackMemo = 1u << 21, // "stackmemo": every stack unwound (no memoized native frames)
  kOffPyCache = 1u << 22,   // "pycache": Python frames by the interning walk at every capture, not
                            // through the thread stack cache (capture_python_frames_cached)
  kOffAdopt = 1u << 23,     // "adopt": no adopted caller events: our own event recorded in the
                            // hook after every op (the completion signal before issue 31)
};

// Where the hot path's time goes, summed over every thread while kProfile is set (ticks of
// the TSC; lockstep_bench_counters copies them out). Relaxed adds: approximate under races.
enum BenchCounter : unsigned {
  kCntOps,           // op_begin calls that recorded
  kCntOpBeginTicks,  // op_begin's recorder work (clock, call index, stack, capture query)
  kCntOpEndTicks,    // op_end's recorder work (row, queue push, completion tracking)
  kCntStacks,        // stack captures
  kCntUnwindTicks,   // native unwind
  kCntUnwindFrames,  // native frames returned by the unwinder
  kCntPythonTicks,   // Python frame walk (intern lookups and their guards included)
  kCntPythonFrames,  // Python frames captured
  kCntStackSubmitTicks,  // hashing, seen-cache lookup, new stacks submitted to the writer
  kCntStackSubmits,  // stacks submitted (not in the per-thread seen cache)
  kCntWaits,         // runtime calls recorded (waits rows)
  kCntWaitTicks,     // their recorder work (call index, clock, row)
  kCntEventTicks,    // op_end's completion tracking (context query, event record, handoff)
  kCntEventRecordTicks,  // of which the driver's cuEventRecord
  kCntCaptureTicks,  // op_begin's stream capture query (cuStreamGetCaptureInfo)
  kCntRowPushTicks,  // op_end's op row into the writer's queue
  kCntUnwinds,       // native unwinds done (memo misses and samples; the rest were memo hits)
  kCntSettleTicks,   // an adopted event recorded again or destroyed: settling its adoption
  kCntSettleQueries, // of those, settled by the driver's cuEventQuery (not yet released)
  kCntCount
};
extern std::atomic<uint64_t> g_bench_counters[kCntCount];
#if defined(__x86_64__)
inline uint64_t bench_ticks() { return __builtin_ia32_rdtsc(); }
#else
inline uint64_t bench_ticks() { return 0; }
#endif
inline void bench_count(BenchCounter c, uint64_t v) {
  g_bench_counters[c].fetch_add(v, std::memory_order_relaxed);
}

// Parses "stack,clock" (unknown names: false). "" is 0.
bool parse_bench_off(const char* s, unsigned* mask);

extern std::atomic<unsigned> g_bench_off;
inline unsigned bench_off() { return g_bench_off.load(std::memory_order_relaxed); }

}  // namespace lockstep::rec
