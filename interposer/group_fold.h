// How the calls one thread issued on one communicator inside its outermost
// ncclGroupStart/ncclGroupEnd become one logical op (DESIGN.md "The recorder"):
//   one call                          -> that op (no parts)
//   send+recv with every peer         -> all_to_all (parts keep the per-peer counts; self is
//                                        optional: both or neither)
//   other send/recv mixes             -> send_recv
//   several collectives (or a mix)    -> coalesced
// A pure function, so it is unit-tested on its own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "op_desc.h"

namespace lockstep::rec {

struct Folded {
  OpKind op;
  int dtype;       // -1 when the parts differ
  int64_t count;   // the single call's count; else total elements sent (all parts for coalesced)
  int root, peer, redop;
  bool list_parts; // write op_parts rows
};

// parts: the calls on one communicator, in issue order (n >= 1). nranks/rank: of that
// communicator (nranks <= 0 when unknown: then no all_to_all is inferred).
Folded fold_parts(const OpDesc* const* parts, size_t n, int nranks, int rank);

}  // namespace lockstep::rec
