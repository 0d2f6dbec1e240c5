// A rank's recorded schedule as the replay needs it, and the --order-from transformation.
#pragma once

#include <string>
#include <vector>

#include "schedule.h"
#include "trace_model.h"

namespace lockstep::replay {

// One rank's schedule: its whole process file as the loader reads it (ops, parts, waits,
// NOCOLOR splits, Comm::shrunk / created_before_tracing).
struct RankSchedule {
  Process proc;
};

// Loads one process file completely. Throws std::runtime_error.
RankSchedule load_rank_schedule(const std::string& path);

// Ops the replay issues (and the model checks): state enqueued or graph_launched.
bool replayable(const Op& op);

// --order-from: reorders mine's ops so that their sequence of (comm role, op kind) follows
// source's, roles by structure (structural_comm_roles, identity.h: the same on every rank
// playing the same part, even when the communicators' names differ). Units are single ops or whole groups (rows sharing group_id); the j-th unit of
// source with key K is replaced by mine's j-th unit with key K; mine's units that source does
// not have keep their relative order at the end. Mine's ops get mine's own call indices, in
// the new order; host waits are dropped (they refer to the old order). Returns how many units
// moved.
int reorder_like(RankSchedule& mine, const RankSchedule& source);
// The same on the compact schedule (replay --model --order-from): mine's ops in the new order
// with their side data (threads, groups, overflow streams); its host waits dropped. Needs the
// schedule's side data (LoadOptions::host_waits). Throws std::runtime_error without it.
int reorder_like(SchedProcess& mine, const SchedProcess& source, const std::vector<Signature>& sigs);

}  // namespace lockstep::replay
