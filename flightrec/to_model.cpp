// One Flight Recorder dump -> one lockstep Process (trace_model.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "flightrec.h"
#include "meta_keys.h"

namespace lockstep::flightrec {

int rank_from_file_name(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* ext : {".json", ".pkl", ".pickle"}) {
    std::string e = ext;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) name.resize(name.size() - e.size());
  }
  size_t k = name.size();
  while (k > 0 && name[k - 1] >= '0' && name[k - 1] <= '9') --k;
  if (k == name.size() || name.size() - k > 7) return -1;
  return std::stoi(name.substr(k));
}

namespace {

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}
uint64_t fnv(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// c10::toString(ScalarType) -> the NCCL data type torch hands to NCCL. Types NCCL has no
// name for (Short, complex: torch converts them before the call) are Mixed here; an op that
// names one is a hole (unknown_dtype below), since Mixed compares equal to Mixed.
vocab::Dtype map_dtype(const std::string& t) {
  using D = vocab::Dtype;
  static const std::map<std::string, D> m = {
      {"Byte", D::Uint8},       {"Char", D::Int8},          {"Int", D::Int32},         {"Long", D::Int64},
      {"Half", D::Float16},     {"Float", D::Float32},      {"Double", D::Float64},    {"BFloat16", D::Bfloat16},
      {"Bool", D::Uint8},       {"UInt32", D::Uint32},      {"UInt64", D::Uint64},     {"Float8_e4m3fn", D::Float8e4m3},
      {"Float8_e5m2", D::Float8e5m2}};
  auto it = m.find(t);
  return it != m.end() ? it->second : D::Mixed;
}
vocab::Dtype one_dtype(const std::vector<std::string>& ts) {
  if (ts.empty()) return vocab::Dtype::Mixed;
  for (auto& t : ts)
    if (t != ts[0]) return vocab::Dtype::Mixed;  // schema: NULL
  return map_dtype(ts[0]);
}

// Element counts from the dump's tensor sizes (each >= 0, dump.cpp) saturate at kMaxCount: a
// crafted dump can list sizes whose product or sum exceeds int64.
constexpr int64_t kMaxCount = INT64_MAX / 2;
int64_t numel(const std::vector<int64_t>& dims) {
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  int64_t n = 1;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxCount) return kMaxCount;
  return n;
}
int64_t add_counts(int64_t a, int64_t b) {
  int64_t s = 0;
  return __builtin_add_overflow(a, b, &s) || s > kMaxCount ? kMaxCount : s;
}
int64_t total(const std::vector<std::vector<int64_t>>& ts) {
  int64_t n = 0;
  for (auto& t : ts) n = add_counts(n, numel(t));
  return n;
}

struct Parsed {
  std::string name;  // after "nccl:"
  int src = -1, dst = -1;
};
Parsed parse_name(const std::string& profiling) {
  Parsed p;
  size_t colon = profiling.find(':');
  std::string rest = colon == std::string::npos ? profiling : profiling.substr(colon + 1);
  size_t sp = rest.find(' ');
  p.name = rest.substr(0, sp);
  if (sp != std::string::npos) {
    std::string arg = rest.substr(sp + 1);
    int a = -1, b = -1;
    if (std::sscanf(arg.c_str(), "%d->%d", &a, &b) == 2) p.src = a, p.dst = b;             // send src->dst
    else if (std::sscanf(arg.c_str(), "%d<-%d", &a, &b) == 2) p.dst = a, p.src = b;        // recv dst<-src
  }
  return p;
}

bool is_group_end(const std::string& n) { return n == "coalesced"; }

// The op (or the parts of a fused coalesced op) one entry stands for.
void map_entry(const FrEntry& e, Op& o) {
  Parsed p = parse_name(e.profiling_name);
  const std::string& n = p.name;
  using vocab::Op;
  const vocab::Dtype in_dt = one_dtype(e.input_dtypes), out_dt = one_dtype(e.output_dtypes);
  auto first = [](const std::vector<std::vector<int64_t>>& ts) { return ts.empty() ? 0 : numel(ts[0]); };
  o.dtype = in_dt == vocab::Dtype::Mixed ? out_dt : in_dt;
  if (n == "all_reduce" || n == "all_reduce_barrier" || n == "allreduce" || n == "_allreduce_sparse") {
    o.op = Op::AllReduce;
    o.count = total(e.input_sizes);
  } else if (n == "broadcast" || n == "_broadcast_oop") {
    o.op = Op::Broadcast;
    o.count = total(e.input_sizes);
  } else if (n == "reduce" || n == "_reduce_oop") {
    o.op = Op::Reduce;
    o.count = total(e.input_sizes);
  } else if (n == "all_gather" || n == "_all_gather_base" || n == "_allgather_base" || n == "allgather") {
    o.op = Op::AllGather;
    o.count = first(e.input_sizes);  // sendcount
  } else if (n == "reduce_scatter" || n == "_reduce_scatter_base") {
    o.op = Op::ReduceScatter;
    o.count = first(e.output_sizes);  // recvcount
  } else if (n == "all_to_all" || n == "alltoall_base" || n == "alltoall") {
    // FR keeps only each rank's totals, not the per-peer split: compare op and dtype only.
    o.op = Op::AllToAll;
    o.count = 0;
  } else if (n == "gather") {
    o.op = Op::Gather;
    o.count = first(e.input_sizes);
  } else if (n == "scatter") {
    o.op = Op::Scatter;
    o.count = first(e.output_sizes);
    o.dtype = out_dt;
  } else if (n == "send") {
    o.op = Op::Send;
    o.count = total(e.input_sizes);
    o.peer = p.dst;
  } else if (n == "recv") {
    o.op = Op::Recv;
    o.count = total(e.output_sizes);
    o.peer = p.src;
    o.dtype = out_dt == vocab::Dtype::Mixed ? in_dt : out_dt;
  } else if (n == "allreduce_coalesced" || n == "ALLREDUCE_coalesced" || n == "ALLGATHER_coalesced" ||
             n == "all_gather_into_tensor_coalesced" || n == "REDUCE_SCATTER_coalesced" ||
             n == "reduce_scatter_tensor_coalesced") {
    // One FR entry for several NCCL calls: one part per tensor.
    bool ag = n.find("ALLGATHER") != std::string::npos || n.find("all_gather") != std::string::npos;
    bool rs = n.find("REDUCE_SCATTER") != std::string::npos || n.find("reduce_scatter") != std::string::npos;
    o.op = Op::Coalesced;
    const auto& sizes = rs ? e.output_sizes : e.input_sizes;
    const auto& dts = rs ? e.output_dtypes : e.input_dtypes;
    o.count = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      OpPart part;
      part.op = ag ? Op::AllGather : rs ? Op::ReduceScatter : Op::AllReduce;
      part.dtype = k < dts.size() ? map_dtype(dts[k]) : o.dtype;
      part.count = numel(sizes[k]);
      o.count = add_counts(o.count, part.count);
      o.parts.push_back(part);
    }
  } else if (is_group_end(n)) {
    o.op = Op::Coalesced;
    o.count = 0;
  } else {
    // Not an NCCL operation lockstep knows: the dump cannot be compared op by op.
    std::string shown;
    for (char c : n.substr(0, 64)) shown += c >= 0x20 && c < 0x7f ? c : '?';
    throw DumpError("record " + std::to_string(e.record_id) + " is an operation lockstep does not know: '" + shown + "'");
  }
}

std::vector<Frame> frames_of(const std::vector<FrFrame>& fr) {
  std::vector<Frame> out;
  for (const auto& f : fr) {
    Frame x;
    x.kind = vocab::FrameKind::Python;
    x.function = f.name;
    x.file = f.filename;
    x.line = static_cast<int>(std::clamp<int64_t>(f.line, 0, INT32_MAX));
    out.push_back(std::move(x));
  }
  return out;
}

// A hole in a process's evidence on one communicator: every op from `seq` on is unknown, not
// compared. The recorder's own mechanism (trace_model.h DropRange, read by analyzer/comm_index.cpp
// as ProcComm::exact_through): a converted dump names each hole it finds as a drops range, as a
// recorder names the records it dropped. Collective seqs and p2p seqs (kP2PSeqBase + n) are
// separate spaces: a hole in the p2p space leaves the collectives whole.
void add_hole(Process& p, int comm, int64_t seq, const char* reason) {
  if (comm < 0) return;
  seq = std::clamp<int64_t>(seq, 1, UINT32_MAX);
  for (const DropRange& d : p.drops)
    if (d.comm == comm && d.first_seq == seq) return;
  DropRange d;
  d.comm = comm;
  d.first_seq = d.last_seq = seq;
  d.reason = reason;
  p.drops.push_back(std::move(d));
  p.drops_known = true;
}

bool p2p_seq(int64_t seq) { return seq >= kP2PSeqBase; }
bool coll_seq(int64_t seq) { return seq > 0 && seq < kP2PSeqBase; }

bool known_dtype(const std::string& t) {
  vocab::Dtype d = map_dtype(t);
  return d != vocab::Dtype::Mixed;
}
// An entry whose tensors name a type lockstep cannot compare (not an NCCL type, e.g. complex):
// Mixed would compare equal to any other Mixed, so the op is unknown instead.
bool unknown_dtype(const FrEntry& e) {
  for (const auto* ts : {&e.input_dtypes, &e.output_dtypes})
    for (const auto& t : *ts)
      if (!known_dtype(t)) return true;
  return false;
}

}  // namespace

Process to_process(const FrDump& d, int global_rank) {
  Process p;
  p.path = d.path;
  // A dump names no host and no pid: p.host and p.pid stay empty (the file is p.path).
  p.global_rank = global_rank;
  p.meta[schema::meta::kSource] = schema::meta::kSourceFlightRecorder;
  p.meta[schema::meta::kFrDumpFile] = d.path;
  p.meta[schema::meta::kFrFormat] = d.format;
  p.meta[schema::meta::kFrVersion] = d.version;
  p.meta[schema::meta::kFrCommLibVersion] = d.comm_lib_version;
  p.meta[schema::meta::kFrRingWindow] = "1";  // a ring: older entries may have been overwritten
  p.meta[schema::meta::kGlobalRank] = std::to_string(global_rank);
  p.meta[schema::meta::kGlobalRankSource] = schema::meta::kGlobalRankFromFileName;
  p.meta[schema::meta::kFrEntries] = std::to_string(d.entries.size());
  for (auto& [pg, st] : d.pg_status)
    for (auto& [k, v] : st) p.meta[schema::meta::kFrPgStatusPrefix + pg + "." + k] = std::to_string(v);

  // Communicators: one per process group, from pg_config and any group the entries name.
  std::vector<FrGroup> groups = d.groups;
  for (const auto& e : d.entries)
    if (std::none_of(groups.begin(), groups.end(), [&](const FrGroup& g) { return g.name == e.pg_name; }))
      groups.push_back({e.pg_name, e.pg_desc, {}});
  // No file-name rank: a group of one rank tells it.
  for (auto& g : groups)
    if (global_rank < 0 && g.ranks.size() == 1) global_rank = g.ranks[0];
  p.global_rank = global_rank;
  p.meta[schema::meta::kGlobalRank] = std::to_string(global_rank);
  std::map<std::string, int> desc_uses;
  for (auto& g : groups) desc_uses[g.desc]++;
  std::map<std::string, int> comm_of;
  for (auto& g : groups) {
    Comm c;
    c.local_id = static_cast<int>(p.comms.size()) + 1;
    std::vector<int> sorted = g.ranks;
    std::sort(sorted.begin(), sorted.end());
    std::string key = "fr|" + g.name + "|";
    for (int r : sorted) key += std::to_string(r) + ",";
    c.hash = hex16(fnv(key));
    c.nranks = static_cast<int>(sorted.size());
    if (c.nranks == 0) throw DumpError("process group " + g.name + " has no ranks in pg_config");
    auto it = std::find(sorted.begin(), sorted.end(), global_rank);
    if (global_rank < 0 && c.nranks > 1) throw DumpError("cannot tell this dump's rank: name it <prefix><rank> as torch does");
    if (it == sorted.end()) {  // listed but not joined by this rank: not a communicator of it
      p.meta[schema::meta::kFrNotMemberPrefix + g.name] = std::to_string(global_rank);
      continue;
    }
    c.rank = static_cast<int>(it - sorted.begin());
    // Named by the group's description (default_pg, tp, ...) when it tells groups apart.
    bool desc_ok = !g.desc.empty() && g.desc != "undefined" && desc_uses[g.desc] == 1;
    c.name = desc_ok ? g.desc : "pg" + g.name;
    c.init_call = 0;
    comm_of[g.name] = static_cast<int>(p.comms.size());
    p.comms.push_back(std::move(c));
  }

  std::map<int, int64_t> stack_ids;  // dump stack -> Process::stacks key
  auto stack_id = [&](int s) -> int64_t {
    if (s < 0 || s >= static_cast<int>(d.stacks.size())) return -1;
    auto it = stack_ids.find(s);
    if (it != stack_ids.end()) return it->second;
    int64_t id = static_cast<int64_t>(stack_ids.size()) + 1;
    p.stacks[id] = frames_of(d.stacks[s]);
    return stack_ids[s] = id;
  };

  // Entries in record order; a slow-path coalesced group (entries sharing a seq, closed by a
  // "coalesced" entry) becomes one op whose parts are the group's entries.
  std::vector<const FrEntry*> order;
  for (auto& e : d.entries) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->record_id < b->record_id; });
  for (size_t k = 1; k < order.size(); ++k)
    if (order[k]->record_id == order[k - 1]->record_id)
      throw DumpError("two entries with record_id " + std::to_string(order[k]->record_id));
  int64_t first_record = order.empty() ? 0 : order.front()->record_id;
  int64_t gaps = 0;
  for (size_t k = 1; k < order.size(); ++k) gaps += order[k]->record_id - order[k - 1]->record_id - 1;
  p.meta[schema::meta::kFrFirstRecordId] = std::to_string(first_record);
  p.meta[schema::meta::kFrHistoryDropped] = (first_record > 0 || gaps > 0) ? "1" : "0";

  auto seq_of = [](const FrEntry& e) { return e.is_p2p ? kP2PSeqBase + e.p2p_seq_id : e.collective_seq_id; };
  // Whether the record just before order[k] is in the dump: a record the ring overwrote (before
  // the window) or lost (a gap) may have been anything.
  auto previous_held = [&](size_t k) {
    return order[k]->record_id == 0 || (k > 0 && order[k - 1]->record_id == order[k]->record_id - 1);
  };
  std::vector<bool> grouped(order.size(), false);
  std::map<size_t, std::vector<size_t>> groups_at;  // first member -> members (end marker last)
  std::set<size_t> cut_groups;                      // first members of groups that may have lost parts
  for (size_t k = 0; k < order.size(); ++k) {
    if (!is_group_end(parse_name(order[k]->profiling_name).name)) continue;
    // A group's parts are all collectives or all point-to-point ops. torch (2.11) closes a
    // batch of sends and receives with a "coalesced" entry that is not marked p2p: it carries
    // the batch's p2p_seq_id, and the collective_seq_id of the group's last collective, which
    // the batch did not advance. So a part is matched to the end by the seq of its own kind.
    std::vector<size_t> members;
    for (size_t j = k; j-- > 0;) {
      if (grouped[j]) break;
      if (order[j]->pg_name != order[k]->pg_name) continue;
      const FrEntry& part = *order[j];
      const bool same_kind = members.empty() || order[members.front()]->is_p2p == part.is_p2p;
      const bool same_seq = part.is_p2p ? part.p2p_seq_id == order[k]->p2p_seq_id
                                        : !order[k]->is_p2p && part.collective_seq_id == order[k]->collective_seq_id;
      if (!same_kind || !same_seq || is_group_end(parse_name(part.profiling_name).name)) break;
      members.insert(members.begin(), j);
    }
    members.push_back(k);
    for (size_t m : members) grouped[m] = true;
    groups_at[members.front()] = members;
    // Parts lost before the first one held (the ring overwrote them, or a gap in record ids), or
    // between the parts: the group is not whole, and a count or a part list compared would be
    // the dump's, not the rank's.
    bool cut = !previous_held(members.front());
    for (size_t j = members.front() + 1; j <= k; ++j) cut |= !previous_held(j);
    if (cut) cut_groups.insert(members.front());
  }
  // Each communicator's newest collective seq held so far, and holes found on the way.
  std::map<int, int64_t> last_coll;

  std::map<int, int64_t> first_seq;
  int64_t newest_ns = 0, cut_at_start = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const FrEntry& e = *order[k];
    auto g = groups_at.find(k);
    if (grouped[k] && g == groups_at.end()) continue;  // inside a group, emitted with its first member
    auto comm = comm_of.find(e.pg_name);
    if (comm == comm_of.end())
      throw DumpError("record " + std::to_string(e.record_id) + " is on process group " + e.pg_name + ", which does not list rank " +
                      std::to_string(global_rank));
    if (cut_groups.count(k)) {
      // A group cut at the window's start (no collective of its group held before it): the window
      // starts after it. Cut later: a hole at its seq.
      const bool at_start = e.is_p2p || !last_coll.count(comm->second);
      if (at_start) {
        ++cut_at_start;
        continue;
      }
      add_hole(p, comm->second, seq_of(*order[g->second.back()]), "fr_group_cut");
    }
    Op o;
    o.call_index = e.record_id + 1;
    o.comm = comm->second;
    o.seq = seq_of(e);
    o.tid = e.thread_id;
    o.thread_name = e.thread_name;
    o.issue_mono_ns = o.issue_wall_ns = e.time_created_ns;
    o.state = vocab::State::Enqueued;
    o.stack_id = stack_id(e.stack);
    const FrEntry* state_from = &e;
    if (g != groups_at.end()) {
      const auto& members = g->second;
      state_from = order[members.back()];  // the group's work carries the events
      bool all_p2p = members.size() > 1;
      o.count = 0;
      for (size_t m = 0; m + 1 < members.size(); ++m) {
        Op part;
        map_entry(*order[members[m]], part);
        if (part.op != vocab::Op::Send && part.op != vocab::Op::Recv) all_p2p = false;
        if (!part.parts.empty()) {
          for (auto& pp : part.parts) o.parts.push_back(pp);
        } else {
          o.parts.push_back({part.op, part.dtype, part.count, part.root, part.peer, part.redop});
        }
        if (part.op != vocab::Op::Recv) o.count = add_counts(o.count, part.count);
        if (o.stack_id < 0) o.stack_id = stack_id(order[members[m]]->stack);
      }
      o.op = all_p2p ? vocab::Op::SendRecv : vocab::Op::Coalesced;
      vocab::Dtype dt = vocab::Dtype::Mixed;
      for (size_t m = 0; m < o.parts.size(); ++m) dt = m == 0 || dt == o.parts[m].dtype ? o.parts[m].dtype : vocab::Dtype::Mixed;
      o.dtype = dt;
      // The parts' seq (a batch of sends and receives: its p2p seq, whatever the end says).
      o.seq = members.size() > 1 ? seq_of(*order[members.front()]) : seq_of(*state_from);
    } else {
      map_entry(e, o);
    }
    // A dump records no stream. A group's collectives share one (torch issues them in order on
    // the group's stream). Point-to-point ops do not: torch runs them on a communicator and
    // stream per pair of ranks, where NCCL may complete a send before its peer's matching
    // receive is reached; one stream for a send and the receive after it would make the model
    // wait for what does not wait, and invent a deadlock. So each peer and direction gets its
    // own stream: ordering is kept only where nothing can overtake.
    const uint64_t comm_streams = static_cast<uint64_t>(o.comm + 1) << 32;
    if (o.op == vocab::Op::Send || o.op == vocab::Op::Recv)
      o.stream = comm_streams | (static_cast<uint64_t>(static_cast<uint32_t>(o.peer) + 1) << 2) |
                 (o.op == vocab::Op::Send ? 1 : 2);
    else if (e.is_p2p || o.op == vocab::Op::SendRecv)
      o.stream = comm_streams | 3;  // a group of point-to-point ops
    else
      o.stream = comm_streams;
    o.completed = state_from->state == "completed";
    o.complete_mono_ns = o.completed ? std::max(state_from->time_completed_ns, e.time_created_ns) : 0;
    newest_ns = std::max({newest_ns, e.time_created_ns, state_from->time_started_ns, state_from->time_completed_ns});
    if (o.seq <= 0 || o.seq > UINT32_MAX) o.seq = 0;  // unsequenced: never compared
    // A collective without a seq (none in the entry, or 0) cannot be placed among its group's
    // collectives: the group's ops from the one after the last seq held are unknown. A tensor
    // type lockstep cannot name: the op is unknown from its seq on.
    if (!e.is_p2p && o.seq == 0) add_hole(p, o.comm, (last_coll.count(o.comm) ? last_coll[o.comm] : 0) + 1, "fr_no_seq");
    bool odd_dtype = unknown_dtype(e);
    if (g != groups_at.end())
      for (size_t m : g->second) odd_dtype |= unknown_dtype(*order[m]);
    if (odd_dtype && o.seq > 0) add_hole(p, o.comm, o.seq, "fr_unknown_dtype");
    if (coll_seq(o.seq)) {
      auto [it, fresh] = last_coll.emplace(o.comm, o.seq);
      // The same seq twice (a group's parts without the entry that closes it) or a seq skipped.
      if (!fresh && o.seq == it->second) add_hole(p, o.comm, o.seq, "fr_seq_twice");
      if (!fresh && o.seq > it->second + 1) add_hole(p, o.comm, it->second + 1, "fr_seq_gap");
      if (!fresh && o.seq < it->second) add_hole(p, o.comm, o.seq, "fr_seq_order");
      it->second = std::max(it->second, o.seq);
    }
    if (o.seq > 0 && o.seq < kP2PSeqBase && !first_seq.count(o.comm)) first_seq[o.comm] = o.seq;
    p.ops.push_back(std::move(o));
  }
  std::sort(p.ops.begin(), p.ops.end(), [](const Op& a, const Op& b) { return a.call_index < b.call_index; });
  // Evidence of torch's watchdog timeout, as a hang marker: an entry retired before it completed
  // ("a retired but not completed event has timed out", FlightRecorder.hpp), or one still in
  // flight longer than its timeout_ms before the newest time in the dump.
  for (size_t k = 0; k < order.size(); ++k) {
    const FrEntry* e = order[k];
    // A group's parts stay "scheduled" in the dump: the group's end entry carries its state.
    if (grouped[k] && !is_group_end(parse_name(e->profiling_name).name)) continue;
    bool timed_out = e->state != "completed" &&
                     (e->retired || (e->timeout_ms > 0 && newest_ns - e->time_created_ns > e->timeout_ms * 1000000));
    if (!timed_out) continue;
    HangMarker h;
    h.mono_ns = h.wall_ns = newest_ns;
    h.in_flight = static_cast<int>(std::count_if(p.ops.begin(), p.ops.end(), [](const Op& o) { return !o.completed; }));
    h.message = "PyTorch watchdog: " + e->profiling_name + " (" + e->pg_desc + " seq " + std::to_string(e->collective_seq_id) +
                ") timed out after " + std::to_string(e->timeout_ms) + " ms (Flight Recorder)";
    p.hangs.push_back(h);
    break;
  }
  // Records missing between two the dump holds (a gap in record_id): on each communicator, what
  // follows the gap is whole only where its seqs prove that nothing of it was in the gap (the
  // next collective seq is the one after the last before the gap; p2p seqs likewise).
  for (size_t k = 1; k < order.size(); ++k) {
    if (order[k]->record_id == order[k - 1]->record_id + 1) continue;
    const int64_t gap_call = order[k]->record_id + 1;  // call_index of the first record after the gap
    for (size_t c = 0; c < p.comms.size(); ++c) {
      int64_t lc = 0, lp = 0, nc = -1, np = -1;
      for (const Op& o : p.ops) {
        if (o.comm != static_cast<int>(c) || o.seq <= 0) continue;
        const bool before = o.call_index < gap_call;
        if (coll_seq(o.seq)) {
          if (before) lc = std::max(lc, o.seq);
          else if (nc < 0) nc = o.seq;
        } else if (p2p_seq(o.seq)) {
          if (before) lp = std::max(lp, o.seq - kP2PSeqBase);
          else if (np < 0) np = o.seq - kP2PSeqBase;
        }
      }
      if (!(nc >= 0 && (nc == lc || nc == lc + 1))) add_hole(p, static_cast<int>(c), lc + 1, "fr_record_gap");
      if (!(np >= 0 && (np == lp || np == lp + 1))) add_hole(p, static_cast<int>(c), kP2PSeqBase + lp + 1, "fr_record_gap");
    }
  }
  // A dump that holds the process's whole history (its first record is record 0, no gap) holds
  // each group's collectives from seq 1: a later first seq is a hole.
  if (first_record == 0 && gaps == 0)
    for (auto& [c, s] : first_seq)
      if (s > 1) add_hole(p, c, 1, "fr_seq_gap");
  for (auto& [c, s] : first_seq) p.meta[schema::meta::kFrWindowFirstSeqPrefix + p.comms[c].name] = std::to_string(s);
  p.last_flush_mono_ns = newest_ns;
  p.meta[schema::meta::kLastFlushMonoNs] = std::to_string(newest_ns);
  // A dump is torch's own record of the process at dump time: its window is complete up to
  // then (the caveat line names the ring), like a trace with an exit record.
  p.exit_reason = schema::meta::kFrDump;
  p.meta[schema::meta::kExitReason] = p.exit_reason;
  return p;
}

namespace {

// The dump lost history before its window (its ring wrapped) or in it (a record gap).
bool lost_history(const Process& p) {
  auto it = p.meta.find(schema::meta::kFrHistoryDropped);
  return it != p.meta.end() && it->second == "1";
}

// The messages (send or recv, with their op and completion) of one op, for channel counting.
template <class F>
void each_message(const Op& o, F f) {
  if (o.parts.empty()) {
    f(o.op, o.peer);
    return;
  }
  for (const OpPart& part : o.parts) f(part.op, part.peer);
}

}  // namespace

void align_windows(std::vector<Process>& procs) {
  // comm hash -> newest first collective seq among members, and whether some member lost history.
  std::map<std::string, int64_t> start;
  std::map<std::string, bool> cut;
  for (auto& p : procs) {
    std::map<int, int64_t> first;
    for (auto& o : p.ops)
      if (coll_seq(o.seq) && !first.count(o.comm)) first[o.comm] = o.seq;
    for (auto& [c, s] : first) start[p.comms[c].hash] = std::max(start[p.comms[c].hash], s);
    for (auto& c : p.comms) cut[c.hash] = cut[c.hash] || lost_history(p);
  }
  for (auto& p : procs) {
    std::map<int, int64_t> dropped;
    // Point-to-point ops are paired by issue order: where some member's window was cut, each
    // member's queue starts at its first collective of the aligned window (what every member
    // holds from its start), and a member with no such collective cannot be aligned at all.
    std::map<int, int64_t> anchor;  // comm -> call_index of its first kept collective
    for (auto& o : p.ops) {
      if (o.comm < 0) continue;
      int64_t from = start[p.comms[o.comm].hash];
      if (coll_seq(o.seq) && o.seq >= from && !anchor.count(o.comm)) anchor[o.comm] = o.call_index;
    }
    std::vector<Op> kept;
    for (auto& o : p.ops) {
      const std::string& h = o.comm >= 0 ? p.comms[o.comm].hash : std::string();
      int64_t from = o.comm >= 0 ? start[h] : 0;
      if (coll_seq(o.seq) && o.seq < from) {
        dropped[o.comm]++;
        continue;
      }
      if (o.comm >= 0 && p2p_seq(o.seq) && cut[h] && anchor.count(o.comm) && o.call_index < anchor[o.comm]) {
        dropped[o.comm]++;
        continue;
      }
      kept.push_back(std::move(o));
    }
    p.ops = std::move(kept);
    for (auto& [c, n] : dropped) {
      p.meta[schema::meta::kFrAlignedFromSeqPrefix + p.comms[c].name] = std::to_string(start[p.comms[c].hash]);
      p.meta[schema::meta::kFrAlignedDroppedPrefix + p.comms[c].name] = std::to_string(n);
    }
    for (size_t c = 0; c < p.comms.size(); ++c) {
      const std::string& h = p.comms[c].hash;
      // No collective of the aligned window while others hold some: if its history was lost, it
      // may have issued them before its window; unknown from the window's first seq.
      if (start[h] > 0 && !anchor.count(static_cast<int>(c)) && lost_history(p))
        add_hole(p, static_cast<int>(c), start[h], "fr_window_start");
      // Its p2p queue cannot be aligned with the others'.
      if (cut[h] && !anchor.count(static_cast<int>(c)))
        for (const Op& o : p.ops)
          if (o.comm == static_cast<int>(c) && p2p_seq(o.seq)) {
            add_hole(p, static_cast<int>(c), o.seq, "fr_p2p_window");
            break;
          }
    }
  }
  // Dumps taken at different times: a collective a peer completed was issued by every member,
  // so a member whose dump ends before it issued it after its dump (a completed receive likewise
  // proves its send). Its dump end is not the end of its history there: unknown from the seq after
  // its last one, never "never issued".
  std::map<std::string, int64_t> completed_through;  // comm hash -> newest completed collective seq
  for (auto& p : procs)
    for (auto& o : p.ops)
      if (o.comm >= 0 && coll_seq(o.seq) && o.completed)
        completed_through[p.comms[o.comm].hash] = std::max(completed_through[p.comms[o.comm].hash], o.seq);
  // Per (comm, src, dst): messages each end holds; recvs held with index >= sends held, completed.
  std::map<std::tuple<std::string, int, int>, std::vector<bool>> recvs_done;  // completion per recv, in order
  std::map<std::tuple<std::string, int, int>, int64_t> sends;
  for (auto& p : procs)
    for (auto& o : p.ops) {
      if (o.comm < 0 || !p2p_seq(o.seq)) continue;
      const Comm& c = p.comms[o.comm];
      each_message(o, [&](vocab::Op op, int peer) {
        if (peer < 0) return;
        if (op == vocab::Op::Send) ++sends[{c.hash, c.rank, peer}];
        if (op == vocab::Op::Recv) recvs_done[{c.hash, peer, c.rank}].push_back(o.completed);
      });
    }
  for (auto& p : procs)
    for (size_t c = 0; c < p.comms.size(); ++c) {
      const Comm& cm = p.comms[c];
      int64_t last = 0, last_p2p = 0;
      for (const Op& o : p.ops)
        if (o.comm == static_cast<int>(c)) {
          if (coll_seq(o.seq)) last = std::max(last, o.seq);
          if (p2p_seq(o.seq)) last_p2p = std::max(last_p2p, o.seq);
        }
      if (last == 0) last = start[cm.hash] > 0 ? start[cm.hash] - 1 : 0;
      if (completed_through[cm.hash] > last) add_hole(p, static_cast<int>(c), last + 1, "fr_dump_ended");
      for (auto& [key, done] : recvs_done) {
        if (std::get<0>(key) != cm.hash || std::get<1>(key) != cm.rank) continue;
        const int64_t held = sends[key];
        bool proven = false;
        for (size_t i = static_cast<size_t>(held); i < done.size(); ++i) proven |= done[i];
        if (proven) add_hole(p, static_cast<int>(c), last_p2p > 0 ? last_p2p + 1 : kP2PSeqBase + 1, "fr_dump_ended");
      }
    }
}

}  // namespace lockstep::flightrec
