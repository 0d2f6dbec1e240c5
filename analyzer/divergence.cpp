// First divergence per communicator: collectives aligned by ordinal across members,
// point-to-point messages matched pairwise per (sender, receiver) in issue order.
#include <algorithm>
#include <climits>
#include <limits>
#include <map>
#include <unordered_map>

#include "findings.h"
#include "saturating.h"

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
    case FindingKind::kDigestMismatch: return "digest_mismatch";
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
  int64_t each = -1;  // ncclAlltoAll: this many to and from every peer (not one entry per rank:
                      // nranks comes from the file and can be 2^24)
  int64_t sent_to(int r) const { return each >= 0 ? each : send.count(r) ? send.at(r) : 0; }
  int64_t received_from(int r) const { return each >= 0 ? each : recv.count(r) ? recv.at(r) : 0; }
};
Splits splits_of(const Signature& s) {
  Splits sp;
  if (s.parts.empty()) {
    sp.each = s.count;
    return sp;
  }
  for (auto& p : s.parts) {
    if (p.op == vocab::Op::Send) sp.send[p.peer] = sat_add(sp.send[p.peer], p.count);  // counts from the file
    if (p.op == vocab::Op::Recv) sp.recv[p.peer] = sat_add(sp.recv[p.peer], p.count);
  }
  return sp;
}

// Whether an all-to-all signature sends and receives the same amount to and from every one of
// nranks peers: members that all issued it pair up without comparing every pair.
bool uniform_all_to_all(const Signature& s, int nranks) {
  if (s.parts.empty()) return true;
  Splits sp = splits_of(s);
  if (sp.send.size() != static_cast<size_t>(nranks) || sp.recv.size() != static_cast<size_t>(nranks)) return false;
  int64_t amount = sp.send.begin()->second;
  for (int r = 0; r < nranks; ++r) {
    auto a = sp.send.find(r), b = sp.recv.find(r);
    if (a == sp.send.end() || b == sp.recv.end() || a->second != amount || b->second != amount) return false;
  }
  return true;
}

// Groups members by what they issued (linear), largest first; ties by first member.
std::vector<SideGroup> group_sides(const std::vector<int>& procs, const std::vector<uint32_t>& sig) {
  std::unordered_map<uint32_t, size_t> at;
  std::vector<SideGroup> groups;
  for (size_t i = 0; i < procs.size(); ++i) {
    auto [it, fresh] = at.emplace(sig[i], groups.size());
    if (fresh) groups.push_back(SideGroup{sig[i], 0, {}, false});
    groups[it->second].procs.push_back(procs[i]);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const SideGroup& a, const SideGroup& b) { return a.procs.size() > b.procs.size(); });
  return groups;
}

// The sides a finding lists: every member when few, else the odd ones (capped) and the first
// kSamplesPerGroup members of each other group. `members` are all compared sides, in rank order.
std::vector<Side> listed_sides(const std::vector<Side>& members, const std::vector<SideGroup>& groups) {
  if (members.size() <= kMaxListedSides) return members;
  std::unordered_map<int, size_t> group_of;
  for (size_t g = 0; g < groups.size(); ++g)
    for (int p : groups[g].procs) group_of[p] = g;
  std::vector<Side> out;
  std::vector<size_t> shown(groups.size(), 0);
  size_t odd_listed = 0;
  for (auto& sd : members) {
    size_t g = group_of[sd.proc];
    if (groups[g].odd ? odd_listed < kMaxListedSides : shown[g] < kSamplesPerGroup) {
      out.push_back(sd);
      odd_listed += groups[g].odd;
      ++shown[g];
    }
  }
  return out;
}

// One collective ordinal k (1-based) of one communicator; fills `out` and returns true on
// divergence. Members that retired ordinal k are not compared here (checkpoints.h does).
bool check_ordinal(const Schedule& s, const CommIndex& idx, int g, int64_t k, Divergence& out) {
  const GlobalComm& gc = idx.comms[g];
  std::vector<Side> sides;
  std::vector<uint32_t> sig;  // per side; kNotIssued = not issued
  std::vector<int> procs;
  bool missing = false, differ = false, all_a2a = true, any_parts = false;
  uint32_t first_sig = kNotIssued;
  for (auto& m : gc.members) {
    const ProcComm& pc = idx.of(m);
    if (!pc.known(k)) continue;  // retired here (checkpoints.h compares it), or past a hole: unknown
    Side side{m.proc, m.rank, -1};
    uint32_t sg = kNotIssued;
    int64_t at = pc.at(k);
    if (at >= 0) {
      side.op = pc.colls[at];
      sg = s.procs[m.proc].ops[side.op].sig;
      const Signature& sref = s.sigs[sg];
      all_a2a &= sref.cls == OpClass::kAllToAll;
      any_parts |= !sref.parts.empty();
      if (first_sig == kNotIssued) first_sig = sg;
      differ |= sg != first_sig;
    } else {
      missing = true;
    }
    sides.push_back(side);
    sig.push_back(sg);
    procs.push_back(m.proc);
  }
  if (sides.size() < 2) return false;
  bool uniform = all_a2a && !differ && first_sig != kNotIssued && uniform_all_to_all(s.sigs[first_sig], gc.nranks);
  if (!missing && !differ && !(all_a2a && any_parts && !uniform)) return false;
  out = Divergence{};
  out.gcomm = g;
  out.ordinal = k;
  out.members = sides.size();

  // Majority: the largest group of members that issued the same signature (missing = a group).
  out.groups = group_sides(procs, sig);
  for (auto& gr : out.groups)
    if (gr.sig == kNotIssued) out.not_issued = gr.procs;
  auto set_odd = [&] {
    if (sides.size() >= 3 && out.groups.size() >= 2 && out.groups[0].procs.size() > out.groups[1].procs.size())
      for (size_t r = 1; r < out.groups.size(); ++r) {
        out.groups[r].odd = true;
        out.odd.insert(out.odd.end(), out.groups[r].procs.begin(), out.groups[r].procs.end());
      }
    std::sort(out.odd.begin(), out.odd.end());
    out.sides = listed_sides(sides, out.groups);
  };

  if (all_a2a && !uniform) {
    // All issued an all-to-all: dtypes must agree; per-peer counts must pair up.
    bool dtype_ok = true;
    vocab::Dtype dt = vocab::Dtype::Mixed;
    for (size_t i = 0; i < sides.size(); ++i) {
      if (sig[i] == kNotIssued) continue;
      if (dt == vocab::Dtype::Mixed) dt = s.sigs[sig[i]].dtype;
      dtype_ok &= s.sigs[sig[i]].dtype == dt;
    }
    if (dtype_ok) {
      std::vector<Splits> sp(sides.size());
      for (size_t i = 0; i < sides.size(); ++i)
        if (sig[i] != kNotIssued) sp[i] = splits_of(s.sigs[sig[i]]);
      for (size_t i = 0; i < sides.size(); ++i) {
        if (sig[i] == kNotIssued) continue;
        for (size_t j = 0; j < sides.size(); ++j) {
          if (sig[j] == kNotIssued) continue;
          int ri = sides[i].comm_rank, rj = sides[j].comm_rank;
          int64_t sent = sp[i].sent_to(rj);
          int64_t expected = sp[j].received_from(ri);
          if (sent != expected) {
            out.kind = FindingKind::kAllToAllSplit;
            out.detail = "all-to-all split: comm rank " + std::to_string(ri) + " sends " + std::to_string(sent) +
                         " elements to comm rank " + std::to_string(rj) + ", which receives " +
                         std::to_string(expected) + " from it";
            out.odd.clear();
            out.sides = listed_sides(sides, out.groups);
            if (out.sides.size() < sides.size()) {
              // The two members that disagree are the ones to show.
              out.sides = {sides[i], sides[j]};
            }
            return true;
          }
        }
      }
      if (!missing) return false;
      differ = false;
    }
  }
  if (differ) {
    // Compare the majority's signature with the first other one.
    uint32_t major = out.groups[0].sig;
    uint32_t other = kNotIssued;
    for (auto& gr : out.groups)
      if (gr.sig != major && gr.sig != kNotIssued) {
        other = gr.sig;
        break;
      }
    if (major == kNotIssued) std::swap(major, other);
    if (major != kNotIssued && other != kNotIssued) {
      auto [kind, detail] = compare(s.sigs[major], s.sigs[other]);
      out.kind = kind;
      out.detail = detail;
      set_odd();
      return true;
    }
  }
  out.kind = FindingKind::kNeverIssued;
  out.detail = std::to_string(out.not_issued.size()) + " of " + std::to_string(sides.size()) +
               " members never issued collective #" + std::to_string(k);
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
  // The sender's (receiver's) records have a hole: its messages after it are unknown, so the
  // queue holds only those before it and a shorter queue proves nothing.
  bool sends_cut = false, recvs_cut = false;
};

void check_p2p(const Schedule& s, const CommIndex& idx, int g, std::vector<Divergence>& out) {
  const GlobalComm& gc = idx.comms[g];
  std::map<P2PChannel, PairQueue> pairs;  // identity.h: (comm, sender, receiver)
  std::map<int, int> proc_of_rank;
  for (auto& m : gc.members) proc_of_rank[m.rank] = m.proc;
  // Messages are paired by index per (sender, receiver): once the size cap retired some of a
  // member's p2p ops the indices no longer line up, and p2p is outside the digest. Such comms
  // are named by checkpoints.h (CommWindow::p2p_cut) instead of paired wrongly here.
  for (auto& m : gc.members)
    if (idx.of(m).retired_p2p > 0) return;
  for (auto& m : gc.members) {
    const ProcComm& pc = idx.of(m);
    const auto& ops = s.procs[m.proc].ops;
    size_t c = 0;
    for (uint32_t i : pc.p2p) {
      while (c < pc.colls.size() && pc.colls[c] < i) ++c;
      const Signature& sig = s.sigs[ops[i].sig];
      if (ops[i].seq > pc.complete_through_seq) continue;  // past a hole in its records
      auto add = [&](vocab::Op op, int peer, int64_t count, vocab::Dtype dtype) {
        if (peer < 0 || (op != vocab::Op::Send && op != vocab::Op::Recv)) return;
        Message msg{m.proc, i, count, dtype, static_cast<size_t>(pc.base) + c};
        const bool is_send = op == vocab::Op::Send;
        PairQueue& q = pairs[p2p_channel(g, m.rank, peer, is_send)];
        (is_send ? q.sends : q.recvs).push_back(msg);
      };
      if (sig.parts.empty())
        add(sig.op, sig.peer, sig.count, sig.dtype);
      else
        for (auto& p : sig.parts) add(p.op, p.peer, p.count, p.dtype);
    }
  }
  for (auto& [channel, q] : pairs) {
    const int src = channel.src, dst = channel.dst;  // not a structured binding: clang 14 cannot capture one
    // A peer whose file is missing cannot be checked.
    if (!proc_of_rank.count(src) || !proc_of_rank.count(dst)) continue;
    for (auto& m : gc.members) {
      if (m.rank == src && !idx.of(m).whole()) q.sends_cut = true;
      if (m.rank == dst && !idx.of(m).whole()) q.recvs_cut = true;
    }
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
    const bool fewer_cut = q.sends.size() < q.recvs.size() ? q.sends_cut : q.recvs_cut;
    if (!found && q.sends.size() != q.recvs.size() && !fewer_cut) {
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
  std::vector<int8_t> uniform(s.sigs.size());  // per sig, for this comm: 0 unknown, 1 yes, 2 no
  for (size_t g = 0; g < idx.comms.size(); ++g) {
    const GlobalComm& gc = idx.comms[g];
    if (gc.members.size() < 2) continue;
    std::fill(uniform.begin(), uniform.end(), 0);
    // Aligned by absolute ordinal: from the first ordinal some member still holds to the last
    // one any member issued.
    int64_t first = INT64_MAX, last = 0;
    std::vector<const ProcComm*> views;
    for (auto& m : gc.members) {
      const ProcComm& pc = idx.of(m);
      first = std::min(first, pc.base + 1);
      last = std::max(last, pc.end());
      views.push_back(&pc);
    }
    // Fast path, no allocation per ordinal: whether every member issued the same signature at
    // ordinal k, worked out for a block of ordinals at a time, member by member: ordinal by
    // ordinal, each member cost a cache miss or three (its view, its collective, its op), the
    // most of the analysis at 131,072 ranks.
    struct Block {
      int64_t lo = 0, hi = 0;
      std::vector<uint8_t> same, any;  // per ordinal: no disagreement so far; some member holds it
      std::vector<uint32_t> held, sig0;
    } b;
    constexpr int64_t kBlock = 128;
    auto fill = [&](int64_t lo) {
      b.lo = lo, b.hi = (last - lo < kBlock ? last : lo + kBlock - 1) + 1;
      const size_t n = static_cast<size_t>(b.hi - b.lo);
      b.same.assign(n, 1), b.any.assign(n, 0), b.held.assign(n, 0), b.sig0.assign(n, kNotIssued);
      for (size_t i = 0; i < views.size(); ++i) {
        const ProcComm& v = *views[i];
        const std::vector<SchedOp>& ops = s.procs[gc.members[i].proc].ops;
        for (int64_t k = b.lo; k < b.hi; ++k) {
          const size_t j = static_cast<size_t>(k - b.lo);
          const int64_t at = v.at(k);
          b.any[j] |= at >= 0;
          if (!b.same[j] || !v.known(k)) continue;  // retired there (checkpoints.h compares it), or past a hole
          if (at < 0) {
            b.same[j] = 0;
            continue;
          }
          ++b.held[j];
          const uint32_t sg = ops[v.colls[at]].sig;
          if (b.sig0[j] == kNotIssued) b.sig0[j] = sg;
          else if (sg != b.sig0[j]) b.same[j] = 0;
        }
      }
    };
    Divergence d;
    for (int64_t k = first, next = first; k <= last; k = next) {
      if (k < b.lo || k >= b.hi) fill(k);
      const size_t j = static_cast<size_t>(k - b.lo);
      // An ordinal no member holds (between one member's retired history and another's window)
      // compares like every ordinal up to the next window edge: go there (a crafted retired
      // count can open a gap of billions of ordinals).
      next = k + 1;
      if (!b.any[j]) {
        next = last + 1;
        for (const ProcComm* v : views)
          for (int64_t edge : {v->base + 1, v->end() + 1})
            if (edge > k) next = std::min(next, edge);
      }
      // Every member issued the same signature (and it is not an all-to-all whose per-peer
      // splits still need pairing up).
      const bool same = b.same[j];
      const uint32_t sig0 = b.sig0[j];
      const size_t held = b.held[j];
      if (same && held < 2) continue;
      if (same && s.sigs[sig0].cls == OpClass::kAllToAll && !s.sigs[sig0].parts.empty()) {
        if (!uniform[sig0]) uniform[sig0] = uniform_all_to_all(s.sigs[sig0], gc.nranks) ? 1 : 2;
        if (uniform[sig0] == 1) continue;
      } else if (same) {
        continue;
      }
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
