// The model checker: a worklist over per-rank queues (streams, communicators, optionally one
// device queue), not a state-space search. Every transition (an op becomes runnable, a
// collective instance gets its last member, a send meets its receive) stays enabled until it
// fires and disables nothing, so every maximal run reaches the same final state; each unit is
// activated and completed at most once, which makes a check linear in the schedule size.
// docs/replay.md states the semantics and the argument.
#include "model_check.h"

#include "model_engine.h"
#include "text_escape.h"

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::model {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kCanComplete: return "can complete";
    case Verdict::kMayDeadlock: return "may deadlock";
    case Verdict::kDeadlock: return "deadlock";
    case Verdict::kUnknown: return "unknown";
  }
  return "?";
}

namespace {

using detail::build_work_list;
using detail::Engine;
using detail::WorkList;

void step(const Options& options, const char* what) {
  if (options.on_step) options.on_step(what);
}

Result witness(const Engine& stuck, Verdict verdict, const Options& options) {
  Result r = stuck.witness(verdict);
  step(options, "witness");
  return r;
}

Result check_models(const WorkList& schedule, const Options& options) {
  // The serialized model only adds constraints (one more queue per rank), so when it completes
  // the concurrent one does too: a good schedule needs one pass.
  // One engine at a time (each holds some 70 bytes an op): the concurrent one is built in the
  // arrays of a serialized run that got stuck, and the serialized one is built and run again in
  // the concurrent one's (the same run: the engine is deterministic for a seed) only when it
  // gives the witness (may deadlock).
  if (options.check_serialized) {
    Engine serialized(schedule, true);
    serialized.run(options.shuffle_seed);
    step(options, "serialized model");
    if (serialized.all_done()) {
      Result r;
      r.model = "serialized";
      r.ops = r.completed_ops = serialized.op_items();
      return r;
    }
    Engine concurrent(schedule, false, std::move(serialized));
    concurrent.run(options.shuffle_seed);
    step(options, "concurrent model");
    if (!concurrent.all_done()) return witness(concurrent, Verdict::kDeadlock, options);
    Engine again(schedule, true, std::move(concurrent));
    again.run(options.shuffle_seed);
    step(options, "serialized model");
    return witness(again, Verdict::kMayDeadlock, options);
  }
  Engine concurrent(schedule, false);
  concurrent.run(options.shuffle_seed);
  step(options, "concurrent model");
  if (!concurrent.all_done()) return witness(concurrent, Verdict::kDeadlock, options);
  Result r;
  r.model = "concurrent";
  r.ops = r.completed_ops = concurrent.op_items();
  return r;
}

// The checker on its work list (the two models, then what a hole or a stop makes unknown).
Result check_work_list(WorkList model, const Options& options) {
  step(options, "work list");
  for (int32_t p : options.stopped_procs)
    if (p >= 0 && static_cast<size_t>(p) < model.procs.size()) model.procs[p].stopped = true;
  for (int32_t p : options.live_procs)
    if (p >= 0 && static_cast<size_t>(p) < model.procs.size()) model.procs[p].live = true;
  Result r = check_models(model, options);
  r.problems = model.problems;
  for (std::string& p : r.problems) p = printable(p);  // they name files, whose names are any bytes
  // Every op modelled completes, but a rank's schedule stops at a hole in its records: what the
  // job did past it is not modelled, so that the job could complete is not proven either.
  if (r.verdict == Verdict::kCanComplete)
    for (const auto& p : model.procs)
      if (p.hole) {
        r.verdict = Verdict::kUnknown;
        r.summary = "no deadlock proven, and completion not proven: every op modelled completes (" +
                    std::to_string(r.ops) + "), but the schedules stop where a rank's records stop being whole "
                    "(a hole): what the ranks issued past it is unknown";
        break;
      }
  // A stuck state that waits on a rank past the hole in its records is built on records we do
  // not have, and one that waits on a rank the job's end stopped before it issued the op on
  // what that rank had not done yet: unknown, unless a mismatch or a cycle of whole ranks proves it.
  auto hole = [&](int32_t p) { return p >= 0 && model.procs[p].hole; };
  auto live = [&](int32_t p) { return p >= 0 && model.procs[p].live; };
  auto cut = [&](int32_t p) { return p >= 0 && model.procs[p].end_unknown(); };
  // A member with no trace file is unknown the same way: what it issued is not in the evidence.
  if (r.verdict != Verdict::kCanComplete && r.mismatch.empty()) {
    bool on_hole = false, on_live = false, on_cut = false, on_missing = false, whole_cycle = !r.cycle_steps.empty();
    for (const RankWitness& w : r.ranks) {
      on_hole |= hole(w.waits_on) || hole(w.proc);
      on_live |= live(w.waits_on) || live(w.proc);
      on_cut |= cut(w.waits_on) || cut(w.proc);
      on_missing |= w.waits_on_missing;
    }
    for (const WitnessStep& st : r.cycle_steps) whole_cycle &= !cut(st.proc);
    if ((on_cut || on_missing) && !whole_cycle) {
      r.verdict = Verdict::kUnknown;
      r.summary = (on_missing ? "no deadlock proven: a rank waits for a communicator member that has no trace file, so "
                                "what that member issued is unknown; "
                   : on_hole  ? "no deadlock proven: the schedules stop where a rank's records stop being whole (a hole); "
                   : on_live  ? "no deadlock proven: the job is still running, and a rank has not issued yet what its "
                                "peers wait for; "
                              : "no deadlock proven: the job's end stopped a rank in host code before it issued what its "
                                "peers wait for, so its schedule ends there; ") +
                  r.summary;
    }
  }
  return r;
}

}  // namespace

Result check(const Schedule& schedule, const Options& options) {
  return check_work_list(build_work_list(schedule), options);
}

Result check(Schedule&& schedule, const Options& options) {
  WorkList model = build_work_list(schedule);
  { Schedule gone = std::move(schedule); }
  return check_work_list(std::move(model), options);
}

std::string format_text(const Result& r) {
  std::ostringstream o;
  for (const std::string& p : r.problems) o << "warning: " << p << "\n";
  o << "model check: " << verdict_name(r.verdict) << " (" << r.ops << " ops";
  if (r.verdict != Verdict::kCanComplete && !r.ranks.empty())
    o << ", " << r.completed_ops << " complete before the stuck state";
  o << ")\n";
  if (r.verdict == Verdict::kCanComplete) {
    o << "every op completes, whether or not the GPU runs kernels of different streams concurrently\n";
    return o.str();
  }
  if (r.verdict == Verdict::kMayDeadlock)
    o << "latent: completes only if the GPU runs NCCL kernels of different streams concurrently;\n"
         "with one kernel at a time, in issue order, it deadlocks:\n";
  o << "  " << r.summary << "\n";
  if (r.ranks.empty()) return o.str();  // unknown without a stuck state: nothing modelled is stuck
  o << "stuck state (" << r.model << " model):\n";
  for (const RankWitness& w : r.ranks) o << "  " << w.label << ": " << w.blocked_in << ": " << w.waits_for << "\n";
  if (!r.cycle.empty()) {
    o << "cycle:\n";
    for (const std::string& c : r.cycle) o << "  " << c << "\n";
  }
  return o.str();
}

std::string format_json(const Result& r) {
  nlohmann::json j;
  j["verdict"] = verdict_name(r.verdict);
  j["model"] = r.model;
  j["summary"] = r.summary;
  j["ops"] = r.ops;
  j["completed_ops"] = r.completed_ops;
  j["ranks"] = nlohmann::json::array();
  for (const RankWitness& w : r.ranks)
    j["ranks"].push_back({{"rank", w.label}, {"blocked_in", w.blocked_in}, {"waits_for", w.waits_for}});
  j["cycle"] = r.cycle;
  j["problems"] = r.problems;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);  // a last guard: text is escaped
}

}  // namespace lockstep::model
