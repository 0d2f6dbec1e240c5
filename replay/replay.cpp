#include "replay.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "analysis.h"
#include "rank_schedule.h"
#include "trace_details.h"
#include "trace_loader.h"
#include "trace_schema.h"

namespace lockstep::replay {

namespace fs = std::filesystem;

int ReplayResult::hung_trials() const {
  int n = 0;
  for (const auto& t : trials) n += !t.completed;
  return n;
}

std::vector<std::string> rank_files(const Trace& trace) {
  const int n = static_cast<int>(trace.processes.size());
  std::vector<std::string> files(n);
  for (const Process& p : trace.processes) {
    if (p.global_rank < 0 || p.global_rank >= n)
      throw std::runtime_error("replay: " + p.path + " has global rank " + std::to_string(p.global_rank) + ", expected 0.." +
                               std::to_string(n - 1) + " (one file per rank; set RANK when recording)");
    if (!files[p.global_rank].empty())
      throw std::runtime_error("replay: global rank " + std::to_string(p.global_rank) + " appears in two files: " +
                               files[p.global_rank] + " and " + p.path);
    files[p.global_rank] = p.path;
  }
  return files;
}

namespace {

Trace load(const std::string& dir) {
  try {
    Trace t = load_trace(dir);
    if (t.processes.empty()) throw std::runtime_error("replay: no usable trace file in " + dir);
    return t;
  } catch (const LoadError& e) {
    throw std::runtime_error(std::string("replay: ") + e.what());
  }
}

std::string analyze_report(const std::string& dir) {
  try {
    lockstep::Schedule s = load_schedule(dir);
    if (s.procs.empty()) return "(the replay left no usable trace in " + dir + ")\n";
    Analysis a = analyze(s);
    auto details = details_from_files(s);
    return render_text(a, *details);
  } catch (const std::exception& e) {
    return std::string("(cannot analyze the replay's trace: ") + e.what() + ")\n";
  }
}

std::string seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", s);
  return b;
}

}  // namespace

model::Result model_check_dir(const std::string& trace_dir, int order_from, std::vector<std::string>* problems) {
  Trace t = load(trace_dir);
  if (order_from >= 0) {
    const auto files = rank_files(t);
    if (order_from >= static_cast<int>(files.size()))
      throw std::runtime_error("replay: --order-from " + std::to_string(order_from) + ": the trace has ranks 0.." +
                               std::to_string(files.size() - 1));
    RankSchedule source;
    for (const Process& p : t.processes)
      if (p.global_rank == order_from) {
        source.proc = p;
        source.nocolor = load_nocolor_splits(p);
      }
    for (Process& p : t.processes) {
      RankSchedule mine;
      mine.proc = std::move(p);
      mine.nocolor = load_nocolor_splits(mine.proc);
      reorder_like(mine, source);
      p = std::move(mine.proc);
    }
  }
  model::Schedule s = model::schedule_from_trace(t);
  if (problems) *problems = s.problems;
  return model::check(s);
}

ReplayResult run_replay(const ReplayOptions& o, std::ostream& log) {
  if (o.out_dir.empty()) throw std::runtime_error("replay: no output directory");
  if (o.worker_exe.empty() || access(o.worker_exe.c_str(), X_OK) != 0)
    throw std::runtime_error("replay: worker executable not found: '" + o.worker_exe + "' (build target lockstep-replay-worker)");
  if (!o.preload.empty() && access(o.preload.c_str(), R_OK) != 0)
    throw std::runtime_error("replay: recorder library not found: " + o.preload + " (build it, or set LOCKSTEP_PRELOAD)");
  const Trace t = load(o.trace_dir);
  const auto files = rank_files(t);
  const int n = static_cast<int>(files.size());
  if (o.order_from >= n)
    throw std::runtime_error("replay: --order-from " + std::to_string(o.order_from) + ": the trace has ranks 0.." + std::to_string(n - 1));
  fs::create_directories(o.out_dir);

  ReplayResult result;
  const int trials = std::max(o.perturb, 1);
  for (int k = 0; k < trials; ++k) {
    TrialResult tr;
    tr.seed = o.perturb > 0 ? o.seed + static_cast<uint64_t>(k) : 0;
    tr.trace_dir = o.perturb > 0 ? (fs::path(o.out_dir) / ("trial-" + std::to_string(k))).string() : o.out_dir;
    fs::create_directories(tr.trace_dir);
    for (const auto& e : fs::directory_iterator(tr.trace_dir))
      // A previous replay's files (and hot journals of killed ranks) would mix into this trace.
      if (const std::string f = e.path().string();
          f.ends_with(schema::kFileSuffix) || f.ends_with(std::string(schema::kFileSuffix) + "-journal"))
        fs::remove(e.path());

    // The worker finds its file by rank: the launcher sets RANK; the command line lists them all.
    LaunchOptions lo;
    lo.nranks = n;
    lo.argv = {o.worker_exe, "--files"};
    for (const auto& f : files) lo.argv.push_back(f);
    lo.argv.push_back("--timeout");
    lo.argv.push_back(std::to_string(o.timeout_s));
    if (o.order_from >= 0) {
      lo.argv.push_back("--order-from-file");
      lo.argv.push_back(files[o.order_from]);
    }
    if (tr.seed) {
      lo.argv.insert(lo.argv.end(), {"--delay-seed", std::to_string(tr.seed), "--max-delay-us", std::to_string(o.max_delay_us)});
    }
    // Workers end themselves after timeout_s without progress; this only bounds a worker that
    // cannot (a stuck launcher child, a signal ignored).
    lo.timeout_s = std::max(3600.0, o.timeout_s * 10);
    lo.env = o.env;
    if (!o.preload.empty()) {
      lo.env["LD_PRELOAD"] = o.preload;
      lo.env["LOCKSTEP_DIR"] = tr.trace_dir;
      if (!lo.env.count("LOCKSTEP_HANG_TIMEOUT")) lo.env["LOCKSTEP_HANG_TIMEOUT"] = "1";
    }
    lo.prefix_output = o.echo_output;
    LaunchResult lr = launch_ranks(lo);
    tr.completed = lr.all_succeeded();
    for (const auto& r : lr.ranks) tr.timed_out |= r.timed_out || r.term_signal == 15 || r.exit_code == 124;
    tr.launch_summary = lr.summary();
    if (!tr.completed) {
      std::string out;
      for (const auto& r : lr.ranks)
        if (!r.output.empty() && r.exit_code != 0 && !r.timed_out && r.term_signal == 0)
          out += "[rank " + std::to_string(r.rank) + "] " + r.output;
      if (!out.empty()) tr.launch_summary += out;
      if (!o.preload.empty()) tr.report = analyze_report(tr.trace_dir);
    }
    log << "replay" << (tr.seed ? " trial " + std::to_string(k) + " (seed " + std::to_string(tr.seed) + ")" : std::string()) << ": "
        << (tr.completed ? "completed" : tr.timed_out ? "HANG (no progress for " + seconds(o.timeout_s) + ")" : "FAILED")
        << "\n";
    result.trials.push_back(std::move(tr));
  }
  return result;
}

}  // namespace lockstep::replay
