// `lockstep shrink` end to end on the CPU NCCL fixture: on the recorded seed demo (hang at op
// 3750), a hidden-style cross-communicator cycle, a many-rank divergence and a latent inversion
// of a run that completed. Each time: the shrink confirms its reproducer by a replay; the emitted
// C program is compiled against the fixture's libnccl and fake libcuda, run under the recorder
// with lockstep-launch and a timeout, must HANG, and `lockstep analyze` must diagnose its trace
// as it diagnosed the original; the PyTorch script must compile and issue the same ops in order.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "cli_runner.h"
#include "schedules.h"
#include "trace_loader.h"
#include "trace_writer.h"

using lockstep::testing::ProcResult;
using lockstep::testing::run_program;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  std::string t = (fs::temp_directory_path() / ("lockstep-shrink-" + name + "-XXXXXX")).string();
  if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
  return t;
}

std::map<std::string, std::string> job_env() {
  return {{"LD_LIBRARY_PATH", FIXTURE_LIB_DIR}, {"LOCKSTEP_PRELOAD", LOCKSTEP_RECORDER}};
}

// `lockstep run -o DIR -- lockstep-launch -n N --timeout T --quiet -- PROGRAM`
ProcResult record(const std::string& dir, int nranks, double timeout, const std::vector<std::string>& program) {
  std::vector<std::string> argv = {LOCKSTEP_EXE, "run", "-o", dir, "--", LAUNCHER, "-n", std::to_string(nranks),
                                   "--timeout", std::to_string(timeout), "--quiet", "--"};
  argv.insert(argv.end(), program.begin(), program.end());
  return run_program(argv, job_env(), timeout + 60);
}

json analyze(const std::string& dir, int* exit_code, std::string* raw) {
  ProcResult r = run_program({LOCKSTEP_EXE, "analyze", dir, "--json"}, {}, 400);  // 4,096 files on a loaded machine
  *exit_code = r.exit_code;
  *raw = r.out + r.err;
  try {
    return json::parse(r.out);
  } catch (const std::exception&) {
    return json::object();
  }
}

// What "diagnosed the same way" compares: the first divergence's kind and the ops its sides
// issued, whether there is an order inversion and between how many communicators a hang's
// cycle runs.
json diagnosis(const json& a) {
  json d = json::object();
  const json& f = a.value("first_divergence", json());
  if (f.is_object()) {
    d["kind"] = f.value("kind", "");
    std::set<std::string> ops;
    if (f.contains("sides"))
      for (const auto& s : f["sides"])
        if (s.contains("op") && s["op"].is_string()) ops.insert(s["op"].get<std::string>());
    d["ops"] = ops;
  }
  d["inversion"] = a.contains("order_inversions") && !a["order_inversions"].empty();
  if (a.contains("hang") && a["hang"].contains("cycles") && !a["hang"]["cycles"].empty())
    d["cycle_communicators"] = a["hang"]["cycles"][0].value("communicators", -1);
  return d;
}

std::string torch_call(const std::string& op) {
  static const std::map<std::string, std::string> m = {
      {"all_reduce", "dist.all_reduce("},       {"all_gather", "dist.all_gather_into_tensor("},
      {"reduce_scatter", "dist.reduce_scatter_tensor("}, {"all_to_all", "dist.all_to_all_single("},
      {"broadcast", "dist.broadcast("},         {"reduce", "dist.reduce("},
      {"send", "dist.send("},                   {"recv", "dist.recv("}};
  return m.at(op);
}

// The calls of each `rank == k` block of the script, in order.
std::map<int, std::vector<std::string>> script_calls(const std::string& py) {
  std::map<int, std::vector<std::string>> calls;
  std::regex block(R"(^(?:if|elif) rank == (\d+):$)");
  std::regex call(R"((dist\.[a-z_]+\())");
  int cur = -1;
  std::istringstream in(py);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, block)) cur = std::stoi(m[1]);
    else if (!line.empty() && line[0] != ' ') cur = -1;
    else if (cur >= 0 && std::regex_search(line, m, call)) calls[cur].push_back(m[1]);
  }
  return calls;
}

struct Expect {
  int max_ranks = 2;
  int max_ops = 4;
};

// Shrinks `original` (whose analysis is `orig`), checks the reproducer as the file comment says.
void shrink_and_check(const std::string& name, const std::string& original, const Expect& e, json* reproducer = nullptr) {
  int orig_rc = -1;
  std::string orig_raw;
  const json orig = diagnosis(analyze(original, &orig_rc, &orig_raw));
  ASSERT_EQ(orig_rc, 1) << orig_raw;

  const std::string out = temp_dir(name + "-repro");
  ProcResult s = run_program({LOCKSTEP_EXE, "shrink", original, "-o", out, "--nccl-lib-dir", FIXTURE_LIB_DIR,
                              "--replay-timeout", "3", "-q"},
                             {}, 400);
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  EXPECT_NE(s.out.find("replay of the reproducer: hangs"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("removed:"), std::string::npos) << s.out;

  const lockstep::Schedule minimal = lockstep::load_headers(out + "/trace");
  const int n = static_cast<int>(minimal.procs.size());
  int ops = 0;
  for (const auto& p : minimal.procs) ops += static_cast<int>(lockstep::load_process_file(p.info.path).ops.size());
  EXPECT_LE(n, e.max_ranks) << s.out;
  EXPECT_LE(ops, e.max_ops) << s.out;

  // The minimal trace itself is diagnosed like the original.
  int min_rc = -1;
  std::string min_raw;
  EXPECT_EQ(diagnosis(analyze(out + "/trace", &min_rc, &min_raw)).value("kind", json()), orig.value("kind", json()))
      << min_raw;

  // C: compiles against the fixture, hangs under the recorder, diagnosed the same way.
  ProcResult cc = run_program({C_COMPILER, out + "/repro.c", "-o", out + "/repro", "-I" CUDA_INCLUDE_DIR,
                               "-L" FIXTURE_LIB_DIR, "-l:libnccl.so.2", "-l:libcuda.so.1",
                               "-Wl,-rpath," FIXTURE_LIB_DIR},
                              {}, 60);
  ASSERT_EQ(cc.exit_code, 0) << cc.out << cc.err << lockstep::testing::slurp_file(out + "/repro.c");
  const std::string rec = temp_dir(name + "-rec");
  ProcResult job = record(rec, n, 4, {out + "/repro"});
  EXPECT_EQ(job.exit_code, 124) << "the reproducer hangs and the launcher stops it\n" << job.out << job.err;
  int rec_rc = -1;
  std::string rec_raw;
  const json got = diagnosis(analyze(rec, &rec_rc, &rec_raw));
  EXPECT_EQ(rec_rc, 1) << rec_raw;
  // An original that did not hang (a completed run, a written schedule) has no cycle to compare.
  json same = got;
  if (!orig.contains("cycle_communicators")) same.erase("cycle_communicators");
  if (reproducer) *reproducer = got;
  EXPECT_EQ(same, orig) << "original:\n" << orig_raw << "\nreproducer:\n" << rec_raw;

  // PyTorch: valid Python, same ops in the same order per rank.
  const std::string py = lockstep::testing::slurp_file(out + "/repro.py");
  if (std::string(PYTHON3).empty()) {
    ADD_FAILURE() << "no python3 to check repro.py";
  } else {
    ProcResult pc = run_program({PYTHON3, "-m", "py_compile", out + "/repro.py"}, {}, 60);
    EXPECT_EQ(pc.exit_code, 0) << pc.err << py;
  }
  auto calls = script_calls(py);
  for (const auto& sp : minimal.procs) {
    const lockstep::Process p = lockstep::load_process_file(sp.info.path);
    std::vector<std::string> want;
    for (const auto& o : p.ops) want.push_back(torch_call(lockstep::vocab::name(o.op)));
    EXPECT_EQ(calls[p.global_rank], want) << "rank " << p.global_rank << "\n" << py;
  }
  EXPECT_NE(lockstep::testing::slurp_file(out + "/README.md").find("lockstep-launch -n " + std::to_string(n)),
            std::string::npos);
  fs::remove_all(out);
  fs::remove_all(rec);
}

}  // namespace

TEST(ShrinkE2E, RecordedSeedDemoShrinksToAHandfulOfOpsThatHangWithTheSameDivergence) {
  const std::string dir = temp_dir("seed");
  ProcResult job = record(dir, 2, 10, {SEED_DEADLOCK});
  ASSERT_EQ(job.exit_code, 124) << job.err;
  shrink_and_check("seed", dir, {2, 4});
  fs::remove_all(dir);
}

// The reproducer's trace never replaces a recorded one: `-o` the trace directory's parent, or
// an output whose trace/ is a link to another job's traces, is refused and nothing is deleted
// (before: the recorded files were deleted and replaced by the reproducer's).
TEST(ShrinkE2E, OutputThatWouldReplaceARecordedTraceIsRefused) {
  const std::string job = temp_dir("own");
  const std::string dir = job + "/trace";
  lockstep::shrink::write_trace(lockstep::testing::hidden_cycle(), dir);
  // Names as the recorder writes them, not the reproducer's rank-N.
  std::set<std::string> before;
  for (const auto& e : fs::directory_iterator(dir)) {
    fs::path renamed = e.path().parent_path() / ("node0-" + e.path().filename().string());
    fs::rename(e.path(), renamed);
    before.insert(renamed.filename().string());
  }
  auto listing = [](const std::string& d) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(d)) names.insert(e.path().filename().string());
    return names;
  };
  ProcResult r = run_program({LOCKSTEP_EXE, "shrink", dir, "-o", job, "--no-replay", "-q"}, {}, 120);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("is the trace being shrunk"), std::string::npos) << r.err;
  EXPECT_EQ(listing(dir), before);

  // Another output whose trace/ is a symbolic link to the job's traces.
  const std::string out = temp_dir("own-out");
  fs::create_directory_symlink(dir, out + "/trace");
  r = run_program({LOCKSTEP_EXE, "shrink", dir, "-o", out, "--no-replay", "-q"}, {}, 120);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(listing(dir), before);

  // A directory of another job's traces under the output's trace/ (a copy, not a link).
  const std::string other = temp_dir("own-other");
  fs::create_directory(other + "/trace");
  for (const auto& name : before) fs::copy_file(dir + "/" + name, other + "/trace/" + name);
  r = run_program({LOCKSTEP_EXE, "shrink", dir, "-o", other, "--no-replay", "-q"}, {}, 120);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("not written by lockstep here"), std::string::npos) << r.err;
  EXPECT_EQ(listing(other + "/trace"), before);
  for (const std::string& d : {job, out, other}) fs::remove_all(d);
}

TEST(ShrinkE2E, HiddenCrossCommunicatorCycleShrinksToTwoRanksThatHangInTheSameCycle) {
  const std::string dir = temp_dir("hidden");
  lockstep::shrink::write_trace(lockstep::testing::hidden_cycle(), dir);
  shrink_and_check("hidden", dir, {2, 4});
  fs::remove_all(dir);
}

// 512 ranks in CI (64 tensor-parallel groups: the same search as at 4,096, an eighth of the trace
// files to write and load); the long run (ctest -L long) repeats it at 4,096 through
// LOCKSTEP_WIDE_RANKS.
static int wide_ranks() {
  const char* v = ::getenv("LOCKSTEP_WIDE_RANKS");
  return v && *v ? ::atoi(v) : 512;
}

TEST(ShrinkE2E, DivergenceAmongManyRanksShrinksToAFewRanksThatHang) {
  const std::string dir = temp_dir("wide");
  lockstep::shrink::write_trace(lockstep::testing::wide_divergence(wide_ranks(), 3), dir);
  shrink_and_check("wide", dir, {3, 4});
  fs::remove_all(dir);
}

TEST(ShrinkE2E, LatentInversionOfACompletedRunBecomesAReproducerThatHangs) {
  const std::string dir = temp_dir("inversion");
  lockstep::shrink::write_trace(lockstep::testing::latent_inversion(), dir);
  json got;
  shrink_and_check("inversion", dir, {2, 4}, &got);
  EXPECT_EQ(got.value("cycle_communicators", -1), 2) << "the reproducer hangs in the inversion's cycle\n" << got.dump();
  fs::remove_all(dir);
}
