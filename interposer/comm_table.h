// Per-communicator state, found by ncclComm_t handle on the hot path without a lock. Handles
// are reused after destroy/abort, so a destroyed communicator's entry is retired (the state
// itself is never freed: a racing reader never touches freed memory; a few bytes per comm).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace lockstep::rec {

struct CommState {
  int64_t id = 0;       // comms.id
  uint64_t hash = 0;    // identity shared by all members
  int nranks = 0;
  int rank = 0;
  std::atomic<int64_t> next_seq{1};
  std::atomic<int64_t> split_counter{0};  // children created by split/shrink so far
};

class CommTable {
 public:
  CommState* find(const void* handle) const;
  // Registers a new state for handle (replacing a live one with the same handle).
  void insert(const void* handle, CommState* state);
  void retire(const void* handle);

 private:
  static constexpr size_t kSlots = 1 << 14;
  static constexpr uintptr_t kTombstone = 1;
  struct Slot {
    std::atomic<uintptr_t> key{0};
    std::atomic<CommState*> value{nullptr};
  };
  Slot slots_[kSlots];
  std::mutex mu_;  // writers only
};

}  // namespace lockstep::rec
