// Timing of the model checker on a generated 3D-parallel schedule (TP x PP x DP), built directly
// as a model::Schedule (a Trace of this size would need gigabytes of strings).
//
//   build-replay/bin/model_check_bench [--ranks 1024] [--ops 10000] [--tp 8] [--pp 4] [--break]
//                                      [--via-trace]
//
// --via-trace also builds the same schedule as an in-memory Trace (what the loader returns) and
// times schedule_from_trace + check, the path of `lockstep replay --model`.
// --break makes the last rank issue a different collective halfway through, so the checker has
// to find and explain a deadlock at full size. Prints timings and peak RSS; it
// never fails on time (timings are not tests).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "model_check.h"

using namespace lockstep::model;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

long peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

int arg_int(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], name)) return std::atoi(argv[i + 1]);
  return def;
}

bool arg_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], name)) return true;
  return false;
}

// Ranks are laid out as rank = (dp * pp + p) * tp + t. One step per rank:
// TP all_reduce (stream 1), PP exchange with the next stage as one send_recv group (stream 2),
// TP all_reduce, DP reduce_scatter and all_gather (stream 3): 5 ops.
Schedule generate(int nranks, int ops_per_rank, int tp, int pp, bool broken) {
  const int dp = nranks / (tp * pp);
  Schedule s;
  const auto f32 = lockstep::vocab::Dtype::Float32;
  const auto sum = lockstep::vocab::RedOp::Sum;
  auto add_comm = [&](const std::string& label, int n) {
    CommInfo c;
    c.label = c.hash = label;
    c.nranks = n;
    c.members.assign(n, -1);
    s.comms.push_back(std::move(c));
    return static_cast<int32_t>(s.comms.size() - 1);
  };
  std::vector<int32_t> tp_comm(nranks / tp), pp_comm(nranks / pp), dp_comm(tp * pp);
  for (int g = 0; g < nranks / tp; ++g) tp_comm[g] = add_comm("tp" + std::to_string(g), tp);
  for (int g = 0; g < dp * tp; ++g) pp_comm[g] = add_comm("pp" + std::to_string(g), pp);
  for (int g = 0; g < tp * pp; ++g) dp_comm[g] = add_comm("dp" + std::to_string(g), dp);
  s.procs.resize(nranks);
  for (int r = 0; r < nranks; ++r) {
    const int t = r % tp, p = (r / tp) % pp, d = r / (tp * pp);
    ProcSchedule& ps = s.procs[r];
    ps.label = "rank " + std::to_string(r);
    ps.streams = {1, 2, 3};
    ps.threads = {1000 + r};
    ps.comm_rank.assign(s.comms.size(), -1);
    const int32_t ct = tp_comm[r / tp], cp = pp_comm[d * tp + t], cd = dp_comm[p * tp + t];
    ps.comm_rank[ct] = t;
    ps.comm_rank[cp] = p;
    ps.comm_rank[cd] = d;
    s.comms[ct].members[t] = s.comms[cp].members[p] = s.comms[cd].members[d] = r;
    ps.items.reserve(ops_per_rank);
    int64_t call = 0, seq_t = 0, seq_p = 0, seq_d = 0;
    auto coll = [&](OpKind k, int32_t comm, int32_t stream, int64_t& seq) {
      Item it;
      it.op = k;
      it.call_index = ++call;
      it.seq = ++seq;
      it.comm = comm;
      it.stream = stream;
      it.count = 1 << 20;
      it.dtype = f32;
      it.redop = k == OpKind::AllGather ? lockstep::vocab::RedOp::None : sum;
      ps.items.push_back(it);
    };
    while (static_cast<int>(ps.items.size()) < ops_per_rank) {
      coll(OpKind::AllReduce, ct, 0, seq_t);
      if (pp > 1) {
        Item it;
        it.op = OpKind::SendRecv;
        it.call_index = ++call;
        it.seq = ++seq_p;
        it.comm = cp;
        it.stream = 1;
        it.first_part = static_cast<int32_t>(ps.parts.size());
        ps.parts.push_back(Part{true, (p + 1) % pp, 4096, f32});
        ps.parts.push_back(Part{false, (p + pp - 1) % pp, 4096, f32});
        it.nparts = 2;
        ps.items.push_back(it);
      }
      coll(OpKind::AllReduce, ct, 0, seq_t);
      coll(OpKind::ReduceScatter, cd, 2, seq_d);
      coll(OpKind::AllGather, cd, 2, seq_d);
    }
    ps.items.resize(ops_per_rank);
  }
  if (broken) {
    // Halfway through, the last rank issues an all_reduce where its DP peers issue all_gather:
    // everything after it stalls, so the checker explains a stuck state of ~half the ops.
    auto& items = s.procs[nranks - 1].items;
    for (size_t i = items.size() / 2; i < items.size(); ++i) {
      if (items[i].op == OpKind::AllGather) {
        items[i].op = OpKind::AllReduce;
        items[i].redop = sum;
        break;
      }
    }
  }
  return s;
}

// The schedule as the loader would return it (strings per op), to time schedule_from_trace.
lockstep::Trace to_trace(const Schedule& s) {
  lockstep::Trace t;
  t.dir = "<generated>";
  t.processes.resize(s.procs.size());
  for (size_t p = 0; p < s.procs.size(); ++p) {
    const ProcSchedule& ps = s.procs[p];
    lockstep::Process& pr = t.processes[p];
    pr.global_rank = static_cast<int>(p);
    pr.path = ps.label;
    std::vector<int> local(s.comms.size(), -1);
    for (size_t c = 0; c < s.comms.size(); ++c) {
      if (ps.comm_rank[c] < 0) continue;
      lockstep::Comm cm;
      cm.hash = s.comms[c].hash;
      cm.nranks = s.comms[c].nranks;
      cm.rank = ps.comm_rank[c];
      local[c] = static_cast<int>(pr.comms.size());
      pr.comms.push_back(cm);
    }
    pr.ops.reserve(ps.items.size());
    for (const Item& it : ps.items) {
      lockstep::Op o;
      o.call_index = it.call_index;
      o.comm = local[it.comm];
      o.seq = it.seq;
      o.op = it.op;
      o.dtype = it.dtype;
      o.redop = it.redop;
      o.count = it.count;
      o.stream = ps.streams[it.stream];
      o.tid = ps.threads[it.thread];
      o.state = lockstep::vocab::State::Enqueued;
      for (int32_t k = 0; k < it.nparts; ++k) {
        const Part& part = ps.parts[it.first_part + k];
        o.parts.push_back(lockstep::OpPart{part.is_send ? OpKind::Send : OpKind::Recv, lockstep::vocab::Dtype::Float32, part.count, -1, part.peer,
                                         lockstep::vocab::RedOp::None});
      }
      pr.ops.push_back(std::move(o));
    }
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int nranks = arg_int(argc, argv, "--ranks", 1024), ops = arg_int(argc, argv, "--ops", 10000);
  const int tp = arg_int(argc, argv, "--tp", 8), pp = arg_int(argc, argv, "--pp", 4);
  const bool broken = arg_flag(argc, argv, "--break");
  if (nranks % (tp * pp)) {
    std::fprintf(stderr, "model_check_bench: --ranks must be a multiple of tp*pp (%d)\n", tp * pp);
    return 2;
  }
  double t0 = now_s();
  Schedule s = generate(nranks, ops, tp, pp, broken);
  double t1 = now_s();
  Options o;
  Result r = check(s, o);
  double t2 = now_s();
  std::printf("ranks %d, ops/rank %d, comms %zu: generate %.2f s, check %.2f s (%.0f ns/op), peak RSS %ld MiB\n",
              nranks, ops, s.comms.size(), t1 - t0, t2 - t1, (t2 - t1) * 1e9 / (double(nranks) * ops), peak_rss_mb());
  std::printf("verdict: %s (%s model)%s%s\n", verdict_name(r.verdict), r.model.c_str(),
              r.summary.empty() ? "" : ": ", r.summary.c_str());
  if (arg_flag(argc, argv, "--via-trace")) {
    lockstep::Trace t = to_trace(s);
    s = Schedule{};  // only the trace from here on
    double t3 = now_s();
    Schedule from = schedule_from_trace(t);
    double t4 = now_s();
    Result r2 = check(from, o);
    double t5 = now_s();
    std::printf("via trace: schedule_from_trace %.2f s (%.0f ns/op), check %.2f s, peak RSS %ld MiB, verdict %s\n", t4 - t3,
                (t4 - t3) * 1e9 / (double(nranks) * ops), t5 - t4, peak_rss_mb(), verdict_name(r2.verdict));
  }
  return 0;
}
