#include "comm_table.h"

namespace lockstep::rec {
namespace {
size_t slot_of(uintptr_t key, size_t mask) { return (key >> 4) * 0x9E3779B97F4A7C15ull >> 20 & mask; }
}  // namespace

CommState* CommTable::find(const void* handle) const {
  auto key = reinterpret_cast<uintptr_t>(handle);
  if (key <= kTombstone) return nullptr;
  for (size_t i = slot_of(key, kSlots - 1), n = 0; n < kSlots; i = (i + 1) & (kSlots - 1), n++) {
    uintptr_t k = slots_[i].key.load(std::memory_order_acquire);
    if (k == key) return slots_[i].value.load(std::memory_order_acquire);
    if (k == 0) return nullptr;
  }
  return nullptr;
}

void CommTable::insert(const void* handle, CommState* state) {
  auto key = reinterpret_cast<uintptr_t>(handle);
  if (key <= kTombstone) return;
  std::lock_guard<std::mutex> g(mu_);
  Slot* free_slot = nullptr;
  for (size_t i = slot_of(key, kSlots - 1), n = 0; n < kSlots; i = (i + 1) & (kSlots - 1), n++) {
    uintptr_t k = slots_[i].key.load(std::memory_order_relaxed);
    if (k == key) {
      slots_[i].value.store(state, std::memory_order_release);
      return;
    }
    if (k == kTombstone && !free_slot) free_slot = &slots_[i];
    if (k == 0) {
      if (!free_slot) free_slot = &slots_[i];
      break;
    }
  }
  if (!free_slot) return;  // 16k live communicators: ops on this one are recorded as unknown
  free_slot->value.store(state, std::memory_order_release);
  free_slot->key.store(key, std::memory_order_release);
}

void CommTable::retire(const void* handle) {
  auto key = reinterpret_cast<uintptr_t>(handle);
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = slot_of(key, kSlots - 1), n = 0; n < kSlots; i = (i + 1) & (kSlots - 1), n++) {
    uintptr_t k = slots_[i].key.load(std::memory_order_relaxed);
    if (k == key) {
      slots_[i].key.store(kTombstone, std::memory_order_release);
      slots_[i].value.store(nullptr, std::memory_order_release);
      return;
    }
    if (k == 0) return;
  }
}

}  // namespace lockstep::rec
