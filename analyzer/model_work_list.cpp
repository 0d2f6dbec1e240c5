#include "model_work_list.h"

#include "comm_index.h"
#include "identity.h"
#include "meta_keys.h"
#include "text_escape.h"
#include "trace_validation.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace lockstep::model::detail {

// ---------------------------------------------------------------------------------------------
// The engine's work list: an index over the Schedule (analyzer/schedule.h, the one model of a
// trace), not a second model of it. Built once per check, it holds per rank the Schedule's ops
// (Item::op_index) and host waits merged in call order, communicators identified across ranks
// (the Schedule's comm indices are per process), streams numbered per rank, and p2p parts
// expanded into sends and receives with their peers checked; the engine's queues walk it many
// times, so this work is done once instead of at every step (docs/replay.md).

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
  // The communicators joined across processes, and where each rank's evidence stops being whole
  // (comm_index.h ProcComm::complete_through_seq): its schedule is modelled up to there.
  const CommIndex holes = build_comm_index(sched);
  std::vector<int32_t> model_comm(holes.comms.size(), -1);  // by CommIndex comm: index into s.comms
  int64_t model_ranks = 0;
  s.procs.resize(sched.procs.size());
  s.descs.resize(sched.sigs.size());

  // Labels: global ranks when every process has a distinct one, else file-based.
  std::map<int, int> rank_uses;
  for (const auto& p : sched.procs) rank_uses[p.info.global_rank]++;
  for (size_t i = 0; i < sched.procs.size(); ++i) {
    const Process& p = sched.procs[i].info;
    // A file-based label names a file (a Flight Recorder dump), whose name is any bytes.
    s.procs[i].label = printable(rank_label(p, static_cast<int>(i), rank_uses[p.global_rank] == 1));
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
      const int gc = ci < holes.per_proc[pi].size() ? holes.per_proc[pi][ci].gcomm : -1;
      if (gc < 0) continue;  // a hash this file holds twice: its first entry is the member
      const bool fresh = model_comm[gc] < 0;
      if (fresh) {
        model_comm[gc] = static_cast<int32_t>(s.comms.size());
        // Per-rank tables are sized by nranks, which comes from the file (up to 2^24 in every
        // communicator): a directory whose communicators add up to more is refused, not modeled.
        model_ranks += c.nranks;
        if (model_ranks > kMaxModelRanks)
          throw std::runtime_error("model: the communicators add up to more than " + std::to_string(kMaxModelRanks) +
                                   " member ranks (" + p.path + ": communicator " + c.hash + " of " +
                                   std::to_string(c.nranks) + " ranks): too large to model");
        CommInfo info;
        info.hash = c.hash;
        info.label = comm_short_name(c.hash, c.name);
        info.nranks = c.nranks;
        info.members.assign(std::max(c.nranks, 0), -1);
        s.comms.push_back(std::move(info));
      }
      const int32_t mc = model_comm[gc];
      CommInfo& info = s.comms[mc];
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
      local_to_global[ci] = mc;
      ps.member_of.push_back({mc, c.rank, c.retired_collectives});
      info.any_retired |= c.retired_collectives != 0;
    }
    std::sort(ps.member_of.begin(), ps.member_of.end(),
              [](const ProcWork::Membership& a, const ProcWork::Membership& b) { return a.comm < b.comm; });

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
      OpDesc& desc = s.descs[o.sig];
      if (!desc.filled) {
        desc.filled = true;
        desc.op = sig.op;
        desc.count = sig.count;
        desc.dtype = sig.dtype;
        desc.redop = sig.redop;
        desc.root = sig.root;
        if (sig.op == OpKind::Coalesced) {  // once per signature, not per op
          std::string names;
          for (const OpPart& part : sig.parts)
            names += std::string(names.empty() ? "" : ",") + vocab::name(part.op) + ":" + vocab::name(part.dtype) + ":" +
                     std::to_string(part.count);
          desc.coalesced_sig = s.intern("coalesced[" + names + "]");
        }
      }
      Item& it = ps.items.emplace_back();
      it.kind = ItemKind::kOp;
      it.op = sig.op;
      it.desc = static_cast<int32_t>(o.sig);
      it.seq = o.seq;
      it.comm = local_to_global[o.comm];
      it.stream = op_stream(oi);
      it.thread = static_cast<int32_t>(sp.op_threads[oi]);
      it.group = sp.group_of(oi);
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
          ps.parts.push_back(Part{it.op == OpKind::Send, sig.peer, sig.count, sig.dtype});
        }
        it.nparts = static_cast<int32_t>(ps.parts.size()) - it.first_part;
        for (int32_t k = it.first_part; k < it.first_part + it.nparts; ++k) {
          const int nr = s.comms[it.comm].nranks;
          if (ps.parts[k].peer < 0 || ps.parts[k].peer >= nr)
            throw std::runtime_error("model: " + p.path + ": p2p call " + std::to_string(o.call_index) + " has peer " +
                                     std::to_string(ps.parts[k].peer) + " outside communicator of " + std::to_string(nr));
        }
      }
    };
    auto add_wait = [&](const HostWait& w) {
      if (w.call_index >= ps.cut_call) return;
      Item& it = ps.items.emplace_back();
      it.kind = item_kind(w.kind);
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
                           " no trace file; what it issued on it is unknown (a peer waiting on it proves no deadlock)");
  }
  return s;
}

}  // namespace lockstep::model::detail
