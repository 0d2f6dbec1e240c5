// Joining the recorder's own threads at exit within a bound: a thread stuck in the driver (a
// GPU in a bad state) or in a write to a dead file system must not hold the program's exit.
#pragma once

#include <pthread.h>
#include <time.h>

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
  // before `max_ms` in all; else leaves it running, detached, and returns false. True once it
  // marked its exit (joined, or detached when its teardown outlasts kTeardownMs). `progress` is
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
    // Marked: what is left is the thread's return and its teardown by the C library, which can
    // block on a lock the exiting thread holds (exit() called from a signal handler that
    // interrupted malloc: the teardown frees the thread's cache under the arena's lock). So
    // that join is bounded too; past it the thread is left to the process's end. It marked its
    // exit, so its work is done: true either way.
    if (!exited || !join_for(t, kTeardownMs)) t.detach();
    return exited;
  }

  static constexpr int kTeardownMs = 200;

 private:
  static bool join_for(std::thread& t, int ms) {
    timespec deadline{};
    clock_gettime(CLOCK_REALTIME, &deadline);  // pthread_timedjoin_np's clock
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += long(ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) deadline.tv_sec += 1, deadline.tv_nsec -= 1000000000;
    if (pthread_timedjoin_np(t.native_handle(), nullptr, &deadline) != 0) return false;
    // Joined by pthread: its handle is gone, and std::thread has no way to forget it (its
    // destructor would terminate, detach would reuse the freed handle): the empty shell is
    // kept, unreachable (the process is exiting; a few bytes).
    (void)new std::thread(std::move(t));
    return true;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool exited_ = false;
};

}  // namespace lockstep::rec
