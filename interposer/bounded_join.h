// Joining the recorder's own threads at exit within a bound: a thread stuck in the driver (a
// GPU in a bad state) or in a write to a dead file system must not hold the program's exit.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace lockstep::rec {

// Set by the thread as its last act; waited on by whoever stops it.
class ThreadExit {
 public:
  void mark() {
    {
      std::lock_guard<std::mutex> g(mu_);
      exited_ = true;
    }
    cv_.notify_all();
  }
  // Joins `t` if it marks its exit within `ms`; else leaves it running, detached (the process
  // is exiting: its end takes the thread), and returns false.
  bool join_within(std::thread& t, int ms) {
    return join_while_progressing(t, ms, ms, [] { return uint64_t(0); });
  }
  // Joins `t` if it marks its exit before `idle_ms` pass without `progress()` changing, and
  // before `max_ms` in all; else leaves it running, detached, and returns false. `progress` is
  // read every 100 ms at most (a count the thread moves while it works).
  template <class Progress>
  bool join_while_progressing(std::thread& t, int idle_ms, int max_ms, Progress progress) {
    using clock = std::chrono::steady_clock;
    const clock::time_point end = clock::now() + std::chrono::milliseconds(max_ms);
    clock::time_point idle_end = clock::now() + std::chrono::milliseconds(idle_ms);
    uint64_t seen = progress();
    bool exited = false;
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      const clock::time_point now = clock::now();
      const clock::time_point until =
          std::min({end, idle_end, now + std::chrono::milliseconds(100)});
      if (cv_.wait_until(l, until, [this] { return exited_; })) {
        exited = true;
        break;
      }
      const clock::time_point after = clock::now();
      if (after >= end) break;
      if (const uint64_t p = progress(); p != seen) {
        seen = p;
        idle_end = after + std::chrono::milliseconds(idle_ms);
      } else if (after >= idle_end) {
        break;
      }
    }
    l.unlock();
    if (exited) t.join();
    else t.detach();
    return exited;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool exited_ = false;
};

}  // namespace lockstep::rec
