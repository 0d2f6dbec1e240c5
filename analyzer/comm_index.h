// Communicators across processes: which files hold the members of each communicator (joined by
// comm hash), the communicator's stable role name, and each member's ops on it split into
// collectives (aligned by ordinal across members) and point-to-point ops (matched pairwise).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "identity.h"
#include "schedule.h"

namespace lockstep {

struct CommMember {
  int proc = 0;   // index into Schedule::procs
  int local = 0;  // index into that process's info.comms
  int rank = 0;   // rank in the communicator
};

struct GlobalComm {
  std::string hash;
  std::string role;    // comm_roles() (identity.h): stable across runs
  std::string family;  // comm_families() (identity.h): the role without split colors

  std::string name;
  int nranks = 0;
  std::vector<CommMember> members;  // sorted by rank; only members whose file was loaded
};

// Why a member's evidence on a communicator stops being whole (ProcComm::exact_through).
enum class GapCause : uint8_t {
  kNone,
  kSeqGap,        // a seq is missing from the file (its record was dropped)
  kSeqMissing,    // a seq is missing from a file that says it dropped nothing (edited, damaged)
  kDroppedRange,  // the drops table names the seqs the recorder dropped
  kPartsDropped,  // a grouped op's row is there, its part rows were dropped
  kUnlocated,     // records were dropped and the file does not say which: after its last op, unknown
  kStopped,       // the recorder stopped (meta recorder_stopped): every seq from its stop point on
  kSeqOrder,      // a collective's seq is lower than an earlier call's on the communicator (edited, damaged)
};
const char* gap_cause_name(GapCause c);  // none seq_gap seq_missing dropped_range parts_dropped unlocated recorder_stopped seq_order

struct ProcComm {
  int gcomm = -1;
  std::vector<uint32_t> colls;  // indices into SchedProcess::ops: collectives and all-to-alls
  std::vector<uint32_t> p2p;    // indices into SchedProcess::ops: send, recv, send_recv
  // Collectives the size cap retired before colls[0] (Comm::retired_collectives): colls[i] is
  // collective ordinal base + i + 1. Members are aligned by ordinal, never by position.
  int64_t base = 0;
  // Point-to-point ops retired (Comm::retired_through_seq - retired_collectives): > 0 cuts the
  // comm's p2p channels, whose messages are then not paired by index.
  int64_t retired_p2p = 0;
  // A hole in this member's records (dropped by its recorder): seqs 1..complete_through_seq are
  // all in the file (or retired whole), some above it are not, so its collective ordinals above
  // exact_through are unknown: an op it holds there may belong to a later ordinal, one it lacks
  // may have been dropped. Compared only up to there. INT64_MAX: no hole.
  int64_t complete_through_seq = INT64_MAX;
  int64_t exact_through = INT64_MAX;
  GapCause gap = GapCause::kNone;
  bool whole() const { return gap == GapCause::kNone; }
  // Ordinal k says something about this member: not retired, not past a hole.
  bool known(int64_t k) const { return k > base && k <= exact_through; }
  int64_t end() const { return base + static_cast<int64_t>(colls.size()); }  // last ordinal held
  // Index into colls of 1-based ordinal k; -1 when retired or not issued (yet).
  int64_t at(int64_t k) const { return k > base && k <= end() ? k - base - 1 : -1; }
};

// The one cross-process join of communicators: by hash, in the order the lowest-indexed process
// created them. A process is a member once: a hash its file holds twice maps on its first entry
// only (the second maps to -1, with a warning).
struct CommJoin {
  std::vector<GlobalComm> comms;
  std::vector<std::vector<int>> gcomm;  // [proc][local comm]: index into comms, -1 for a repeat
  std::vector<std::string> warnings;    // members that disagree on a role, a hash twice in a file
};
CommJoin join_comms(const std::vector<const Process*>& procs);

struct CommIndex {
  std::vector<GlobalComm> comms;
  std::vector<std::vector<ProcComm>> per_proc;  // [proc][local comm]
  std::vector<std::string> warnings;            // e.g. members that disagree on a role

  const ProcComm& of(const CommMember& m) const { return per_proc[m.proc][m.local]; }
  // -1 when the process is not a member (scans the process's own communicators, not the members).
  int local_of(int gcomm, int proc) const;
};

CommIndex build_comm_index(const Schedule& s);

// The comm ranks of a communicator with no loaded file (missing, skipped, of another job), ascending.
std::vector<int> untraced_ranks(const GlobalComm& gc);

// How every output names a communicator from its hash: "comm 05163667 (init0)", its role from
// `comms` (validate_evidence's comm_label); "comm 05163667" when none of them has that hash.
// `comms` must outlive the function.
inline std::function<std::string(const std::string&)> comm_labeler(const std::vector<GlobalComm>& comms) {
  return [&comms](const std::string& hash) {
    for (const GlobalComm& c : comms)
      if (c.hash == hash) return comm_label(hash, c.role);
    return comm_label(hash);
  };
}

}  // namespace lockstep
