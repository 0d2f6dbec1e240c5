// The model checker: a worklist over per-rank queues (streams, communicators, optionally one
// device queue), not a state-space search. Every transition (an op becomes runnable, a
// collective instance gets its last member, a send meets its receive) stays enabled until it
// fires and disables nothing, so every maximal run reaches the same final state; each unit is
// activated and completed at most once, which makes a check linear in the schedule size.
// docs/replay.md states the semantics and the argument.
#include "model_check.h"

#include "comm_index.h"
#include "meta_keys.h"
#include "identity.h"
#include "trace_validation.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace lockstep::model {

namespace {
// Bounds on what the model allocates per member rank (16,384 ranks x 10,000 collectives, the
// largest traces measured, take 164 M instance slots).
constexpr int64_t kMaxModelRanks = int64_t(1) << 26;
constexpr size_t kMaxInstanceSlots = size_t(1) << 28;

using vocab::is_p2p;

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kCanComplete: return "can complete";
    case Verdict::kMayDeadlock: return "may deadlock";
    case Verdict::kDeadlock: return "deadlock";
    case Verdict::kUnknown: return "unknown";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// The engine's work list: an index over the Schedule (analyzer/schedule.h, the one model of a
// trace), not a second model of it. Built once per check, it holds per rank the Schedule's ops
// (Item::op_index) and host waits merged in call order, communicators identified across ranks
// (the Schedule's comm indices are per process), streams numbered per rank, and p2p parts
// expanded into sends and receives with their peers checked; the engine's queues walk it many
// times, so this work is done once instead of at every step (docs/replay.md).

namespace {

using OpKind = vocab::Op;
enum class ItemKind : uint8_t {
  kOp,               // one op
  kStreamSync,       // host blocks until `stream`'s work issued so far completed
  kEventSync,        // host blocks until the work before `event`'s last record completed
  kDeviceSync,       // host blocks until all work issued so far completed
  kStreamWaitEvent,  // later work on `stream` waits for `event`
  kEventRecord,      // `event` marks the current end of `stream`
};

struct Part {         // one send or recv of a p2p op (lone send/recv: one part)
  bool is_send = false;
  int32_t peer = -1;  // rank in the communicator
  int64_t count = 0;
  vocab::Dtype dtype = vocab::Dtype::Mixed;
};

// 72 bytes, widest fields first: the checker holds one per op and host wait.
struct Item {
  int64_t call_index = 0;
  int64_t group = -1;      // rows of one rank with the same group >= 0 progress together
  int64_t count = 0;
  int64_t event = 0;
  uint32_t seq = 0;
  int32_t comm = -1;       // index into WorkList::comms
  int32_t stream = 0;      // index into ProcWork::streams
  int32_t thread = 0;      // index into SchedProcess::threads
  int32_t root = -1;
  int32_t first_part = 0;  // into ProcWork::parts (p2p ops only)
  int32_t nparts = 0;
  int32_t op_index = -1;   // kOp items: index into SchedProcess::ops
  int16_t coalesced_sig = -1;  // coalesced ops: index into WorkList::names of the parts' op list
  ItemKind kind = ItemKind::kOp;
  OpKind op = OpKind::AllReduce;  // kOp items only
  vocab::Dtype dtype = vocab::Dtype::Mixed;
  vocab::RedOp redop = vocab::RedOp::None;
};
static_assert(sizeof(Item) == 72, "Item is the checker's per-op memory");

struct CommInfo {
  std::string label;          // name, or the first 8 hex digits of the hash
  std::string hash;
  int nranks = 0;
  std::vector<int32_t> members;  // process index for each comm rank (-1 = not in the trace)
};

struct ProcWork {
  std::string label;                       // "rank 3" (global rank) or the file name
  std::vector<uint64_t> streams;           // recorded stream values
  size_t nthreads = 0;
  std::vector<int32_t> comm_rank;          // by WorkList comm index: this rank's rank in it, -1
  // By WorkList comm index: collectives the size cap retired before the first one in `items`
  // (comms.retired_collectives). Members align collectives by absolute ordinal; one that some
  // member retired counts as reached by it (its digest is checked by the analyzer, not here).
  std::vector<int64_t> retired_colls;
  std::vector<Item> items;                 // ops and waits, sorted by call_index
  std::vector<Part> parts;
  // A Flight Recorder dump: torch runs point-to-point ops on a communicator (and stream) per pair
  // of ranks, not the group's, and the dump does not say which; its sends and receives are not
  // queued behind the group's other ops (flightrec/to_model.cpp gives them streams per peer).
  bool p2p_outside_comm_order = false;
  // Its records stop being whole (a hole: dropped records, a stopped recorder) at an op of this
  // call_index: that call and every later one are unknown, not modelled. INT64_MAX: no hole.
  // A peer that waits for it waits for a record we do not have, not for one it never issued.
  int64_t cut_call = INT64_MAX;
  bool hole = false;         // some communicator's records of it stop being whole (cut or not)
  std::string problems_cut;  // the problem line that says where and why
};

struct WorkList {
  std::vector<CommInfo> comms;
  std::vector<ProcWork> procs;
  std::vector<std::string> names;          // interned coalesced part lists
  std::vector<std::string> problems;       // input problems found while building (shown to user)
  int16_t intern(const std::string& s) {   // -1 for ""
    if (s.empty()) return -1;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == s) return static_cast<int16_t>(i);
    if (names.size() >= 32767) throw std::runtime_error("model: too many distinct coalesced part lists");
    names.push_back(s);
    return static_cast<int16_t>(names.size() - 1);
  }
};

ItemKind item_kind(vocab::Wait w) {
  switch (w) {
    case vocab::Wait::StreamSync: return ItemKind::kStreamSync;
    case vocab::Wait::EventSync: return ItemKind::kEventSync;
    case vocab::Wait::DeviceSync: return ItemKind::kDeviceSync;
    case vocab::Wait::StreamWaitEvent: return ItemKind::kStreamWaitEvent;
    case vocab::Wait::EventRecord: return ItemKind::kEventRecord;
  }
  return ItemKind::kStreamSync;
}

// Throws std::runtime_error with a clear message when the schedule cannot be checked (no
// processes, a communicator whose members are missing from it...).
WorkList build_work_list(const Schedule& sched) {
  if (sched.procs.empty())
    throw std::runtime_error("model: the trace " + sched.dir + " has no process files");
  WorkList s;
  // The analyzer's rules (trace_validation.h): contradictions make the directory unusable,
  // the rest (skipped files, missing members, lost histories) is named among the problems.
  {
    std::vector<const Process*> procs;
    for (const auto& p : sched.procs) procs.push_back(&p.info);
    for (const auto& p : sched.procs) {
      if (!p.host_waits_loaded || p.op_threads.size() != p.ops.size())
        throw std::runtime_error("model: " + p.info.shown_path() + ": schedule loaded without host waits (LoadOptions::host_waits)");
      std::string defect = header_defect(p.info);
      if (!defect.empty()) throw std::runtime_error("model: " + p.info.shown_path() + ": " + defect);
    }
    for (const EvidenceGroup& e : group_evidence(validate_evidence(procs, sched.skipped))) {
      if (e.contradictory) throw std::runtime_error("model: " + e.detail);
      if (e.kind != EvidenceKind::kMissingMember) s.problems.push_back("incomplete evidence: " + e.detail);
    }
  }
  // Where each rank's evidence stops being whole (comm_index.h ProcComm::complete_through_seq):
  // its schedule is modelled up to there.
  const CommIndex holes = build_comm_index(sched);
  std::unordered_map<std::string, int32_t> comm_by_hash;
  int64_t model_ranks = 0;
  s.procs.resize(sched.procs.size());
  constexpr int16_t kNotInterned = -2;
  std::vector<int16_t> coalesced_name(sched.sigs.size(), kNotInterned);  // by signature index

  // Labels: global ranks when every process has a distinct one, else file-based.
  std::map<int, int> rank_uses;
  for (const auto& p : sched.procs) rank_uses[p.info.global_rank]++;
  for (size_t i = 0; i < sched.procs.size(); ++i) {
    const Process& p = sched.procs[i].info;
    s.procs[i].label = rank_label(p, static_cast<int>(i), rank_uses[p.global_rank] == 1);
  }

  for (size_t pi = 0; pi < sched.procs.size(); ++pi) {
    const SchedProcess& sp = sched.procs[pi];
    const Process& p = sp.info;
    ProcWork& ps = s.procs[pi];
    ps.nthreads = sp.threads.size();
    if (auto src = p.meta.find(schema::meta::kSource); src != p.meta.end())
      ps.p2p_outside_comm_order = src->second == schema::meta::kSourceFlightRecorder;
    std::vector<int32_t> local_to_global(p.comms.size(), -1);
    for (size_t ci = 0; ci < p.comms.size(); ++ci) {
      const Comm& c = p.comms[ci];
      if (c.init_rc != 0 || c.nranks <= 0) continue;  // creation failed, or the NULL-comm placeholder
      if (c.created_before_tracing) {
        // The recorder gave it an identity local to this process: members cannot be matched.
        s.problems.push_back(p.path + ": communicator " + c.hash +
                             " was created before tracing started; its ops are ignored (record from the start)");
        continue;
      }
      auto [it, fresh] = comm_by_hash.try_emplace(c.hash, static_cast<int32_t>(s.comms.size()));
      if (fresh) {
        // Per-rank tables are sized by nranks, which comes from the file (up to 2^24 in every
        // communicator): a directory whose communicators add up to more is refused, not modeled.
        model_ranks += c.nranks;
        if (model_ranks > kMaxModelRanks)
          throw std::runtime_error("model: the communicators add up to more than " + std::to_string(kMaxModelRanks) +
                                   " member ranks (" + p.path + ": communicator " + c.hash + " of " +
                                   std::to_string(c.nranks) + " ranks): too large to model");
        CommInfo info;
        info.hash = c.hash;
        info.label = !c.name.empty() ? c.name : c.hash.substr(0, 8);
        info.nranks = c.nranks;
        info.members.assign(std::max(c.nranks, 0), -1);
        s.comms.push_back(std::move(info));
      }
      CommInfo& info = s.comms[it->second];
      if (info.nranks != c.nranks)
        throw std::runtime_error("model: communicator " + c.hash + " has nranks " + std::to_string(info.nranks) +
                                 " in one file and " + std::to_string(c.nranks) + " in " + p.path);
      if (c.rank < 0 || c.rank >= c.nranks)
        throw std::runtime_error("model: " + p.path + ": rank " + std::to_string(c.rank) + " out of range in communicator " + c.hash);
      int32_t& slot = info.members[c.rank];
      if (slot >= 0 && slot != static_cast<int32_t>(pi))
        throw std::runtime_error("model: rank " + std::to_string(c.rank) + " of communicator " + c.hash +
                                 " appears in two files: " + sched.procs[slot].info.shown_path() + " and " + p.shown_path());
      slot = static_cast<int32_t>(pi);
      local_to_global[ci] = it->second;
      if (ps.comm_rank.size() < s.comms.size()) ps.comm_rank.resize(s.comms.size(), -1);
      ps.comm_rank[it->second] = c.rank;
      if (ps.retired_colls.size() < s.comms.size()) ps.retired_colls.resize(s.comms.size(), 0);
      ps.retired_colls[it->second] = c.retired_collectives;
    }

    std::unordered_map<uint64_t, int32_t> stream_idx;
    auto stream_of = [&](uint64_t v) {
      auto [it, fresh] = stream_idx.try_emplace(v, static_cast<int32_t>(ps.streams.size()));
      if (fresh) ps.streams.push_back(v);
      return it->second;
    };

    // Streams are numbered ops first, then waits, each in stored order; SchedOp::stream indexes
    // sp.streams, so most ops find theirs in an array (255: the overflow bucket, by value).
    auto usable = [&](const SchedOp& o) { return o.comm < p.comms.size() && local_to_global[o.comm] >= 0; };
    std::vector<int32_t> stream_by_slot(sp.streams.size(), -1);
    auto op_stream = [&](size_t oi) {
      const uint8_t slot = sp.ops[oi].stream;
      if (slot >= stream_by_slot.size()) return stream_of(sp.stream_of(oi));
      if (stream_by_slot[slot] < 0) stream_by_slot[slot] = stream_of(sp.streams[slot]);
      return stream_by_slot[slot];
    };
    int64_t ignored = 0;  // ops on communicators the model cannot identify
    for (size_t oi = 0; oi < sp.ops.size(); ++oi) {
      if (usable(sp.ops[oi])) op_stream(oi);
      else ++ignored;
    }
    for (const HostWait& w : sp.waits) stream_of(w.stream);
    for (size_t l = 0; l < holes.per_proc[pi].size() && l < p.comms.size(); ++l) {
      const ProcComm& pc = holes.per_proc[pi][l];
      if (pc.whole() || ps.hole) continue;
      ps.hole = true;  // the first one named; the cut below covers every communicator
      ps.problems_cut = p.shown_path() + ": comm " + p.comms[l].hash + ": its records from seq " +
                        std::to_string(pc.complete_through_seq + 1) + " on are missing (" + gap_cause_name(pc.gap) +
                        "): its calls past its hole are unknown, not modelled";
    }
    for (size_t oi = 0; oi < sp.ops.size() && ps.hole; ++oi) {
      const SchedOp& o = sp.ops[oi];
      if (o.comm >= holes.per_proc[pi].size()) continue;
      const ProcComm& pc = holes.per_proc[pi][o.comm];
      if (o.seq <= pc.complete_through_seq || static_cast<int64_t>(o.call_index) >= ps.cut_call) continue;
      ps.cut_call = static_cast<int64_t>(o.call_index);
    }
    if (!ps.problems_cut.empty()) s.problems.push_back("incomplete evidence: " + ps.problems_cut);

    auto add_op = [&](size_t oi) {
      const SchedOp& o = sp.ops[oi];
      if (!usable(o) || static_cast<int64_t>(o.call_index) >= ps.cut_call) return;
      const Signature& sig = sched.sigs[o.sig];
      Item& it = ps.items.emplace_back();
      it.kind = ItemKind::kOp;
      it.op = sig.op;
      it.call_index = o.call_index;
      it.seq = o.seq;
      it.comm = local_to_global[o.comm];
      it.stream = op_stream(oi);
      it.thread = static_cast<int32_t>(sp.op_threads[oi]);
      it.group = static_cast<int64_t>(sp.group_of(oi)) - 1;
      it.count = sig.count;
      it.dtype = sig.dtype;
      it.redop = sig.redop;
      it.root = sig.root;
      it.op_index = static_cast<int32_t>(oi);
      if (is_p2p(it.op)) {
        it.first_part = static_cast<int32_t>(ps.parts.size());
        if (it.op == OpKind::SendRecv) {
          for (const OpPart& part : sig.parts) {
            if (part.op != OpKind::Send && part.op != OpKind::Recv)
              throw std::runtime_error("model: " + p.path + ": send_recv call " + std::to_string(o.call_index) + " has a '" +
                                       vocab::name(part.op) + "' part");
            ps.parts.push_back(Part{part.op == OpKind::Send, part.peer, part.count, part.dtype});
          }
        } else {
          ps.parts.push_back(Part{it.op == OpKind::Send, sig.peer, sig.count, it.dtype});
        }
        it.nparts = static_cast<int32_t>(ps.parts.size()) - it.first_part;
        for (int32_t k = it.first_part; k < it.first_part + it.nparts; ++k) {
          const int nr = s.comms[it.comm].nranks;
          if (ps.parts[k].peer < 0 || ps.parts[k].peer >= nr)
            throw std::runtime_error("model: " + p.path + ": p2p call " + std::to_string(o.call_index) + " has peer " +
                                     std::to_string(ps.parts[k].peer) + " outside communicator of " + std::to_string(nr));
        }
      } else if (it.op == OpKind::Coalesced) {
        int16_t& cached = coalesced_name[o.sig];  // once per signature, not per op
        if (cached == kNotInterned) {
          std::string names;
          for (const OpPart& part : sig.parts)
            names += std::string(names.empty() ? "" : ",") + vocab::name(part.op) + ":" + vocab::name(part.dtype) + ":" +
                     std::to_string(part.count);
          cached = s.intern("coalesced[" + names + "]");
        }
        it.coalesced_sig = cached;
      }
    };
    auto add_wait = [&](const HostWait& w) {
      if (w.call_index >= ps.cut_call) return;
      Item& it = ps.items.emplace_back();
      it.kind = item_kind(w.kind);
      it.call_index = w.call_index;
      it.stream = stream_of(w.stream);
      it.thread = static_cast<int32_t>(w.thread);
      it.event = static_cast<int64_t>(w.event);
    };

    // Ops and waits merged in call order straight into the items (an op before a wait of the
    // same call index). The schedule keeps both in call order; the orders below are only for
    // hand-built input.
    std::vector<uint32_t> op_order, wait_order;  // empty: stored order is call order
    auto call_order = [](std::vector<uint32_t>& order, size_t n, auto call_of) {
      bool sorted = true;
      for (size_t i = 1; i < n && sorted; ++i) sorted = call_of(i - 1) <= call_of(i);
      if (sorted) return;
      order.resize(n);
      for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
      std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return call_of(a) < call_of(b); });
    };
    call_order(op_order, sp.ops.size(), [&](size_t i) { return int64_t(sp.ops[i].call_index); });
    call_order(wait_order, sp.waits.size(), [&](size_t i) { return sp.waits[i].call_index; });
    ps.items.reserve(sp.ops.size() - static_cast<size_t>(ignored) + sp.waits.size());
    size_t a = 0, b = 0;
    while (a < sp.ops.size() || b < sp.waits.size()) {
      const size_t oi = op_order.empty() ? a : op_order[a < sp.ops.size() ? a : 0];
      const size_t wi = wait_order.empty() ? b : wait_order[b < sp.waits.size() ? b : 0];
      if (b == sp.waits.size() || (a < sp.ops.size() && !(sp.waits[wi].call_index < sp.ops[oi].call_index))) {
        add_op(oi);
        ++a;
      } else {
        add_wait(sp.waits[wi]);
        ++b;
      }
    }
    if (ignored)
      s.problems.push_back(p.path + ": " + std::to_string(ignored) +
                           " ops on communicators that cannot be identified across ranks are ignored");
  }
  for (auto& ps : s.procs) ps.comm_rank.resize(s.comms.size(), -1), ps.retired_colls.resize(s.comms.size(), 0);
  // One line per communicator: a few missing ranks named, the rest counted (nranks comes from
  // the file and can be 2^24).
  for (const CommInfo& c : s.comms) {
    std::string list;
    int64_t missing = 0;
    for (int r = 0; r < c.nranks; ++r)
      if (c.members[r] < 0 && missing++ < 8) list += (list.empty() ? "" : ",") + std::to_string(r);
    if (missing > 8) list += ",... (" + std::to_string(missing) + " in all)";
    if (missing)
      s.problems.push_back("communicator " + c.label + ": rank" + (missing > 1 ? "s " : " ") + list + " of " +
                           std::to_string(c.nranks) + (missing > 1 ? " have" : " has") +
                           " no trace file; its ops on it are taken as never issued");
  }
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The engine

namespace {

struct Unit {
  int32_t proc = 0;
  int32_t thread = 0;       // host thread that issues it
  int32_t first_item = 0;   // global item id of its first item
  int32_t items_begin = 0;  // into Engine::unit_items
  int32_t nitems = 0;
  int32_t q_begin = 0;      // into Engine::unit_queues
  int32_t nq = 0;
  int32_t pending = 0;      // items not complete
  int32_t at_head = 0;      // queues whose head it is (runnable when == nq and issued)
  int32_t marker_q = -1;    // barrier (stream_wait_event): wait until queue head >= marker_pos
  int32_t marker_pos = 0;
  bool barrier = false;
  bool issued = false;
  bool active = false;
  bool done = false;
};

struct Queue {
  enum Kind : uint8_t { kStream, kComm, kDevice } kind = kStream;
  int32_t proc = 0;
  int32_t key = 0;  // stream index or comm index
  std::vector<int32_t> units;
  int32_t head = 0;
  int32_t waiters = -1;  // index into Engine::waiters_ once something waits on this queue
};

struct Marker {
  int32_t q;
  int32_t pos;
};

// inst_slots_ values besides a global item id.
constexpr int32_t kNeverIssued = -1;
constexpr int32_t kRetired = -2;  // the member's trace retired it (size cap): reached

struct Instance {
  int32_t comm = 0;
  int64_t ordinal = 0;  // 0-based absolute collective ordinal on the communicator
  int32_t arrived = 0;
  int32_t slots = 0;  // into Engine::inst_slots, nranks entries (global item ids, -1 = never issued)
  bool mismatch = false;
};

struct HostThread {
  int32_t proc = 0;
  std::vector<int32_t> steps;  // >= 0: issue unit; < 0: wait, global item id -(s+1)
  int32_t cursor = 0;
};

class Engine {
 public:
  Engine(const WorkList& s, bool serialized) : s_(s), serialized_(serialized) { build(); }
  void run(uint64_t shuffle_seed);
  Result witness(Verdict stuck_verdict) const;
  bool all_done() const { return done_units_ == static_cast<int64_t>(units_.size()); }
  int64_t op_items() const { return op_items_; }
  int64_t completed_op_items() const { return completed_op_items_; }

 private:
  // Building the queues, units and matching tables (build() and its steps).
  struct Matching;
  struct OpenGroup;
  struct ProcBuild;
  void build();
  void allocate_items();
  void build_proc(int32_t proc, Matching& m);
  void add_host_item(ProcBuild& b, int32_t gitem, const Item& it);
  int32_t place_op(ProcBuild& b, int32_t gitem, const Item& it);
  void add_p2p_parts(Matching& m, int32_t proc, int32_t gitem, const Item& it);
  void join_collective(Matching& m, ProcBuild& b, int32_t gitem, const Item& it);
  void pair_channels(const Matching& m);
  int32_t new_queue(int32_t proc, Queue::Kind kind, int32_t key);
  int32_t stream_queue(ProcBuild& b, int32_t stream);
  int32_t comm_queue(ProcBuild& b, int32_t comm);
  int32_t device_size(const ProcBuild& b) const;
  int32_t new_unit(const ProcBuild& b, int32_t gitem, int32_t thread);
  void finish_unit(int32_t unit, const int32_t* items, int32_t nitems, const int32_t* qs, int32_t nq);
  void close_group(ProcBuild& b, int32_t thread);
  int64_t retired(int32_t proc, size_t comm) const;  // collectives the proc's trace retired on comm
  void advance(int32_t thread);
  void try_activate(int32_t unit);
  void arrive(int32_t gitem);
  void complete_item(int32_t gitem);
  void complete_unit(int32_t unit);
  bool marker_ok(const Marker& m) const { return queues_[m.q].head >= m.pos; }
  void add_waiter(const Marker& m, int32_t waiter) {
    Queue& q = queues_[m.q];
    if (q.waiters < 0) {
      q.waiters = static_cast<int32_t>(waiters_.size());
      waiters_.emplace_back();
    }
    waiters_[q.waiters].emplace(m.pos, waiter);
  }
  static bool same_collective(const Item& a, const Item& b);
  bool members_agree(const Instance& in) const;  // among the members that issue it

  // Explanations (only after run()).
  std::string item_desc(int32_t gitem) const;
  std::string unit_desc(int32_t unit) const;
  std::string wait_desc(int32_t gitem) const;
  std::string queue_desc(int32_t q) const;
  // Why `unit` cannot progress: text, and the unit it waits on (-1: none / not a unit).
  struct Why {
    std::string text;
    int32_t unit = -1;  // the unit it waits on, -1: none
    int32_t proc = -1;  // the rank it waits on when that rank never issues the op, else -1
  };
  Why why(int32_t unit) const;
  // "comm X seq N: rank 0 at a, rank 1 at b"; with exclude_proc, only the other members.
  std::string instance_summary(const Instance& in, int32_t exclude_proc = -1) const;

  const Item& item(int32_t g) const { return s_.procs[item_proc_[g]].items[g - item_base_[item_proc_[g]]]; }
  // The op of an item (Schedule::procs[p].ops index), -1 for a host wait.
  int32_t op_index(int32_t g) const { return item(g).kind == ItemKind::kOp ? item(g).op_index : -1; }
  const std::string& plabel(int32_t proc) const { return s_.procs[proc].label; }
  // Its schedule stops at a hole in its records (ProcWork::cut_call): past it, unknown.
  bool past_hole(int32_t proc) const { return proc >= 0 && s_.procs[proc].hole; }
  std::string member_label(int32_t comm, int32_t crank) const {
    int32_t p = s_.comms[comm].members[crank];
    return p >= 0 ? plabel(p) : "comm rank " + std::to_string(crank) + " (no trace file)";
  }

  const WorkList& s_;
  bool serialized_;
  std::vector<int32_t> item_base_;   // per proc: global id of its first item
  std::vector<int32_t> item_proc_;   // per global item
  std::vector<int32_t> item_unit_;   // per global item (-1 for host waits / event records)
  std::vector<int32_t> item_inst_;   // collective instance, -1 otherwise
  std::vector<int32_t> item_pending_parts_;
  std::vector<std::vector<Marker>> wait_markers_;  // per global item (host waits only), sparse
  std::unordered_map<int32_t, int32_t> wait_marker_idx_;
  std::vector<int32_t> part_base_;   // per proc: global id of its first part
  std::vector<int32_t> part_item_;
  std::vector<int32_t> part_partner_;
  std::vector<uint8_t> part_state_;  // 0 waiting, 1 arrived, 2 matched, 3 mismatched
  std::vector<Unit> units_;
  std::vector<int32_t> unit_items_;
  std::vector<int32_t> unit_queues_;
  std::vector<Queue> queues_;
  // Per queue with waiters: (position needed, waiter), smallest first; waiter >= 0 is a unit
  // (a stream_wait_event barrier), < 0 a host thread -(w+1).
  std::vector<std::priority_queue<std::pair<int32_t, int32_t>, std::vector<std::pair<int32_t, int32_t>>, std::greater<>>>
      waiters_;
  std::vector<Instance> insts_;
  std::vector<int32_t> inst_slots_;
  std::vector<HostThread> threads_;
  std::vector<int32_t> work_units_, work_threads_;
  int64_t done_units_ = 0, op_items_ = 0, completed_op_items_ = 0;
};

int32_t Engine::new_queue(int32_t proc, Queue::Kind kind, int32_t key) {
  Queue q;
  q.kind = kind;
  q.proc = proc;
  q.key = key;
  queues_.push_back(std::move(q));
  return static_cast<int32_t>(queues_.size() - 1);
}

// What the steps of build() share across processes: collective instances per (comm, ordinal),
// p2p channels per (comm, src, dst), and where each communicator's instances start.
struct Engine::Matching {
  std::vector<std::vector<int32_t>> comm_insts;  // per comm: instance ids by ordinal - first_ordinal
  struct Channel {
    std::vector<int32_t> sends, recvs;  // global part ids, in issue order
  };
  std::unordered_map<uint64_t, Channel> channels;
  // Capped traces: members align collectives by absolute ordinal (retired + position); the
  // instances of a communicator start at the fewest collectives any member retired.
  std::vector<int64_t> first_ordinal;
};

// A group being assembled on one host thread: its rows can interleave with other threads'
// calls, so its items and queues are collected until the thread's group ends.
struct Engine::OpenGroup {
  int64_t group = -1;
  int32_t unit = -1;
  int32_t dev_pos = -1;  // serialized model: its position in the device queue
  std::vector<int32_t> items, queues;
};

// One process being turned into units and queues (build_proc).
struct Engine::ProcBuild {
  int32_t proc = 0;
  int32_t thread_base = 0;               // its first host thread in threads_
  int32_t device_q = -1;                 // serialized model: its only queue
  std::vector<int32_t> stream_q, comm_q; // queue per stream / comm, created when first used
  std::vector<int64_t> coll_count;       // per comm: collectives issued so far (+ retired - first_ordinal)
  std::vector<int32_t> stream_end;       // serialized model: device position after each stream's last unit
  std::vector<OpenGroup> open;           // per host thread
  std::unordered_map<int64_t, Marker> events;  // event -> where its last record was
};

int64_t Engine::retired(int32_t p, size_t c) const {
  const auto& r = s_.procs[p].retired_colls;
  return c < r.size() ? r[c] : 0;
}

void Engine::allocate_items() {
  const int32_t nprocs = static_cast<int32_t>(s_.procs.size());
  item_base_.resize(nprocs);
  part_base_.resize(nprocs);
  int64_t total = 0, total_parts = 0;
  for (int32_t p = 0; p < nprocs; ++p) {
    item_base_[p] = static_cast<int32_t>(total);
    part_base_[p] = static_cast<int32_t>(total_parts);
    total += s_.procs[p].items.size();
    total_parts += s_.procs[p].parts.size();
  }
  if (total > INT32_MAX / 2 || total_parts > INT32_MAX / 2) throw std::runtime_error("model: schedule too large");
  item_proc_.resize(total);
  item_unit_.assign(total, -1);
  item_inst_.assign(total, -1);
  item_pending_parts_.assign(total, 0);
  part_item_.resize(total_parts);
  part_partner_.assign(total_parts, -1);
  part_state_.assign(total_parts, 0);
  units_.reserve(total);
  unit_items_.reserve(total);
  unit_queues_.reserve(serialized_ ? total : total * 2);
}

void Engine::build() {
  allocate_items();
  Matching m;
  m.comm_insts.resize(s_.comms.size());
  m.first_ordinal.assign(s_.comms.size(), 0);
  for (size_t c = 0; c < s_.comms.size(); ++c) {
    int64_t lo = INT64_MAX;
    for (int32_t member : s_.comms[c].members)
      if (member >= 0) lo = std::min(lo, retired(member, c));
    m.first_ordinal[c] = lo == INT64_MAX ? 0 : lo;
  }
  for (int32_t p = 0; p < static_cast<int32_t>(s_.procs.size()); ++p) build_proc(p, m);
  for (const Queue& q : queues_)
    if (!q.units.empty()) units_[q.units[0]].at_head++;
  pair_channels(m);
}

// A process's items in call order: host waits become markers or barriers, ops become units
// (a group: one unit) on their queues, and each op joins its collective instance or p2p channels.
void Engine::build_proc(int32_t p, Matching& m) {
  const ProcWork& ps = s_.procs[p];
  ProcBuild b;
  b.proc = p;
  b.stream_q.assign(ps.streams.size(), -1);
  b.comm_q.assign(s_.comms.size(), -1);
  b.coll_count.assign(s_.comms.size(), 0);
  for (size_t c = 0; c < s_.comms.size(); ++c) b.coll_count[c] = retired(p, c) - m.first_ordinal[c];
  // Serialized model: the device queue is a total order that implies stream and communicator
  // order, so it is the only queue; "stream s done up to here" becomes a device position.
  b.device_q = serialized_ ? new_queue(p, Queue::kDevice, 0) : -1;
  b.stream_end.assign(ps.streams.size(), 0);
  b.open.resize(ps.nthreads);
  b.thread_base = static_cast<int32_t>(threads_.size());
  std::vector<int32_t> per_thread(ps.nthreads, 0);
  for (const Item& it : ps.items) ++per_thread[it.thread];
  for (size_t t = 0; t < ps.nthreads; ++t) {
    HostThread h;
    h.proc = p;
    h.steps.reserve(per_thread[t]);
    threads_.push_back(std::move(h));
  }
  for (size_t i = 0; i < ps.items.size(); ++i) {
    const int32_t g = item_base_[p] + static_cast<int32_t>(i);
    const Item& it = ps.items[i];
    item_proc_[g] = p;
    if (it.kind != ItemKind::kOp) {
      close_group(b, it.thread);
      add_host_item(b, g, it);
      continue;
    }
    ++op_items_;
    const int32_t u = place_op(b, g, it);
    item_unit_[g] = u;
    units_[u].pending++;
    if (is_p2p(it.op)) add_p2p_parts(m, p, g, it);
    else join_collective(m, b, g, it);
  }
  for (size_t t = 0; t < ps.nthreads; ++t) close_group(b, static_cast<int32_t>(t));
}

int32_t Engine::stream_queue(ProcBuild& b, int32_t stream) {
  if (b.stream_q[stream] < 0) b.stream_q[stream] = new_queue(b.proc, Queue::kStream, stream);
  return b.stream_q[stream];
}

int32_t Engine::comm_queue(ProcBuild& b, int32_t comm) {
  if (b.comm_q[comm] < 0) b.comm_q[comm] = new_queue(b.proc, Queue::kComm, comm);
  return b.comm_q[comm];
}

int32_t Engine::device_size(const ProcBuild& b) const { return static_cast<int32_t>(queues_[b.device_q].units.size()); }

int32_t Engine::new_unit(const ProcBuild& b, int32_t g, int32_t thread) {
  Unit un;
  un.proc = b.proc;
  un.thread = b.thread_base + thread;
  un.first_item = g;
  units_.push_back(un);
  threads_[un.thread].steps.push_back(static_cast<int32_t>(units_.size() - 1));
  return static_cast<int32_t>(units_.size() - 1);
}

void Engine::finish_unit(int32_t u, const int32_t* items, int32_t nitems, const int32_t* qs, int32_t nq) {
  Unit& un = units_[u];
  un.items_begin = static_cast<int32_t>(unit_items_.size());
  un.nitems = nitems;
  unit_items_.insert(unit_items_.end(), items, items + nitems);
  un.q_begin = static_cast<int32_t>(unit_queues_.size());
  un.nq = nq;
  unit_queues_.insert(unit_queues_.end(), qs, qs + nq);
}

void Engine::close_group(ProcBuild& b, int32_t thread) {
  OpenGroup& og = b.open[thread];
  if (og.unit < 0) return;
  finish_unit(og.unit, og.items.data(), static_cast<int32_t>(og.items.size()), og.queues.data(),
              static_cast<int32_t>(og.queues.size()));
  og.unit = -1;
  og.group = -1;
  og.items.clear();
  og.queues.clear();
}

// An event record remembers a stream position; stream_wait_event becomes a barrier unit on its
// stream; the syncs become a host step that waits for markers.
void Engine::add_host_item(ProcBuild& b, int32_t g, const Item& it) {
  const int32_t sq = serialized_ ? b.device_q : stream_queue(b, it.stream);
  // Everything issued so far on the item's stream.
  const Marker stream_mark = serialized_ ? Marker{b.device_q, b.stream_end[it.stream]}
                                         : Marker{sq, static_cast<int32_t>(queues_[sq].units.size())};
  switch (it.kind) {
    case ItemKind::kEventRecord:
      b.events[it.event] = stream_mark;
      break;
    case ItemKind::kStreamWaitEvent: {
      auto e = b.events.find(it.event);
      if (e == b.events.end()) break;  // never recorded: waits for nothing (as in CUDA)
      const int32_t u = new_unit(b, g, it.thread);
      units_[u].barrier = true;
      units_[u].marker_q = e->second.q;
      units_[u].marker_pos = e->second.pos;
      item_unit_[g] = u;
      queues_[sq].units.push_back(u);
      finish_unit(u, nullptr, 0, &sq, 1);
      break;
    }
    case ItemKind::kStreamSync:
    case ItemKind::kEventSync:
    case ItemKind::kDeviceSync: {
      std::vector<Marker> ms;
      if (it.kind == ItemKind::kStreamSync) {
        ms.push_back(stream_mark);
      } else if (it.kind == ItemKind::kEventSync) {
        auto e = b.events.find(it.event);
        if (e != b.events.end()) ms.push_back(e->second);
      } else if (serialized_) {
        ms.push_back(Marker{b.device_q, device_size(b)});
      } else {
        for (int32_t q : b.stream_q)
          if (q >= 0) ms.push_back(Marker{q, static_cast<int32_t>(queues_[q].units.size())});
      }
      wait_marker_idx_[g] = static_cast<int32_t>(wait_markers_.size());
      wait_markers_.push_back(std::move(ms));
      threads_[b.thread_base + it.thread].steps.push_back(-(g + 1));
      break;
    }
    default: break;
  }
}

// The unit of an op: its own, or its thread's open group's; queued on its stream and
// communicator (serialized model: the device queue). Returns the unit.
int32_t Engine::place_op(ProcBuild& b, int32_t g, const Item& it) {
  const int32_t t = it.thread;
  int32_t qs[2];
  int32_t nq;
  // Point-to-point ops of a Flight Recorder dump: ordered only on their own stream (per peer and
  // direction), in both models: where torch ran them relative to the group's ops is not recorded.
  const bool own_order = s_.procs[b.proc].p2p_outside_comm_order && is_p2p(it.op);
  const bool on_device = serialized_ && !own_order;
  if (own_order) {
    qs[0] = stream_queue(b, it.stream);
    nq = 1;
  } else if (serialized_) {
    qs[0] = b.device_q;
    nq = 1;
  } else {
    qs[0] = stream_queue(b, it.stream);
    qs[1] = comm_queue(b, it.comm);
    nq = 2;
  }
  if (it.group < 0) {
    close_group(b, t);
    const int32_t u = new_unit(b, g, t);
    for (int32_t k = 0; k < nq; ++k) queues_[qs[k]].units.push_back(u);
    finish_unit(u, &g, 1, qs, nq);
    if (on_device) b.stream_end[it.stream] = device_size(b);
    return u;
  }
  OpenGroup& og = b.open[t];
  if (og.unit < 0 || og.group != it.group) {
    close_group(b, t);
    og.unit = new_unit(b, g, t);
    og.group = it.group;
    og.dev_pos = serialized_ ? device_size(b) : -1;
  }
  og.items.push_back(g);
  if (on_device) b.stream_end[it.stream] = og.dev_pos + 1;
  for (int32_t k = 0; k < nq; ++k) {
    if (std::find(og.queues.begin(), og.queues.end(), qs[k]) != og.queues.end()) continue;
    og.queues.push_back(qs[k]);
    queues_[qs[k]].units.push_back(og.unit);
  }
  return og.unit;
}

// Each send / recv part joins its (comm, sender, receiver) channel in issue order.
void Engine::add_p2p_parts(Matching& m, int32_t p, int32_t g, const Item& it) {
  const ProcWork& ps = s_.procs[p];
  const int32_t crank = ps.comm_rank[it.comm];
  item_pending_parts_[g] = it.nparts;
  for (int32_t k = 0; k < it.nparts; ++k) {
    const Part& part = ps.parts[it.first_part + k];
    const int32_t gp = part_base_[p] + it.first_part + k;
    part_item_[gp] = g;
    Matching::Channel& ch = m.channels[p2p_channel(it.comm, crank, part.peer, part.is_send).key()];
    (part.is_send ? ch.sends : ch.recvs).push_back(gp);
  }
}

// The op takes its slot in the instance of its collective ordinal, created on first use; the
// members that retired that ordinal count as arrived.
void Engine::join_collective(Matching& m, ProcBuild& b, int32_t g, const Item& it) {
  const CommInfo& c = s_.comms[it.comm];
  const int32_t crank = s_.procs[b.proc].comm_rank[it.comm];
  const int64_t ord = b.coll_count[it.comm]++;
  auto& list = m.comm_insts[it.comm];
  while (static_cast<int64_t>(list.size()) <= ord) {
    Instance in;
    in.comm = it.comm;
    in.ordinal = m.first_ordinal[it.comm] + static_cast<int64_t>(list.size());
    in.slots = static_cast<int32_t>(inst_slots_.size());
    if (inst_slots_.size() + c.nranks > kMaxInstanceSlots)
      throw std::runtime_error("model: collectives x communicator sizes exceed " + std::to_string(kMaxInstanceSlots) +
                               " rank slots (communicator " + c.hash + " of " + std::to_string(c.nranks) +
                               " ranks): too large to model");
    inst_slots_.resize(inst_slots_.size() + c.nranks, kNeverIssued);
    for (int32_t r = 0; r < c.nranks; ++r)
      if (c.members[r] >= 0 && retired(c.members[r], size_t(it.comm)) > in.ordinal) {
        inst_slots_[in.slots + r] = kRetired;
        ++in.arrived;
      }
    list.push_back(static_cast<int32_t>(insts_.size()));
    insts_.push_back(in);
  }
  item_inst_[g] = list[ord];
  inst_slots_[insts_[list[ord]].slots + crank] = g;
}

// The k-th send of a channel meets its k-th receive.
void Engine::pair_channels(const Matching& m) {
  for (const auto& [key, ch] : m.channels) {
    const size_t n = std::min(ch.sends.size(), ch.recvs.size());
    for (size_t k = 0; k < n; ++k) {
      part_partner_[ch.sends[k]] = ch.recvs[k];
      part_partner_[ch.recvs[k]] = ch.sends[k];
    }
  }
}

void Engine::run(uint64_t shuffle_seed) {
  for (int32_t t = static_cast<int32_t>(threads_.size()) - 1; t >= 0; --t) work_threads_.push_back(t);
  std::mt19937_64 rng(shuffle_seed);
  while (shuffle_seed != 0 && (!work_threads_.empty() || !work_units_.empty())) {
    // Any order of the enabled transitions must reach the same final state (confluence);
    // tests check that by taking them in a random order.
    const size_t n = work_threads_.size() + work_units_.size();
    size_t k = std::uniform_int_distribution<size_t>(0, n - 1)(rng);
    if (k < work_threads_.size()) {
      std::swap(work_threads_[k], work_threads_.back());
      int32_t t = work_threads_.back();
      work_threads_.pop_back();
      advance(t);
    } else {
      k -= work_threads_.size();
      std::swap(work_units_[k], work_units_.back());
      int32_t u = work_units_.back();
      work_units_.pop_back();
      try_activate(u);
    }
  }
  while (!work_threads_.empty() || !work_units_.empty()) {
    if (!work_threads_.empty()) {
      int32_t t = work_threads_.back();
      work_threads_.pop_back();
      advance(t);
    } else {
      int32_t u = work_units_.back();
      work_units_.pop_back();
      try_activate(u);
    }
  }
}

void Engine::advance(int32_t t) {
  HostThread& h = threads_[t];
  while (h.cursor < static_cast<int32_t>(h.steps.size())) {
    const int32_t step = h.steps[h.cursor];
    if (step >= 0) {
      units_[step].issued = true;
      if (units_[step].at_head == units_[step].nq) work_units_.push_back(step);
      ++h.cursor;
      continue;
    }
    const int32_t g = -(step + 1);
    for (const Marker& m : wait_markers_[wait_marker_idx_.at(g)]) {
      if (!marker_ok(m)) {
        add_waiter(m, -(t + 1));
        return;
      }
    }
    ++h.cursor;
  }
}

void Engine::try_activate(int32_t u) {
  Unit& un = units_[u];
  if (un.done || !un.issued) return;
  if (!un.active) {
    if (un.at_head < un.nq) return;
    un.active = true;
    if (!un.barrier) {
      for (int32_t k = 0; k < un.nitems; ++k) arrive(unit_items_[un.items_begin + k]);
      if (un.nitems == 0 || un.pending == 0) {
        if (!un.done) complete_unit(u);
      }
      return;
    }
  }
  if (un.barrier && !un.done) {
    const Marker m{un.marker_q, un.marker_pos};
    if (marker_ok(m)) complete_unit(u);
    else add_waiter(m, u);
  }
}

bool Engine::same_collective(const Item& a, const Item& b) {
  if (a.op != b.op || a.root != b.root || a.redop != b.redop || a.coalesced_sig != b.coalesced_sig) return false;
  // Grouped all-to-alls record total elements sent, which uneven splits make rank-dependent.
  return a.op == OpKind::AllToAll || a.op == OpKind::Coalesced || (a.count == b.count && a.dtype == b.dtype);
}

bool Engine::members_agree(const Instance& in) const {
  const int32_t n = s_.comms[in.comm].nranks;
  const Item* first = nullptr;
  for (int32_t r = 0; r < n; ++r) {
    const int32_t g = inst_slots_[in.slots + r];
    if (g < 0) continue;
    if (!first) first = &item(g);
    else if (!same_collective(*first, item(g))) return false;
  }
  return true;
}

void Engine::arrive(int32_t g) {
  const int32_t inst = item_inst_[g];
  if (inst >= 0) {
    Instance& in = insts_[inst];
    if (++in.arrived < s_.comms[in.comm].nranks) return;
    if (!members_agree(in)) {
      in.mismatch = true;
      return;
    }
    for (int32_t r = 0; r < s_.comms[in.comm].nranks; ++r)
      if (inst_slots_[in.slots + r] >= 0) complete_item(inst_slots_[in.slots + r]);
    return;
  }
  const Item& it = item(g);
  const int32_t p = item_proc_[g];
  for (int32_t k = 0; k < it.nparts; ++k) {
    const int32_t gp = part_base_[p] + it.first_part + k;
    part_state_[gp] = 1;
    const int32_t other = part_partner_[gp];
    if (other < 0 || part_state_[other] != 1) continue;
    const Part& a = s_.procs[p].parts[it.first_part + k];
    const int32_t og = part_item_[other];
    const int32_t op = item_proc_[og];
    const Part& b = s_.procs[op].parts[other - part_base_[op]];
    if (a.count != b.count || a.dtype != b.dtype) {
      part_state_[gp] = part_state_[other] = 3;
      continue;
    }
    part_state_[gp] = part_state_[other] = 2;
    if (--item_pending_parts_[g] == 0) complete_item(g);
    if (--item_pending_parts_[og] == 0) complete_item(og);
  }
}

void Engine::complete_item(int32_t g) {
  ++completed_op_items_;
  Unit& un = units_[item_unit_[g]];
  if (--un.pending == 0 && un.active) complete_unit(item_unit_[g]);
}

void Engine::complete_unit(int32_t u) {
  Unit& un = units_[u];
  un.done = true;
  ++done_units_;
  for (int32_t k = 0; k < un.nq; ++k) {
    Queue& q = queues_[unit_queues_[un.q_begin + k]];
    ++q.head;
    if (q.head < static_cast<int32_t>(q.units.size())) {
      const int32_t next = q.units[q.head];
      if (++units_[next].at_head == units_[next].nq && units_[next].issued) work_units_.push_back(next);
    }
    if (q.waiters < 0) continue;
    auto& heap = waiters_[q.waiters];
    while (!heap.empty() && heap.top().first <= q.head) {
      const int32_t w = heap.top().second;
      heap.pop();
      if (w >= 0) work_units_.push_back(w);
      else work_threads_.push_back(-(w + 1));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Explanations

std::string Engine::item_desc(int32_t g) const {
  const Item& it = item(g);
  const ProcWork& ps = s_.procs[item_proc_[g]];
  std::string d = "comm " + s_.comms[it.comm].label + " seq " + std::to_string(it.seq) + " " + vocab::name(it.op);
  if (it.op == OpKind::Send || it.op == OpKind::Recv) {
    const Part& part = ps.parts[it.first_part];
    d += std::string(part.is_send ? " to " : " from ") + member_label(it.comm, part.peer);
  }
  return d;
}

std::string Engine::queue_desc(int32_t q) const {
  const Queue& qu = queues_[q];
  switch (qu.kind) {
    case Queue::kStream: return "stream " + hex(s_.procs[qu.proc].streams[qu.key]);
    case Queue::kComm: return "comm " + s_.comms[qu.key].label;
    case Queue::kDevice: return "the device (one NCCL kernel at a time)";
  }
  return "?";
}

std::string Engine::unit_desc(int32_t u) const {
  const Unit& un = units_[u];
  if (un.barrier) {
    const Item& it = item(un.first_item);
    return "stream_wait_event(event " + hex(static_cast<uint64_t>(it.event)) + ") on stream " +
           hex(s_.procs[un.proc].streams[it.stream]);
  }
  if (un.nitems == 1) {
    const int32_t g = unit_items_[un.items_begin];
    return item_desc(g) + " on stream " + hex(s_.procs[un.proc].streams[item(g).stream]);
  }
  std::string d = "group {";
  for (int32_t k = 0; k < un.nitems; ++k) d += (k ? ", " : "") + item_desc(unit_items_[un.items_begin + k]);
  return d + "}";
}

std::string Engine::wait_desc(int32_t g) const {
  const Item& it = item(g);
  const ProcWork& ps = s_.procs[item_proc_[g]];
  switch (it.kind) {
    case ItemKind::kStreamSync: return "stream_sync(stream " + hex(ps.streams[it.stream]) + ")";
    case ItemKind::kEventSync: return "event_sync(event " + hex(static_cast<uint64_t>(it.event)) + ")";
    case ItemKind::kDeviceSync: return "device_sync";
    default: return "wait";
  }
}

std::string Engine::instance_summary(const Instance& in, int32_t exclude_proc) const {
  const CommInfo& c = s_.comms[in.comm];
  int64_t seq = -1;
  bool same_seq = true, same_kind = true;
  int first_kind = -1;
  for (int32_t r = 0; r < c.nranks; ++r) {
    const int32_t g = inst_slots_[in.slots + r];
    if (g < 0) continue;
    const Item& it = item(g);
    if (seq < 0) seq = it.seq;
    else if (seq != it.seq) same_seq = false;
    if (first_kind < 0) first_kind = static_cast<int>(it.op);
    else if (first_kind != static_cast<int>(it.op)) same_kind = false;
  }
  // Members grouped by what they issued, so a 1,024-rank communicator still reads in one line:
  // "rank 1023 at all_reduce, 31 ranks at all_gather (rank 31, rank 63, rank 95, ...)".
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (int32_t r = 0; r < c.nranks; ++r) {
    const int32_t g = inst_slots_[in.slots + r];
    if (g < 0 || item_proc_[g] == exclude_proc) continue;
    const Item& it = item(g);
    std::string what = vocab::name(it.op);
    if (same_kind) {  // then the difference is in the arguments: show them
      what += "(count " + std::to_string(it.count);
      if (it.dtype != vocab::Dtype::Mixed) what += std::string(" ") + vocab::name(it.dtype);
      if (it.root >= 0) what += " root " + std::to_string(it.root);
      if (it.redop != vocab::RedOp::None) what += std::string(" ") + vocab::name(it.redop);
      what += ")";
    }
    auto gi = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == what; });
    if (gi == groups.end()) groups.push_back({what, {}}), gi = groups.end() - 1;
    gi->second.push_back(member_label(in.comm, r));
  }
  std::string who;
  for (const auto& [what, members] : groups) {
    if (!who.empty()) who += ", ";
    if (members.size() <= 3) {
      for (size_t i = 0; i < members.size(); ++i) who += (i ? ", " : "") + members[i] + " at " + what;
    } else {
      who += std::to_string(members.size()) + " ranks at " + what + " (" + members[0] + ", " + members[1] + ", " +
             members[2] + ", ...)";
    }
  }
  if (exclude_proc >= 0) return who;
  std::string head = "comm " + c.label + (same_seq && seq >= 0 ? " seq " + std::to_string(seq)
                                                                : " collective #" + std::to_string(in.ordinal + 1));
  return head + ": " + who;
}

Engine::Why Engine::why(int32_t u) const {
  const Unit& un = units_[u];
  if (!un.issued) {
    const HostThread& h = threads_[un.thread];
    if (h.cursor < static_cast<int32_t>(h.steps.size()) && h.steps[h.cursor] < 0) {
      const int32_t g = -(h.steps[h.cursor] + 1);
      for (const Marker& m : wait_markers_[wait_marker_idx_.at(g)]) {
        if (marker_ok(m)) continue;
        const Queue& q = queues_[m.q];
        const int32_t blocker = q.units[q.head];
        return {"not issued: its host thread is blocked in " + wait_desc(g) + ", which waits for " + unit_desc(blocker),
                blocker};
      }
    }
    return {"not issued", -1};
  }
  if (!un.active) {
    for (int32_t k = 0; k < un.nq; ++k) {
      const int32_t qi = unit_queues_[un.q_begin + k];
      const Queue& q = queues_[qi];
      if (q.units[q.head] != u)
        return {"queued on " + queue_desc(qi) + " behind " + unit_desc(q.units[q.head]), q.units[q.head]};
    }
    return {"not started", -1};
  }
  if (un.barrier) {
    const Queue& q = queues_[un.marker_q];
    return {"waits for the event, recorded on " + queue_desc(un.marker_q) + " behind " + unit_desc(q.units[q.head]),
            q.units[q.head]};
  }
  for (int32_t k = 0; k < un.nitems; ++k) {
    const int32_t g = unit_items_[un.items_begin + k];
    const Item& it = item(g);
    const int32_t inst = item_inst_[g];
    if (inst >= 0) {
      const Instance& in = insts_[inst];
      if (in.mismatch || !members_agree(in)) return {"no matching op: " + instance_summary(in, un.proc), -1};
      const CommInfo& c = s_.comms[in.comm];
      for (int32_t r = 0; r < c.nranks; ++r) {
        const int32_t og = inst_slots_[in.slots + r];
        if (og == kRetired) continue;
        if (og == kNeverIssued) {
          if (past_hole(c.members[r]))  // its schedule stops at a hole in its records: unknown
            return {"waits on comm " + c.label + " for " + member_label(in.comm, r) + ", whose records stop at a hole before collective #" +
                        std::to_string(in.ordinal + 1) + ": what it issued there is unknown",
                    -1, c.members[r]};
          return {"waits on comm " + c.label + " for " + member_label(in.comm, r) + ", which never issues collective #" +
                      std::to_string(in.ordinal + 1) + " on it",
                  -1, c.members[r]};
        }
        const int32_t ou = item_unit_[og];
        if (!units_[ou].active)
          return {"waits on comm " + c.label + " for " + member_label(in.comm, r) + " (not there yet)", ou};
      }
      continue;  // complete (or completing): look at the unit's other rows
    }
    const int32_t p = item_proc_[g];
    for (int32_t j = 0; j < it.nparts; ++j) {
      const int32_t gp = part_base_[p] + it.first_part + j;
      if (part_state_[gp] == 2) continue;
      const Part& part = s_.procs[p].parts[it.first_part + j];
      const std::string peer = member_label(it.comm, part.peer);
      const std::string what = part.is_send ? "recv" : "send";
      const int32_t other = part_partner_[gp];
      if (part_state_[gp] == 3)
        return {"no matching op: its " + std::string(part.is_send ? "send to " : "recv from ") + peer + " meets a " + what +
                    " of a different size or dtype",
                -1};
      if (other < 0 && past_hole(s_.comms[it.comm].members[part.peer]))
        return {"waits on comm " + s_.comms[it.comm].label + " for " + peer + ", whose records stop at a hole before its matching " +
                    what + ": what it posted there is unknown",
                -1, s_.comms[it.comm].members[part.peer]};
      if (other < 0)
        return {"waits on comm " + s_.comms[it.comm].label + " for " + peer + ", which never posts the matching " + what, -1,
                s_.comms[it.comm].members[part.peer]};
      return {"waits on comm " + s_.comms[it.comm].label + " for " + peer + "'s matching " + what + " (not there yet)",
              item_unit_[part_item_[other]]};
    }
  }
  return {"completing", -1};
}

Result Engine::witness(Verdict stuck_verdict) const {
  Result r;
  r.verdict = stuck_verdict;
  r.model = serialized_ ? "serialized" : "concurrent";
  r.ops = op_items_;
  r.completed_ops = completed_op_items_;
  const int32_t nprocs = static_cast<int32_t>(s_.procs.size());
  // Per rank: the earliest running (active) stuck unit, else the earliest stuck one.
  std::vector<int32_t> first_active(nprocs, -1), first_stuck(nprocs, -1);
  for (int32_t u = 0; u < static_cast<int32_t>(units_.size()); ++u) {
    const Unit& un = units_[u];
    if (un.done) continue;
    if (first_stuck[un.proc] < 0) first_stuck[un.proc] = u;
    if (un.active && first_active[un.proc] < 0) first_active[un.proc] = u;
  }
  for (int32_t p = 0; p < nprocs; ++p) {
    RankWitness w;
    w.proc = p;
    w.label = plabel(p);
    int32_t u = first_active[p] >= 0 ? first_active[p] : first_stuck[p];
    if (u >= 0) {
      w.blocked_in = unit_desc(u);
      const Why y = why(u);
      w.waits_for = y.text;
      w.waits_on = y.proc >= 0 ? y.proc : y.unit >= 0 ? units_[y.unit].proc : -1;
      w.op = op_index(units_[u].first_item);
      w.never_issued = y.proc >= 0 && !past_hole(y.proc);
    } else {
      for (const HostThread& h : threads_) {
        if (h.proc != p || h.cursor >= static_cast<int32_t>(h.steps.size())) continue;
        const int32_t g = -(h.steps[h.cursor] + 1);
        w.blocked_in = "host: " + wait_desc(g);
        w.waits_for = "waits for work that cannot complete";
        break;
      }
      if (w.blocked_in.empty()) continue;  // finished its schedule
    }
    r.ranks.push_back(std::move(w));
  }

  // Follow "waits on" edges from each stuck unit; a repeat on the current path is a cycle.
  std::vector<uint8_t> color(units_.size(), 0);  // 0 new, 1 on path, 2 finished
  std::vector<int32_t> cycle_units;
  for (int32_t start = 0; start < static_cast<int32_t>(units_.size()) && cycle_units.empty(); ++start) {
    if (units_[start].done || color[start]) continue;
    std::vector<int32_t> path;
    int32_t u = start;
    while (u >= 0 && !units_[u].done && color[u] == 0) {
      color[u] = 1;
      path.push_back(u);
      u = why(u).unit;
    }
    if (u >= 0 && color[u] == 1) {
      auto pos = std::find(path.begin(), path.end(), u);
      cycle_units.assign(pos, path.end());
    }
    for (int32_t v : path) color[v] = 2;
  }
  bool cross_rank = false;
  for (int32_t v : cycle_units) cross_rank |= units_[v].proc != units_[cycle_units[0]].proc;
  if (cross_rank)
    for (int32_t v : cycle_units) {
      r.cycle.push_back(plabel(units_[v].proc) + ": " + unit_desc(v) + " " + why(v).text);
      r.cycle_steps.push_back({units_[v].proc, op_index(units_[v].first_item)});
    }

  // Truncated schedules (a recorded hang) often end before the op a rank waits for: then the
  // cycle is between ranks ("rank 0 waits for rank 1, which never issues the op, and waits for
  // rank 0 ...").
  if (r.cycle.empty()) {
    std::vector<int32_t> by_proc(nprocs, -1);
    for (size_t i = 0; i < r.ranks.size(); ++i) by_proc[r.ranks[i].proc] = static_cast<int32_t>(i);
    std::vector<uint8_t> seen(nprocs, 0);
    for (size_t start = 0; start < r.ranks.size() && r.cycle.empty(); ++start) {
      std::vector<int32_t> path;
      int32_t p = r.ranks[start].proc;
      while (p >= 0 && by_proc[p] >= 0 && !seen[p]) {
        seen[p] = 1;
        path.push_back(p);
        p = r.ranks[by_proc[p]].waits_on;
      }
      if (p >= 0 && std::find(path.begin(), path.end(), p) != path.end()) {
        for (auto it = std::find(path.begin(), path.end(), p); it != path.end(); ++it) {
          const RankWitness& w = r.ranks[by_proc[*it]];
          if (path.size() > 1 || w.waits_on != w.proc) {
            r.cycle.push_back(w.label + ": " + w.blocked_in + " " + w.waits_for);
            r.cycle_steps.push_back({w.proc, w.op, w.never_issued});
          }
        }
      }
      for (int32_t q : path) seen[q] = 2;
    }
  }

  // Summary: a mismatched collective is the most precise statement; else the cycle; else the
  // first stuck rank.
  for (const Instance& in : insts_) {
    if (in.mismatch || (in.arrived > 0 && !members_agree(in))) {
      r.summary = instance_summary(in) + ": no matching op";
      for (int32_t k = 0; k < s_.comms[in.comm].nranks; ++k) {
        const int32_t g = inst_slots_[in.slots + k];
        if (g >= 0) r.mismatch.push_back({item_proc_[g], op_index(g)});
      }
      break;
    }
  }
  if (r.summary.empty() && !r.cycle.empty()) {
    r.summary = "wait-for cycle of " + std::to_string(r.cycle.size()) + " waits; it starts at " + r.cycle.front();
  }
  if (r.summary.empty() && !r.ranks.empty()) {
    r.summary = r.ranks.front().label + " blocked in " + r.ranks.front().blocked_in + ": " + r.ranks.front().waits_for;
  }
  return r;
}

}  // namespace

namespace {

Result check_models(const WorkList& schedule, const Options& options) {
  // The serialized model only adds constraints (one more queue per rank), so when it completes
  // the concurrent one does too: a good schedule needs one pass.
  if (options.check_serialized) {
    Engine serialized(schedule, true);
    serialized.run(options.shuffle_seed);
    if (serialized.all_done()) {
      Result r;
      r.model = "serialized";
      r.ops = r.completed_ops = serialized.op_items();
      return r;
    }
    Engine concurrent(schedule, false);
    concurrent.run(options.shuffle_seed);
    if (!concurrent.all_done()) return concurrent.witness(Verdict::kDeadlock);
    return serialized.witness(Verdict::kMayDeadlock);
  }
  Engine concurrent(schedule, false);
  concurrent.run(options.shuffle_seed);
  if (!concurrent.all_done()) return concurrent.witness(Verdict::kDeadlock);
  Result r;
  r.model = "concurrent";
  r.ops = r.completed_ops = concurrent.op_items();
  return r;
}

}  // namespace

Result check(const Schedule& schedule, const Options& options) {
  const WorkList model = build_work_list(schedule);
  Result r = check_models(model, options);
  r.problems = model.problems;
  // A stuck state that waits on a rank past the hole in its records is built on records we do
  // not have: unknown, unless a mismatch or a cycle of whole ranks proves it.
  auto cut = [&](int32_t p) { return p >= 0 && model.procs[p].hole; };
  if (r.verdict != Verdict::kCanComplete && r.mismatch.empty()) {
    bool on_hole = false, whole_cycle = !r.cycle_steps.empty();
    for (const RankWitness& w : r.ranks) on_hole |= cut(w.waits_on) || cut(w.proc);
    for (const WitnessStep& st : r.cycle_steps) whole_cycle &= !cut(st.proc);
    if (on_hole && !whole_cycle) {
      r.verdict = Verdict::kUnknown;
      r.summary = "no deadlock proven: the schedules stop where a rank's records stop being whole (a hole); " + r.summary;
    }
  }
  return r;
}

std::string format_text(const Result& r) {
  std::ostringstream o;
  for (const std::string& p : r.problems) o << "warning: " << p << "\n";
  o << "model check: " << verdict_name(r.verdict) << " (" << r.ops << " ops";
  if (r.verdict != Verdict::kCanComplete) o << ", " << r.completed_ops << " complete before the stuck state";
  o << ")\n";
  if (r.verdict == Verdict::kCanComplete) {
    o << "every op completes, whether or not the GPU runs kernels of different streams concurrently\n";
    return o.str();
  }
  if (r.verdict == Verdict::kMayDeadlock)
    o << "latent: completes only if the GPU runs NCCL kernels of different streams concurrently;\n"
         "with one kernel at a time, in issue order, it deadlocks:\n";
  o << "  " << r.summary << "\n";
  o << "stuck state (" << r.model << " model):\n";
  for (const RankWitness& w : r.ranks) o << "  " << w.label << ": " << w.blocked_in << ": " << w.waits_for << "\n";
  if (!r.cycle.empty()) {
    o << "cycle:\n";
    for (const std::string& c : r.cycle) o << "  " << c << "\n";
  }
  return o.str();
}

std::string format_json(const Result& r) {
  nlohmann::json j;
  j["verdict"] = verdict_name(r.verdict);
  j["model"] = r.model;
  j["summary"] = r.summary;
  j["ops"] = r.ops;
  j["completed_ops"] = r.completed_ops;
  j["ranks"] = nlohmann::json::array();
  for (const RankWitness& w : r.ranks)
    j["ranks"].push_back({{"rank", w.label}, {"blocked_in", w.blocked_in}, {"waits_for", w.waits_for}});
  j["cycle"] = r.cycle;
  j["problems"] = r.problems;
  return j.dump(2);
}

}  // namespace lockstep::model
