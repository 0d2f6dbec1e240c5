#include "hang.h"
#include "meta_keys.h"

#include <algorithm>
#include <bitset>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <errno.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

namespace lockstep {

const char* status_name(RankStatus s) {
  switch (s) {
    case RankStatus::kFinished: return "finished";
    case RankStatus::kBlocked: return "blocked";
    case RankStatus::kNoCollective: return "no_collective";
    case RankStatus::kDead: return "dead";
    case RankStatus::kEnded: return "trace_ended";
  }
  return "unknown";
}

const char* stop_cause_name(StopCause c) {
  switch (c) {
    case StopCause::kNone: return "none";
    case StopCause::kSignal: return "signal";
    case StopCause::kStaleFlush: return "stale_flush";
    case StopCause::kRecorderStopped: return "recorder_stopped";
    case StopCause::kNoExitRecord: return "no_exit_record";
  }
  return "unknown";
}

namespace {

// The analyzer's CLOCK_MONOTONIC and host name, where HangOptions leaves them unset.
int64_t now_of(const HangOptions& opt) {
  if (opt.now_mono_ns >= 0) return opt.now_mono_ns;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
std::string host_of(const HangOptions& opt) {
  if (!opt.this_host.empty()) return opt.this_host;
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string();
}

// Collective ordinal (1-based, absolute: retired history counted) of a process's op.
int64_t ordinal_of(const ProcComm& pc, uint32_t op) {
  size_t k = std::lower_bound(pc.colls.begin(), pc.colls.end(), op) - pc.colls.begin();
  return pc.base + static_cast<int64_t>(k) + 1;
}

struct Ctx {
  const Schedule& s;
  const CommIndex& idx;
  std::vector<std::vector<uint32_t>> in_flight;  // per proc, op indices in call order
  std::vector<std::vector<uint32_t>> oldest;     // per proc, oldest in-flight op per stream
  std::vector<RankStatus> status;
  std::vector<bool> lost;  // RankHang::history_lost
  std::vector<size_t> family_size = {};  // per global comm: communicators of its family (GlobalComm::family)

  bool is_oldest(int proc, uint32_t op) const {
    return std::find(oldest[proc].begin(), oldest[proc].end(), op) != oldest[proc].end();
  }
  bool in_flight_op(int proc, uint32_t op) const {
    return std::binary_search(in_flight[proc].begin(), in_flight[proc].end(), op);
  }
  std::string where(int proc, uint32_t op) const {
    const SchedOp& o = s.procs[proc].ops[op];
    const int g = idx.per_proc[proc][o.comm].gcomm;
    const std::string comm = g < 0 ? lockstep::comm_label(s.procs[proc].info.comms[o.comm].hash)
                                   : lockstep::comm_label(idx.comms[g].hash, idx.comms[g].role);
    return std::string(vocab::name(s.sigs[o.sig].op)) + " on " + comm + " seq " + std::to_string(o.seq);
  }
  // For group summaries: a communicator whose family (its role without split colors) has others
  // is named by the family, so the 32 tensor-parallel groups of a job, blocked at the same
  // point, read as one line.
  std::string where_family(int proc, uint32_t op) const {
    const SchedOp& o = s.procs[proc].ops[op];
    const int g = idx.per_proc[proc][o.comm].gcomm;
    if (g < 0) return where(proc, op);
    const size_t n = family_size[g];
    if (n <= 1) return where(proc, op);
    return std::string(vocab::name(s.sigs[o.sig].op)) + " on " + comm_family_label(idx.comms[g].family, n) +
           " seq " + std::to_string(o.seq);
  }
  // The comm ranks of op's communicator that no loaded file holds (missing, skipped, foreign):
  // nothing is known of what they issued, so no line may say every peer issued it.
  // Once per communicator: a scan of its nranks and its phrase, asked by every blocked member (a world
  // communicator of 100,000 ranks: 10^10 steps otherwise).
  struct Untraced {
    std::vector<int> ranks;
    std::string phrase;  // "; waits for comm ranks ... (no trace file ...)"; empty with no ranks
  };
  const Untraced& untraced_ranks(int proc, uint32_t op) const {
    static const Untraced none;
    const int g = idx.per_proc[proc][s.procs[proc].ops[op].comm].gcomm;
    if (g < 0) return none;
    if (untraced.empty()) untraced.resize(idx.comms.size());
    if (!untraced[g]) {
      Untraced u{lockstep::untraced_ranks(idx.comms[g]), ""};
      if (!u.ranks.empty()) u.phrase = "; waits for " + ranks_phrase(u.ranks, "comm rank") + " (no trace file: what it issued is unknown)";
      untraced[g] = std::move(u);
    }
    return *untraced[g];
  }
  mutable std::vector<std::optional<Untraced>> untraced = {};  // by GlobalComm index
  int nranks_of(int proc, uint32_t op) const {
    const int g = idx.per_proc[proc][s.procs[proc].ops[op].comm].gcomm;
    return g < 0 ? 0 : idx.comms[g].nranks;
  }
  // Why a peer's matching op has not let ours complete; empty = it is not the peer's fault.
  std::string peer_state(int q, uint32_t qop) const {
    const SchedOp& o = s.procs[q].ops[qop];
    if (o.completed() || !in_flight_op(q, qop)) return "";
    if (is_oldest(q, qop)) return "";
    // Its op sits on a stream behind an older op that has not completed.
    for (uint32_t x : oldest[q])
      if (s.procs[q].ops[x].stream == o.stream) return "issued it, queued behind its " + where(q, x);
    return "";
  }
};

std::string last_on_comm(const Ctx& c, int q, const ProcComm& pc) {
  const int64_t last = last_op_on_comm(pc.colls, pc.p2p);
  if (last < 0) return "it issued nothing on this comm";
  return "its last op on the comm: " + std::string(vocab::name(c.s.sigs[c.s.procs[q].ops[last].sig].op)) + " seq " +
         std::to_string(c.s.procs[q].ops[last].seq);
}

// A member whose records on a comm stop being whole before what is asked of it.
std::string hole_text(const ProcComm& pc) {
  return std::string("its records from seq ") + std::to_string(pc.complete_through_seq + 1) + " on are missing (" +
         gap_cause_name(pc.gap) + "): whether it issued it is unknown";
}

// Waits of a collective at ordinal k on comm g, for a member that issued signature `sig`: every
// member's reason (the asking member filters itself out). The same for every member that issued
// the same signature, so computed once per (comm, ordinal, signature): linear in members.
std::vector<WaitFor> collective_waits(const Ctx& c, int g, int64_t k, uint32_t sig_index, int self, int self_rank) {
  std::vector<WaitFor> out;
  const GlobalComm& gc = c.idx.comms[g];
  const Signature& sig = c.s.sigs[sig_index];
  auto dead = [&](int q) { return c.status[q] == RankStatus::kDead ? "; its trace stopped" : ""; };
  for (auto& m : gc.members) {
    if (m.proc == self) continue;
    const ProcComm& theirs = c.idx.of(m);
    if (k <= theirs.base) continue;  // retired there: issued (and done) long ago
    if (!theirs.known(k)) {          // past a hole in its records: a record we do not have
      out.push_back({m.proc, hole_text(theirs), false, true});
      continue;
    }
    int64_t at = theirs.at(k);
    if (at < 0) {
      if (c.lost[m.proc])
        out.push_back({m.proc, "its trace ends before it; history after its last flush lost (" +
                                   last_on_comm(c, m.proc, theirs) + ")"});
      else
        out.push_back({m.proc, "has not issued it (" + last_on_comm(c, m.proc, theirs) + ")" + dead(m.proc)});
      continue;
    }
    uint32_t qop = theirs.colls[at];
    const SchedOp& qo = c.s.procs[m.proc].ops[qop];
    const Signature& qs = c.s.sigs[qo.sig];
    bool same = qo.sig == sig_index || (qs.cls == OpClass::kAllToAll && sig.cls == OpClass::kAllToAll);
    if (!same) {
      out.push_back({m.proc, "issued " + describe_signature(qs) + " seq " + std::to_string(qo.seq) + " instead" + dead(m.proc), true});
      continue;
    }
    if (sig.cls == OpClass::kAllToAll && qs.cls == OpClass::kAllToAll && self_rank >= 0) {
      int64_t want = all_to_all_amount(sig, false, m.rank), sent = all_to_all_amount(qs, true, self_rank);
      if (want != sent) {
        out.push_back({m.proc, "its all-to-all sends " + std::to_string(sent) + " elements here, " +
                                   std::to_string(want) + " expected" + dead(m.proc),
                       true});
        continue;
      }
    }
    std::string st = c.peer_state(m.proc, qop);
    if (!st.empty()) out.push_back({m.proc, st + dead(m.proc)});
    else if (c.status[m.proc] == RankStatus::kDead && !qo.completed())
      out.push_back({m.proc, "issued it; its trace stopped"});
  }
  return out;
}

class Waits {
 public:
  explicit Waits(const Ctx& c) : c_(c) {}

  std::vector<WaitFor> of(int p, uint32_t op) {
    const SchedOp& o = c_.s.procs[p].ops[op];
    const ProcComm& mine = c_.idx.per_proc[p][o.comm];
    if (mine.gcomm < 0) return {};
    const Signature& sig = c_.s.sigs[o.sig];
    if (sig.cls != OpClass::kP2P) {
      int64_t k = ordinal_of(mine, op);
      // All-to-alls with per-peer parts depend on the asking member's rank: not shared.
      if (sig.cls == OpClass::kAllToAll && !sig.parts.empty())
        return collective_waits(c_, mine.gcomm, k, o.sig, p, c_.s.procs[p].info.comms[o.comm].rank);
      auto key = std::make_tuple(mine.gcomm, k, o.sig);
      auto it = memo_.find(key);
      if (it == memo_.end()) it = memo_.emplace(key, collective_waits(c_, mine.gcomm, k, o.sig, -1, -1)).first;
      std::vector<WaitFor> out;
      out.reserve(it->second.size());
      for (auto& w : it->second)
        if (w.proc != p) out.push_back(w);
      return out;
    }
    return p2p_waits(p, op, mine);
  }

 private:
  // The n-th message to/from a peer needs the peer's n-th matching message.
  std::vector<WaitFor> p2p_waits(int p, uint32_t op, const ProcComm& mine) {
    std::vector<WaitFor> out;
    const SchedOp& o = c_.s.procs[p].ops[op];
    const Signature& sig = c_.s.sigs[o.sig];
    const GlobalComm& g = c_.idx.comms[mine.gcomm];
    auto dead = [&](int q) { return c_.status[q] == RankStatus::kDead ? "; its trace stopped" : ""; };
    std::map<int, int> proc_of;
    for (auto& m : g.members) proc_of[m.rank] = m.proc;
    const int me = c_.s.procs[p].info.comms[o.comm].rank;
    // The messages of an op: (channel, is_send), identity.h p2p_channel.
    auto messages = [&](const Signature& x, int rank) {
      std::vector<std::pair<P2PChannel, bool>> v;
      auto add = [&](vocab::Op d, int peer) {
        if (d == vocab::Op::Send || d == vocab::Op::Recv) v.push_back({p2p_channel(mine.gcomm, rank, peer, d == vocab::Op::Send), d == vocab::Op::Send});
      };
      if (x.parts.empty()) add(x.op, x.peer);
      for (auto& part : x.parts) add(part.op, part.peer);
      return v;
    };
    for (auto& [channel, is_send] : messages(sig, me)) {
      const int peer = is_send ? channel.dst : channel.src;
      if (!proc_of.count(peer)) continue;
      int q = proc_of[peer];
      const ProcComm& theirs = c_.idx.per_proc[q][c_.idx.local_of(mine.gcomm, q)];
      // Retired messages cut the channel: message indices no longer line up (checkpoints.h).
      if (mine.retired_p2p > 0 || theirs.retired_p2p > 0) continue;
      const vocab::Op want = is_send ? vocab::Op::Recv : vocab::Op::Send;
      // How many messages on this channel, in this direction, up to and including `op` on p...
      size_t n = 0;
      for (uint32_t i : mine.p2p) {
        if (i > op) break;
        for (auto& [c2, s2] : messages(c_.s.sigs[c_.s.procs[p].ops[i].sig], me)) n += c2 == channel && s2 == is_send;
      }
      // ...and the peer's matching one: the n-th message of the other direction on the channel.
      size_t seen = 0;
      int64_t match = -1;
      for (uint32_t i : theirs.p2p) {
        for (auto& [c2, s2] : messages(c_.s.sigs[c_.s.procs[q].ops[i].sig], peer))
          if (c2 == channel && s2 != is_send && ++seen == n) match = i;
        if (match >= 0) break;
      }
      // Past a hole in the peer's records, the n-th message it holds is not its n-th message.
      if ((match < 0 && !theirs.whole()) ||
          (match >= 0 && c_.s.procs[q].ops[static_cast<uint32_t>(match)].seq > theirs.complete_through_seq)) {
        out.push_back({q, hole_text(theirs), false, true});
        continue;
      }
      if (match < 0) {
        out.push_back({q, "has not posted the matching " + std::string(vocab::name(want)) + " (" + last_on_comm(c_, q, theirs) + ")" + dead(q)});
        continue;
      }
      std::string st = c_.peer_state(q, static_cast<uint32_t>(match));
      if (!st.empty()) out.push_back({q, st + dead(q)});
    }
    return out;
  }

  const Ctx& c_;
  std::map<std::tuple<int, int64_t, uint32_t>, std::vector<WaitFor>> memo_;
};

// Per (comm, ordinal): whether every member completed it with one signature; a member whose
// own op is in flight there has completed it too (only its completion row is missing). Once
// per (comm, ordinal), not once per member: linear in members.
class PeersCompleted {
 public:
  explicit PeersCompleted(const Schedule& s, const CommIndex& idx) : s_(s), idx_(idx) {}

  bool done(int p, uint32_t op) {
    const SchedOp& o = s_.procs[p].ops[op];
    const ProcComm& pc = idx_.per_proc[p][o.comm];
    if (pc.gcomm < 0 || s_.sigs[o.sig].cls == OpClass::kP2P || idx_.comms[pc.gcomm].members.size() < 2) return false;
    const int64_t k = ordinal_of(pc, op);
    const Tally& t = memo(pc.gcomm, k);
    // Every other member completed it (this one has not: it is in flight) with this signature.
    return !t.open && t.mixed == false && t.sig == o.sig && t.completed + 1 == t.members;
  }

 private:
  struct Tally {
    size_t members = 0, completed = 0;  // members holding ordinal k or having retired it
    uint32_t sig = kNone;               // signature of the completed ones
    bool mixed = false;                 // completed ones disagree
    bool known = false;                 // tallied
    // Two members or more have not completed it: no member's op is done by its peers, and the
    // tally stops there (a job hung with every rank's last ops in flight: two members a tally,
    // not every member of the world communicator for each of its ordinals in flight).
    bool open = false;
  };
  // Per communicator, the tallies of a window of ordinals: the ops in flight of its members sit
  // near its end, so the window is short, and a lookup (once per op in flight of every rank:
  // 16,384 ranks x 100 ops) is an index, not a search. A window never spans more ordinals than
  // the communicator's longest member holds (crafted files: ordinals far apart); the others
  // are kept in a map.
  struct Window {
    int64_t lo = 0, max_span = -1;
    std::vector<Tally> t;
  };
  const Tally& memo(int g, int64_t k) {
    if (memo_.empty()) memo_.resize(idx_.comms.size());
    Window& w = memo_[static_cast<size_t>(g)];
    if (w.max_span < 0) {
      w.max_span = 1;
      for (auto& m : idx_.comms[g].members) w.max_span = std::max<int64_t>(w.max_span, idx_.of(m).colls.size());
    }
    const int64_t lo = w.t.empty() ? k : std::min(w.lo, k);
    const int64_t hi = w.t.empty() ? k : std::max(w.lo + static_cast<int64_t>(w.t.size()) - 1, k);
    Tally* t = nullptr;
    if (hi - lo < w.max_span) {
      if (w.t.empty()) w.lo = k;
      if (k < w.lo) w.t.insert(w.t.begin(), static_cast<size_t>(w.lo - k), Tally{}), w.lo = k;
      if (k - w.lo >= static_cast<int64_t>(w.t.size())) w.t.resize(static_cast<size_t>(k - w.lo + 1));
      t = &w.t[static_cast<size_t>(k - w.lo)];
    } else {
      t = &far_[{g, k}];
    }
    if (!t->known) *t = tally(g, k), t->known = true;
    return *t;
  }
  static constexpr uint32_t kNone = UINT32_MAX;

  Tally tally(int g, int64_t k) const {
    Tally t;
    for (auto& m : idx_.comms[g].members) {
      const ProcComm& pc = idx_.of(m);
      ++t.members;
      if (k <= pc.base) {
        ++t.completed;  // retired: completed long ago
        continue;
      }
      int64_t at = pc.at(k);
      const SchedOp* q = at < 0 ? nullptr : &s_.procs[m.proc].ops[pc.colls[at]];
      if (!q || !q->completed() || !s_.procs[m.proc].completion_known) {
        if (t.members - t.completed >= 2) {
          t.open = true;
          return t;
        }
        continue;
      }
      ++t.completed;
      if (t.sig == kNone) t.sig = q->sig;
      else if (t.sig != q->sig) t.mixed = true;
    }
    return t;
  }

  const Schedule& s_;
  const CommIndex& idx_;
  std::vector<Window> memo_;  // by global communicator
  std::map<std::pair<int, int64_t>, Tally> far_;
};

// Status, stop cause, liveness and ops in flight of every process.
void classify_ranks(const Schedule& s, const CommIndex& idx, const HangOptions& opt, Ctx& c, HangReport& r) {
  size_t n = s.procs.size();
  std::map<std::string, int64_t> freshest;  // host -> newest last_flush
  for (auto& p : s.procs) {
    auto& f = freshest[p.info.host];
    f = std::max(f, p.info.last_flush_mono_ns);
  }
  const int64_t now = now_of(opt);
  const std::string here = host_of(opt);
  PeersCompleted peers(s, idx);
  r.ranks.resize(n);
  // A recorder's hang timeout that fired proves the job stalled: then no rank was merely
  // stopped mid-step.
  for (auto& p : s.procs) r.any_marker |= !p.info.hangs.empty();
  for (size_t p = 0; p < n; ++p) {
    const SchedProcess& sp = s.procs[p];
    RankHang& rh = r.ranks[p];
    rh.proc = static_cast<int>(p);
    const TraceEnd end = trace_end(sp.info, opt, now, here);
    const bool stopped = end.stopped;
    rh.live = end.live;
    rh.history_lost = end.lost;
    c.lost[p] = rh.history_lost;
    if (sp.info.finished) {
      c.status[p] = RankStatus::kFinished;
    } else if (!sp.info.exit_reason.empty() && sp.info.exit_reason != "SIGUSR1" && sp.info.exit_reason != "exit" &&
               sp.info.exit_reason != schema::meta::kFrDump) {
      // Killed (SIGUSR1 only flushes). Dead unless it was blocked in NCCL when killed: then the
      // blocked op is the story, and the kill is the launcher's timeout.
      c.status[p] = RankStatus::kDead;
      rh.cause = StopCause::kSignal;
      rh.why = "trace stopped: " + sp.info.exit_reason;
    } else if (sp.info.last_flush_mono_ns > 0 &&
               freshest[sp.info.host] - sp.info.last_flush_mono_ns > opt.stale_ns) {
      c.status[p] = RankStatus::kDead;
      rh.cause = StopCause::kStaleFlush;
      rh.why = "trace stopped " + std::to_string((freshest[sp.info.host] - sp.info.last_flush_mono_ns) / 1'000'000'000) +
               " s before its neighbours' on " + sp.info.host + " (process died?)";
    }
    if (c.status[p] == RankStatus::kFinished) {
      if (!sp.ops.empty()) rh.last_completed = static_cast<int64_t>(sp.ops.size()) - 1;
      continue;
    }
    if (sp.completion_known) {
      for (uint32_t i = 0; i < sp.ops.size(); ++i) {
        if (sp.ops[i].completed())
          rh.last_completed = i;
        else
          c.in_flight[p].push_back(i);
      }
    } else {
      // No completion tracking in this trace: the newest op of each comm may still be running.
      for (auto& pc : idx.per_proc[p]) {
        const int64_t last = last_op_on_comm(pc.colls, pc.p2p);
        if (last >= 0) c.in_flight[p].push_back(static_cast<uint32_t>(last));
      }
      std::sort(c.in_flight[p].begin(), c.in_flight[p].end());
      if (!sp.ops.empty()) rh.last_completed = -1;
    }
    // A collective that every other member completed has completed here too; only its
    // completion row is missing (killed before the watchdog saw the event).
    std::vector<uint32_t> still;
    for (uint32_t i : c.in_flight[p]) {
      if (peers.done(static_cast<int>(p), i))
        rh.last_completed = std::max<int64_t>(rh.last_completed, i);
      else
        still.push_back(i);
    }
    c.in_flight[p] = std::move(still);
    std::bitset<256> streams;  // SchedOp::stream is 8 bits: no tree a rank
    for (uint32_t i : c.in_flight[p])
      if (!streams.test(sp.ops[i].stream)) streams.set(sp.ops[i].stream), c.oldest[p].push_back(i);
    rh.in_flight = c.in_flight[p].size();
    bool stale = rh.cause == StopCause::kStaleFlush;
    if (rh.in_flight && !stale) c.status[p] = RankStatus::kBlocked;
    std::string stop_why = stopped ? "its recorder stopped recording (" + end.stop_reason + ")" : "";
    if (rh.history_lost && !stale && c.status[p] == RankStatus::kNoCollective) {
      c.status[p] = RankStatus::kEnded;
      rh.cause = stopped ? StopCause::kRecorderStopped : StopCause::kNoExitRecord;
      rh.why = stopped ? stop_why
                       : "its trace ends without an exit record (killed by SIGKILL, out of memory, a lost node, "
                         "or still running where this analyzer cannot see it)";
    } else if (rh.history_lost && c.status[p] == RankStatus::kBlocked && rh.cause == StopCause::kNone) {
      rh.cause = stopped ? StopCause::kRecorderStopped : StopCause::kNoExitRecord;
      rh.why = stopped ? stop_why : "its trace ends without an exit record";
    }
    // Its recorder stopped: completions after the stop were never written, so an op in flight
    // in its file may well have completed. Not a proven wait.
    if (stopped && rh.in_flight) rh.stopped_in_flight = true;
    // Stopped while ops were in flight: how long had the oldest been waiting when its trace
    // ends? Young ops are a GPU queue cut short (a time limit, scancel), not a proven wait.
    if (rh.in_flight && !stopped && !rh.live && !rh.why.empty() && !r.any_marker && opt.issue_mono_ns && sp.info.last_flush_mono_ns > 0) {
      int64_t oldest_issue = INT64_MAX;
      for (uint32_t i : c.oldest[p]) {
        const std::optional<int64_t> t = opt.issue_mono_ns(static_cast<int>(p), sp.ops[i].call_index);
        if (!t) {
          oldest_issue = INT64_MAX;
          break;
        }
        oldest_issue = std::min(oldest_issue, *t);
      }
      if (oldest_issue != INT64_MAX && oldest_issue <= sp.info.last_flush_mono_ns) {
        rh.in_flight_for_ns = sp.info.last_flush_mono_ns - oldest_issue;
        rh.stopped_in_flight = rh.in_flight_for_ns < opt.stuck_ns;
      }
    }
    // Stopped by SIGTERM/SIGINT (the scheduler or launcher ending the job) with nothing in
    // flight and not long before its neighbours: it was in host code, not dead.
    rh.ended_by_job = sp.info.exit_reason == "SIGTERM" || sp.info.exit_reason == "SIGINT";
    if (c.status[p] == RankStatus::kDead && !rh.in_flight && !stale && rh.ended_by_job) {
      c.status[p] = RankStatus::kNoCollective;
      rh.why = "stopped by " + sp.info.exit_reason + " while in host code";
      rh.stopped_by_job = true;
    }
  }
}

// LOCKSTEP_COMPLETION=covering (meta completion_signal, completion_window): the window, or
// kMaxWindow when the trace's value is unreadable; 0 with a per-op completion signal.
constexpr uint32_t kMaxWindow = 4096;
uint32_t covering_window(const SchedProcess& sp) {
  auto sig = sp.info.meta.find("completion_signal");
  if (sig == sp.info.meta.end() || sig->second != "covering") return 0;
  auto w = sp.info.meta.find("completion_window");
  if (w == sp.info.meta.end() || w->second.empty() || w->second.size() > 4) return kMaxWindow;
  uint32_t v = 0;
  for (char ch : w->second) {
    if (ch < '0' || ch > '9') return kMaxWindow;
    v = v * 10 + static_cast<uint32_t>(ch - '0');
  }
  return v >= 1 && v <= kMaxWindow ? v : kMaxWindow;
}

// Covering completion: a stream's first incomplete op is at most `window` ops after its last
// completed one (a covering event is recorded at least every `window` ops); the last of those
// still in flight.
uint32_t last_candidate(const SchedProcess& sp, const Ctx& c, int p, uint32_t op, uint32_t window) {
  const uint8_t stream = sp.ops[op].stream;
  int64_t last_done = -1;
  for (uint32_t i = 0; i < sp.ops.size(); ++i)
    if (sp.ops[i].stream == stream && sp.ops[i].completed()) last_done = i;
  uint32_t last = op, n = 0;
  for (uint32_t i = static_cast<uint32_t>(last_done + 1); i < sp.ops.size() && n < window; ++i) {
    if (sp.ops[i].stream != stream) continue;
    ++n;
    if (i >= op && c.in_flight_op(p, i)) last = i;
  }
  return last;
}

// Wait-for edges: proc -> (waits for, via op). Fills each rank's blocked ops and r.hung.
std::vector<std::vector<std::pair<int, uint32_t>>> wait_edges(const Schedule& s, const Ctx& c, HangReport& r) {
  size_t n = s.procs.size();
  std::vector<std::vector<std::pair<int, uint32_t>>> edges(n);
  Waits waits(c);
  for (size_t p = 0; p < n; ++p) {
    RankHang& rh = r.ranks[p];
    rh.status = c.status[p];
    if (c.status[p] == RankStatus::kFinished) continue;
    const uint32_t window = covering_window(s.procs[p]);
    for (uint32_t op : c.oldest[p]) {
      BlockedOp b;
      b.op = op;
      b.last_candidate = window ? last_candidate(s.procs[p], c, static_cast<int>(p), op, window) : op;
      b.covering_window = window;
      for (uint32_t x : c.in_flight[p])
        b.queued_behind_it += x > op && s.procs[p].ops[x].stream == s.procs[p].ops[op].stream;
      // Past a hole in its own records, its position on the comm (ordinal, message count) is
      // unknown: no wait is built on it.
      const ProcComm& own = c.idx.per_proc[p][s.procs[p].ops[op].comm];
      if (s.procs[p].ops[op].seq > own.complete_through_seq) b.own_hole_from_seq = own.complete_through_seq + 1;
      else b.waits = waits.of(static_cast<int>(p), op);
      for (auto& w : b.waits) edges[p].push_back({w.proc, op});
      rh.blocked.push_back(std::move(b));
    }
  }
  for (size_t p = 0; p < n; ++p) {
    const RankHang& rh = r.ranks[p];
    if (c.status[p] != RankStatus::kBlocked) continue;
    // A live rank waiting for live peers is a job in progress, not a hang, until a recorder's
    // hang timeout says otherwise (r.any_marker, applied once below).
    // A rank stopped mid-step waits for a peer that may simply not have got there yet, unless
    // that peer finished: then it never will.
    for (auto& b : rh.blocked)
      for (auto& w : b.waits)
        if (!w.unknown)
          r.hung |= rh.stopped_in_flight ? w.mismatch || r.ranks[w.proc].status == RankStatus::kFinished
                                       : !(rh.live && r.ranks[w.proc].live);
    // Killed (by the launcher's timeout?) while blocked in NCCL, for longer than a GPU queue.
    r.hung |= !rh.why.empty() && !rh.live && !rh.stopped_in_flight;
  }
  return edges;
}

// Wait-for cycles: Tarjan's strongly connected components (iterative: 16,384 ranks deep is
// too deep for recursion); one cycle per component of 2+ processes.
std::vector<WaitCycle> find_cycles(const Schedule& s, const std::vector<std::vector<std::pair<int, uint32_t>>>& edges) {
  size_t n = edges.size();
  std::vector<int> index(n, -1), low(n, 0), comp(n, -1);
  std::vector<int> stack;
  std::vector<bool> on(n, false);
  int counter = 0, ncomp = 0;
  struct Frame {
    int v;
    size_t next;
  };
  for (size_t root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    std::vector<Frame> call{{static_cast<int>(root), 0}};
    index[root] = low[root] = counter++;
    stack.push_back(static_cast<int>(root));
    on[root] = true;
    while (!call.empty()) {
      Frame& f = call.back();
      int v = f.v;
      if (f.next < edges[v].size()) {
        int w = edges[v][f.next++].first;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on[w] = true;
          call.push_back({w, 0});
        } else if (on[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        int w;
        do {
          w = stack.back();
          stack.pop_back();
          on[w] = false;
          comp[w] = ncomp;
        } while (w != v);
        ++ncomp;
      }
      call.pop_back();
      if (!call.empty()) low[call.back().v] = std::min(low[call.back().v], low[v]);
    }
  }
  std::vector<int> comp_size(ncomp, 0);
  for (size_t v = 0; v < n; ++v) ++comp_size[comp[v]];
  std::vector<bool> done(ncomp, false);
  std::vector<WaitCycle> cycles;
  for (size_t v0 = 0; v0 < n; ++v0) {
    int cc = comp[v0];
    if (comp_size[cc] < 2 || done[cc]) continue;
    done[cc] = true;
    // Walk edges inside the component until a process repeats.
    std::vector<WaitCycle::Hop> path;
    std::map<int, size_t> at;
    int v = static_cast<int>(v0);
    while (!at.count(v)) {
      at[v] = path.size();
      for (auto& [w, op] : edges[v])
        if (comp[w] == cc) {
          path.push_back({v, op, w});
          v = w;
          break;
        }
    }
    WaitCycle cyc;
    cyc.hops.assign(path.begin() + static_cast<long>(at[v]), path.end());
    std::set<std::string> comms;
    for (auto& h : cyc.hops) comms.insert(s.procs[h.proc].info.comms[s.procs[h.proc].ops[h.op].comm].hash);
    cyc.comms = static_cast<int>(comms.size());
    cycles.push_back(std::move(cyc));
  }
  return cycles;
}

// "20 ms", "3 s": coarse, so ranks stopped alike group alike.
std::string age_text(int64_t ns) {
  if (ns < 10'000'000) return "under 10 ms";
  if (ns < 1'000'000'000) return std::to_string(ns / 10'000'000 * 10) + " ms";
  return std::to_string(ns / 1'000'000'000) + " s";
}

// Groups: processes whose summaries (without their own rank) are identical.
std::vector<RankGroup> group_ranks(const Schedule& s, const Ctx& c, const HangReport& r) {
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> order;
  for (size_t p = 0; p < r.ranks.size(); ++p) {
    const RankHang& rh = r.ranks[p];
    std::string sum;
    auto last = [&] {
      return rh.last_completed < 0 ? std::string("nothing completed")
                                   : "last completed " + c.where_family(static_cast<int>(p), static_cast<uint32_t>(rh.last_completed));
    };
    switch (rh.status) {
      case RankStatus::kFinished: sum = "finished"; break;
      case RankStatus::kNoCollective:
        sum = "in no collective (host code?); " + last() + (rh.why.empty() ? "" : "; " + rh.why);
        break;
      case RankStatus::kDead: sum = "dead: " + rh.why + "; " + last(); break;
      case RankStatus::kEnded: sum = "history unknown after its last flush: " + rh.why + "; " + last(); break;
      case RankStatus::kBlocked: {
        const BlockedOp& b = rh.blocked.front();
        sum = rh.stopped_in_flight ? "in flight when its trace stopped: " + c.where_family(static_cast<int>(p), b.op) +
                                         (rh.in_flight_for_ns >= 0 ? " (issued " + age_text(rh.in_flight_for_ns) + " before)"
                                                                   : std::string(" (its completion after the stop is unknown)"))
                                   : "blocked in " + c.where_family(static_cast<int>(p), b.op);
        if (b.last_candidate != b.op)
          sum += " or a later op up to " + c.where_family(static_cast<int>(p), b.last_candidate) +
                 " (covering completion, window " + std::to_string(b.covering_window) + ")";
        std::map<std::string, std::vector<int>> by_reason;
        for (auto& w : b.waits) by_reason[w.reason].push_back(display_rank(s, w.proc));
        for (auto& [why, who] : by_reason)
          sum += "; waits for " + ranks_phrase(who) + " (" + why + ")";
        if (b.own_hole_from_seq > 0)
          sum += "; its records from seq " + std::to_string(b.own_hole_from_seq) +
                 " on are missing: which op this is, and whom it waits for, is unknown";
        const Ctx::Untraced& u = c.untraced_ranks(static_cast<int>(p), b.op);
        const std::vector<int>& untraced = u.ranks;
        sum += u.phrase;
        const int traced_peers = c.nranks_of(static_cast<int>(p), b.op) - 1 - static_cast<int>(untraced.size());
        if (b.waits.empty() && c.nranks_of(static_cast<int>(p), b.op) == 1) sum += "; no peer (a 1-rank communicator)";
        else if (b.waits.empty() && traced_peers > 0 && b.own_hole_from_seq == 0) sum += untraced.empty() ? "; every peer issued it" : "; every traced peer issued it";
        if (rh.in_flight > 1) sum += "; " + std::to_string(rh.in_flight) + " ops in flight";
        if (!rh.why.empty()) sum += "; " + rh.why;
        break;
      }
    }
    if (!groups.count(sum)) order.push_back(sum);
    groups[sum].push_back(static_cast<int>(p));
  }
  std::vector<RankGroup> out;
  for (auto& sum : order) out.push_back({groups[sum], sum});
  return out;
}

}  // namespace

std::string recorder_stop_reason(const Process& info) {
  const auto st = info.meta.find(schema::meta::kRecorderStopped);
  return st == info.meta.end() ? std::string() : st->second;
}

TraceEnd trace_end(const Process& info, const HangOptions& opt, int64_t now_mono_ns, const std::string& this_host) {
  // SIGUSR1 only asks for a flush: the process lives on, like one with no record at all.
  const bool no_record = !info.finished && (info.exit_reason.empty() || info.exit_reason == "SIGUSR1");
  auto alive = [&](int64_t pid) {
    if (opt.pid_alive) return opt.pid_alive(pid);
    return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
  };
  TraceEnd e;
  e.stop_reason = recorder_stop_reason(info);
  e.stopped = !e.stop_reason.empty();
  e.live = no_record && !e.stopped && !this_host.empty() && info.host == this_host && info.last_flush_mono_ns > 0 &&
           now_mono_ns - info.last_flush_mono_ns <= opt.stale_ns && alive(info.pid);
  e.lost = (no_record && !e.live) || e.stopped;
  return e;
}

TraceEnd trace_end(const Process& info, const HangOptions& opt) {
  return trace_end(info, opt, now_of(opt), host_of(opt));
}

HangReport explain_hang(const Schedule& s, const CommIndex& idx, const HangOptions& opt) {
  HangReport r;
  size_t n = s.procs.size();
  Ctx c{s, idx, std::vector<std::vector<uint32_t>>(n), std::vector<std::vector<uint32_t>>(n),
        std::vector<RankStatus>(n, RankStatus::kNoCollective), std::vector<bool>(n, false)};
  std::map<std::string, size_t> families;
  for (auto& gc : idx.comms) ++families[gc.family];
  for (auto& gc : idx.comms) c.family_size.push_back(families[gc.family]);
  classify_ranks(s, idx, opt, c, r);
  auto edges = wait_edges(s, c, r);
  r.cycles = find_cycles(s, edges);
  r.hung |= !r.cycles.empty() || r.any_marker;
  // A hang proven (a cycle, a marker, a mismatch, a finished peer) holds every rank that waits:
  // none of them was merely stopped mid-step.
  if (r.hung)
    for (RankHang& rh : r.ranks) rh.stopped_in_flight = false;
  r.groups = group_ranks(s, c, r);
  return r;
}

}  // namespace lockstep
