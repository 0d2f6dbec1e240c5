// A rank's recorded schedule as the replay needs it, and the --order-from transformation.
#pragma once

#include <string>
#include <vector>

#include "trace_model.h"

namespace lockstep::replay {

// An ncclCommSplit call that created no communicator (NCCL_SPLIT_NOCOLOR): the recorder keeps it
// in api_calls, not in comms, but the other members of the parent still wait for it.
struct NoColorSplit {
  int64_t call_index = 0;
  int parent = -1;  // index into Process::comms
};

struct RankSchedule {
  Process proc;
  std::vector<NoColorSplit> nocolor;
  std::vector<int> shrunk;  // communicators created by ncclCommShrink (index into proc.comms)
};

// Reads the NOCOLOR splits of p from its file (p.path). Throws std::runtime_error.
std::vector<NoColorSplit> load_nocolor_splits(const Process& p);
// Communicators of p created by ncclCommShrink (parent set, no split color in the file).
std::vector<int> load_shrunk_comms(const Process& p);

// Loads one process file completely (ops, parts, waits, NOCOLOR splits). Throws.
RankSchedule load_rank_schedule(const std::string& path);

// A name for each communicator of the rank (index = Process::comms) that is the same on every
// rank playing the same part, even when the communicators differ (TP group 0 vs TP group 1):
// "root#i" for the i-th communicator created from a unique id, "<parent>/split#k" for the one
// created by the k-th ncclCommSplit call on the parent (NOCOLOR calls count).
std::vector<std::string> comm_roles(const RankSchedule& r);

// Ops the replay issues (and the model checks): state enqueued or graph_launched.
bool replayable(const Op& op);

// --order-from: reorders mine's ops so that their sequence of (comm role, op kind) follows
// source's. Units are single ops or whole groups (rows sharing group_id); the j-th unit of
// source with key K is replaced by mine's j-th unit with key K; mine's units that source does
// not have keep their relative order at the end. Mine's ops get mine's own call indices, in
// the new order; host waits are dropped (they refer to the old order). Returns how many units
// moved.
int reorder_like(RankSchedule& mine, const RankSchedule& source);

}  // namespace lockstep::replay
