// The two per-op completion signals, made on the issuing thread right after an op is enqueued
// and read by the watchdog:
// - event (the default): a pooled cuEvent recorded on the stream; the watchdog queries it.
// - memop (LOCKSTEP_COMPLETION=memop; events where the device cannot): cuStreamWriteValue64 of
//   the stream's next ordinal into that stream's slot of pinned, device-mapped host memory. The write runs when the work before it on the stream
//   has finished, like an event; the watchdog reads the slot with one load (no driver call, so
//   no contention with the issuing thread for the driver's locks, no context switching).
//   Precision: per op, like events, except that an op of a stream in error never completes
//   (an event query reports the error as done). Only for real stream objects: the legacy and
//   per-thread default streams (handles 0, 1, 2) are different streams in different threads or
//   contexts under one handle, so their ordinals would not be monotonic.
// Measured on an H200 (docs/gpu-results.md, 2026-12-01 cost run): the write costs the issuing
// thread ~1 us per op, the event ~200 ns, so events are the default.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "completion_driver.h"

namespace lockstep::rec {

struct Signal {
  void* event = nullptr;  // event signal; nullptr for a memop signal
  uint32_t slot = 0;      // memop: the stream's slot
  uint64_t value = 0;     // memop: done once the slot holds >= value
};

// Free events per context, with a per-thread cache so that the hot path takes no lock.
class EventPool {
 public:
  explicit EventPool(CompletionDriver* drv) : drv_(drv) {}
  void* take(void* ctx);              // nullptr: none free and none could be created
  void put(void* ctx, void* event);   // an event that could not be recorded
  void release(std::vector<std::pair<void*, void*>>&& ctx_events);  // from the watchdog

 private:
  CompletionDriver* drv_;
  std::mutex mu_;
  std::map<void*, std::vector<void*>> pool_;  // ctx -> free events
};

class MemopSlots {
 public:
  static constexpr uint32_t kSlots = 4096;  // streams; more use events
  explicit MemopSlots(CompletionDriver* drv) : drv_(drv) {}
  // Enqueues the signal after the work issued so far on `stream`; false: use an event.
  bool signal(void* stream, Signal* out);
  bool done(const Signal& s) const {
    return __atomic_load_n(&host_[s.slot], __ATOMIC_ACQUIRE) >= s.value;
  }
  // "memop", or "event: <why memops are not used>"; "" until the first op decided it.
  std::string state_text();

 private:
  bool init();
  uint32_t slot_of(void* stream);  // kSlots when the table is full
  CompletionDriver* drv_;
  std::atomic<int> state_{0};  // 0 = not tried, 1 = usable, -1 = not
  std::mutex mu_;
  std::string why_not_;
  uint64_t* host_ = nullptr;   // kSlots words written by the GPU
  unsigned long long dev_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> issued_;  // last ordinal handed out per slot
  std::map<void*, uint32_t> slot_of_;
};

}  // namespace lockstep::rec
