#include "completion_signal.h"

#include <cstring>

namespace lockstep::rec {

namespace {
constexpr unsigned kEventDisableTiming = 0x2;          // CU_EVENT_DISABLE_TIMING
constexpr unsigned kHostAllocPortable = 0x1;           // CU_MEMHOSTALLOC_PORTABLE
constexpr unsigned kHostAllocDeviceMap = 0x2;          // CU_MEMHOSTALLOC_DEVICEMAP
constexpr unsigned kWriteValueNoMemoryBarrier = 0x1;   // CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER
constexpr int kAttrCanUse64BitStreamMemOps = 122;      // CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS

// Free events kept by each issuing thread (for one pool and one context), refilled from and
// returned to the shared pool a batch at a time. A thread that exits keeps its few events (not
// destroyed: the context may be gone by then).
struct ThreadEvents {
  const void* owner;
  void* ctx;
  int n;
  void* ev[32];
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadEvents t_events;

struct ThreadSlot {
  const void* owner;
  void* stream;
  uint32_t slot;
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadSlot t_slot;
}  // namespace

void* EventPool::take(void* ctx) {
  ThreadEvents& te = t_events;
  if (te.owner == this && te.ctx == ctx && te.n > 0) return te.ev[--te.n];
  {
    std::lock_guard<std::mutex> g(mu_);
    if (te.owner == this)  // events of another context go back to the pool
      for (int i = 0; i < te.n; i++) pool_[te.ctx].push_back(te.ev[i]);
    te.owner = this;  // a stale owner (a recorder abandoned at fork) keeps its events
    te.ctx = ctx;
    te.n = 0;
    auto& free = pool_[ctx];
    while (te.n < int(sizeof te.ev / sizeof te.ev[0]) && !free.empty()) {
      te.ev[te.n++] = free.back();
      free.pop_back();
    }
  }
  if (te.n > 0) return te.ev[--te.n];
  void* ev = nullptr;
  return drv_->event_create(&ev, kEventDisableTiming) == 0 ? ev : nullptr;
}

void EventPool::put(void* ctx, void* event) {
  std::lock_guard<std::mutex> g(mu_);
  pool_[ctx].push_back(event);
}

// Sorted into the pool here, on the watchdog's thread: an issuing thread's refill only copies.
void EventPool::release(std::vector<std::pair<void*, void*>>&& ctx_events) {
  if (ctx_events.empty()) return;
  std::lock_guard<std::mutex> g(mu_);
  std::vector<void*>* free = nullptr;
  void* ctx = nullptr;
  for (const auto& [c, ev] : ctx_events) {
    if (!free || c != ctx) free = &pool_[ctx = c];
    free->push_back(ev);
  }
}

bool MemopSlots::init() {
  std::lock_guard<std::mutex> g(mu_);
  if (int s = state_.load(std::memory_order_relaxed)) return s > 0;
  auto fail = [&](const char* why) {
    why_not_ = why;
    state_.store(-1, std::memory_order_release);
    return false;
  };
  if (!drv_->write_value64 || !drv_->mem_host_alloc || !drv_->mem_host_get_device_pointer)
    return fail("no cuStreamWriteValue64_v2/cuMemHostAlloc in the driver");
  int dev = 0, can = 0;
  if (!drv_->ctx_get_device || !drv_->device_get_attribute || drv_->ctx_get_device(&dev) != 0 ||
      drv_->device_get_attribute(&can, kAttrCanUse64BitStreamMemOps, dev) != 0 || can != 1)
    return fail("the device does not support 64-bit stream memory operations");
  void* p = nullptr;
  if (drv_->mem_host_alloc(&p, kSlots * sizeof(uint64_t),
                           kHostAllocPortable | kHostAllocDeviceMap) != 0 || !p)
    return fail("cuMemHostAlloc failed");
  unsigned long long d = 0;
  // With unified addressing the mapped pointer is the host pointer in every context; otherwise
  // it would differ per context, and one table could not serve them all.
  if (drv_->mem_host_get_device_pointer(&d, p, 0) != 0 || d != reinterpret_cast<uintptr_t>(p))
    return fail("pinned memory is not mapped at its host address (no unified addressing)");
  std::memset(p, 0, kSlots * sizeof(uint64_t));
  host_ = static_cast<uint64_t*>(p);
  dev_ = d;
  issued_.reset(new std::atomic<uint64_t>[kSlots]());
  state_.store(1, std::memory_order_release);
  return true;
}

uint32_t MemopSlots::slot_of(void* stream) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = slot_of_.find(stream);
  if (it != slot_of_.end()) return it->second;
  if (slot_of_.size() >= kSlots) return kSlots;
  uint32_t s = uint32_t(slot_of_.size());
  slot_of_.emplace(stream, s);
  return s;
}

bool MemopSlots::signal(void* stream, Signal* out) {
  int st = state_.load(std::memory_order_acquire);
  if (st < 0 || (st == 0 && !init())) return false;
  if (reinterpret_cast<uintptr_t>(stream) <= 2) return false;  // NULL, legacy, per-thread
  ThreadSlot& ts = t_slot;
  if (ts.owner != this || ts.stream != stream) {
    uint32_t s = slot_of(stream);
    if (s >= kSlots) return false;
    ts = {this, stream, s};
  }
  // Two threads issuing on one stream at once could enqueue their writes out of ordinal order;
  // NCCL's own calls on one stream are not safe that way either.
  uint64_t v = issued_[ts.slot].fetch_add(1, std::memory_order_relaxed) + 1;
  if (drv_->write_value64(stream, dev_ + ts.slot * sizeof(uint64_t), v,
                          kWriteValueNoMemoryBarrier) != 0)
    return false;
  *out = {nullptr, ts.slot, v};
  return true;
}

std::string MemopSlots::state_text() {
  std::lock_guard<std::mutex> g(mu_);
  int s = state_.load(std::memory_order_relaxed);
  return s > 0 ? "memop (streams 0, 1, 2: event)" : s < 0 ? "event: " + why_not_ : "";
}

}  // namespace lockstep::rec
