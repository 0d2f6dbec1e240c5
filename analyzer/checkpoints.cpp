#include "checkpoints.h"

#include <algorithm>
#include <unordered_map>

#include "meta_keys.h"
#include "op_digest.h"

namespace lockstep {

uint64_t signature_digest(const Signature& s) {
  std::vector<digest::Part> parts;
  parts.reserve(s.parts.size());
  for (auto& p : s.parts) parts.push_back({p.op, p.dtype, p.count, p.root, p.peer, p.redop});
  return digest::signature_hash(s.op, s.dtype, s.count, s.root, s.peer, s.redop, parts.data(),
                                parts.size());
}

const Comm::Checkpoint* checkpoint_at(const Comm& c, int64_t k) {
  auto it = std::lower_bound(c.checkpoints.begin(), c.checkpoints.end(), k,
                             [](const Comm::Checkpoint& cp, int64_t v) { return cp.ordinal < v; });
  return it != c.checkpoints.end() && it->ordinal == k ? &*it : nullptr;
}

bool CheckpointReport::any_bounded() const {
  for (auto& c : comms)
    if (c.bounded) return true;
  return false;
}

namespace {

struct Point {
  int64_t ordinal;
  uint64_t digest;
};

// What one member's file proves about its collective sequence on one communicator.
struct MemberDigests {
  int proc = -1;
  bool usable = true;        // digests trusted (consistent, and retired history checkpointed)
  std::vector<Point> known;  // sorted by ordinal, distinct
  const Point* at(int64_t k) const {
    auto it = std::lower_bound(known.begin(), known.end(), k, [](const Point& p, int64_t v) { return p.ordinal < v; });
    return it != known.end() && it->ordinal == k ? &*it : nullptr;
  }
};

std::string comm_of(const GlobalComm& g) { return comm_label(g.hash, g.role); }

}  // namespace

CheckpointReport compare_checkpoints(const Schedule& s, const CommIndex& idx) {
  CheckpointReport r;
  std::vector<uint64_t> sig_hash(s.sigs.size());
  std::vector<bool> sig_done(s.sigs.size(), false);
  auto hash_of = [&](uint32_t sg) {
    if (!sig_done[sg]) sig_hash[sg] = signature_digest(s.sigs[sg]), sig_done[sg] = true;
    return sig_hash[sg];
  };
  auto issue = [&](EvidenceKind kind, std::vector<int> procs, std::string detail) {
    EvidenceIssue e;
    e.kind = kind;
    e.procs = procs;
    for (int p : procs)
      if (s.procs[p].info.global_rank >= 0) e.ranks.push_back(s.procs[p].info.global_rank);
    e.detail = std::move(detail);
    // A file whose checkpoints do not match its rows contradicts itself: which record is the
    // rank's history is unknown, so no finding on it is claimed (analysis.cpp).
    e.contradictory = kind == EvidenceKind::kDigestInconsistent;
    r.evidence.push_back(std::move(e));
  };

  for (size_t g = 0; g < idx.comms.size(); ++g) {
    const GlobalComm& gc = idx.comms[g];
    CommWindow w;
    w.gcomm = static_cast<int>(g);
    int64_t min_end = INT64_MAX, comm_interval = 0;
    w.retired_min = INT64_MAX;
    for (auto& m : gc.members) {
      const ProcComm& pc = idx.of(m);
      const Process& info = s.procs[m.proc].info;
      w.retired_min = std::min(w.retired_min, pc.base);
      w.retired_max = std::max(w.retired_max, pc.base);
      w.cap_retired_max = std::max<int64_t>(w.cap_retired_max, std::min<int64_t>(pc.base, info.comms[m.local].retired_collectives));
      min_end = std::min({min_end, pc.end(), pc.exact_through});
      comm_interval = std::max(comm_interval, info.checkpoint_interval);
      // Retired point-to-point ops alone bound it too (their pairing is cut, p2p_cut below).
      w.bounded |= pc.base > 0 || pc.retired_p2p > 0 || !info.comms[m.local].checkpoints.empty();
      w.p2p_cut |= pc.retired_p2p > 0;
    }
    if (gc.members.empty()) w.retired_min = 0, min_end = 0;
    w.exact_first = w.retired_max + 1;
    w.exact_last = min_end;
    if (!w.bounded) {
      r.comms.push_back(w);
      continue;
    }
    if (comm_interval <= 0) comm_interval = digest::kDefaultInterval;

    // Per member: verify the retained collectives against the file's own checkpoints, and
    // collect the ordinals whose digest it knows.
    std::vector<MemberDigests> md;
    md.reserve(gc.members.size());
    for (auto& m : gc.members) {
      const ProcComm& pc = idx.of(m);
      const Process& info = s.procs[m.proc].info;
      const Comm& c = info.comms[m.local];
      MemberDigests d;
      d.proc = m.proc;
      bool has_checkpoints = info.checkpoint_interval > 0;
      if (pc.base > 0 && !has_checkpoints) {
        issue(EvidenceKind::kUnverifiedHistory, {m.proc},
              shown_rank_label(s.procs[m.proc].info, m.proc) + ": " + comm_of(gc) + ": " + std::to_string(pc.base) +
                  " collectives retired and the trace has no checkpoints to verify them");
        d.usable = false;
        md.push_back(std::move(d));
        continue;
      }
      // Recorded checkpoints of retired history, kept as recorded.
      std::unordered_map<int64_t, uint64_t> recorded;
      for (auto& cp : c.checkpoints) {
        recorded[cp.ordinal] = cp.digest;
        if (cp.ordinal > 0 && cp.ordinal < pc.base && cp.ordinal <= pc.exact_through)
          d.known.push_back({cp.ordinal, cp.digest});
      }
      uint64_t running = pc.base == 0 ? digest::kEmpty : c.retired_digest;
      // Summary-first: the prefix not read ends at a checkpoint of this file (SchedProcess::unread).
      if (m.local < static_cast<int>(s.procs[m.proc].unread.size()) && s.procs[m.proc].unread[m.local].collectives == pc.base && pc.base > 0)
        running = s.procs[m.proc].unread[m.local].digest;
      auto mismatch = [&](int64_t k, uint64_t have) {
        auto it = recorded.find(k);
        return it != recorded.end() && it->second != have;
      };
      int64_t bad = -1;
      // Past a hole in its records (ProcComm::exact_through) nothing is compared: the file's
      // checkpoints there count the collectives it holds, not the ones it issued.
      const bool base_known = pc.base <= pc.exact_through;
      if (base_known && pc.base > 0 && mismatch(pc.base, running)) bad = pc.base;
      if (base_known) d.known.push_back({pc.base, running});
      const auto& ops = s.procs[m.proc].ops;
      int64_t interval = has_checkpoints ? info.checkpoint_interval : comm_interval;
      for (size_t i = 0; i < pc.colls.size(); ++i) {
        int64_t k = pc.base + static_cast<int64_t>(i) + 1;
        if (k > pc.exact_through) break;
        running = digest::chain(running, hash_of(ops[pc.colls[i]].sig));
        if (bad < 0 && has_checkpoints && mismatch(k, running)) bad = k;
        if (digest::is_checkpoint(k, interval) || k == w.retired_max || k == pc.end() || k == pc.exact_through)
          d.known.push_back({k, running});
      }
      if (bad >= 0) {
        issue(EvidenceKind::kDigestInconsistent, {m.proc},
              shown_rank_label(s.procs[m.proc].info, m.proc) + ": " + comm_of(gc) + ": the trace's checkpoint at collective #" +
                  std::to_string(bad) + " does not match the collectives it holds (the file is inconsistent)");
        d.usable = false;
      }
      std::sort(d.known.begin(), d.known.end(), [](const Point& a, const Point& b) { return a.ordinal < b.ordinal; });
      d.known.erase(std::unique(d.known.begin(), d.known.end(),
                                [](const Point& a, const Point& b) { return a.ordinal == b.ordinal; }),
                    d.known.end());
      md.push_back(std::move(d));
    }
    if (w.p2p_cut) {
      std::vector<int> cut;
      bool dropped = false;  // retired seqs are counted, not listed: a dropped collective among them counts too
      for (auto& m : gc.members)
        if (idx.of(m).retired_p2p > 0) {
          cut.push_back(m.proc);
          dropped |= s.procs[m.proc].info.dropped_records > 0;
        }
      issue(EvidenceKind::kUnverifiedHistory, cut,
            comm_of(gc) + ": point-to-point messages were retired by the size cap" +
                (dropped ? " (or the recorder dropped records there)" : "") + " on " + std::to_string(cut.size()) +
                " member(s); p2p is outside the digest, so this comm's messages are not paired");
    }
    bool all_usable = std::all_of(md.begin(), md.end(), [](const MemberDigests& d) { return d.usable; });
    std::vector<const MemberDigests*> usable;
    for (auto& d : md)
      if (d.usable) usable.push_back(&d);
    if (w.retired_max == 0 || !all_usable) {
      // Nothing retired: the retained window is the whole history, compared op by op. A member
      // whose own digests are inconsistent proves nothing, so no retired ordinal is proven for
      // the communicator (the others' agreement among themselves would leave that member out).
      w.unverified = w.retired_max > 0;
      r.comms.push_back(w);
      continue;
    }
    auto agree_at = [&](int64_t k) {
      const Point* first = usable[0]->at(k);
      for (auto* d : usable) {
        const Point* p = d->at(k);
        if (!p || !first || p->digest != first->digest) return false;
      }
      return true;
    };
    // Ordinals whose digest every usable member knows, ascending.
    std::unordered_map<int64_t, size_t> count;
    for (auto* d : usable)
      for (auto& p : d->known) ++count[p.ordinal];
    std::vector<int64_t> common;
    for (auto& [k, n] : count)
      if (n == usable.size()) common.push_back(k);
    std::sort(common.begin(), common.end());
    // Prefix digests: once two members differ they differ at every later ordinal, so the first
    // disagreement is found by bisection.
    size_t lo = 0, hi = common.size();
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (agree_at(common[mid])) lo = mid + 1;
      else hi = mid;
    }
    int64_t agreed = lo > 0 ? common[lo - 1] : 0;
    w.digest_through = std::min(agreed, w.retired_max);
    if (lo < common.size()) {
      DigestDivergence dd;
      dd.gcomm = static_cast<int>(g);
      dd.first = agreed + 1;
      dd.last = common[lo];
      std::unordered_map<uint64_t, size_t> side_of;
      for (auto* d : usable) {
        uint64_t v = d->at(dd.last)->digest;
        auto [it, fresh] = side_of.emplace(v, dd.sides.size());
        if (fresh) dd.sides.push_back({v, {}});
        dd.sides[it->second].procs.push_back(d->proc);
      }
      std::stable_sort(dd.sides.begin(), dd.sides.end(),
                       [](const DigestSide& a, const DigestSide& b) { return a.procs.size() > b.procs.size(); });
      r.divergences.push_back(std::move(dd));
    } else if (agreed < w.retired_max) {
      w.unverified = true;
      // Say which members cannot be compared: those whose known digests stop short of the
      // others' retired history.
      std::vector<int> procs;
      std::string windows;
      size_t listed = 0;
      for (auto& m : gc.members) {
        const ProcComm& pc = idx.of(m);
        procs.push_back(m.proc);
        if (listed++ < 4)
          windows += (windows.empty() ? "" : ", ") + shown_rank_label(s.procs[m.proc].info, m.proc) + " holds #" + std::to_string(pc.base + 1) +
                     ".." + std::to_string(pc.end());
      }
      if (listed > 4) windows += ", ...";
      issue(EvidenceKind::kUnverifiedHistory, procs,
            comm_of(gc) + ": collectives #" + std::to_string(agreed + 1) + ".." + std::to_string(w.retired_max) +
                " cannot be compared across members: retained windows do not overlap and no common checkpoint covers "
                "them (" + windows + "); members agree through #" + std::to_string(agreed));
    }
    if (!all_usable) w.unverified = true;
    r.comms.push_back(w);
  }
  // Each file read whole and holding every collective it issued (nothing retired, dropped or
  // skipped by the digest): its order digests (op_digest.h order_step) against the order of the
  // collectives it holds, as its checkpoints against their sequence above. A summary-first read
  // trusts them to prove the order it does not read (summary_read.h prove_unread).
  for (size_t p = 0; p < s.procs.size(); ++p) {
    const SchedProcess& sp = s.procs[p];
    const Process& info = sp.info;
    if (info.checkpoint_interval <= 0 || info.retired_ops > 0 || info.dropped_records > 0 || sp.unread_ops > 0) continue;
    if (auto gaps = info.meta.find(schema::meta::kDigestGaps); gaps != info.meta.end() && gaps->second != "0") continue;
    bool any = false, whole = true;
    for (const Comm& c : info.comms) {
      whole &= c.retired_collectives == 0 && c.retired_through_seq == 0;
      for (const Comm::Checkpoint& k : c.checkpoints) any |= k.order_count > 0;
    }
    if (!any || !whole) continue;
    // A collective's ordinal counts its communicator's collectives in seq order, as the writer
    // numbers them (two threads on one communicator can take seqs in the other order than call
    // indices); the order digest chains them in call order.
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> by_seq(info.comms.size());  // (seq, op)
    for (uint32_t i = 0; i < sp.ops.size(); ++i)
      if (sp.ops[i].comm < info.comms.size() && digest::in_collective_sequence(s.sigs[sp.ops[i].sig].op))
        by_seq[sp.ops[i].comm].emplace_back(sp.ops[i].seq, i);
    std::vector<int64_t> ordinal_of(sp.ops.size(), 0);
    for (auto& v : by_seq) {
      std::sort(v.begin(), v.end());
      for (size_t k = 0; k < v.size(); ++k) ordinal_of[v[k].second] = static_cast<int64_t>(k) + 1;
    }
    uint64_t order = digest::kEmpty;
    int64_t n = 0;
    for (uint32_t i = 0; i < sp.ops.size(); ++i) {
      const SchedOp& o = sp.ops[i];
      if (o.comm >= info.comms.size() || !digest::in_collective_sequence(s.sigs[o.sig].op)) continue;
      const Comm& c = info.comms[o.comm];
      order = digest::order_step(order, c.local_id);
      ++n;
      const int64_t k = ordinal_of[i];
      const Comm::Checkpoint* cp = checkpoint_at(c, k);
      if (!cp || cp->order_count <= 0) continue;
      if (cp->order_count != n || cp->order_digest != order) {
        issue(EvidenceKind::kDigestInconsistent, {static_cast<int>(p)},
              shown_rank_label(info, static_cast<int>(p)) + ": " + comm_label(c.hash, "") + ": the trace's order digest at collective #" +
                  std::to_string(k) + " does not match the order of the collectives it holds (the file is inconsistent)");
        break;
      }
    }
  }
  return r;
}

std::string window_line(const CommWindow& w, const std::string& label) {
  std::string line = "window: " + (label.empty() ? "" : label + ": ") + "collectives #" +
                     std::to_string(w.exact_first) + ".." + std::to_string(w.exact_last) +
                     " exact (retained on every member)";
  if (w.digest_through > 0) line += "; #1.." + std::to_string(w.digest_through) + " known by digest only";
  if (w.unverified && w.retired_max > w.digest_through)
    line += "; #" + std::to_string(w.digest_through + 1) + ".." + std::to_string(w.retired_max) + " not verified";
  return line;
}

}  // namespace lockstep
