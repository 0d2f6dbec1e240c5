// interposer/config.*: every LOCKSTEP_* variable parsed with range checks (a bad value: one
// warning and the default), and the shared rank-variable table (schema/rank_env.h).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "bench_knobs.h"
#include "config.h"
#include "rank_env.h"
#include "writer.h"

using namespace lockstep::rec;

namespace {
Config parse(std::map<std::string, std::string> env, std::vector<std::string>* warnings) {
  return parse_config(
      [&env](const char* n) -> const char* {
        auto it = env.find(n);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      warnings);
}
}  // namespace

TEST(RecorderConfig, defaults_without_variables) {
  std::vector<std::string> w;
  Config c = parse({}, &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(c.dir, "lockstep-trace");
  EXPECT_EQ(c.hang_timeout_s, 60);
  EXPECT_EQ(c.stacks, StacksSetting::Auto);
  EXPECT_EQ(c.analyzer, "");
}

TEST(RecorderConfig, hang_timeout_out_of_range_or_not_a_number_warns_once_and_keeps_60) {
  // 1e12 and inf used to become 0 s ("no NCCL progress for 0s" on a healthy run).
  for (const char* bad : {"1e12", "inf", "INF", "nan", "-1", "abc", "10s", "0x10", " 5", "1e400"}) {
    std::vector<std::string> w;
    Config c = parse({{"LOCKSTEP_HANG_TIMEOUT", bad}}, &w);
    EXPECT_EQ(c.hang_timeout_s, 60) << bad;
    ASSERT_EQ(w.size(), 1u) << bad;
    EXPECT_NE(w[0].find("LOCKSTEP_HANG_TIMEOUT"), std::string::npos) << w[0];
    EXPECT_NE(w[0].find("using 60"), std::string::npos) << w[0];
  }
}

TEST(RecorderConfig, hang_timeout_in_range_is_taken) {
  for (auto [text, value] : {std::pair{"0", 0.0}, {"0.5", 0.5}, {"15", 15.0}, {"1e6", 1e6},
                             {"10000000", 1e7}}) {
    std::vector<std::string> w;
    EXPECT_EQ(parse({{"LOCKSTEP_HANG_TIMEOUT", text}}, &w).hang_timeout_s, value) << text;
    EXPECT_TRUE(w.empty()) << text;
  }
}

TEST(RecorderConfig, stacks_and_other_variables) {
  std::vector<std::string> w;
  Config c = parse({{"LOCKSTEP_STACKS", "native"}, {"LOCKSTEP_DIR", "/tmp/x"},
                    {"LOCKSTEP_ANALYZER", "/bin/lockstep"}},
                   &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(c.stacks, StacksSetting::Native);
  EXPECT_EQ(c.dir, "/tmp/x");
  EXPECT_EQ(c.analyzer, "/bin/lockstep");
  c = parse({{"LOCKSTEP_STACKS", "everything"}}, &w);
  EXPECT_EQ(c.stacks, StacksSetting::Auto);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("LOCKSTEP_STACKS=everything"), std::string::npos) << w[0];
}

TEST(RecorderConfig, completion_signal_event_by_default_memop_on_request) {
  std::vector<std::string> w;
  EXPECT_FALSE(parse({}, &w).completion_memop);
  EXPECT_TRUE(parse({{"LOCKSTEP_COMPLETION", "memop"}}, &w).completion_memop);
  EXPECT_FALSE(parse({{"LOCKSTEP_COMPLETION", "event"}}, &w).completion_memop);
  EXPECT_TRUE(w.empty());
  EXPECT_FALSE(parse({{"LOCKSTEP_COMPLETION", "MEMOP"}}, &w).completion_memop);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("LOCKSTEP_COMPLETION=MEMOP"), std::string::npos) << w[0];
}

TEST(RecorderConfig, covering_completion_and_its_window_are_range_checked) {
  std::vector<std::string> w;
  Config c = parse({}, &w);
  EXPECT_FALSE(c.completion_covering);
  EXPECT_EQ(c.completion_window, kDefaultCompletionWindow);
  c = parse({{"LOCKSTEP_COMPLETION", "covering"}, {"LOCKSTEP_COMPLETION_WINDOW", "1"}}, &w);
  EXPECT_TRUE(w.empty());
  EXPECT_TRUE(c.completion_covering);
  EXPECT_FALSE(c.completion_memop);
  EXPECT_EQ(c.completion_window, 1);
  c = parse({{"LOCKSTEP_COMPLETION_WINDOW", "4096"}}, &w);
  EXPECT_EQ(c.completion_window, 4096);
  for (const char* bad : {"0", "4097", "-1", "8x", " 8", "1e3", "99999999999999999999"}) {
    w.clear();
    c = parse({{"LOCKSTEP_COMPLETION_WINDOW", bad}}, &w);
    EXPECT_EQ(c.completion_window, kDefaultCompletionWindow) << bad;
    ASSERT_EQ(w.size(), 1u) << bad;
    EXPECT_NE(w[0].find("LOCKSTEP_COMPLETION_WINDOW"), std::string::npos) << w[0];
  }
}

TEST(RecorderConfig, spill_size_is_range_checked_and_zero_turns_it_off) {
  std::vector<std::string> w;
  Config c = parse({}, &w);
  EXPECT_EQ(c.spill_mb, lockstep::schema::env::kDefaultSpillMb);
  c = parse({{"LOCKSTEP_SPILL_MB", "0"}}, &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(c.spill_mb, 0);
  c = parse({{"LOCKSTEP_SPILL_MB", "4096"}}, &w);
  EXPECT_EQ(c.spill_mb, 4096);
  for (const char* bad : {"-1", "4097", "8x", ""}) {
    w.clear();
    c = parse({{"LOCKSTEP_SPILL_MB", bad}}, &w);
    EXPECT_EQ(c.spill_mb, lockstep::schema::env::kDefaultSpillMb) << bad;
    if (*bad) {
      ASSERT_EQ(w.size(), 1u) << bad;
      EXPECT_NE(w[0].find("LOCKSTEP_SPILL_MB"), std::string::npos) << w[0];
    }
  }
}

TEST(RecorderConfig, exit_wait_is_range_checked_seconds) {
  std::vector<std::string> w;
  EXPECT_EQ(parse({}, &w).exit_wait_s, lockstep::schema::env::kDefaultExitWaitS);
  Config c = parse({{"LOCKSTEP_EXIT_WAIT", "0.5"}}, &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(c.exit_wait_s, 0.5);
  c = parse({{"LOCKSTEP_EXIT_WAIT", "600"}}, &w);
  EXPECT_EQ(c.exit_wait_s, 600);
  for (const char* bad : {"0", "0.05", "601", "inf", "nan", "-1", "1e9", "10s"}) {
    w.clear();
    c = parse({{"LOCKSTEP_EXIT_WAIT", bad}}, &w);
    EXPECT_EQ(c.exit_wait_s, lockstep::schema::env::kDefaultExitWaitS) << bad;
    ASSERT_EQ(w.size(), 1u) << bad;
    EXPECT_NE(w[0].find("LOCKSTEP_EXIT_WAIT"), std::string::npos) << w[0];
  }
}

TEST(RecorderConfig, bench_off_parts_by_name_and_nothing_else) {
  std::vector<std::string> w;
  EXPECT_EQ(parse({}, &w).bench_off, 0u);
  Config c = parse({{"LOCKSTEP_BENCH_OFF", "stack,event"}}, &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(c.bench_off, unsigned(kOffStack | kOffEvent));
  c = parse({{"LOCKSTEP_BENCH_OFF", "recorder,stack,capture,clock,event,queue,watchdog,waits"}}, &w);
  EXPECT_EQ(c.bench_off, 0xffu);
  c = parse({{"LOCKSTEP_BENCH_OFF", "memop"}}, &w);
  EXPECT_EQ(c.bench_off, unsigned(kOffMemop));
  for (const char* bad : {"stacks", "stack,", ",stack", "stack,,event", "STACK", "all"}) {
    w.clear();
    c = parse({{"LOCKSTEP_BENCH_OFF", bad}}, &w);
    EXPECT_EQ(c.bench_off, 0u) << bad;
    ASSERT_EQ(w.size(), 1u) << bad;
    EXPECT_NE(w[0].find("LOCKSTEP_BENCH_OFF"), std::string::npos) << w[0];
  }
}

TEST(RankVariables, one_table_first_valid_wins) {
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "3"}, {"PMI_RANK", "7"}};
  auto get = [&env](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto r = lockstep::rank_from_env(lockstep::kGlobalRankVariables, get);
  EXPECT_EQ(r.rank, 3);
  EXPECT_STREQ(r.source, "SLURM_PROCID");
  env["RANK"] = "-1";  // invalid: skipped, not taken as 0 or -1
  r = lockstep::rank_from_env(lockstep::kGlobalRankVariables, get);
  EXPECT_EQ(r.rank, 3);
  env["LOCKSTEP_RANK"] = "5";
  EXPECT_EQ(lockstep::rank_from_env(lockstep::kGlobalRankVariables, get).rank, 5);
  int v = 0;
  for (const char* bad : {"", "+1", "1x", "99999999999", " 1", "-0"})
    EXPECT_FALSE(lockstep::parse_rank_value(bad, &v)) << bad;
  EXPECT_TRUE(lockstep::parse_rank_value("2147483647", &v));
  EXPECT_EQ(v, 2147483647);
  EXPECT_EQ(lockstep::rank_variable_list(lockstep::kLocalRankVariables).rfind("LOCAL_RANK, ", 0), 0u);
}

TEST(RecorderHealth, write_errors_map_to_the_documented_stop_reasons) {
  EXPECT_STREQ(stop_reason_name(classify_write_error(SQLITE_FULL, ENOSPC)), "disk_full");
  EXPECT_STREQ(stop_reason_name(classify_write_error(SQLITE_FULL, 0)), "disk_full");
  EXPECT_STREQ(stop_reason_name(classify_write_error(SQLITE_IOERR_WRITE, EFBIG)), "file_size_limit");
  EXPECT_STREQ(stop_reason_name(classify_write_error(SQLITE_IOERR_WRITE, EIO)), "io_error");
  EXPECT_STREQ(stop_reason_name(classify_write_error(SQLITE_IOERR_WRITE, EROFS)), "read_only");
  EXPECT_STREQ(stop_reason_name(classify_write_error(SQLITE_READONLY, 0)), "read_only");
  EXPECT_STREQ(stop_reason_name(classify_write_error(SQLITE_CANTOPEN, EACCES)), "unwritable");
  EXPECT_STREQ(stop_reason_name(classify_write_error(SQLITE_ERROR, 0)), "internal");
}
