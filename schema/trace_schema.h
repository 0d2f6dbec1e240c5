// The one definition of a lockstep trace file: the SQLite tables written by the recorder
// (interposer/) and read by the analyzer (analyzer/). Change a table => bump kSchemaVersion.
//
// One file per process: <LOCKSTEP_DIR>/<host>-<pid>.lockstep.sqlite
// Conventions (after Nsight Systems' export): integer nanoseconds, integer ids, one table per
// kind of event, a meta table with the schema version. Documented for users in docs/schema.md.
#pragma once

namespace lockstep::schema {

inline constexpr int kSchemaVersion = 3;
// The oldest schema the loader still reads (schema 1: one wide ops row per op, names as text,
// tables op_parts and completions; see docs/schema.md).
inline constexpr int kOldestReadableSchema = 1;
inline constexpr const char* kFileSuffix = ".lockstep.sqlite";
inline constexpr const char* kApplicationIdHex = "0x4C4B5354";  // 'LKST'
inline constexpr int kApplicationId = 0x4C4B5354;               // PRAGMA application_id
// PRAGMA user_version of a file the recorder writes: its content generation, random (1..2^31-1)
// from the header on and advanced (then 1 again after 2^31-1) by every commit that writes anything but the
// heartbeat (meta last_flush_mono_ns alone). 0: a file that says nothing of it (other writers,
// older recorders). It sits in the file's first page, where a reader finds it without SQLite.
inline constexpr int kUserVersionOffset = 60;  // big-endian, in SQLite's 100-byte header
// A live but idle recorder's heartbeat (meta last_flush_mono_ns alone) comes at least this long
// after the previous meta commit: k heartbeats span about k of these at most when they run on
// time (node summaries take a refreshed file's last flush forward by no more).
inline constexpr int64_t kHeartbeatMinIntervalNs = 1'000'000'000;

// Room the recorder keeps for its last words. When a write fails because the file hit its
// size limit (ulimit -f) or the disk filled, the meta rows that say so need pages the file
// cannot grow into: the recorder deletes this row first, and the rows reuse its pages.
// Not part of the trace's content; readers ignore it. 4 KiB = 4 overflow pages of 1 KiB freed:
// the stop rows (3 new meta rows and dropped_records) split at most a leaf of meta and one of
// its key index, 2 pages each at worst (a root split); measured: 2 (docs/schema.md).
inline constexpr const char* kStopReserveSql =
    "CREATE TABLE IF NOT EXISTS stop_reserve(pad BLOB);"
    "INSERT INTO stop_reserve VALUES(zeroblob(4096));";
inline constexpr const char* kReleaseStopReserveSql = "DELETE FROM stop_reserve";

// drops.reason: the queue refused the records / the recorder stopped there (its stop point).
inline constexpr const char* kDropQueueFull = "queue_full";
inline constexpr const char* kDropRecorderStopped = "recorder_stopped";
// Stop-point rows written at most (they must fit in the stop reserve's 4 KiB); a communicator
// beyond them has its stop point after the last seq its file holds, as readers assume.
inline constexpr int kMaxStopPointRows = 64;

// One row per logical operation: a single call outside a group, or everything one thread
// issued on one communicator between its outermost ncclGroupStart/ncclGroupEnd. Rows for ops
// that ran inside a CUDA-graph replay are written at each graph launch (state graph_launched,
// op_graph.origin_call = the captured row).
// Chunks (schema 3): the rows live in `op_rows` and, in a capped trace, in `op_rows_<k>`
// (k = 1, 2, ...): chunk k holds the call_index range just above chunk k-1's, so the chunks read
// in k order are in call_index order. The size cap (LOCKSTEP_MAX_MB) retires the oldest chunks
// whole: op_rows is emptied (it always exists), op_rows_<k> dropped; see comms.retired_*.
// The columns, one definition for every chunk:
//   call_index  INTEGER PRIMARY KEY  process-wide, increasing: order between communicators
//   sig         signatures.id
//   seq         per-communicator logical sequence number, from 1; NULL when the op enqueued
//               nothing (error, simulate, captured)
//   t           issue_mono_ns - meta op_time_base_mono_ns
//   ret         return_mono_ns - issue_mono_ns (NULL: unknown)
//   done        completion mono_ns - issue_mono_ns (NULL: not completed)
//   wall        issue_wall_ns - issue_mono_ns - meta op_wall_offset_ns
//   state       vocab::State (enqueued failed simulated captured graph_launched) + 16 x the
//               ncclResult_t returned to the caller (schema 2: a column `rc` of its own):
//               state = value & 15, rc = value >> 4; 0 for an enqueued op that returned
//               ncclSuccess, stored in no byte at all
//   group_id    process-wide id of the outermost group; NULL if none
inline constexpr const char* kOpRowsTable = "op_rows";
inline constexpr const char* kOpRowsColumns =
    "(call_index INTEGER PRIMARY KEY, sig INTEGER NOT NULL, seq INTEGER, t INTEGER NOT NULL, ret INTEGER, "
    "done INTEGER, wall INTEGER NOT NULL, state INTEGER NOT NULL, group_id INTEGER)";
// state = vocab::State + kOpRcShift-shifted rc (schema 3; schema 2 kept rc in its own column).
inline constexpr int kOpRcShift = 4;
// Every op row of a file, for sqlite3 users: a view over the chunks, rebuilt when they change.
inline constexpr const char* kOpRowsAllView = "op_rows_all";

// Executed by the writer when it creates a file. Readers check PRAGMA application_id and
// meta('schema_version') before trusting anything else.
inline constexpr const char* kCreateSql = R"SQL(
CREATE TABLE IF NOT EXISTS meta(
  key   TEXT PRIMARY KEY,
  value TEXT
);
-- Keys written once at open: schema_version, lockstep_version, host, pid, global_rank
-- (-1 if unknown), global_rank_source (RANK, SLURM_PROCID, ...), cmdline, exe,
-- nccl_version (int code), nccl_library (path of the libnccl actually mapped), cuda_driver_version,
-- stack_mode (none|native|python), start_wall_ns, start_mono_ns, journal_mode.
-- Keys updated later: last_flush_mono_ns, dropped_records, finished (1 on clean exit),
-- exit_reason (exit|abort|SIGTERM|SIGINT|SIGABRT|SIGHUP|SIGQUIT|SIGPIPE|SIGXFSZ|SIGALRM|SIGUSR2:
-- written only when the process ends: a signal the program handles leaves none).
-- Bounded traces: digest_version (op_digest.h kDigestVersion), checkpoint_interval (collectives
-- between checkpoints), max_mb (the cap, 0 = none), retired_ops (ops rows dropped by the cap).
-- Schema 2: op_time_base_mono_ns and op_wall_offset_ns (op_rows.t and op_rows.wall are relative
-- to them), digest_gaps (sequence numbers the digest skipped: records dropped before the
-- writer saw them).
-- Keys present only when the recorder stopped recording before the process ended (its history
-- after that is missing: readers treat the file as incomplete evidence):
-- recorder_stopped (disk_full|file_size_limit|io_error|read_only|unwritable|internal),
-- recorder_stopped_detail (free text, for humans only), recorder_stopped_mono_ns.

CREATE TABLE IF NOT EXISTS env(
  name  TEXT PRIMARY KEY,   -- every NCCL_*, TORCH_NCCL_*, CUDA_* variable, plus LOCKSTEP_*
  value TEXT
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS comms(
  id            INTEGER PRIMARY KEY,  -- local to this file
  comm_hash     TEXT NOT NULL,        -- 16 hex digits, equal on every member (hash of the
                                      -- ncclUniqueId; for split/shrink: of parent hash,
                                      -- parent split counter and color)
  handle        INTEGER NOT NULL,     -- ncclComm_t value (reused after destroy; id is not)
  nranks        INTEGER NOT NULL,
  rank          INTEGER NOT NULL,     -- this process's rank in the communicator
  cuda_device   INTEGER,              -- NULL when unknown
  parent_id     INTEGER,              -- comms.id of the parent for split/shrink
  split_color   INTEGER,
  split_key     INTEGER,
  name          TEXT,                 -- ncclConfig_t.commName when given
  init_call     INTEGER NOT NULL,     -- process-wide call index of the creating call
  init_mono_ns  INTEGER NOT NULL,
  init_rc       INTEGER NOT NULL,     -- ncclResult_t of the creating call
  end_kind      TEXT,                 -- destroy | abort | finalize | revoke, NULL while alive
  end_call      INTEGER,
  end_mono_ns   INTEGER,
  -- Bounded traces (LOCKSTEP_MAX_MB): what the size cap has retired from this communicator's
  -- history, so that the retained ops can be verified against the checkpoints. 0 when nothing.
  retired_collectives INTEGER NOT NULL DEFAULT 0,  -- collective ordinal of the last retired one
  retired_digest      INTEGER NOT NULL DEFAULT 0,  -- op_digest.h chain after that many collectives
  retired_through_seq INTEGER NOT NULL DEFAULT 0,  -- ops.seq of the last retired op (any kind)
  -- 1: the recorder first saw this communicator in use (it was created before tracing began):
  -- its identity (comm_hash, per process) cannot be matched with the other members'.
  created_before_tracing INTEGER NOT NULL DEFAULT 0
);

-- The running digest of each communicator's collective sequence (schema/op_digest.h), written
-- after every meta('checkpoint_interval')-th collective and never retired: history that the size
-- cap dropped is still verifiable across members up to a checkpoint interval.
CREATE TABLE IF NOT EXISTS checkpoints(
  comm_id       INTEGER NOT NULL REFERENCES comms(id),
  ordinal       INTEGER NOT NULL,     -- k: 1-based collective ordinal, k % interval == 0
  seq           INTEGER NOT NULL,     -- ops.seq of the k-th collective
  digest        INTEGER NOT NULL,     -- digest after k collectives (uint64 stored as int64)
  -- The process's order digest (op_digest.h order_step) after its order_count-th collective of
  -- any communicator, this one; NULL when the recorder did not see every collective up to it in
  -- call_index order (then no later checkpoint of the file has one either). Files written
  -- before these columns existed lack them: the order is unknown there.
  order_count   INTEGER,
  order_digest  INTEGER,
  PRIMARY KEY(comm_id, ordinal)
) WITHOUT ROWID;

-- Schema 2: an op is stored as its invariant description, interned once in `signatures`, plus
-- one small op row (kOpRowsColumns above) per op with only what changes. Integers for every enumerated value
-- (schema/vocab.h: the enum's value), times relative to meta op_time_base_mono_ns. The views
-- ops, op_parts and completions (trace_file.cpp views_sql) show the rows as schema 1 did, with
-- names: `sqlite3 trace.sqlite 'SELECT * FROM ops'` reads the same columns as before.
CREATE TABLE IF NOT EXISTS signatures(
  id            INTEGER PRIMARY KEY,
  comm_id       INTEGER NOT NULL REFERENCES comms(id),
  op            INTEGER NOT NULL,     -- vocab::Op
  dtype         INTEGER,              -- vocab::Dtype (= ncclDataType_t); NULL if mixed
  count         INTEGER,              -- as ops.count of schema 1 (see docs/schema.md)
  root          INTEGER,              -- NULL if none
  peer          INTEGER,              -- NULL if none
  redop         INTEGER,              -- vocab::RedOp; NULL if none
  stream        INTEGER,              -- cudaStream_t value
  tid           INTEGER NOT NULL,
  thread_name   TEXT,
  stack_id      INTEGER REFERENCES stacks(id),  -- NULL when stacks are off
  nparts        INTEGER NOT NULL DEFAULT 0,     -- rows in signature_parts
  hash          INTEGER NOT NULL      -- op_digest.h signature_hash (uint64 stored as int64)
);

-- The NCCL calls that make up a grouped logical op (all_to_all, send_recv, coalesced), in
-- issue order. A single ungrouped call has none.
CREATE TABLE IF NOT EXISTS signature_parts(
  sig_id        INTEGER NOT NULL REFERENCES signatures(id),
  part          INTEGER NOT NULL,     -- 0, 1, ... in issue order
  op            INTEGER NOT NULL,     -- vocab::Op of one NCCL call
  dtype         INTEGER,
  count         INTEGER,
  root          INTEGER,
  peer          INTEGER,
  redop         INTEGER,
  PRIMARY KEY(sig_id, part)
) WITHOUT ROWID;

-- CUDA-graph columns of an op row, only for rows that have one (captured, graph_launched).
CREATE TABLE IF NOT EXISTS op_graph(
  call_index    INTEGER PRIMARY KEY,  -- op_rows.call_index
  capture_id    INTEGER,              -- CUDA capture id when the stream was capturing
  graph_id      INTEGER,              -- CUgraph value being captured into
  origin_call   INTEGER,              -- graph_launched rows: call_index of the captured op
  graph_exec    INTEGER               -- graph_launched rows: cudaGraphExec_t value
);

CREATE TABLE IF NOT EXISTS stacks(
  id            INTEGER PRIMARY KEY,
  hash          TEXT NOT NULL         -- 16 hex digits over native pcs and python frames (the
                                      -- writer interns them: one row per hash)
);

CREATE TABLE IF NOT EXISTS frames(
  stack_id      INTEGER NOT NULL REFERENCES stacks(id),
  depth         INTEGER NOT NULL,     -- 0 = innermost; python frames are listed after native
  kind          TEXT NOT NULL,        -- native | python
  function      TEXT,                 -- demangled native symbol or python function (qualname)
  module        TEXT,                 -- native: shared object path
  offset        INTEGER,              -- native: pc - module load base (offline symbolization)
  file          TEXT,                 -- python: source file
  line          INTEGER,              -- python: line number
  PRIMARY KEY(stack_id, depth)
) WITHOUT ROWID;

-- cudaGraphLaunch seen by the recorder (each replay of a captured graph).
CREATE TABLE IF NOT EXISTS graph_launches(
  call_index    INTEGER PRIMARY KEY,  -- shares the process-wide call counter with ops
  graph_exec    INTEGER NOT NULL,
  graph_id      INTEGER,              -- CUgraph it was instantiated from, if seen
  stream        INTEGER,
  mono_ns       INTEGER NOT NULL
);

-- Host-side waits that order work across streams/communicators (where cheaply hooked).
CREATE TABLE IF NOT EXISTS waits(
  call_index    INTEGER PRIMARY KEY,  -- shares the process-wide call counter with ops
  kind          TEXT NOT NULL,        -- stream_sync | event_sync | device_sync | stream_wait_event
                                      -- | event_record
  stream        INTEGER,
  event         INTEGER,
  tid           INTEGER NOT NULL,
  begin_mono_ns INTEGER NOT NULL,
  end_mono_ns   INTEGER
);

-- Calls outside the op sequence: comm init/split/destroy results, registration, async errors.
CREATE TABLE IF NOT EXISTS api_calls(
  call_index    INTEGER PRIMARY KEY,
  name          TEXT NOT NULL,        -- ncclCommRegister, ncclCommGetAsyncError, ...
  comm_id       INTEGER,
  rc            INTEGER NOT NULL,
  detail        TEXT,
  mono_ns       INTEGER NOT NULL
);

-- Written when the watchdog sees ops in flight and no completion for LOCKSTEP_HANG_TIMEOUT s.
CREATE TABLE IF NOT EXISTS hangs(
  id            INTEGER PRIMARY KEY,
  mono_ns       INTEGER NOT NULL,
  wall_ns       INTEGER NOT NULL,
  in_flight     INTEGER NOT NULL,     -- number of ops enqueued and not completed
  message       TEXT NOT NULL         -- the line printed to stderr
);

-- Records the recorder's queue refused (it was full): an op row is dropped together with its
-- part rows, never apart. One row per run of consecutive seqs of one communicator dropped in
-- one commit interval (a longer run spans rows: readers merge them). comm_id and the seqs are
-- NULL for records without a seq (failed or captured ops, waits, API calls, completions).
-- A file without this table (written before it existed) says only meta dropped_records.
-- When the recorder stops (meta recorder_stopped) it adds its stop point, one row per
-- communicator (at most kMaxStopPointRows): reason recorder_stopped, first_seq the first seq
-- it did not commit, last_seq NULL (open: every later seq is missing too), records 0.
CREATE TABLE IF NOT EXISTS drops(
  comm_id       INTEGER,              -- comms.id
  first_seq     INTEGER,
  last_seq      INTEGER,
  records       INTEGER NOT NULL,     -- records refused (an op and its parts count 1 + parts)
  reason        TEXT NOT NULL         -- kDropQueueFull or kDropRecorderStopped
);
)SQL";

// Extra tables of other components (e.g. schema/profiler_schema.h) are created by their owners
// after this DDL.

// ops.state and the other enumerated columns: schema/vocab.h.

}  // namespace lockstep::schema
