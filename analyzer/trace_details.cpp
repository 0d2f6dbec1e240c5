#include "trace_details.h"

namespace lockstep {

std::optional<Op> find_op_by_seq(TraceDetails& details, int proc, int comm, int64_t seq, int64_t from, int64_t to) {
  std::optional<int64_t> hit;
  // Invariant: if an op of `comm` has seq `seq`, its call_index is in [lo, hi]. Each question
  // shrinks the range (the midpoint of a 64-bit range: 64 questions at most).
  int64_t lo = from, hi = to;
  while (lo <= hi) {
    const auto mid = static_cast<int64_t>((static_cast<__int128>(lo) + hi) >> 1);
    const auto first = details.first_of_comm(proc, comm, mid, hi);
    if (!first || first->seq > seq) {
      hi = mid - 1;  // every op of the communicator from mid on comes later
    } else if (first->seq < seq) {
      lo = first->call_index + 1;
    } else {
      hit = first->call_index;
      break;
    }
  }
  if (!hit) return std::nullopt;
  std::optional<Op> op = details.op(proc, *hit);
  if (!op || op->comm != comm || op->seq != seq || !sequenced(*op)) return std::nullopt;
  return op;
}

}  // namespace lockstep
