// Bounded multi-producer queue of fixed-size records (Vyukov's array queue, the cells' sequence
// numbers in an array of their own): a push is one CAS and two stores, never allocates, never
// blocks; a full queue refuses the push and the caller counts the drop. One consumer (the
// writer thread) pops. A push may copy only a prefix of the value (a short record of a tagged
// union): the producer then writes fewer cache lines, each last read by the consumer's core.
// (64-byte-aligned cells were tried: +3.7 MiB of RSS, no gain resolved on the H200;
// docs/gpu-results.md, cost session 4. Prefetching the next cell for writing made a push ~20 ns
// dearer there: cost session 6. Copying by non-temporal stores made a `waits` row push ~360 ns
// dearer there: cost session 8.)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>

namespace lockstep::rec {

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity_pow2)
      : mask_(capacity_pow2 - 1),
        seqs_(new std::atomic<size_t>[capacity_pow2]),
        values_(new T[capacity_pow2]) {
    for (size_t i = 0; i < capacity_pow2; i++) seqs_[i].store(i, std::memory_order_relaxed);
  }

  // `bytes`: how much of v to copy (the rest of the cell keeps stale bytes: the consumer must
  // not read past what the value's own tag says is there). Trivially copyable types only.
  bool push(const T& v, size_t bytes = sizeof(T)) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      std::atomic<size_t>& cell_seq = seqs_[pos & mask_];
      T& value = values_[pos & mask_];
      size_t seq = cell_seq.load(std::memory_order_acquire);
      intptr_t diff = intptr_t(seq) - intptr_t(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          const size_t n = bytes < sizeof(T) ? bytes : sizeof(T);
          if constexpr (std::is_trivially_copyable_v<T>) {
            std::memcpy(static_cast<void*>(&value), &v, n);
          } else {
            value = v;
          }
          cell_seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  bool pop(T& out) {
    std::atomic<size_t>& cell_seq = seqs_[head_ & mask_];
    size_t seq = cell_seq.load(std::memory_order_acquire);
    if (intptr_t(seq) - intptr_t(head_ + 1) < 0) return false;  // empty (or push in progress)
    out = values_[head_ & mask_];
    cell_seq.store(head_ + mask_ + 1, std::memory_order_release);
    head_++;
    return true;
  }

  size_t capacity() const { return mask_ + 1; }

 private:
  // Sequence numbers apart from the values (8 to a cache line): with them inside the cells an
  // op row push read 95 µs per step under PyTorch on the H200, apart 55 (docs/gpu-results.md,
  // cost session 8; two processes, not an in-process comparison).
  const size_t mask_;
  std::unique_ptr<std::atomic<size_t>[]> seqs_;
  std::unique_ptr<T[]> values_;
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) size_t head_ = 0;  // consumer only
};

}  // namespace lockstep::rec
