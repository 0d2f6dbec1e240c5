#include "schedule.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

#include "saturating.h"

namespace lockstep {

namespace {
const char* part_dtype(vocab::Dtype d) { return d == vocab::Dtype::Mixed ? "" : vocab::name(d); }
}  // namespace

std::string signature_key(const Signature& s) {
  // Appended in place (no temporary strings: interning runs for every signature of every file).
  std::string k;
  k.reserve(48 + 40 * s.parts.size());
  auto add = [&k](int64_t v, char sep) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    k.append(buf, r.ptr);
    k.push_back(sep);
  };
  add(static_cast<int>(s.op), '|'), add(static_cast<int>(s.dtype), '|'), add(static_cast<int>(s.redop), '|');
  add(s.count, '|'), add(s.root, '|'), add(s.peer, '|');
  for (auto& p : s.parts) {
    add(static_cast<int>(p.op), ','), add(static_cast<int>(p.dtype), ','), add(p.count, ','), add(p.root, ',');
    add(p.peer, ','), add(static_cast<int>(p.redop), ';');
  }
  return k;
}

bool same_signature(const Signature& a, const Signature& b) {
  auto fields = [](const auto& x) { return std::tie(x.op, x.dtype, x.redop, x.count, x.root, x.peer); };
  if (fields(a) != fields(b) || a.parts.size() != b.parts.size()) return false;
  for (size_t k = 0; k < a.parts.size(); ++k)
    if (fields(a.parts[k]) != fields(b.parts[k])) return false;
  return true;
}

uint32_t SignatureTable::intern(Signature sig) {
  auto [it, inserted] = index_.emplace(signature_key(sig), static_cast<uint32_t>(sigs_.size()));
  if (inserted) {
    sig.cls = classify_op(sig.op);
    sigs_.push_back(std::move(sig));
  }
  return it->second;
}

uint64_t SchedProcess::stream_of(size_t i) const {
  const SchedOp& o = ops[i];
  if (o.stream < streams.size()) return streams[o.stream];
  auto it = std::lower_bound(overflow_streams.begin(), overflow_streams.end(), std::pair<uint32_t, uint64_t>(uint32_t(i), 0));
  return it != overflow_streams.end() && it->first == i ? it->second : kUnknownStream;
}

uint32_t ThreadTable::index(int64_t tid) {
  auto [it, fresh] = index_.try_emplace(tid, static_cast<uint32_t>(sp_.threads.size()));
  if (fresh) sp_.threads.push_back(tid);
  return it->second;
}

uint8_t ScheduleBuilder::stream_bucket(uint64_t stream) {
  if (last_bucket_ >= 0 && stream == last_stream_) return static_cast<uint8_t>(last_bucket_);
  size_t i = 0;
  while (i < sp_.streams.size() && sp_.streams[i] != stream) ++i;
  if (i == sp_.streams.size() && i < 255) sp_.streams.push_back(stream);
  last_stream_ = stream;
  last_bucket_ = static_cast<int>(std::min<size_t>(i, 255));
  return static_cast<uint8_t>(last_bucket_);
}

void ScheduleBuilder::add_op(const Row& r) {
  if (r.call_index < -kMaxCallIndex - 1 || r.call_index > kMaxCallIndex)
    throw IndexError("op call_index " + std::to_string(r.call_index) + " out of range (valid: 0.." + std::to_string(kMaxCallIndex) + ")");
  if (r.seq < 1 || r.seq > static_cast<int64_t>(UINT32_MAX))
    throw IndexError("op " + std::to_string(r.call_index) + " has seq " + std::to_string(r.seq) + " (valid: 1.." + std::to_string(UINT32_MAX) + ")");
  if (r.comm < 0 || r.comm > UINT16_MAX) throw IndexError("op " + std::to_string(r.call_index) + " names no communicator");
  if (sp_.ops.size() >= UINT32_MAX) throw IndexError("more than 4,294,967,295 sequenced ops in one file: not supported");
  SchedOp o;
  o.call_index = r.call_index;
  o.seq = static_cast<uint32_t>(r.seq);
  o.sig = r.sig;
  o.comm = static_cast<uint16_t>(r.comm);
  o.stream = stream_bucket(r.stream);
  if (o.stream == 255) sp_.overflow_streams.emplace_back(static_cast<uint32_t>(sp_.ops.size()), r.stream);
  if (r.completed) {
    o.flags |= kOpCompleted;
    sp_.completion_known = true;
  }
  if (r.group_id >= 0) {
    o.flags |= kOpGrouped;
    sp_.groups.push_back({static_cast<uint32_t>(sp_.ops.size()), static_cast<uint32_t>(r.group_id) + 1});
  }
  sp_.ops.push_back(o);
}

void ScheduleBuilder::add_unsequenced(bool completed) {
  ++sp_.unsequenced_ops;
  if (completed) sp_.completion_known = true;
}

Schedule schedule_from_trace(const Trace& trace) {
  Schedule s;
  s.dir = trace.dir;
  s.skipped = trace.skipped;
  SignatureTable sigs;
  for (const Process& p : trace.processes) {
    SchedProcess sp;
    sp.info = p;
    sp.info.ops.clear();
    sp.info.stacks.clear();
    // Sorted here, so that the side data below can follow the same order.
    std::vector<const Op*> by_call;
    for (const Op& o : p.ops) by_call.push_back(&o);
    std::stable_sort(by_call.begin(), by_call.end(), [](const Op* a, const Op* b) { return a->call_index < b->call_index; });
    ScheduleBuilder index(sp);
    ThreadTable threads(sp);
    for (const Op* op : by_call) {
      const Op& o = *op;
      if (!sequenced(o) || o.comm < 0) {
        index.add_unsequenced(o.completed);
        continue;
      }
      index.add_op({o.call_index, o.seq, o.comm, sigs.intern(Signature{o.op, o.dtype, o.count, o.root, o.peer, o.redop, o.parts, OpClass::kCollective}),
                    o.stream, o.group_id, o.completed});
      sp.op_threads.push_back(threads.index(o.tid));
    }
    std::vector<const Wait*> waits;
    for (const Wait& w : p.waits) waits.push_back(&w);
    std::stable_sort(waits.begin(), waits.end(), [](const Wait* a, const Wait* b) { return a->call_index < b->call_index; });
    for (const Wait* w : waits) sp.waits.push_back({w->call_index, w->kind, w->stream, w->event, threads.index(w->tid)});
    sp.host_waits_loaded = true;
    s.procs.push_back(std::move(sp));
  }
  s.sigs = sigs.take();
  return s;
}

int64_t all_to_all_amount(const Signature& s, bool send, int peer) {
  if (s.parts.empty()) return s.count;
  int64_t n = 0;
  for (auto& p : s.parts)
    if (p.peer == peer && p.op == (send ? vocab::Op::Send : vocab::Op::Recv)) n = sat_add(n, p.count);  // counts from the file
  return n;
}

std::string describe_signature(const Signature& s) {
  std::string d = vocab::name(s.op);
  if (s.dtype != vocab::Dtype::Mixed) d += std::string(" ") + vocab::name(s.dtype);
  if (s.cls == OpClass::kAllToAll && !s.parts.empty()) {
    // Per-peer sends, the part that must pair up with the peers' receives.
    std::map<int, int64_t> sends;
    for (auto& p : s.parts)
      if (p.op == vocab::Op::Send) sends[p.peer] = sat_add(sends[p.peer], p.count);
    d += " sends=[";
    bool first = true;
    for (auto& [peer, n] : sends) {
      d += (first ? "" : " ") + std::to_string(peer) + ":" + std::to_string(n);
      first = false;
    }
    d += "]";
  } else {
    d += " count=" + std::to_string(s.count);
  }
  if (s.root >= 0) d += " root=" + std::to_string(s.root);
  if (s.peer >= 0) d += " peer=" + std::to_string(s.peer);
  if (s.redop != vocab::RedOp::None) d += std::string(" ") + vocab::name(s.redop);
  if (s.cls != OpClass::kAllToAll && !s.parts.empty()) {
    d += " [";
    for (size_t i = 0; i < s.parts.size(); ++i) {
      auto& p = s.parts[i];
      d += std::string(i ? ", " : "") + vocab::name(p.op) + " " + part_dtype(p.dtype) + " " + std::to_string(p.count);
      if (p.peer >= 0) d += (p.op == vocab::Op::Recv ? " from " : " to ") + std::to_string(p.peer);
    }
    d += "]";
  }
  return d;
}

}  // namespace lockstep
