// Bounded multi-producer queue of fixed-size records (Vyukov's array queue): a push is one CAS
// and two stores, never allocates, never blocks; a full queue refuses the push and the caller
// counts the drop. One consumer (the writer thread) pops. A push may copy only a prefix of the
// value (a short record of a tagged union): the producer then writes fewer cache lines, each
// last read by the consumer's core. (64-byte-aligned cells were tried: +3.7 MiB of RSS, no
// gain resolved on the H200; docs/gpu-results.md, cost session 4. Prefetching the next cell for
// writing made a push ~20 ns dearer there: cost session 6.)
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
      : mask_(capacity_pow2 - 1), cells_(new Cell[capacity_pow2]) {
    for (size_t i = 0; i < capacity_pow2; i++) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  // `bytes`: how much of v to copy (the rest of the cell keeps stale bytes: the consumer must
  // not read past what the value's own tag says is there). Trivially copyable types only.
  bool push(const T& v, size_t bytes = sizeof(T)) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells_[pos & mask_];
      size_t seq = c.seq.load(std::memory_order_acquire);
      intptr_t diff = intptr_t(seq) - intptr_t(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          if constexpr (std::is_trivially_copyable_v<T>)
            std::memcpy(static_cast<void*>(&c.value), &v, bytes < sizeof(T) ? bytes : sizeof(T));
          else
            c.value = v;
          c.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // n values in n consecutive cells, all or none: a full queue refuses the whole run (an op
  // and its part records are dropped together, never apart). `bytes(v)`: as push's `bytes`.
  // The consumer may see the first cells before the last are published: it stops there, as
  // at any push in progress.
  template <class Bytes>
  bool push_many(const T* v, size_t n, Bytes bytes) {
    if (n == 0) return true;
    if (n > mask_ + 1) return false;
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      // The consumer frees cells in order: the run's last cell free for this lap means all are.
      Cell& last = cells_[(pos + n - 1) & mask_];
      size_t seq = last.seq.load(std::memory_order_acquire);
      intptr_t diff = intptr_t(seq) - intptr_t(pos + n - 1);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + n, std::memory_order_relaxed)) {
          for (size_t i = 0; i < n; ++i) {
            Cell& c = cells_[(pos + i) & mask_];
            const size_t b = bytes(v[i]);
            if constexpr (std::is_trivially_copyable_v<T>)
              std::memcpy(static_cast<void*>(&c.value), &v[i], b < sizeof(T) ? b : sizeof(T));
            else
              c.value = v[i];
            c.seq.store(pos + i + 1, std::memory_order_release);
          }
          return true;
        }
      } else if (diff < 0) {
        return false;  // not room for all of them
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  bool pop(T& out) {
    Cell& c = cells_[head_ & mask_];
    size_t seq = c.seq.load(std::memory_order_acquire);
    if (intptr_t(seq) - intptr_t(head_ + 1) < 0) return false;  // empty (or push in progress)
    out = c.value;
    c.seq.store(head_ + mask_ + 1, std::memory_order_release);
    head_++;
    return true;
  }

  size_t capacity() const { return mask_ + 1; }

  // Consumer only: a cell is claimed and not popped (after pop() failed: a push in progress).
  bool busy() const { return tail_.load(std::memory_order_acquire) != head_; }

 private:
  struct Cell {
    std::atomic<size_t> seq;
    T value;
  };
  const size_t mask_;
  std::unique_ptr<Cell[]> cells_;
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) size_t head_ = 0;  // consumer only
};

}  // namespace lockstep::rec
