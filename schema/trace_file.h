// The trace file, written once: the one RAII SQLite wrapper (Db, Stmt; the readers use it too:
// the loader, schedule_waits, the plugin-coverage reader), the schema-2 DDL and its views, the
// column lists, and typed inserts. Every writer of trace files uses it: the recorder's writer
// thread (interposer/writer.cpp), the Flight Recorder converter, shrink, the test builders and
// bench/gen_trace. The encoding of an op row (schema/trace_schema.h, docs/schema.md) lives
// only in Tables::insert_op; the loader (analyzer/trace_loader.cpp) is its inverse.
//
// No exceptions on the recorder's paths: every call that touches SQLite returns its result code
// (or bool); Db::check() turns one into an exception for the offline writers, and the loader's
// Query turns one into a skip reason.
#pragma once

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "op_digest.h"
#include "trace_schema.h"
#include "vocab.h"

namespace lockstep::trace_file {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Stmt {
 public:
  Stmt() = default;
  Stmt(sqlite3* db, const char* sql, bool persistent = true);
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(Stmt&& o) noexcept : st_(o.st_) { o.st_ = nullptr; }
  Stmt& operator=(Stmt&& o) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool ok() const { return st_ != nullptr; }
  sqlite3_stmt* get() const { return st_; }
  // Let go without finalizing: a forked child's copy of a statement of its parent's connection
  // (that connection, copied while another thread may have held its mutex, is not the child's).
  void abandon() { st_ = nullptr; }
  Stmt& i64(int c, int64_t v) { sqlite3_bind_int64(st_, c, v); return *this; }
  // NULL when v == null_value (the records' convention: -1 or 0 stands for NULL).
  Stmt& opt(int c, int64_t v, int64_t null_value = -1) {
    if (v == null_value) sqlite3_bind_null(st_, c);
    else sqlite3_bind_int64(st_, c, v);
    return *this;
  }
  Stmt& null(int c) { sqlite3_bind_null(st_, c); return *this; }
  // Empty = NULL. Copied (SQLITE_TRANSIENT): callers may pass temporaries.
  Stmt& text(int c, std::string_view v) {
    if (v.empty()) sqlite3_bind_null(st_, c);
    else sqlite3_bind_text(st_, c, v.data(), int(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // Steps once and resets (a statement left active keeps the pager in its error state).
  // Returns SQLITE_DONE on success, else the failing result code.
  int run();
  // One row of a query: SQLITE_ROW, SQLITE_DONE, or an error code. The caller resets.
  int step() { return sqlite3_step(st_); }
  void reset() { sqlite3_reset(st_); }

  // Columns of the current row. Text is borrowed until the next step; NULL reads as "".
  bool is_null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
  bool is_text(int c) const { return sqlite3_column_type(st_, c) == SQLITE_TEXT; }
  int64_t column_i64(int c) const { return sqlite3_column_int64(st_, c); }
  std::string_view column_text(int c) const {
    const unsigned char* t = sqlite3_column_text(st_, c);
    return t ? std::string_view(reinterpret_cast<const char*>(t), size_t(sqlite3_column_bytes(st_, c)))
             : std::string_view();
  }

 private:
  sqlite3_stmt* st_ = nullptr;
};

struct ReadBudget;

class Db {
 public:
  Db();
  ~Db();
  Db(Db&& o) noexcept;
  Db& operator=(Db&& o) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // SQLITE_OK or the error code (the handle is kept open for sqlite3_errmsg when there is one).
  int open(const std::string& path, int flags, const char* vfs = nullptr);
  void close();
  sqlite3* get() const { return db_; }
  explicit operator bool() const { return db_ != nullptr; }
  void busy_timeout(int ms) { sqlite3_busy_timeout(db_, ms); }
  int exec(const char* sql);
  int exec(const std::string& sql) { return exec(sql.c_str()); }
  std::string errmsg() const { return db_ ? sqlite3_errmsg(db_) : "out of memory"; }
  // Offline writers: throws Error("<what>: <sqlite message>") unless rc is OK/DONE/ROW.
  void check(int rc, const std::string& what) const;
  // One integer from a query (PRAGMA page_count, ...); dflt when it yields nothing.
  int64_t scalar(const char* sql, int64_t dflt = 0);

  // Opens a file that may have been written by anyone (every reader of trace files opens them
  // so: the loader, the plugin-coverage reader, the recorder's reads of its peers' files).
  // Read-only unless `flags` say otherwise (the loader's rollback copy), and whatever the bytes:
  // no extension loading, trusted_schema off (no function with side effects from the file's
  // SQL), defensive mode, views and triggers disabled (a view can loop forever or build blobs
  // without end), no string or blob over kMaxValueBytes, and a progress handler that interrupts
  // the connection after a number of VM steps linear in the file's size (SQLITE_INTERRUPT:
  // budget_exhausted() says why). SQLITE_OK or the error code, like open(). Read-only with
  // read_ahead: through read_ahead_vfs() (a window of 256 KiB a system call), for a reader of
  // most of the file; without, a page a system call (a few ops' details of many files).
  // known_bytes: the file's size from the caller's own stat (-1: stat it here), which sizes the
  // step budget.
  int open_untrusted(const std::string& path, int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, bool read_ahead = true,
                     int64_t known_bytes = -1);
  // The connection's queries ran past their step budget (the last error is SQLITE_INTERRUPT).
  bool budget_exhausted() const;

 private:
  sqlite3* db_ = nullptr;
  std::unique_ptr<ReadBudget> budget_;
};

// The largest string or blob a reader accepts from a trace (SQLITE_LIMIT_LENGTH): far above
// anything the writers store (a frame name, a node list, a hang message), far below a blob that
// would exhaust a reader's memory.
inline constexpr int kMaxValueBytes = 16 << 20;

// The objects a reader reads, checked before any of them is read: each one the file has must be
// an ordinary table (not a view, not a virtual table) with no trigger attached. `schema_version`:
// the file's (schema 1 stores ops, op_parts and completions as tables; later schemas as views,
// which no reader reads). "" when the file passes, else the reason, naming the object.
std::string unsafe_object(sqlite3* db, int64_t schema_version);

// A file's sqlite_schema, read once: each object as stored (type, name, tbl_name, sql). The
// loader reads it once a file and answers every "which tables" question from it.
struct SchemaObject {
  std::string type, name, tbl_name, sql;
};
struct FileSchema {
  std::vector<SchemaObject> objects;
  // An object of type 'table' named exactly `name` (sqlite_schema's own comparison).
  bool has_table(std::string_view name) const;
};
// SQLITE_OK and `out` filled, or the failing result code (sqlite3_errmsg says why).
int read_schema(sqlite3* db, FileSchema& out);
// unsafe_object over a schema read before; `db` is asked only about a table whose SQL could
// declare a generated column.
std::string unsafe_object(sqlite3* db, const FileSchema& schema, int64_t schema_version);

// ---- the rows ---------------------------------------------------------------------------------
// Fields map to schema/trace_schema.h columns; -1 (or 0 where noted) stands for SQL NULL.

// What one NCCL call, or a logical op, does: the fields of its cross-rank signature.
struct CallFields {
  vocab::Op op = vocab::Op::AllReduce;
  vocab::Dtype dtype = vocab::Dtype::Mixed;  // Mixed = NULL
  int64_t count = 0;
  int32_t root = -1, peer = -1;
  vocab::RedOp redop = vocab::RedOp::None;   // None = NULL
  digest::Part digest_part() const { return {op, dtype, count, root, peer, redop}; }
};

// op_digest.h signature_hash of an op and its parts.
uint64_t signature_hash(const CallFields& op, const CallFields* parts, size_t nparts);

// The invariant description of an op, interned once per distinct value (schema 2).
struct SignatureRow : CallFields {
  int64_t id = 0;
  int64_t comm_id = 0;
  uint64_t stream = 0;
  int64_t tid = 0;
  std::string_view thread_name;              // "" = NULL
  int64_t stack_id = -1;
  int32_t nparts = 0;
  uint64_t hash = 0;                         // op_digest.h signature_hash (cross-rank part)
};

struct PartRow : CallFields {
  int64_t sig_id = 0;
  int32_t part = 0;
  PartRow() { op = vocab::Op::Send; }
  PartRow(int64_t sig, int32_t index, const CallFields& call) : CallFields(call), sig_id(sig), part(index) {}
};

// What changes from one op to the next. Absolute times here; insert_op encodes them.
struct OpRow {
  int64_t call_index = 0;
  int64_t sig = 0;
  int64_t seq = 0;               // 0 = NULL (unsequenced)
  int64_t issue_mono_ns = 0;
  int64_t issue_wall_ns = 0;
  int64_t return_mono_ns = 0;    // 0 = NULL
  bool completed = false;        // false: done is NULL (not completed, or not yet)
  int64_t complete_mono_ns = 0;
  vocab::State state = vocab::State::Enqueued;
  int32_t rc = 0;
  int64_t group_id = -1;
  // graph columns, in op_graph (only rows that have one of them)
  uint64_t capture_id = 0, graph_id = 0, graph_exec = 0;  // 0 = NULL
  int64_t origin_call = -1;
};

struct CommRow {
  int64_t id = 0;
  std::string_view hash;
  uint64_t handle = 0;
  int32_t nranks = 0, rank = 0;
  int32_t cuda_device = -1;
  int64_t parent_id = -1;
  bool has_split = false;
  int32_t split_color = 0, split_key = 0;
  std::string_view name;
  int64_t init_call = 0, init_mono_ns = 0;
  int32_t init_rc = 0;
  vocab::CommEnd end = vocab::CommEnd::Alive;  // offline writers: the end, if known
  bool created_before_tracing = false;          // the recorder met it without seeing its creation
};

struct FrameRow {
  int64_t stack_id = 0;
  int32_t depth = 0;
  vocab::FrameKind kind = vocab::FrameKind::Native;
  std::string_view function, module;
  int64_t offset = -1;           // -1 = NULL
  std::string_view file;
  int32_t line = -1;             // -1 = NULL
};

struct WaitRow {
  int64_t call_index = 0;
  vocab::Wait kind = vocab::Wait::StreamSync;
  uint64_t stream = 0;
  uint64_t event = 0;            // 0 = NULL
  int64_t tid = 0;
  int64_t begin_mono_ns = 0;
  int64_t end_mono_ns = -1;      // -1 = NULL
};

struct CheckpointRow {
  int64_t comm_id = 0, ordinal = 0, seq = 0;
  uint64_t digest = 0;
  int64_t order_count = 0;    // 0: no order digest (NULL columns)
  uint64_t order_digest = 0;
};

// ---- creating a file --------------------------------------------------------------------------

struct CreateOptions {
  const char* vfs = nullptr;            // the recorder's write_errno_vfs
  std::string journal_mode = "truncate";
  std::string synchronous = "OFF";
  int busy_timeout_ms = 0;
  // Op times are stored relative to these (meta op_time_base_mono_ns, op_wall_offset_ns):
  // the process's start, so that a row's issue time is small and its wall time a drift.
  int64_t time_base_mono_ns = 0;
  int64_t wall_offset_ns = 0;           // start_wall_ns - start_mono_ns
  // The caller claimed `path` itself: an empty file it created with O_EXCL (the recorder's
  // claim_trace_path), of this device and inode. It is kept, not unlinked, opened without
  // following a symbolic link, and checked to be that file still before anything is written: a
  // name swapped in between (a link planted by whoever can write the directory) cannot move
  // where the trace is written. Its side files are the caller's too (none, or an empty journal
  // it created): left as they are.
  bool claimed = false;
  uint64_t claimed_dev = 0, claimed_ino = 0;
};

// Unlinks any old file (and its journal), creates `path` with the application id, pragmas,
// tables, views and the meta rows schema_version, op_time_base_mono_ns, op_wall_offset_ns.
// SQLITE_OK, or the failing code with `*what` naming the step (the Db stays open for errmsg).
int create(Db& db, const std::string& path, const CreateOptions& options, const char** what);

// The views that show schema-2 rows as schema-1 tables (ops, op_parts, completions) with names,
// for `sqlite3 trace.sqlite 'select ...'` users and SQL readers written for schema 1. They read
// the op rows through the view op_rows_all (chunk_views_sql).
std::string views_sql(int64_t time_base_mono_ns, int64_t wall_offset_ns);
// op_rows_all over these chunk tables and the completions_delete trigger, replacing the old ones.
std::string chunk_views_sql(const std::vector<std::string>& chunk_tables);
// The SELECTs behind those views, for readers that must not trust SQL stored in a file (the
// loader reads an untrusted trace through these, never through the file's own views). `rows` is
// a FROM source with every op row: op_rows_source().
// `schema`: the file's version (2 keeps rc in a column of its own, 3 packs it into state).
std::string ops_select(int64_t time_base_mono_ns, int64_t wall_offset_ns, const std::string& rows = "op_rows",
                       int schema = schema::kSchemaVersion);
std::string op_parts_select(const std::string& rows = "op_rows");
std::string completions_select(int64_t time_base_mono_ns, const std::string& rows = "op_rows");

// The op row tables (trace_schema.h kOpRowsColumns): "op_rows" for chunk 0, "op_rows_<k>" after.
std::string op_chunk_table(int64_t k);
// A file's op row tables in chunk order (so in call_index order), from sqlite_schema: op_rows
// (schema 2 has no other) and every table named op_rows_<k>, k >= 1 written without leading
// zeros. Empty when the query fails.
std::vector<std::string> op_chunk_tables(sqlite3* db);
std::vector<std::string> op_chunk_tables(const FileSchema& schema);
// A FROM source with every row of those tables: the table, or a UNION ALL subquery.
std::string op_rows_source(const std::vector<std::string>& chunk_tables);

// Prepared inserts for every table, each returning SQLITE_DONE or the failing code.
class Tables {
 public:
  // SQLITE_OK or the code of the statement that did not prepare.
  int prepare(sqlite3* db, int64_t time_base_mono_ns, int64_t wall_offset_ns);

  int meta(std::string_view key, std::string_view value);
  int env(std::string_view name, std::string_view value);
  int comm(const CommRow& c);
  int comm_end(int64_t id, vocab::CommEnd kind, int64_t call_index, int64_t mono_ns);
  int signature(const SignatureRow& s);
  int part(const PartRow& p);
  // Written into the chunk whose call_index range holds o.call_index; a row at or below the
  // retired range (retired_through_call) is not written (SQLITE_DONE): its chunk is gone.
  int op(const OpRow& o);
  // A completion that arrived after its op row was written; *found: the row was there.
  int complete(int64_t call_index, int64_t complete_mono_ns, bool* found = nullptr);

  // Chunks of op rows (trace_schema.h), for the size cap. Ends the open chunk at `last_call`
  // (rows above it go to a new table op_rows_<k>). In a transaction.
  int close_op_chunk(int64_t last_call);
  // op_rows_all and the completions trigger follow the chunks once per call (close and retire
  // only mark them stale: rebuilding them is a schema change). Call before committing.
  int sync_chunk_views();
  // Retires every chunk that ends at or below `through_call` (never the open one): op_rows is
  // emptied, op_rows_<k> dropped; one operation per chunk, no per-row delete. *rows: the rows
  // they held. Rows that arrive later at or below the bound are not written.
  int retire_op_chunks(int64_t through_call, int64_t* rows);
  int64_t retired_through_call() const { return retired_through_; }
  size_t op_chunks() const { return chunks_.size(); }
  int stack(int64_t id, std::string_view hash_hex);
  int frame(const FrameRow& f);
  int graph_launch(int64_t call_index, uint64_t exec, uint64_t graph, uint64_t stream, int64_t mono_ns);
  int wait(const WaitRow& w);
  int api(int64_t call_index, std::string_view name, int64_t comm_id, int32_t rc, std::string_view detail,
          int64_t mono_ns);
  int hang(int64_t mono_ns, int64_t wall_ns, int32_t in_flight, std::string_view message);
  int checkpoint(const CheckpointRow& c);
  // The order digest of a checkpoint already written (op_digest.h order_step).
  int checkpoint_order(int64_t comm_id, int64_t ordinal, int64_t order_count, uint64_t order_digest);
  // Records the queue refused (trace_schema.h drops): comm_id -1 and seqs <= 0 are NULL.
  int drop(int64_t comm_id, int64_t first_seq, int64_t last_seq, int64_t records, std::string_view reason);

 private:
  struct Chunk {
    int64_t k = 0;
    int64_t last_call = INT64_MAX;  // the open chunk: no upper bound
    int64_t rows = 0;
    Stmt insert, complete;          // prepared on first use
  };
  Chunk* chunk_for(int64_t call_index);
  bool views_stale_ = false;

  sqlite3* db_ = nullptr;
  int64_t base_ = 0, wall_offset_ = 0;
  std::deque<Chunk> chunks_;
  int64_t retired_through_ = INT64_MIN;
  Stmt meta_, env_, comm_, comm_end_, sig_, part_, op_graph_, stack_, frame_, launch_, wait_, api_, hang_,
      checkpoint_, checkpoint_order_, drop_;
};

// SQL without its comments and with runs of blanks folded (what create() stores of the DDL).
std::string compact_sql(std::string_view sql);

// "%016llx": the on-disk form of comm and stack hashes.
std::string hex16(uint64_t v);

// ---- reading: the primitives the loader (analyzer/trace_loader) shares with the recorder -----
// The loader is the one reader of trace files; what the recorder's in-job diagnosis
// (interposer/hang_report.cpp) reads of its peers' files goes through these, so that the two
// agree on what a meta value says.

// An integer a trace stores as text (meta values): base 10, an optional '-', digits and nothing
// else (no blanks, no '+'). The one parser of them; it never throws.
struct TextInt {
  enum Kind : uint8_t { kAbsent, kMalformed, kOutOfRange, kValue };
  Kind kind = kAbsent;
  int64_t value = 0;  // kValue: the value; kOutOfRange: the int64 bound it passes
  // The value; the bound it passes when out of int64's range; `dflt` when absent or malformed.
  bool integer() const { return kind == kValue || kind == kOutOfRange; }
  int64_t or_default(int64_t dflt) const { return integer() ? value : dflt; }
};
TextInt parse_int(std::string_view text);

// A process's global rank from its meta value: -1 (unknown) when absent or not an integer; a value
// outside int's range saturates (INT32_MIN / INT32_MAX), so that validation names it as out of
// range instead of reading a wrapped rank.
int global_rank_from_meta(std::string_view value);

// One meta value of an open file; false when the file has no meta table or no such key (NULL
// reads as absent).
bool read_meta_value(sqlite3* db, const char* key, std::string* value);

// The global rank `path` records (global_rank_from_meta), read-only with a busy timeout; -1 when
// the file cannot be read or records none.
int read_global_rank(const std::string& path, int busy_timeout_ms);

}  // namespace lockstep::trace_file
