// lockstep shrink DIR -o repro/: a minimal schedule that deadlocks the same way, as a C program,
// a PyTorch script and a trace, checked by a replay on the loaded NCCL. docs/shrink.md.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "analysis.h"
#include "commands.h"
#include "env_vars.h"
#include "identity.h"
#include "emit.h"
#include "exit_codes.h"
#include "text_escape.h"
#include "replay.h"
#include "shrink.h"
#include "trace_loader.h"

namespace lockstep::cli {

namespace {

namespace fs = std::filesystem;


struct ShrinkArgs {
  std::string dir;
  std::string out;
  bool no_replay = false;
  double replay_timeout_s = 10;
  std::string nccl_lib_dir;
  bool quiet = false;
};

// The replay of the minimal trace: "" when it behaved as the model says, else why not.
std::string replay_check(const ShrinkArgs& a, const shrink::Result& r, std::string* line) {
  replay::ReplayOptions o;
  o.trace_dir = (fs::path(a.out) / "trace").string();
  std::string tmp = (fs::temp_directory_path() / "lockstep-shrink-replay-XXXXXX").string();
  if (!mkdtemp(tmp.data())) return "cannot create a temporary directory for the replay";
  o.out_dir = tmp;
  o.timeout_s = a.replay_timeout_s;
  o.worker_exe = (fs::path(self_exe()).parent_path() / "lockstep-replay-worker").string();
  if (const char* w = std::getenv(schema::env::kReplayWorker); w && *w) o.worker_exe = w;
  if (!a.nccl_lib_dir.empty()) {
    const char* old = std::getenv("LD_LIBRARY_PATH");
    o.env["LD_LIBRARY_PATH"] = a.nccl_lib_dir + (old && *old ? std::string(":") + old : std::string());
  }
  std::ostringstream log;
  std::string problem;
  try {
    replay::ReplayResult rr = replay::run_replay(o, log);
    const bool expect_hang = r.minimal_check.verdict == model::Verdict::kDeadlock;
    const auto& t = rr.trials.at(0);
    if (t.timed_out) *line = "hangs (no progress for " + std::to_string(static_cast<int>(a.replay_timeout_s)) + " s), as the model says";
    else if (t.completed) *line = "completes";
    else *line = "failed: " + t.launch_summary;
    if (expect_hang && !t.timed_out) problem = "the replay of the reproducer did not hang: " + *line;
    if (!expect_hang && !t.completed) problem = "the replay of the reproducer did not complete: " + *line;
    if (!expect_hang && t.completed) *line += " (the model says \"may deadlock\": it hangs only when kernels run one at a time)";
  } catch (const std::exception& e) {
    problem = std::string("the replay could not run: ") + e.what();
  }
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return problem;
}

int run_shrink(const ShrinkArgs& a) {
  if (!check_dir("shrink", a.dir)) return kExitUsage;
  // `shrink job/trace -o job` would write the reproducer's trace over the recorded one.
  std::error_code same_ec;
  if (fs::equivalent(fs::path(a.out) / "trace", a.dir, same_ec)) {
    std::cerr << "lockstep shrink: " << printable(a.out) << "/trace is the trace being shrunk: choose another -o\n";
    return kExitUsage;
  }
  LoadOptions lo;
  lo.host_waits = true;  // the model checker's side data
  const Schedule t = load_schedule(a.dir, lo);
  // A reproducer of a job whose evidence is incomplete would be a reproducer of another job.
  if (auto why = evidence_lines(analyze(t)); !why.empty()) {
    std::cerr << "lockstep shrink: incomplete evidence: not shrinking what the job may not have done\n";
    for (const auto& w : why) std::cerr << "  " << printable(w) << "\n";
    return kExitIncomplete;
  }
  shrink::Options so;
  if (!a.quiet) so.progress = [](const std::string& s) { std::cerr << "shrink: " << printable(s) << "\n"; };
  shrink::Result r;
  try {
    // The candidates are subsets of the rows: each file's read once, one at a time.
    r = shrink::shrink(t, [&](size_t proc) { return load_process_file(t.procs[proc].info.path, lo); }, so);
  } catch (const std::exception& e) {
    std::cerr << "lockstep shrink: " << printable(e.what()) << "\n";
    return kExitUsage;
  }
  std::string replay_line, problem;
  // The output directory first, so an unwritable one is said as every command says it.
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec || !fs::is_directory(a.out, ec)) {
    std::cerr << "lockstep shrink: cannot write " << printable(a.out) << (ec ? " (" + ec.message() + ")" : "") << "\n";
    return kExitUsage;
  }
  shrink::write_reproducer(r, a.dir, a.out, "");
  if (!a.no_replay) {
    problem = replay_check(a, r, &replay_line);
    shrink::write_reproducer(r, a.dir, a.out, replay_line);  // README with the replay's outcome
  }
  std::ostringstream o;
  o << "bug: " << r.signature.text() << "\n"
    << "original: " << plural(r.before.ranks, "rank", "ranks") << ", " << plural(r.before.comms, "communicator", "communicators") << ", "
    << plural(r.before.ops, "op", "ops") << "\n"
    << "minimal:  " << plural(r.after.ranks, "rank", "ranks") << ", " << plural(r.after.comms, "communicator", "communicators") << ", "
    << plural(r.after.ops, "op", "ops") << " ("
    << r.checks << " model checks, " << static_cast<int>(r.seconds * 1000) << " ms)\n"
    << "model check of the reproducer: " << r.minimal_check.summary << "\n"
    << "removed:\n";
  for (const auto& line : r.removed) o << "  " << line << "\n";
  if (!replay_line.empty()) o << "replay of the reproducer: " << replay_line << "\n";
  o << "wrote " << a.out << "/{repro.c, repro.py, trace/, README.md}\n";
  std::cout << printable_lines(o.str());
  if (!problem.empty()) {
    std::cerr << "lockstep shrink: " << printable(problem) << "\n";
    return kExitCannotRun;  // written, but its replay could not run or did not hang
  }
  return kExitOk;
}

}  // namespace

void add_shrink_command(Command& app, int* exit_code) {
  auto a = std::make_shared<ShrinkArgs>();
  auto* sub = app.add_subcommand("shrink", "Shrink a deadlocking schedule to a minimal reproducer (C, PyTorch, trace)");
  sub->footer("Exit code: 0 written (and its replay behaved as the model says), 2 input error or nothing to shrink, 4 incomplete evidence (nothing written), 5 written but the replay of the reproducer did not confirm it.");
  sub->add_option("dir", a->dir, "Trace directory whose schedule deadlocks (or may deadlock)")->required();
  sub->add_option("-o,--output,--out", a->out, "Directory for repro.c, repro.py, trace/ and README.md")->required();
  sub->add_flag("--no-replay", a->no_replay, "Do not replay the reproducer on the loaded NCCL at the end");
  sub->add_option("--replay-timeout", a->replay_timeout_s, "Seconds without progress before the final replay is declared hung (default 10)")->positive();
  sub->add_option("--nccl-lib-dir", a->nccl_lib_dir, "Directory put first in the replay workers' LD_LIBRARY_PATH (libnccl.so.2, libcuda.so.1)");
  sub->add_flag("-q,--quiet", a->quiet, "No progress lines on stderr");
  sub->callback([a, exit_code] {
    try {
      *exit_code = run_shrink(*a);
    } catch (const std::exception& e) {
      std::cerr << "lockstep shrink: " << printable(e.what()) << "\n";
      *exit_code = kExitUsage;
    }
  });
}

}  // namespace lockstep::cli
