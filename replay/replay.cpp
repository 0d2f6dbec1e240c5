#include "replay.h"
#include "text_escape.h"

#include "env_vars.h"
#include "meta_keys.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "analysis.h"
#include "identity.h"
#include "rank_schedule.h"
#include "schedule_check.h"
#include "worker.h"
#include "trace_details.h"
#include "trace_loader.h"
#include "trace_schema.h"

namespace lockstep::replay {

namespace fs = std::filesystem;

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kCompleted: return "completed";
    case Outcome::kHangs: return "hangs";
    case Outcome::kIncomplete: return "incomplete";
    case Outcome::kCannotRun: return "cannot run";
  }
  return "cannot run";
}

int ReplayResult::hung_trials() const {
  int n = 0;
  for (const auto& t : trials) n += !t.completed;
  return n;
}

Outcome ReplayResult::outcome() const {
  Outcome o = Outcome::kCompleted;
  for (const auto& t : trials) {
    if (t.outcome == Outcome::kCannotRun) return Outcome::kCannotRun;
    if (t.outcome == Outcome::kHangs) o = Outcome::kHangs;
  }
  return o;
}

std::vector<std::string> rank_files(const Schedule& trace) {
  int n = 0;
  for (const SchedProcess& p : trace.procs) n = std::max(n, p.info.global_rank + 1);
  std::set<int> have;
  for (const SchedProcess& p : trace.procs) have.insert(p.info.global_rank);
  if (static_cast<size_t>(n) > trace.procs.size() && have.size() == trace.procs.size() && *have.begin() >= 0) {
    // Distinct ranks, some below the highest without a file: name the first, without a table
    // as large as the highest rank a file claims.
    int r = 0;
    while (have.count(r)) ++r;
    std::string why = "global rank " + std::to_string(r) + " of 0.." + std::to_string(n - 1) +
                      " has no usable trace file: its schedule cannot be replayed";
    for (const SkippedFile& f : trace.skipped) why += "\n  " + f.path + " was skipped: " + f.reason;
    throw ReplayError(ErrorKind::kIncomplete, why);
  }
  std::vector<std::string> files(static_cast<size_t>(std::max(n, 0)));
  for (const SchedProcess& sp : trace.procs) {
    const Process& p = sp.info;
    if (p.global_rank < 0)
      throw ReplayError(ErrorKind::kInputError, p.path + " has no global rank (one file per rank; set RANK when recording)");
    if (!files[p.global_rank].empty())
      throw ReplayError(ErrorKind::kIncomplete, "global rank " + std::to_string(p.global_rank) + " appears in two files: " +
                                                    files[p.global_rank] + " and " + p.path +
                                                    ": which is the rank's history is unknown");
    files[p.global_rank] = p.path;
  }
  for (int r = 0; r < n; ++r)
    if (files[r].empty()) {
      std::string why = "global rank " + std::to_string(r) + " of 0.." + std::to_string(n - 1) +
                        " has no usable trace file: its schedule cannot be replayed";
      for (const SkippedFile& f : trace.skipped) why += "\n  " + f.path + " was skipped: " + f.reason;
      throw ReplayError(ErrorKind::kIncomplete, why);
    }
  return files;
}

namespace {

// The compact schedule (with the model checker's side data when asked), as the analyzer loads it.
lockstep::Schedule load(const std::string& dir, bool host_waits = false) {
  lockstep::Schedule s;
  try {
    LoadOptions lo;
    lo.host_waits = host_waits;
    s = load_schedule(dir, lo);
  } catch (const LoadError& e) {
    throw ReplayError(ErrorKind::kInputError, e.what());
  }
  if (s.procs.empty()) throw ReplayError(ErrorKind::kInputError, "no usable trace file in " + dir);
  return s;
}

// The last line a rank printed: its worker's reason (for humans only; the outcome is typed).
std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\n");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

// A trial's outcome from its workers' exit statuses (worker.h): a worker that could not run
// or crashed makes the whole trial "cannot run" — its peers' waiting is a consequence.
void classify(const LaunchResult& lr, TrialResult& tr) {
  tr.completed = lr.all_succeeded();
  tr.outcome = tr.completed ? Outcome::kCompleted : Outcome::kHangs;
  for (const auto& r : lr.ranks) {
    const bool hung = r.timed_out || r.term_signal == SIGTERM || (r.term_signal == 0 && r.exit_code == 124);
    tr.timed_out |= hung;
    if (hung || (r.term_signal == 0 && r.exit_code == 0)) continue;
    std::string why = r.term_signal ? "crashed (signal " + std::to_string(r.term_signal) + ", " + strsignal(r.term_signal) + ")"
                      : r.exit_code == kWorkerExitCannotRun ? "could not replay"
                                                            : "exited with status " + std::to_string(r.exit_code);
    if (tr.outcome != Outcome::kCannotRun) {
      tr.outcome = Outcome::kCannotRun;
      tr.cannot_run_reason = "rank " + std::to_string(r.rank) + " " + why;
      if (std::string l = last_line(r.output); !l.empty()) tr.cannot_run_reason += ": " + l;
    }
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

std::vector<std::string> retired_history_lines(const RetiredHistory& h) {
  std::vector<std::string> lines;
  if (h.empty()) return lines;
  lines.push_back("retired history: the size cap retired the oldest collectives of " +
                  plural(h.windows.size(), "communicator", "communicators") +
                  "; the model check below covers only the retained collectives, not the recorded job's whole history");
  for (const auto& w : h.windows) lines.push_back(window_line(w.window, w.comm));
  for (const auto& m : h.mismatches) lines.push_back("digest mismatch: " + m.comm + ": " + m.finding.detail);
  return lines;
}

std::string model_json(const model::Result& r, const RetiredHistory& h, const std::vector<std::string>& incomplete) {
  nlohmann::json j = nlohmann::json::parse(model::format_json(r));
  // The exit code's decision (4): files missing or unusable, retired histories that disagree,
  // or a stuck state that waits on a rank past its records' end.
  j["incomplete"] = !incomplete.empty() || !h.mismatches.empty() || r.verdict == model::Verdict::kUnknown;
  j["incomplete_evidence"] = nlohmann::json::array();
  for (const std::string& w : incomplete) j["incomplete_evidence"].push_back(printable(w));  // file names: any bytes
  // replace: a last guard (the strings are escaped), never an exception instead of the verdict.
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  if (h.empty()) return j.dump(2, ' ', false, kReplace);
  nlohmann::json& rh = j["retired_history"];
  rh["checked"] = "retained collectives only";
  rh["windows"] = nlohmann::json::array();
  for (const auto& w : h.windows) {
    nlohmann::json x = {{"comm", w.comm},
                        {"exact_first", w.window.exact_first},
                        {"exact_last", w.window.exact_last},
                        {"digest_through", w.window.digest_through},
                        {"retired_max", w.window.retired_max},
                        {"unverified", w.window.unverified}};
    rh["windows"].push_back(std::move(x));
  }
  rh["digest_mismatch"] = nlohmann::json::array();
  for (const auto& m : h.mismatches)
    rh["digest_mismatch"].push_back({{"comm", m.comm},
                                     {"first", m.finding.ordinal_first},
                                     {"last", m.finding.ordinal},
                                     {"detail", printable(m.finding.detail)}});
  return j.dump(2, ' ', false, kReplace);
}

uint64_t memory_this_process_can_use() {
  auto read_number = [](const std::string& path, const char* key) -> std::optional<uint64_t> {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      if (key && line.rfind(key, 0) != 0) continue;
      const char* p = line.c_str() + (key ? std::strlen(key) : 0);
      while (*p == ' ' || *p == '\t') ++p;
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(p, line.c_str() + line.size(), v);
      if (ec != std::errc()) return std::nullopt;  // "max": no limit
      return std::string_view(end).find("kB") != std::string_view::npos ? v * 1024 : v;
    }
    return std::nullopt;
  };
  const auto available = read_number("/proc/meminfo", "MemAvailable:");
  if (!available) return 0;
  uint64_t can = *available;
  // The process's cgroup from /proc/self/cgroup: v2 ("0::/path": memory.max, memory.current)
  // or v1's memory controller ("N:memory:/path": memory.limit_in_bytes, memory.usage_in_bytes).
  // Its usage counts the page cache, which the kernel reclaims before it kills: left out
  // (memory.stat "file" / "total_cache"), or a group whose cache fills it would refuse any model.
  std::ifstream cg("/proc/self/cgroup");
  for (std::string line; std::getline(cg, line);) {
    std::string dir, limit, usage, cache;
    if (line.rfind("0::", 0) == 0) {
      dir = "/sys/fs/cgroup" + line.substr(3), limit = "/memory.max", usage = "/memory.current", cache = "file ";
    } else if (auto at = line.find(":memory:"); at != std::string::npos) {
      dir = "/sys/fs/cgroup/memory" + line.substr(at + 8), limit = "/memory.limit_in_bytes", usage = "/memory.usage_in_bytes",
      cache = "total_cache ";
    } else {
      continue;
    }
    const auto max = read_number(dir + limit, nullptr);
    auto used = read_number(dir + usage, nullptr);
    if (!max || !used) continue;
    if (const auto file = read_number(dir + "/memory.stat", cache.c_str())) *used -= std::min(*used, *file);
    can = std::min(can, *max > *used ? *max - *used : 0);
  }
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (statm >> size >> resident) can += resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return can;
}

model::Result model_check_dir(const std::string& trace_dir, int order_from, std::vector<std::string>* problems,
                              std::vector<std::string>* incomplete, RetiredHistory* retired,
                              const std::function<void(const char*)>& on_step, uint64_t memory_limit) {
  // The analyzer's loader, with the checker's side data (host waits, op threads).
  lockstep::Schedule s = load(trace_dir, true);
  if (on_step) on_step("load");
  // A model larger than the memory there is would end in the kernel's OOM killer (at 16,384
  // ranks x 10,000 ops: some 23 GB): said before it is built, with what gives the verdict instead.
  {
    uint64_t items = 0;
    for (const SchedProcess& p : s.procs) items += p.ops.size() + p.waits.size();
    const uint64_t need = items * model::kPeakBytesPerItem;
    const uint64_t can = memory_limit ? memory_limit : memory_this_process_can_use();
    if (can > 0 && need > can) {
      auto gib = [](uint64_t b) {
        char t[32];
        if (b >= (uint64_t(1) << 30)) std::snprintf(t, sizeof t, "%.1f GiB", static_cast<double>(b) / (1024.0 * 1024 * 1024));
        else std::snprintf(t, sizeof t, "%.1f MiB", static_cast<double>(b) / (1024.0 * 1024));
        return std::string(t);
      };
      throw ReplayError(ErrorKind::kInputError,
                        "the model of " + std::to_string(items) + " ops and host waits needs about " + gib(need) + " (" +
                            std::to_string(model::kPeakBytesPerItem) + " bytes each); " + gib(can) +
                            (memory_limit ? " allowed (--max-memory)" : " available to this process") +
                            ": not started. `lockstep analyze` and `lockstep check` give the verdict at this scale "
                            "(summary first); --max-memory GIB sets what the model may use");
    }
  }
  model::Options mo;
  mo.on_step = on_step;
  {
    // The analyzer's evidence (what analyze and check exit 4 on) and its checkpoint comparison;
    // the analysis is freed before the model is built.
    const Analysis an = analyze(s);
    if (on_step) on_step("analysis");
    if (incomplete) *incomplete = evidence_lines(an);
    // Files that contradict each other (two claiming one rank, a copied file): which is a rank's
    // schedule is unknown, so there is no schedule to model (analyze: incomplete, exit 4).
    for (const EvidenceIssue& e : an.evidence)
      if (e.contradictory) {
        model::Result unknown;
        unknown.verdict = model::Verdict::kUnknown;
        unknown.summary = "not modelled: files contradict each other (" + e.detail +
                          "): which is a rank's schedule is unknown";
        if (incomplete && incomplete->empty()) incomplete->push_back(e.detail);
        return unknown;
      }
    if (retired) {
      *retired = {};
      const CommIndex& idx = an.index;
      const CheckpointReport& cr = an.checkpoints;
      auto label = [&](int g) { return comm_label(idx.comms[g].hash, idx.comms[g].role); };
      for (const CommWindow& w : cr.comms)
        if (w.retired_max > 0) retired->windows.push_back({label(w.gcomm), w});
      for (const DigestDivergence& dd : cr.divergences) retired->mismatches.push_back({label(dd.gcomm), digest_finding(s, dd)});
    }
    for (const Unproven& u : an.unproven)
      for (int p : u.stopped) mo.stopped_procs.push_back(p);
    // A live job's ranks are only as far as they got; once a recorder's hang timeout fired, the
    // job is hung and what they have not issued they never issue (as analyze reads it).
    if (!an.hang.any_marker) mo.live_procs.assign(an.live.begin(), an.live.end());
  }
  if (order_from >= 0) {
    // Every rank's ops reordered like the source rank's (rank_schedule.h).
    const auto files = rank_files(s);
    if (order_from >= static_cast<int>(files.size()))
      throw ReplayError(ErrorKind::kInputError, "--order-from " + std::to_string(order_from) + ": the trace has ranks 0.." +
                                                    std::to_string(files.size() - 1));
    size_t source = 0;
    while (s.procs[source].info.global_rank != order_from) ++source;
    const SchedProcess original = s.procs[source];
    for (SchedProcess& p : s.procs) reorder_like(p, original, s.sigs);
  }
  // The schedule is released once the model's work list is built from it.
  model::Result r = model::check(std::move(s), mo);
  if (problems) *problems = r.problems;
  return r;
}

ReplayResult run_replay(const ReplayOptions& o, std::ostream& log) {
  if (o.out_dir.empty()) throw ReplayError(ErrorKind::kInputError, "no output directory");
  if (o.worker_exe.empty() || access(o.worker_exe.c_str(), X_OK) != 0)
    throw ReplayError(ErrorKind::kInputError,
                      "worker executable not found: '" + o.worker_exe + "' (build target lockstep-replay-worker)");
  if (!o.preload.empty() && access(o.preload.c_str(), R_OK) != 0)
    throw ReplayError(ErrorKind::kInputError, "recorder library not found: " + o.preload + " (build it, or set LOCKSTEP_PRELOAD)");
  const lockstep::Schedule t = load(o.trace_dir);
  const auto files = rank_files(t);
  const int n = static_cast<int>(files.size());
  if (o.order_from >= n)
    throw ReplayError(ErrorKind::kInputError,
                      "--order-from " + std::to_string(o.order_from) + ": the trace has ranks 0.." + std::to_string(n - 1));
  if (auto why = evidence_lines(analyze(t)); !why.empty()) {
    std::string all;
    for (const auto& w : why) all += "\n  " + w;
    throw ReplayError(ErrorKind::kIncomplete, "the recorded evidence is incomplete; a replay would not be the recorded job:" + all);
  }
  // Every rank's schedule checked here, before any process starts (the worker checks again).
  for (int r = 0; r < n; ++r) {
    const auto problems = schedule_problems(load_rank_schedule(files[r]));
    if (problems.empty()) continue;
    std::string all;
    for (const auto& p : problems) all += "\n  " + p;
    throw ReplayError(ErrorKind::kCannotRun, "rank " + std::to_string(r) + "'s schedule (" + files[r] +
                                                 ") cannot be replayed as recorded:" + all);
  }
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
      lo.env[schema::env::kDir] = tr.trace_dir;
      if (!lo.env.count(schema::env::kHangTimeout)) lo.env[schema::env::kHangTimeout] = "1";
    }
    lo.prefix_output = o.echo_output;
    LaunchResult lr = launch_ranks(lo);
    classify(lr, tr);
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
        << (tr.outcome == Outcome::kCompleted ? "completed"
            : tr.outcome == Outcome::kHangs ? "HANG (no progress for " + seconds(o.timeout_s) + ")"
                                            : "COULD NOT RUN (" + tr.cannot_run_reason + ")")
        << "\n";
    result.trials.push_back(std::move(tr));
  }
  return result;
}

}  // namespace lockstep::replay
