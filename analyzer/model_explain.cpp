#include "model_engine.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <sstream>

namespace lockstep::model::detail {

namespace {

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

}  // namespace

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
           hex(s_.procs[unit_proc(u)].streams[it.stream]);
  }
  if (un.nitems == 1) {
    const int32_t g = unit_item(un, 0);
    return item_desc(g) + " on stream " + hex(s_.procs[unit_proc(u)].streams[item(g).stream]);
  }
  std::string d = "group {";
  for (int32_t k = 0; k < un.nitems; ++k) d += (k ? ", " : "") + item_desc(unit_item(un, k));
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
      const OpDesc& d = s_.descs[it.desc];
      what += "(count " + std::to_string(d.count);
      if (d.dtype != vocab::Dtype::Mixed) what += std::string(" ") + vocab::name(d.dtype);
      if (d.root >= 0) what += " root " + std::to_string(d.root);
      if (d.redop != vocab::RedOp::None) what += std::string(" ") + vocab::name(d.redop);
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

Engine::Why Engine::why(int32_t u, bool explain) const {
  // Each answer's text only when asked (explain): the unit and rank are the same either way.
  auto text = [explain](auto&& make) { return explain ? make() : std::string(); };
  const Unit& un = units_[u];
  if (!un.issued) {
    const HostThread& h = threads_[un.thread];
    if (h.cursor < static_cast<int32_t>(h.steps.size()) && h.steps[h.cursor] < 0) {
      const int32_t g = -(h.steps[h.cursor] + 1);
      for (const Marker& m : wait_markers_[wait_marker_idx_.at(g)]) {
        if (marker_ok(m)) continue;
        const Queue& q = queues_[m.q];
        const int32_t blocker = q.units[q.head];
        return {text([&] {
                  return "not issued: its host thread is blocked in " + wait_desc(g) + ", which waits for " + unit_desc(blocker);
                }),
                blocker};
      }
    }
    return {text([] { return std::string("not issued"); }), -1};
  }
  if (!un.active) {
    for (int32_t k = 0; k < un.nq; ++k) {
      const int32_t qi = unit_queue(un, k);
      const Queue& q = queues_[qi];
      if (q.units[q.head] != u)
        return {text([&] { return "queued on " + queue_desc(qi) + " behind " + unit_desc(q.units[q.head]); }), q.units[q.head]};
    }
    return {text([] { return std::string("not started"); }), -1};
  }
  if (un.barrier) {
    const int32_t mq = barrier_markers_.at(u).q;
    const Queue& q = queues_[mq];
    return {text([&] { return "waits for the event, recorded on " + queue_desc(mq) + " behind " + unit_desc(q.units[q.head]); }),
            q.units[q.head]};
  }
  for (int32_t k = 0; k < un.nitems; ++k) {
    const int32_t g = unit_item(un, k);
    const Item& it = item(g);
    const int32_t inst = item_inst_[g];
    if (inst >= 0) {
      const Instance& in = insts_[inst];
      if (in.mismatch || !agrees(inst)) return {text([&] { return "no matching op: " + instance_summary(in, unit_proc(u)); }), -1};
      const CommInfo& c = s_.comms[in.comm];
      // The first member not there: the same for every unit of the instance (asked of each).
      if (inst_block_.empty()) inst_block_.assign(insts_.size(), -1);
      int32_t& block = inst_block_[inst];
      if (block < 0) {
        block = c.nranks;
        for (int32_t r = 0; r < c.nranks && block == c.nranks; ++r) {
          const int32_t og = inst_slots_[in.slots + r];
          if (og == kNeverIssued || (og >= 0 && !units_[item_unit_[og]].active)) block = r;
        }
      }
      for (int32_t r = block; r < c.nranks; ++r) {
        const int32_t og = inst_slots_[in.slots + r];
        if (og == kRetired) continue;
        if (og == kNeverIssued) {
          return {text([&] {
                    const std::string next = "collective #" + std::to_string(in.ordinal + 1);
                    const std::string unknown = unknown_past_end(c.members[r], next, "issued");
                    return "waits on comm " + c.label + " for " + member_label(in.comm, r) +
                           (unknown.empty() ? ", which never issues " + next + " on it" : unknown);
                  }),
                  -1, c.members[r], c.members[r] < 0};
        }
        const int32_t ou = item_unit_[og];
        if (!units_[ou].active)
          return {text([&] { return "waits on comm " + c.label + " for " + member_label(in.comm, r) + " (not there yet)"; }), ou};
      }
      continue;  // complete (or completing): look at the unit's other rows
    }
    const int32_t p = item_proc_[g];
    for (int32_t j = 0; j < it.nparts; ++j) {
      const int32_t gp = part_base_[p] + it.first_part + j;
      if (part_state_[gp] == 2) continue;
      const Part& part = s_.procs[p].parts[it.first_part + j];
      const std::string peer = explain ? member_label(it.comm, part.peer) : std::string();
      const std::string what = part.is_send ? "recv" : "send";
      const int32_t other = part_partner_[gp];
      if (part_state_[gp] == 3)
        return {text([&] {
                  return "no matching op: its " + std::string(part.is_send ? "send to " : "recv from ") + peer + " meets a " +
                         what + " of a different size or dtype";
                }),
                -1};
      if (other < 0) {
        const int32_t peer_proc = s_.comms[it.comm].members[part.peer];
        return {text([&] {
                  const std::string unknown = unknown_past_end(peer_proc, "its matching " + what, "posted");
                  return "waits on comm " + s_.comms[it.comm].label + " for " + peer +
                         (unknown.empty() ? ", which never posts the matching " + what : unknown);
                }),
                -1, peer_proc, peer_proc < 0};
      }
      return {text([&] { return "waits on comm " + s_.comms[it.comm].label + " for " + peer + "'s matching " + what + " (not there yet)"; }),
              item_unit_[part_item_[other]]};
    }
  }
  return {text([] { return std::string("completing"); }), -1};
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
    const int32_t p = unit_proc(u);
    if (first_stuck[p] < 0) first_stuck[p] = u;
    if (un.active && first_active[p] < 0) first_active[p] = u;
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
      w.waits_on = y.proc >= 0 ? y.proc : y.unit >= 0 ? unit_proc(y.unit) : -1;
      w.op = op_index(units_[u].first_item);
      w.never_issued = y.proc >= 0 && !s_.procs[y.proc].end_unknown();
      w.waits_on_missing = y.missing;
    } else {
      for (int32_t t = thread_base_[p]; t < thread_base_[p + 1]; ++t) {
        const HostThread& h = threads_[t];
        if (h.cursor >= static_cast<int32_t>(h.steps.size())) continue;
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
      u = why(u, false).unit;
    }
    if (u >= 0 && color[u] == 1) {
      auto pos = std::find(path.begin(), path.end(), u);
      cycle_units.assign(pos, path.end());
    }
    for (int32_t v : path) color[v] = 2;
  }
  bool cross_rank = false;
  for (int32_t v : cycle_units) cross_rank |= unit_proc(v) != unit_proc(cycle_units[0]);
  if (cross_rank)
    for (int32_t v : cycle_units) {
      r.cycle.push_back(plabel(unit_proc(v)) + ": " + unit_desc(v) + " " + why(v).text);
      r.cycle_steps.push_back({unit_proc(v), op_index(units_[v].first_item)});
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
  for (size_t i = 0; i < insts_.size(); ++i) {
    const Instance& in = insts_[i];
    // All arrived and no mismatch: arrive() found the members agree.
    if (in.mismatch || (in.arrived > 0 && in.arrived < s_.comms[in.comm].nranks && !agrees(static_cast<int32_t>(i)))) {
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

}  // namespace lockstep::model::detail
