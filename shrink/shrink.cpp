#include "shrink.h"

#include "comm_index.h"
#include "identity.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

namespace lockstep::shrink {

namespace {

using OpKind = vocab::Op;

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Signature

std::string Signature::text() const {
  std::string v = model::verdict_name(verdict);
  if (kind == "mismatch") return v + ": collective mismatch (" + field + ") between " + join(steps, " and ");
  if (kind == "cycle")
    return v + ": wait-for cycle over " + std::to_string(comms) + " communicator" + (comms == 1 ? "" : "s") + ": " +
           join(steps, " -> ") + (field == "never_issued" ? " (a rank waits for an op its peer never issues)" : "");
  if (kind == "stuck") return v + ": ranks stuck in " + join(steps, ", ");
  return v;
}

Signature signature_of(const lockstep::Schedule& s, const model::Result& r) {
  Signature sig;
  sig.verdict = r.verdict;
  if (r.verdict == model::Verdict::kCanComplete) {
    sig.kind = "none";
    return sig;
  }
  // A witness step's op: its description and its communicator, numbered across ranks by hash.
  struct Item {
    vocab::Op op;
    int comm;
    int root;
    vocab::RedOp redop;
    vocab::Dtype dtype;
    int64_t count;
  };
  std::map<std::string, int> comm_ids;
  std::deque<Item> storage;
  auto item = [&](const model::WitnessStep& w) -> const Item* {
    if (w.proc < 0 || w.proc >= static_cast<int>(s.procs.size())) return nullptr;
    const auto& sp = s.procs[w.proc];
    if (w.op < 0 || w.op >= static_cast<int>(sp.ops.size())) return nullptr;
    const SchedOp& o = sp.ops[w.op];
    const lockstep::Signature& d = s.sigs[o.sig];
    const std::string& hash = o.comm < sp.info.comms.size() ? sp.info.comms[o.comm].hash : std::string();
    const int comm = comm_ids.try_emplace(hash, static_cast<int>(comm_ids.size())).first->second;
    storage.push_back({d.op, comm, d.root, d.redop, d.dtype, d.count});
    return &storage.back();
  };
  if (!r.mismatch.empty()) {
    sig.kind = "mismatch";
    std::vector<const Item*> its;
    for (const auto& w : r.mismatch)
      if (const auto* it = item(w)) its.push_back(it);
    std::set<std::string> kinds;
    for (const auto* it : its) kinds.insert(vocab::name(it->op));
    auto differs = [&](auto get) {
      for (const auto* it : its)
        if (get(*it) != get(*its.front())) return true;
      return false;
    };
    if (its.empty()) sig.field = "other";
    else if (kinds.size() > 1) sig.field = "op_type";
    else if (differs([](const Item& i) { return i.root; })) sig.field = "root";
    else if (differs([](const Item& i) { return i.redop; })) sig.field = "redop";
    else if (differs([](const Item& i) { return i.dtype; })) sig.field = "dtype";
    else if (differs([](const Item& i) { return i.count; })) sig.field = "count";
    else sig.field = "other";
    sig.steps.assign(kinds.begin(), kinds.end());
    return sig;
  }
  if (!r.cycle_steps.empty()) {
    sig.kind = "cycle";
    std::vector<std::pair<int, std::string>> steps;  // (comm, op); comm -1: a host wait
    sig.field = "issued";
    for (const auto& w : r.cycle_steps) {
      if (w.never_issued) sig.field = "never_issued";
      const auto* it = item(w);
      if (it) steps.push_back({it->comm, vocab::name(it->op)});
      else steps.push_back({-1, "host_wait"});
    }
    const size_t m = steps.size();
    size_t start = m;  // a step whose communicator differs from the previous one's
    for (size_t j = 0; j < m; ++j)
      if (steps[j].first != steps[(j + m - 1) % m].first) {
        start = j;
        break;
      }
    std::vector<std::pair<int, std::vector<std::string>>> runs;
    for (size_t k = 0; k < m; ++k) {
      const auto& st = steps[(start == m ? 0 : start + k) % m];
      if (runs.empty() || runs.back().first != st.first) runs.push_back({st.first, {}});
      auto& ops = runs.back().second;
      if (ops.empty() || ops.back() != st.second) ops.push_back(st.second);
    }
    std::set<int> distinct;
    for (const auto& r2 : runs)
      if (r2.first >= 0) distinct.insert(r2.first);
    sig.comms = static_cast<int>(distinct.size());
    std::vector<std::string> best;
    for (size_t rot = 0; rot < runs.size(); ++rot) {
      std::map<int, int> rename;
      std::vector<std::string> v;
      for (size_t k = 0; k < runs.size(); ++k) {
        const auto& run = runs[(rot + k) % runs.size()];
        std::string c = "host";
        if (run.first >= 0) {
          auto [it, fresh] = rename.try_emplace(run.first, static_cast<int>(rename.size()));
          c = "c" + std::to_string(it->second);
        }
        v.push_back(c + " " + join(run.second, "+"));
      }
      if (best.empty() || v < best) best = v;
    }
    sig.steps = best;
    return sig;
  }
  sig.kind = "stuck";
  std::set<std::string> kinds;
  for (const auto& w : r.ranks) {
    const auto* it = item({w.proc, w.op});
    kinds.insert(it ? vocab::name(it->op) : "host_wait");
  }
  sig.steps.assign(kinds.begin(), kinds.end());
  return sig;
}

Size size_of(const Trace& t) {
  Size z;
  z.ranks = static_cast<int>(t.processes.size());
  std::set<std::string> hashes;
  for (const auto& p : t.processes) {
    for (const auto& c : p.comms)
      if (c.init_rc == 0 && c.nranks > 0) hashes.insert(c.hash);
    for (const auto& o : p.ops)
      if (sequenced(o)) {
        ++z.ops;
        z.max_count = std::max(z.max_count, o.count);
      }
    z.waits += static_cast<int>(p.waits.size());
  }
  z.comms = static_cast<int>(hashes.size());
  return z;
}

Size size_of(const lockstep::Schedule& s) {
  Size z;
  z.ranks = static_cast<int>(s.procs.size());
  std::set<std::string> hashes;
  for (const SchedProcess& p : s.procs) {
    for (const auto& c : p.info.comms)
      if (c.init_rc == 0 && c.nranks > 0) hashes.insert(c.hash);
    z.ops += static_cast<int>(p.ops.size());  // the schedule holds only ops that enqueued work
    for (const SchedOp& o : p.ops) z.max_count = std::max(z.max_count, s.sigs[o.sig].count);
    z.waits += static_cast<int>(p.waits.size());
  }
  z.comms = static_cast<int>(hashes.size());
  return z;
}

// ---------------------------------------------------------------------------------------------
// The case: the trace as global communicators and per-rank items, and a selection of it.

namespace {

struct CItem {
  bool is_wait = false;
  Op op;      // op.comm: global communicator index
  Wait wait;
  int key = -1;
};

struct CProc {
  int orig_rank = 0;
  std::vector<CItem> items;                // in call order
  std::vector<std::pair<int, int>> comms;  // (global communicator, comm rank), by global index
};

struct CComm {
  std::string hash, name;
  int nranks = 0;
  std::vector<int> members;  // proc per comm rank, -1: not in the trace
};

struct Case {
  std::vector<CProc> procs;
  std::vector<CComm> comms;
  int nkeys = 0;
};

struct Sel {
  std::vector<char> rank_on, comm_on, key_on;
  std::vector<std::vector<char>> item_on;
  std::vector<std::vector<int64_t>> count;
  bool one_stream = false, one_thread = false;
};

bool has_parts(const Op& o) { return !o.parts.empty(); }

// The case is made of the trace's rows (read through `rows`), the form a candidate and the
// reproducer are written in; the schedule gives the processes' headers, in its order.
Case make_case(const lockstep::Schedule& t, const ProcessRows& rows) {
  Case cs;
  std::vector<const Process*> infos;
  for (const SchedProcess& sp : t.procs) infos.push_back(&sp.info);
  const CommJoin join = join_comms(infos);
  std::vector<int> case_comm(join.comms.size(), -1);  // by joined comm: index into cs.comms
  std::map<std::tuple<int, int, int, int, int>, int> keys;
  auto key = [&](int a, int b, int c, int d, int e) {
    auto [it, fresh] = keys.try_emplace({a, b, c, d, e}, cs.nkeys);
    if (fresh) ++cs.nkeys;
    return it->second;
  };
  for (size_t pi = 0; pi < t.procs.size(); ++pi) {
    const SchedProcess& sp = t.procs[pi];
    const Process& p = sp.info;
    if (!sp.host_waits_loaded || sp.op_threads.size() != sp.ops.size())
      throw std::runtime_error("shrink: " + p.path + ": schedule loaded without host waits (LoadOptions::host_waits)");
    CProc cp;
    cp.orig_rank = shown_rank(p, static_cast<int>(pi));
    std::vector<int> to_global(p.comms.size(), -1);
    std::vector<int> crank(p.comms.size(), -1);
    for (size_t ci = 0; ci < p.comms.size(); ++ci) {
      const Comm& c = p.comms[ci];
      const int gc = join.gcomm[pi][ci];
      if (c.init_rc != 0 || c.nranks <= 0 || c.created_before_tracing || gc < 0) continue;
      if (case_comm[gc] < 0) {
        case_comm[gc] = static_cast<int>(cs.comms.size());
        CComm cc;
        cc.hash = c.hash;
        cc.name = c.name;
        cc.nranks = c.nranks;
        cc.members.assign(c.nranks, -1);
        cs.comms.push_back(cc);
      }
      const int g = case_comm[gc];
      CComm& cc = cs.comms[g];
      if (c.rank >= 0 && c.rank < cc.nranks && cc.nranks == c.nranks) cc.members[c.rank] = static_cast<int>(pi);
      to_global[ci] = g;
      crank[ci] = c.rank;
      if (c.rank >= 0 && c.rank < cc.nranks) cp.comms.push_back({g, c.rank});
    }
    std::sort(cp.comms.begin(), cp.comms.end());
    Process r = rows(pi);
    std::stable_sort(r.ops.begin(), r.ops.end(), [](const Op& a, const Op& b) { return a.call_index < b.call_index; });
    std::stable_sort(r.waits.begin(), r.waits.end(), [](const Wait& a, const Wait& b) { return a.call_index < b.call_index; });
    std::vector<CItem> ops, waits;
    std::map<int, int> coll_ordinal, sr_ordinal;
    std::map<P2PChannel, int> sends, recvs;
    for (const Op& o : r.ops) {
      if (!sequenced(o) || o.comm < 0 || o.comm >= static_cast<int>(p.comms.size()) || to_global[o.comm] < 0) continue;
      CItem it;
      it.op = o;
      const int g = to_global[o.comm];
      const int me = crank[o.comm];
      it.op.comm = g;
      const OpKind k = o.op;
      if (k == OpKind::Send || k == OpKind::Recv) {
        // The n-th message of a channel (identity.h) in one direction meets the n-th in the other.
        const P2PChannel ch = p2p_channel(g, me, o.peer, k == OpKind::Send);
        it.key = key(g, 1, ch.src, ch.dst, (k == OpKind::Send ? sends : recvs)[ch]++);
      } else if (k == OpKind::SendRecv) it.key = key(g, 2, sr_ordinal[g]++, 0, 0);
      else it.key = key(g, 0, coll_ordinal[g]++, 0, 0);
      ops.push_back(std::move(it));
    }
    for (size_t wi = 0; wi < r.waits.size(); ++wi) {
      const Wait& w = r.waits[wi];
      CItem it;
      it.is_wait = true;
      it.wait.call_index = w.call_index;
      it.wait.kind = w.kind;
      it.wait.stream = w.stream;
      it.wait.event = w.event;
      it.wait.tid = w.tid;
      it.key = key(-1, 3, static_cast<int>(pi), static_cast<int>(wi), 0);
      waits.push_back(std::move(it));
    }
    auto call = [](const CItem& i) { return i.is_wait ? i.wait.call_index : i.op.call_index; };
    std::merge(ops.begin(), ops.end(), waits.begin(), waits.end(), std::back_inserter(cp.items),
               [&](const CItem& a, const CItem& b) { return call(a) < call(b); });
    cs.procs.push_back(std::move(cp));
  }
  return cs;
}

Sel full_selection(const Case& cs) {
  Sel s;
  s.rank_on.assign(cs.procs.size(), 1);
  s.comm_on.assign(cs.comms.size(), 1);
  s.key_on.assign(cs.nkeys, 1);
  for (const CProc& p : cs.procs) {
    s.item_on.emplace_back(p.items.size(), 1);
    std::vector<int64_t> counts;
    for (const CItem& i : p.items) counts.push_back(i.is_wait ? 0 : i.op.count);
    s.count.push_back(std::move(counts));
  }
  return s;
}

// The trace of a selection: kept ranks renumbered 0..n-1, kept members of each communicator
// re-ranked in their old order, p2p ops to removed ranks dropped. nullopt: not a valid schedule
// (a collective rooted at a removed rank).
std::optional<Trace> build(const Case& cs, const Sel& s) {
  Trace t;
  t.dir = "<shrink candidate>";
  std::vector<int> newrank(cs.procs.size(), -1);
  int n = 0;
  for (size_t p = 0; p < cs.procs.size(); ++p)
    if (s.rank_on[p]) newrank[p] = n++;
  if (n == 0) return std::nullopt;
  std::vector<std::vector<int>> cmap(cs.comms.size());  // old comm rank -> new, -1 removed
  std::vector<int> cn(cs.comms.size(), 0);
  for (size_t c = 0; c < cs.comms.size(); ++c) {
    cmap[c].assign(cs.comms[c].nranks, -1);
    if (!s.comm_on[c]) continue;
    for (int r = 0; r < cs.comms[c].nranks; ++r) {
      int p = cs.comms[c].members[r];
      if (p >= 0 && s.rank_on[p]) cmap[c][r] = cn[c]++;
    }
  }
  t.processes.reserve(n);
  for (size_t p = 0; p < cs.procs.size(); ++p) {
    if (!s.rank_on[p]) continue;
    Process P;
    P.global_rank = newrank[p];
    P.path = "rank-" + std::to_string(P.global_rank);
    P.host = "node0";
    P.pid = 1000 + P.global_rank;
    P.finished = true;
    int64_t call = 0;
    std::vector<int> local(cs.comms.size(), -1);
    for (auto [c, old_rank] : cs.procs[p].comms) {
      if (cn[c] == 0 || cs.comms[c].members[old_rank] != static_cast<int>(p)) continue;
      const int r = cmap[c][old_rank];
      if (r < 0) continue;
      Comm cm;
      cm.local_id = static_cast<int>(P.comms.size()) + 1;
      cm.hash = cs.comms[c].hash;
      cm.name = cs.comms[c].name;
      cm.nranks = cn[c];
      cm.rank = r;
      cm.init_call = ++call;
      local[c] = static_cast<int>(P.comms.size());
      P.comms.push_back(cm);
    }
    std::vector<int64_t> seq(cs.comms.size(), 0);
    const CProc& cp = cs.procs[p];
    for (size_t i = 0; i < cp.items.size(); ++i) {
      const CItem& ci = cp.items[i];
      if (!s.item_on[p][i] || !s.key_on[ci.key]) continue;
      if (ci.is_wait) {
        Wait w = ci.wait;
        w.call_index = ++call;
        if (s.one_thread) w.tid = 1;
        if (s.one_stream) w.stream = 1;
        P.waits.push_back(w);
        continue;
      }
      const int g = ci.op.comm;
      if (local[g] < 0) continue;
      Op o = ci.op;
      o.comm = local[g];
      if (o.peer >= 0) {
        if (o.peer >= static_cast<int>(cmap[g].size()) || cmap[g][o.peer] < 0) continue;
        o.peer = cmap[g][o.peer];
      }
      if (o.root >= 0) {
        if (o.root >= static_cast<int>(cmap[g].size()) || cmap[g][o.root] < 0) return std::nullopt;
        o.root = cmap[g][o.root];
      }
      if (has_parts(o)) {
        std::vector<OpPart> parts;
        for (OpPart part : o.parts) {
          if (part.peer >= 0) {
            if (part.peer >= static_cast<int>(cmap[g].size()) || cmap[g][part.peer] < 0) continue;
            part.peer = cmap[g][part.peer];
          }
          if (part.root >= 0) {
            if (part.root >= static_cast<int>(cmap[g].size()) || cmap[g][part.root] < 0) return std::nullopt;
            part.root = cmap[g][part.root];
          }
          parts.push_back(part);
        }
        if (parts.empty()) continue;
        o.parts = std::move(parts);
      } else {
        o.count = s.count[p][i];
      }
      o.seq = ++seq[g];
      o.call_index = ++call;
      // What the reproducer keeps of a row: no times, stack, thread name or graph of the original.
      o.state = vocab::State::Enqueued;
      o.rc = 0;
      o.issue_mono_ns = o.issue_wall_ns = o.complete_mono_ns = 0;
      o.thread_name.clear();
      o.origin_call = -1;
      o.graph_exec = 0;
      o.stack_id = -1;
      if (s.one_thread) o.tid = 1;
      if (s.one_stream) o.stream = 1;
      P.ops.push_back(std::move(o));
    }
    t.processes.push_back(std::move(P));
  }
  return t;
}

// Zeller's ddmin: a 1-minimal subset of `c` (in order) that passes `test`, assuming c passes.
std::vector<int> ddmin(std::vector<int> c, const std::function<bool(const std::vector<int>&)>& test) {
  size_t n = 2;
  while (c.size() >= 2) {
    std::vector<std::vector<int>> chunks;
    for (size_t k = 0; k < n; ++k) {
      size_t b = c.size() * k / n, e = c.size() * (k + 1) / n;
      if (b < e) chunks.emplace_back(c.begin() + b, c.begin() + e);
    }
    bool reduced = false;
    for (const auto& ch : chunks)
      if (test(ch)) {
        c = ch;
        n = 2;
        reduced = true;
        break;
      }
    if (!reduced && chunks.size() > 2) {
      for (size_t k = 0; k < chunks.size() && !reduced; ++k) {
        std::vector<int> comp;
        for (size_t j = 0; j < chunks.size(); ++j)
          if (j != k) comp.insert(comp.end(), chunks[j].begin(), chunks[j].end());
        if (test(comp)) {
          c = std::move(comp);
          n = std::max<size_t>(n - 1, 2);
          reduced = true;
        }
      }
    }
    if (!reduced) {
      if (n >= c.size()) break;
      n = std::min(n * 2, c.size());
    }
  }
  return c;
}

class Shrinker {
 public:
  Shrinker(const lockstep::Schedule& t, const ProcessRows& rows, const Options& o)
      : opt_(o), cs_(make_case(t, rows)), sel_(full_selection(cs_)) {}

  Result run(const lockstep::Schedule& sched) {
    auto t0 = std::chrono::steady_clock::now();
    Result res;
    res.before = size_of(sched);
    res.original_check = model::check(sched);
    if (res.original_check.verdict == model::Verdict::kCanComplete)
      throw std::runtime_error("the model checker says this schedule can complete (" +
                               std::to_string(res.original_check.ops) +
                               " ops): there is no deadlock to shrink (lockstep replay --model)");
    if (res.original_check.verdict == model::Verdict::kUnknown)
      throw std::runtime_error("the model checker proves no deadlock: " + res.original_check.summary +
                               " (lockstep replay --model)");
    target_ = signature_of(sched, res.original_check);
    res.signature = target_;
    ++checks_;
    if (!test(sel_))
      throw std::runtime_error("the schedule rebuilt from the trace (communicators re-created, sequence numbers "
                               "recomputed) no longer shows " + target_.text() + "; cannot shrink it");

    const Size start = size_of(*build(cs_, sel_));
    bool one_thread = try_flag(&Sel::one_thread);
    bool one_stream = try_flag(&Sel::one_stream);
    for (int round = 0; round < opt_.max_rounds; ++round) {
      bool changed = false;
      changed |= phase_ranks();
      changed |= phase_comms();
      changed |= phase_keys();
      changed |= phase_items();
      if (!changed) break;
    }
    int reduced = phase_counts();

    Trace minimal = *build(cs_, sel_);
    if (target_.verdict == model::Verdict::kMayDeadlock) {
      Sel forced = sel_;
      forced.one_stream = true;
      auto ft = build(cs_, forced);
      const lockstep::Schedule fs = schedule_from_trace(*ft);
      model::Result fr = model::check(fs);
      ++checks_;
      if (fr.verdict == model::Verdict::kDeadlock && signature_of(fs, fr).same_bug(target_)) {
        minimal = std::move(*ft);
        res.forced_one_stream = true;
      }
    }
    res.minimal = std::move(minimal);
    res.minimal_check = model::check(schedule_from_trace(res.minimal));
    res.after = size_of(res.minimal);
    for (size_t p = 0; p < cs_.procs.size(); ++p)
      if (sel_.rank_on[p]) res.kept_ranks.push_back(cs_.procs[p].orig_rank);

    // What was removed.
    std::string kept;
    for (size_t i = 0; i < res.kept_ranks.size() && i < 16; ++i)
      kept += (i ? ", " : "") + std::to_string(res.kept_ranks[i]);
    if (res.kept_ranks.size() > 16) kept += ", ...";
    res.removed.push_back("ranks: removed " + std::to_string(res.before.ranks - res.after.ranks) + " of " +
                          std::to_string(res.before.ranks) + " (kept original rank" +
                          (res.kept_ranks.size() == 1 ? " " : "s ") + kept + ", now ranks 0.." +
                          std::to_string(res.after.ranks - 1) + ")");
    std::vector<std::string> kept_comms;
    for (size_t c = 0; c < cs_.comms.size(); ++c)
      if (sel_.comm_on[c] && used_comm(c)) kept_comms.push_back(comm_short_name(cs_.comms[c].hash, cs_.comms[c].name));
    res.removed.push_back("communicators: removed " + std::to_string(res.before.comms - res.after.comms) + " of " +
                          std::to_string(res.before.comms) + " (kept " + join(kept_comms, ", ") +
                          "; each re-created with its own unique id)");
    res.removed.push_back("ops: removed " + std::to_string(res.before.ops - res.after.ops) + " of " +
                          std::to_string(res.before.ops));
    if (res.before.waits > 0)
      res.removed.push_back("host waits: removed " + std::to_string(res.before.waits - res.after.waits) + " of " +
                            std::to_string(res.before.waits));
    res.removed.push_back("counts: " + std::to_string(reduced) + " op" + (reduced == 1 ? "" : "s") +
                          " reduced (largest count " + std::to_string(start.max_count) + " -> " +
                          std::to_string(res.after.max_count) + ")");
    if (one_thread) res.removed.push_back("threads: every rank issues from one host thread");
    if (one_stream) res.removed.push_back("streams: every rank issues on one stream");
    if (res.forced_one_stream)
      res.removed.push_back("streams: each rank's ops put on one stream: the interleaving in which the latent "
                            "inversion deadlocks (one NCCL kernel at a time), made explicit");
    res.checks = checks_;
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  }

 private:
  void progress(const std::string& s) {
    if (opt_.progress) opt_.progress(s);
  }

  bool test(const Sel& s) {
    ++checks_;
    auto t = build(cs_, s);
    if (!t) return false;
    try {
      const lockstep::Schedule sc = schedule_from_trace(*t);
      model::Result r = model::check(sc);
      if (r.verdict == model::Verdict::kCanComplete) return false;
      return signature_of(sc, r) == target_;
    } catch (const std::exception&) {
      return false;  // not a valid schedule
    }
  }

  bool try_flag(bool Sel::*flag) {
    Sel c = sel_;
    c.*flag = true;
    if (!test(c)) return false;
    sel_ = c;
    return true;
  }

  bool used_comm(size_t c) const {
    for (size_t p = 0; p < cs_.procs.size(); ++p) {
      if (!sel_.rank_on[p]) continue;
      for (size_t i = 0; i < cs_.procs[p].items.size(); ++i) {
        const CItem& it = cs_.procs[p].items[i];
        if (!it.is_wait && it.op.comm == static_cast<int>(c) && sel_.item_on[p][i] && sel_.key_on[it.key]) return true;
      }
    }
    return false;
  }

  // Runs ddmin over `items` (indices into some on/off vector of the selection).
  bool minimize(const std::string& name, std::vector<int> items, const std::function<void(Sel&, const std::vector<int>&)>& apply) {
    if (items.size() < 2) return false;
    const size_t before = items.size();
    const int checks0 = checks_;
    std::vector<int> kept = ddmin(items, [&](const std::vector<int>& subset) {
      Sel c = sel_;
      apply(c, subset);
      return test(c);
    });
    apply(sel_, kept);
    progress(name + ": " + std::to_string(before) + " -> " + std::to_string(kept.size()) + " (" +
             std::to_string(checks_ - checks0) + " model checks)");
    return kept.size() < before;
  }

  bool phase_ranks() {
    std::vector<int> items;
    for (size_t p = 0; p < cs_.procs.size(); ++p)
      if (sel_.rank_on[p]) items.push_back(static_cast<int>(p));
    return minimize("ranks", items, [](Sel& s, const std::vector<int>& keep) {
      std::fill(s.rank_on.begin(), s.rank_on.end(), 0);
      for (int p : keep) s.rank_on[p] = 1;
    });
  }

  bool phase_comms() {
    std::vector<int> items;
    for (size_t c = 0; c < cs_.comms.size(); ++c)
      if (sel_.comm_on[c] && used_comm(c)) items.push_back(static_cast<int>(c));
    return minimize("communicators", items, [items](Sel& s, const std::vector<int>& keep) {
      for (int c : items) s.comm_on[c] = 0;
      for (int c : keep) s.comm_on[c] = 1;
    });
  }

  std::vector<int> live_keys() const {
    std::vector<char> live(cs_.nkeys, 0);
    for (size_t p = 0; p < cs_.procs.size(); ++p) {
      if (!sel_.rank_on[p]) continue;
      for (size_t i = 0; i < cs_.procs[p].items.size(); ++i) {
        const CItem& it = cs_.procs[p].items[i];
        if (sel_.item_on[p][i] && sel_.key_on[it.key] && (it.is_wait || sel_.comm_on[it.op.comm])) live[it.key] = 1;
      }
    }
    std::vector<int> keys;
    for (int k = 0; k < cs_.nkeys; ++k)
      if (live[k]) keys.push_back(k);
    return keys;
  }

  bool phase_keys() {
    std::vector<int> items = live_keys();
    return minimize("ops (matched across ranks)", items, [items](Sel& s, const std::vector<int>& keep) {
      for (int k : items) s.key_on[k] = 0;
      for (int k : keep) s.key_on[k] = 1;
    });
  }

  bool phase_items() {
    std::vector<std::pair<int, int>> where;
    std::vector<int> items;
    for (size_t p = 0; p < cs_.procs.size(); ++p) {
      if (!sel_.rank_on[p]) continue;
      for (size_t i = 0; i < cs_.procs[p].items.size(); ++i)
        if (sel_.item_on[p][i] && sel_.key_on[cs_.procs[p].items[i].key]) {
          items.push_back(static_cast<int>(where.size()));
          where.push_back({static_cast<int>(p), static_cast<int>(i)});
        }
    }
    return minimize("ops (per rank)", items, [&where, items](Sel& s, const std::vector<int>& keep) {
      for (int k : items) s.item_on[where[k].first][where[k].second] = 0;
      for (int k : keep) s.item_on[where[k].first][where[k].second] = 1;
    });
  }

  // Per matched op: count 1 on every rank; else the distinct counts replaced by 1, 2, ...
  int phase_counts() {
    std::vector<std::vector<std::pair<int, int>>> by_key(cs_.nkeys);
    for (size_t p = 0; p < cs_.procs.size(); ++p) {
      if (!sel_.rank_on[p]) continue;
      for (size_t i = 0; i < cs_.procs[p].items.size(); ++i) {
        const CItem& it = cs_.procs[p].items[i];
        if (sel_.item_on[p][i] && sel_.key_on[it.key] && !it.is_wait && !has_parts(it.op) && sel_.count[p][i] > 1)
          by_key[it.key].push_back({static_cast<int>(p), static_cast<int>(i)});
      }
    }
    int reduced = 0;
    const int checks0 = checks_;
    for (const auto& members : by_key) {
      if (members.empty()) continue;
      Sel c = sel_;
      for (auto [p, i] : members) c.count[p][i] = 1;
      if (test(c)) {
        sel_ = c;
        reduced += static_cast<int>(members.size());
        continue;
      }
      std::set<int64_t> distinct;
      for (auto [p, i] : members) distinct.insert(sel_.count[p][i]);
      c = sel_;
      bool changes = false;
      for (auto [p, i] : members) {
        int64_t v = std::distance(distinct.begin(), distinct.find(sel_.count[p][i])) + 1;
        changes |= v != c.count[p][i];
        c.count[p][i] = v;
      }
      if (changes && test(c)) {
        sel_ = c;
        reduced += static_cast<int>(members.size());
      }
    }
    progress("counts: " + std::to_string(reduced) + " ops reduced (" + std::to_string(checks_ - checks0) +
             " model checks)");
    return reduced;
  }

  Options opt_;
  Case cs_;
  Sel sel_;
  Signature target_;
  int checks_ = 0;
};

}  // namespace

Result shrink(const lockstep::Schedule& schedule, const ProcessRows& rows, const Options& options) {
  Shrinker s(schedule, rows, options);
  return s.run(schedule);
}

Result shrink(const Trace& trace, const Options& options) {
  return shrink(schedule_from_trace(trace), [&trace](size_t proc) { return trace.processes[proc]; }, options);
}

}  // namespace lockstep::shrink
