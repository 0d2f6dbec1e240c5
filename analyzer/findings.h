// What the analyses report: a divergence between the members of a communicator (or between two
// communicators' order), with each member's side. Op references are indices into
// SchedProcess::ops, so a finding costs nothing until it is printed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm_index.h"
#include "schedule.h"

namespace lockstep {

enum class FindingKind {
  kOpType,          // members issued different operations at the same collective ordinal
  kDtype,
  kCount,
  kRoot,
  kRedOp,
  kGroupContents,   // coalesced groups with different members' calls
  kAllToAllSplit,   // all-to-all: what one member sends a peer != what that peer receives
  kNeverIssued,     // some members issued the op, others never did (stopped, stuck, dead)
  kP2PPairing,      // more sends than matching receives (or the reverse) between two ranks
  kP2PCount,        // a send and its matching receive disagree on count
  kP2PDtype,
  kP2PInterleave,   // a send and its receive sit between different collectives of the comm
  kOrderInversion,  // two ranks issue ops of two communicators in opposite orders
};

// "op_type", "dtype", ... (the JSON spelling; docs/analyzer.md).
const char* kind_name(FindingKind k);

struct Side {
  int proc = -1;
  int comm_rank = -1;
  int64_t op = -1;  // index into SchedProcess::ops; -1 = never issued
};

struct Divergence {
  FindingKind kind = FindingKind::kOpType;
  int gcomm = -1;
  int64_t ordinal = 0;       // 1-based: collective ordinal on gcomm, or message index of a pair
  std::string detail;        // one line: what differs
  std::vector<Side> sides;   // collectives: every member; p2p: sender, receiver; inversion: 2
  std::vector<int> odd;      // procs that differ from the majority (3+ members), else empty
  // kOrderInversion: the other communicator's op, one per side (same order as sides).
  int gcomm_b = -1;
  int64_t ordinal_b = 0;
  std::vector<Side> sides_b;
};

// First divergence of each communicator's collectives, and of each point-to-point pair.
std::vector<Divergence> find_divergences(const Schedule& s, const CommIndex& idx);

// Cross-communicator order inversions: the first per pair of communicators.
std::vector<Divergence> find_order_inversions(const Schedule& s, const CommIndex& idx);

// Index of the finding that comes first in causal order: on every process that takes part in
// two findings, compare its call indices (never wall clocks). -1 when empty.
int first_in_causal_order(const Schedule& s, const std::vector<const Divergence*>& findings);

}  // namespace lockstep
