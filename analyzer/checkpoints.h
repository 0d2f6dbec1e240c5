// What a communicator's history proves when the size cap retired its oldest ops (bounded traces,
// schema/op_digest.h): per member, its retained collectives are verified against its own
// checkpoints (chained from comms.retired_digest); across members, digests are compared at the
// ordinals they all know. Result per communicator: the ordinals retained on every member (known
// exactly), the ordinals proven identical by digest only, the checkpoint interval that holds
// the first divergence when digests disagree, and what cannot be verified (named evidence).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm_index.h"
#include "schedule.h"
#include "trace_validation.h"

namespace lockstep {

// The op_digest.h signature hash of an interned signature (the recorder's definition).
uint64_t signature_digest(const Signature& s);

// A file's checkpoint of communicator `c` at collective ordinal k (Comm::checkpoints is by
// ordinal), or null.
const Comm::Checkpoint* checkpoint_at(const Comm& c, int64_t k);

// One side of a digest disagreement: the members whose running digest at the ordinal is equal.
struct DigestSide {
  uint64_t digest = 0;
  std::vector<int> procs;  // every member of the side (by rank)
};

// Members of one communicator whose digests differ: the first divergence lies in collective
// ordinals [first, last] (both 1-based), known by digest only.
struct DigestDivergence {
  int gcomm = -1;
  int64_t first = 0;   // first ordinal that may differ: the last ordinal where all agreed + 1
  int64_t last = 0;    // the first ordinal at which their digests differ
  std::vector<DigestSide> sides;  // largest side first; members that do not know `last` left out
};

struct CommWindow {
  int gcomm = -1;
  bool bounded = false;        // some member retired history or records checkpoints
  int64_t retired_min = 0;     // fewest collectives retired by a member
  int64_t retired_max = 0;     // most collectives retired by a member
  // Of those, the most the size cap retired (comms.retired_collectives); the rest of retired_max
  // was not read (a summary-first read's cut), though the file holds it.
  int64_t cap_retired_max = 0;
  // Ordinals retained on every member: compared op by op (exact_first > exact_last: none).
  int64_t exact_first = 1;
  int64_t exact_last = 0;
  // Ordinals 1..digest_through proven identical on every member by digest (0: none).
  int64_t digest_through = 0;
  // Ordinals retired on some member and not proven by digest: (digest_through, retired_max]
  // when unverified (an evidence issue says why).
  bool unverified = false;
  // Point-to-point messages retired on some member: channels are cut (p2p is outside the
  // digest), so messages are not paired on this comm.
  bool p2p_cut = false;
};

struct CheckpointReport {
  std::vector<CommWindow> comms;             // one per CommIndex::comms entry
  std::vector<DigestDivergence> divergences; // first per communicator, when digests disagree
  std::vector<EvidenceIssue> evidence;       // kDigestInconsistent, kUnverifiedHistory
  bool any_bounded() const;
};

CheckpointReport compare_checkpoints(const Schedule& s, const CommIndex& idx);

// The "window: ..." line (no newline) of a communicator whose history the size cap retired:
// which collectives are exact, which known by digest only, which not verified. `label` (already
// printable) names the communicator; empty when the context names it.
std::string window_line(const CommWindow& w, const std::string& label = "");

}  // namespace lockstep
