// First divergence per communicator: collectives aligned by ordinal across members,
// point-to-point messages matched pairwise per (sender, receiver) in issue order.
#include <algorithm>
#include <limits>
#include <map>

#include "findings.h"

namespace lockstep {

const char* kind_name(FindingKind k) {
  switch (k) {
    case FindingKind::kOpType: return "op_type";
    case FindingKind::kDtype: return "dtype";
    case FindingKind::kCount: return "count";
    case FindingKind::kRoot: return "root";
    case FindingKind::kRedOp: return "redop";
    case FindingKind::kGroupContents: return "group_contents";
    case FindingKind::kAllToAllSplit: return "all_to_all_split";
    case FindingKind::kNeverIssued: return "never_issued";
    case FindingKind::kP2PPairing: return "p2p_pairing";
    case FindingKind::kP2PCount: return "p2p_count";
    case FindingKind::kP2PDtype: return "p2p_dtype";
    case FindingKind::kP2PInterleave: return "p2p_interleave";
    case FindingKind::kOrderInversion: return "order_inversion";
  }
  return "unknown";
}

namespace {

std::pair<FindingKind, std::string> compare(const Signature& a, const Signature& b) {
  auto d = [](const std::string& x, const std::string& y) { return x + " vs " + y; };
  if (a.op != b.op) return {FindingKind::kOpType, "op type differs: " + d(vocab::name(a.op), vocab::name(b.op))};
  if (a.dtype != b.dtype) return {FindingKind::kDtype, "dtype differs: " + d(vocab::name(a.dtype), vocab::name(b.dtype))};
  if (a.count != b.count) return {FindingKind::kCount, "count differs: " + d(std::to_string(a.count), std::to_string(b.count))};
  if (a.root != b.root) return {FindingKind::kRoot, "root differs: " + d(std::to_string(a.root), std::to_string(b.root))};
  if (a.redop != b.redop) return {FindingKind::kRedOp, "reduction op differs: " + d(vocab::name(a.redop), vocab::name(b.redop))};
  return {FindingKind::kGroupContents, "grouped calls differ: " + describe_signature(a) + " vs " + describe_signature(b)};
}

// Elements member `self` sends to / receives from each peer in one all-to-all. ncclAlltoAll
// (no parts) moves `count` elements to and from every peer.
struct Splits {
  std::map<int, int64_t> send, recv;
};
Splits splits_of(const Signature& s, int nranks) {
  Splits sp;
  if (s.parts.empty()) {
    for (int r = 0; r < nranks; ++r) sp.send[r] = sp.recv[r] = s.count;
    return sp;
  }
  for (auto& p : s.parts) {
    if (p.op == vocab::Op::Send) sp.send[p.peer] += p.count;
    if (p.op == vocab::Op::Recv) sp.recv[p.peer] += p.count;
  }
  return sp;
}

// One collective ordinal of one communicator; fills `out` and returns true on divergence.
bool check_ordinal(const Schedule& s, const CommIndex& idx, int g, size_t k, Divergence& out) {
  const GlobalComm& gc = idx.comms[g];
  std::vector<Side> sides;
  std::vector<uint32_t> sig;  // per side; UINT32_MAX = not issued
  bool missing = false, differ = false, all_a2a = true, any_parts = false;
  for (auto& m : gc.members) {
    const auto& colls = idx.of(m).colls;
    Side side{m.proc, m.rank, -1};
    uint32_t sg = std::numeric_limits<uint32_t>::max();
    if (k < colls.size()) {
      side.op = colls[k];
      sg = s.procs[m.proc].ops[colls[k]].sig;
      const Signature& sref = s.sigs[sg];
      all_a2a &= sref.cls == OpClass::kAllToAll;
      any_parts |= !sref.parts.empty();
      for (uint32_t x : sig)
        if (x != std::numeric_limits<uint32_t>::max() && x != sg) differ = true;
    } else {
      missing = true;
    }
    sides.push_back(side);
    sig.push_back(sg);
  }
  if (!missing && !differ && !(all_a2a && any_parts)) return false;
  out = Divergence{};
  out.gcomm = g;
  out.ordinal = static_cast<int64_t>(k) + 1;
  out.sides = sides;

  // Majority: the largest group of members that issued the same signature (missing = a group).
  std::map<uint32_t, std::vector<int>> groups;
  for (size_t i = 0; i < sides.size(); ++i) groups[sig[i]].push_back(static_cast<int>(i));
  std::vector<std::pair<uint32_t, std::vector<int>>> ranked(groups.begin(), groups.end());
  std::stable_sort(ranked.begin(), ranked.end(), [](auto& a, auto& b) {
    return a.second.size() != b.second.size() ? a.second.size() > b.second.size() : a.second[0] < b.second[0];
  });
  auto set_odd = [&] {
    if (sides.size() >= 3 && ranked.size() >= 2 && ranked[0].second.size() > ranked[1].second.size())
      for (size_t r = 1; r < ranked.size(); ++r)
        for (int i : ranked[r].second) out.odd.push_back(sides[i].proc);
  };

  if (all_a2a) {
    // All issued an all-to-all: dtypes must agree; per-peer counts must pair up.
    bool dtype_ok = true;
    vocab::Dtype dt = vocab::Dtype::Mixed;
    for (size_t i = 0; i < sides.size(); ++i) {
      if (sig[i] == std::numeric_limits<uint32_t>::max()) continue;
      if (dt == vocab::Dtype::Mixed) dt = s.sigs[sig[i]].dtype;
      dtype_ok &= s.sigs[sig[i]].dtype == dt;
    }
    if (dtype_ok) {
      std::vector<Splits> sp(sides.size());
      for (size_t i = 0; i < sides.size(); ++i)
        if (sig[i] != std::numeric_limits<uint32_t>::max()) sp[i] = splits_of(s.sigs[sig[i]], gc.nranks);
      for (size_t i = 0; i < sides.size(); ++i) {
        if (sig[i] == std::numeric_limits<uint32_t>::max()) continue;
        for (size_t j = 0; j < sides.size(); ++j) {
          if (sig[j] == std::numeric_limits<uint32_t>::max()) continue;
          int ri = sides[i].comm_rank, rj = sides[j].comm_rank;
          int64_t sent = sp[i].send.count(rj) ? sp[i].send[rj] : 0;
          int64_t expected = sp[j].recv.count(ri) ? sp[j].recv[ri] : 0;
          if (sent != expected) {
            out.kind = FindingKind::kAllToAllSplit;
            out.detail = "all-to-all split: comm rank " + std::to_string(ri) + " sends " + std::to_string(sent) +
                         " elements to comm rank " + std::to_string(rj) + ", which receives " +
                         std::to_string(expected) + " from it";
            out.odd.clear();
            return true;
          }
        }
      }
      if (!missing) return false;
      differ = false;
    }
  }
  if (differ) {
    // Compare the first odd member with the majority's signature.
    uint32_t major = ranked[0].first;
    uint32_t other = std::numeric_limits<uint32_t>::max();
    for (size_t r = 0; r < ranked.size(); ++r)
      if (ranked[r].first != major && ranked[r].first != std::numeric_limits<uint32_t>::max()) {
        other = ranked[r].first;
        break;
      }
    if (major == std::numeric_limits<uint32_t>::max()) std::swap(major, other);
    if (major != std::numeric_limits<uint32_t>::max() && other != std::numeric_limits<uint32_t>::max()) {
      auto [kind, detail] = compare(s.sigs[major], s.sigs[other]);
      out.kind = kind;
      out.detail = detail;
      set_odd();
      return true;
    }
  }
  out.kind = FindingKind::kNeverIssued;
  std::vector<std::string> who;
  int n_missing = 0;
  for (auto& sd : sides)
    if (sd.op < 0) ++n_missing;
  out.detail = std::to_string(n_missing) + " of " + std::to_string(sides.size()) +
               " members never issued collective #" + std::to_string(k + 1);
  set_odd();
  return true;
}

struct Message {
  int proc;
  uint32_t op;
  int64_t count;
  vocab::Dtype dtype;
  size_t colls_before;  // collectives of the comm this process issued before the message
};
struct PairQueue {
  std::vector<Message> sends, recvs;
};

void check_p2p(const Schedule& s, const CommIndex& idx, int g, std::vector<Divergence>& out) {
  const GlobalComm& gc = idx.comms[g];
  std::map<std::pair<int, int>, PairQueue> pairs;  // (sender, receiver) comm ranks
  std::map<int, int> proc_of_rank;
  for (auto& m : gc.members) proc_of_rank[m.rank] = m.proc;
  for (auto& m : gc.members) {
    const ProcComm& pc = idx.of(m);
    const auto& ops = s.procs[m.proc].ops;
    size_t c = 0;
    for (uint32_t i : pc.p2p) {
      while (c < pc.colls.size() && pc.colls[c] < i) ++c;
      const Signature& sig = s.sigs[ops[i].sig];
      auto add = [&](vocab::Op op, int peer, int64_t count, vocab::Dtype dtype) {
        if (peer < 0) return;
        Message msg{m.proc, i, count, dtype, c};
        if (op == vocab::Op::Send) pairs[{m.rank, peer}].sends.push_back(msg);
        if (op == vocab::Op::Recv) pairs[{peer, m.rank}].recvs.push_back(msg);
      };
      if (sig.parts.empty())
        add(sig.op, sig.peer, sig.count, sig.dtype);
      else
        for (auto& p : sig.parts) add(p.op, p.peer, p.count, p.dtype);
    }
  }
  for (auto& [key, q] : pairs) {
    const int src = key.first, dst = key.second;  // not a structured binding: clang 14 cannot capture one
    // A peer whose file is missing cannot be checked.
    if (!proc_of_rank.count(src) || !proc_of_rank.count(dst)) continue;
    size_t n = std::min(q.sends.size(), q.recvs.size());
    Divergence d;
    d.gcomm = g;
    auto sides = [&](int64_t send_op, int64_t recv_op) {
      d.sides = {Side{proc_of_rank[src], src, send_op}, Side{proc_of_rank[dst], dst, recv_op}};
    };
    bool found = false;
    for (size_t k = 0; k < n && !found; ++k) {
      const Message& a = q.sends[k];
      const Message& b = q.recvs[k];
      d.ordinal = static_cast<int64_t>(k) + 1;
      std::string msg = "message #" + std::to_string(k + 1) + " from comm rank " + std::to_string(src) + " to " +
                        std::to_string(dst) + ": ";
      if (a.dtype != b.dtype) {
        d.kind = FindingKind::kP2PDtype;
        d.detail = msg + "send " + vocab::stored_name(a.dtype) + " vs recv " + vocab::stored_name(b.dtype);
      } else if (a.count != b.count) {
        d.kind = FindingKind::kP2PCount;
        d.detail = msg + "send count " + std::to_string(a.count) + " vs recv count " + std::to_string(b.count);
      } else if (a.colls_before != b.colls_before) {
        d.kind = FindingKind::kP2PInterleave;
        d.detail = msg + "sent after collective #" + std::to_string(a.colls_before) + " of the comm, received after #" +
                   std::to_string(b.colls_before);
      } else {
        continue;
      }
      sides(a.op, b.op);
      found = true;
    }
    if (!found && q.sends.size() != q.recvs.size()) {
      bool more_sends = q.sends.size() > q.recvs.size();
      d.kind = FindingKind::kP2PPairing;
      d.ordinal = static_cast<int64_t>(n) + 1;
      d.detail = "comm rank " + std::to_string(src) + " sends " + std::to_string(q.sends.size()) +
                 " messages to comm rank " + std::to_string(dst) + ", which posts " + std::to_string(q.recvs.size()) +
                 " receives from it";
      sides(more_sends ? static_cast<int64_t>(q.sends[n].op) : -1, more_sends ? -1 : static_cast<int64_t>(q.recvs[n].op));
      found = true;
    }
    if (found) out.push_back(std::move(d));
  }
}

}  // namespace

std::vector<Divergence> find_divergences(const Schedule& s, const CommIndex& idx) {
  std::vector<Divergence> out;
  for (size_t g = 0; g < idx.comms.size(); ++g) {
    const GlobalComm& gc = idx.comms[g];
    if (gc.members.size() < 2) continue;
    size_t longest = 0;
    struct View {
      const std::vector<uint32_t>* colls;
      const std::vector<SchedOp>* ops;
    };
    std::vector<View> views;
    for (auto& m : gc.members) {
      longest = std::max(longest, idx.of(m).colls.size());
      views.push_back({&idx.of(m).colls, &s.procs[m.proc].ops});
    }
    Divergence d;
    for (size_t k = 0; k < longest; ++k) {
      // Fast path, no allocation: every member issued the same signature (and it is not an
      // all-to-all whose per-peer splits still need pairing up).
      bool same = true;
      uint32_t sig0 = 0;
      for (size_t i = 0; i < views.size() && same; ++i) {
        if (k >= views[i].colls->size()) {
          same = false;
          break;
        }
        uint32_t sg = (*views[i].ops)[(*views[i].colls)[k]].sig;
        if (i == 0) sig0 = sg;
        same = sg == sig0;
      }
      if (same && !(s.sigs[sig0].cls == OpClass::kAllToAll && !s.sigs[sig0].parts.empty())) continue;
      if (check_ordinal(s, idx, static_cast<int>(g), k, d)) {
        out.push_back(std::move(d));
        break;
      }
    }
    check_p2p(s, idx, static_cast<int>(g), out);
  }
  return out;
}

int first_in_causal_order(const Schedule& s, const std::vector<const Divergence*>& f) {
  if (f.empty()) return -1;
  // Earliest call index of each finding on each process (missing sides do not count).
  auto positions = [&](const Divergence& d) {
    std::map<int, int64_t> pos;
    auto add = [&](const std::vector<Side>& sides) {
      for (auto& sd : sides) {
        if (sd.op < 0) continue;
        int64_t ci = s.procs[sd.proc].ops[sd.op].call_index;
        auto [it, fresh] = pos.emplace(sd.proc, ci);
        if (!fresh) it->second = std::min(it->second, ci);
      }
    };
    add(d.sides);
    add(d.sides_b);
    return pos;
  };
  std::vector<std::map<int, int64_t>> pos;
  for (auto* d : f) pos.push_back(positions(*d));
  for (size_t i = 0; i < f.size(); ++i) {
    bool preceded = false;
    for (size_t j = 0; j < f.size() && !preceded; ++j) {
      if (i == j) continue;
      for (auto& [proc, ci] : pos[j]) {
        auto it = pos[i].find(proc);
        if (it != pos[i].end() && ci < it->second) {
          preceded = true;
          break;
        }
      }
    }
    if (!preceded) return static_cast<int>(i);
  }
  return 0;  // inconsistent orders between processes: keep the first reported
}

}  // namespace lockstep
