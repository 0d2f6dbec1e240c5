// The recorder never changes the program's fate: a file-size limit (RLIMIT_FSIZE, SIGXFSZ), a
// full disk, an I/O error or a read-only filesystem under the trace make the recorder stop,
// say so once on stderr and in the trace (meta recorder_stopped), while the program's output
// and exit code stay what they are without the recorder. Runs over the CPU NCCL fixture with
// lockstep-launch, two ranks.
//
// Faults: RLIMIT_FSIZE through `ulimit -f` (the real kernel path: SIGXFSZ, then EFBIG); ENOSPC
// from a 256 KiB tmpfs when user namespaces allow mounting one (else skipped, said so); ENOSPC,
// EIO and EROFS from an LD_PRELOAD shim that fails writes to trace files
// (failing_write_shim.cpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>

#include "trace_test_util.h"

using namespace lockstep::test;

namespace {

std::string sorted_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  return join(lines, "\n");
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) n++;
  return n;
}

struct FaultJob {
  TempDir dir;
  ProcResult result;
  std::vector<std::string> traces;

  // shell_prefix runs before the launcher in the same shell (e.g. "ulimit -f 64").
  FaultJob(std::vector<std::string> args, bool record, std::map<std::string, std::string> extra,
           const std::string& shell_prefix = "", const std::string& trace_dir = "") {
    std::string tdir = trace_dir.empty() ? dir.path + "/trace" : trace_dir;
    std::map<std::string, std::string> env = {{"LD_LIBRARY_PATH", FIXTURE_LIB_DIR},
                                              {"LOCKSTEP_DIR", tdir},
                                              {"LOCKSTEP_STACKS", "native"},
                                              {"LD_PRELOAD", record ? LIBLOCKSTEP_PATH : ""}};
    for (auto& [k, v] : extra) env[k] = v;
    std::string cmd = shell_prefix + (shell_prefix.empty() ? "" : "; ") + "exec \"$@\"";
    std::vector<std::string> argv = {"/bin/sh",      "-c", cmd, "sh", LAUNCHER_PATH, "-n", "2",
                                     "--timeout", "60", "--",  PROGRAM_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    result = run(argv, env, 90);
    if (trace_dir.empty()) traces = trace_files(tdir);
  }
  std::string describe() const {
    return "exit " + std::to_string(result.exit_code) + " signal " +
           std::to_string(result.term_signal) + "\nstdout:\n" + result.out + "\nstderr:\n" +
           result.err;
  }
};

// What the program does without the recorder: the reference for its fate, per op count.
// kManyOps, 250,000 all-reduces: a trace of ~9 MB (schema 2: ~36 bytes an op), past the 4 MiB
// limit below; the fixture's own shared memory (~3 MiB for 2 ranks) fits under it.
// kSomeOps, 50,000: ~1.4-1.9 MB at schema 3 (28-38 bytes an op), past the shim's 1 MiB (a smaller
// job: these tests run it 2-4 times).
constexpr const char* kManyOps = "250000";
constexpr const char* kSomeOps = "50000";
// (Kept for the test program's life; destroyed at its exit, which removes its folder.)
const FaultJob& reference(const std::string& ops) {
  static std::map<std::string, std::unique_ptr<FaultJob>> jobs;
  std::unique_ptr<FaultJob>& j = jobs[ops];
  if (!j) j = std::make_unique<FaultJob>(std::vector<std::string>{"many", ops}, false,
                                         std::map<std::string, std::string>{});
  return *j;
}

// The program's own lines (the launcher prefixes them "[rank N] "), not the recorder's.
std::string program_lines(const ProcResult& r) {
  std::string keep;
  std::istringstream in(r.out + r.err);
  for (std::string l; std::getline(in, l);)
    if (l.find("] lockstep: ") == std::string::npos && l.rfind("lockstep: ", 0) != 0) keep += l + "\n";
  return keep;
}

void expect_same_fate_as_without_recorder(const FaultJob& job, const std::string& ops) {
  const FaultJob& ref = reference(ops);
  ASSERT_EQ(ref.result.exit_code, 0) << ref.describe();
  EXPECT_EQ(job.result.term_signal, 0) << job.describe();
  EXPECT_EQ(job.result.exit_code, ref.result.exit_code) << job.describe();
  EXPECT_EQ(sorted_lines(program_lines(job.result)), sorted_lines(program_lines(ref.result))) << job.describe();
  EXPECT_NE(program_lines(job.result).find(ops + " all-reduces done"), std::string::npos)
      << job.describe();
}

}  // namespace

TEST(RecorderFaults, file_size_limit_stops_the_recorder_not_the_program) {
  // 4 MiB (8192 blocks of 512 bytes: /bin/sh is dash here; 8 MiB under bash): room for the
  // fixture's shared memory and the first batches, not for the whole trace (~35 bytes an op).
  FaultJob job({"many", kManyOps}, true, {}, "ulimit -f 8192");
  expect_same_fate_as_without_recorder(job, kManyOps);
  EXPECT_EQ(count_of(job.result.err, "recording stopped (file_size_limit"), 2u)
      << "once per rank\n" << job.describe();
  ASSERT_EQ(job.traces.size(), 2u) << job.describe();
  for (const auto& f : job.traces) {
    Trace t(f);
    EXPECT_EQ(t.meta("recorder_stopped"), "file_size_limit") << f;
    EXPECT_NE(t.meta("recorder_stopped_detail").find("File too large"), std::string::npos)
        << t.meta("recorder_stopped_detail");
    const std::string stopped_ns = t.meta("recorder_stopped_mono_ns");
    ASSERT_NE(stopped_ns, "<no row>") << f;
    EXPECT_GT(std::stoll(stopped_ns), 0);
    EXPECT_LT(std::stoll(t.scalar("SELECT count(*) FROM ops")), std::stoll(kManyOps)) << "the trace is partial";
    // Its stop point: per communicator, the first seq not in the file, every later one missing.
    EXPECT_EQ(t.scalar("SELECT count(*) FROM drops WHERE reason='recorder_stopped'"), "1") << f;
    EXPECT_EQ(t.scalar("SELECT first_seq FROM drops WHERE reason='recorder_stopped'"),
              t.scalar("SELECT max(seq) + 1 FROM ops"))
        << f;
    EXPECT_EQ(t.scalar("SELECT count(*) FROM drops WHERE reason='recorder_stopped' AND last_seq IS NULL"), "1") << f;
  }
}

TEST(RecorderFaults, the_programs_own_write_past_the_limit_still_gets_SIGXFSZ) {
  // The recorder blocks SIGXFSZ only in its own threads: the program's oversized write is
  // killed as it is without the recorder.
  for (bool record : {false, true}) {
    TempDir out;
    FaultJob job({"write_file", "16777216", out.path}, record, {}, "ulimit -f 8192");
    EXPECT_NE(job.result.err.find("killed by signal " + std::to_string(SIGXFSZ)), std::string::npos)
        << (record ? "with" : "without") << " the recorder\n" << job.describe();
    EXPECT_EQ(job.result.out.find("wrote"), std::string::npos) << job.describe();
    if (record) {
      ASSERT_EQ(job.traces.size(), 2u) << job.describe();
      for (const auto& f : job.traces)
        EXPECT_EQ(Trace(f).meta("recorder_stopped"), "<no row>") << "the recorder itself was fine";
    }
  }
}

namespace {
struct ShimCase {
  int err;
  const char* reason;
};
}  // namespace

TEST(RecorderFaults, enospc_eio_erofs_stop_the_recorder_and_the_trace_says_why) {
  for (ShimCase c : {ShimCase{ENOSPC, "disk_full"}, ShimCase{EIO, "io_error"},
                     ShimCase{EROFS, "read_only"}}) {
    // One failing write after 1 MiB (a transient fault): the stop is written afterwards.
    FaultJob job({"many", kSomeOps}, true,
                 {{"LD_PRELOAD", std::string(FAILWRITE_SHIM_PATH) + ":" + LIBLOCKSTEP_PATH},
                  {"LOCKSTEP_TEST_FAIL_ERRNO", std::to_string(c.err)},
                  {"LOCKSTEP_TEST_FAIL_AFTER_BYTES", "1048576"},
                  {"LOCKSTEP_TEST_FAIL_COUNT", "1"}});
    expect_same_fate_as_without_recorder(job, kSomeOps);
    EXPECT_EQ(count_of(job.result.err, std::string("recording stopped (") + c.reason), 2u)
        << job.describe();
    ASSERT_EQ(job.traces.size(), 2u) << job.describe();
    for (const auto& f : job.traces) EXPECT_EQ(Trace(f).meta("recorder_stopped"), c.reason) << f;
  }
}

TEST(RecorderFaults, a_disk_that_stays_full_costs_the_trace_tail_not_the_program) {
  // Every write fails from 1 MiB on: the stop cannot be written; the program is unaffected and
  // the trace keeps its committed batches (still a readable file).
  FaultJob job({"many", kSomeOps}, true,
               {{"LD_PRELOAD", std::string(FAILWRITE_SHIM_PATH) + ":" + LIBLOCKSTEP_PATH},
                {"LOCKSTEP_TEST_FAIL_ERRNO", std::to_string(ENOSPC)},
                {"LOCKSTEP_TEST_FAIL_AFTER_BYTES", "1048576"}});
  expect_same_fate_as_without_recorder(job, kSomeOps);
  EXPECT_EQ(count_of(job.result.err, "recording stopped (disk_full"), 2u) << job.describe();
  ASSERT_EQ(job.traces.size(), 2u) << job.describe();
  for (const auto& f : job.traces) {
    // The failed batch could not be rolled back either (every write fails): the journal is
    // hot. A writable copy of both rolls back on open, as SQLite does for any reader that may
    // write, and holds every batch committed before the disk filled.
    const std::string copy = job.dir.path + "/copy.sqlite";
    ASSERT_EQ(system(("cp '" + f + "' '" + copy + "' && (cp '" + f + "-journal' '" + copy +
                      "-journal' 2>/dev/null; true)").c_str()),
              0);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(copy.c_str(), &db), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db, "PRAGMA quick_check", nullptr, nullptr, nullptr), SQLITE_OK) << f;
    sqlite3_close(db);
    Trace t(copy);
    EXPECT_EQ(t.meta("schema_version"), "3") << f;
    EXPECT_NE(std::stoll(t.scalar("SELECT count(*) FROM ops")), 0) << f;
    std::remove(copy.c_str());
    std::remove((copy + "-journal").c_str());
  }
}

TEST(RecorderFaults, an_unwritable_trace_directory_leaves_the_program_untraced_and_unharmed) {
  // /proc/self is not a place for directories: mkdir fails (as root too).
  FaultJob job({"many", kSomeOps}, true, {}, "", "/proc/self/lockstep-trace");
  expect_same_fate_as_without_recorder(job, kSomeOps);
  EXPECT_EQ(count_of(job.result.err, "cannot create trace directory"), 2u) << job.describe();
}

TEST(RecorderFaults, a_full_tmpfs_stops_the_recorder_not_the_program) {
  TempDir mnt;
  // A private mount namespace (user namespace: no privileges needed where the kernel allows it).
  ProcResult probe = run({"/usr/bin/unshare", "-rm", "/bin/sh", "-c",
                          "mount -t tmpfs -o size=256k lockstep-test " + mnt.path},
                         {}, 10);
  if (probe.exit_code != 0)
    GTEST_SKIP() << "cannot mount a tmpfs in a user namespace here: " << probe.err;
  TempDir out;
  std::string script = "mount -t tmpfs -o size=256k lockstep-test " + mnt.path +
                       " && \"$@\"; rc=$?; cp -r " + mnt.path + "/trace " + out.path +
                       "/ 2>/dev/null; exit $rc";
  std::map<std::string, std::string> env = {{"LD_LIBRARY_PATH", FIXTURE_LIB_DIR},
                                            {"LOCKSTEP_DIR", mnt.path + "/trace"},
                                            {"LOCKSTEP_STACKS", "native"},
                                            {"LD_PRELOAD", LIBLOCKSTEP_PATH}};
  ProcResult r = run({"/usr/bin/unshare", "-rm", "/bin/sh", "-c", script, "sh", LAUNCHER_PATH, "-n",
                      "2", "--timeout", "60", "--", PROGRAM_PATH, "many", "6000"},
                     env, 90);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(program_lines(r), "6000 all-reduces done"), 2u) << r.out << r.err;
  EXPECT_EQ(count_of(r.err, "recording stopped (disk_full"), 2u) << r.err;
  auto traces = trace_files(out.path + "/trace");
  EXPECT_EQ(traces.size(), 2u) << r.err;
}

TEST(RecorderConfigOnFixture, an_out_of_range_hang_timeout_warns_once_and_keeps_the_default) {
  // LOCKSTEP_HANG_TIMEOUT=1e12 (or inf) used to overflow to 0 s: "no NCCL progress for 0s" on a
  // healthy run.
  for (const char* bad : {"1e12", "inf"}) {
    FaultJob job({"many", "2000"}, true, {{"LOCKSTEP_HANG_TIMEOUT", bad}});
    EXPECT_EQ(job.result.exit_code, 0) << job.describe();
    EXPECT_EQ(count_of(job.result.err, "no NCCL progress"), 0u) << bad << "\n" << job.describe();
    EXPECT_EQ(count_of(job.result.err, std::string("LOCKSTEP_HANG_TIMEOUT=") + bad + " is not"), 2u)
        << "once per rank\n" << job.describe();
    ASSERT_EQ(job.traces.size(), 2u) << job.describe();
    for (const auto& f : job.traces) EXPECT_EQ(Trace(f).scalar("SELECT count(*) FROM hangs"), "0") << f;
  }
}
