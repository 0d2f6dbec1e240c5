#include "schedule_check.h"

#include <map>

namespace lockstep::replay {

namespace {

bool rooted(const std::string& op) {
  return op == "broadcast" || op == "reduce" || op == "gather" || op == "scatter";
}
bool p2p(const std::string& op) { return op == "send" || op == "recv"; }
bool reducing(const std::string& op) {
  return op == "all_reduce" || op == "reduce" || op == "reduce_scatter";
}
bool known_redop(const std::string& r) {
  return r.empty() || r == "sum" || r == "prod" || r == "max" || r == "min" || r == "avg" ||
         r == "premulsum";
}

}  // namespace

bool replayable_call(const std::string& op) {
  return op == "all_reduce" || op == "broadcast" || op == "reduce" || op == "all_gather" ||
         op == "reduce_scatter" || op == "all_to_all" || op == "gather" || op == "scatter" ||
         p2p(op);
}

size_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"", 1},          {"int8", 1},     {"uint8", 1},      {"float8e4m3", 1}, {"float8e5m2", 1},
      {"float16", 2},   {"bfloat16", 2}, {"int32", 4},      {"uint32", 4},     {"float32", 4},
      {"int64", 8},     {"uint64", 8},   {"float64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

bool call_buffer_bytes(const std::string& op, const std::string& dtype, int64_t count, int nranks,
                       uint64_t* send, uint64_t* recv) {
  const size_t e = dtype_bytes(dtype);
  if (e == 0 || count < 0 || nranks < 1 || nranks > kMaxReplayRanks) return false;
  uint64_t one = 0, all = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), static_cast<uint64_t>(e), &one) ||
      __builtin_mul_overflow(one, static_cast<uint64_t>(nranks), &all))
    return false;
  if (op == "all_gather" || op == "gather") *send = one, *recv = all;
  else if (op == "reduce_scatter" || op == "scatter") *send = all, *recv = one;
  else if (op == "all_to_all") *send = all, *recv = all;
  else *send = one, *recv = one;
  return *send <= kMaxReplayBufferBytes && *recv <= kMaxReplayBufferBytes;
}

std::vector<std::string> schedule_problems(const RankSchedule& r) {
  std::vector<std::string> out;
  const auto& comms = r.proc.comms;
  for (size_t i = 0; i < comms.size(); ++i) {
    const Comm& c = comms[i];
    if (c.init_rc != 0) continue;  // never created: not replayed
    if (c.nranks < 1 || c.nranks > kMaxReplayRanks || c.rank < 0 || c.rank >= c.nranks)
      out.push_back("communicator " + c.hash + ": rank " + std::to_string(c.rank) + " of " +
                    std::to_string(c.nranks) + " (replay needs 0 <= rank < nranks <= " +
                    std::to_string(kMaxReplayRanks) + ")");
    if (c.parent >= static_cast<int>(comms.size()))
      out.push_back("communicator " + c.hash + ": parent index " + std::to_string(c.parent) +
                    " is not a communicator of this file");
  }
  for (const Op& o : r.proc.ops) {
    if (!replayable(o)) continue;
    const std::string at = "call " + std::to_string(o.call_index) + " (" + o.op + ")";
    if (out.size() >= 20) {
      out.push_back("... (more problems not listed)");
      break;
    }
    if (o.comm < 0 || o.comm >= static_cast<int>(comms.size())) {
      out.push_back(at + ": on no communicator of this file");
      continue;
    }
    const Comm& c = comms[o.comm];
    std::vector<OpPart> calls = o.parts;
    if (calls.empty()) calls.push_back(OpPart{o.op, o.dtype, o.count, o.root, o.peer, o.redop});
    for (const OpPart& p : calls) {
      const std::string dtype = p.dtype.empty() ? o.dtype : p.dtype;
      if (!replayable_call(p.op)) {
        out.push_back(at + ": op '" + p.op + "' cannot be replayed");
        continue;
      }
      if (dtype_bytes(dtype) == 0) out.push_back(at + ": unknown dtype '" + dtype + "'");
      if (reducing(p.op) && !known_redop(p.redop))
        out.push_back(at + ": unknown reduction '" + p.redop + "'");
      uint64_t s = 0, v = 0;
      if (dtype_bytes(dtype) != 0 &&
          !call_buffer_bytes(p.op, dtype, p.count, c.nranks, &s, &v))
        out.push_back(at + ": count " + std::to_string(p.count) + " of " + dtype + " on " +
                      std::to_string(c.nranks) + " ranks is out of range (0.. " +
                      std::to_string(kMaxReplayBufferBytes) + " bytes per buffer)");
      if (rooted(p.op) && (p.root < 0 || p.root >= c.nranks))
        out.push_back(at + ": root " + std::to_string(p.root) + " is not a rank of a " +
                      std::to_string(c.nranks) + "-rank communicator");
      if (p2p(p.op) && (p.peer < 0 || p.peer >= c.nranks))
        out.push_back(at + ": peer " + std::to_string(p.peer) + " is not a rank of a " +
                      std::to_string(c.nranks) + "-rank communicator");
    }
  }
  return out;
}

}  // namespace lockstep::replay
