// The tables liblockstep writes as NCCL's profiler plugin (interposer/profiler_plugin.cpp), read
// by the coverage report (analyzer/coverage.cpp). Created when NCCL loads liblockstep as its
// plugin (absent otherwise, schema 3; empty in earlier files); documented for users in docs/recorder.md, "NCCL's
// profiler plugin". Ops that only the plugin saw also get an ops row (and comms row) of
// trace_schema.h, so every analysis reads them like the interposer's.
#pragma once

namespace lockstep::schema {

inline constexpr const char* kProfilerCreateSql = R"SQL(
-- One row per communicator NCCL announced to the plugin (ncclProfiler_v5.init).
CREATE TABLE IF NOT EXISTS profiler_comms(
  id              INTEGER PRIMARY KEY,  -- local to this file
  nccl_comm_hash  TEXT NOT NULL,        -- 16 hex digits: NCCL's comm->commHash (init's commId),
                                        -- equal on every member; not comms.comm_hash
  name            TEXT,                 -- commName given to init (ncclConfig_t.commName)
  nranks          INTEGER NOT NULL,
  rank            INTEGER NOT NULL,
  nnodes          INTEGER NOT NULL,
  comm_id         INTEGER,              -- comms.id of the row the plugin wrote for the ops only
                                        -- it saw (comm_hash = nccl_comm_hash); NULL if none
  init_mono_ns    INTEGER NOT NULL,
  finalize_mono_ns INTEGER              -- NULL while alive
);

-- One row per NCCL API call the plugin saw (a CollApi or P2pApi event), in issue order.
CREATE TABLE IF NOT EXISTS profiler_ops(
  id              INTEGER PRIMARY KEY,  -- process-wide, increasing in issue order
  profiler_comm   INTEGER NOT NULL REFERENCES profiler_comms(id),
  nccl_func       TEXT NOT NULL,        -- NCCL's name: AllReduce, Send, Recv, ...
  op              TEXT,                 -- as ops.op (all_reduce, send, ...); NULL if not one
  dtype           TEXT,                 -- as ops.dtype; NULL if not one
  count           INTEGER NOT NULL,     -- as passed to the API call
  root            INTEGER,              -- rooted collectives only
  peer            INTEGER,              -- send/recv: NULL when NCCL had not reported it (its P2p
                                        -- event) by the end of the call's group
  stream          INTEGER,
  graph_captured  INTEGER NOT NULL,     -- 1: issued during CUDA-graph capture
  nccl_seq        INTEGER,              -- NCCL's coll.seqNumber: counted per communicator AND
                                        -- per collective type, from 0; NULL for p2p or unknown
  tid             INTEGER NOT NULL,
  mono_ns         INTEGER NOT NULL,     -- CLOCK_MONOTONIC at the API event
  seen_by         TEXT NOT NULL,        -- both: the interposer recorded the call too (it ran
                                        -- inside a lockstep hook) | plugin: only the plugin
  call_index      INTEGER               -- seen_by plugin: ops.call_index of the row the plugin
                                        -- wrote (a grouped call shares its group's row)
);
)SQL";

// profiler_ops.seen_by values
inline constexpr const char* kSeenByBoth = "both";
inline constexpr const char* kSeenByPlugin = "plugin";

// meta keys written by the plugin: profiler_plugin (the struct NCCL loaded: ncclProfiler_v5),
// profiler_dropped (profiler rows refused by a full queue; absent when none).

}  // namespace lockstep::schema
