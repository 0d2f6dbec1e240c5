// lockstep-launch -n N [--timeout S] [--env K=V]... [--rendezvous DIR] [--quiet] -- prog args...
// Runs N ranks of a program on this machine (see launcher.h). Exit status: 0 when every rank
// exited 0, 124 when the timeout killed ranks, otherwise the first failing rank's status
// (128 + signal when it was killed by one).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "launcher.h"

namespace {

[[noreturn]] void usage(const char* msg) {
  if (msg) std::fprintf(stderr, "lockstep-launch: %s\n", msg);
  std::fprintf(stderr,
               "usage: lockstep-launch -n N [--timeout S] [--env K=V]... [--rendezvous DIR] [--quiet] -- prog [args...]\n"
               "  -n N             number of ranks (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE are set)\n"
               "  --timeout S      kill every rank still running after S seconds (default 60)\n"
               "  --env K=V        add K=V to every rank's environment (repeatable)\n"
               "  --rendezvous DIR directory for ncclUniqueId exchange (default: a fresh temporary one)\n"
               "  --quiet          do not echo the ranks' output\n");
  std::exit(2);
}

double parse_double(const std::string& s, const char* what) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end) usage((std::string("invalid ") + what + ": '" + s + "'").c_str());
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  lockstep::LaunchOptions o;
  o.nranks = 0;
  int i = 1;
  auto value = [&](const char* opt) -> std::string {
    if (i + 1 >= argc) usage((std::string(opt) + " needs a value").c_str());
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") { ++i; break; }
    if (a == "-n" || a == "--nranks") {
      double n = parse_double(value("-n"), "rank count");
      if (n < 1 || n != int(n)) usage("-n must be a positive integer");
      o.nranks = int(n);
    } else if (a == "--timeout") {
      o.timeout_s = parse_double(value("--timeout"), "timeout");
      if (!(o.timeout_s > 0)) usage("--timeout must be > 0");
    } else if (a == "--env") {
      std::string kv = value("--env");
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) usage(("--env expects K=V, got '" + kv + "'").c_str());
      o.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (a == "--rendezvous") {
      o.rendezvous_dir = value("--rendezvous");
    } else if (a == "--quiet") {
      o.prefix_output = false;
    } else if (a == "-h" || a == "--help") {
      usage(nullptr);
    } else {
      usage(("unknown option '" + a + "' (put the program after --)").c_str());
    }
  }
  if (o.nranks < 1) usage("-n N is required");
  for (; i < argc; ++i) o.argv.push_back(argv[i]);
  if (o.argv.empty()) usage("no program given after --");

  lockstep::forward_termination_signals();
  lockstep::LaunchResult r;
  try {
    r = lockstep::launch_ranks(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep-launch: %s\n", e.what());
    return 2;
  }
  if (r.all_succeeded()) return 0;
  std::fprintf(stderr, "lockstep-launch: %s\n%s", r.timed_out ? "timeout" : "a rank failed", r.summary().c_str());
  if (r.timed_out) return 124;
  for (const auto& rk : r.ranks) {
    if (rk.term_signal) return 128 + rk.term_signal;
    if (rk.exit_code != 0) return rk.exit_code;
  }
  return 1;
}
