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
  kDigestMismatch,  // members' checkpoint digests differ: the first divergence lies in retired
                    // history, located to ordinals [ordinal_first, ordinal] (analyzer/checkpoints.h)
};

// "op_type", "dtype", ... (the JSON spelling; docs/analyzer.md).
const char* kind_name(FindingKind k);
// Findings about one (sender, receiver) channel of point-to-point messages.
constexpr bool is_p2p_finding(FindingKind k) {
  return k == FindingKind::kP2PPairing || k == FindingKind::kP2PCount || k == FindingKind::kP2PDtype ||
         k == FindingKind::kP2PInterleave;
}

struct Side {
  int proc = -1;
  int comm_rank = -1;
  int64_t op = -1;  // index into SchedProcess::ops; -1 = never issued
};

// Members of a collective finding that issued the same thing (or nothing): every member is in
// exactly one group, so a finding on a 16,384-rank communicator lists a few groups, not 16,384
// sides.
inline constexpr uint32_t kNotIssued = UINT32_MAX;
struct SideGroup {
  uint32_t sig = kNotIssued;   // index into Schedule::sigs; kNotIssued: never issued it
  uint64_t digest = 0;         // kDigestMismatch: the group's running digest
  std::vector<int> procs;      // every member of the group
  bool odd = false;            // not the majority
};

// Sides listed by a finding on a collective of many members: every odd one up to this many,
// and the first kSamplesPerGroup members of each other group; the groups carry the counts and
// the rest.
inline constexpr size_t kMaxListedSides = 16;
inline constexpr size_t kSamplesPerGroup = 3;

struct Divergence {
  FindingKind kind = FindingKind::kOpType;
  int gcomm = -1;
  int64_t ordinal = 0;       // 1-based: collective ordinal on gcomm, or message index of a pair
  int64_t ordinal_first = 0; // kDigestMismatch: first ordinal of the interval (ordinal = last)
  std::string detail;        // one line: what differs
  // Listed sides: p2p: sender, receiver; inversion: 2; collectives: every member when there are
  // at most kMaxListedSides, else the odd ones (capped) and kSamplesPerGroup per other group.
  std::vector<Side> sides;
  std::vector<SideGroup> groups;  // collectives: every member in one group, largest first
  std::vector<int> not_issued;    // collectives: every member that never issued it
  std::vector<int> odd;      // procs that differ from the majority (3+ members), else empty
  size_t members = 0;        // collectives: members compared (sides may list fewer)
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
