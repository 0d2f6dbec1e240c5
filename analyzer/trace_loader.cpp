#include "trace_loader.h"
#include "node_summary.h"

#include <fcntl.h>
#include <malloc.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "checkpoints.h"
#include "meta_keys.h"
#include "text_escape.h"
#include "flightrec.h"
#include "parallel_for.h"
#include "op_digest.h"
#include "profiler_schema.h"
#include "rank_identity.h"
#include "schedule_waits.h"
#include "trace_details.h"
#include "trace_file.h"
#include "trace_schema.h"
#include "trace_validation.h"
#include "vocab.h"

namespace fs = std::filesystem;

namespace lockstep {
namespace {

// A file that cannot be used; the message is the user-facing skip reason.
struct FileSkip : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The writer held the lock longer than the busy timeout: retry the whole file.
struct FileBusy : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(sqlite3* db, int rc, const std::string& what) {
  int primary = rc & 0xff;
  std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) throw FileBusy(msg);
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB)
    throw FileSkip("corrupt or truncated (" + msg + ")");
  if (primary == SQLITE_INTERRUPT)  // trace_file::Db::open_untrusted's step budget
    throw FileSkip("unreadable: its queries ran past the reader's step budget (" + msg + ")");
  if (primary == SQLITE_TOOBIG)
    throw FileSkip("unreadable: a value over " + std::to_string(trace_file::kMaxValueBytes >> 20) + " MiB (" + msg + ")");
  throw FileSkip(msg);
}

// Vocabulary columns (schema/vocab.h): a name the vocabulary does not know makes the file
// unusable, named in the skip reason, never guessed.
template <class E>
E known(std::optional<E> v, const char* column, const std::string& text) {
  if (!v) throw FileSkip("corrupt: unknown " + std::string(column) + " '" + printable(text) + "'");
  return *v;
}
vocab::Op op_of(const std::string& s) { return known(vocab::parse_op(s), "op", s); }
vocab::Dtype dtype_of(const std::string& s) {  // NULL: none, or parts that differ
  return s.empty() ? vocab::Dtype::Mixed : known(vocab::parse_dtype(s), "dtype", s);
}
vocab::RedOp redop_of(const std::string& s) {
  return s.empty() ? vocab::RedOp::None : known(vocab::parse_redop(s), "redop", s);
}

// Opened through trace_file's wrapper; a file SQLite cannot open is a skip reason. read_ahead:
// the loader reads most pages of a file (read_ahead_vfs.h), a detail a few.
trace_file::Db open_trace(const std::string& path, int flags, int busy_ms, bool read_ahead = true, int64_t known_bytes = -1) {
  trace_file::Db db;
  if (int rc = db.open_untrusted(path, flags, read_ahead, known_bytes); rc != SQLITE_OK)
    throw FileSkip("cannot open: " + (db ? db.errmsg() : std::string(sqlite3_errstr(rc))));
  db.busy_timeout(busy_ms);
  // No memory map: mapping and unmapping each of thousands of files (a TLB shootdown on every
  // loader thread) cost more than read(2) copies of their pages; mapped pages also counted in
  // the analyzer's RSS.
  return db;
}

// A query of a file being read: trace_file's statement, with SQLite's errors turned into skip
// reasons (or a retry, for a writer's lock).
class Query {
 public:
  Query(sqlite3* db, const char* sql) : db_(db), st_(db, sql, false) {
    if (!st_.ok()) fail(db, sqlite3_errcode(db), std::string("query failed (") + sql + ")");
  }
  // A query that may not prepare (a column a crafted file lacks): ok() says.
  Query(sqlite3* db, const char* sql, std::nothrow_t) : db_(db), st_(db, sql, false) {}
  bool ok() const { return st_.ok(); }
  // true: a row is available; false: done. Errors throw.
  bool step() {
    int rc = st_.step();
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, rc, "read failed");
  }
  bool null(int i) const { return st_.is_null(i); }
  int64_t i64(int i, int64_t dflt = 0) const { return null(i) ? dflt : st_.column_i64(i); }
  // Trace strings are untrusted: made printable here, once, for every output (text_escape.h).
  std::string str(int i) const { return printable(st_.column_text(i)); }
  // Borrowed view, valid until the next step.
  std::string_view view(int i) const { return st_.column_text(i); }
  trace_file::Stmt& bind() { return st_; }
  const trace_file::Stmt& stmt() const { return st_; }

 private:
  sqlite3* db_;
  trace_file::Stmt st_;
};

// From the schema SQLite parsed already (no statement; the table's columns by the name SQLite
// resolves them with).
bool table_has_column(sqlite3* db, const char* table, const char* column) {
  return sqlite3_table_column_metadata(db, "main", table, column, nullptr, nullptr, nullptr, nullptr, nullptr) == SQLITE_OK;
}

// What validate read of a file that the reads after it use: its schema (which tables it has) and
// its meta rows, each read once.
struct Validated {
  trace_file::FileSchema schema;
  std::vector<std::pair<std::string, std::string>> meta;  // key, value as printable text, in rowid order
};

// Checks that come before trusting any table: magic bytes, size, application_id, schema version.
// size: the file's, from the stat that found it a regular file.
Validated validate(sqlite3* db, const std::string& path, int64_t size) {
  std::error_code ec;
  if (size == 0) throw FileSkip("empty file (the recorder created it but wrote nothing)");
  // The magic bytes are read only to say why SQLite could not read a file: its first statement
  // reads the header (and fails on any other magic) within the read already made, where a check
  // of our own first was an open, a read and a close more for every file.
  auto not_sqlite = [&]() -> std::string {
    char magic[16] = {};
    ssize_t got = -1;
    if (int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK); fd >= 0) {
      got = ::pread(fd, magic, sizeof magic, 0);
      ::close(fd);
    }
    if (got >= 16 && std::memcmp(magic, "SQLite format 3", 16) == 0) return "";
    return size < 100 ? "not a trace: too short to be an SQLite database" : "not a trace: not an SQLite database";
  };
  // The header's pragmas as plain PRAGMA statements: the pragma_* table-valued functions of one
  // SELECT each declared a virtual table (a CREATE TABLE parsed) on every file's connection.
  auto pragma = [db](const char* sql, bool& row) {
    Query q(db, sql);
    row = q.step();
    return std::make_pair(row ? q.i64(0) : int64_t(0), row ? q.str(0) : std::string());
  };
  bool header_row = true, one = false;
  int64_t app_id = 0;
  try {
    app_id = pragma("PRAGMA application_id", one).first;
  } catch (const FileSkip&) {
    if (std::string why = not_sqlite(); !why.empty()) throw FileSkip(why);
    throw;
  }
  header_row &= one;
  const std::string journal_mode = pragma("PRAGMA journal_mode", one).second;
  header_row &= one;
  const int64_t page_count = pragma("PRAGMA page_count", one).first;
  header_row &= one;
  const int64_t page_size_bytes = pragma("PRAGMA page_size", one).first;
  header_row &= one;
  {
    int64_t app = header_row ? app_id : 0;
    if (app != schema::kApplicationId) {
      if (std::string why = not_sqlite(); !why.empty()) throw FileSkip(why);
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%08llX", static_cast<unsigned long long>(app));
      throw FileSkip(std::string("not a lockstep trace (SQLite application_id ") + buf +
                     ", expected " + schema::kApplicationIdHex + ")");
    }
  }
  // A truncated copy (partial rsync, full disk) is shorter than its header says. In WAL mode
  // the newest pages live in the -wal file, so the check does not apply there.
  {
    std::string mode = header_row ? journal_mode : "";
    int64_t pages = header_row ? page_count : 0;
    int64_t page_size = header_row ? page_size_bytes : 0;
    // The size of the file SQLite has open, under its read lock: an fstat of its descriptor,
    // not another lookup of the path.
    sqlite3_file* open_file = nullptr;
    sqlite3_int64 now_size = 0;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &open_file) != SQLITE_OK || !open_file ||
        !open_file->pMethods || open_file->pMethods->xFileSize(open_file, &now_size) != SQLITE_OK)
      now_size = static_cast<sqlite3_int64>(fs::file_size(path, ec));
    if (mode != "wal" && !ec && static_cast<int64_t>(now_size) < pages * page_size)
      throw FileSkip("truncated: file has " + std::to_string(now_size) + " bytes, its header says " +
                     std::to_string(pages * page_size));
  }
  // The schema, read once: every later "has it this table" is answered from it.
  Validated out;
  if (int rc = trace_file::read_schema(db, out.schema); rc != SQLITE_OK) fail(db, rc, "read failed (its schema)");
  if (!out.schema.has_table("meta")) throw FileSkip("corrupt: lockstep application_id but no meta table");
  // meta is read before the version is known: only its shape is checked here, every other
  // table once the version says which ones are tables.
  if (std::string why = trace_file::unsafe_object(db, out.schema, schema::kSchemaVersion); !why.empty()) throw FileSkip(why);
  // Every meta row, once (read_header takes them); the version is its first schema_version row.
  std::optional<std::string> version_text;  // nullopt: no row; "" with version_null: NULL
  bool version_null = false;
  {
    Query st(db, "SELECT key, value FROM meta");
    while (st.step()) {
      if (!version_text && st.stmt().is_text(0) && st.view(0) == "schema_version") version_text = st.str(1), version_null = st.null(1);
      out.meta.emplace_back(st.str(0), st.str(1));
    }
  }
  if (!version_text || version_null) throw FileSkip("no schema_version in meta (recorder died while creating the file?)");
  std::string v = *version_text;
  const trace_file::TextInt parsed = trace_file::parse_int(v);
  if (parsed.kind == trace_file::TextInt::kAbsent || parsed.kind == trace_file::TextInt::kMalformed)
    throw FileSkip("bad schema_version '" + v + "'");
  const int64_t version = parsed.value;
  if (version > schema::kSchemaVersion)
    throw FileSkip("schema version " + v + " is newer than this lockstep reads (" +
                   std::to_string(schema::kSchemaVersion) + "): use a newer lockstep");
  if (version < schema::kOldestReadableSchema)
    throw FileSkip("schema version " + v + " is older than this lockstep reads (" +
                   std::to_string(schema::kOldestReadableSchema) + ".." + std::to_string(schema::kSchemaVersion) +
                   "): analyze it with the lockstep that recorded it");
  if (version < 2)
    if (std::string why = trace_file::unsafe_object(db, out.schema, version); !why.empty()) throw FileSkip(why);
  if (version >= 2)
    for (const char* table : {"signatures", "signature_parts", "op_rows", "op_graph", "checkpoints"})
      if (!out.schema.has_table(table)) throw FileSkip(std::string("corrupt: schema ") + v + " trace without its " + table + " table");
  return out;
}

// Schema 2 stores ops as signatures + op rows (trace_schema.h); schema 1 as wide ops rows. Full
// loads and details read schema 2 through its views (ops, op_parts, completions), which show the
// schema-1 columns; the compact loader reads the rows themselves.
bool compact_rows(const Process& p) {
  auto it = p.meta.find(schema::meta::kSchemaVersion);
  return it != p.meta.end() && it->second != "1";
}

int64_t to_i64(const std::string& s, int64_t dflt) { return trace_file::parse_int(s).or_default(dflt); }

// Meta values with a meaning are parsed strictly: a value no writer writes is evidence of a
// corrupt file (the file is skipped with its reason, so every command says the same), never
// read as the default. Absent: the default.
int64_t strict_count(const Process& p, const char* key) {
  auto it = p.meta.find(key);
  if (it == p.meta.end()) return 0;
  const trace_file::TextInt v = trace_file::parse_int(it->second);
  if (v.kind != trace_file::TextInt::kValue || v.value < 0)
    throw FileSkip("corrupt: meta " + std::string(key) + " '" + it->second + "' is not a count");
  return v.value;
}
bool strict_flag(const Process& p, const char* key) {
  auto it = p.meta.find(key);
  if (it == p.meta.end()) return false;
  if (it->second != "0" && it->second != "1")
    throw FileSkip("corrupt: meta " + std::string(key) + " '" + it->second + "' is neither 0 nor 1");
  return it->second == "1";
}

// Bounded traces (schema 2): what the size cap retired, and the digest checkpoints.
// (The comms' retired columns come with read_header's comms query.)
void read_retired(sqlite3* db, Process& p) {
  p.checkpoint_interval = strict_count(p, schema::meta::kCheckpointInterval);
  p.retired_ops = strict_count(p, schema::meta::kRetiredOps);
  // The order digest columns (files written before they existed lack them; NULL: none recorded).
  const bool order = table_has_column(db, "checkpoints", "order_digest") && table_has_column(db, "checkpoints", "order_count");
  Query st(db, order ? "SELECT comm_id, ordinal, seq, digest, order_count, order_digest FROM checkpoints ORDER BY comm_id, ordinal"
                     : "SELECT comm_id, ordinal, seq, digest FROM checkpoints ORDER BY comm_id, ordinal");
  while (st.step())
    for (Comm& c : p.comms)
      if (c.local_id == st.i64(0)) {
        Comm::Checkpoint& k = c.checkpoints.emplace_back();
        k.ordinal = st.i64(1), k.seq = st.i64(2), k.digest = static_cast<uint64_t>(st.i64(3));
        if (order && st.i64(4) > 0) k.order_count = st.i64(4), k.order_digest = static_cast<uint64_t>(st.i64(5));
      }
}

// Where a full read finds the schema-1 columns: the tables of schema 1, or for schema 2 the
// SELECTs behind its views, built here (SQL stored in an untrusted file is never run).
struct OpSources {
  std::string ops = "ops", parts = "op_parts", done = "completions";
};
OpSources op_sources(sqlite3* db, const Process& p) {
  if (!compact_rows(p)) return {};
  const std::string rows = trace_file::op_rows_source(trace_file::op_chunk_tables(db));
  auto meta = [&](const char* k) {
    auto it = p.meta.find(k);
    return it == p.meta.end() ? int64_t(0) : to_i64(it->second, 0);
  };
  const int64_t base = meta(schema::meta::kOpTimeBaseMonoNs), offset = meta(schema::meta::kOpWallOffsetNs);
  const int version = static_cast<int>(std::clamp<int64_t>(meta(schema::meta::kSchemaVersion), 2, schema::kSchemaVersion));
  return {"(" + trace_file::ops_select(base, offset, rows, version) + ")", "(" + trace_file::op_parts_select(rows) + ")",
          "(" + trace_file::completions_select(base, rows) + ")"};
}

// The header fields a meta value says, checked strictly (a value no writer writes is a corrupt
// file). Read from the file, and again for a process a node summary brought (node_summary.h).
void header_from_meta(Process& p) {
  auto meta = [&](const char* k) {
    auto it = p.meta.find(k);
    return it == p.meta.end() ? std::string() : it->second;
  };
  namespace mk = schema::meta;
  p.host = meta(mk::kHost);
  p.pid = to_i64(meta(mk::kPid), 0);
  p.global_rank = trace_file::global_rank_from_meta(meta(mk::kGlobalRank));
  p.finished = strict_flag(p, mk::kFinished);
  p.exit_reason = meta(mk::kExitReason);
  p.dropped_records = strict_count(p, mk::kDroppedRecords);
  p.last_flush_mono_ns = to_i64(meta(mk::kLastFlushMonoNs), 0);
  strict_count(p, mk::kDigestGaps);
  strict_flag(p, mk::kFrHistoryDropped);
  if (auto it = p.meta.find(mk::kRecorderStopped); it != p.meta.end() && !mk::known_stop_reason(it->second))
    throw FileSkip("corrupt: meta " + std::string(mk::kRecorderStopped) + " '" + it->second +
                   "' is not a reason the recorder writes");
}

// A drops row whose communicator or seqs are not a range the recorder writes still says records
// were dropped: kept with no seq range (first_seq = last_seq = 0).
void normalize_drop(DropRange& d) {
  if (d.comm < 0 || d.first_seq < 1 || d.first_seq > static_cast<int64_t>(UINT32_MAX) + 1 || d.last_seq < d.first_seq ||
      (!d.stop_point && d.last_seq > static_cast<int64_t>(UINT32_MAX)))
    d.first_seq = d.last_seq = 0, d.stop_point = false;
}

// meta, env, comms, hangs: everything but ops. `file`: what validate read of it.
void read_header(sqlite3* db, const Validated& file, Process& p) {
  for (const auto& [key, value] : file.meta) p.meta[key] = value;
  header_from_meta(p);
  {
    Query st(db, "SELECT name, value FROM env");
    while (st.step()) p.env[st.str(0)] = st.str(1);
  }
  std::vector<int64_t> parent_ids;
  // One query of comms: with the bounded-trace columns (schema 2 on) and created_before_tracing
  // when the file has them.
  const bool retired = compact_rows(p), before_tracing = table_has_column(db, "comms", "created_before_tracing");
  {
    std::string sql =
        "SELECT id, comm_hash, handle, nranks, rank, cuda_device, parent_id, split_color, "
        "split_key, name, init_call, init_rc, end_kind";
    if (retired) sql += ", retired_collectives, retired_digest, retired_through_seq";
    if (before_tracing) sql += ", created_before_tracing != 0";
    Query st(db, (sql + " FROM comms ORDER BY id").c_str());
    while (st.step()) {
      Comm c;
      c.local_id = static_cast<int>(st.i64(0));
      c.hash = st.str(1);
      c.handle = static_cast<uint64_t>(st.i64(2));
      // Clamped, not wrapped: nranks 2^32 + 2 must reach header_defect as out of range, not as 2.
      c.nranks = static_cast<int>(std::clamp<int64_t>(st.i64(3), INT32_MIN, INT32_MAX));
      c.rank = static_cast<int>(std::clamp<int64_t>(st.i64(4), INT32_MIN, INT32_MAX));
      c.cuda_device = static_cast<int>(st.i64(5, -1));
      parent_ids.push_back(st.i64(6, -1));
      c.split_color = static_cast<int>(st.i64(7));
      c.shrunk = !st.null(6) && st.null(7);
      c.split_key = static_cast<int>(st.i64(8));
      c.name = st.str(9);
      // Traces before the created_before_tracing column said it in the name.
      if (c.name == "(created before tracing)") c.created_before_tracing = true, c.name.clear();
      c.init_call = st.i64(10);
      c.init_rc = static_cast<int>(st.i64(11));
      const std::string end = st.str(12);
      c.end_kind = end.empty() ? vocab::CommEnd::Alive : known(vocab::parse_comm_end(end), "comm end_kind", end);
      if (retired) {
        c.retired_collectives = std::max<int64_t>(0, st.i64(13));
        c.retired_digest = static_cast<uint64_t>(st.i64(14));
        c.retired_through_seq = std::max<int64_t>(0, st.i64(15));
      }
      if (before_tracing && st.i64(retired ? 16 : 13) != 0) c.created_before_tracing = true;
      p.comms.push_back(std::move(c));
    }
  }
  for (size_t i = 0; i < p.comms.size(); ++i) {
    if (parent_ids[i] < 0) continue;
    for (size_t j = 0; j < p.comms.size(); ++j)
      if (p.comms[j].local_id == parent_ids[i]) p.comms[i].parent = static_cast<int>(j);
  }
  if (retired) read_retired(db, p);
  {
    // The recorder's only ncclCommSplit api_calls row is a NOCOLOR split (a split that created
    // a communicator is a comms row).
    Query st(db, "SELECT call_index, comm_id FROM api_calls WHERE name = 'ncclCommSplit' AND rc = 0 ORDER BY call_index");
    while (st.step())
      for (size_t i = 0; i < p.comms.size(); ++i)
        if (p.comms[i].local_id == st.i64(1)) p.nocolor_splits.push_back({st.i64(0), static_cast<int>(i)});
  }
  {
    Query st(db, "SELECT mono_ns, wall_ns, in_flight, message FROM hangs ORDER BY id");
    while (st.step()) p.hangs.push_back({st.i64(0), st.i64(1), static_cast<int>(st.i64(2)), st.str(3)});
  }
  if (file.schema.has_table("drops")) {
    // Where dropped records were. A row naming a comm the file does not have, or seqs out of
    // order, still says records were dropped: kept with comm -1 (no seq range known).
    p.drops_known = true;
    Query st(db, "SELECT comm_id, first_seq, last_seq, records, reason FROM drops");
    while (st.step()) {
      DropRange d;
      if (!st.null(0))
        for (size_t i = 0; i < p.comms.size(); ++i)
          if (p.comms[i].local_id == st.i64(0)) d.comm = static_cast<int>(i);
      d.first_seq = st.i64(1, 0);
      d.last_seq = st.i64(2, 0);
      d.reason = st.str(4).substr(0, 64);
      // A stop point (schema::kDropRecorderStopped) is open: every seq from first_seq on.
      d.stop_point = d.reason == schema::kDropRecorderStopped && st.null(2);
      if (d.stop_point) d.last_seq = INT64_MAX;
      normalize_drop(d);
      d.records = std::max<int64_t>(st.i64(3, 0), 0);
      p.drops.push_back(std::move(d));
    }
  }
  std::string defect = header_defect(p);
  if (!defect.empty()) throw FileSkip(defect);
}

// Numbers of an op row checked before use (the same rule for the full and the compact loader,
// so every reader agrees on which files are usable). seq NULL (0 here) = unsequenced.
void check_op_numbers(int64_t call_index, int64_t seq, int64_t count, int64_t root, int64_t peer) {
  auto bad = [&](const char* what, int64_t v, const std::string& valid) {
    throw FileSkip("corrupt: op " + std::to_string(call_index) + " has " + what + " " + std::to_string(v) +
                   " (valid: " + valid + ")");
  };
  if (seq < 0 || seq > static_cast<int64_t>(UINT32_MAX)) bad("seq", seq, "1.." + std::to_string(UINT32_MAX));
  if (count < 0) bad("count", count, ">= 0");
  if (root < -1 || root >= kMaxRanks) bad("root", root, "a rank");
  if (peer < -1 || peer >= kMaxRanks) bad("peer", peer, "a rank");
}

// Only a row that enqueued work holds a seq (the recorder numbers nothing else): a failed or
// simulated row with one is a corrupt file, for the full and the compact loader alike.
void check_sequenced_state(int64_t call_index, vocab::State state, bool sequenced) {
  if (sequenced && (state == vocab::State::Failed || state == vocab::State::Simulated))
    throw FileSkip("corrupt: op " + std::to_string(call_index) + " is " + vocab::name(state) + " but holds a seq");
}

class CommIds {
 public:
  explicit CommIds(const Process& p) {
    for (size_t i = 0; i < p.comms.size(); ++i) ids_.emplace_back(p.comms[i].local_id, static_cast<int>(i));
  }
  int index(int64_t id) const {
    for (auto& [k, v] : ids_)
      if (k == id) return v;
    return -1;
  }

 private:
  std::vector<std::pair<int64_t, int>> ids_;
};

OpPart read_part(const Query& st, int c) {
  OpPart part;
  part.op = op_of(st.str(c));
  part.dtype = dtype_of(st.str(c + 1));
  part.count = st.i64(c + 2);
  part.root = static_cast<int>(st.i64(c + 3, -1));
  part.peer = static_cast<int>(st.i64(c + 4, -1));
  part.redop = redop_of(st.str(c + 5));
  return part;
}

constexpr const char* kOpColumns =
    "call_index, comm_id, seq, op, dtype, count, root, peer, redop, stream, tid, thread_name, group_id, "
    "issue_mono_ns, issue_wall_ns, rc, state, origin_call, graph_exec, stack_id";

// The parts of a sequenced op, checked like the op itself.
void check_part(int64_t call_index, const OpPart& part) {
  if (part.count < 0 || part.peer < -1 || part.peer >= kMaxRanks || part.root < -1 || part.root >= kMaxRanks)
    throw FileSkip("corrupt: op " + std::to_string(call_index) + " has a part with count " + std::to_string(part.count) +
                   ", peer " + std::to_string(part.peer) + ", root " + std::to_string(part.root));
}

Op read_op_row(const Query& st, const CommIds& ids) {
  Op o;
  o.call_index = st.i64(0);
  o.comm = ids.index(st.i64(1));
  o.seq = st.i64(2, 0);
  o.op = op_of(st.str(3));
  o.dtype = dtype_of(st.str(4));
  o.count = st.i64(5);
  o.root = static_cast<int>(st.i64(6, -1));
  o.peer = static_cast<int>(st.i64(7, -1));
  o.redop = redop_of(st.str(8));
  o.stream = static_cast<uint64_t>(st.i64(9));
  o.tid = st.i64(10);
  o.thread_name = st.str(11);
  o.group_id = st.i64(12, -1);
  o.issue_mono_ns = st.i64(13);
  o.issue_wall_ns = st.i64(14);
  o.rc = static_cast<int>(st.i64(15));
  o.state = known(vocab::parse_state(st.str(16)), "op state", st.str(16));
  check_sequenced_state(o.call_index, o.state, !st.null(2));
  o.origin_call = st.i64(17, -1);
  o.graph_exec = static_cast<uint64_t>(st.i64(18));
  o.stack_id = st.i64(19, -1);
  // Only sequenced rows are compared or replayed: the compact loader reads no other.
  if (!st.null(2)) check_op_numbers(o.call_index, o.seq, o.count, st.i64(6, -1), st.i64(7, -1));
  if (!st.null(2) && o.seq == 0)
    throw FileSkip("corrupt: op " + std::to_string(o.call_index) + " has seq 0 (valid: 1.." + std::to_string(UINT32_MAX) + ")");
  if (o.state == vocab::State::Captured) o.seq = 0;  // captured rows never ran as such
  return o;
}

Frame read_frame(const Query& fr, int c) {
  Frame f;
  f.kind = known(vocab::parse_frame_kind(fr.str(c)), "frame kind", fr.str(c));
  f.function = fr.str(c + 1);
  f.module = fr.str(c + 2);
  f.offset = static_cast<uint64_t>(fr.i64(c + 3));
  f.file = fr.str(c + 4);
  f.line = static_cast<int>(fr.i64(c + 5));
  return f;
}

void read_ops_full(sqlite3* db, Process& p) {
  CommIds ids(p);
  const OpSources src = op_sources(db, p);
  Query st(db, ("SELECT " + std::string(kOpColumns) + " FROM " + src.ops + " ORDER BY call_index").c_str());
  while (st.step()) p.ops.push_back(read_op_row(st, ids));
  auto find = [&](int64_t ci) -> Op* {
    auto it = std::lower_bound(p.ops.begin(), p.ops.end(), ci,
                               [](const Op& o, int64_t v) { return o.call_index < v; });
    return it != p.ops.end() && it->call_index == ci ? &*it : nullptr;
  };
  {
    Query parts(db, ("SELECT call_index, op, dtype, count, root, peer, redop FROM " + src.parts +
                    " ORDER BY call_index, part").c_str());
    while (parts.step())
      if (Op* o = find(parts.i64(0))) {
        o->parts.push_back(read_part(parts, 1));
        if (o->seq > 0 || o->state == vocab::State::Captured) check_part(o->call_index, o->parts.back());
      }
  }
  {
    Query done(db, ("SELECT call_index, mono_ns FROM " + src.done).c_str());
    while (done.step())
      if (Op* o = find(done.i64(0))) {
        o->completed = true;
        o->complete_mono_ns = done.i64(1);
      }
  }
  {
    Query fr(db,
            "SELECT stack_id, kind, function, module, offset, file, line FROM frames ORDER BY stack_id, depth");
    while (fr.step()) p.stacks[fr.i64(0)].push_back(read_frame(fr, 1));
  }
  {
    Query w(db, "SELECT call_index, kind, stream, event, tid, begin_mono_ns, end_mono_ns FROM waits ORDER BY call_index");
    while (w.step()) {
      Wait x;
      x.call_index = w.i64(0);
      x.kind = known(vocab::parse_wait(w.str(1)), "wait kind", w.str(1));
      x.stream = static_cast<uint64_t>(w.i64(2));
      x.event = static_cast<uint64_t>(w.i64(3));
      x.tid = w.i64(4);
      x.begin_mono_ns = w.i64(5);
      x.end_mono_ns = w.i64(6, -1);
      p.waits.push_back(std::move(x));
    }
  }
}

// Schema-2 values -> model fields. An enumerated column holds the vocab enum's value, or the
// name itself as text when it was not in the vocabulary (an unknown name: the file is skipped).
std::string vocab_text(const Query& st, int c, const char* (*name_of)(int64_t)) {
  if (st.null(c)) return {};
  if (st.stmt().is_text(c)) return st.str(c);
  const char* n = name_of(st.i64(c));
  return n ? n : "code " + std::to_string(st.i64(c));
}
const char* op_name_of(int64_t v) { return v >= 0 && v < vocab::kNumOps ? vocab::name(vocab::Op(v)) : nullptr; }
const char* dtype_name_of(int64_t v) {
  return v >= 0 && v < int64_t(std::size(vocab::kDtypeNames)) ? vocab::kDtypeNames[v] : nullptr;
}
const char* redop_name_of(int64_t v) {
  return v >= 0 && v < int64_t(std::size(vocab::kRedOpNames)) ? vocab::kRedOpNames[v] : nullptr;
}
vocab::Op op_v2(const Query& st, int c) { return op_of(vocab_text(st, c, op_name_of)); }
vocab::Dtype dtype_v2(const Query& st, int c) { return dtype_of(vocab_text(st, c, dtype_name_of)); }
vocab::RedOp redop_v2(const Query& st, int c) { return redop_of(vocab_text(st, c, redop_name_of)); }
OpPart read_part_v2(const Query& st, int c) {
  OpPart part;
  part.op = op_v2(st, c);
  part.dtype = dtype_v2(st, c + 1);
  part.count = st.i64(c + 2);
  part.root = static_cast<int>(st.i64(c + 3, -1));
  part.peer = static_cast<int>(st.i64(c + 4, -1));
  part.redop = redop_v2(st, c + 5);
  return part;
}

// Per info.comms entry: the collective ordinal through which op rows are not read (0: all).
using Cuts = std::vector<int64_t>;
// The rows of a summary-first read could not be cut as its checkpoints said: read the file whole.
struct CutUnproven {};

// Summary-first: the op rows from the newest back to each communicator's cut (its collective
// ordinal cuts[c], whose seq is cuts[c]: no point-to-point op before it), then indexed oldest
// first. What lies before the cut is counted from the chunks' row counts and the cut seqs, not
// read. A communicator whose cut is 0 (no checkpoint, or its members disagree at every one) is
// read whole: the scan then goes on to the first row, keeping only that communicator's rows
// before the others' cuts, so memory stays bounded by what is kept. Throws CutUnproven when the
// rows do not reach a cut the checkpoints promised.
vocab::State state_v2(int64_t call_index, int64_t column, int version, bool sequenced);

template <class SigOf>
void read_ops_tail(sqlite3* db, SchedProcess& sp, const std::vector<std::string>& chunks, int64_t total, const Cuts& cuts,
                   const std::vector<bool>& comm_has_ops, int version, SigOf&& sig_of) {
  std::vector<ScheduleBuilder::Row> rows;  // newest first
  const int64_t time_base = meta_int(sp.info, schema::meta::kOpTimeBaseMonoNs).or_default(0);
  std::vector<bool> reached(cuts.size(), false);
  size_t open = 0;    // communicators cut whose cut row was not reached yet
  bool whole = false;  // a communicator read whole: scan every row
  for (size_t c = 0; c < cuts.size(); ++c) {
    open += comm_has_ops[c] && cuts[c] > 0;
    whole |= comm_has_ops[c] && cuts[c] == 0;
  }
  int64_t scanned = 0, scanned_before_cut = 0, unsequenced = 0, unsequenced_done = 0;
  int64_t previous = INT64_MAX;
  for (auto t = chunks.rbegin(); t != chunks.rend() && (open > 0 || whole); ++t) {
    Query st(db, ("SELECT call_index, sig, seq, group_id, done, t, state FROM " + *t + " ORDER BY call_index DESC").c_str());
    const trace_file::Stmt& row = st.stmt();
    while ((open > 0 || whole) && st.step()) {
      int64_t ci = row.column_i64(0);
      if (ci >= previous) throw FileSkip("corrupt: op chunk " + *t + " overlaps the one after it (call_index " + std::to_string(ci) + ")");
      previous = ci;
      ++scanned;
      const bool completed = !row.is_null(4);
      // The state is checked as the whole read checks it (a captured row is never compared).
      const vocab::State state = state_v2(ci, row.column_i64(6), version, !row.is_null(2));
      if (row.is_null(2) || state == vocab::State::Captured) {
        ++unsequenced;
        unsequenced_done += completed;
        continue;
      }
      const auto* fs = sig_of(row.column_i64(1));
      if (!fs) throw FileSkip("corrupt: op " + std::to_string(ci) + " names an unknown signature");
      const int64_t seq = row.column_i64(2);
      const size_t c = static_cast<size_t>(fs->comm);
      if (seq <= cuts[c]) {
        ++scanned_before_cut;
        // The ops before the cut count as issued and done (hang.cpp): the cut's own op must have
        // completed (completions are recorded in stream order), else the file is read whole.
        if (!reached[c] && (seq != cuts[c] || !completed)) throw CutUnproven{};
        if (!reached[c]) reached[c] = true, --open;
        continue;
      }
      if (reached[c]) throw CutUnproven{};  // seq not increasing with call_index: not the recorder's file
      const int64_t group = row.is_null(3) ? -1 : row.column_i64(3);
      rows.push_back({ci, seq, fs->comm, fs->sig, fs->stream, group, completed});
      if (!completed) sp.in_flight_issue.emplace_back(ci, time_base + row.column_i64(5));
    }
  }
  std::reverse(sp.in_flight_issue.begin(), sp.in_flight_issue.end());
  if (open > 0) throw CutUnproven{};
  int64_t before = 0;  // sequenced rows before the cuts: seq 1..cut of each communicator
  for (size_t c = 0; c < cuts.size(); ++c) before += comm_has_ops[c] ? cuts[c] : 0;
  const int64_t unscanned_unsequenced = (total - scanned) - (before - scanned_before_cut);
  if (unscanned_unsequenced < 0) throw CutUnproven{};
  sp.ops.reserve(rows.size());
  ScheduleBuilder index(sp);
  for (auto r = rows.rbegin(); r != rows.rend(); ++r) index.add_op(*r);
  for (int64_t i = 0; i < unsequenced + unscanned_unsequenced; ++i) index.add_unsequenced(i < unsequenced_done);
  sp.groups.shrink_to_fit();
  if (!sp.completion_known)
    for (const std::string& t : chunks) {
      Query done(db, ("SELECT 1 FROM " + t + " WHERE done IS NOT NULL LIMIT 1").c_str());
      if (done.step()) {
        sp.completion_known = true;
        break;
      }
    }
  sp.unread.assign(cuts.size(), {});
  for (size_t c = 0; c < cuts.size(); ++c) {
    if (!comm_has_ops[c] || cuts[c] == 0) continue;
    const auto& cps = sp.info.comms[c].checkpoints;
    auto it = std::find_if(cps.begin(), cps.end(), [&](const Comm::Checkpoint& k) { return k.ordinal == cuts[c]; });
    if (it == cps.end()) throw CutUnproven{};
    sp.unread[c] = {cuts[c], it->digest};
  }
  sp.unread_ops = before;
}

// An op row's state column (schema 2: the state; schema 3: rc packed above it) as the compact
// loader reads it: the same rule as the full loader's, which reads it through the vocabulary.
// A value the vocabulary does not know, or a state that enqueued nothing on a sequenced row,
// makes the file corrupt.
vocab::State state_v2(int64_t call_index, int64_t column, int version, bool sequenced) {
  const int64_t code = version >= 3 ? column & ((int64_t(1) << schema::kOpRcShift) - 1) : column;
  if ((version < 3 && column < 0) || code >= int64_t(std::size(vocab::kStateNames)))
    throw FileSkip("corrupt: unknown op state '" + std::to_string(column) + "' (op " + std::to_string(call_index) + ")");
  const auto state = static_cast<vocab::State>(code);
  check_sequenced_state(call_index, state, sequenced);
  return state;
}

// Schema 2: the signatures first (few), then one pass over the small op rows in call_index
// order; a row costs an array lookup of its signature id and nothing else.
// threads: also fill sp.threads and sp.op_threads from the signatures' tid (the model checker's
// side data, schedule_waits.h) in the same pass; left false when they were not (a cut read,
// signature ids that repeat: read_host_waits reads them as before).
void read_ops_compact_v2(sqlite3* db, const Validated& file, SchedProcess& sp, SignatureTable& sigs,
                         const Cuts* cuts = nullptr, bool* threads = nullptr) {
  const bool want_threads = threads && *threads;
  if (threads) *threads = false;
  CommIds ids(sp.info);
  std::vector<bool> comm_has_ops(sp.info.comms.size(), false);
  const int version = static_cast<int>(std::clamp<int64_t>(to_i64(sp.info.meta[schema::meta::kSchemaVersion], 0), 2, schema::kSchemaVersion));
  struct FileSig {
    uint32_t sig = 0;
    int comm = 0;
    uint64_t stream = 0;
    bool present = false;
    int64_t tid = 0;
  };
  // signatures.id are 1, 2, ... as the recorder writes them: a dense table, with a hash map for
  // ids far outside it (a crafted file).
  std::vector<FileSig> dense;
  std::unordered_map<int64_t, FileSig> sparse;
  bool threads_here = want_threads;  // the tid column read, and every signature id once
  // Per communicator: its all-to-all signatures as SchedProcess::UnreadPrefix tells them.
  std::vector<std::pair<uint8_t, uint64_t>> all_to_all(sp.info.comms.size(), {SchedProcess::UnreadPrefix::kNoAllToAll, 0});
  {
    Query parts(db, "SELECT sig_id, op, dtype, count, root, peer, redop FROM signature_parts ORDER BY sig_id, part");
    bool parts_row = parts.step();
    // With tid when asked (a file without the column: read_host_waits says so, as before).
    std::optional<Query> with_tid;
    if (want_threads) {
      with_tid.emplace(db, "SELECT id, comm_id, op, dtype, count, root, peer, redop, stream, tid FROM signatures ORDER BY id",
                       std::nothrow);
      if (!with_tid->ok()) with_tid.reset(), threads_here = false;
    }
    std::optional<Query> without_tid;
    if (!with_tid) without_tid.emplace(db, "SELECT id, comm_id, op, dtype, count, root, peer, redop, stream FROM signatures ORDER BY id");
    Query& st = with_tid ? *with_tid : *without_tid;
    const bool tid = with_tid.has_value();
    bool first = true;
    int64_t previous_id = 0;
    while (st.step()) {
      int64_t id = st.i64(0);
      threads_here &= first || id != previous_id;
      first = false;
      previous_id = id;
      Signature sig;
      while (parts_row && parts.i64(0) < id) parts_row = parts.step();
      while (parts_row && parts.i64(0) == id) {
        sig.parts.push_back(read_part_v2(parts, 1));
        check_part(id, sig.parts.back());
        parts_row = parts.step();
      }
      sig.op = op_v2(st, 2);
      sig.dtype = dtype_v2(st, 3);
      sig.count = st.i64(4);
      int64_t root = st.i64(5, -1), peer = st.i64(6, -1);
      check_op_numbers(id, 1, sig.count, root, peer);
      sig.root = static_cast<int>(root);
      sig.peer = static_cast<int>(peer);
      sig.redop = redop_v2(st, 7);
      int comm = ids.index(st.i64(1));
      if (comm < 0) throw FileSkip("corrupt: signature " + std::to_string(id) + " names unknown comm_id " + std::to_string(st.i64(1)));
      comm_has_ops[static_cast<size_t>(comm)] = true;
      if (sig.op == vocab::Op::AllToAll) {
        auto& [kind, key] = all_to_all[static_cast<size_t>(comm)];
        const int64_t f[] = {static_cast<int64_t>(sig.dtype), sig.count, sig.root, sig.peer, static_cast<int64_t>(sig.redop)};
        const uint64_t k = XXH64(f, sizeof f, 0xa11);
        if (!sig.parts.empty() || (kind == SchedProcess::UnreadPrefix::kOneAllToAll && key != k))
          kind = SchedProcess::UnreadPrefix::kAllToAllOpen;
        else if (kind == SchedProcess::UnreadPrefix::kNoAllToAll)
          kind = SchedProcess::UnreadPrefix::kOneAllToAll, key = k;
      }
      FileSig fs{sigs.intern(std::move(sig)), comm, static_cast<uint64_t>(st.i64(8)), true, tid ? st.i64(9) : 0};
      if (id >= 0 && id < int64_t(1) << 20 && static_cast<size_t>(id) <= 2 * dense.size() + 1024) {
        if (static_cast<size_t>(id) >= dense.size()) dense.resize(static_cast<size_t>(id) + 1);
        dense[static_cast<size_t>(id)] = fs;
      } else {
        sparse[id] = fs;
      }
    }
  }
  auto sig_of = [&](int64_t id) -> const FileSig* {
    if (id >= 0 && static_cast<uint64_t>(id) < dense.size()) return dense[static_cast<size_t>(id)].present ? &dense[static_cast<size_t>(id)] : nullptr;
    auto it = sparse.find(id);
    return it == sparse.end() ? nullptr : &it->second;
  };
  // The op rows in their chunks (schema 3; schema 2 has op_rows only), read in chunk order:
  // call_index increases across them, checked here (a crafted file may say otherwise).
  const std::vector<std::string> chunks = trace_file::op_chunk_tables(file.schema);
  int64_t total = 0;
  for (const std::string& t : chunks) {
    Query n(db, ("SELECT count(*) FROM " + t).c_str());
    if (n.step()) total += n.i64(0);
  }
  // Summary-first: a file with no communicator cut is read whole.
  bool cut = false;
  for (size_t c = 0; cuts && cuts->size() == comm_has_ops.size() && c < comm_has_ops.size(); ++c)
    cut |= comm_has_ops[c] && (*cuts)[c] > 0;
  if (cut) {
    read_ops_tail(db, sp, chunks, total, *cuts, comm_has_ops, version, sig_of);
    for (size_t c = 0; c < sp.unread.size() && c < all_to_all.size(); ++c)
      std::tie(sp.unread[c].all_to_all, sp.unread[c].all_to_all_key) = all_to_all[c];
    return;
  }
  sp.ops.reserve(static_cast<size_t>(total));
  ScheduleBuilder index(sp);
  // The op threads as read_host_waits reads them (each sequenced op's signature's tid, in call
  // order), when each op row names one signature row.
  const bool fill_threads = threads_here;
  ThreadTable thread_table(sp);
  if (fill_threads) sp.op_threads.reserve(static_cast<size_t>(total));
  int64_t previous = INT64_MIN;
  const int64_t time_base = meta_int(sp.info, schema::meta::kOpTimeBaseMonoNs).or_default(0);
  for (const std::string& table : chunks) {
    // Plain columns, NULLs told apart here: no expression per row in SQLite's VM. Unsequenced rows
    // (seq NULL: failed, simulated, captured) are counted, not kept.
    Query st(db, ("SELECT call_index, sig, seq, group_id, done, state, t FROM " + table + " ORDER BY call_index").c_str());
    const trace_file::Stmt& row = st.stmt();
    while (st.step()) {
      int64_t ci = row.column_i64(0);
      if (ci <= previous) throw FileSkip("corrupt: op chunk " + table + " overlaps the one before it (call_index " + std::to_string(ci) + ")");
      previous = ci;
      const bool completed = !row.is_null(4);
      // The state is read, as the full loader reads it, so that every command agrees on it.
      const vocab::State state = state_v2(ci, row.column_i64(5), version, !row.is_null(2));
      if (row.is_null(2) || state == vocab::State::Captured) {
        index.add_unsequenced(completed);
        continue;
      }
      const FileSig* fs = sig_of(row.column_i64(1));
      if (!fs) throw FileSkip("corrupt: op " + std::to_string(ci) + " names an unknown signature");
      const int64_t group = row.is_null(3) ? -1 : row.column_i64(3);
      index.add_op({ci, row.column_i64(2), fs->comm, fs->sig, fs->stream, group, completed});
      if (fill_threads) sp.op_threads.push_back(thread_table.index(fs->tid));
      if (!completed) sp.in_flight_issue.emplace_back(ci, time_base + row.column_i64(6));
    }
  }
  if (threads) *threads = fill_threads;
  sp.groups.shrink_to_fit();
  // No completion recorded: every op counts as in flight, and the hang explanation asks the age
  // of each communicator's newest op only (hang.cpp): keep those issue times, not every op's. A
  // job hung at its first collective has no completion on any rank, and opening each rank's
  // file again for them cost 18 s and 1.3 GB at 16,384 ranks.
  if (!sp.completion_known) {
    std::vector<int64_t> newest(sp.info.comms.size(), -1);
    for (const SchedOp& o : sp.ops)
      if (o.comm < newest.size()) newest[o.comm] = std::max<int64_t>(newest[o.comm], o.call_index);
    std::sort(newest.begin(), newest.end());
    std::erase_if(sp.in_flight_issue, [&](const std::pair<int64_t, int64_t>& e) {
      return !std::binary_search(newest.begin(), newest.end(), e.first);
    });
    sp.in_flight_issue.shrink_to_fit();
  }
}

// The hot loop of `lockstep analyze`: one pass over ops, one over parts, one over completions,
// all in call_index order (the rowid), merged without lookups; op descriptions interned through
// a reused key buffer so a repeated op allocates nothing.
void read_ops_compact(sqlite3* db, const Validated& file, SchedProcess& sp, SignatureTable& sigs,
                      const Cuts* cuts = nullptr, bool* threads = nullptr) {
  if (compact_rows(sp.info)) return read_ops_compact_v2(db, file, sp, sigs, cuts, threads);
  if (threads) *threads = false;
  CommIds ids(sp.info);
  // NULL handling runs inside SQLite: one column call per value here. Rows that enqueued
  // nothing (failed, simulated, captured) have seq NULL (schema); the state column, the last of
  // the row and the costliest to decode, is not read.
  int64_t total = 0;
  {
    Query n(db, "SELECT count(*) FROM ops");
    if (n.step()) total = n.i64(0);
  }
  sp.ops.reserve(static_cast<size_t>(total));
  // Texts read without their length calls: SQLite's per-column API calls are a quarter of the
  // loader's time. Numbers are read as they are and range-checked here.
  Query st(db,
          "SELECT call_index, comm_id, op, IFNULL(dtype,''), IFNULL(count,0), "
          "IFNULL(root,-1), IFNULL(redop,''), IFNULL(stream,0), "
          "IFNULL(group_id,-1), seq, IFNULL(peer,-1) FROM ops ORDER BY call_index");
  Query parts(db, "SELECT call_index, op, dtype, count, root, peer, redop FROM op_parts ORDER BY call_index, part");
  Query done(db, "SELECT call_index FROM completions ORDER BY call_index");
  bool parts_row = parts.step(), done_row = done.step();
  std::unordered_map<std::string, uint32_t> local;
  std::string key;
  Signature scratch;
  const trace_file::Stmt& row = st.stmt();
  auto text = [&row](int c) { return row.column_text(c); };
  ScheduleBuilder index(sp);
  while (st.step()) {
    int64_t ci = row.column_i64(0);
    while (done_row && done.i64(0) < ci) done_row = done.step();
    const bool completed = done_row && done.i64(0) == ci;
    if (row.is_null(9)) {
      index.add_unsequenced(completed);
      continue;
    }
    scratch.parts.clear();
    while (parts_row && parts.i64(0) < ci) parts_row = parts.step();
    while (parts_row && parts.i64(0) == ci) {
      scratch.parts.push_back(read_part(parts, 1));
      check_part(ci, scratch.parts.back());
      parts_row = parts.step();
    }
    int64_t comm_id = row.column_i64(1);
    int64_t seq = row.column_i64(9);
    int64_t count = row.column_i64(4);
    int64_t root = row.column_i64(5), peer = row.column_i64(10);
    check_op_numbers(ci, seq, count, root, peer);
    int comm = ids.index(comm_id);
    if (comm < 0) throw FileSkip("corrupt: op " + std::to_string(ci) + " names unknown comm_id " + std::to_string(comm_id));

    // Binary key: the text columns with their NUL, integers as raw bytes (no formatting per row).
    key.clear();
    for (int c : {2, 3, 6}) {
      key.append(text(c));
      key.push_back('\0');
    }
    key.append(reinterpret_cast<const char*>(&count), sizeof count);
    key.append(reinterpret_cast<const char*>(&root), sizeof root);
    key.append(reinterpret_cast<const char*>(&peer), sizeof peer);
    for (auto& part : scratch.parts) key += signature_key(Signature{part.op, part.dtype, part.count, part.root, part.peer, part.redop, {}, {}});
    auto it = local.find(key);
    if (it == local.end()) {
      Signature sig;
      sig.op = op_of(std::string(text(2)));
      sig.dtype = dtype_of(std::string(text(3)));
      sig.redop = redop_of(std::string(text(6)));
      sig.count = count;
      sig.root = static_cast<int>(root);
      sig.peer = static_cast<int>(peer);
      sig.parts = scratch.parts;
      it = local.emplace(key, sigs.intern(std::move(sig))).first;
    }
    index.add_op({ci, seq, comm, it->second, static_cast<uint64_t>(row.column_i64(7)), row.column_i64(8), completed});
  }
}

// The most a rollback journal can hold beside its database: (page size + 8) per page, counted
// generously, and room for the segment headers of a small file.
constexpr uintmax_t kMaxJournalFactor = 2;
constexpr uintmax_t kJournalSlackBytes = 1 << 20;

// A crashed writer can leave a hot rollback journal, which a read-only connection must not
// replay. Read a private copy instead, so the trace itself is never modified.
template <class Fn>
void with_rollback_copy(const std::string& given, const LoadOptions& opt, Fn&& fn) {
  std::error_code ec;
  // SQLite found the journal beside the file a link names (it resolves a linked file's name):
  // copy that file and that journal.
  std::string path = fs::canonical(given, ec).string();
  if (ec) path = given, ec.clear();
  // A rollback journal holds the original of each page a transaction changed: never more than
  // the pages the file had, plus a header per sector-sized segment. One larger (a sparse
  // gigabyte beside a small trace) is not copied into $TMPDIR: the file is skipped instead.
  const auto db_bytes = fs::file_size(path, ec);
  const auto journal_bytes = ec ? 0 : fs::file_size(path + "-journal", ec);
  if (ec) throw FileSkip("hot journal that cannot be measured: " + ec.message());
  if (journal_bytes > kMaxJournalFactor * db_bytes + kJournalSlackBytes)
    throw FileSkip("its -journal (" + std::to_string(journal_bytes) + " bytes) is larger than any rollback of a " +
                   std::to_string(db_bytes) + "-byte trace could need: not read");
  std::string tmpl = (fs::temp_directory_path(ec) / "lockstep-rollback-XXXXXX").string();
  if (ec || !mkdtemp(tmpl.data())) throw FileSkip("hot journal and no temporary directory to roll back a copy in");
  fs::path tmp(tmpl);
  auto copy = tmp / fs::path(path).filename();
  try {
    fs::copy_file(path, copy);
    fs::copy_file(path + "-journal", copy.string() + "-journal");
    trace_file::Db db = open_trace(copy.string(), SQLITE_OPEN_READWRITE, opt.busy_timeout_ms);
    fn(db.get());
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
  fs::remove_all(tmp);
}

// Only regular files are opened: a FIFO, device or directory named like a trace would block or
// mislead the reader. stat, not open, decides (opening a FIFO for reading blocks).
std::string not_regular(const std::string& path, int64_t* size = nullptr) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::string("cannot stat: ") + std::strerror(errno);
  if (size) *size = int64_t(st.st_size);
  if (S_ISREG(st.st_mode)) return "";
  const char* kind = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory"
                   : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a file";
  return std::string("not a regular file (") + kind + ")";
}

// SQLite's memory statistics take a global mutex on every allocation, which the loader's
// threads contend on; the analyzer never reads them. Only possible before SQLite's first use
// in the process (later it is a harmless SQLITE_MISUSE).
// Each connection allocates and frees its page cache and parser memory: glibc would give the
// freed top of its arena back to the kernel after every file and fault fresh zeroed pages in for
// the next (a third of a summary-first read's CPU at 2,048 files). Keep up to 64 MiB instead.
void configure_process_for_loading() {
  static std::once_flag once;
  std::call_once(once, [] {
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    mallopt(M_TOP_PAD, 1 << 20);
  });
}

// read_ahead: fn reads most of the file (read_ahead_vfs.h); a header is a few pages.
template <class Fn>
void read_file(const std::string& path, const LoadOptions& opt, Fn&& fn, bool read_ahead = true) {
  int64_t size = 0;
  std::string why = not_regular(path, &size);
  if (!why.empty()) throw FileSkip(why);
  // SQLite opens these beside the database: they must not be FIFOs either.
  for (const char* side : {"-journal", "-wal", "-shm"}) {
    struct stat st;
    if (lstat((path + side).c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw FileSkip(std::string("its ") + side + " file is not a regular file");
  }
  for (int attempt = 0;; ++attempt) {
    try {
      trace_file::Db db = open_trace(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, opt.busy_timeout_ms, read_ahead, size);
      // One read transaction for the whole file: one shared lock (and one hot-journal check)
      // instead of one per statement -- ~70 fcntl/stat calls a file -- and one consistent
      // snapshot of a live file. A recorder's COMMIT waits the few ms this takes (its
      // busy_timeout), as it already did for the longest statement.
      db.exec("BEGIN");
      try {
        const Validated file = validate(db.get(), path, size);
        fn(db.get(), file);
      } catch (const FileSkip& e) {
        if (sqlite3_extended_errcode(db.get()) != SQLITE_READONLY_ROLLBACK) throw;
        with_rollback_copy(path, opt, [&](sqlite3* copy) {
          const Validated file = validate(copy, path, size);
          fn(copy, file);
        });
      }
      return;
    } catch (const FileBusy& e) {
      if (attempt >= opt.busy_retries)
        throw FileSkip(std::string("still locked by its writer after retries (") + e.what() + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(50 << attempt));
    }
  }
}

std::vector<std::string> list_trace_files(const std::string& dir, std::vector<SkippedFile>* skipped = nullptr) {
  configure_process_for_loading();
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw LoadError("no such directory: " + dir);
  if (!fs::is_directory(dir, ec)) throw LoadError("not a directory: " + dir);
  std::vector<std::string> files;
  std::string suffix = schema::kFileSuffix;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      files.push_back(e.path().string());  // non-regular ones are skipped, with their reason, by read_file
  }
  if (ec) throw LoadError("cannot list " + dir + ": " + ec.message());
  // PyTorch Flight Recorder dumps are read as trace files converted once per run (flightrec/).
  auto fr = flightrec::converted_trace_files(dir);
  files.insert(files.end(), fr.trace_files.begin(), fr.trace_files.end());
  if (skipped) skipped->insert(skipped->end(), fr.skipped.begin(), fr.skipped.end());
  if (files.empty() && !fr.skipped.empty()) throw LoadError("no usable trace file or Flight Recorder dump in " + dir + ": " + fr.skipped[0].path + ": " + fr.skipped[0].reason);
  if (files.empty()) throw LoadError("no trace files (*" + suffix + ") in " + dir);
  std::sort(files.begin(), files.end());
  return files;
}


bool process_less(const Process& a, const Process& b) {
  // References, not copies: a copied path is an allocation per comparison (16,384 files: ~0.5 M).
  auto key = [](const Process& p) {
    return std::tuple<bool, int, const std::string&, int64_t, const std::string&>(p.global_rank < 0, p.global_rank, p.host,
                                                                                  p.pid, p.path);
  };
  return key(a) < key(b);
}

// Sorts the processes by process_less: an order of indices, then each process moved once or twice
// (a SchedProcess is 760 bytes; std::sort on them moves each ~log2(n) times).
void sort_processes(std::vector<SchedProcess>& procs) {
  std::vector<uint32_t> order(procs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return process_less(procs[a].info, procs[b].info); });
  // The permutation applied in place, cycle by cycle: no second array of processes.
  std::vector<char> placed(procs.size(), 0);
  for (size_t start = 0; start < procs.size(); ++start) {
    if (placed[start] || order[start] == start) continue;
    SchedProcess held = std::move(procs[start]);
    size_t at = start;
    while (order[at] != start) {
      procs[at] = std::move(procs[order[at]]);
      placed[at] = 1;
      at = order[at];
    }
    procs[at] = std::move(held);
    placed[at] = 1;
  }
}

}  // namespace

Process load_process_file(const std::string& path, const LoadOptions& options) {
  Process p;
  try {
    read_file(path, options, [&](sqlite3* db, const Validated& file) {
      p = Process{};
      p.path = path;
      read_header(db, file, p);
      read_ops_full(db, p);
    });
  } catch (const FileSkip& e) {
    throw LoadError(e.what());
  }
  return p;
}

Process load_process_counts(const std::string& path, RecordCounts& counts, const LoadOptions& options) {
  Process p;
  try {
    read_file(path, options, [&](sqlite3* db, const Validated& file) {
      p = Process{};
      p.path = path;
      counts = RecordCounts{};
      read_header(db, file, p);
      const bool v2 = compact_rows(p);
      // Schema 3 packs rc into state (trace_schema.h kOpRcShift).
      const std::string sql = v2 ? "SELECT count(*), coalesce(sum((state & 15) = ?1), 0) FROM " +
                                       trace_file::op_rows_source(trace_file::op_chunk_tables(file.schema))
                                 : "SELECT count(*), coalesce(sum(state = ?2), 0) FROM ops";
      Query ops(db, sql.c_str());
      ops.bind().i64(1, static_cast<int>(vocab::State::Captured)).text(2, vocab::name(vocab::State::Captured));
      if (ops.step()) counts.op_rows = ops.i64(0), counts.captured = ops.i64(1);
      if (file.schema.has_table("graph_launches")) {
        Query launches(db, "SELECT count(*) FROM graph_launches");
        if (launches.step()) counts.graph_launches = launches.i64(0);
      }
      if (p.meta.count(schema::meta::kProfilerPlugin) && file.schema.has_table("profiler_ops")) {
        Query plugin(db, "SELECT count(*), coalesce(sum(seen_by != ?1), 0) FROM profiler_ops");
        plugin.bind().text(1, schema::kSeenByBoth);
        if (plugin.step()) counts.plugin_calls = plugin.i64(0), counts.plugin_only = plugin.i64(1);
      }
    });
  } catch (const FileSkip& e) {
    throw LoadError(e.what());
  }
  return p;
}

Schedule load_headers(const std::string& dir, const LoadOptions& options) {
  Schedule s;
  auto files = list_trace_files(dir, &s.skipped);
  std::vector<Process> procs(files.size());
  std::vector<std::string> reasons(files.size());
  // A consistent node summary holds the headers of the files it covers: one file a node is
  // opened instead of one a rank (16,384 headers: ~15 CPU-s read from the files).
  std::vector<char> from_summary(files.size(), 0);
  if (options.use_summaries) {
    SummaryCover cover = cover_from_summaries(dir, files, options.threads, /*headers_only=*/true);
    cover.each([&](size_t i, LoadedFile& f) {
      procs[i] = std::move(f.proc.info);
      procs[i].path = files[i];
      from_summary[i] = 1;
    });
    s.summaries = std::move(cover.use);
  }
  parallel_for(files.size(), options.threads, [&](size_t i) {
    if (from_summary[i]) return;
    try {
      read_file(
          files[i], options,
          [&](sqlite3* db, const Validated& file) {
            procs[i] = Process{};
            procs[i].path = files[i];
            read_header(db, file, procs[i]);
          },
          /*read_ahead=*/false);
    } catch (const FileSkip& e) {
      reasons[i] = e.what();
    }
  });
  s.dir = dir;
  for (size_t i = 0; i < files.size(); ++i) {
    if (reasons[i].empty())
      s.procs.emplace_back().info = std::move(procs[i]);
    else
      s.skipped.push_back({files[i], reasons[i]});
  }
  resolve_rank_identity(s);
  sort_processes(s.procs);
  return s;
}

namespace {

// Summary-first: a file's own cut per communicator, its newest checkpoint with no
// point-to-point op before it (seq == ordinal). Empty: the file is read whole (not the recorder's
// current digest, history retired or dropped, digest gaps).
Cuts own_cuts(const Process& p) {
  if (!compact_rows(p) || p.checkpoint_interval <= 0 || p.retired_ops > 0 || p.dropped_records > 0) return {};
  auto meta = [&](const char* k) {
    auto it = p.meta.find(k);
    return it == p.meta.end() ? std::string() : it->second;
  };
  if (meta(schema::meta::kDigestVersion) != std::to_string(digest::kDigestVersion)) return {};
  if (const std::string gaps = meta(schema::meta::kDigestGaps); !gaps.empty() && gaps != "0") return {};
  Cuts cuts(p.comms.size(), 0);
  for (size_t c = 0; c < p.comms.size(); ++c) {
    const Comm& comm = p.comms[c];
    if (comm.retired_collectives != 0 || comm.retired_through_seq != 0) return {};
    for (auto k = comm.checkpoints.rbegin(); k != comm.checkpoints.rend(); ++k)
      if (k->ordinal > 0 && k->seq == k->ordinal) {
        cuts[c] = k->ordinal;
        break;
      }
  }
  return cuts;
}

// Summary-first, across files: each communicator's cut is the newest ordinal that every member
// read up to and at which every member's checkpoint has the same digest (0: read it whole). The
// files whose cut must move back, with their new cuts; empty entries: the file stays as read.
std::vector<Cuts> agreed_cuts(const std::vector<SchedProcess>& procs, const std::vector<std::string>& reasons) {
  struct Member {
    size_t proc, local;
  };
  std::unordered_map<std::string, std::vector<Member>> by_hash;
  std::unordered_map<std::string, bool> twice;  // a file that holds the hash twice: never cut
  for (size_t i = 0; i < procs.size(); ++i) {
    if (!reasons[i].empty()) continue;
    const auto& comms = procs[i].info.comms;
    for (size_t l = 0; l < comms.size(); ++l) {
      auto& ms = by_hash[comms[l].hash];
      if (!ms.empty() && ms.back().proc == i) twice[comms[l].hash] = true;
      ms.push_back({i, l});
    }
  }
  auto read_from = [&](const Member& m) {
    const auto& u = procs[m.proc].unread;
    return m.local < u.size() ? u[m.local].collectives : 0;
  };
  auto checkpoint = [&](const Member& m, int64_t k) -> const Comm::Checkpoint* {
    const Comm::Checkpoint* c = checkpoint_at(procs[m.proc].info.comms[m.local], k);
    return c && c->seq == k ? c : nullptr;
  };
  std::vector<Cuts> out(procs.size());
  for (auto& [hash, ms] : by_hash) {
    int64_t k = INT64_MAX;
    for (const Member& m : ms) k = std::min(k, read_from(m));
    if (twice.count(hash)) k = 0;
    while (k > 0) {
      const Comm::Checkpoint* first = checkpoint(ms[0], k);
      bool agree = first != nullptr;
      for (size_t j = 1; agree && j < ms.size(); ++j) {
        const Comm::Checkpoint* c = checkpoint(ms[j], k);
        agree = c && c->digest == first->digest;
      }
      if (agree) break;
      // The next older checkpoint of the first member (digests that differ at k differ after).
      const auto& cps = procs[ms[0].proc].info.comms[ms[0].local].checkpoints;
      auto it = std::lower_bound(cps.begin(), cps.end(), k, [](const Comm::Checkpoint& c, int64_t v) { return c.ordinal < v; });
      k = it == cps.begin() ? 0 : std::prev(it)->ordinal;
    }
    for (const Member& m : ms) {
      if (read_from(m) == k) continue;
      Cuts& c = out[m.proc];
      if (c.empty()) {
        c.assign(procs[m.proc].info.comms.size(), 0);
        for (size_t l = 0; l < procs[m.proc].unread.size() && l < c.size(); ++l) c[l] = procs[m.proc].unread[l].collectives;
      }
      c[m.local] = k;
    }
  }
  return out;
}

// One file into sp and sigs (reason: why it is unusable, else empty). Summary-first: from its
// own cuts, or from `forced` ones.
void load_file(const std::string& path, const LoadOptions& options, bool summary_first, const Cuts* forced,
               SchedProcess& sp, SignatureTable& sigs, std::string& reason) {
  reason.clear();
  try {
    read_file(path, options, [&](sqlite3* db, const Validated& file) {
      sp = SchedProcess{};
      sigs = SignatureTable{};
      sp.info.path = path;
      read_header(db, file, sp.info);
      const Cuts cuts = forced ? *forced : summary_first ? own_cuts(sp.info) : Cuts{};
      bool op_threads = options.host_waits;  // in: wanted; out: read with the ops
      try {
        try {
          read_ops_compact(db, file, sp, sigs, cuts.empty() ? nullptr : &cuts, &op_threads);
        } catch (const CutUnproven&) {
          Process info = std::move(sp.info);
          sp = SchedProcess{};
          sp.info = std::move(info);
          op_threads = options.host_waits;
          read_ops_compact(db, file, sp, sigs, nullptr, &op_threads);
        }
      } catch (const IndexError& e) {
        throw FileSkip(std::string("corrupt: ") + e.what());
      }
      if (options.host_waits)
        if (auto e = read_host_waits(db, sp, op_threads)) e->sqlite_rc ? fail(db, e->sqlite_rc, e->what) : throw FileSkip(e->what);
    });
  } catch (const FileSkip& e) {
    reason = e.what();
  }
}

// The full rows of `files` into s (its skipped list appended); rank identity not resolved.
void load_files(Schedule& s, const std::string& dir, const std::vector<std::string>& files, const LoadOptions& options) {
  std::vector<SchedProcess> procs(files.size());
  std::vector<SignatureTable> local_sigs(files.size());
  std::vector<std::string> reasons(files.size());
  const bool summary_first = options.summary_first && !options.host_waits;
  auto load_one = [&](size_t i, const Cuts* forced) {
    load_file(files[i], options, summary_first, forced, procs[i], local_sigs[i], reasons[i]);
  };
  // Node summaries (node_summary.h) stand for the files they cover while those are unchanged.
  // Their signatures are distinct already (check_loaded_file interned them): kept as they are.
  std::vector<char> from_summary(files.size(), 0);
  std::vector<std::vector<Signature>> summary_sigs;
  if (summary_first && options.use_summaries) {
    SummaryCover cover = cover_from_summaries(dir, files, options.threads);
    summary_sigs.resize(files.size());
    cover.each([&](size_t i, LoadedFile& f) {
      procs[i] = std::move(f.proc);
      procs[i].info.path = files[i];
      summary_sigs[i] = std::move(f.sigs);
      reasons[i].clear();
      from_summary[i] = 1;
    });
    s.summaries = std::move(cover.use);
  }
  parallel_for(files.size(), options.threads, [&](size_t i) {
    if (!from_summary[i]) load_one(i, nullptr);
  });
  // Summary-first: files whose cut is newer than what their communicators' members agree on
  // are read again from the agreed cut (a member read whole moves its peers' cuts to 0).
  for (int round = 0; summary_first; ++round) {
    std::vector<Cuts> again = agreed_cuts(procs, reasons);
    std::vector<size_t> redo;
    for (size_t i = 0; i < again.size(); ++i)
      if (!again[i].empty()) {
        if (round >= 4) again[i].assign(again[i].size(), 0);
        redo.push_back(i);
      }
    if (redo.empty()) break;
    for (size_t i : redo) from_summary[i] = 0;  // read again from its file
    parallel_for(redo.size(), options.threads, [&](size_t j) { load_one(redo[j], &again[redo[j]]); });
    if (round >= 4) break;
  }
  s.dir = dir;
  s.summary_first = summary_first;
  SignatureTable global;
  std::vector<uint32_t> remap;
  std::vector<Signature> previous;  // the signatures `remap` is of
  size_t kept = 0;  // the usable processes, compacted in place (no second array of them)
  for (size_t i = 0; i < files.size(); ++i) {
    if (!reasons[i].empty()) {
      s.skipped.push_back({files[i], reasons[i]});
      continue;
    }
    std::vector<Signature> sigs = from_summary[i] ? std::move(summary_sigs[i]) : local_sigs[i].take();
    // Ranks of one job mostly issue the same signatures: the previous file's list, equal field
    // for field (the relation signature_key interns by), keeps its remap.
    if (!std::equal(sigs.begin(), sigs.end(), previous.begin(), previous.end(), same_signature)) {
      remap.clear();
      for (const Signature& sig : sigs) remap.push_back(global.intern(sig));
      previous = std::move(sigs);
    }
    if (global.table().size() > kMaxSignatures)
      throw LoadError("more than " + std::to_string(kMaxSignatures) + " distinct op signatures in " + dir + ": not supported");
    for (auto& o : procs[i].ops) o.sig = remap[o.sig];
    if (kept != i) procs[kept] = std::move(procs[i]);
    ++kept;
  }
  procs.erase(procs.begin() + static_cast<ptrdiff_t>(kept), procs.end());
  if (s.procs.empty()) {
    s.procs = std::move(procs);
  } else {
    for (auto& p : procs) s.procs.push_back(std::move(p));
  }
  s.sigs = global.take();
}

}  // namespace

LoadedFile load_file_summary_first(const std::string& path, const LoadOptions& options) {
  configure_process_for_loading();
  LoadedFile f;
  SignatureTable sigs;
  load_file(path, options, true, nullptr, f.proc, sigs, f.reason);
  f.sigs = sigs.take();
  return f;
}

std::string check_loaded_file(LoadedFile& f) {
  Process& p = f.proc.info;
  SchedProcess& sp = f.proc;
  const int64_t n = static_cast<int64_t>(p.comms.size());
  try {
    header_from_meta(p);
    p.checkpoint_interval = p.retired_ops = 0;
    if (compact_rows(p)) {
      p.checkpoint_interval = strict_count(p, schema::meta::kCheckpointInterval);
      p.retired_ops = strict_count(p, schema::meta::kRetiredOps);
    }
    for (const Comm& c : p.comms) {
      if (c.parent < -1 || c.parent >= n) return "a communicator's parent is out of range";
      if (c.retired_collectives < 0 || c.retired_through_seq < 0) return "negative retired counts";
      if (!compact_rows(p) && (!c.checkpoints.empty() || c.retired_collectives || c.retired_through_seq))
        return "checkpoints in a schema-1 trace";
      for (size_t k = 1; k < c.checkpoints.size(); ++k)
        if (c.checkpoints[k].ordinal < c.checkpoints[k - 1].ordinal) return "checkpoints out of order";
    }
    for (size_t k = 0; k < p.nocolor_splits.size(); ++k) {
      const NoColorSplit& x = p.nocolor_splits[k];
      if (x.parent < 0 || x.parent >= n || (k > 0 && x.call_index < p.nocolor_splits[k - 1].call_index))
        return "a NOCOLOR split out of range or order";
    }
    for (const DropRange& d : p.drops) {
      DropRange norm = d;
      normalize_drop(norm);
      if (d.comm < -1 || d.comm >= n || norm.first_seq != d.first_seq || norm.last_seq != d.last_seq ||
          norm.stop_point != d.stop_point || d.records < 0 || d.reason.size() > 64 ||
          (d.stop_point && d.reason != schema::kDropRecorderStopped))
        return "a drops range the loader does not make";
    }
    if (std::string defect = header_defect(p); !defect.empty()) return defect;
    // Signatures as the loader checks them, interned again: equal ones share an index. A file's
    // few signatures are distinct as summarize wrote them: then compared pairwise (no key built,
    // no table), each index is its own.
    for (const Signature& sig : f.sigs) {
      check_op_numbers(0, 1, sig.count, sig.root, sig.peer);
      for (const OpPart& part : sig.parts) check_part(0, part);
    }
    constexpr size_t kPairwise = 64;
    bool distinct = f.sigs.size() <= kPairwise;
    for (size_t a = 0; distinct && a < f.sigs.size(); ++a)
      for (size_t b = a + 1; distinct && b < f.sigs.size(); ++b) distinct = !same_signature(f.sigs[a], f.sigs[b]);
    if (distinct) {
      for (Signature& sig : f.sigs) sig.cls = classify_op(sig.op);
      for (const SchedOp& o : sp.ops)
        if (o.sig >= f.sigs.size() || o.comm >= n) return "an op names no signature or communicator";
    } else {
      SignatureTable table;
      std::vector<uint32_t> remap;
      for (Signature& sig : f.sigs) remap.push_back(table.intern(std::move(sig)));
      f.sigs = table.take();
      for (SchedOp& o : sp.ops) {
        if (o.sig >= remap.size() || o.comm >= n) return "an op names no signature or communicator";
        o.sig = remap[o.sig];
      }
    }
  } catch (const FileSkip& e) {
    return e.what();
  }
  constexpr int64_t kMaxOps = int64_t(1) << 40;
  if (sp.unsequenced_ops < 0 || sp.unsequenced_ops > kMaxOps || sp.unread_ops < 0 || sp.unread_ops > kMaxOps)
    return "op counts out of range";
  if (!sp.unread.empty() && sp.unread.size() != p.comms.size()) return "unread prefixes do not match the communicators";
  int64_t unread = 0;  // the loader's rule: the ops not read are the collectives before the cuts
  for (const auto& u : sp.unread) {
    if (u.collectives < 0 || u.collectives > kMaxSeq) return "an unread prefix out of range";
    unread += u.collectives;
  }
  if (unread != sp.unread_ops) return "ops not read that are not the unread prefixes";
  if (!sp.unread.empty())
    for (const SchedOp& o : sp.ops)
      if (o.seq <= sp.unread[o.comm].collectives) return "an op read inside its communicator's unread prefix";
  for (size_t k = 1; k < sp.in_flight_issue.size(); ++k)
    if (sp.in_flight_issue[k].first <= sp.in_flight_issue[k - 1].first) return "ops in flight out of order";
  return "";
}

Schedule load_schedule(const std::string& dir, const LoadOptions& options) {
  Schedule s;
  auto files = list_trace_files(dir, &s.skipped);
  load_files(s, dir, files, options);
  resolve_rank_identity(s);
  sort_processes(s.procs);
  return s;
}

Schedule load_schedule_of(const Schedule& headers, const std::vector<int>& procs, const LoadOptions& options) {
  Schedule s;
  s.skipped = headers.skipped;
  std::vector<std::string> files;
  for (int p : procs) files.push_back(headers.procs[p].info.path);
  load_files(s, headers.dir, files, options);
  // Rank identity is resolved over every file of the directory: taken from the headers.
  std::map<std::string, const Process*> by_path;
  for (const SchedProcess& h : headers.procs) by_path[h.info.path] = &h.info;
  for (SchedProcess& sp : s.procs) {
    const Process& h = *by_path.at(sp.info.path);
    sp.info.global_rank = h.global_rank;
    sp.info.global_rank_source = h.global_rank_source;
    sp.info.rank_conflict = h.rank_conflict;
  }
  sort_processes(s.procs);
  return s;
}

namespace {

class FileDetails : public TraceDetails {
 public:
  explicit FileDetails(const Schedule& s) : s_(s) {}

  std::optional<Op> op(int proc, int64_t call_index) override {
    auto v = ops_between(proc, call_index, call_index, 1, false, /*sequenced_only=*/false);
    if (v.empty()) return std::nullopt;
    return v.front();
  }
  std::vector<Op> ops_between(int proc, int64_t from, int64_t to, int limit, bool newest) override {
    return ops_between(proc, from, to, limit, newest, true);
  }
  std::optional<SeqAt> first_of_comm(int proc, int comm, int64_t from, int64_t to) override {
    const std::vector<Comm>& comms = s_.procs[proc].info.comms;
    if (comm < 0 || static_cast<size_t>(comm) >= comms.size()) return std::nullopt;
    try {
      // One statement a file, kept for the bisection's next question (find_op_by_seq).
      if (probe_proc_ != proc || !probe_) {
        probe_.reset();
        sqlite3* db = open(proc);
        const OpSources src = op_sources(db, s_.procs[proc].info);
        probe_ = std::make_unique<Query>(db, ("SELECT call_index, seq FROM " + src.ops +
                                              " WHERE call_index BETWEEN ?1 AND ?2 AND comm_id = ?3 AND seq IS NOT NULL"
                                              " AND state != 'captured' ORDER BY call_index LIMIT 1")
                                                 .c_str());
        probe_proc_ = proc;
      }
      probe_->bind().i64(1, from).i64(2, to).i64(3, comms[comm].local_id);
      std::optional<SeqAt> first;
      if (probe_->step()) first = SeqAt{probe_->i64(0), probe_->i64(1)};
      // Reset at once: a statement left on its row keeps the file's shared lock, and a live
      // recorder's next commit would wait for it.
      probe_->bind().reset();
      return first;
    } catch (const std::exception&) {
      probe_.reset();
      return std::nullopt;
    }
  }
  std::vector<Frame> stack(int proc, int64_t stack_id) override {
    std::vector<Frame> out;
    if (stack_id < 0) return out;
    try {
      sqlite3* db = open(proc);
      Query fr(db, "SELECT kind, function, module, offset, file, line FROM frames WHERE stack_id=? ORDER BY depth");
      fr.bind().i64(1, stack_id);
      while (fr.step()) out.push_back(read_frame(fr, 0));
    } catch (const std::exception& e) {
      // A detail that cannot be read is left out of the report (the analysis stands) and said
      // to be unreadable where the stack would be (stack_error).
      stack_errors_[{proc, stack_id}] = e.what();
    }
    return out;
  }
  std::string stack_error(int proc, int64_t stack_id) override {
    auto it = stack_errors_.find({proc, stack_id});
    return it == stack_errors_.end() ? std::string() : it->second;
  }

 private:
  std::vector<Op> ops_between(int proc, int64_t from, int64_t to, int limit, bool newest, bool sequenced_only) {
    std::vector<Op> out;
    try {
      sqlite3* db = open(proc);
      CommIds ids(s_.procs[proc].info);
      const OpSources src = op_sources(db, s_.procs[proc].info);
      std::string sql = "SELECT " + std::string(kOpColumns) + " FROM " + src.ops + " WHERE call_index BETWEEN ?1 AND ?2" +
                        (sequenced_only ? " AND seq IS NOT NULL AND state != 'captured'" : "") + " ORDER BY call_index " +
                        (newest ? "DESC" : "ASC") + " LIMIT ?3";
      Query st(db, sql.c_str());
      st.bind().i64(1, from).i64(2, to).i64(3, limit);
      while (st.step()) out.push_back(read_op_row(st, ids));
      if (newest) std::reverse(out.begin(), out.end());
      Query parts(db, ("SELECT call_index, op, dtype, count, root, peer, redop FROM " + src.parts +
                      " WHERE call_index=? ORDER BY part").c_str());
      Query done(db, ("SELECT mono_ns FROM " + src.done + " WHERE call_index=?").c_str());
      for (Op& o : out) {
        parts.bind().reset();
        parts.bind().i64(1, o.call_index);
        while (parts.step()) o.parts.push_back(read_part(parts, 1));
        done.bind().reset();
        done.bind().i64(1, o.call_index);
        if (done.step()) {
          o.completed = true;
          o.complete_mono_ns = done.i64(0);
        }
      }
    } catch (const std::exception&) {
    }
    return out;
  }

  sqlite3* open(int proc) {
    // Connections are kept for the next question about the same rank, a bounded number of them:
    // each holds its schema and page cache (~80 KB), and a report may ask about every rank.
    if (dbs_.size() >= kOpenAtMost && !dbs_.count(proc)) {
      probe_.reset();  // a statement is finalized before its connection closes
      dbs_.clear();
    }
    auto& db = dbs_[proc];
    if (!db) db = open_trace(s_.procs[proc].info.path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, 2000, /*read_ahead=*/false);
    return db.get();
  }

  static constexpr size_t kOpenAtMost = 64;
  const Schedule& s_;
  std::map<int, trace_file::Db> dbs_;
  std::map<std::pair<int, int64_t>, std::string> stack_errors_;  // (proc, stack_id): why unreadable
  int probe_proc_ = -1;
  std::unique_ptr<Query> probe_;  // after dbs_: destroyed before the connections
};

}  // namespace

// Reads one file's plugin tables. false: the file has none (NCCL never loaded the plugin there).
bool load_plugin_coverage(const std::string& path, size_t max_examples, ProcessCoverage* out) {
  trace_file::Db db;
  if (db.open_untrusted(path) != SQLITE_OK) return false;
  db.busy_timeout(2000);
  if (std::string why = trace_file::unsafe_object(db.get(), schema::kSchemaVersion); !why.empty()) {
    out->error = why;
    return false;
  }
  bool any = false;
  auto query = [&](const char* sql, auto&& each) {
    trace_file::Stmt st(db.get(), sql, false);
    if (!st.ok()) {
      if (any && out->error.empty()) out->error = db.errmsg();
      return false;
    }
    st.text(1, schema::kSeenByBoth);  // ?1 where a query has it
    int rc;
    while ((rc = st.step()) == SQLITE_ROW) each(st);
    if (rc != SQLITE_DONE && out->error.empty()) out->error = db.errmsg();
    return true;
  };
  int64_t comms = 0;
  if (!query("SELECT count(*) FROM profiler_comms", [&](const trace_file::Stmt& st) { comms = st.column_i64(0); }) ||
      comms == 0)
    return false;
  any = true;
  query("SELECT count(*), coalesce(sum(seen_by != ?1), 0) FROM profiler_ops", [&](const trace_file::Stmt& st) {
    out->plugin_calls = st.column_i64(0);
    out->missed = st.column_i64(1);
  });
  const std::string examples =
      "SELECT coalesce(o.op, o.nccl_func), o.dtype, o.count, c.nccl_comm_hash, o.nccl_seq, o.call_index FROM profiler_ops o "
      "LEFT JOIN profiler_comms c ON c.id = o.profiler_comm WHERE o.seen_by != ?1 ORDER BY o.id LIMIT " +
      std::to_string(max_examples);
  query(examples.c_str(), [&](const trace_file::Stmt& st) {
    MissedCall m;
    m.op = std::string(st.column_text(0));
    m.dtype = std::string(st.column_text(1));
    m.count = st.column_i64(2);
    m.nccl_comm = std::string(st.column_text(3));
    m.nccl_seq = st.is_null(4) ? -1 : st.column_i64(4);
    m.call_index = st.is_null(5) ? -1 : st.column_i64(5);
    out->examples.push_back(std::move(m));
  });
  return true;
}

std::unique_ptr<TraceDetails> details_from_files(const Schedule& s) { return std::make_unique<FileDetails>(s); }

trace_file::TextInt meta_int(const Process& p, const char* key) {
  auto it = p.meta.find(key);
  return it == p.meta.end() ? trace_file::TextInt{} : trace_file::parse_int(it->second);
}

}  // namespace lockstep
