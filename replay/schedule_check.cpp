#include "schedule_check.h"


namespace lockstep::replay {

using OpKind = vocab::Op;

bool replayable_call(OpKind op) { return op != OpKind::SendRecv && op != OpKind::Coalesced; }

size_t dtype_bytes(vocab::Dtype dtype) { return dtype == vocab::Dtype::Mixed ? 1 : vocab::dtype_size(dtype); }

bool call_buffer_bytes(OpKind op, vocab::Dtype dtype, int64_t count, int nranks,
                       uint64_t* send, uint64_t* recv) {
  const size_t e = dtype_bytes(dtype);
  if (e == 0 || count < 0 || nranks < 1 || nranks > kMaxReplayRanks) return false;
  uint64_t one = 0, all = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), static_cast<uint64_t>(e), &one) ||
      __builtin_mul_overflow(one, static_cast<uint64_t>(nranks), &all))
    return false;
  if (op == OpKind::AllGather || op == OpKind::Gather) *send = one, *recv = all;
  else if (op == OpKind::ReduceScatter || op == OpKind::Scatter) *send = all, *recv = one;
  else if (op == OpKind::AllToAll) *send = all, *recv = all;
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
    const std::string at = "call " + std::to_string(o.call_index) + " (" + vocab::name(o.op) + ")";
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
      const vocab::Dtype dtype = p.dtype == vocab::Dtype::Mixed ? o.dtype : p.dtype;
      if (!replayable_call(p.op)) {
        out.push_back(at + ": op '" + vocab::name(p.op) + "' cannot be replayed");
        continue;
      }
      uint64_t s = 0, v = 0;
      if (!call_buffer_bytes(p.op, dtype, p.count, c.nranks, &s, &v))
        out.push_back(at + ": count " + std::to_string(p.count) + " of " + vocab::name(dtype) + " on " +
                      std::to_string(c.nranks) + " ranks is out of range (0.. " +
                      std::to_string(kMaxReplayBufferBytes) + " bytes per buffer)");
      if (vocab::is_rooted(p.op) && (p.root < 0 || p.root >= c.nranks))
        out.push_back(at + ": root " + std::to_string(p.root) + " is not a rank of a " +
                      std::to_string(c.nranks) + "-rank communicator");
      if (vocab::is_p2p(p.op) && (p.peer < 0 || p.peer >= c.nranks))
        out.push_back(at + ": peer " + std::to_string(p.peer) + " is not a rank of a " +
                      std::to_string(c.nranks) + "-rank communicator");
    }
  }
  return out;
}

}  // namespace lockstep::replay
