// lockstep-replay-worker: one rank of `lockstep replay` (started by it through the launcher).
//   lockstep-replay-worker (--file F | --files F0 F1 ...) [--timeout S] [--order-from-file F]
//                          [--delay-seed N --max-delay-us US] [--verbose]
// With --files, the rank comes from $RANK (set by the launcher, torchrun or srun wrappers).
// Unique ids are exchanged through files in $LOCKSTEP_RENDEZVOUS_DIR.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "worker.h"

namespace {

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "lockstep-replay-worker: %s\n"
               "usage: lockstep-replay-worker (--file F | --files F0 F1 ...) [--timeout S] [--order-from-file F]\n"
               "       [--delay-seed N --max-delay-us US] [--verbose]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  lockstep::replay::WorkerOptions o;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--file") { const char* v = value(); if (!v) return usage("--file needs a path"); o.trace_file = v; }
    else if (a == "--files") { while (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) files.push_back(argv[++i]); }
    else if (a == "--timeout") { const char* v = value(); if (!v) return usage("--timeout needs seconds"); o.timeout_s = std::atof(v); }
    else if (a == "--order-from-file") { const char* v = value(); if (!v) return usage("--order-from-file needs a path"); o.order_from_file = v; }
    else if (a == "--delay-seed") { const char* v = value(); if (!v) return usage("--delay-seed needs a number"); o.delay_seed = std::strtoull(v, nullptr, 10); }
    else if (a == "--max-delay-us") { const char* v = value(); if (!v) return usage("--max-delay-us needs a number"); o.max_delay_us = std::atoi(v); }
    else if (a == "--verbose") o.verbose = true;
    else return usage(("unknown argument " + a).c_str());
  }
  if (o.trace_file.empty()) {
    if (files.empty()) return usage("no trace file (--file or --files)");
    const int rank = env_int("RANK", -1);
    if (rank < 0 || rank >= static_cast<int>(files.size()))
      return usage(("$RANK must be 0.." + std::to_string(files.size() - 1)).c_str());
    o.trace_file = files[rank];
  }
  o.local_rank = env_int("LOCAL_RANK", 0);
  if (const char* d = std::getenv("LOCKSTEP_RENDEZVOUS_DIR")) o.rendezvous_dir = d;
  return lockstep::replay::run_worker(o);
}
