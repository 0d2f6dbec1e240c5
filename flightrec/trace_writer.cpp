// A Process as a lockstep trace file (the tables of schema/trace_schema.h that FR can fill).
#include <sqlite3.h>

#include <filesystem>
#include <stdexcept>

#include "flightrec.h"
#include "trace_schema.h"

namespace lockstep::flightrec {
namespace {

struct Db {
  sqlite3* db = nullptr;
  ~Db() { sqlite3_close_v2(db); }
  void exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string m = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error("writing trace: " + m);
    }
  }
};

struct Stmt {
  sqlite3* db;
  sqlite3_stmt* st = nullptr;
  Stmt(sqlite3* d, const char* sql) : db(d) {
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) throw std::runtime_error(std::string("writing trace: ") + sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(st); }
  Stmt& i(int c, int64_t v) {
    sqlite3_bind_int64(st, c, v);
    return *this;
  }
  Stmt& t(int c, const std::string& v) {
    if (v.empty()) sqlite3_bind_null(st, c);
    else sqlite3_bind_text(st, c, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& null(int c) {
    sqlite3_bind_null(st, c);
    return *this;
  }
  void run() {
    if (sqlite3_step(st) != SQLITE_DONE) throw std::runtime_error(std::string("writing trace: ") + sqlite3_errmsg(db));
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
};

}  // namespace

void write_trace_file(const Process& p, const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  Db d;
  if (sqlite3_open_v2(path.c_str(), &d.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK)
    throw std::runtime_error("cannot create " + path);
  d.exec(("PRAGMA application_id=" + std::to_string(schema::kApplicationId)).c_str());
  d.exec(schema::kCreateSql);
  d.exec("BEGIN");
  {
    Stmt m(d.db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)");
    m.t(1, "schema_version").t(2, std::to_string(schema::kSchemaVersion)).run();
    m.t(1, "host").t(2, p.host).run();
    m.t(1, "pid").t(2, std::to_string(p.pid)).run();
    m.t(1, "finished").t(2, p.finished ? "1" : "0").run();
    for (auto& [k, v] : p.meta)
      if (k != "schema_version") m.t(1, k).t(2, v).run();
  }
  {
    Stmt c(d.db,
           "INSERT INTO comms(id, comm_hash, handle, nranks, rank, cuda_device, parent_id, split_color, split_key, name, "
           "init_call, init_mono_ns, init_rc) VALUES(?1,?2,?3,?4,?5,NULL,NULL,NULL,NULL,?6,?7,0,0)");
    for (auto& x : p.comms) c.i(1, x.local_id).t(2, x.hash).i(3, x.local_id).i(4, x.nranks).i(5, x.rank).t(6, x.name).i(7, x.init_call).run();
  }
  {
    Stmt s(d.db, "INSERT INTO stacks(id, hash) VALUES(?1, ?2)");
    Stmt f(d.db, "INSERT INTO frames(stack_id, depth, kind, function, module, offset, file, line) VALUES(?1,?2,?3,?4,NULL,NULL,?5,?6)");
    for (auto& [id, frames] : p.stacks) {
      char h[17];
      std::snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(id));
      s.i(1, id).t(2, h).run();
      for (size_t k = 0; k < frames.size(); ++k)
        f.i(1, id).i(2, static_cast<int64_t>(k)).t(3, vocab::name(frames[k].kind)).t(4, frames[k].function).t(5, frames[k].file).i(6, frames[k].line).run();
    }
  }
  {
    Stmt o(d.db,
           "INSERT INTO ops(call_index, comm_id, seq, op, dtype, count, root, peer, redop, stream, tid, thread_name, "
           "group_id, issue_mono_ns, issue_wall_ns, rc, state, stack_id) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,NULL,?13,?14,0,?15,?16)");
    Stmt part(d.db, "INSERT INTO op_parts(call_index, part, op, dtype, count, root, peer, redop) VALUES(?1,?2,?3,?4,?5,?6,?7,?8)");
    Stmt done(d.db, "INSERT INTO completions(call_index, mono_ns) VALUES(?1, ?2)");
    for (auto& x : p.ops) {
      o.i(1, x.call_index).i(2, p.comms.at(x.comm).local_id);
      if (x.seq > 0) o.i(3, x.seq);
      else o.null(3);
      o.t(4, vocab::name(x.op)).t(5, vocab::stored_name(x.dtype)).i(6, x.count);
      if (x.root >= 0) o.i(7, x.root); else o.null(7);
      if (x.peer >= 0) o.i(8, x.peer); else o.null(8);
      o.t(9, vocab::name(x.redop)).i(10, static_cast<int64_t>(x.stream)).i(11, x.tid).t(12, x.thread_name).i(13, x.issue_mono_ns).i(14, x.issue_wall_ns).t(15, vocab::name(x.state));
      if (x.stack_id >= 0) o.i(16, x.stack_id); else o.null(16);
      o.run();
      for (size_t k = 0; k < x.parts.size(); ++k) {
        const OpPart& pp = x.parts[k];
        part.i(1, x.call_index).i(2, static_cast<int64_t>(k)).t(3, vocab::name(pp.op)).t(4, vocab::stored_name(pp.dtype)).i(5, pp.count);
        if (pp.root >= 0) part.i(6, pp.root); else part.null(6);
        if (pp.peer >= 0) part.i(7, pp.peer); else part.null(7);
        part.t(8, vocab::name(pp.redop)).run();
      }
      if (x.completed) done.i(1, x.call_index).i(2, x.complete_mono_ns).run();
    }
  }
  {
    Stmt h(d.db, "INSERT INTO hangs(mono_ns, wall_ns, in_flight, message) VALUES(?1, ?2, ?3, ?4)");
    for (auto& x : p.hangs) h.i(1, x.mono_ns).i(2, x.wall_ns).i(3, x.in_flight).t(4, x.message).run();
  }
  d.exec("COMMIT");
}

}  // namespace lockstep::flightrec
