// CLI tests written for mutants that survived the suite (issue 18, "Tests that catch bugs").
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_runner.h"
#include "trace_builder.h"

using namespace lockstep::testing;

namespace {

const std::string kLockstep = LOCKSTEP_EXE;
const std::string kComm = "aaaaaaaa00000001";

ProcResult lockstep_cli(std::vector<std::string> args) {
  args.insert(args.begin(), kLockstep);
  return run_program(args, {}, 30);
}

std::string both(const ProcResult& r) { return "stdout:\n" + r.out + "\nstderr:\n" + r.err; }

// Two ranks that finished cleanly after `steps` all_reduces; `diverge`: the last one's count differs.
std::string write_run(const std::string& name, int steps, bool diverge) {
  TraceBuilder b(2);
  b.comm(kComm, {0, 1});
  b.all({0, 1}, kComm, OpSpec{.count = 64}, steps);
  if (diverge) {
    b.add(0, kComm, {.count = 64});
    b.add(1, kComm, {.count = 65});
  }
  auto dir = fresh_dir(name);
  write_trace(b.trace(), dir);
  return dir;
}

}  // namespace

// Mutant: cmd_check.cpp, `if (rc == kExitOk) rc = kExitBaseline;` without its condition. A run
// whose ranks disagree AND whose schedule differs from the baseline is a failure of the ranks
// (exit 1): the baseline difference (3) must not hide it.
TEST(SurvivorsCli, check_divergence_plus_baseline_difference_exits_1_not_3) {
  auto clean = write_run("surv-check-clean", 3, false);
  auto base = clean + "/../surv-check.baseline";
  auto w = lockstep_cli({"check", clean, "--write-baseline", base});
  ASSERT_EQ(w.exit_code, 0) << both(w);
  // Baseline difference alone: 3.
  auto longer = lockstep_cli({"check", write_run("surv-check-longer", 5, false), "--baseline", base});
  ASSERT_EQ(longer.exit_code, 3) << both(longer);
  // Divergence and baseline difference: 1, and both are reported.
  auto r = lockstep_cli({"check", write_run("surv-check-div", 3, true), "--baseline", base});
  EXPECT_EQ(r.exit_code, 1) << both(r);
  EXPECT_NE(r.out.find("differs from baseline"), std::string::npos) << both(r);
  std::filesystem::remove(base);
}
