// The human report of an Analysis (`lockstep analyze`): findings with their sides, stacks and
// the ops just before, the hang, the verdict line.
#include <map>
#include <set>
#include <sstream>

#include "analysis_render.h"
#include "text_escape.h"

namespace lockstep {

using namespace render;

namespace {

std::string bold(const Ctx& c, const std::string& s) { return c.opt.color ? "\033[1m" + s + "\033[0m" : s; }

// "rank 0: reduce_scatter float32 count=4096 sum  seq 3750, in flight, from f (x.cpp:12)"
void text_side(std::ostream& os, const Ctx& c, const Side& sd, int g, const std::string& indent) {
  os << indent << "rank " << c.rank(sd.proc);
  if (sd.comm_rank != c.rank(sd.proc)) os << " (comm rank " << sd.comm_rank << ")";
  os << ": ";
  if (sd.op < 0) {
    History h = c.a.history.empty() ? History::kComplete : c.a.history[sd.proc];
    if (h == History::kLost)
      os << "not in its trace; its history after its last flush is lost (" << c.last_on(sd.proc, g) << ")\n";
    else if (h == History::kBehind && !c.a.hang.any_marker)
      os << "not issued yet: still running (" << c.last_on(sd.proc, g) << ")\n";
    else
      os << "never issued it (" << c.last_on(sd.proc, g) << ")\n";
    return;
  }
  const SchedOp& o = c.sop(sd);
  os << describe_signature(c.s.sigs[o.sig]) << "  seq " << o.seq << ", " << op_state(c.s, sd.proc, o);
  auto frames = c.stack_of(sd);
  if (!frames.empty()) os << ", from " << frame_origin(frames);
  os << "\n";
}

void text_stack_and_context(std::ostream& os, const Ctx& c, const Side& sd) {
  if (sd.op < 0) return;
  const SchedOp& o = c.sop(sd);
  auto frames = c.stack_of(sd);
  os << "  stack of rank " << c.rank(sd.proc) << " (" << vocab::name(c.s.sigs[o.sig].op) << " seq " << o.seq << "):\n";
  for (auto& f : frames) os << "    " << (f.kind == vocab::FrameKind::Python ? "py " : "   ") << format_frame(f) << "\n";
  if (const std::string note = c.stack_note(sd, frames); !note.empty()) os << "    " << note << "\n";
  auto before = c.details.ops_between(sd.proc, 0, o.call_index - 1, c.opt.ops_before, true);
  if (!before.empty()) {
    os << "  ops just before on rank " << c.rank(sd.proc) << ":\n";
    for (auto& b : before) {
      os << "    seq " << b.seq << "  " << vocab::name(b.op) << " " << vocab::stored_name(b.dtype) << " count=" << b.count << "  "
         << c.local_comm_label(sd.proc, b.comm) << "  "
         << progress_word(b.state, b.completed, c.s.procs[sd.proc].completion_known) << "\n";
    }
  }
}

// Members that agreed before the divergence: "all 2 members agree on collectives #1..3749".
std::string agreed_before(const Ctx& c, const Divergence& d) {
  if (d.kind == FindingKind::kOrderInversion || d.kind == FindingKind::kDigestMismatch || d.ordinal <= 1) return "";
  if (is_p2p_finding(d.kind)) return "messages #1.." + std::to_string(d.ordinal - 1) + " between them matched";
  const GlobalComm& g = c.comm(d.gcomm);
  // Ordinals before the finding that some member retired are known by digest only.
  int64_t retired = 0;
  for (auto& m : g.members) retired = std::max(retired, c.a.index.of(m).base);
  retired = std::min(retired, d.ordinal - 1);
  // Show it in seq numbers of the lowest member when they are plain.
  const ProcComm& first = c.a.index.of(g.members[0]);
  std::string range = "collectives #" + std::to_string(retired + 1) + ".." + std::to_string(d.ordinal - 1);
  int64_t at = first.at(d.ordinal - 1);
  if (retired == 0 && at >= 0) {
    const SchedOp& prev = c.s.procs[g.members[0].proc].ops[first.colls[at]];
    if (prev.seq == d.ordinal - 1) range = "seq 1.." + std::to_string(prev.seq);
  }
  // "completed" only when every member recorded the completion of the op before.
  bool completed = true;
  for (auto& m : g.members) {
    const ProcComm& pc = c.a.index.of(m);
    int64_t i = pc.at(d.ordinal - 1);
    completed &= i >= 0 && c.s.procs[m.proc].ops[pc.colls[i]].completed();
  }
  std::string who = g.members.size() == 2 ? "both members" : "all " + std::to_string(g.members.size()) + " members";
  const auto& windows = c.a.checkpoints.comms;
  int64_t proven = static_cast<size_t>(d.gcomm) < windows.size() ? windows[d.gcomm].digest_through : 0;
  // Before the finding: retired by the size cap, or held by the files but not read (summary first).
  const int64_t cap = static_cast<size_t>(d.gcomm) < windows.size() ? windows[d.gcomm].cap_retired_max : 0;
  const char* how = cap >= retired ? "retired history" : cap == 0 ? "not read: summary first" : "retired or not read";
  std::string retired_note = proven >= retired ? std::string(" (") + how + ", known by digest only)"
                                               : std::string(" ") + (cap == 0 ? "not read" : "retired") +
                                                     " and not verified by digest (see incomplete)";
  if (retired >= d.ordinal - 1) return who + ": collectives #1.." + std::to_string(retired) + retired_note;
  std::string out = who + (completed ? " completed " : " issued the same ") + range;
  if (retired > 0) out += "; #1.." + std::to_string(retired) + retired_note;
  return out;
}

void text_finding(std::ostream& os, const Ctx& c, const Divergence& d, bool full) {
  std::set<uint32_t> seqs;
  for (auto& sd : d.sides)
    if (sd.op >= 0) seqs.insert(c.sop(sd).seq);
  if (d.kind == FindingKind::kOrderInversion) {
    os << "order inversion between " << c.comm_label(d.gcomm) << " and " << c.comm_label(d.gcomm_b) << ": " << d.detail
       << "\n";
    for (size_t i = 0; i < d.sides.size(); ++i) {
      const Side& a = d.sides[i];
      const Side& b = d.sides_b[i];
      bool a_first = c.sop(a).call_index < c.sop(b).call_index;
      const Side& x = a_first ? a : b;
      const Side& y = a_first ? b : a;
      os << "  rank " << c.rank(a.proc) << ": first ";
      auto one = [&](const Side& sd) {
        const SchedOp& o = c.sop(sd);
        auto frames = c.stack_of(sd);
        os << describe_signature(c.s.sigs[o.sig]) << " on " << c.local_comm_label(sd.proc, o.comm) << " seq " << o.seq;
        if (!frames.empty()) os << " from " << frame_origin(frames);
      };
      one(x);
      os << "\n          then ";
      one(y);
      os << "\n";
    }
    os << "  a latent deadlock: NCCL needs every rank to submit operations on different communicators in the same order\n";
    if (full)
      for (size_t i = 0; i < d.sides.size(); ++i) {
        text_stack_and_context(os, c, d.sides[i]);
      }
    return;
  }
  os << c.comm_label(d.gcomm);
  if (seqs.size() == 1) os << " seq " << *seqs.begin();
  os << ": " << d.detail << "\n";
  if (d.kind == FindingKind::kDigestMismatch) {
    for (size_t i = 0; i < d.groups.size() && i < kMaxListedGroups; ++i)
      os << "  side " << i + 1 << ": " << plural(d.groups[i].procs.size(), "rank", "ranks") << " "
         << c.ranges(d.groups[i].procs) << ", digest " << Ctx::hex(d.groups[i].digest) << " after collective #"
         << d.ordinal << (d.groups[i].odd ? " (odd)" : "") << "\n";
    if (d.groups.size() > kMaxListedGroups) os << "  ... " << d.groups.size() - kMaxListedGroups << " more sides\n";
    os << "  known by digest only: collectives #" << d.ordinal_first << ".." << d.ordinal
       << " were retired by the size cap; the ops themselves are gone, their checkpoints disagree\n";
    if (d.ordinal_first > 1) os << "  all members' digests agree through collective #" << d.ordinal_first - 1 << "\n";
    return;
  }
  // With many members, list the odd ones and one of the majority.
  std::vector<Side> shown;
  if (!d.odd.empty()) {
    std::set<int> odd(d.odd.begin(), d.odd.end());
    std::vector<int> major;
    for (auto& g : d.groups)
      if (!g.odd) major.insert(major.end(), g.procs.begin(), g.procs.end());
    for (auto& sd : d.sides)
      if (!odd.count(sd.proc)) {
        shown.push_back(sd);
        break;
      }
    for (auto& sd : d.sides)
      if (odd.count(sd.proc) && shown.size() < 1 + c.opt.max_findings) shown.push_back(sd);
    os << "  odd one" << (d.odd.size() > 1 ? "s" : "") << " out: rank" << (d.odd.size() > 1 ? "s " : " ")
       << c.ranges(d.odd) << "; majority: ranks " << c.ranges(major) << "\n";
  } else {
    for (auto& sd : d.sides)
      if (shown.size() < 2 + c.opt.max_findings) shown.push_back(sd);
  }
  if (d.members > shown.size() && d.groups.size() > 1) {
    os << "  " << d.members << " members in " << plural(d.groups.size(), "group", "groups") << ":";
    for (size_t i = 0; i < d.groups.size() && i < kMaxListedGroups; ++i) {
      const SideGroup& g = d.groups[i];
      os << (i ? ";" : "") << " " << g.procs.size() << " "
         << (g.sig == kNotIssued ? std::string("never issued it") : "issued " + std::string(vocab::name(c.s.sigs[g.sig].op)));
    }
    if (d.groups.size() > kMaxListedGroups) os << "; ...";
    os << "\n";
  }
  for (auto& sd : shown) text_side(os, c, sd, d.gcomm, "  ");
  std::string agreed = agreed_before(c, d);
  if (!agreed.empty()) os << "  " << agreed << "\n";
  if (full) {
    size_t stacks = 0;
    for (auto& sd : shown)
      if (sd.op >= 0 && stacks++ < 4) text_stack_and_context(os, c, sd);
  }
}

void text_hang(std::ostream& os, const Ctx& c) {
  const HangReport& h = c.a.hang;
  std::map<RankStatus, int> counts;
  for (auto& r : h.ranks) ++counts[r.status];
  os << bold(c, "HANG") << ": ";
  bool first = true;
  for (auto& [st, n] : counts) {
    os << (first ? "" : ", ") << n << " " << status_name(st);
    first = false;
  }
  if (h.any_marker) os << " (a recorder's hang timeout fired)";
  os << "\n";
  // Two files claiming one rank (two jobs in one directory, a copied file): rank numbers do not
  // tell the processes apart, so each is named by its file's process (identity.h rank_label).
  std::set<int> seen_ranks;
  bool ranks_unique = true;
  for (size_t p = 0; p < c.s.procs.size(); ++p) ranks_unique &= seen_ranks.insert(c.rank(static_cast<int>(p))).second;
  size_t shown = 0;
  for (auto& g : h.groups) {
    if (shown++ == 2 * c.opt.max_findings) {
      os << "  ... " << h.groups.size() - shown + 1 << " more groups (see --json)\n";
      break;
    }
    std::vector<int> ranks;
    for (int p : g.procs) ranks.push_back(c.rank(p));
    if (ranks_unique) {
      os << "  " << ranks_phrase(ranks) << ": " << g.summary << "\n";
      continue;
    }
    os << "  ";
    for (size_t k = 0; k < g.procs.size() && k < 8; ++k)
      os << (k ? ", " : "") << printable(rank_label(c.s.procs[g.procs[k]].info, g.procs[k], false));
    os << (g.procs.size() > 8 ? ", ..." : "") << ": " << g.summary << "\n";
  }
  for (auto& cyc : h.cycles) {
    os << "  wait-for cycle across " << cyc.comms << " communicator" << (cyc.comms > 1 ? "s" : "") << ": ";
    for (auto& hop : cyc.hops) {
      const SchedOp& o = c.s.procs[hop.proc].ops[hop.op];
      os << "rank " << c.rank(hop.proc) << " (" << vocab::name(c.s.sigs[o.sig].op) << " on "
         << c.local_comm_label(hop.proc, o.comm) << " seq " << o.seq << ") -> ";
    }
    os << "rank " << c.rank(cyc.hops.front().proc) << "\n";
  }
}

std::string findings_text(const Analysis& a, TraceDetails& details, const ReportOptions& opt) {
  const Schedule& s = *a.schedule;
  Ctx c{a, s, details, opt};
  std::ostringstream os;
  for (auto& g : group_evidence(a.evidence)) os << "incomplete: " << printable(g.detail) << "\n";
  for (auto& w : a.index.warnings) os << "warning: " << printable(w) << "\n";
  os << identity_warnings_text(s);
  for (auto& u : a.unproven)  // stopped members: in the evidence above
    if (u.noted()) os << "note: " << unproven_line(a, u) << "\n";
  size_t windows = 0;
  for (auto& w : a.checkpoints.comms) {
    if (w.cap_retired_max == 0) continue;  // not read (summary first): the evidence and read lines say so
    if (windows++ == opt.max_findings) {
      os << "window: ... more communicators with retired history (see --json)\n";
      break;
    }
    os << window_line(w, c.comm_label(w.gcomm)) << "\n";
  }
  os << job_header_text(s, a.hosts);
  if (!a.problems()) {
    os << "lockstep: " << summary_line(a, opt.require_finished) << "\n";
    return os.str();
  }
  os << "lockstep: " << counts_phrase(a) << "\n";
  if (a.first) {
    os << "\n" << bold(c, "FIRST DIVERGENCE") << ": ";
    text_finding(os, c, *a.first, true);
  }
  std::vector<const Divergence*> rest;
  for (auto& d : a.divergences)
    if (&d != a.first) rest.push_back(&d);
  for (auto& d : a.inversions)
    if (&d != a.first) rest.push_back(&d);
  if (!rest.empty()) {
    os << "\n" << bold(c, "OTHER FINDINGS") << " (" << rest.size() << "):\n";
    for (size_t i = 0; i < rest.size() && i < opt.max_findings; ++i) {
      os << "- ";
      text_finding(os, c, *rest[i], false);
    }
    if (rest.size() > opt.max_findings) os << "  ... " << rest.size() - opt.max_findings << " more (see --json)\n";
  }
  if (a.hang.hung) {
    os << "\n";
    text_hang(os, c);
  }
  os << "\nverdict: " << summary_line(a, opt.require_finished) << "\n";
  return os.str();
}

}  // namespace

std::string render_text(const Analysis& a, TraceDetails& details, const ReportOptions& opt) {
  return findings_text(a, details, opt) + coverage_text(*a.schedule, a.coverage);
}

}  // namespace lockstep
