#include "comm_index.h"

#include <algorithm>
#include <map>

namespace lockstep {

int CommIndex::local_of(int gcomm, int proc) const {
  const auto& mine = per_proc[proc];
  for (size_t l = 0; l < mine.size(); ++l)
    if (mine[l].gcomm == gcomm) return static_cast<int>(l);
  return -1;
}

CommIndex build_comm_index(const Schedule& s) {
  CommIndex idx;
  idx.per_proc.resize(s.procs.size());
  std::map<std::string, int> by_hash;
  // Communicators in the order the lowest-ranked process created them: stable report order.
  for (size_t p = 0; p < s.procs.size(); ++p) {
    const Process& info = s.procs[p].info;
    auto roles = comm_roles(info);
    idx.per_proc[p].resize(info.comms.size());
    for (size_t l = 0; l < info.comms.size(); ++l) {
      const Comm& c = info.comms[l];
      auto [it, fresh] = by_hash.emplace(c.hash, static_cast<int>(idx.comms.size()));
      if (fresh) idx.comms.push_back({c.hash, roles[l], c.name, c.nranks, {}});
      GlobalComm& g = idx.comms[it->second];
      if (g.role != roles[l])
        idx.warnings.push_back("comm " + short_hash(c.hash) + ": rank " + std::to_string(info.global_rank) +
                               " calls it " + roles[l] + ", an earlier rank " + g.role + " (using " + g.role + ")");
      // A process is a member once: only its own earlier comms can hold the same hash.
      bool dup = false;
      for (size_t e = 0; e < l; ++e) dup |= idx.per_proc[p][e].gcomm == it->second;
      if (dup) {
        idx.warnings.push_back("comm " + short_hash(c.hash) + " appears twice in " + info.path + "; using the first");
        continue;
      }
      g.members.push_back({static_cast<int>(p), static_cast<int>(l), c.rank});
      ProcComm& pc = idx.per_proc[p][l];
      pc.gcomm = it->second;
      pc.base = std::max<int64_t>(0, c.retired_collectives);
      // Not read (summary-first): aligned like retired history, proven by the digest at the cut.
      if (l < s.procs[p].unread.size()) pc.base = std::max(pc.base, s.procs[p].unread[l].collectives);
      pc.retired_p2p = std::max<int64_t>(0, c.retired_through_seq - pc.base);
    }
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
  }
  for (auto& g : idx.comms)
    std::sort(g.members.begin(), g.members.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
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
