#include "comm_index.h"

#include <algorithm>
#include <map>

#include "meta_keys.h"
#include "saturating.h"

namespace lockstep {

const char* gap_cause_name(GapCause c) {
  switch (c) {
    case GapCause::kNone: return "none";
    case GapCause::kSeqGap: return "seq_gap";
    case GapCause::kSeqMissing: return "seq_missing";
    case GapCause::kDroppedRange: return "dropped_range";
    case GapCause::kPartsDropped: return "parts_dropped";
    case GapCause::kUnlocated: return "unlocated";
    case GapCause::kStopped: return "recorder_stopped";
    case GapCause::kSeqOrder: return "seq_order";
  }
  return "none";
}

int CommIndex::local_of(int gcomm, int proc) const {
  const auto& mine = per_proc[proc];
  for (size_t l = 0; l < mine.size(); ++l)
    if (mine[l].gcomm == gcomm) return static_cast<int>(l);
  return -1;
}

namespace {

// Where each of a process's communicators stops being whole (ProcComm::exact_through). In a
// file whose recorder says it lost records (dropped_records, drops rows) or stopped, a seq
// missing from the file was dropped. In one that says it lost none, a missing seq contradicts
// the file (edited, damaged): unknown from there on all the same (kSeqMissing), never compared
// as if the next op were that seq. A converted Flight Recorder dump names its holes itself as
// drops rows (flightrec/to_model.cpp): its window starts past seq 1 and its p2p seqs are numbered
// apart, so its seqs are not walked.
void find_gaps(const Schedule& s, size_t p, std::vector<ProcComm>& pcs) {
  const SchedProcess& sp = s.procs[p];
  const Process& info = sp.info;
  auto st = info.meta.find(schema::meta::kRecorderStopped);
  const bool stopped = st != info.meta.end() && !st->second.empty();
  const bool admits_drops = stopped || info.dropped_records > 0 || !info.drops.empty();
  if (!admits_drops && info.exit_reason == schema::meta::kFrDump) return;
  int64_t located = 0;
  for (const DropRange& d : info.drops) located = sat_add(located, d.records);
  const bool unlocated = info.dropped_records > 0 && (!info.drops_known || located < info.dropped_records);
  std::vector<int64_t> seqs;
  for (size_t l = 0; l < pcs.size() && l < info.comms.size(); ++l) {
    ProcComm& pc = pcs[l];
    if (pc.gcomm < 0) continue;
    const Comm& c = info.comms[l];
    int64_t hole = INT64_MAX;
    GapCause cause = GapCause::kNone;
    auto at = [&](int64_t seq, GapCause why) {
      if (seq < hole) hole = seq, cause = why;
    };
    for (const DropRange& d : info.drops)
      if (d.comm == static_cast<int>(l) && d.first_seq > 0) at(d.first_seq, d.stop_point ? GapCause::kStopped : GapCause::kDroppedRange);
    int64_t expected = std::max<int64_t>(c.retired_through_seq, 0) + 1;
    // Read from a cut (summary-first): the prefix is proven by digest, and a cut has no
    // point-to-point op before it (seq == ordinal).
    if (l < sp.unread.size()) expected = std::max(expected, sp.unread[l].collectives + 1);
    if (info.exit_reason == schema::meta::kFrDump) expected = INT64_MAX;
    // The seqs in order: the ops' own order where it is theirs (collectives only, seqs that do
    // not go down: no copy, no sort), else sorted.
    bool in_order = pc.p2p.empty();
    for (size_t k = 1; in_order && k < pc.colls.size(); ++k)
      in_order = sp.ops[pc.colls[k - 1]].seq <= sp.ops[pc.colls[k]].seq;
    auto walk = [&](int64_t q) {  // false: stop
      if (q < expected) return true;  // a seq twice: compared as it is
      if (q > expected) {
        at(expected, admits_drops ? GapCause::kSeqGap : GapCause::kSeqMissing);
        return false;
      }
      ++expected;
      return true;
    };
    if (in_order) {
      for (uint32_t i : pc.colls)
        if (!walk(sp.ops[i].seq)) break;
    } else {
      seqs.clear();
      for (uint32_t i : pc.colls) seqs.push_back(sp.ops[i].seq);
      for (uint32_t i : pc.p2p) seqs.push_back(sp.ops[i].seq);
      std::sort(seqs.begin(), seqs.end());
      for (int64_t q : seqs)
        if (!walk(q)) break;
    }
    // A recorder numbers a communicator's ops in the order they are issued: a collective whose
    // seq is lower than an earlier call's contradicts the file (edited, damaged, or one
    // communicator used by two threads at once). Which of the two is the rank's order is
    // unknown: from the lower seq on.
    if (info.exit_reason != schema::meta::kFrDump) {
      int64_t newest = INT64_MIN;
      for (uint32_t i : pc.colls) {
        const int64_t q = sp.ops[i].seq;
        if (q < newest) at(q, GapCause::kSeqOrder);
        newest = std::max(newest, q);
      }
    }
    for (uint32_t i : pc.colls) {
      const Signature& sig = s.sigs[sp.ops[i].sig];
      if (sig.op == vocab::Op::Coalesced && sig.parts.empty()) at(sp.ops[i].seq, GapCause::kPartsDropped);
    }
    // Drops the file does not locate may lie after its last op, or in history the size cap
    // retired (whose count and digest skipped them).
    if (unlocated) at(c.retired_through_seq > 0 ? 1 : expected, GapCause::kUnlocated);
    // A stopped recorder committed nothing after its stop point: when the file does not say
    // where that was (no stop-point row), after the last seq it holds.
    if (stopped) at(expected, GapCause::kStopped);
    if (cause == GapCause::kNone) continue;
    pc.gap = cause;
    pc.complete_through_seq = hole - 1;
    if (hole <= c.retired_through_seq) {
      // A hole in retired history: the retired count and digest skipped it; only checkpoints
      // taken before it stand.
      int64_t k = 0;
      for (const Comm::Checkpoint& cp : c.checkpoints)
        if (cp.seq < hole) k = std::max(k, cp.ordinal);
      pc.exact_through = std::min(k, pc.base);
    } else {
      int64_t n = 0;
      for (uint32_t i : pc.colls) n += sp.ops[i].seq < hole;
      pc.exact_through = pc.base + n;
    }
  }
}

}  // namespace

CommJoin join_comms(const std::vector<const Process*>& procs) {
  CommJoin j;
  j.gcomm.resize(procs.size());
  std::map<std::string, int> by_hash;
  for (size_t p = 0; p < procs.size(); ++p) {
    const Process& info = *procs[p];
    auto roles = comm_roles(info);
    auto families = comm_families(info);
    j.gcomm[p].assign(info.comms.size(), -1);
    for (size_t l = 0; l < info.comms.size(); ++l) {
      const Comm& c = info.comms[l];
      auto [it, fresh] = by_hash.emplace(c.hash, static_cast<int>(j.comms.size()));
      if (fresh) j.comms.push_back({c.hash, roles[l], families[l], c.name, c.nranks, {}});
      GlobalComm& g = j.comms[it->second];
      if (g.role != roles[l])
        j.warnings.push_back("comm " + short_hash(c.hash) + ": rank " + std::to_string(info.global_rank) +
                             " calls it " + roles[l] + ", an earlier rank " + g.role + " (using " + g.role + ")");
      // A process is a member once: only its own earlier comms can hold the same hash.
      bool dup = false;
      for (size_t e = 0; e < l; ++e) dup |= j.gcomm[p][e] == it->second;
      if (dup) {
        j.warnings.push_back("comm " + short_hash(c.hash) + " appears twice in " + info.path + "; using the first");
        continue;
      }
      g.members.push_back({static_cast<int>(p), static_cast<int>(l), c.rank});
      j.gcomm[p][l] = it->second;
    }
  }
  for (auto& g : j.comms)
    std::sort(g.members.begin(), g.members.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  return j;
}

CommIndex build_comm_index(const Schedule& s) {
  CommIndex idx;
  {
    std::vector<const Process*> procs;
    for (const auto& sp : s.procs) procs.push_back(&sp.info);
    CommJoin j = join_comms(procs);
    idx.comms = std::move(j.comms);
    idx.warnings = std::move(j.warnings);
    idx.per_proc.resize(s.procs.size());
    for (size_t p = 0; p < s.procs.size(); ++p) {
      idx.per_proc[p].resize(j.gcomm[p].size());
      for (size_t l = 0; l < j.gcomm[p].size(); ++l) {
        if (j.gcomm[p][l] < 0) continue;
        const Comm& c = s.procs[p].info.comms[l];
        ProcComm& pc = idx.per_proc[p][l];
        pc.gcomm = j.gcomm[p][l];
        pc.base = std::max<int64_t>(0, c.retired_collectives);
        // Not read (summary-first): aligned like retired history, proven by the digest at the cut.
        if (l < s.procs[p].unread.size()) pc.base = std::max(pc.base, s.procs[p].unread[l].collectives);
        pc.retired_p2p = std::max<int64_t>(0, c.retired_through_seq - pc.base);
      }
    }
  }
  for (size_t p = 0; p < s.procs.size(); ++p) {
    const auto& ops = s.procs[p].ops;
    // Sized exactly (a counting pass): at 164 M ops, growth by doubling would cost ~0.3 GB.
    {
      std::vector<std::pair<uint32_t, uint32_t>> n(idx.per_proc[p].size());  // p2p, colls
      for (const SchedOp& o : ops)
        if (o.comm < n.size()) ++(s.sigs[o.sig].cls == OpClass::kP2P ? n[o.comm].first : n[o.comm].second);
      for (size_t l = 0; l < n.size(); ++l) {
        idx.per_proc[p][l].p2p.reserve(n[l].first);
        idx.per_proc[p][l].colls.reserve(n[l].second);
      }
    }
    for (uint32_t i = 0; i < ops.size(); ++i) {
      ProcComm& pc = idx.per_proc[p][ops[i].comm];
      if (s.sigs[ops[i].sig].cls == OpClass::kP2P)
        pc.p2p.push_back(i);
      else
        pc.colls.push_back(i);
    }
    find_gaps(s, p, idx.per_proc[p]);
  }
  return idx;
}

std::vector<int> untraced_ranks(const GlobalComm& gc) {
  std::vector<int> out;
  size_t m = 0;
  for (int r = 0; r < gc.nranks; ++r) {
    while (m < gc.members.size() && gc.members[m].rank < r) ++m;
    if (m == gc.members.size() || gc.members[m].rank != r) out.push_back(r);
  }
  return out;
}

}  // namespace lockstep
