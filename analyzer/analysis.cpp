#include "analysis.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "text_escape.h"

namespace lockstep {

const char* history_name(History h) {
  switch (h) {
    case History::kComplete: return "complete";
    case History::kBehind: return "behind";
    case History::kLost: return "lost";
  }
  return "unknown";
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kClean: return "clean";
    case Verdict::kDivergent: return "divergent";
    case Verdict::kHang: return "hang";
    case Verdict::kIncomplete: return "incomplete";
    case Verdict::kBehind: return "behind";
  }
  return "unknown";
}

bool Analysis::behind() const {
  for (auto& u : unproven)
    if (!u.behind.empty()) return true;
  return false;
}

Verdict Analysis::verdict() const {
  if (!divergences.empty() || !inversions.empty()) return Verdict::kDivergent;
  if (hang.hung) return Verdict::kHang;
  if (incomplete()) return Verdict::kIncomplete;
  if (behind()) return Verdict::kBehind;
  return Verdict::kClean;
}

namespace {

inline constexpr size_t kMaxListedOdd = 64;      // odd ranks listed by number in JSON
inline constexpr size_t kMaxListedGroups = 8;    // groups of a finding listed
inline constexpr size_t kMaxRangeSegments = 16;  // segments of a rank-range string

std::string capped_ranges(std::vector<int> r) {
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  std::string out;
  size_t segments = 0, i = 0;
  for (; i < r.size() && segments < kMaxRangeSegments; ++segments) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(r[i]) + (j > i ? "-" + std::to_string(r[j]) : "");
    i = j + 1;
  }
  if (i < r.size()) out += ",... (+" + std::to_string(r.size() - i) + " more)";
  return out;
}

// What the verdict rests on when the size cap retired history: "" when nothing was retired.
std::string window_note(const Analysis& a) {
  size_t bounded = 0, proven = 0;
  int64_t through = 0, exact_from = INT64_MAX;
  for (auto& w : a.checkpoints.comms) {
    if (w.retired_max == 0) continue;
    ++bounded;
    if (!w.unverified && w.digest_through >= w.retired_max) ++proven;
    through = std::max(through, w.digest_through);
    exact_from = std::min(exact_from, w.exact_first);
  }
  if (!bounded) return "";
  return "retired history: " + std::to_string(bounded) + " communicator(s) hold only their newest collectives (exact " +
         "from collective #" + std::to_string(exact_from) + " on); " + std::to_string(proven) + " of them proven " +
         "identical before that by checkpoint digest (known by digest only, up to collective #" +
         std::to_string(through) + ")";
}

// A digest disagreement is the first divergence of its communicator unless an exact finding
// lies at or before the end of its interval (then the exact one is the finer report).
void merge_digest_divergences(const Schedule& s, const CheckpointReport& cr, std::vector<Divergence>& divs) {
  for (auto& dd : cr.divergences) {
    auto exact = std::find_if(divs.begin(), divs.end(), [&](const Divergence& d) {
      return d.gcomm == dd.gcomm && !is_p2p_finding(d.kind);
    });
    if (exact != divs.end() && exact->ordinal <= dd.last) continue;
    Divergence d;
    d.kind = FindingKind::kDigestMismatch;
    d.gcomm = dd.gcomm;
    d.ordinal = dd.last;
    d.ordinal_first = dd.first;
    size_t members = 0;
    for (auto& side : dd.sides) members += side.procs.size();
    d.members = members;
    for (size_t i = 0; i < dd.sides.size(); ++i) {
      SideGroup g;
      g.digest = dd.sides[i].digest;
      g.procs = dd.sides[i].procs;
      g.odd = members >= 3 && dd.sides.size() >= 2 && dd.sides[0].procs.size() > dd.sides[1].procs.size() && i > 0;
      if (g.odd) d.odd.insert(d.odd.end(), g.procs.begin(), g.procs.end());
      d.groups.push_back(std::move(g));
    }
    std::sort(d.odd.begin(), d.odd.end());
    std::string sides;
    for (size_t i = 0; i < d.groups.size() && i < 4; ++i) {
      std::vector<int> ranks;
      for (int p : d.groups[i].procs) ranks.push_back(display_rank(s, p));
      sides += (i ? " | " : "") + std::string(ranks.size() > 1 ? "ranks " : "rank ") + capped_ranges(ranks);
    }
    if (d.groups.size() > 4) sides += " | " + std::to_string(d.groups.size() - 4) + " more sides";
    d.detail = "members diverge between collective ordinals " + std::to_string(dd.first) + " and " +
               std::to_string(dd.last) + "; known by digest only (retired history); sides: " + sides;
    if (exact != divs.end()) *exact = std::move(d);
    else divs.push_back(std::move(d));
  }
}

}  // namespace

Analysis analyze(const Schedule& s, const AnalyzeOptions& options) {
  Analysis a;
  a.schedule = &s;
  a.index = build_comm_index(s);
  a.divergences = find_divergences(s, a.index);
  a.checkpoints = compare_checkpoints(s, a.index);
  merge_digest_divergences(s, a.checkpoints, a.divergences);
  a.inversions = find_order_inversions(s, a.index);
  a.hang = explain_hang(s, a.index, options.hang);
  a.hosts = group_by_host(s, options.hang.stale_ns);
  for (auto& p : s.procs) a.total_ops += static_cast<int64_t>(p.ops.size());

  // What each process's trace can prove about the ops it does not show.
  a.history.assign(s.procs.size(), History::kComplete);
  for (size_t p = 0; p < s.procs.size(); ++p) {
    const RankHang& rh = a.hang.ranks[p];
    if (rh.history_lost) a.history[p] = History::kLost;
    else if (rh.live) a.history[p] = History::kBehind;
    if (rh.live) a.live.push_back(static_cast<int>(p));
  }
  // "Never issued" needs a member whose history is complete (or a recorder's hang timeout that
  // fired while it was live). Otherwise the member is behind, or its history was lost.
  std::vector<Divergence> kept;
  for (auto& d : a.divergences) {
    if (d.kind != FindingKind::kNeverIssued && d.kind != FindingKind::kP2PPairing) {
      kept.push_back(std::move(d));
      continue;
    }
    Unproven u;
    bool proven = false;
    for (auto& sd : d.sides)
      if (sd.op >= 0) u.peer_completed |= s.procs[sd.proc].ops[sd.op].completed();
    // Collectives list only some sides: every member that never issued it is in not_issued.
    std::vector<int> absent = d.not_issued;
    if (d.kind == FindingKind::kP2PPairing)
      for (auto& sd : d.sides)
        if (sd.op < 0) absent.push_back(sd.proc);
    for (int proc : absent) {
      History h = a.history[proc];
      if (h == History::kComplete || (h == History::kBehind && a.hang.any_marker)) proven = true;
      else if (h == History::kBehind) u.behind.push_back(proc);
      else u.lost.push_back(proc);
    }
    if (proven) {
      kept.push_back(std::move(d));
      continue;
    }
    u.finding = std::move(d);
    a.unproven.push_back(std::move(u));
  }
  a.divergences = std::move(kept);

  std::vector<const Process*> infos;
  for (auto& p : s.procs) infos.push_back(&p.info);
  a.evidence = validate_evidence(infos, s.skipped);
  a.evidence.insert(a.evidence.end(), a.checkpoints.evidence.begin(), a.checkpoints.evidence.end());
  // Per process: the first unproven finding a peer completed while its record was lost.
  std::vector<const Unproven*> issued_by_peer(s.procs.size(), nullptr);
  for (auto& u : a.unproven)
    if (u.peer_completed)
      for (int p : u.lost)
        if (!issued_by_peer[p]) issued_by_peer[p] = &u;
  for (size_t p = 0; p < s.procs.size(); ++p) {
    const Process& info = s.procs[p].info;
    bool stopped = info.meta.count("recorder_stopped") && !info.meta.at("recorder_stopped").empty();
    if (a.history[p] != History::kLost || stopped) continue;  // recorder_stopped: its own issue
    EvidenceIssue e;
    e.kind = EvidenceKind::kHistoryLost;
    e.procs = {static_cast<int>(p)};
    if (info.global_rank >= 0) e.ranks = {info.global_rank};
    e.detail = "rank " + std::to_string(display_rank(s, static_cast<int>(p))) +
               ": trace ends without an exit record (not finished, not seen running): what it did after its last "
               "flush is unknown";
    if (const Unproven* u = issued_by_peer[p])
      e.detail += "; a peer completed collective #" + std::to_string(u->finding.ordinal) + " on comm " +
                  short_hash(a.index.comms[u->finding.gcomm].hash) + ", so it issued it (its record was lost)";
    a.evidence.push_back(std::move(e));
  }
  std::vector<const Divergence*> all;
  for (auto& d : a.divergences) all.push_back(&d);
  for (auto& d : a.inversions) all.push_back(&d);
  int first = first_in_causal_order(s, all);
  if (first >= 0) a.first = all[first];
  return a;
}

namespace {

using nlohmann::json;

template <class N>
std::string plural(N n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

struct Ctx {
  const Analysis& a;
  const Schedule& s;
  TraceDetails& details;
  const ReportOptions& opt;

  int rank(int proc) const { return display_rank(s, proc); }
  const GlobalComm& comm(int g) const { return a.index.comms[g]; }
  std::string comm_label(int g) const {
    const GlobalComm& c = comm(g);
    std::string l = "comm " + short_hash(c.hash) + " (" + std::to_string(c.nranks) + " ranks, role " + c.role;
    if (c.members.size() < static_cast<size_t>(c.nranks))
      l += ", " + std::to_string(c.members.size()) + " traced";
    return l + ")";
  }
  const SchedOp& sop(const Side& sd) const { return s.procs[sd.proc].ops[sd.op]; }
  // Rank ranges of many processes, at most kMaxRangeSegments segments ("0-3,7, ... (+N more)").
  std::string ranges(const std::vector<int>& procs) const {
    std::vector<int> r;
    r.reserve(procs.size());
    for (int p : procs) r.push_back(rank(p));
    return capped_ranges(r);
  }
  static std::string hex(uint64_t v) {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
    return b;
  }
  std::optional<Op> full(const Side& sd) const {
    if (sd.op < 0) return std::nullopt;
    return details.op(sd.proc, sop(sd).call_index);
  }
  std::vector<Frame> stack_of(const Side& sd) const {
    auto o = full(sd);
    if (!o) return {};
    return trim_stack(details.stack(sd.proc, o->stack_id), opt.max_frames);
  }
  // The newest op of a process on a comm, for members that never issued the op in question.
  std::string last_on(int proc, int g) const {
    int l = a.index.local_of(g, proc);
    if (l < 0) return "not a member";
    const ProcComm& pc = a.index.per_proc[proc][l];
    const int64_t last = last_op_on_comm(pc.colls, pc.p2p);
    if (last < 0) return "issued nothing on this comm";
    const SchedOp& o = s.procs[proc].ops[last];
    return "last issued " + std::string(vocab::name(s.sigs[o.sig].op)) + " seq " + std::to_string(o.seq) + (o.completed() ? " (completed)" : "");
  }
};

std::string op_state(const Schedule& s, int proc, const SchedOp& o) {
  if (o.completed()) return "completed";
  if (!s.procs[proc].completion_known) return "issued";
  return "in flight";
}

json frame_json(const Frame& f) {
  json j = {{"kind", f.kind}, {"function", f.function}};
  if (!f.file.empty()) j["file"] = f.file, j["line"] = f.line;
  if (!f.module.empty()) j["module"] = f.module, j["offset"] = f.offset;
  return j;
}

json side_json(const Ctx& c, const Side& sd, int g) {
  json j = {{"rank", c.rank(sd.proc)}, {"comm_rank", sd.comm_rank}, {"host", c.s.procs[sd.proc].info.host},
            {"pid", c.s.procs[sd.proc].info.pid}, {"issued", sd.op >= 0}};
  if (sd.op < 0) {
    j["last_on_comm"] = c.last_on(sd.proc, g);
    if (!c.a.history.empty()) j["history"] = history_name(c.a.history[sd.proc]);
    return j;
  }
  const SchedOp& o = c.sop(sd);
  const Signature& sig = c.s.sigs[o.sig];
  j["op"] = vocab::name(sig.op);
  j["dtype"] = vocab::stored_name(sig.dtype);
  j["count"] = sig.count;
  j["root"] = sig.root >= 0 ? json(sig.root) : json(nullptr);
  j["peer"] = sig.peer >= 0 ? json(sig.peer) : json(nullptr);
  j["redop"] = sig.redop == vocab::RedOp::None ? json(nullptr) : json(vocab::name(sig.redop));
  j["seq"] = o.seq;
  j["call_index"] = o.call_index;
  j["state"] = op_state(c.s, sd.proc, o);
  j["describe"] = describe_signature(sig);
  json parts = json::array();
  for (auto& p : sig.parts)
    parts.push_back({{"op", p.op}, {"dtype", p.dtype}, {"count", p.count}, {"peer", p.peer >= 0 ? json(p.peer) : json(nullptr)}});
  j["parts"] = parts;
  auto frames = c.stack_of(sd);
  json st = json::array();
  for (auto& f : frames) st.push_back(frame_json(f));
  j["stack"] = st;
  j["from"] = frame_origin(frames);
  return j;
}

json finding_json(const Ctx& c, const Divergence& d) {
  json j = {{"kind", kind_name(d.kind)},
            {"comm", c.comm(d.gcomm).hash},
            {"role", c.comm(d.gcomm).role},
            {"nranks", c.comm(d.gcomm).nranks},
            {"ordinal", d.ordinal},
            {"detail", d.detail}};
  // seq as the members see it: equal unless point-to-point traffic shifted some members'.
  std::set<uint32_t> seqs;
  for (auto& sd : d.sides)
    if (sd.op >= 0) seqs.insert(c.sop(sd).seq);
  j["seq"] = seqs.size() == 1 ? json(*seqs.begin()) : json(nullptr);
  json sides = json::array();
  for (auto& sd : d.sides) sides.push_back(side_json(c, sd, d.gcomm));
  j["sides"] = sides;
  json odd = json::array();
  for (size_t i = 0; i < d.odd.size() && i < kMaxListedOdd; ++i) odd.push_back(c.rank(d.odd[i]));
  j["odd_ranks"] = odd;
  j["odd_count"] = d.odd.size();
  if (!d.groups.empty()) {
    // Every member is in one group; sides list only some of them (kMaxListedSides).
    json groups = json::array();
    for (size_t i = 0; i < d.groups.size() && i < kMaxListedGroups; ++i) {
      const SideGroup& g = d.groups[i];
      json gj = {{"count", g.procs.size()}, {"ranks", c.ranges(g.procs)}, {"odd", g.odd}};
      if (d.kind == FindingKind::kDigestMismatch) gj["digest"] = c.hex(g.digest);
      else gj["issued"] = g.sig == kNotIssued ? json(nullptr) : json(describe_signature(c.s.sigs[g.sig]));
      groups.push_back(gj);
    }
    j["groups"] = groups;
    j["groups_omitted"] = d.groups.size() > kMaxListedGroups ? d.groups.size() - kMaxListedGroups : 0;
    j["members"] = d.members;
    j["sides_omitted"] = d.members > d.sides.size() ? d.members - d.sides.size() : 0;
  }
  // What the finding rests on: ops compared one by one (exact) or retired history compared by
  // checkpoint digest (digest).
  j["evidence"] = d.kind == FindingKind::kDigestMismatch ? "digest" : "exact";
  if (d.kind == FindingKind::kDigestMismatch) {
    j["ordinal_first"] = d.ordinal_first;
    j["ordinal_last"] = d.ordinal;
  }
  if (d.kind == FindingKind::kOrderInversion) {
    j["comm_b"] = c.comm(d.gcomm_b).hash;
    j["role_b"] = c.comm(d.gcomm_b).role;
    j["ordinal_b"] = d.ordinal_b;
    json sb = json::array();
    for (auto& sd : d.sides_b) sb.push_back(side_json(c, sd, d.gcomm_b));
    j["sides_b"] = sb;
  }
  return j;
}

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
  if (frames.empty()) os << "    (no stack recorded: run with --stacks native or python)\n";
  for (auto& f : frames) os << "    " << (f.kind == vocab::FrameKind::Python ? "py " : "   ") << format_frame(f) << "\n";
  auto before = c.details.ops_between(sd.proc, 0, o.call_index - 1, c.opt.ops_before, true);
  if (!before.empty()) {
    os << "  ops just before on rank " << c.rank(sd.proc) << ":\n";
    for (auto& b : before) {
      const Comm& cm = c.s.procs[sd.proc].info.comms[b.comm];
      os << "    seq " << b.seq << "  " << vocab::name(b.op) << " " << vocab::stored_name(b.dtype) << " count=" << b.count << "  comm "
         << short_hash(cm.hash) << (b.completed ? "  completed" : "") << "\n";
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
  std::string retired_note = proven >= retired ? " (retired history, known by digest only)"
                                               : " retired and not verified by digest (see incomplete)";
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
        os << describe_signature(c.s.sigs[o.sig]) << " on comm " << short_hash(c.s.procs[sd.proc].info.comms[o.comm].hash)
           << " seq " << o.seq;
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
  size_t shown = 0;
  for (auto& g : h.groups) {
    if (shown++ == 2 * c.opt.max_findings) {
      os << "  ... " << h.groups.size() - shown + 1 << " more groups (see --json)\n";
      break;
    }
    std::vector<int> ranks;
    for (int p : g.procs) ranks.push_back(c.rank(p));
    os << "  rank" << (ranks.size() > 1 ? "s " : " ") << rank_ranges(ranks) << ": " << g.summary << "\n";
  }
  for (auto& cyc : h.cycles) {
    os << "  wait-for cycle across " << cyc.comms << " communicator" << (cyc.comms > 1 ? "s" : "") << ": ";
    for (auto& hop : cyc.hops) {
      const SchedOp& o = c.s.procs[hop.proc].ops[hop.op];
      os << "rank " << c.rank(hop.proc) << " (" << vocab::name(c.s.sigs[o.sig].op) << " on comm "
         << short_hash(c.s.procs[hop.proc].info.comms[o.comm].hash) << " seq " << o.seq << ") -> ";
    }
    os << "rank " << c.rank(cyc.hops.front().proc) << "\n";
  }
}

}  // namespace

namespace {

std::vector<int> ranks_of(const Schedule& s, const std::vector<int>& procs) {
  std::vector<int> r;
  for (int p : procs) r.push_back(display_rank(s, p));
  return r;
}

// "rank 1 is behind: has not issued collective #7 on comm 3f2a9c01 yet (still running)"
std::string unproven_line(const Analysis& a, const Unproven& u) {
  const Schedule& s = *a.schedule;
  const Divergence& d = u.finding;
  std::string what = d.kind == FindingKind::kP2PPairing ? "message #" + std::to_string(d.ordinal)
                                                         : "collective #" + std::to_string(d.ordinal);
  std::string where = what + " on comm " + short_hash(a.index.comms[d.gcomm].hash);
  std::string out;
  if (!u.behind.empty()) {
    auto r = ranks_of(s, u.behind);
    out += std::string("rank") + (r.size() > 1 ? "s " : " ") + rank_ranges(r) + " behind: " + where +
           " not issued yet (still running)";
  }
  if (!u.lost.empty()) {
    auto r = ranks_of(s, u.lost);
    if (!out.empty()) out += "; ";
    out += std::string("rank") + (r.size() > 1 ? "s " : " ") + rank_ranges(r) + ": " + where +
           (u.peer_completed ? " completed on a peer, so issued here too: history lost after the last flush"
                             : " not in the trace, which ends without an exit record: unknown whether issued");
  }
  return out;
}

}  // namespace

std::string summary_line(const Analysis& a) {
  std::ostringstream os;
  const Schedule& s = *a.schedule;
  if (!a.problems()) {
    std::string counts = plural(s.procs.size(), "process", "processes") + ", " +
                         plural(a.index.comms.size(), "communicator", "communicators") + ", " +
                         plural(a.total_ops, "op", "ops");
    if (a.incomplete()) {
      os << "incomplete evidence: " << counts << " read; no divergence found in what was read, but "
         << printable(evidence_summary(a.evidence));
      return os.str();
    }
    if (a.behind()) {
      std::vector<int> b;
      for (auto& u : a.unproven) b.insert(b.end(), u.behind.begin(), u.behind.end());
      auto r = ranks_of(s, b);
      os << "behind: " << counts << "; no divergence so far; job still running, rank" << (r.size() > 1 ? "s " : " ")
         << rank_ranges(r) << " behind their peers";
      return os.str();
    }
    os << "clean: " << counts << "; ranks agree, no order inversion, no hang";
    if (!a.live.empty()) os << " (so far: " << plural(a.live.size(), "process", "processes") << " still running)";
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
    parts.push_back(std::string("first divergence: ") + kind_name(d.kind) + " on comm " + short_hash(a.index.comms[d.gcomm].hash) +
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

std::string render_text(const Analysis& a, TraceDetails& details, const ReportOptions& opt) {
  const Schedule& s = *a.schedule;
  Ctx c{a, s, details, opt};
  std::ostringstream os;
  for (auto& e : a.evidence) os << "incomplete: " << printable(e.detail) << "\n";
  for (auto& w : a.index.warnings) os << "warning: " << printable(w) << "\n";
  os << identity_warnings_text(s);
  for (auto& u : a.unproven) os << "note: " << unproven_line(a, u) << "\n";
  size_t windows = 0;
  for (auto& w : a.checkpoints.comms) {
    if (w.retired_max == 0) continue;
    if (windows++ == opt.max_findings) {
      os << "window: ... more communicators with retired history (see --json)\n";
      break;
    }
    os << "window: " << c.comm_label(w.gcomm) << ": collectives #" << w.exact_first << ".." << w.exact_last
       << " exact (retained on every member)"
       << (w.digest_through > 0 ? "; #1.." + std::to_string(w.digest_through) + " known by digest only" : "")
       << (w.unverified && w.retired_max > w.digest_through
               ? "; #" + std::to_string(w.digest_through + 1) + ".." + std::to_string(w.retired_max) + " not verified"
               : "")
       << "\n";
  }
  os << job_header_text(s, a.hosts);
  if (!a.problems()) {
    os << "lockstep: " << summary_line(a) << "\n";
    return os.str();
  }
  os << "lockstep: " << plural(s.procs.size(), "process", "processes") << ", "
     << plural(a.index.comms.size(), "communicator", "communicators") << ", " << plural(a.total_ops, "op", "ops") << "\n";
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
  os << "\nverdict: " << summary_line(a) << "\n";
  return os.str();
}

std::string render_json(const Analysis& a, TraceDetails& details, const ReportOptions& opt) {
  const Schedule& s = *a.schedule;
  Ctx c{a, s, details, opt};
  json j;
  j["schema"] = "lockstep.analysis";
  j["version"] = kJsonReportVersion;
  j["dir"] = s.dir;
  j["verdict"] = verdict_name(a.verdict());
  j["clean"] = a.verdict() == Verdict::kClean;
  j["incomplete"] = a.incomplete();
  j["summary"] = summary_line(a);
  j["retired_history"] = window_note(a).empty() ? json(nullptr) : json(window_note(a));
  json evidence = json::array();
  for (auto& e : a.evidence)
    evidence.push_back({{"kind", evidence_kind_name(e.kind)}, {"contradictory", e.contradictory},
                        {"ranks", e.ranks}, {"detail", e.detail}});
  j["evidence"] = evidence;
  json unproven = json::array();
  for (auto& u : a.unproven)
    unproven.push_back({{"kind", kind_name(u.finding.kind)}, {"comm", a.index.comms[u.finding.gcomm].hash},
                        {"ordinal", u.finding.ordinal}, {"behind_ranks", ranks_of(s, u.behind)},
                        {"lost_ranks", ranks_of(s, u.lost)}, {"peer_completed", u.peer_completed},
                        {"detail", unproven_line(a, u)}});
  j["unproven"] = unproven;
  j["live_ranks"] = ranks_of(s, a.live);
  json procs = json::array();
  for (size_t p = 0; p < s.procs.size(); ++p) {
    auto& i = s.procs[p].info;
    procs.push_back({{"rank", c.rank(static_cast<int>(p))},
                     {"host", i.host},
                     {"pid", i.pid},
                     {"file", i.path},
                     {"ops", s.procs[p].ops.size()},
                     {"unsequenced_ops", s.procs[p].unsequenced_ops},
                     {"finished", i.finished},
                     {"exit_reason", i.exit_reason},
                     {"dropped_records", i.dropped_records},
                     {"history", history_name(a.history[p])},
                     {"status", status_name(a.hang.ranks[p].status)}});
  }
  j["processes"] = procs;
  add_identity_json(j, s, a.hosts);
  json skipped = json::array();
  for (auto& sk : s.skipped) skipped.push_back({{"path", sk.path}, {"reason", sk.reason}});
  j["skipped"] = skipped;
  // Every caveat in one list of lines (as the text report prints them).
  json warnings = json::array();
  for (auto& e : a.evidence) warnings.push_back("incomplete: " + e.detail);
  for (auto& w : a.index.warnings) warnings.push_back(w);
  for (auto& u : a.unproven) warnings.push_back(unproven_line(a, u));
  j["warnings"] = warnings;
  json comms = json::array();
  for (auto& g : a.index.comms) {
    json members = json::array();
    int64_t longest = 0;
    for (auto& m : g.members) {
      members.push_back({{"rank", c.rank(m.proc)}, {"comm_rank", m.rank}});
      longest = std::max(longest, a.index.of(m).end());
    }
    json cj = {{"hash", g.hash}, {"role", g.role}, {"name", g.name}, {"nranks", g.nranks}, {"members", members},
               {"collectives", longest}};
    size_t gi = &g - a.index.comms.data();
    if (gi < a.checkpoints.comms.size()) {
      const CommWindow& w = a.checkpoints.comms[gi];
      // Exact: retained on every member, compared op by op. Digest: retired, proven by checkpoints.
      cj["history"] = {{"retired_min", w.retired_min}, {"retired_max", w.retired_max},
                       {"exact_first", w.exact_first}, {"exact_last", w.exact_last},
                       {"digest_through", w.digest_through}, {"unverified", w.unverified},
                       {"p2p_cut", w.p2p_cut}};
    }
    comms.push_back(cj);
  }
  j["comms"] = comms;
  j["first_divergence"] = a.first ? finding_json(c, *a.first) : json(nullptr);
  json divs = json::array();
  for (auto& d : a.divergences) divs.push_back(finding_json(c, d));
  j["divergences"] = divs;
  json inv = json::array();
  for (auto& d : a.inversions) inv.push_back(finding_json(c, d));
  j["order_inversions"] = inv;
  json hang = {{"hung", a.hang.hung}, {"hang_timeout_fired", a.hang.any_marker}};
  json ranks = json::array();
  for (auto& r : a.hang.ranks) {
    const SchedProcess& sp = s.procs[r.proc];
    json rj = {{"rank", c.rank(r.proc)}, {"status", status_name(r.status)}, {"in_flight", r.in_flight}};
    if (!r.why.empty()) rj["why"] = r.why;
    auto opj = [&](uint32_t i) {
      const SchedOp& o = sp.ops[i];
      return json{{"comm", sp.info.comms[o.comm].hash}, {"seq", o.seq}, {"op", s.sigs[o.sig].op},
                  {"call_index", o.call_index}, {"describe", describe_signature(s.sigs[o.sig])}};
    };
    rj["last_completed"] = r.last_completed >= 0 ? opj(static_cast<uint32_t>(r.last_completed)) : json(nullptr);
    json blocked = json::array();
    for (auto& b : r.blocked) {
      json bj = opj(b.op);
      bj["queued_behind_it"] = b.queued_behind_it;
      json w = json::array();
      for (auto& x : b.waits) w.push_back({{"rank", c.rank(x.proc)}, {"reason", x.reason}});
      bj["waits_for"] = w;
      blocked.push_back(bj);
    }
    rj["blocked"] = blocked;
    ranks.push_back(rj);
  }
  hang["ranks"] = ranks;
  json cycles = json::array();
  for (auto& cyc : a.hang.cycles) {
    json hops = json::array();
    for (auto& h : cyc.hops) {
      const SchedOp& o = s.procs[h.proc].ops[h.op];
      hops.push_back({{"rank", c.rank(h.proc)}, {"comm", s.procs[h.proc].info.comms[o.comm].hash}, {"seq", o.seq},
                      {"op", s.sigs[o.sig].op}, {"waits_for", c.rank(h.waits_for)}});
    }
    cycles.push_back({{"communicators", cyc.comms}, {"hops", hops}});
  }
  hang["cycles"] = cycles;
  json groups = json::array();
  for (auto& g : a.hang.groups) {
    std::vector<int> r;
    for (int p : g.procs) r.push_back(c.rank(p));
    groups.push_back({{"ranks", rank_ranges(r)}, {"count", r.size()}, {"summary", g.summary}});
  }
  hang["groups"] = groups;
  j["hang"] = hang;
  // Trace strings are printable already (loader); paths from the file system may not be UTF-8.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {
// Printable line by line: XML 1.0 forbids control characters even as references.
std::string printable_lines(const std::string& s) {
  std::string out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t nl = s.find('\n', at);
    if (nl == std::string::npos) nl = s.size();
    out += printable(std::string_view(s).substr(at, nl - at));
    if (nl < s.size()) out += '\n';
    at = nl + 1;
  }
  return out;
}
std::string xml_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}
}  // namespace

std::string render_junit(const std::string& suite, const std::vector<JUnitCase>& cases) {
  size_t failures = 0;
  for (auto& c : cases) failures += !c.failure.empty();
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"" << xml_escape(printable(suite))
     << "\" tests=\"" << cases.size() << "\" failures=\"" << failures << "\">\n";
  for (auto& c : cases) {
    os << "    <testcase classname=\"lockstep\" name=\"" << xml_escape(c.name) << "\"";
    std::string out = c.output.empty() ? "" : "      <system-out>" + xml_escape(printable_lines(c.output)) + "</system-out>\n";
    if (c.failure.empty()) {
      os << (out.empty() ? "/>\n" : ">\n" + out + "    </testcase>\n");
      continue;
    }
    std::string failure = printable_lines(c.failure);
    std::string first = failure.substr(0, failure.find('\n'));
    os << ">\n      <failure message=\"" << xml_escape(first) << "\">" << xml_escape(failure) << "</failure>\n" << out
       << "    </testcase>\n";
  }
  os << "  </testsuite>\n</testsuites>\n";
  return os.str();
}

std::vector<JUnitCase> junit_cases(const Analysis& a) {
  std::vector<JUnitCase> out;
  std::string div;
  for (auto& d : a.divergences)
    div += std::string(kind_name(d.kind)) + " on comm " + short_hash(a.index.comms[d.gcomm].hash) + ": " + d.detail + "\n";
  out.push_back({"ranks_agree", div, window_note(a)});
  std::string inv;
  for (auto& d : a.inversions) inv += d.detail + "\n";
  out.push_back({"communicator_order", inv, ""});
  std::string hang;
  if (a.hang.hung)
    for (auto& g : a.hang.groups) {
      std::vector<int> r;
      for (int p : g.procs) r.push_back(display_rank(*a.schedule, p));
      hang += "ranks " + rank_ranges(r) + ": " + g.summary + "\n";
    }
  out.push_back({"no_hang", hang, ""});
  std::string ev;
  for (auto& e : a.evidence) ev += std::string(evidence_kind_name(e.kind)) + ": " + e.detail + "\n";
  for (auto& u : a.unproven)
    if (!u.lost.empty()) ev += unproven_line(a, u) + "\n";
  out.push_back({"evidence_complete", ev, ""});
  return out;
}

}  // namespace lockstep
