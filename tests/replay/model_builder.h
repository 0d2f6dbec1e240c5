// Builds a trace's rows in memory (analyzer/trace_model.h) for the model checker tests: one
// process per rank, communicators by name, ops and waits appended in call order.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "trace_model.h"

namespace lockstep::testing {

class RowsBuilder {
 public:
  explicit RowsBuilder(int nprocs) {
    trace.dir = "<in-memory>";
    trace.processes.resize(nprocs);
    for (int r = 0; r < nprocs; ++r) {
      trace.processes[r].global_rank = r;
      trace.processes[r].path = "rank-" + std::to_string(r);
      trace.processes[r].host = "node0";
      trace.processes[r].pid = 1000 + r;
      trace.processes[r].finished = true;
    }
  }

  // Declares that `rank` is member `comm_rank` of communicator `name` (nranks members).
  RowsBuilder& comm(int rank, const std::string& name, int nranks, int comm_rank) {
    Process& p = trace.processes[rank];
    Comm c;
    c.local_id = static_cast<int>(p.comms.size()) + 1;
    c.hash = "hash-" + name;
    c.name = name;
    c.nranks = nranks;
    c.rank = comm_rank;
    c.init_call = next_call(rank);
    p.comms.push_back(c);
    return *this;
  }
  // `rank` joins `name`, created by ncclCommSplit(parent, color, key).
  RowsBuilder& split(int rank, const std::string& name, const std::string& parent, int nranks, int comm_rank,
                         int color, int key) {
    comm(rank, name, nranks, comm_rank);
    Comm& c = trace.processes[rank].comms.back();
    c.parent = comm_index(rank, parent);
    c.split_color = color;
    c.split_key = key;
    return *this;
  }
  // Every listed rank joins `name`, comm rank = position in the list.
  RowsBuilder& comm_all(const std::string& name, std::initializer_list<int> ranks) {
    int i = 0;
    for (int r : ranks) comm(r, name, static_cast<int>(ranks.size()), i++);
    return *this;
  }

  Op& op(int rank, const std::string& comm_name, const std::string& kind, uint64_t stream = 7,
         int64_t count = 1024, const std::string& dtype = "float32") {
    Process& p = trace.processes[rank];
    Op o;
    o.call_index = next_call(rank);
    o.comm = comm_index(rank, comm_name);
    o.seq = ++seq_[{rank, comm_name}];
    o.op = vocab::parse_op(kind).value();  // an unknown name is a test bug (throws)
    o.dtype = dtype.empty() ? vocab::Dtype::Mixed : vocab::parse_dtype(dtype).value();
    o.count = count;
    o.stream = stream;
    o.tid = 100 + rank;
    o.state = vocab::State::Enqueued;
    if (o.op == vocab::Op::AllReduce || o.op == vocab::Op::ReduceScatter || o.op == vocab::Op::Reduce) o.redop = vocab::RedOp::Sum;
    p.ops.push_back(o);
    return p.ops.back();
  }
  // An op that enqueued nothing (captured, failed, simulated): no seq, and the communicator's
  // next op takes the seq it did not, as the recorder writes them.
  Op& unsequenced(int rank, const std::string& comm_name, const std::string& kind, vocab::State state) {
    Op& o = op(rank, comm_name, kind);
    o.state = state;
    o.seq = 0;
    --seq_[{rank, comm_name}];
    return o;
  }
  Op& send(int rank, const std::string& comm_name, int peer, uint64_t stream = 7) {
    Op& o = op(rank, comm_name, "send", stream);
    o.peer = peer;
    return o;
  }
  Op& recv(int rank, const std::string& comm_name, int peer, uint64_t stream = 7) {
    Op& o = op(rank, comm_name, "recv", stream);
    o.peer = peer;
    return o;
  }
  Wait& wait(int rank, const std::string& kind, uint64_t stream = 0, uint64_t event = 0) {
    Process& p = trace.processes[rank];
    Wait w;
    w.call_index = next_call(rank);
    w.kind = vocab::parse_wait(kind).value();
    w.stream = stream;
    w.event = event;
    w.tid = 100 + rank;
    p.waits.push_back(w);
    return p.waits.back();
  }

  Trace trace;

 private:
  int64_t next_call(int rank) { return ++calls_[rank]; }
  int comm_index(int rank, const std::string& name) {
    const auto& comms = trace.processes[rank].comms;
    for (size_t i = 0; i < comms.size(); ++i)
      if (comms[i].name == name) return static_cast<int>(i);
    throw std::runtime_error("test builder: rank " + std::to_string(rank) + " is not in comm " + name);
  }
  std::map<int, int64_t> calls_;
  std::map<std::pair<int, std::string>, int64_t> seq_;
};

}  // namespace lockstep::testing
