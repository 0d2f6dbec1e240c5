#include "model_engine.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <type_traits>

namespace lockstep::model::detail {

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
  std::vector<int32_t> stream_q, comm_q; // queue per stream / membership (ProcWork::member_of), created when first used
  std::vector<int64_t> coll_count;       // per membership: collectives issued so far (+ retired - first_ordinal)
  std::vector<int32_t> stream_end;       // serialized model: device position after each stream's last unit
  std::vector<OpenGroup> open;           // per host thread
  std::unordered_map<int64_t, Marker> events;  // event -> where its last record was
};

int64_t Engine::retired(int32_t p, size_t c) const { return s_.procs[p].retired_colls(static_cast<int32_t>(c)); }

void Engine::recycle(Engine&& used) {
  auto take = [](auto& mine, auto& theirs) {
    mine.swap(theirs);
    mine.clear();  // keeps the capacity
  };
  take(item_proc_, used.item_proc_);
  take(item_unit_, used.item_unit_);
  take(item_inst_, used.item_inst_);
  take(part_item_, used.part_item_);
  take(part_partner_, used.part_partner_);
  take(part_state_, used.part_state_);
  take(units_, used.units_);
  take(unit_items_, used.unit_items_);
  take(unit_queues_, used.unit_queues_);
  take(insts_, used.insts_);
  take(inst_slots_, used.inst_slots_);
  // The rest of it freed before this one is built (its queues' and threads' small arrays come
  // back from the heap for this one's).
  auto drop = [](auto& c) { std::remove_reference_t<decltype(c)>().swap(c); };
  drop(used.item_base_);
  drop(used.part_base_);
  drop(used.queues_);
  drop(used.threads_);
  drop(used.thread_base_);
  drop(used.waiters_);
  drop(used.wait_markers_);
  drop(used.wait_marker_idx_);
  drop(used.barrier_markers_);
  drop(used.work_units_);
  drop(used.work_threads_);
  drop(used.agree_);
  drop(used.inst_block_);
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
  part_item_.resize(total_parts);
  part_partner_.assign(total_parts, -1);
  part_state_.assign(total_parts, 0);
  units_.reserve(total);
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
  thread_base_.reserve(s_.procs.size() + 1);
  for (int32_t p = 0; p < static_cast<int32_t>(s_.procs.size()); ++p) {
    thread_base_.push_back(static_cast<int32_t>(threads_.size()));
    build_proc(p, m);
  }
  thread_base_.push_back(static_cast<int32_t>(threads_.size()));
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
  b.comm_q.assign(ps.member_of.size(), -1);
  b.coll_count.resize(ps.member_of.size());
  for (size_t k = 0; k < ps.member_of.size(); ++k)
    b.coll_count[k] = ps.member_of[k].retired - m.first_ordinal[ps.member_of[k].comm];
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
  const int32_t k = s_.procs[b.proc].membership(comm);
  if (b.comm_q[k] < 0) b.comm_q[k] = new_queue(b.proc, Queue::kComm, comm);
  return b.comm_q[k];
}

int32_t Engine::device_size(const ProcBuild& b) const { return static_cast<int32_t>(queues_[b.device_q].units.size()); }

int32_t Engine::new_unit(const ProcBuild& b, int32_t g, int32_t thread) {
  Unit un;
  un.thread = b.thread_base + thread;
  un.first_item = g;
  units_.push_back(un);
  threads_[un.thread].steps.push_back(static_cast<int32_t>(units_.size() - 1));
  return static_cast<int32_t>(units_.size() - 1);
}

void Engine::finish_unit(int32_t u, const int32_t* items, int32_t nitems, const int32_t* qs, int32_t nq) {
  Unit& un = units_[u];
  // One item is the unit's first (new_unit), two queues fit in the unit: most units store no more.
  un.nitems = nitems;
  if (nitems >= 2) {
    un.items_begin = static_cast<int32_t>(unit_items_.size());
    unit_items_.insert(unit_items_.end(), items, items + nitems);
  }
  un.nq = nq;
  if (nq <= 2) {
    for (int32_t k = 0; k < nq; ++k) un.q[k] = qs[k];
  } else {
    un.q[0] = static_cast<int32_t>(unit_queues_.size());
    unit_queues_.insert(unit_queues_.end(), qs, qs + nq);
  }
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
      barrier_markers_[u] = e->second;
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
  if (it.group == 0) {
    close_group(b, t);
    const int32_t u = new_unit(b, g, t);
    for (int32_t k = 0; k < nq; ++k) queues_[qs[k]].units.push_back(u);
    finish_unit(u, &g, 1, qs, nq);
    if (on_device) b.stream_end[it.stream] = device_size(b);
    return u;
  }
  OpenGroup& og = b.open[t];
  if (og.unit < 0 || og.group != int64_t(it.group)) {
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
  const int32_t crank = ps.comm_rank(it.comm);
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
  const int32_t k = s_.procs[b.proc].membership(it.comm);
  const int32_t crank = s_.procs[b.proc].member_of[k].rank;
  const int64_t ord = b.coll_count[k]++;
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
    for (int32_t r = 0; r < c.nranks && c.any_retired; ++r)
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
      for (int32_t k = 0; k < un.nitems; ++k) arrive(unit_item(un, k));
      if (un.nitems == 0 || un.pending == 0) {
        if (!un.done) complete_unit(u);
      }
      return;
    }
  }
  if (un.barrier && !un.done) {
    const Marker m = barrier_markers_.at(u);
    if (marker_ok(m)) complete_unit(u);
    else add_waiter(m, u);
  }
}

bool Engine::same_collective(const Item& x, const Item& y) const {
  if (x.desc == y.desc) return true;  // one signature: the same op
  const OpDesc &a = s_.descs[x.desc], &b = s_.descs[y.desc];
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

bool Engine::agrees(int32_t inst) const {
  if (agree_.empty()) agree_.assign(insts_.size(), 0);
  int8_t& a = agree_[inst];
  if (a == 0) a = members_agree(insts_[inst]) ? 1 : 2;
  return a == 1;
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
    // An op completes with its last part matched (a send_recv to itself: once).
    if (parts_matched(g)) complete_item(g);
    if (og != g && parts_matched(og)) complete_item(og);
  }
}

bool Engine::parts_matched(int32_t g) const {
  const Item& it = item(g);
  const int32_t first = part_base_[item_proc_[g]] + it.first_part;
  for (int32_t k = 0; k < it.nparts; ++k)
    if (part_state_[first + k] != 2) return false;
  return true;
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
    Queue& q = queues_[unit_queue(un, k)];
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

}  // namespace lockstep::model::detail
