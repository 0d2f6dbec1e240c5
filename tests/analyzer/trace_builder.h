// Test support: build a Trace in memory in a few lines, and write it as real trace files
// (schema::kCreateSql, the recorder's format) for loader and CLI tests.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "timeline.h"
#include "trace_details.h"
#include "trace_model.h"

namespace lockstep::testing {

// A vocabulary value written in a test as its enum or its on-disk name ("all_reduce"; "" for
// Dtype::Mixed / RedOp::None); an unknown name is a test bug (throws).
template <class E>
struct Vocab {
  E value;
  Vocab(E e) : value(e) {}  // NOLINT: implicit on purpose
  Vocab(const char* s) : value(parse(s)) {}  // NOLINT
  operator E() const { return value; }
  static E parse(std::string_view s) {
    std::optional<E> v;
    if constexpr (std::is_same_v<E, vocab::Op>) v = vocab::parse_op(s);
    if constexpr (std::is_same_v<E, vocab::State>) v = vocab::parse_state(s);
    if constexpr (std::is_same_v<E, vocab::Dtype>) v = s.empty() ? vocab::Dtype::Mixed : vocab::parse_dtype(s);
    if constexpr (std::is_same_v<E, vocab::RedOp>) v = s.empty() ? vocab::RedOp::None : vocab::parse_redop(s);
    if (!v) throw std::logic_error("test trace: unknown vocabulary name '" + std::string(s) + "'");
    return *v;
  }
};

struct OpSpec {
  Vocab<vocab::Op> op = vocab::Op::AllReduce;
  Vocab<vocab::Dtype> dtype = vocab::Dtype::Float32;
  int64_t count = 1024;
  int root = -1;
  int peer = -1;
  Vocab<vocab::RedOp> redop = vocab::RedOp::Sum;
  std::vector<OpPart> parts;
  bool completed = true;
  int64_t group = -1;
  uint64_t stream = 0;
  Vocab<vocab::State> state = vocab::State::Enqueued;  // captured/failed/simulated rows get no seq
  int64_t stack = -1;              // stack id (see TraceBuilder::stack)
};

class TraceBuilder {
 public:
  // Processes 0..n-1 with global ranks 0..n-1 on host "node0", finished cleanly.
  explicit TraceBuilder(int nprocs);

  // A communicator with the given members (comm rank = position in `procs`). parent: hash of the
  // parent for splits ("" = created by init); name: ncclConfig_t.commName.
  TraceBuilder& comm(const std::string& hash, const std::vector<int>& procs, const std::string& parent = "",
                     int color = 0, const std::string& name = "");
  // Appends an op: next call index of the process, next seq of (process, comm) unless unsequenced.
  Op& add(int proc, const std::string& hash, const OpSpec& spec = {});
  // The same op on every listed process, `times` times.
  TraceBuilder& all(const std::vector<int>& procs, const std::string& hash, const OpSpec& spec, int times = 1);
  // A stack (innermost first) shared by ops that name its id.
  TraceBuilder& stack(int proc, int64_t id, std::vector<Frame> frames);
  // Process state: not finished (still running or hung), or stopped with a reason.
  TraceBuilder& running(int proc);
  TraceBuilder& stopped(int proc, const std::string& exit_reason);

  Trace& trace() { return t_; }

 private:
  int comm_index(int proc, const std::string& hash) const;
  Trace t_;
  std::vector<int64_t> next_call_;
};

// Convenience parts for grouped ops.
OpPart send_to(int peer, int64_t count, const std::string& dtype = "float32");
OpPart recv_from(int peer, int64_t count, const std::string& dtype = "float32");

// One <dir>/rank-<r>.lockstep.sqlite per process, written the way the recorder writes them.
void write_trace(const Trace& t, const std::string& dir);
// A fresh empty directory under the test temp dir.
std::string fresh_dir(const std::string& name);

// Runs SQL on a written trace file (tests that damage or edit one); throws with SQLite's message.
void exec_sql(const std::string& path, const std::string& text);

}  // namespace lockstep::testing

namespace lockstep {
// The details of a built trace, as details_from_files gives them for its written files
// (`proc` indexes trace.processes == schedule_from_trace(trace).procs).
std::unique_ptr<TraceDetails> details_from_trace(const Trace& t);
// The timeline JSON of a built trace: the headers as schedule_from_trace holds them, each
// process's rows from the trace (from files: load_headers and load_process_file).
std::string timeline_json(const Trace& t, const TimelineOptions& options = {});
}  // namespace lockstep
