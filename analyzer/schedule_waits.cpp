#include "schedule_waits.h"

#include "meta_keys.h"
#include "text_escape.h"
#include "trace_file.h"
#include "vocab.h"

namespace lockstep {

namespace {

std::optional<SideReadError> failed(sqlite3* db, int rc, const char* what) {
  return SideReadError{rc, std::string(what) + ": " + sqlite3_errmsg(db)};
}

// sp.threads and sp.op_threads from the op rows (read again: the compact loader did not).
std::optional<SideReadError> read_op_threads(sqlite3* db, SchedProcess& sp, ThreadTable& threads) {
  sp.threads.clear();
  sp.op_threads.assign(sp.ops.size(), 0);
  // Schema 2 keeps tid on the op's signature; schema 1 on the op row (trace_schema.h).
  auto v = sp.info.meta.find(schema::meta::kSchemaVersion);
  const bool compact = v != sp.info.meta.end() && v->second != "1";
  // Schema 3 keeps op rows in chunks, in call_index order (trace_schema.h): one query each.
  std::vector<std::string> ops_sql;
  if (compact) {
    for (const std::string& t : trace_file::op_chunk_tables(db))
      ops_sql.push_back("SELECT r.call_index, s.tid FROM " + t +
                        " r JOIN signatures s ON s.id = r.sig WHERE r.seq IS NOT NULL ORDER BY r.call_index");
  } else {
    ops_sql.push_back("SELECT call_index, tid FROM ops WHERE seq IS NOT NULL ORDER BY call_index");
  }
  {
    std::vector<bool> seen(sp.ops.size(), false);
    size_t i = 0;
    for (const std::string& sql : ops_sql) {
      trace_file::Stmt st(db, sql.c_str(), false);
      if (!st.ok()) return failed(db, sqlite3_errcode(db), "query failed (op threads)");
      int rc;
      while ((rc = st.step()) == SQLITE_ROW) {
        const int64_t ci = st.column_i64(0);
        while (i < sp.ops.size() && sp.ops[i].call_index < ci) ++i;
        if (i == sp.ops.size() || sp.ops[i].call_index != ci) continue;  // written after the ops were read
        sp.op_threads[i] = threads.index(st.column_i64(1));
        seen[i] = true;
      }
      if (rc != SQLITE_DONE) return failed(db, rc, "read failed (op threads)");
    }
    // Rows a live capped recorder retired in between: one unknown thread (tid 0) for them.
    for (size_t k = 0; k < seen.size(); ++k)
      if (!seen[k]) sp.op_threads[k] = threads.index(0);
  }
  return std::nullopt;
}

}  // namespace

std::optional<SideReadError> read_host_waits(sqlite3* db, SchedProcess& sp, bool op_threads_read) {
  sp.waits.clear();
  ThreadTable threads(sp);
  if (op_threads_read) {
    threads.adopt();
  } else if (auto e = read_op_threads(db, sp, threads)) {
    return e;
  }
  trace_file::Stmt w(db, "SELECT call_index, kind, IFNULL(stream,0), IFNULL(event,0), tid FROM waits ORDER BY call_index", false);
  if (!w.ok()) return failed(db, sqlite3_errcode(db), "query failed (waits)");
  int rc;
  while ((rc = w.step()) == SQLITE_ROW) {
    const std::string_view kind = w.column_text(1);
    auto k = vocab::parse_wait(kind);
    if (!k) return SideReadError{0, "corrupt: unknown wait kind '" + printable(kind) + "'"};
    HostWait x;
    x.call_index = w.column_i64(0);
    x.kind = *k;
    x.stream = static_cast<uint64_t>(w.column_i64(2));
    x.event = static_cast<uint64_t>(w.column_i64(3));
    x.thread = threads.index(w.column_i64(4));
    sp.waits.push_back(x);
  }
  if (rc != SQLITE_DONE) return failed(db, rc, "read failed (waits)");
  sp.host_waits_loaded = true;
  return std::nullopt;
}

}  // namespace lockstep
