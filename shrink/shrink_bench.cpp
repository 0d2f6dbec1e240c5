// Time to shrink the test cases (docs/shrink.md): the seed-shaped divergence at op 3750, the
// hidden-style cross-communicator cycle, the 4,096-rank divergence and the latent inversion,
// generated in memory (tests/shrink/schedules.h), shrunk with the model checker only.
//   shrink_bench [--ranks N]   (N: ranks of the wide divergence, default 4096)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "schedules.h"
#include "shrink.h"

int main(int argc, char** argv) {
  int ranks = 4096;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = std::atoi(argv[++i]);
  struct Case {
    const char* name;
    lockstep::Trace trace;
  };
  Case cases[] = {{"seed-like divergence at op 3750", lockstep::testing::seed_like(3750)},
                  {"hidden cross-communicator cycle (8 ranks)", lockstep::testing::hidden_cycle()},
                  {"wide divergence", lockstep::testing::wide_divergence(ranks, 3)},
                  {"latent inversion (completed run)", lockstep::testing::latent_inversion()}};
  std::printf("| case | before (ranks/comms/ops) | after | model checks | time |\n|---|---|---|---:|---:|\n");
  std::string signatures;
  for (const Case& c : cases) {
    lockstep::shrink::Result r = lockstep::shrink::shrink(c.trace);
    std::printf("| %s | %d / %d / %d | %d / %d / %d | %d | %.2f s |\n", c.name, r.before.ranks, r.before.comms,
                r.before.ops, r.after.ranks, r.after.comms, r.after.ops, r.checks, r.seconds);
    std::fflush(stdout);
    signatures += std::string(c.name) + ": " + r.signature.text() + "\n";
  }
  std::printf("\n%s", signatures.c_str());
  return 0;
}
