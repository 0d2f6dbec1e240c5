// lockstep replay DIR: re-run a recorded schedule (one process per rank, under the recorder) or
// check it without processes (--model). docs/replay.md.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>

#include "analysis.h"
#include "commands.h"
#include "env_vars.h"
#include "exit_codes.h"
#include "model_check.h"
#include "text_escape.h"
#include "rank_env.h"
#include "rank_schedule.h"
#include "step_timer.h"
#include "replay.h"
#include "trace_loader.h"
#include "worker.h"

namespace lockstep::cli {

namespace {

namespace fs = std::filesystem;

struct ReplayArgs {
  std::string dir;
  bool model = false;
  bool timing = false;
  bool json = false;
  double max_memory_gib = 0;  // 0: what this process can have
  bool rank_from_env = false;
  double timeout_s = 30;
  int order_from = -1;
  int perturb = 0;
  uint64_t seed = 1;
  int max_delay_us = 2000;
  std::string out;
  bool no_record = false;
  bool verbose = false;
};

using replay::exit_code_of;
// One set of exit codes: replay's outcomes are cli/exit_codes.h's.
static_assert(static_cast<int>(replay::Outcome::kCannotRun) == kExitCannotRun);
static_assert(static_cast<int>(replay::Outcome::kIncomplete) == kExitIncomplete);
static_assert(static_cast<int>(replay::Outcome::kHangs) == kExitFound);
static_assert(static_cast<int>(replay::Outcome::kCompleted) == kExitOk);
using replay::Outcome;

int run_model(const ReplayArgs& a) {
  std::vector<std::string> incomplete;
  replay::RetiredHistory retired;
  StepTimer timer("replay --model", a.timing);
  std::function<void(const char*)> on_step;
  if (timer.on()) on_step = [&](const char* step) { timer.step(step); };
  const auto limit = static_cast<uint64_t>(std::min(a.max_memory_gib, 1e9) * 1024 * 1024 * 1024);
  model::Result r = replay::model_check_dir(a.dir, a.order_from, nullptr, &incomplete, &retired, on_step, limit);
  // File names (skipped files, file-based labels) can hold control characters: printed escaped,
  // line by line.
  std::string text = a.json ? replay::model_json(r, retired, incomplete) + "\n" : model::format_text(r);
  std::ostream& o = a.json ? std::cerr : std::cout;
  if (!incomplete.empty()) {
    // The verdict is about the files that are there, not the recorded job's: said first, so
    // the first line a user reads is not a verdict the evidence cannot carry.
    o << "incomplete evidence: the model check below covers only the files present, not the recorded job\n";
    for (const auto& w : incomplete) o << "  " << printable(w) << "\n";
  }
  // Likewise for a bounded trace: the model sees only the collectives the size cap kept (G15).
  for (const auto& l : replay::retired_history_lines(retired)) o << printable(l) << "\n";
  for (size_t at = 0, nl; at < text.size(); at = nl + 1) {
    nl = std::min(text.find('\n', at), text.size());
    std::cout << printable(std::string_view(text).substr(at, nl - at)) << (nl < text.size() ? "\n" : "");
  }
  // Members whose retired histories disagree by digest: the job diverged where the model cannot
  // look, so "can complete" of the retained collectives is not the recorded job's verdict.
  if (!incomplete.empty() || !retired.mismatches.empty() || r.verdict == model::Verdict::kUnknown)
    return exit_code_of(Outcome::kIncomplete);
  return r.verdict == model::Verdict::kCanComplete ? exit_code_of(Outcome::kCompleted) : exit_code_of(Outcome::kHangs);
}

// Under srun/torchrun: this process is one rank's worker.
int run_rank_from_env(const ReplayArgs& a) {
  const int rank = global_rank_from_env().rank;
  if (rank < 0) {
    std::cerr << "lockstep replay: --rank-from-env: none of " << rank_variable_list(kGlobalRankVariables)
              << " is set to a rank\n";
    return kExitUsage;
  }
  const char* rdv = std::getenv(schema::env::kRendezvousDir);
  if (!rdv || !*rdv) {
    std::cerr << "lockstep replay: --rank-from-env needs LOCKSTEP_RENDEZVOUS_DIR: an empty directory every rank sees "
                 "(unique ids are exchanged there)\n";
    return kExitUsage;
  }
  const Schedule t = load_schedule(a.dir);
  const auto files = replay::rank_files(t);
  if (auto why = evidence_lines(analyze(t)); !why.empty())
    throw replay::ReplayError(replay::ErrorKind::kIncomplete, "the recorded evidence is incomplete: " + why.front());
  if (rank >= static_cast<int>(files.size())) {
    std::cerr << "lockstep replay: rank " << rank << " is not in the trace (ranks 0.." << files.size() - 1 << ")\n";
    return kExitUsage;
  }
  replay::WorkerOptions w;
  w.trace_file = files[rank];
  if (a.order_from >= 0) w.order_from_file = files.at(a.order_from);
  w.rendezvous_dir = rdv;
  w.local_rank = std::max(local_rank_from_env().rank, 0);
  w.timeout_s = a.timeout_s;
  w.delay_seed = a.perturb > 0 ? a.seed : 0;
  w.max_delay_us = a.max_delay_us;
  w.verbose = a.verbose;
  const int rc = replay::run_worker(w);  // returns, or ends the process with SIGTERM on a hang
  if (rc == 0) return exit_code_of(Outcome::kCompleted);
  return rc == replay::kWorkerExitUsage ? kExitUsage : exit_code_of(Outcome::kCannotRun);
}

// DIR-replay beside DIR: "traces/" gives "traces-replay" (not "traces/-replay", inside it), and
// "." or ".." the directory's own name.
std::string default_replay_dir(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  if (p.empty() || p.filename() == "." || p.filename() == ".." || p == p.root_path())
    p = fs::absolute(p.empty() ? fs::path(".") : p).lexically_normal();
  if (!p.has_filename() && p != p.root_path()) p = p.parent_path();
  return p.string() + "-replay";
}

int run_local(const ReplayArgs& a) {
  replay::ReplayOptions o;
  o.trace_dir = a.dir;
  o.out_dir = a.out.empty() ? default_replay_dir(a.dir) : a.out;
  o.timeout_s = a.timeout_s;
  o.order_from = a.order_from;
  o.perturb = a.perturb;
  o.seed = a.seed;
  o.max_delay_us = a.max_delay_us;
  o.worker_exe = (fs::path(self_exe()).parent_path() / "lockstep-replay-worker").string();
  if (const char* w = std::getenv(schema::env::kReplayWorker); w && *w) o.worker_exe = w;
  if (!a.no_record) o.preload = preload_library_path();
  o.echo_output = a.verbose;
  replay::ReplayResult r = replay::run_replay(o, std::cout);
  for (const auto& t : r.trials) {
    if (t.outcome == Outcome::kCompleted) continue;
    std::cout << "\n" << (t.seed ? "trial with seed " + std::to_string(t.seed) + ": " : std::string())
              << (t.outcome == Outcome::kHangs ? "the replay hangs" : "the replay could not run: " + t.cannot_run_reason)
              << " (trace: " << t.trace_dir << ")\n"
              << t.launch_summary;
    if (!t.report.empty()) std::cout << t.report;
    if (a.perturb > 0) break;  // the first hanging trial is the one to look at
  }
  if (a.perturb > 0)
    std::cout << (r.trials.size() - r.hung_trials()) << " of " << r.trials.size() << " perturbed trials completed\n";
  else if (r.hung_trials() == 0)
    std::cout << "completed: every rank issued its recorded schedule and synchronized (trace: " << o.out_dir << ")\n";
  return exit_code_of(r.outcome());
}

}  // namespace

void add_replay_command(Command& app, int* exit_code) {
  auto a = std::make_shared<ReplayArgs>();
  auto* sub = app.add_subcommand("replay", "Re-run a recorded schedule, or check it for deadlocks without running it (--model)");
  sub->add_option("dir", a->dir, "Recorded trace directory")->required();
  sub->add_flag("--model", a->model, "Model check only: can the per-rank schedules deadlock under NCCL's semantics?");
  sub->add_flag("--json", a->json, "With --model: the verdict and witness as JSON");
  sub->add_flag("--timing", a->timing, "With --model: print how long each step took (stderr)");
  sub->add_option("--max-memory", a->max_memory_gib,
                  "With --model: GiB the model may use (default: the memory available to it); a larger model is not "
                  "started (exit 2)")
      ->positive();
  sub->add_option("--timeout", a->timeout_s, "Seconds without progress (no op completing) before a replay is declared hung (default 30)")->positive();
  sub->add_flag("--rank-from-env", a->rank_from_env,
                "Run only this process's rank (RANK/SLURM_PROCID...), under srun or torchrun; needs LOCKSTEP_RENDEZVOUS_DIR");
  sub->add_option("--order-from", a->order_from,
                  "Every rank issues its ops in RANK's order, matched by (communicator role, op kind)")->non_negative();
  sub->add_option("--perturb", a->perturb, "N trials with seeded random delays between ops and between streams")
      ->positive();
  sub->add_option("--seed", a->seed, "First perturbation seed (trial k uses seed+k; default 1)");
  sub->add_option("--max-delay-us", a->max_delay_us, "Largest perturbation delay in microseconds (default 2000)")
      ->non_negative();
  sub->add_option("-o,--output", a->out, "Directory for the replay's trace (default DIR-replay)");
  sub->add_flag("--no-record", a->no_record, "Replay without the recorder (no trace, no hang report)");
  sub->add_flag("-v,--verbose", a->verbose, "Show the workers' output");
  sub->footer(
      "Exit code: 0 completes (every trial; --model: can complete), 1 hangs or may deadlock, 2 input error,\n"
      "4 incomplete evidence (a rank's file missing or skipped, a recorder that stopped or dropped records;\n"
      "  --model: members' retired histories that disagree by digest),\n"
      "5 replay could not run (invalid schedule values, unsupported op, NCCL init failure, a worker crashed).\n"
      "Local runs use whatever libnccl.so.2 LD_LIBRARY_PATH selects: the CPU fixture (build/fixture-lib) or real NCCL.");
  sub->callback([a, exit_code] {
    if (!check_dir("replay", a->dir)) {
      *exit_code = kExitUsage;
      return;
    }
    try {
      if (a->model) *exit_code = run_model(*a);
      else if (a->rank_from_env) *exit_code = run_rank_from_env(*a);
      else *exit_code = run_local(*a);
    } catch (const replay::ReplayError& e) {
      std::cerr << "lockstep replay: " << printable_lines(e.what()) << "\n";
      switch (e.kind) {
        case replay::ErrorKind::kIncomplete: *exit_code = exit_code_of(Outcome::kIncomplete); break;
        case replay::ErrorKind::kCannotRun: *exit_code = exit_code_of(Outcome::kCannotRun); break;
        case replay::ErrorKind::kInputError: *exit_code = kExitUsage; break;
      }
    } catch (const std::exception& e) {
      std::cerr << "lockstep replay: " << printable_lines(e.what()) << "\n";
      *exit_code = kExitUsage;
    }
  });
}

}  // namespace lockstep::cli
