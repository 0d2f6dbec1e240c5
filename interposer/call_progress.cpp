#include "call_progress.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace lockstep::rec {
namespace {

struct alignas(64) Slot {
  std::atomic<int64_t> lowest{INT64_MAX};
};
Slot g_slots[kProgressSlots];
std::atomic<bool> g_unpublished{false};  // a thread found no slot: the order is unknown
std::atomic<int> g_next_slot{0};
std::mutex g_free_mu;
std::vector<int> g_free;  // slots of threads that exited

__attribute__((tls_model("initial-exec"))) thread_local int t_slot = -2;  // -2: none claimed yet
// Nested calls of one thread (NCCL's profiler callbacks inside a hooked call): the outermost
// call's bound stands until it ends.
__attribute__((tls_model("initial-exec"))) thread_local int t_depth = 0;

int claim() noexcept {
  {
    std::lock_guard<std::mutex> g(g_free_mu);
    if (!g_free.empty()) {
      const int s = g_free.back();
      g_free.pop_back();
      return s;
    }
  }
  const int s = g_next_slot.fetch_add(1, std::memory_order_relaxed);
  if (s < kProgressSlots) return s;
  g_unpublished.store(true, std::memory_order_release);
  return -1;
}

}  // namespace

void progress_begin(const std::atomic<int64_t>& next_call) noexcept {
  if (t_depth++ > 0) return;
  if (t_slot == -2) t_slot = claim();
  if (t_slot < 0) return;
  // A lower bound of the call_index the caller takes next. The caller's fetch_add of it is
  // acq_rel: this store happens before it, hence before any later call's (the counter's
  // read-modify-writes synchronize), whose record the writer has taken when it reads the slot.
  g_slots[t_slot].lowest.store(next_call.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void progress_end() noexcept {
  if (t_depth == 0 || --t_depth > 0) return;
  if (t_slot >= 0) g_slots[t_slot].lowest.store(INT64_MAX, std::memory_order_release);
}

void progress_release() noexcept {
  t_depth = 0;
  if (t_slot < 0) return;
  g_slots[t_slot].lowest.store(INT64_MAX, std::memory_order_release);
  try {
    std::lock_guard<std::mutex> g(g_free_mu);
    g_free.push_back(t_slot);
  } catch (...) {  // the slot stays taken: harmless
  }
  t_slot = -2;
}

int64_t lowest_call_in_progress(const std::atomic<int64_t>& next_call) noexcept {
  int64_t lowest = next_call.load(std::memory_order_acquire);
  if (g_unpublished.load(std::memory_order_acquire)) return INT64_MIN;
  const int n = std::min(g_next_slot.load(std::memory_order_acquire), kProgressSlots);
  for (int i = 0; i < n; ++i) lowest = std::min(lowest, g_slots[i].lowest.load(std::memory_order_acquire));
  return lowest;
}

}  // namespace lockstep::rec
