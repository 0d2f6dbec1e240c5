#include "trace_builder.h"

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "trace_schema.h"

namespace lockstep::testing {

TraceBuilder::TraceBuilder(int nprocs) {
  for (int i = 0; i < nprocs; ++i) {
    Process p;
    p.host = "node0";
    p.pid = 1000 + i;
    p.global_rank = i;
    p.finished = true;
    p.exit_reason = "";
    p.last_flush_mono_ns = 5'000'000'000;
    t_.processes.push_back(std::move(p));
    next_call_.push_back(1);
  }
  t_.dir = "(memory)";
}

TraceBuilder& TraceBuilder::comm(const std::string& hash, const std::vector<int>& procs, const std::string& parent,
                                 int color, const std::string& name) {
  for (size_t r = 0; r < procs.size(); ++r) {
    Process& p = t_.processes[procs[r]];
    Comm c;
    c.local_id = static_cast<int>(p.comms.size()) + 1;
    c.hash = hash;
    c.handle = 0x1000 + p.comms.size();
    c.nranks = static_cast<int>(procs.size());
    c.rank = static_cast<int>(r);
    c.parent = parent.empty() ? -1 : comm_index(procs[r], parent);
    c.split_color = color;
    c.name = name;
    c.init_call = next_call_[procs[r]]++;
    p.comms.push_back(c);
  }
  return *this;
}

int TraceBuilder::comm_index(int proc, const std::string& hash) const {
  const auto& comms = t_.processes[proc].comms;
  for (size_t i = 0; i < comms.size(); ++i)
    if (comms[i].hash == hash) return static_cast<int>(i);
  throw std::logic_error("test trace: process " + std::to_string(proc) + " is not in comm " + hash);
}

Op& TraceBuilder::add(int proc, const std::string& hash, const OpSpec& s) {
  Process& p = t_.processes[proc];
  Op o;
  o.call_index = next_call_[proc]++;
  o.comm = comm_index(proc, hash);
  bool sequenced = vocab::enqueued_work(s.state);
  if (sequenced) {
    int64_t seq = 0;
    for (auto& x : p.ops)
      if (x.comm == o.comm && x.seq > 0) seq = x.seq;
    o.seq = seq + 1;
  }
  o.op = s.op;
  o.dtype = s.dtype;
  o.count = s.count;
  o.root = s.root;
  o.peer = s.peer;
  const vocab::Op k = s.op;
  o.redop = (k == vocab::Op::AllReduce || k == vocab::Op::Reduce || k == vocab::Op::ReduceScatter) ? s.redop.value : vocab::RedOp::None;
  o.parts = s.parts;
  o.completed = s.completed && sequenced;
  o.group_id = s.group;
  o.stream = s.stream;
  o.state = s.state;
  o.tid = 100 + proc;
  o.thread_name = "main";
  o.issue_mono_ns = o.call_index * 1000;
  o.issue_wall_ns = o.call_index * 1000;
  o.complete_mono_ns = o.completed ? o.issue_mono_ns + 500 : 0;
  o.stack_id = s.stack;
  p.ops.push_back(o);
  return p.ops.back();
}

TraceBuilder& TraceBuilder::all(const std::vector<int>& procs, const std::string& hash, const OpSpec& spec, int times) {
  for (int i = 0; i < times; ++i)
    for (int p : procs) add(p, hash, spec);
  return *this;
}

TraceBuilder& TraceBuilder::stack(int proc, int64_t id, std::vector<Frame> frames) {
  t_.processes[proc].stacks[id] = std::move(frames);
  return *this;
}

TraceBuilder& TraceBuilder::running(int proc) {
  t_.processes[proc].finished = false;
  return *this;
}

TraceBuilder& TraceBuilder::stopped(int proc, const std::string& reason) {
  t_.processes[proc].finished = false;
  t_.processes[proc].exit_reason = reason;
  return *this;
}

OpPart send_to(int peer, int64_t count, const std::string& dtype) {
  return OpPart{vocab::Op::Send, Vocab<vocab::Dtype>(dtype.c_str()), count, -1, peer, vocab::RedOp::None};
}
OpPart recv_from(int peer, int64_t count, const std::string& dtype) {
  return OpPart{vocab::Op::Recv, Vocab<vocab::Dtype>(dtype.c_str()), count, -1, peer, vocab::RedOp::None};
}

namespace {

void exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error("test writer: " + msg + " in: " + sql.substr(0, 200));
  }
}

struct Insert {
  Insert(sqlite3* db, const char* sql) : db(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) throw std::runtime_error(sqlite3_errmsg(db));
  }
  ~Insert() { sqlite3_finalize(st); }
  template <class... A>
  void operator()(A... args) {
    sqlite3_reset(st);
    int i = 1;
    (bind(i++, args), ...);
    if (sqlite3_step(st) != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db));
  }
  void bind(int i, int64_t v) { sqlite3_bind_int64(st, i, v); }
  void bind(int i, int v) { sqlite3_bind_int64(st, i, v); }
  void bind(int i, uint64_t v) { sqlite3_bind_int64(st, i, static_cast<int64_t>(v)); }
  void bind(int i, const std::string& v) { sqlite3_bind_text(st, i, v.c_str(), -1, SQLITE_TRANSIENT); }
  void bind(int i, std::nullptr_t) { sqlite3_bind_null(st, i); }
  sqlite3* db;
  sqlite3_stmt* st = nullptr;
};

}  // namespace

void write_trace(const Trace& t, const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (const Process& p : t.processes) {
    std::string path = dir + "/rank-" + std::to_string(p.global_rank) + schema::kFileSuffix;
    std::filesystem::remove(path);
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("cannot create " + path);
    exec(db, "PRAGMA application_id=" + std::to_string(schema::kApplicationId));
    exec(db, schema::kCreateSql);
    exec(db, "BEGIN");
    {
      Insert meta(db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
      meta(std::string("schema_version"), std::to_string(schema::kSchemaVersion));
      meta(std::string("host"), p.host);
      meta(std::string("pid"), std::to_string(p.pid));
      meta(std::string("global_rank"), std::to_string(p.global_rank));
      meta(std::string("last_flush_mono_ns"), std::to_string(p.last_flush_mono_ns));
      if (p.finished) meta(std::string("finished"), std::string("1"));
      if (!p.exit_reason.empty()) meta(std::string("exit_reason"), p.exit_reason);
      for (auto& [k, v] : p.meta) meta(k, v);
      Insert comm(db,
                  "INSERT INTO comms(id, comm_hash, handle, nranks, rank, parent_id, split_color, name, init_call, "
                  "init_mono_ns, init_rc) VALUES(?,?,?,?,?,?,?,?,?,?,0)");
      for (auto& c : p.comms) {
        if (c.parent >= 0)
          comm(c.local_id, c.hash, c.handle, c.nranks, c.rank, p.comms[c.parent].local_id, c.split_color, c.name,
               c.init_call, c.init_call);
        else
          comm(c.local_id, c.hash, c.handle, c.nranks, c.rank, nullptr, c.split_color, c.name, c.init_call, c.init_call);
      }
      Insert op(db,
                "INSERT INTO ops(call_index, comm_id, seq, op, dtype, count, root, peer, redop, stream, tid, thread_name, "
                "group_id, issue_mono_ns, issue_wall_ns, return_mono_ns, rc, state, stack_id) "
                "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
      Insert part(db, "INSERT INTO op_parts(call_index, part, op, dtype, count, root, peer, redop) VALUES(?,?,?,?,?,?,?,?)");
      Insert done(db, "INSERT INTO completions(call_index, mono_ns) VALUES(?,?)");
      for (auto& o : p.ops) {
        sqlite3_reset(op.st);
        op.bind(1, o.call_index);
        op.bind(2, p.comms[o.comm].local_id);
        o.seq > 0 ? op.bind(3, o.seq) : op.bind(3, nullptr);
        op.bind(4, std::string(vocab::name(o.op)));
        o.dtype == vocab::Dtype::Mixed ? op.bind(5, nullptr) : op.bind(5, std::string(vocab::name(o.dtype)));
        op.bind(6, o.count);
        o.root >= 0 ? op.bind(7, o.root) : op.bind(7, nullptr);
        o.peer >= 0 ? op.bind(8, o.peer) : op.bind(8, nullptr);
        o.redop == vocab::RedOp::None ? op.bind(9, nullptr) : op.bind(9, std::string(vocab::name(o.redop)));
        op.bind(10, o.stream);
        op.bind(11, o.tid);
        op.bind(12, o.thread_name);
        o.group_id >= 0 ? op.bind(13, o.group_id) : op.bind(13, nullptr);
        op.bind(14, o.issue_mono_ns);
        op.bind(15, o.issue_wall_ns);
        op.bind(16, o.issue_mono_ns + 10);
        op.bind(17, o.rc);
        op.bind(18, std::string(vocab::name(o.state)));
        o.stack_id >= 0 ? op.bind(19, o.stack_id) : op.bind(19, nullptr);
        if (sqlite3_step(op.st) != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db));
        for (size_t i = 0; i < o.parts.size(); ++i) {
          auto& x = o.parts[i];
          if (x.peer >= 0)
            part(o.call_index, static_cast<int64_t>(i), std::string(vocab::name(x.op)), std::string(vocab::stored_name(x.dtype)), x.count, nullptr, x.peer, nullptr);
          else
            part(o.call_index, static_cast<int64_t>(i), std::string(vocab::name(x.op)), std::string(vocab::stored_name(x.dtype)), x.count, nullptr, nullptr, nullptr);
        }
        if (o.completed) done(o.call_index, o.complete_mono_ns);
      }
      Insert stack(db, "INSERT INTO stacks(id, hash) VALUES(?, ?)");
      Insert frame(db,
                   "INSERT INTO frames(stack_id, depth, kind, function, module, offset, file, line) VALUES(?,?,?,?,?,?,?,?)");
      for (auto& [id, frames] : p.stacks) {
        stack(id, "h" + std::to_string(id));
        for (size_t d = 0; d < frames.size(); ++d) {
          auto& f = frames[d];
          frame(id, static_cast<int64_t>(d), std::string(vocab::name(f.kind)), f.function, f.module, f.offset, f.file, f.line);
        }
      }
      Insert hang(db, "INSERT INTO hangs(mono_ns, wall_ns, in_flight, message) VALUES(?,?,?,?)");
      for (auto& h : p.hangs) hang(h.mono_ns, h.wall_ns, h.in_flight, h.message);
    }
    exec(db, "COMMIT");
    sqlite3_close(db);
  }
}

namespace {
// Directories made by fresh_dir, removed when the test program exits.
struct Cleanup {
  std::vector<std::filesystem::path> dirs;
  ~Cleanup() {
    if (std::getenv("LOCKSTEP_KEEP_TEST_DIRS")) return;
    std::error_code ec;
    for (auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};
Cleanup g_cleanup;
}  // namespace

std::string fresh_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : std::filesystem::temp_directory_path().string()) /
                              ("lockstep-test-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  g_cleanup.dirs.push_back(dir);
  return dir.string();
}

}  // namespace lockstep::testing
