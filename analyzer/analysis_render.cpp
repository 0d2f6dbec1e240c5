// What every rendering shares: rank ranges, the retired-history note, op states, the
// summary line (text, JSON, JUnit and `check` print it).
#include "analysis_render.h"

#include <algorithm>
#include <sstream>

#include "text_escape.h"

namespace lockstep {
namespace render {

std::string capped_ranges(std::vector<int> r) { return rank_ranges(std::move(r), kMaxRangeSegments); }

std::string window_note(const Analysis& a) {
  size_t bounded = 0, proven = 0;
  int64_t through = 0, exact_from = INT64_MAX;
  for (auto& w : a.checkpoints.comms) {
    if (w.cap_retired_max == 0) continue;  // nothing retired by the size cap, at most not read
    ++bounded;
    if (!w.unverified && w.digest_through >= w.retired_max) ++proven;
    through = std::max(through, w.digest_through);
    exact_from = std::min(exact_from, w.exact_first);
  }
  if (!bounded) return "";
  std::string out = "retired history: " +
                    (bounded == 1 ? std::string("1 communicator holds only its newest collectives")
                                  : std::to_string(bounded) + " communicators hold only their newest collectives") +
                    " (exact from collective #" + std::to_string(exact_from) + " on); ";
  const std::string by_digest = "identical before that by checkpoint digest (known by digest only, up to collective #" +
                                std::to_string(through) + ")";
  if (proven == bounded) return out + (bounded == 1 ? "proven " : "each proven ") + by_digest;
  if (proven == 0) return out + (bounded == 1 ? "not" : "none") + " proven identical before that by checkpoint digest";
  return out + std::to_string(proven) + " of them proven " + by_digest + ", the others not";
}

std::string op_state(const Schedule& s, int proc, const SchedOp& o) {
  return progress_word(vocab::State::Enqueued, o.completed(), s.procs[proc].completion_known);
}

std::vector<int> ranks_of(const Schedule& s, const std::vector<int>& procs) {
  std::vector<int> r;
  for (int p : procs) r.push_back(display_rank(s, p));
  return r;
}

std::vector<int> distinct_ranks_of(const Schedule& s, const std::vector<int>& procs) {
  std::vector<int> r = ranks_of(s, procs);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

std::string unproven_line(const Analysis& a, const Unproven& u) {
  const Schedule& s = *a.schedule;
  const Divergence& d = u.finding;
  std::string what = d.kind == FindingKind::kP2PPairing ? "message #" + std::to_string(d.ordinal)
                                                         : "collective #" + std::to_string(d.ordinal);
  std::string where = what + " on " + comm_label(a.index.comms[d.gcomm].hash, a.index.comms[d.gcomm].role);
  std::string out;
  if (!u.behind.empty()) {
    auto r = ranks_of(s, u.behind);
    out += ranks_phrase(r) + " behind: " + where +
           " not issued yet (still running)";
  }
  if (!u.lost.empty()) {
    auto r = ranks_of(s, u.lost);
    if (!out.empty()) out += "; ";
    out += ranks_phrase(r) + ": " + where +
           (u.peer_completed ? " completed on a peer, so issued here too: history lost after the last flush"
                             : " not in the trace, which ends without an exit record: unknown whether issued");
  }
  if (!u.contested.empty()) {
    auto r = distinct_ranks_of(s, u.contested);
    if (!out.empty()) out += "; ";
    out += ranks_phrase(r) + ": " + where + ": " + d.detail +
           ": not claimed: these files contradict another or themselves (contradictory evidence above), which "
           "record is the rank's history is unknown";
  }
  if (!u.stopped.empty()) {  // the stopped_before_issue evidence's own words
    auto r = ranks_of(s, u.stopped);
    if (!out.empty()) out += "; ";
    out += ranks_phrase(r) + ": " + u.stopped_what;
  }
  return out;
}

}  // namespace render

using namespace render;

std::string render::counts_phrase(const Analysis& a) {
  const Schedule& s = *a.schedule;
  int64_t retired = 0;
  for (auto& p : s.procs)
    if (p.info.retired_ops > 0 && __builtin_add_overflow(retired, p.info.retired_ops, &retired)) retired = INT64_MAX;
  std::string out = plural(s.procs.size(), "process", "processes") + ", " +
                    plural(a.index.comms.size(), "communicator", "communicators") + ", " + plural(a.total_ops, "op", "ops");
  if (retired > 0) out += " retained (" + std::to_string(retired) + " retired by the size cap)";
  int64_t unread = 0;
  for (auto& p : s.procs) unread += p.unread_ops;
  if (unread > 0) out += " (" + std::to_string(unread) + " of them not read: summary first)";
  return out;
}

std::string summary_line(const Analysis& a, bool require_finished) {
  std::ostringstream os;
  const Schedule& s = *a.schedule;
  if (!a.problems()) {
    const std::string counts = counts_phrase(a);
    if (a.incomplete()) {
      size_t contested = 0;
      for (auto& u : a.unproven) contested += !u.contested.empty();
      os << "incomplete evidence: " << counts << "; ";
      if (contested)
        os << plural(contested, "finding", "findings") << " on contradictory files not claimed, "
           << "none on the others";
      else
        os << "no divergence found in what was read";
      os << ", but " << printable(evidence_summary(a.evidence));
      return os.str();
    }
    if (a.behind()) {
      std::vector<int> b;
      for (auto& u : a.unproven) b.insert(b.end(), u.behind.begin(), u.behind.end());
      auto r = ranks_of(s, b);
      os << "behind: " << counts << "; no divergence so far; job still running, " << ranks_phrase(r) << " behind their peers";
      return os.str();
    }
    // Ranks that agree can still be stuck alone (a 1-rank communicator, a GPU that never
    // finished: torch's watchdog dump) or dead of a signal before any disagreement: named here,
    // since "no hang" would read as "nothing wrong".
    std::string stuck;
    for (const RankGroup& g : a.hang.groups) {
      const RankStatus st = a.hang.ranks[g.procs.front()].status;
      if (st != RankStatus::kBlocked && st != RankStatus::kDead) continue;
      if (a.hang.ranks[g.procs.front()].live) continue;  // in flight in a running job: normal
      auto r = ranks_of(s, g.procs);
      stuck += std::string(stuck.empty() ? "" : "; ") + ranks_phrase(r) + ": " + g.summary;
    }
    if (require_finished && !a.live.empty())
      os << "incomplete: the job is still running (" << plural(a.live.size(), "process", "processes")
         << "); so far: " << counts << "; ranks agree, no order inversion, ";
    else
      os << "clean: " << counts << "; ranks agree, no order inversion, ";
    os << (stuck.empty() ? "no hang" : "no rank waits for another, but " + printable(stuck));
    if (!a.live.empty() && !require_finished) os << " (so far: " << plural(a.live.size(), "process", "processes") << " still running)";
    std::string note = window_note(a);
    if (!note.empty()) os << "; " << note;
    return os.str();
  }
  std::vector<std::string> parts;
  if (a.first) {
    const Divergence& d = *a.first;
    std::string seq;
    for (auto& sd : d.sides)
      if (sd.op >= 0) {
        seq = " seq " + std::to_string(s.procs[sd.proc].ops[sd.op].seq);
        break;
      }
    std::string kind = kind_name(d.kind);  // the JSON's name; for people, words
    std::replace(kind.begin(), kind.end(), '_', ' ');
    parts.push_back(std::string("first divergence: ") + kind + " on " +
                    comm_label(a.index.comms[d.gcomm].hash, a.index.comms[d.gcomm].role) +
                    (d.kind == FindingKind::kOrderInversion ? "" : seq) + ": " + d.detail);
  }
  size_t n = a.divergences.size() + a.inversions.size();
  if (n > 1) parts.push_back(std::to_string(n) + " findings in all");
  if (a.hang.hung)
    parts.push_back(a.hang.cycles.empty() ? "hang" : "hang (" + plural(a.hang.cycles.size(), "wait-for cycle", "wait-for cycles") + ")");
  if (a.incomplete()) parts.push_back("incomplete evidence: " + printable(evidence_summary(a.evidence, 2)));
  for (size_t i = 0; i < parts.size(); ++i) os << (i ? "; " : "") << parts[i];
  return os.str();
}

}  // namespace lockstep
