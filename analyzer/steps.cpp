#include "steps.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "op_digest.h"
#include "summary_read.h"

namespace lockstep {

StepPlace locate_in_steps(const Analysis& a) {
  StepPlace out;
  const Divergence* d = a.first;
  if (!d || is_p2p_finding(d->kind) || d->kind == FindingKind::kDigestMismatch || d->gcomm < 0 ||
      d->gcomm_b >= 0 || d->ordinal <= 0)
    return out;
  const Schedule& s = *a.schedule;
  int ref = -1;
  for (const SideGroup& g : d->groups)
    if (g.sig != kNotIssued && !g.procs.empty()) {
      ref = g.procs.front();
      break;
    }
  if (ref < 0) return out;
  const int local = a.index.local_of(d->gcomm, ref);
  if (local < 0) return out;
  const ProcComm& pc = a.index.per_proc[ref][local];
  const int64_t interval = digest::kDefaultInterval;
  // From the interval that holds the divergence (a summary-first read starts at or before it)
  // to two intervals after it.
  const int64_t first = std::max(pc.base + 1, (d->ordinal - 1) / interval * interval + 1);
  const int64_t last = std::min(pc.end(), d->ordinal + 2 * interval);
  if (first > d->ordinal || last < d->ordinal) return out;
  std::vector<uint32_t> sig;
  for (int64_t k = first; k <= last; ++k) sig.push_back(s.procs[ref].ops[pc.colls[pc.at(k)]].sig);
  const size_t n = sig.size();
  for (size_t p = 1; 2 * p <= n; ++p) {
    bool periodic = true;
    for (size_t i = 0; periodic && i + p < n; ++i) periodic = sig[i] == sig[i + p];
    if (!periodic) continue;
    out.found = true;
    out.gcomm = d->gcomm;
    out.ordinal = d->ordinal;
    out.seq = s.procs[ref].ops[pc.colls[pc.at(d->ordinal)]].seq;
    out.period = static_cast<int64_t>(p);
    out.step = (d->ordinal - 1) / out.period + 1;
    out.in_step = (d->ordinal - 1) % out.period + 1;
    out.ref_proc = ref;
    out.window_first = first;
    out.window_last = last;
    break;
  }
  return out;
}

std::string steps_text(const Analysis& a, const StepPlace& p) {
  if (!p.found) return "";
  const GlobalComm& g = a.index.comms[p.gcomm];
  const int rank = display_rank(*a.schedule, p.ref_proc);
  return "where: seq " + std::to_string(p.seq) + " = step " + std::to_string(p.step) + ", collective " +
         std::to_string(p.in_step) + " of " + std::to_string(p.period) + " in the step on " + comm_label(g.hash, g.role) +
         " (collective #" + std::to_string(p.ordinal) + "; the step's period found in rank " + std::to_string(rank) +
         "'s collectives #" + std::to_string(p.window_first) + ".." + std::to_string(p.window_last) +
         ", steps counted from collective #1)";
}

std::string add_steps_json(std::string report_json, const Analysis& a, const StepPlace& p, int indent) {
  using nlohmann::json;
  json st = {{"found", p.found}};
  if (p.found) {
    const GlobalComm& g = a.index.comms[p.gcomm];
    st.update({{"comm", g.hash}, {"role", g.role}, {"ordinal", p.ordinal}, {"seq", p.seq}, {"period", p.period},
               {"step", p.step}, {"in_step", p.in_step}, {"reference_rank", display_rank(*a.schedule, p.ref_proc)},
               {"window_first", p.window_first}, {"window_last", p.window_last}, {"text", steps_text(a, p)}});
  }
  return add_json_member(std::move(report_json), "steps", st.dump(indent, ' ', false, json::error_handler_t::replace), indent);
}

}  // namespace lockstep
