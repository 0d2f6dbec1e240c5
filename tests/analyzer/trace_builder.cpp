#include "trace_builder.h"

#include <unistd.h>

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "schedule.h"
#include "trace_file_model.h"
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

void write_trace(const Trace& t, const std::string& dir) {
  std::filesystem::create_directories(dir);
  // Journaled like the recorder's files: tests open them beside a live writer.
  for (const Process& p : t.processes)
    trace_file::write_process(p, dir + "/rank-" + std::to_string(p.global_rank) + schema::kFileSuffix,
                              {.fast = false, .synthesize_times = false});
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

void exec_sql(const std::string& path, const std::string& text) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    sqlite3_close(db);
    throw std::runtime_error("cannot open " + path);
  }
  char* err = nullptr;
  const int rc = sqlite3_exec(db, text.c_str(), nullptr, nullptr, &err);
  const std::string why = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error(path + ": " + text + ": " + why);
}

}  // namespace lockstep::testing

namespace lockstep {
namespace {

class MemoryDetails : public TraceDetails {
 public:
  explicit MemoryDetails(const Trace& t) : t_(t) {}
  std::optional<Op> op(int proc, int64_t call_index) override {
    const auto& ops = t_.processes[proc].ops;
    auto it = std::lower_bound(ops.begin(), ops.end(), call_index,
                               [](const Op& o, int64_t v) { return o.call_index < v; });
    if (it == ops.end() || it->call_index != call_index) return std::nullopt;
    return *it;
  }
  std::vector<Op> ops_between(int proc, int64_t from, int64_t to, int limit, bool newest) override {
    std::vector<Op> out;
    for (const Op& o : t_.processes[proc].ops)
      if (o.call_index >= from && o.call_index <= to && o.seq > 0 && o.state != vocab::State::Captured) out.push_back(o);
    if (static_cast<int>(out.size()) > limit) {
      if (newest)
        out.erase(out.begin(), out.end() - limit);
      else
        out.resize(static_cast<size_t>(limit));
    }
    return out;
  }
  std::optional<SeqAt> first_of_comm(int proc, int comm, int64_t from, int64_t to) override {
    for (const Op& o : t_.processes[proc].ops)  // in call_index order (the builder's)
      if (o.call_index >= from && o.call_index <= to && o.comm == comm && o.seq > 0 && o.state != vocab::State::Captured)
        return SeqAt{o.call_index, o.seq};
    return std::nullopt;
  }
  std::vector<Frame> stack(int proc, int64_t stack_id) override {
    auto& st = t_.processes[proc].stacks;
    auto it = st.find(stack_id);
    return it == st.end() ? std::vector<Frame>{} : it->second;
  }

 private:
  const Trace& t_;
};

}  // namespace

std::unique_ptr<TraceDetails> details_from_trace(const Trace& t) { return std::make_unique<MemoryDetails>(t); }

std::string timeline_json(const Trace& t, const TimelineOptions& options) {
  const Schedule headers = schedule_from_trace(t);
  return timeline_json(headers, [&](size_t i) { return t.processes.at(i); }, options);
}

}  // namespace lockstep
