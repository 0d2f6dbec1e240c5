// The model checker's work list (model_check.h): an index over the Schedule that the engine
// (model_engine.h) walks; built by build_work_list (model_work_list.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule.h"

namespace lockstep::model::detail {

// Bounds on what the model allocates per member rank (16,384 ranks x 10,000 collectives, the
// largest traces measured, take 164 M instance slots).
constexpr int64_t kMaxModelRanks = int64_t(1) << 26;

using vocab::is_p2p;

using OpKind = vocab::Op;
enum class ItemKind : uint8_t {
  kOp,               // one op
  kStreamSync,       // host blocks until `stream`'s work issued so far completed
  kEventSync,        // host blocks until the work before `event`'s last record completed
  kDeviceSync,       // host blocks until all work issued so far completed
  kStreamWaitEvent,  // later work on `stream` waits for `event`
  kEventRecord,      // `event` marks the current end of `stream`
};

struct Part {         // one send or recv of a p2p op (lone send/recv: one part)
  bool is_send = false;
  int32_t peer = -1;  // rank in the communicator
  int64_t count = 0;
  vocab::Dtype dtype = vocab::Dtype::Mixed;
};

// What the model compares of an op (Engine::same_collective) and says of it, once per signature
// of the Schedule (Item::desc).
struct OpDesc {
  int64_t count = 0;
  int32_t root = -1;
  int16_t coalesced_sig = -1;  // coalesced ops: index into WorkList::names of the parts' op list
  OpKind op = OpKind::AllReduce;
  vocab::Dtype dtype = vocab::Dtype::Mixed;
  vocab::RedOp redop = vocab::RedOp::None;
  bool filled = false;  // build_work_list: made from its signature
};

// 48 bytes, widest fields first: the checker holds one per op and host wait.
struct Item {
  int64_t event = 0;       // host waits and event records: the event
  uint32_t seq = 0;
  int32_t comm = -1;       // index into WorkList::comms
  int32_t stream = 0;      // index into ProcWork::streams
  int32_t thread = 0;      // index into SchedProcess::threads
  int32_t desc = -1;       // kOp items: index into WorkList::descs
  int32_t first_part = 0;  // into ProcWork::parts (p2p ops only)
  int32_t nparts = 0;
  int32_t op_index = -1;   // kOp items: index into SchedProcess::ops
  uint32_t group = 0;      // rows of one rank with the same group != 0 progress together; 0: none
  ItemKind kind = ItemKind::kOp;
  OpKind op = OpKind::AllReduce;  // kOp items only (also in its desc)
};
static_assert(sizeof(Item) == 48, "Item is the checker's per-op memory");

struct CommInfo {
  std::string label;          // name, or the first 8 hex digits of the hash
  std::string hash;
  int nranks = 0;
  std::vector<int32_t> members;  // process index for each comm rank (-1 = not in the trace)
  bool any_retired = false;      // some member's size cap retired collectives of it
};

struct ProcWork {
  std::string label;                       // "rank 3" (global rank) or the file name
  std::vector<uint64_t> streams;           // recorded stream values
  size_t nthreads = 0;
  // The communicators it is a member of, by WorkList comm index: its rank in each, and the
  // collectives the size cap retired before the first one in `items` (comms.retired_collectives).
  // Members align collectives by absolute ordinal; one that some member retired counts as
  // reached by it (its digest is checked by the analyzer, not here). Only its own: a table by
  // every communicator of the job would be ranks x communicators (16,384 x 2,057: 400 MB).
  struct Membership {
    int32_t comm = 0;
    int32_t rank = 0;
    int64_t retired = 0;
  };
  std::vector<Membership> member_of;  // sorted by comm
  // Index into member_of of `comm`, -1 when it is not a member.
  int32_t membership(int32_t comm) const {
    auto it = std::lower_bound(member_of.begin(), member_of.end(), comm,
                               [](const Membership& m, int32_t c) { return m.comm < c; });
    return it != member_of.end() && it->comm == comm ? static_cast<int32_t>(it - member_of.begin()) : -1;
  }
  int32_t comm_rank(int32_t comm) const {
    const int32_t k = membership(comm);
    return k < 0 ? -1 : member_of[k].rank;
  }
  int64_t retired_colls(int32_t comm) const {
    const int32_t k = membership(comm);
    return k < 0 ? 0 : member_of[k].retired;
  }
  std::vector<Item> items;                 // ops and waits, sorted by call_index
  std::vector<Part> parts;
  // A Flight Recorder dump: torch runs point-to-point ops on a communicator (and stream) per pair
  // of ranks, not the group's, and the dump does not say which; its sends and receives are not
  // queued behind the group's other ops (flightrec/to_model.cpp gives them streams per peer).
  bool p2p_outside_comm_order = false;
  // Its records stop being whole (a hole: dropped records, a stopped recorder) at an op of this
  // call_index: that call and every later one are unknown, not modelled. INT64_MAX: no hole.
  // A peer that waits for it waits for a record we do not have, not for one it never issued.
  int64_t cut_call = INT64_MAX;
  bool hole = false;         // some communicator's records of it stop being whole (cut or not)
  bool stopped = false;      // the job's end stopped it before it issued its peers' next op
                             // (Options::stopped_procs): what follows its schedule is unknown
  bool live = false;         // still running when read (Options::live_procs): its schedule so far
  bool end_unknown() const { return hole || stopped || live; }  // its schedule ends short of what it did
  std::string problems_cut;  // the problem line that says where and why
};

struct WorkList {
  std::vector<CommInfo> comms;
  std::vector<ProcWork> procs;
  std::vector<OpDesc> descs;               // by Schedule signature (Item::desc)
  std::vector<std::string> names;          // interned coalesced part lists
  std::vector<std::string> problems;       // input problems found while building (shown to user)
  int16_t intern(const std::string& s) {   // -1 for ""
    if (s.empty()) return -1;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == s) return static_cast<int16_t>(i);
    if (names.size() >= 32767) throw std::runtime_error("model: too many distinct coalesced part lists");
    names.push_back(s);
    return static_cast<int16_t>(names.size() - 1);
  }
};

// Throws std::runtime_error with a clear message when the schedule cannot be checked (no
// processes, a communicator whose members are missing from it...).
WorkList build_work_list(const Schedule& sched);

}  // namespace lockstep::model::detail
