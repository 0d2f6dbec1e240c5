#include "analysis.h"

#include <algorithm>
#include <unordered_map>

#include "meta_keys.h"
#include "identity.h"
#include "summary_read.h"

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

int Analysis::exit_code(bool require_finished) const {
  switch (verdict()) {
    case Verdict::kDivergent:
    case Verdict::kHang: return kVerdictExitFound;
    case Verdict::kIncomplete:
    case Verdict::kBehind: return kVerdictExitIncomplete;
    case Verdict::kClean: break;
  }
  return require_finished && !live.empty() ? kVerdictExitIncomplete : kVerdictExitClean;
}

std::vector<std::string> evidence_lines(const Analysis& a, size_t max_lines) {
  std::vector<std::string> out;
  for (const EvidenceGroup& g : group_evidence(a.evidence)) {
    if (out.size() == max_lines) {
      out.push_back("and more (lockstep analyze lists every item)");
      break;
    }
    out.push_back(g.detail);
  }
  return out;
}

Divergence digest_finding(const Schedule& s, const DigestDivergence& dd) {
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
    sides += (i ? " | " : "") + ranks_phrase(ranks, "rank", kMaxRangeSegments);
  }
  if (d.groups.size() > 4) sides += " | " + std::to_string(d.groups.size() - 4) + " more sides";
  d.detail = "members diverge between collective ordinals " + std::to_string(dd.first) + " and " +
             std::to_string(dd.last) + "; known by digest only (retired history); sides: " + sides;
  return d;
}

namespace {

// A digest disagreement is the first divergence of its communicator unless an exact finding
// lies at or before the end of its interval (then the exact one is the finer report).
void merge_digest_divergences(const Schedule& s, const CheckpointReport& cr, std::vector<Divergence>& divs) {
  for (auto& dd : cr.divergences) {
    auto exact = std::find_if(divs.begin(), divs.end(), [&](const Divergence& d) {
      return d.gcomm == dd.gcomm && !is_p2p_finding(d.kind);
    });
    if (exact != divs.end() && exact->ordinal <= dd.last) continue;
    Divergence d = digest_finding(s, dd);
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
  {
    // The ages of a stopped rank's ops in flight: their issue times as the loader read them
    // (SchedProcess::in_flight_issue), else read from its file for the few ranks asked.
    HangOptions ho = options.hang;
    std::unique_ptr<TraceDetails> files;
    if (!ho.issue_mono_ns)
      ho.issue_mono_ns = [&](int proc, int64_t call_index) -> std::optional<int64_t> {
        const auto& known = s.procs[proc].in_flight_issue;
        auto it = std::lower_bound(known.begin(), known.end(), std::make_pair(call_index, INT64_MIN));
        if (it != known.end() && it->first == call_index)
          return it->second > 0 ? std::optional<int64_t>(it->second) : std::nullopt;
        if (s.procs[proc].info.path.empty()) return std::nullopt;
        if (!files) files = details_from_files(s);
        const std::optional<Op> op = files->op(proc, call_index);
        if (!op || op->issue_mono_ns <= 0) return std::nullopt;
        return op->issue_mono_ns;
      };
    a.hang = explain_hang(s, a.index, ho);
  }
  a.hosts = group_by_host(s, options.hang.stale_ns);
  for (auto& p : s.procs) a.total_ops += static_cast<int64_t>(p.ops.size()) + p.unread_ops;

  // What each process's trace can prove about the ops it does not show.
  a.history.assign(s.procs.size(), History::kComplete);
  for (size_t p = 0; p < s.procs.size(); ++p) {
    const RankHang& rh = a.hang.ranks[p];
    if (rh.history_lost) a.history[p] = History::kLost;
    else if (rh.live) a.history[p] = History::kBehind;
    if (rh.live) a.live.push_back(static_cast<int>(p));
  }
  // "Never issued" needs a member whose history is complete (or a recorder's hang timeout that
  // fired while it was live). Otherwise the member is behind, its history was lost, or the job's
  // end stopped it in host code before it got there (a healthy job's ranks are rarely all stopped
  // at the same op; a real wait shows as a hang: its peers' ops were in flight long before the stop).
  std::vector<const Process*> infos;
  for (auto& p : s.procs) infos.push_back(&p.info);
  // Communicators named as every text output names them: hash and role.
  std::unordered_map<std::string, const GlobalComm*> by_hash;
  for (const GlobalComm& g : a.index.comms) by_hash.emplace(g.hash, &g);
  a.evidence = validate_evidence(infos, s.skipped, [&](const std::string& hash) {
    auto it = by_hash.find(hash);
    return it == by_hash.end() ? comm_label(hash) : comm_label(hash, it->second->role);
  });
  // Files that contradict each other (trace_validation.h), or themselves (checkpoints that do not
  // match the rows they hold): a finding on their records is not claimed (which of two files
  // claiming one rank, or which of a file's two records, is the rank's history is unknown).
  std::vector<char> contested(s.procs.size(), 0);
  for (const auto* issues : {&a.evidence, &a.checkpoints.evidence})
    for (const EvidenceIssue& e : *issues)
      if (e.contradictory)
        for (int p : e.procs)
          if (p >= 0 && size_t(p) < contested.size()) contested[size_t(p)] = 1;
  auto contested_in = [&](const Divergence& d) {
    std::vector<int> out;
    auto add = [&](int p) {
      if (p >= 0 && size_t(p) < contested.size() && contested[size_t(p)] &&
          std::find(out.begin(), out.end(), p) == out.end())
        out.push_back(p);
    };
    for (const Side& sd : d.sides) add(sd.proc);
    for (const Side& sd : d.sides_b) add(sd.proc);
    for (const SideGroup& g : d.groups)
      for (int p : g.procs) add(p);
    for (int p : d.not_issued) add(p);
    std::sort(out.begin(), out.end());
    return out;
  };
  auto set_aside_contested = [&](std::vector<Divergence>& findings) {
    std::vector<Divergence> kept_here;
    for (auto& d : findings) {
      std::vector<int> c = contested_in(d);
      if (c.empty()) {
        kept_here.push_back(std::move(d));
        continue;
      }
      Unproven u;
      u.contested = std::move(c);
      u.finding = std::move(d);
      a.unproven.push_back(std::move(u));
    }
    findings = std::move(kept_here);
  };
  set_aside_contested(a.divergences);
  set_aside_contested(a.inversions);

  std::vector<Divergence> kept;
  for (auto& d : a.divergences) {
    if (d.kind != FindingKind::kNeverIssued && d.kind != FindingKind::kP2PPairing) {
      kept.push_back(std::move(d));
      continue;
    }
    Unproven u;
    bool proven = false;
    // Every member that issued it had it in flight only briefly when its trace ends (a job
    // stopped mid-step): a member the job's end stopped in host code had not issued it yet.
    bool issued_young = true;
    for (auto& sd : d.sides)
      if (sd.op >= 0) {
        u.peer_completed |= s.procs[sd.proc].ops[sd.op].completed();
        issued_young &= a.hang.ranks[sd.proc].stopped_in_flight;
      }
    // Collectives list only some sides: every member that never issued it is in not_issued.
    std::vector<int> absent = d.not_issued;
    if (d.kind == FindingKind::kP2PPairing)
      for (auto& sd : d.sides)
        if (sd.op < 0) absent.push_back(sd.proc);
    // Ended by the job with only young ops in flight that every peer issued too (its GPU queue cut
    // short, its host thread between two calls): as good as stopped in host code.
    auto between_calls = [&](int proc) {
      const RankHang& rh = a.hang.ranks[proc];
      if (!rh.ended_by_job || !rh.stopped_in_flight || rh.blocked.empty()) return false;
      for (const BlockedOp& b : rh.blocked)
        if (!b.waits.empty() || b.own_hole_from_seq != 0) return false;
      return true;
    };
    for (int proc : absent) {
      History h = a.history[proc];
      if (h == History::kComplete && (a.hang.ranks[proc].stopped_by_job || between_calls(proc)) && issued_young &&
          !u.peer_completed)
        u.stopped.push_back(proc);
      else if (h == History::kComplete || (h == History::kBehind && a.hang.any_marker)) proven = true;
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

  a.evidence.insert(a.evidence.end(), a.checkpoints.evidence.begin(), a.checkpoints.evidence.end());
  // Members the job's end stopped before an op their peers had just issued: the job was not seen
  // to agree there, nor to disagree.
  for (auto& u : a.unproven) {
    if (u.stopped.empty()) continue;
    const Divergence& d = u.finding;
    int64_t waited = 0, seq = 0;
    for (auto& sd : d.sides)
      if (sd.op >= 0) {
        waited = std::max(waited, a.hang.ranks[sd.proc].in_flight_for_ns);
        seq = s.procs[sd.proc].ops[sd.op].seq;
      }
    const std::string& what = u.stopped_what = std::string(d.kind == FindingKind::kP2PPairing ? "message #" : "collective #") +
                             std::to_string(d.ordinal) + " on " +
                             comm_label(a.index.comms[d.gcomm].hash, a.index.comms[d.gcomm].role) +
                             " not issued yet when the job's end stopped it in host code; its peers' oldest op in "
                             "flight was " + std::to_string(waited / 1'000'000) + " ms old at their traces' end (not stuck: "
                             "under " + std::to_string(options.hang.stuck_ns / 1'000'000'000) +
                             " s): unknown whether it would have issued it";
    for (int p : u.stopped) {
      EvidenceIssue e;
      e.kind = EvidenceKind::kStoppedBeforeIssue;
      e.procs = {p};
      if (s.procs[p].info.global_rank >= 0) e.ranks = {s.procs[p].info.global_rank};
      e.comm = a.index.comms[d.gcomm].hash;
      e.from_seq = seq;  // the op's seq on the members that issued it
      e.what = what;
      e.detail = shown_rank_label(s.procs[p].info, p) + ": " + what;
      a.evidence.push_back(std::move(e));
    }
  }
  // Per process: the first unproven finding a peer completed while its record was lost.
  std::vector<const Unproven*> issued_by_peer(s.procs.size(), nullptr);
  for (auto& u : a.unproven)
    if (u.peer_completed)
      for (int p : u.lost)
        if (!issued_by_peer[p]) issued_by_peer[p] = &u;
  for (size_t p = 0; p < s.procs.size(); ++p) {
    const Process& info = s.procs[p].info;
    if (a.history[p] != History::kLost || !recorder_stop_reason(info).empty()) continue;  // recorder_stopped: its own issue
    EvidenceIssue e;
    e.kind = EvidenceKind::kHistoryLost;
    e.procs = {static_cast<int>(p)};
    if (info.global_rank >= 0) e.ranks = {info.global_rank};
    e.what = "trace ends without an exit record (not finished, not seen running): what it did after its last flush "
             "is unknown";
    if (const Unproven* u = issued_by_peer[p])
      e.what += "; a peer completed collective #" + std::to_string(u->finding.ordinal) + " on " +
                comm_label(a.index.comms[u->finding.gcomm].hash, a.index.comms[u->finding.gcomm].role) + ", so it issued it (its record was lost)";
    e.detail = shown_rank_label(s.procs[p].info, static_cast<int>(p)) + ": " + e.what;
    a.evidence.push_back(std::move(e));
  }
  // Where each member's evidence stops being whole (records dropped): the seqs after it were
  // compared only as far as the evidence goes.
  for (size_t p = 0; p < s.procs.size(); ++p)
    for (const ProcComm& pc : a.index.per_proc[p]) {
      if (pc.whole() || pc.gcomm < 0) continue;
      const GlobalComm& g = a.index.comms[pc.gcomm];
      const int64_t from = pc.complete_through_seq + 1;
      EvidenceIssue e;
      e.kind = EvidenceKind::kEvidenceGap;
      e.procs = {static_cast<int>(p)};
      if (s.procs[p].info.global_rank >= 0) e.ranks = {s.procs[p].info.global_rank};
      e.comm = g.hash;
      e.from_seq = from;
      e.gap_cause = gap_cause_name(pc.gap);
      const std::string seq = "seq " + std::to_string(from);
      std::string why;
      switch (pc.gap) {
        case GapCause::kSeqGap: why = seq + " is missing (its record was dropped)"; break;
        case GapCause::kSeqMissing: why = seq + " is missing, though the file says no record was dropped (edited or damaged?)"; break;
        case GapCause::kDroppedRange: {
          // A converted Flight Recorder dump says why (flightrec/to_model.cpp add_hole).
          std::string fr;
          for (const DropRange& d : s.procs[p].info.drops)
            if (d.first_seq == from && d.comm == &pc - a.index.per_proc[p].data() && d.reason.rfind("fr_", 0) == 0) fr = d.reason;
          why = fr.empty() ? "the recorder dropped records from " + seq + " on"
                           : "its Flight Recorder dump does not hold " + seq + " whole (" + fr + ")";
          break;
        }
        case GapCause::kPartsDropped: why = "the part rows of its grouped op at " + seq + " were dropped"; break;
        case GapCause::kUnlocated: why = "records were dropped and the file does not say which ones"; break;
        case GapCause::kSeqOrder:
          why = seq + " comes after a higher seq in call order, which no recorder writes (edited or damaged?)";
          break;
        case GapCause::kStopped: {
          const std::string reason = recorder_stop_reason(s.procs[p].info);
          why = "its recorder stopped (" + (reason.empty() ? std::string("?") : reason) + ") before " + seq;
          break;
        }
        case GapCause::kNone: break;
      }
      e.what = comm_label(g.hash, g.role) + ": evidence is whole through seq " + std::to_string(from - 1) + "; " + why +
               ": ops from " + seq + " on are unknown, not compared";
      e.detail = shown_rank_label(s.procs[p].info, static_cast<int>(p)) + ": " + e.what;
      a.evidence.push_back(std::move(e));
    }
  // A summary-first read proves each communicator's collectives before its cut by digest; the
  // order in which each rank issued them across communicators (an order inversion, a latent
  // deadlock that the recorded run got past) by the order digests when they agree, and an
  // all-to-all's count and splits only when each member has one, without splits
  // (prove_unread). What is not proven is unread, so not ruled out.
  if (const UnreadSummary u = unread_summary(s, a); u.ops_not_read > 0) {
    const std::string unread = " of the " + std::to_string(u.ops_not_read) + " ops not read (collectives " +
                               unread_range(u.cut_min, u.cut_max) + " of " + std::to_string(u.comms_cut) +
                               (u.comms_cut == 1 ? " communicator" : " communicators") +
                               ", each proven the same on every member by checkpoint digest)";
    if (!u.order_proven) {
      EvidenceIssue e;
      e.kind = EvidenceKind::kOrderNotRead;
      e.detail = "summary first: the order across communicators" + unread + " was not checked: an order inversion "
                 "there is not ruled out (--full-read): " + u.order_open;
      a.evidence.push_back(std::move(e));
    }
    if (!u.all_to_all_proven) {
      EvidenceIssue e;
      e.kind = EvidenceKind::kAllToAllNotRead;
      e.detail = "summary first: the all-to-alls" + unread + " were not compared peer by peer (--full-read): " +
                 u.all_to_all_open;
      a.evidence.push_back(std::move(e));
    }
  }
  // NCCL's profiler plugin: rows it lost are evidence lost (the calls only it saw are in the ops).
  a.coverage = read_coverage(s);
  for (auto& e : coverage_evidence(s, a.coverage)) a.evidence.push_back(std::move(e));
  std::vector<const Divergence*> all;
  for (auto& d : a.divergences) all.push_back(&d);
  for (auto& d : a.inversions) all.push_back(&d);
  int first = first_in_causal_order(s, all);
  if (first >= 0) a.first = all[first];
  return a;
}

}  // namespace lockstep
