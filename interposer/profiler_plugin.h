// liblockstep as NCCL's profiler plugin (NCCL_PROFILER_PLUGIN=/path/liblockstep.so): the exported
// struct ncclProfiler_v5 (interface: nccl_profiler/profiler_v5.h, NCCL 2.28). NCCL calls it
// whatever way the program reached NCCL (a static copy, a private loader), so it sees ops the
// interposer's hooks cannot. What it records and how precisely: docs/recorder.md, "NCCL's
// profiler plugin"; tables: schema/profiler_schema.h.
//
// Per NCCL API call (CollApi / P2pApi event, on the calling thread): one profiler_ops row saying
// whether the interposer recorded the call too (it ran inside a lockstep hook: seen_by both) or
// not (seen_by plugin). Calls only the plugin saw are also folded per group and communicator and
// written as ops rows, with what the plugin knows (no reduction op: NULL).
//
// NCCL's behaviour never changes: every entry point returns success, never blocks (a full queue
// drops the row and counts it), allocates nothing per event beyond a bounded per-thread group
// buffer, and a failed trace only makes it inert.
#pragma once

#include <sqlite3.h>

namespace lockstep::rec {

// Writer thread, inside each commit's transaction: inserts the plugin's queued rows (a no-op
// when NCCL never loaded the plugin). False when an insert failed (the writer's error path).
bool profiler_commit_rows(sqlite3* db) noexcept;

}  // namespace lockstep::rec
