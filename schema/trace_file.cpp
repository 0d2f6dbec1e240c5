#include "trace_file.h"

#include "read_ahead_vfs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdio>
#include <vector>

namespace lockstep::trace_file {

// DDL of other components' tables, created with the trace's own (a plugin's table goes here:
// one string per component, each CREATE ... IF NOT EXISTS).
static const char* const kExtraCreateSql[] = {""};

Stmt::Stmt(sqlite3* db, const char* sql, bool persistent) {
  if (sqlite3_prepare_v3(db, sql, -1, persistent ? SQLITE_PREPARE_PERSISTENT : 0, &st_, nullptr) != SQLITE_OK) {
    sqlite3_finalize(st_);
    st_ = nullptr;
  }
}

Stmt& Stmt::operator=(Stmt&& o) noexcept {
  if (this != &o) {
    sqlite3_finalize(st_);
    st_ = o.st_;
    o.st_ = nullptr;
  }
  return *this;
}

int Stmt::run() {
  int rc = sqlite3_step(st_);
  sqlite3_reset(st_);
  return rc;
}

// The step budget of an untrusted connection: the progress handler runs every kStepsPerCall VM
// instructions and interrupts the connection once `left` calls have been spent.
struct ReadBudget {
  static constexpr int kStepsPerCall = 10000;
  int64_t left = 0;
  bool exhausted = false;
};

Db::Db() = default;
Db::~Db() { close(); }
Db::Db(Db&& o) noexcept : db_(o.db_), budget_(std::move(o.budget_)) { o.db_ = nullptr; }

Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    close();
    db_ = o.db_;
    o.db_ = nullptr;
    budget_ = std::move(o.budget_);
  }
  return *this;
}

int Db::open_untrusted(const std::string& path, int flags, bool read_ahead, int64_t known_bytes) {
  int rc = open(path, flags, read_ahead && (flags & SQLITE_OPEN_READONLY) ? read_ahead_vfs() : nullptr);
  if (rc != SQLITE_OK) return rc;
  int unused = 0;
  sqlite3_db_config(db_, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, &unused);
  sqlite3_db_config(db_, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, &unused);
  sqlite3_db_config(db_, SQLITE_DBCONFIG_DEFENSIVE, 1, &unused);
  sqlite3_db_config(db_, SQLITE_DBCONFIG_ENABLE_VIEW, 0, &unused);
  sqlite3_db_config(db_, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, &unused);
  sqlite3_limit(db_, SQLITE_LIMIT_LENGTH, kMaxValueBytes);
  sqlite3_limit(db_, SQLITE_LIMIT_EXPR_DEPTH, 100);
  sqlite3_limit(db_, SQLITE_LIMIT_ATTACHED, 0);
  // Every read the loader makes is a scan, a join on a key or a sort of the file's rows: a few
  // hundred VM steps per stored byte at most. A billion steps on top covers small files; only a
  // query the file's own bytes made endless reaches the bound.
  struct stat st;
  const int64_t bytes = known_bytes >= 0 ? known_bytes : ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : 0;
  budget_ = std::make_unique<ReadBudget>();
  budget_->left = (int64_t(1000000000) + 512 * bytes) / ReadBudget::kStepsPerCall;
  sqlite3_progress_handler(
      db_, ReadBudget::kStepsPerCall,
      [](void* p) {
        auto* b = static_cast<ReadBudget*>(p);
        if (--b->left >= 0) return 0;
        b->exhausted = true;
        return 1;
      },
      budget_.get());
  return SQLITE_OK;
}

bool Db::budget_exhausted() const { return budget_ && budget_->exhausted; }

int read_schema(sqlite3* db, FileSchema& out) {
  out.objects.clear();
  Stmt st(db, "SELECT type, name, tbl_name, sql FROM sqlite_schema", false);
  if (!st.ok()) return sqlite3_errcode(db) != SQLITE_OK ? sqlite3_errcode(db) : SQLITE_ERROR;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW)
    out.objects.push_back({std::string(st.column_text(0)), std::string(st.column_text(1)), std::string(st.column_text(2)),
                           std::string(st.column_text(3))});
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

bool FileSchema::has_table(std::string_view name) const {
  for (const SchemaObject& o : objects)
    if (o.type == "table" && o.name == name) return true;
  return false;
}

namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return r;
}

// Whether `sql` has the word AS anywhere, quoted or not: a generated column is declared with
// AS (GENERATED ALWAYS is optional), and SQLite's tokenizer ends a word only at a character that
// is not a letter, digit, '_', '$' or a byte >= 0x80, so any AS keyword it reads is found here.
// Also true for CAST(x AS ...), a name containing " as ", and the like: those tables are asked.
bool may_declare_generated(std::string_view sql) {
  auto word_char = [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' || c >= 0x80;
  };
  for (size_t i = 0; i + 1 < sql.size(); ++i) {
    if ((sql[i] | 0x20) != 'a' || (sql[i + 1] | 0x20) != 's') continue;
    if (i > 0 && word_char(static_cast<unsigned char>(sql[i - 1]))) continue;
    if (i + 2 < sql.size() && word_char(static_cast<unsigned char>(sql[i + 2]))) continue;
    return true;
  }
  return false;
}

}  // namespace

std::string unsafe_object(sqlite3* db, int64_t schema_version) {
  FileSchema schema;
  if (read_schema(db, schema) != SQLITE_OK) return std::string("cannot read its schema: ") + sqlite3_errmsg(db);
  return unsafe_object(db, schema, schema_version);
}

std::string unsafe_object(sqlite3* db, const FileSchema& schema, int64_t schema_version) {
  static const char* const kRead[] = {"meta", "env", "comms", "hangs", "api_calls", "checkpoints", "signatures",
                                      "signature_parts", "op_graph", "stacks", "frames", "graph_launches", "waits",
                                      "profiler_ops", "profiler_comms", "op_rows", "drops"};
  static const char* const kReadV1[] = {"ops", "op_parts", "completions"};
  auto is_read = [&](const std::string& name) {
    for (const char* t : kRead)
      if (name == t) return true;
    if (schema_version <= 1)
      for (const char* t : kReadV1)
        if (name == t) return true;
    // op_rows_<k>: the chunk tables (op_chunk_tables reads any name of that form).
    return name.rfind("op_rows_", 0) == 0 && name.size() > 8 &&
           name.find_first_not_of("0123456789", 8) == std::string::npos;
  };
  std::vector<std::string> ask;  // tables whose SQL may declare a generated column
  for (const SchemaObject& o : schema.objects) {
    const std::string type = lower(o.type), name = lower(o.name), table = lower(o.tbl_name), sql = lower(o.sql);
    if (type == "trigger" && is_read(table)) return "corrupt: its " + table + " table has a trigger";
    if (!is_read(name)) continue;
    if (type == "view") return "corrupt: its " + name + " is a view, not a table";
    if (type != "table") continue;  // an index of one of them
    if (sql.rfind("create virtual", 0) == 0) return "corrupt: its " + name + " is a virtual table";
    if (may_declare_generated(sql)) ask.push_back(name);
  }
  // A generated column computes its value on every read: no writer makes one. The tables the
  // writers make have no AS in their SQL and are not asked; the others in one query (the names
  // are the reader's own, is_read: lower-case letters, digits and '_', safe inside quotes).
  if (ask.empty()) return "";
  std::string sql;
  for (const std::string& name : ask)
    sql += (sql.empty() ? "" : " UNION ALL ") + std::string("SELECT '") + name + "' FROM pragma_table_xinfo('" + name +
           "') WHERE hidden != 0";
  Stmt cols(db, (sql + " LIMIT 1").c_str(), false);
  if (!cols.ok()) return std::string("cannot read its schema: ") + sqlite3_errmsg(db);
  int rc;
  if ((rc = cols.step()) == SQLITE_ROW) return "corrupt: its " + std::string(cols.column_text(0)) + " table has a generated column";
  if (rc != SQLITE_DONE) return std::string("cannot read its schema: ") + sqlite3_errmsg(db);
  return "";
}

int Db::open(const std::string& path, int flags, const char* vfs) {
  close();
  return sqlite3_open_v2(path.c_str(), &db_, flags, vfs);
}

void Db::close() {
  if (db_) sqlite3_close_v2(db_);
  db_ = nullptr;
  budget_.reset();
}

int Db::exec(const char* sql) { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); }

void Db::check(int rc, const std::string& what) const {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return;
  throw Error(what + ": " + errmsg());
}

int64_t Db::scalar(const char* sql, int64_t dflt) {
  Stmt st(db_, sql, false);
  if (!st.ok()) return dflt;
  int64_t v = st.step() == SQLITE_ROW ? sqlite3_column_int64(st.get(), 0) : dflt;
  return v;
}

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

namespace {

// CASE expression mapping an enum column to its vocab name ("" entries left out).
template <size_t N>
std::string names_case(const std::string& col, const char* const (&names)[N]) {
  std::string s = "CASE " + col;
  for (size_t i = 0; i < N; ++i) s += " WHEN " + std::to_string(i) + " THEN '" + names[i] + "'";
  return s + " ELSE " + col + " END";  // a name outside the vocabulary is stored as text
}

}  // namespace

// SQLite keeps each CREATE statement's text in sqlite_schema, comments and indentation included:
// in a small trace that is a good part of the file. The comments stay in trace_schema.h.
std::string compact_sql(std::string_view sql) {
  std::string out;
  out.reserve(sql.size());
  bool quoted = false;
  for (size_t i = 0; i < sql.size(); ++i) {
    char c = sql[i];
    if (c == '\'') quoted = !quoted;
    if (!quoted && c == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
      while (i < sql.size() && sql[i] != '\n') ++i;
      c = ' ';
    }
    if (!quoted && (c == ' ' || c == '\n' || c == '\t')) {
      if (!out.empty() && out.back() != ' ' && out.back() != '(') out += ' ';
      continue;
    }
    if (!quoted && (c == ')' || c == ',') && !out.empty() && out.back() == ' ') out.pop_back();
    out += c;
  }
  return out;
}

std::string op_chunk_table(int64_t k) {
  return k == 0 ? std::string(schema::kOpRowsTable) : std::string(schema::kOpRowsTable) + "_" + std::to_string(k);
}

std::vector<std::string> op_chunk_tables(sqlite3* db) {
  FileSchema schema;
  if (read_schema(db, schema) != SQLITE_OK) return {};
  return op_chunk_tables(schema);
}

std::vector<std::string> op_chunk_tables(const FileSchema& file) {
  std::vector<std::pair<int64_t, std::string>> found;
  const std::string_view prefix = "op_rows_";
  for (const SchemaObject& o : file.objects) {
    if (o.type != "table") continue;
    const std::string& name = o.name;
    if (name == schema::kOpRowsTable) {
      found.emplace_back(0, name);
      continue;
    }
    if (name.size() <= prefix.size() || name.size() > prefix.size() + 15 || name.compare(0, prefix.size(), prefix) != 0 ||
        name[prefix.size()] == '0')
      continue;
    int64_t k = 0;
    bool digits = true;
    for (size_t i = prefix.size(); i < name.size(); ++i) {
      if (name[i] < '0' || name[i] > '9') digits = false;
      else k = k * 10 + (name[i] - '0');
    }
    if (digits) found.emplace_back(k, name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

namespace {
// SQLite refuses a compound SELECT of more than 500 terms (SQLITE_MAX_COMPOUND_SELECT): past
// this many chunk tables the UNION ALL is nested, each subquery a compound of its own (a
// crafted file can name any number of op_rows_<k> tables).
constexpr size_t kUnionTerms = 256;

// SELECT * over sources [lo, hi), in order.
std::string union_all(const std::vector<std::string>& sources, size_t lo, size_t hi) {
  std::string s;
  if (hi - lo <= kUnionTerms) {
    for (size_t i = lo; i < hi; ++i) s += (i > lo ? " UNION ALL SELECT * FROM " : "SELECT * FROM ") + sources[i];
    return s;
  }
  const size_t step = (hi - lo + kUnionTerms - 1) / kUnionTerms;
  for (size_t i = lo; i < hi; i += step)
    s += (i > lo ? " UNION ALL SELECT * FROM (" : "SELECT * FROM (") + union_all(sources, i, std::min(hi, i + step)) + ")";
  return s;
}
}  // namespace

std::string op_rows_source(const std::vector<std::string>& tables) {
  if (tables.size() == 1) return tables[0];
  if (tables.empty()) return "(SELECT * FROM " + std::string(schema::kOpRowsTable) + ")";
  return "(" + union_all(tables, 0, tables.size()) + ")";
}

std::string ops_select(int64_t base, int64_t wall_offset, const std::string& rows, int schema) {
  const std::string b = std::to_string(base), w = std::to_string(wall_offset);
  const std::string shift = std::to_string(schema::kOpRcShift);
  const std::string rc = schema >= 3 ? "(r.state >> " + shift + ")" : "r.rc";
  const std::string state = schema >= 3 ? "(r.state & " + std::to_string((1 << schema::kOpRcShift) - 1) + ")" : "r.state";
  return "SELECT r.call_index AS call_index, s.comm_id AS comm_id, r.seq AS seq, " + names_case("s.op", vocab::kOpNames) +
         " AS op, " + names_case("s.dtype", vocab::kDtypeNames) + " AS dtype, " +
         "s.count AS count, s.root AS root, s.peer AS peer, " + names_case("s.redop", vocab::kRedOpNames) +
         " AS redop, s.stream AS stream, s.tid AS tid, s.thread_name AS thread_name, r.group_id AS group_id, " + b +
         " + r.t AS issue_mono_ns, " + b + " + r.t + " + w + " + r.wall AS issue_wall_ns, " + b +
         " + r.t + r.ret AS return_mono_ns, " + rc + " AS rc, " + names_case(state, vocab::kStateNames) +
         " AS state, g.capture_id AS capture_id, g.graph_id AS graph_id, g.origin_call AS origin_call, "
         "g.graph_exec AS graph_exec, s.stack_id AS stack_id "
         "FROM " + rows + " r JOIN signatures s ON s.id = r.sig LEFT JOIN op_graph g ON g.call_index = r.call_index";
}

std::string op_parts_select(const std::string& rows) {
  return "SELECT r.call_index AS call_index, p.part AS part, " + names_case("p.op", vocab::kOpNames) + " AS op, " +
         names_case("p.dtype", vocab::kDtypeNames) + " AS dtype, p.count AS count, p.root AS root, p.peer AS peer, " +
         names_case("p.redop", vocab::kRedOpNames) +
         " AS redop FROM " + rows + " r JOIN signature_parts p ON p.sig_id = r.sig";
}

std::string completions_select(int64_t base, const std::string& rows) {
  return "SELECT call_index, " + std::to_string(base) + " + t + done AS mono_ns FROM " + rows + " WHERE done IS NOT NULL";
}

std::string views_sql(int64_t base, int64_t wall_offset) {
  const std::string all = schema::kOpRowsAllView;
  return "CREATE VIEW IF NOT EXISTS ops AS " + ops_select(base, wall_offset, all) +
         ";\n"
         "CREATE VIEW IF NOT EXISTS op_parts AS " + op_parts_select(all) +
         ";\n"
         "CREATE VIEW IF NOT EXISTS completions AS " + completions_select(base, all) + ";\n";
}

std::string chunk_views_sql(const std::vector<std::string>& tables) {
  std::string s = "DROP VIEW IF EXISTS " + std::string(schema::kOpRowsAllView) + ";CREATE VIEW " +
                  schema::kOpRowsAllView + " AS " + union_all(tables, 0, tables.size());
  // Tools that edit completions (tests that make a host fall behind) keep working.
  s += ";DROP TRIGGER IF EXISTS completions_delete;"
       "CREATE TRIGGER completions_delete INSTEAD OF DELETE ON completions BEGIN ";
  for (const std::string& t : tables) s += "UPDATE " + t + " SET done=NULL WHERE call_index=OLD.call_index;";
  return s + "END;";
}

int create(Db& db, const std::string& path, const CreateOptions& o, const char** what) {
  // Replaces what is there (offline writers); the recorder claims a name no trace has first
  // (writer.cpp claim_trace_path), its side files with it, so it never replaces one, and keeps
  // its claimed file and the empty journal it created (removed, a link could take its place).
  if (!o.claimed) {
    unlink(path.c_str());
    for (const char* ext : {"-journal", "-wal", "-shm"}) unlink((path + ext).c_str());
  }
  *what = "cannot create trace file";
  int rc = db.open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | (o.claimed ? SQLITE_OPEN_NOFOLLOW : 0),
                   o.vfs);
  if (rc != SQLITE_OK) return rc;
  if (o.claimed) {
    // SQLite opened the name, not a link; still the file claimed (not another put in its place)?
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_dev) != o.claimed_dev ||
        uint64_t(st.st_ino) != o.claimed_ino) {
      *what = "trace file replaced by another while it was being created";
      return SQLITE_CANTOPEN;
    }
  }
  if (o.busy_timeout_ms > 0) sqlite3_busy_timeout(db.get(), o.busy_timeout_ms);
  *what = "cannot configure trace file";
  // 1 KiB pages: a trace has ~20 tables and indexes of one page at least, most of them small
  // for good; at 4 KiB that alone is ~90 KB (the seed demo's 3,800 ops take 130 KB).
  // Nothing is written before BEGIN: the application id is set in the one transaction that creates
  // the tables, so a reader never sees a lockstep file without them, and creating costs one
  // commit under the chosen synchronous mode (docs/review-2026-12-02.md L12).
  std::string pragmas = "PRAGMA page_size=1024;PRAGMA journal_mode=" + o.journal_mode +
                        ";PRAGMA synchronous=" + o.synchronous + ";";
  if ((rc = db.exec(pragmas)) != SQLITE_OK) return rc;
  *what = "cannot create trace tables";
  if ((rc = db.exec("BEGIN")) != SQLITE_OK) return rc;
  if ((rc = db.exec("PRAGMA application_id=" + std::to_string(schema::kApplicationId))) != SQLITE_OK) return rc;
  if ((rc = db.exec(compact_sql(schema::kCreateSql))) != SQLITE_OK) return rc;
  if ((rc = db.exec("CREATE TABLE IF NOT EXISTS " + std::string(schema::kOpRowsTable) + schema::kOpRowsColumns)) !=
      SQLITE_OK)
    return rc;
  for (const char* extra : kExtraCreateSql)
    if (*extra && (rc = db.exec(extra)) != SQLITE_OK) return rc;
  if ((rc = db.exec(views_sql(o.time_base_mono_ns, o.wall_offset_ns))) != SQLITE_OK) return rc;
  if ((rc = db.exec(chunk_views_sql({schema::kOpRowsTable}))) != SQLITE_OK) return rc;
  {
    Stmt m(db.get(), "INSERT OR REPLACE INTO meta(key,value) VALUES(?,?)", false);
    const std::pair<const char*, std::string> rows[] = {
        {"schema_version", std::to_string(schema::kSchemaVersion)},
        {"op_time_base_mono_ns", std::to_string(o.time_base_mono_ns)},
        {"op_wall_offset_ns", std::to_string(o.wall_offset_ns)},
    };
    for (const auto& [k, v] : rows)
      if ((rc = m.text(1, k).text(2, v).run()) != SQLITE_DONE) return rc;
  }
  return db.exec("COMMIT");
}

int Tables::prepare(sqlite3* db, int64_t base, int64_t wall_offset) {
  db_ = db;
  chunks_.clear();
  chunks_.emplace_back();  // op_rows, open
  retired_through_ = INT64_MIN;
  base_ = base;
  wall_offset_ = wall_offset;
  struct {
    Stmt* st;
    const char* sql;
  } all[] = {
      {&meta_, "INSERT OR REPLACE INTO meta(key,value) VALUES(?,?)"},
      {&env_, "INSERT OR REPLACE INTO env(name,value) VALUES(?,?)"},
      {&comm_,
       "INSERT OR REPLACE INTO comms(id,comm_hash,handle,nranks,rank,cuda_device,parent_id,split_color,split_key,name,"
       "init_call,init_mono_ns,init_rc,end_kind,created_before_tracing) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
      {&comm_end_, "UPDATE comms SET end_kind=?,end_call=?,end_mono_ns=? WHERE id=?"},
      {&sig_,
       "INSERT INTO signatures(id,comm_id,op,dtype,count,root,peer,redop,stream,tid,thread_name,stack_id,nparts,hash) "
       "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
      {&part_, "INSERT OR REPLACE INTO signature_parts(sig_id,part,op,dtype,count,root,peer,redop) VALUES(?,?,?,?,?,?,?,?)"},
      {&op_graph_, "INSERT OR REPLACE INTO op_graph(call_index,capture_id,graph_id,origin_call,graph_exec) VALUES(?,?,?,?,?)"},
      {&stack_, "INSERT OR IGNORE INTO stacks(id,hash) VALUES(?,?)"},
      {&frame_, "INSERT OR REPLACE INTO frames(stack_id,depth,kind,function,module,offset,file,line) VALUES(?,?,?,?,?,?,?,?)"},
      {&launch_, "INSERT OR REPLACE INTO graph_launches(call_index,graph_exec,graph_id,stream,mono_ns) VALUES(?,?,?,?,?)"},
      {&wait_, "INSERT OR REPLACE INTO waits(call_index,kind,stream,event,tid,begin_mono_ns,end_mono_ns) VALUES(?,?,?,?,?,?,?)"},
      {&api_, "INSERT OR REPLACE INTO api_calls(call_index,name,comm_id,rc,detail,mono_ns) VALUES(?,?,?,?,?,?)"},
      {&hang_, "INSERT INTO hangs(mono_ns,wall_ns,in_flight,message) VALUES(?,?,?,?)"},
      {&checkpoint_, "INSERT OR REPLACE INTO checkpoints(comm_id,ordinal,seq,digest,order_count,order_digest) VALUES(?,?,?,?,?,?)"},
      {&checkpoint_order_, "UPDATE checkpoints SET order_count=?, order_digest=? WHERE comm_id=? AND ordinal=?"},
  };
  for (auto& s : all) {
    *s.st = Stmt(db, s.sql);
    if (!s.st->ok()) return sqlite3_errcode(db) ? sqlite3_errcode(db) : SQLITE_ERROR;
  }
  return SQLITE_OK;
}

int Tables::meta(std::string_view k, std::string_view v) {
  // An empty value is a value here, not NULL.
  sqlite3_bind_text(meta_.get(), 2, v.data(), int(v.size()), SQLITE_TRANSIENT);
  return meta_.text(1, k).run();
}

int Tables::env(std::string_view k, std::string_view v) {
  sqlite3_bind_text(env_.get(), 2, v.data(), int(v.size()), SQLITE_TRANSIENT);
  return env_.text(1, k).run();
}

int Tables::comm(const CommRow& c) {
  Stmt& q = comm_;
  q.i64(1, c.id).text(2, c.hash).i64(3, int64_t(c.handle)).i64(4, c.nranks).i64(5, c.rank).opt(6, c.cuda_device);
  q.opt(7, c.parent_id);
  if (c.has_split) q.i64(8, c.split_color).i64(9, c.split_key);
  else q.null(8).null(9);
  q.text(10, c.name).i64(11, c.init_call).i64(12, c.init_mono_ns).i64(13, c.init_rc);
  if (c.end == vocab::CommEnd::Alive) q.null(14);
  else q.text(14, vocab::name(c.end));
  q.i64(15, c.created_before_tracing ? 1 : 0);
  return q.run();
}

int Tables::comm_end(int64_t id, vocab::CommEnd kind, int64_t call_index, int64_t mono_ns) {
  return comm_end_.text(1, vocab::name(kind)).i64(2, call_index).i64(3, mono_ns).i64(4, id).run();
}

namespace {
int64_t dtype_col(vocab::Dtype d) { return d == vocab::Dtype::Mixed ? -1 : int64_t(d); }
int64_t redop_col(vocab::RedOp r) { return r == vocab::RedOp::None ? -1 : int64_t(r); }
}  // namespace

uint64_t signature_hash(const CallFields& op, const CallFields* parts, size_t nparts) {
  std::vector<digest::Part> dp;
  dp.reserve(nparts);
  for (size_t i = 0; i < nparts; ++i) dp.push_back(parts[i].digest_part());
  return digest::signature_hash(op.op, op.dtype, op.count, op.root, op.peer, op.redop, dp.data(), dp.size());
}

namespace {
// Columns first..first+5: op, dtype, count, root, peer, redop.
void bind_call(Stmt& q, int first, const CallFields& c) {
  q.i64(first, int64_t(c.op)).opt(first + 1, dtype_col(c.dtype)).i64(first + 2, c.count);
  q.opt(first + 3, c.root).opt(first + 4, c.peer).opt(first + 5, redop_col(c.redop));
}
}  // namespace

int Tables::signature(const SignatureRow& s) {
  Stmt& q = sig_;
  q.i64(1, s.id).i64(2, s.comm_id);
  bind_call(q, 3, s);
  q.i64(9, int64_t(s.stream)).i64(10, s.tid).text(11, s.thread_name).opt(12, s.stack_id).i64(13, s.nparts);
  q.i64(14, int64_t(s.hash));
  return q.run();
}

int Tables::part(const PartRow& p) {
  part_.i64(1, p.sig_id).i64(2, p.part);
  bind_call(part_, 3, p);
  return part_.run();
}

Tables::Chunk* Tables::chunk_for(int64_t call_index) {
  if (call_index <= retired_through_) return nullptr;
  size_t i = chunks_.size() - 1;  // almost always the open chunk
  while (i > 0 && chunks_[i - 1].last_call >= call_index) --i;
  return &chunks_[i];
}

int Tables::op(const OpRow& o) {
  Chunk* c = chunk_for(o.call_index);
  if (!c) return SQLITE_DONE;
  if (!c->insert.ok()) {
    c->insert = Stmt(db_, ("INSERT OR REPLACE INTO " + op_chunk_table(c->k) +
                           "(call_index,sig,seq,t,ret,done,wall,state,group_id) VALUES(?,?,?,?,?,?,?,?,?)")
                              .c_str());
    if (!c->insert.ok()) return sqlite3_errcode(db_) ? sqlite3_errcode(db_) : SQLITE_ERROR;
  }
  Stmt& q = c->insert;
  q.i64(1, o.call_index).i64(2, o.sig).opt(3, o.seq, 0).i64(4, o.issue_mono_ns - base_);
  if (o.return_mono_ns) q.i64(5, o.return_mono_ns - o.issue_mono_ns);
  else q.null(5);
  if (o.completed) q.i64(6, o.complete_mono_ns - o.issue_mono_ns);
  else q.null(6);
  q.i64(7, o.issue_wall_ns - o.issue_mono_ns - wall_offset_);
  q.i64(8, int64_t(o.state) + int64_t(o.rc) * (int64_t(1) << schema::kOpRcShift)).opt(9, o.group_id);
  int rc = q.run();
  if (rc != SQLITE_DONE) return rc;
  ++c->rows;
  if (!o.capture_id && !o.graph_id && !o.graph_exec && o.origin_call < 0) return rc;
  Stmt& g = op_graph_;
  g.i64(1, o.call_index).opt(2, int64_t(o.capture_id), 0).opt(3, int64_t(o.graph_id), 0).opt(4, o.origin_call);
  g.opt(5, int64_t(o.graph_exec), 0);
  return g.run();
}

int Tables::complete(int64_t call_index, int64_t complete_mono_ns, bool* found) {
  if (found) *found = false;
  Chunk* c = chunk_for(call_index);
  if (!c) return SQLITE_DONE;
  if (!c->complete.ok()) {
    c->complete = Stmt(db_, ("UPDATE " + op_chunk_table(c->k) + " SET done=?1-t WHERE call_index=?2").c_str());
    if (!c->complete.ok()) return sqlite3_errcode(db_) ? sqlite3_errcode(db_) : SQLITE_ERROR;
  }
  int rc = c->complete.i64(1, complete_mono_ns - base_).i64(2, call_index).run();
  if (found) *found = rc == SQLITE_DONE && sqlite3_changes(db_) > 0;
  return rc;
}

int Tables::sync_chunk_views() {
  if (!views_stale_) return SQLITE_OK;
  views_stale_ = false;
  std::vector<std::string> names;
  names.reserve(chunks_.size() + 1);
  // op_rows stays (emptied when retired): the view keeps every chunk table there is.
  if (chunks_.front().k != 0) names.push_back(op_chunk_table(0));
  for (const Chunk& c : chunks_) names.push_back(op_chunk_table(c.k));
  return sqlite3_exec(db_, chunk_views_sql(names).c_str(), nullptr, nullptr, nullptr);
}

int Tables::close_op_chunk(int64_t last_call) {
  Chunk& open = chunks_.back();
  if (last_call < (chunks_.size() > 1 ? chunks_[chunks_.size() - 2].last_call : INT64_MIN) + 1) return SQLITE_MISUSE;
  const int64_t k = open.k + 1;
  int rc = sqlite3_exec(db_, ("CREATE TABLE " + op_chunk_table(k) + schema::kOpRowsColumns).c_str(), nullptr, nullptr,
                        nullptr);
  if (rc != SQLITE_OK) return rc;
  open.last_call = last_call;
  chunks_.emplace_back();
  chunks_.back().k = k;
  views_stale_ = true;
  return SQLITE_OK;
}

int Tables::retire_op_chunks(int64_t through_call, int64_t* rows) {
  *rows = 0;
  bool dropped = false;
  while (chunks_.size() > 1 && chunks_.front().last_call <= through_call) {
    Chunk& c = chunks_.front();
    c.insert = Stmt();
    c.complete = Stmt();
    // Emptying a whole table (DELETE without WHERE) and DROP TABLE free its pages without
    // visiting its rows one by one.
    const std::string sql = c.k == 0 ? "DELETE FROM " + op_chunk_table(0) : "DROP TABLE " + op_chunk_table(c.k);
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return rc;
    dropped |= c.k != 0;
    *rows += c.rows;
    retired_through_ = std::max(retired_through_, c.last_call);
    chunks_.pop_front();
  }
  views_stale_ |= dropped;
  return SQLITE_OK;
}

int Tables::stack(int64_t id, std::string_view hash_hex) { return stack_.i64(1, id).text(2, hash_hex).run(); }

int Tables::frame(const FrameRow& f) {
  Stmt& q = frame_;
  q.i64(1, f.stack_id).i64(2, f.depth).text(3, vocab::name(f.kind)).text(4, f.function).text(5, f.module);
  q.opt(6, f.offset).text(7, f.file).opt(8, f.line);
  return q.run();
}

int Tables::graph_launch(int64_t call_index, uint64_t exec, uint64_t graph, uint64_t stream, int64_t mono_ns) {
  return launch_.i64(1, call_index).i64(2, int64_t(exec)).opt(3, int64_t(graph), 0).i64(4, int64_t(stream)).i64(5, mono_ns).run();
}

int Tables::wait(const WaitRow& w) {
  Stmt& q = wait_;
  q.i64(1, w.call_index).text(2, vocab::name(w.kind)).i64(3, int64_t(w.stream)).opt(4, int64_t(w.event), 0);
  q.i64(5, w.tid).i64(6, w.begin_mono_ns).opt(7, w.end_mono_ns);
  return q.run();
}

int Tables::api(int64_t call_index, std::string_view name, int64_t comm_id, int32_t rc, std::string_view detail,
                int64_t mono_ns) {
  return api_.i64(1, call_index).text(2, name).opt(3, comm_id).i64(4, rc).text(5, detail).i64(6, mono_ns).run();
}

int Tables::hang(int64_t mono_ns, int64_t wall_ns, int32_t in_flight, std::string_view message) {
  sqlite3_bind_text(hang_.get(), 4, message.data(), int(message.size()), SQLITE_TRANSIENT);
  return hang_.i64(1, mono_ns).i64(2, wall_ns).i64(3, in_flight).run();
}

int Tables::checkpoint(const CheckpointRow& c) {
  checkpoint_.i64(1, c.comm_id).i64(2, c.ordinal).i64(3, c.seq).i64(4, int64_t(c.digest));
  if (c.order_count > 0) checkpoint_.i64(5, c.order_count).i64(6, int64_t(c.order_digest));
  else checkpoint_.null(5).null(6);
  return checkpoint_.run();
}

int Tables::checkpoint_order(int64_t comm_id, int64_t ordinal, int64_t order_count, uint64_t order_digest) {
  return checkpoint_order_.i64(1, order_count).i64(2, int64_t(order_digest)).i64(3, comm_id).i64(4, ordinal).run();
}

int Tables::drop(int64_t comm_id, int64_t first_seq, int64_t last_seq, int64_t records, std::string_view reason) {
  // Prepared on first use: most files never drop a record (and a model of an older file has no
  // drops table).
  if (!drop_.ok()) drop_ = Stmt(db_, "INSERT INTO drops(comm_id,first_seq,last_seq,records,reason) VALUES(?,?,?,?,?)");
  if (!drop_.ok()) return sqlite3_errcode(db_) ? sqlite3_errcode(db_) : SQLITE_ERROR;
  return drop_.opt(1, comm_id)
      .opt(2, first_seq > 0 ? first_seq : -1)
      .opt(3, last_seq > 0 ? last_seq : -1)
      .i64(4, records)
      .text(5, reason)
      .run();
}

TextInt parse_int(std::string_view text) {
  TextInt r;
  if (text.empty()) return r;
  const char* first = text.data();
  const char* last = first + text.size();
  auto [end, ec] = std::from_chars(first, last, r.value, 10);
  if (end != last || ec == std::errc::invalid_argument) {
    r.kind = TextInt::kMalformed;
    r.value = 0;
  } else if (ec == std::errc::result_out_of_range) {
    r.kind = TextInt::kOutOfRange;
    r.value = text[0] == '-' ? INT64_MIN : INT64_MAX;
  } else {
    r.kind = TextInt::kValue;
  }
  return r;
}

int global_rank_from_meta(std::string_view value) {
  return static_cast<int>(std::clamp<int64_t>(parse_int(value).or_default(-1), INT32_MIN, INT32_MAX));
}

bool read_meta_value(sqlite3* db, const char* key, std::string* value) {
  Stmt st(db, "SELECT value FROM meta WHERE key=?", false);
  if (!st.ok()) return false;
  sqlite3_bind_text(st.get(), 1, key, -1, SQLITE_STATIC);
  if (st.step() != SQLITE_ROW || sqlite3_column_type(st.get(), 0) == SQLITE_NULL) return false;
  const unsigned char* t = sqlite3_column_text(st.get(), 0);
  value->assign(t ? reinterpret_cast<const char*>(t) : "", size_t(sqlite3_column_bytes(st.get(), 0)));
  return true;
}

int read_global_rank(const std::string& path, int busy_timeout_ms) {
  // A recorder reads its peers' files (the hang report): a FIFO or a link named like a trace,
  // or beside one as its journal, would block it or lead it elsewhere. Regular files only, as
  // the analyzer's loader reads them.
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  for (const char* side : {"-journal", "-wal", "-shm"})
    if (lstat((path + side).c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return -1;
  Db db;
  if (db.open_untrusted(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW) != SQLITE_OK) return -1;
  sqlite3_busy_timeout(db.get(), busy_timeout_ms);
  std::string v;
  return read_meta_value(db.get(), "global_rank", &v) ? global_rank_from_meta(v) : -1;
}

}  // namespace lockstep::trace_file
