// Joining the recorder's own threads at exit within a bound: a thread stuck in the driver (a
// GPU in a bad state) or in a write to a dead file system must not hold the program's exit.
#pragma once

#include <chrono>
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
    std::unique_lock<std::mutex> l(mu_);
    const bool exited = cv_.wait_for(l, std::chrono::milliseconds(ms), [this] { return exited_; });
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
