// lockstep::launch_ranks and the lockstep-launch executable: environment, exit codes, output,
// timeouts that kill whole process groups and name the ranks that were still running.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "launcher.h"

namespace {

using lockstep::LaunchOptions;
using lockstep::launch_ranks;

LaunchOptions sh(int n, const std::string& script, double timeout_s = 20) {
  LaunchOptions o;
  o.nranks = n;
  o.argv = {"/bin/sh", "-c", script};
  o.timeout_s = timeout_s;
  o.prefix_output = false;
  return o;
}

// Running (not a zombie waiting for init to reap it).
bool alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  auto p = line.rfind(')');
  return p != std::string::npos && p + 2 < line.size() && line[p + 2] != 'Z' && line[p + 2] != 'X';
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Launcher, EveryRankGetsItsRankWorldSizeAndTheSharedRendezvousDir) {
  auto r = launch_ranks(sh(3, "echo \"$RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE\"; test -d \"$LOCKSTEP_RENDEZVOUS_DIR\" "
                              "&& echo \"dir=$LOCKSTEP_RENDEZVOUS_DIR\""));
  ASSERT_EQ(r.ranks.size(), 3u);
  EXPECT_TRUE(r.all_succeeded()) << r.summary();
  std::string dir;
  for (int k = 0; k < 3; ++k) {
    const auto& out = r.ranks[k].output;
    std::string want = std::to_string(k) + "/3/" + std::to_string(k) + "/3\n";
    EXPECT_EQ(out.substr(0, want.size()), want) << "rank " << k << " output: " << out;
    auto p = out.find("dir=");
    ASSERT_NE(p, std::string::npos) << "rank " << k << " did not see an existing rendezvous dir: " << out;
    std::string d = out.substr(p + 4, out.find('\n', p) - p - 4);
    if (k == 0) dir = d;
    EXPECT_EQ(d, dir) << "ranks must share one rendezvous dir";
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << "the temporary rendezvous dir should be removed afterwards";
}

TEST(Launcher, EveryLaunchHasItsOwnLaunchIdSharedByItsRanks) {
  auto a = launch_ranks(sh(2, "echo \"$LOCKSTEP_LAUNCH_ID\""));
  auto b = launch_ranks(sh(1, "echo \"$LOCKSTEP_LAUNCH_ID\""));
  ASSERT_EQ(a.ranks.size(), 2u);
  EXPECT_GT(a.ranks[0].output.size(), 1u) << "LOCKSTEP_LAUNCH_ID is empty";
  EXPECT_EQ(a.ranks[0].output, a.ranks[1].output);
  EXPECT_NE(a.ranks[0].output, b.ranks[0].output);
}

// PyTorch's env:// rendezvous (torchrun's variables): one free loopback port shared by the
// ranks, and a caller's own MASTER_ADDR / MASTER_PORT kept.
TEST(Launcher, RanksShareAMasterAddressAndPortUnlessTheCallerSetOne) {
  const char* old_port = getenv("MASTER_PORT");
  const char* old_addr = getenv("MASTER_ADDR");
  const std::string keep_port = old_port ? old_port : "", keep_addr = old_addr ? old_addr : "";
  unsetenv("MASTER_PORT");
  unsetenv("MASTER_ADDR");
  auto a = launch_ranks(sh(2, "echo \"$MASTER_ADDR:$MASTER_PORT\""));
  ASSERT_EQ(a.ranks.size(), 2u);
  EXPECT_EQ(a.ranks[0].output, a.ranks[1].output);
  EXPECT_EQ(a.ranks[0].output.rfind("127.0.0.1:", 0), 0u) << a.ranks[0].output;
  const int port = std::atoi(a.ranks[0].output.substr(10).c_str());
  EXPECT_GT(port, 0) << a.ranks[0].output;
  EXPECT_LT(port, 65536);
  setenv("MASTER_PORT", "29999", 1);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  auto b = launch_ranks(sh(1, "echo \"$MASTER_ADDR:$MASTER_PORT\""));
  EXPECT_EQ(b.ranks[0].output, "10.1.2.3:29999\n");
  if (old_port) setenv("MASTER_PORT", keep_port.c_str(), 1); else unsetenv("MASTER_PORT");
  if (old_addr) setenv("MASTER_ADDR", keep_addr.c_str(), 1); else unsetenv("MASTER_ADDR");
}

TEST(Launcher, ExtraEnvironmentReachesEveryRank) {
  auto o = sh(2, "echo \"x=$LOCKSTEP_TEST_VAR\"");
  o.env["LOCKSTEP_TEST_VAR"] = "hello world";
  auto r = launch_ranks(o);
  for (const auto& rk : r.ranks) EXPECT_EQ(rk.output, "x=hello world\n");
}

TEST(Launcher, CollectsExitCodesSignalsAndOutputPerRank) {
  auto r = launch_ranks(sh(3, "echo out-$RANK; echo err-$RANK >&2; if [ $RANK = 2 ]; then kill -SEGV $$; fi; exit $RANK"));
  ASSERT_EQ(r.ranks.size(), 3u);
  EXPECT_FALSE(r.all_succeeded());
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.ranks[0].exit_code, 0);
  EXPECT_EQ(r.ranks[1].exit_code, 1);
  EXPECT_EQ(r.ranks[2].term_signal, SIGSEGV);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NE(r.ranks[k].output.find("out-" + std::to_string(k)), std::string::npos) << r.ranks[k].output;
    EXPECT_NE(r.ranks[k].output.find("err-" + std::to_string(k)), std::string::npos) << r.ranks[k].output;
    EXPECT_FALSE(r.ranks[k].timed_out);
  }
  std::string s = r.summary();
  EXPECT_NE(s.find("rank 1 (pid " + std::to_string(r.ranks[1].pid) + "): exited 1"), std::string::npos) << s;
  EXPECT_NE(s.find("rank 2 (pid " + std::to_string(r.ranks[2].pid) + "): killed by signal 11"), std::string::npos) << s;
}

TEST(Launcher, TimeoutKillsStuckRanksAndTheirChildrenAndNamesThem) {
  std::string dir = (std::filesystem::temp_directory_path() / ("lockstep-launcher-test-" + std::to_string(getpid()))).string();
  auto o = sh(3, "if [ $RANK != 0 ]; then sleep 300 & echo $! > \"$LOCKSTEP_RENDEZVOUS_DIR/child-$RANK\"; wait; fi", 1.0);
  o.rendezvous_dir = dir;
  auto t0 = std::chrono::steady_clock::now();
  auto r = launch_ranks(o);
  double secs = seconds_since(t0);
  EXPECT_TRUE(r.timed_out);
  EXPECT_GE(secs, 0.95);
  EXPECT_LT(secs, 4.0) << "SIGTERM should end sh and sleep at once";
  EXPECT_FALSE(r.ranks[0].timed_out);
  EXPECT_EQ(r.ranks[0].exit_code, 0);
  std::string s = r.summary();
  for (int k = 1; k < 3; ++k) {
    EXPECT_TRUE(r.ranks[k].timed_out);
    EXPECT_NE(s.find("rank " + std::to_string(k) + " (pid " + std::to_string(r.ranks[k].pid) +
                     "): still running at timeout, killed"),
              std::string::npos)
        << s;
    std::ifstream f(dir + "/child-" + std::to_string(k));
    pid_t child = 0;
    f >> child;
    ASSERT_GT(child, 0) << "rank " << k << " did not record its child";
    // The launcher reaps only its ranks; the orphaned child is reaped by init, give it a moment.
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = !alive(child);
      if (!gone) usleep(10000);
    }
    EXPECT_TRUE(gone) << "child " << child << " of rank " << k << " survived the timeout";
  }
  std::filesystem::remove_all(dir);
}

TEST(Launcher, RanksIgnoringSigtermGetSigkillTwoSecondsLater) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = launch_ranks(sh(1, "trap '' TERM; while :; do sleep 0.05; done", 0.5));
  double secs = seconds_since(t0);
  EXPECT_TRUE(r.ranks[0].timed_out);
  EXPECT_EQ(r.ranks[0].term_signal, SIGKILL);
  EXPECT_GE(secs, 2.4);
  EXPECT_LT(secs, 5.0);
}

TEST(Launcher, UncapturedOutputStillCollectsExitCodes) {
  auto o = sh(2, "exit $((RANK * 5))");
  o.capture_output = false;
  auto r = launch_ranks(o);
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].exit_code, 0);
  EXPECT_EQ(r.ranks[1].exit_code, 5);
  EXPECT_TRUE(r.ranks[1].output.empty());
}

TEST(Launcher, MissingProgramFailsWithStatus127AndAMessage) {
  LaunchOptions o;
  o.nranks = 2;
  o.argv = {"/nonexistent/lockstep-program"};
  o.prefix_output = false;
  auto r = launch_ranks(o);
  for (const auto& rk : r.ranks) {
    EXPECT_EQ(rk.exit_code, 127);
    EXPECT_NE(rk.output.find("cannot run /nonexistent/lockstep-program"), std::string::npos) << rk.output;
  }
}

TEST(Launcher, InvalidOptionsAreRejectedWithAReason) {
  LaunchOptions o;
  o.argv = {"/bin/true"};
  o.nranks = 0;
  EXPECT_THROW(launch_ranks(o), std::invalid_argument);
  o.nranks = 2;
  o.argv.clear();
  EXPECT_THROW(launch_ranks(o), std::invalid_argument);
  o.argv = {"/bin/true"};
  o.timeout_s = 0;
  EXPECT_THROW(launch_ranks(o), std::invalid_argument);
}

int run_cli(const std::string& args) {
  std::string cmd = std::string(LOCKSTEP_LAUNCH_BIN) + " " + args + " >/dev/null 2>&1";
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(LauncherCli, ExitStatusSaysSuccessFailureTimeoutOrUsage) {
  EXPECT_EQ(run_cli("-n 2 -- /bin/true"), 0);
  EXPECT_EQ(run_cli("-n 2 -- /bin/sh -c 'exit $((RANK + 3))'"), 3) << "the lowest failing rank's status";
  EXPECT_EQ(run_cli("-n 2 --timeout 0.3 -- /bin/sleep 30"), 124);
  EXPECT_EQ(run_cli("-n 2 --env K=V -- /bin/sh -c 'test \"$K\" = V'"), 0);
  EXPECT_EQ(run_cli("-- /bin/true"), 2) << "-n is required";
  EXPECT_EQ(run_cli("-n 2"), 2) << "a program is required";
  EXPECT_EQ(run_cli("-n 2 --env NOEQUALS -- /bin/true"), 2);
  EXPECT_EQ(run_cli("-n x -- /bin/true"), 2);
}

// Starts `lockstep-launch -n 2 -- sh -c 'echo $$ > DIR/pid-$RANK; exec sleep 60'` in the background
// and returns its pid once both ranks wrote their pids.
pid_t start_cli_with_sleeping_ranks(const std::string& dir, pid_t rank_pids[2]) {
  std::filesystem::create_directories(dir);
  pid_t cli = fork();
  if (cli == 0) {
    std::string script = "echo $$ > " + dir + "/pid-$RANK; exec sleep 60";
    execl(LOCKSTEP_LAUNCH_BIN, LOCKSTEP_LAUNCH_BIN, "-n", "2", "--quiet", "--timeout", "100", "--", "/bin/sh", "-c",
          script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 500; ++i) {
    int found = 0;
    for (int k = 0; k < 2; ++k) {
      std::ifstream f(dir + "/pid-" + std::to_string(k));
      rank_pids[k] = 0;
      f >> rank_pids[k];
      found += rank_pids[k] > 0;
    }
    if (found == 2) break;
    usleep(10000);
  }
  return cli;
}

bool gone_within(pid_t pid, double secs) {
  auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < secs) {
    if (!alive(pid)) return true;
    usleep(10000);
  }
  return false;
}

TEST(LauncherCli, SigtermToTheLauncherIsForwardedToEveryRank) {
  std::string dir = (std::filesystem::temp_directory_path() / ("lockstep-fwd-" + std::to_string(getpid()))).string();
  pid_t ranks[2];
  pid_t cli = start_cli_with_sleeping_ranks(dir, ranks);
  ASSERT_GT(ranks[0], 0);
  ASSERT_GT(ranks[1], 0);
  kill(cli, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(cli, &st, 0), cli);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGTERM) << "status " << st;
  for (pid_t p : ranks) EXPECT_TRUE(gone_within(p, 2.0)) << "rank process " << p << " survived";
  std::filesystem::remove_all(dir);
}

TEST(LauncherCli, RanksDieWithAKilledLauncher) {
  std::string dir = (std::filesystem::temp_directory_path() / ("lockstep-pdeath-" + std::to_string(getpid()))).string();
  pid_t ranks[2];
  pid_t cli = start_cli_with_sleeping_ranks(dir, ranks);
  ASSERT_GT(ranks[0], 0);
  ASSERT_GT(ranks[1], 0);
  kill(cli, SIGKILL);
  waitpid(cli, nullptr, 0);
  for (pid_t p : ranks) EXPECT_TRUE(gone_within(p, 2.0)) << "rank process " << p << " survived its launcher";
  std::filesystem::remove_all(dir);
}

}  // namespace
