// Cross-communicator order inversion. For communicators A and B and a process p in both, let
// a_p(j) = how many of A's collectives p issued before B's j-th. Two processes with different
// a(j) issue some A op and B#j in opposite orders: a latent deadlock (NCCL requires the same
// submission order across communicators on every rank), even if this run completed.
#include <algorithm>
#include <map>

#include "findings.h"

namespace lockstep {
namespace {

// a(j) for every B collective j of one process: a two-pointer merge, O(|A| + |B|).
std::vector<uint32_t> a_before_b(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::vector<uint32_t> out(b.size());
  size_t i = 0;
  for (size_t j = 0; j < b.size(); ++j) {
    while (i < a.size() && a[i] < b[j]) ++i;
    out[j] = static_cast<uint32_t>(i);
  }
  return out;
}

}  // namespace

std::vector<Divergence> find_order_inversions(const Schedule& s, const CommIndex& idx) {
  // Pairs of communicators and the processes that are members of both.
  std::map<std::pair<int, int>, std::vector<int>> pairs;
  for (size_t p = 0; p < idx.per_proc.size(); ++p) {
    const auto& pcs = idx.per_proc[p];
    for (size_t x = 0; x < pcs.size(); ++x)
      for (size_t y = 0; y < pcs.size(); ++y) {
        int ga = pcs[x].gcomm, gb = pcs[y].gcomm;
        if (ga < 0 || gb < 0 || ga >= gb || pcs[x].colls.empty() || pcs[y].colls.empty()) continue;
        pairs[{ga, gb}].push_back(static_cast<int>(p));
      }
  }
  std::vector<Divergence> out;
  for (auto& [key, procs] : pairs) {
    if (procs.size() < 2) continue;
    const int ga = key.first, gb = key.second;  // not a structured binding: clang 14 cannot capture one
    auto lists = [&](int p) {
      return std::make_pair(&idx.per_proc[p][idx.local_of(ga, p)], &idx.per_proc[p][idx.local_of(gb, p)]);
    };
    // Bounded traces: the size cap retires a process's oldest ops first, so every retired A op
    // precedes its retained B ops: a(J) = A's retired count + retained A ops before it, and
    // processes are compared at the same absolute B ordinal J (never by position).
    int ref = procs[0];
    auto [ref_a, ref_b] = lists(ref);
    auto aref = a_before_b(ref_a->colls, ref_b->colls);
    bool found = false;
    for (size_t pi = 1; pi < procs.size() && !found; ++pi) {
      int p = procs[pi];
      auto [pa, pb] = lists(p);
      auto ap = a_before_b(pa->colls, pb->colls);
      // Past a hole in a member's records (dropped by its recorder) its ordinals are unknown:
      // B#J is compared only where both hold B exactly up to it, and a(J) only where the A op
      // after it is known too (a dropped A op could have come before B#J: the count would be
      // short by it). What is not compared is the hole's evidence item, never an inversion.
      int64_t first = std::max(ref_b->base, pb->base) + 1;
      int64_t last = std::min({ref_b->end(), pb->end(), ref_b->exact_through, pb->exact_through});
      for (int64_t J = first; J <= last && !found; ++J) {
        int64_t ap_j = pa->base + ap[pb->at(J)], aref_j = ref_a->base + aref[ref_b->at(J)];
        if (ap_j == aref_j) continue;
        if (ap_j >= pa->exact_through || aref_j >= ref_a->exact_through) continue;
        // On `late`, A#lo+1 comes after B#J; on `early`, before. Only an inversion if `late` has
        // issued A#lo+1 at all (otherwise it simply has not got there yet).
        bool p_late = ap_j < aref_j;
        int late = p_late ? p : ref, early = p_late ? ref : p;
        int64_t lo = std::min(ap_j, aref_j);
        const ProcComm& late_pa = p_late ? *pa : *ref_a;
        const ProcComm& early_pa = p_late ? *ref_a : *pa;
        // A#lo+1 must be held by both to be shown (retired on one: known by digest only).
        if (late_pa.at(lo + 1) < 0 || early_pa.at(lo + 1) < 0) continue;
        const auto& late_a = late_pa.colls;
        const auto& early_a = early_pa.colls;
        const auto& late_b = p_late ? pb->colls : ref_b->colls;
        const auto& early_b = p_late ? ref_b->colls : pb->colls;
        size_t la = static_cast<size_t>(late_pa.at(lo + 1)), ea = static_cast<size_t>(early_pa.at(lo + 1));
        size_t lb = static_cast<size_t>((p_late ? *pb : *ref_b).at(J)), eb = static_cast<size_t>((p_late ? *ref_b : *pb).at(J));
        // Ops of one ncclGroupStart/End are launched together: their call order is not an order.
        auto grouped = [](const SchedProcess& p, size_t x, size_t y) {
          const uint32_t g = p.group_of(x);
          return g && g == p.group_of(y);
        };
        if (grouped(s.procs[late], late_a[la], late_b[lb]) || grouped(s.procs[early], early_a[ea], early_b[eb])) continue;
        Divergence d;
        d.kind = FindingKind::kOrderInversion;
        d.gcomm = ga;
        d.ordinal = lo + 1;
        d.gcomm_b = gb;
        d.ordinal_b = J;
        auto rank_in = [&](int g, int proc) {
          for (auto& m : idx.comms[g].members)
            if (m.proc == proc) return m.rank;
          return -1;
        };
        d.sides = {Side{early, rank_in(ga, early), early_a[ea]}, Side{late, rank_in(ga, late), late_a[la]}};
        d.sides_b = {Side{early, rank_in(gb, early), early_b[eb]}, Side{late, rank_in(gb, late), late_b[lb]}};
        // "rank 3"; a process without a global rank by its file ("process 1 (vm pid 2981)"), never "rank -1".
        auto who = [&](int proc) { return rank_label(s.procs[proc].info, proc); };
        d.detail = who(early) + " issues " + short_hash(idx.comms[ga].hash) + " #" + std::to_string(lo + 1) +
                   " before " + short_hash(idx.comms[gb].hash) + " #" + std::to_string(J) + ", " + who(late) +
                   " after it";
        out.push_back(std::move(d));
        found = true;
      }
    }
  }
  return out;
}

}  // namespace lockstep
