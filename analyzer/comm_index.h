// Communicators across processes: which files hold the members of each communicator (joined by
// comm hash), the communicator's stable role name, and each member's ops on it split into
// collectives (aligned by ordinal across members) and point-to-point ops (matched pairwise).
#pragma once

#include <string>
#include <vector>

#include "schedule.h"

namespace lockstep {

struct CommMember {
  int proc = 0;   // index into Schedule::procs
  int local = 0;  // index into that process's info.comms
  int rank = 0;   // rank in the communicator
};

struct GlobalComm {
  std::string hash;
  // Stable across runs (comm hashes are random per run); see docs/analyzer.md "Roles":
  // ncclConfig_t.commName when given, else "init<i>" for the i-th communicator the process
  // created with ncclCommInitRank*/InitAll (0-based), and "<parent role>.split<j>(color=c)" for
  // the j-th communicator split from that parent.
  std::string role;
  std::string name;
  int nranks = 0;
  std::vector<CommMember> members;  // sorted by rank; only members whose file was loaded
};

struct ProcComm {
  int gcomm = -1;
  std::vector<uint32_t> colls;  // indices into SchedProcess::ops: collectives and all-to-alls
  std::vector<uint32_t> p2p;    // indices into SchedProcess::ops: send, recv, send_recv
};

struct CommIndex {
  std::vector<GlobalComm> comms;
  std::vector<std::vector<ProcComm>> per_proc;  // [proc][local comm]
  std::vector<std::string> warnings;            // e.g. members that disagree on a role

  const ProcComm& of(const CommMember& m) const { return per_proc[m.proc][m.local]; }
  // -1 when the process is not a member.
  int local_of(int gcomm, int proc) const;
};

CommIndex build_comm_index(const Schedule& s);

// Local role names of one process's communicators (same rule as GlobalComm::role).
std::vector<std::string> local_roles(const Process& p);

// "3f2a9c01" (the first 8 hex digits), the short form used in reports and accepted by --comm.
std::string short_hash(const std::string& hash);

}  // namespace lockstep
