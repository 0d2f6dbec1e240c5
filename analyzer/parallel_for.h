// fn(0) .. fn(n-1) on `threads` threads (0: one per hardware thread), the calling thread among
// them; indices are handed out one at a time, so one slow file does not hold up a fixed share.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace lockstep {

// The same, each thread with its own state: make() once a thread, then fn(state, i) for the
// indices it takes (a thread's own SQLite connections, which belong to one thread).
template <class Make, class Fn>
void parallel_for_with(size_t n, unsigned threads, Make&& make, Fn&& fn) {
  if (n == 0) return;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, n));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    auto state = make();
    for (size_t i; (i = next.fetch_add(1)) < n;) fn(state, i);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

template <class Fn>
void parallel_for(size_t n, unsigned threads, Fn&& fn) {
  parallel_for_with(n, threads, [] { return 0; }, [&](int, size_t i) { fn(i); });
}

}  // namespace lockstep
