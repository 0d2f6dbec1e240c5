// --timing of `analyze`, `report` and `replay --model`: after each step, one line on stderr,
// "lockstep CMD: STEP N ms, M ms CPU (peak RSS so far K MiB)[, extra]". CPU is the whole
// process's (the loader's threads included).
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>

namespace lockstep::cli {

class StepTimer {
 public:
  StepTimer(std::string command, bool on) : command_(std::move(command)), on_(on) {
    if (on_) cpu_ms_ = cpu_ms(usage());
  }
  bool on() const { return on_; }

  void step(const char* name, const std::string& extra = "") {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const rusage ru = usage();
    const double cpu = cpu_ms(ru);
    std::cerr << "lockstep " << command_ << ": " << name << " "
              << std::chrono::duration_cast<std::chrono::milliseconds>(now - last_).count() << " ms, "
              << static_cast<int64_t>(cpu - cpu_ms_) << " ms CPU (peak RSS so far " << ru.ru_maxrss / 1024
              << " MiB)" << (extra.empty() ? "" : ", ") << extra << "\n";
    last_ = now;
    cpu_ms_ = cpu;
  }

 private:
  static rusage usage() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru;
  }
  static double cpu_ms(const rusage& ru) {
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000.0 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000.0;
  }
  std::string command_;
  bool on_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  double cpu_ms_ = 0;
};

}  // namespace lockstep::cli
