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

// Mutant (issue 29): cmd_check.cpp, re-blessing refused when the run differs from the old
// baseline (`rc != kExitOk && rc != kExitBaseline` -> `rc != kExitOk`). `check --baseline OLD
// --write-baseline NEW` over a changed schedule reports the difference (3) and writes NEW: that
// is how a reviewed schedule change is blessed.
TEST(SurvivorsCli, check_rebless_over_a_changed_schedule_writes_the_new_baseline_and_exits_3) {
  auto old_run = write_run("surv-rebless-old", 3, false);
  auto old_base = old_run + "/../surv-rebless-old.baseline", new_base = old_run + "/../surv-rebless-new.baseline";
  std::filesystem::remove(new_base);
  ASSERT_EQ(lockstep_cli({"check", old_run, "--write-baseline", old_base}).exit_code, 0);
  auto r = lockstep_cli({"check", write_run("surv-rebless-new", 5, false), "--baseline", old_base, "--write-baseline", new_base});
  EXPECT_EQ(r.exit_code, 3) << both(r);
  ASSERT_TRUE(std::filesystem::exists(new_base)) << "the new schedule was not written\n" << both(r);
  EXPECT_NE(slurp_file(new_base).find("x5"), std::string::npos) << slurp_file(new_base);
  EXPECT_EQ(slurp_file(old_base).find("x5"), std::string::npos) << "the old baseline changed";
  std::filesystem::remove(old_base);
  std::filesystem::remove(new_base);
}

// Mutant (issue 29): trace_validation.cpp, `p.dropped_records > 0` -> `> 1`. Exactly one dropped
// record is a hole in the evidence (the other tests drop 12 and 17).
TEST(SurvivorsCli, exactly_one_dropped_record_makes_analyze_and_check_incomplete) {
  auto dir = write_run("surv-one-drop", 3, false);
  exec_sql(dir + "/rank-1.lockstep.sqlite", "UPDATE meta SET value='1' WHERE key='dropped_records'");
  exec_sql(dir + "/rank-1.lockstep.sqlite", "INSERT OR IGNORE INTO meta VALUES('dropped_records','1')");
  for (const char* cmd : {"analyze", "check"}) {
    auto r = lockstep_cli({cmd, dir});
    EXPECT_EQ(r.exit_code, 4) << cmd << "\n" << both(r);
    EXPECT_NE(r.out.find("dropped 1 record"), std::string::npos) << cmd << "\n" << both(r);
  }
}
