#include "group_fold.h"

#include <cstring>
#include <vector>

namespace lockstep::rec {

Folded fold_parts(const OpDesc* const* parts, size_t n, int nranks, int rank) {
  const OpDesc& first = *parts[0];
  if (n == 1)
    return {first.kind, first.dtype, int64_t(first.count), first.root, first.peer, first.redop,
            false};

  Folded f{OpKind::Coalesced, first.dtype, 0, -1, -1, first.redop, true};
  bool all_p2p = true;
  int64_t sent = 0, total = 0;
  for (size_t i = 0; i < n; i++) {
    const OpDesc& d = *parts[i];
    if (d.dtype != f.dtype) f.dtype = -1;
    if (d.redop != f.redop) f.redop = -1;
    total += int64_t(d.count);
    if (d.kind == OpKind::Send) sent += int64_t(d.count);
    if (!is_p2p(d.kind)) all_p2p = false;
  }
  if (!all_p2p) {
    f.count = total;
    return f;
  }
  f.redop = -1;
  f.count = sent;
  f.op = OpKind::SendRecv;
  if (nranks <= 0 || nranks > 1 << 20) return f;
  // Every peer but this rank needs a send and a receive of its own: a smaller group (a
  // pipeline's send + recv pair) is no all_to_all, decided without the bitmap.
  if (n < 2 * size_t(nranks - 1)) return f;
  // Does every peer get a send and a receive? (bit 0: send, bit 1: recv; no allocation up to
  // 1024 ranks, and only the ranks' bytes cleared)
  uint8_t small[1024];
  std::vector<uint8_t> big;
  uint8_t* seen = small;
  if (nranks > 1024) {
    big.assign(size_t(nranks), 0);
    seen = big.data();
  } else {
    std::memset(small, 0, size_t(nranks));
  }
  for (size_t i = 0; i < n; i++) {
    const OpDesc& d = *parts[i];
    if (d.peer < 0 || d.peer >= nranks) return f;
    seen[size_t(d.peer)] |= d.kind == OpKind::Send ? 1 : 2;
  }
  for (int p = 0; p < nranks; p++) {
    if (seen[size_t(p)] == 3) continue;
    if (p == rank && seen[size_t(p)] == 0) continue;  // self-exchange left out
    return f;
  }
  f.op = OpKind::AllToAll;
  return f;
}

}  // namespace lockstep::rec
