#include "rank_identity.h"

#include <map>

#include "comm_index.h"
#include "meta_keys.h"

namespace lockstep {
namespace {

std::string who(const Process& p) { return process_label(p); }

// The communicator of p that names its rank: the first root communicator (by creation) whose
// hash every process has. -1 when there is none.
int world_comm(const Process& p, const std::map<std::string, size_t>& holders, size_t nprocs) {
  int best = -1;
  for (size_t i = 0; i < p.comms.size(); ++i) {
    const Comm& c = p.comms[i];
    if (c.parent >= 0 || c.hash.empty() || c.nranks < static_cast<int>(nprocs) || c.rank < 0 || c.rank >= c.nranks)
      continue;
    auto it = holders.find(c.hash);
    if (it == holders.end() || it->second != nprocs) continue;
    if (best < 0 || c.init_call < p.comms[best].init_call) best = static_cast<int>(i);
  }
  return best;
}

}  // namespace

void resolve_rank_identity(const std::vector<Process*>& procs) {
  std::map<std::string, size_t> holders;  // comm hash -> processes that have it
  for (Process* p : procs) {
    std::map<std::string, bool> seen;
    for (const Comm& c : p->comms)
      if (!seen[c.hash]) {
        seen[c.hash] = true;
        ++holders[c.hash];
      }
  }
  for (Process* p : procs) {
    p->rank_conflict.clear();
    if (p->global_rank_source.empty()) {
      auto it = p->meta.find(schema::meta::kGlobalRankSource);
      if (it != p->meta.end()) p->global_rank_source = it->second;
    }
    int w = world_comm(*p, holders, procs.size());
    if (w < 0) continue;
    const Comm& c = p->comms[w];
    if (p->global_rank < 0) {
      p->global_rank = c.rank;
      p->global_rank_source = "inferred:comm " + short_hash(c.hash);
    } else if (p->global_rank != c.rank && c.nranks == static_cast<int>(procs.size())) {
      p->rank_conflict = (p->global_rank_source.empty() ? "the recorded rank" : p->global_rank_source) + " says rank " +
                         std::to_string(p->global_rank) + " but communicator " + short_hash(c.hash) +
                         ", which spans every process, says rank " + std::to_string(c.rank);
    }
  }
  std::map<int, std::vector<Process*>> by_rank;
  for (Process* p : procs)
    if (p->global_rank >= 0) by_rank[p->global_rank].push_back(p);
  for (auto& [rank, ps] : by_rank) {
    if (ps.size() < 2) continue;
    std::string claim = "rank " + std::to_string(rank) + " is claimed by " + std::to_string(ps.size()) + " processes:";
    for (size_t i = 0; i < ps.size(); ++i)
      claim += (i ? ", " : " ") + who(*ps[i]) + " (" +
               (ps[i]->global_rank_source.empty() ? "unknown source" : ps[i]->global_rank_source) + ")";
    for (Process* p : ps) p->rank_conflict += (p->rank_conflict.empty() ? "" : "; ") + claim;
  }
}

void resolve_rank_identity(Schedule& s) {
  std::vector<Process*> ps;
  for (auto& p : s.procs) ps.push_back(&p.info);
  resolve_rank_identity(ps);
}

}  // namespace lockstep
