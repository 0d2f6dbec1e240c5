// Timing of the model checker on a generated 3D-parallel schedule (TP x PP x DP), built directly
// as the compact lockstep::Schedule (a Trace of this size would need gigabytes of strings).
//
//   build-replay/bin/model_check_bench [--ranks 1024] [--ops 10000] [--tp 8] [--pp 4] [--break]
//
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
#include "schedule.h"

using namespace lockstep::model;
using lockstep::Schedule;

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
lockstep::Schedule generate(int nranks, int ops_per_rank, int tp, int pp, bool broken) {
  using lockstep::vocab::Op;
  const int dp = nranks / (tp * pp);
  lockstep::Schedule s;
  s.dir = "<generated>";
  lockstep::SignatureTable sigs;
  const auto f32 = lockstep::vocab::Dtype::Float32;
  const auto sum = lockstep::vocab::RedOp::Sum;
  auto coll_sig = [&](Op k) {
    return sigs.intern({k, f32, 1 << 20, -1, -1, k == Op::AllGather ? lockstep::vocab::RedOp::None : sum, {}, {}});
  };
  const uint32_t all_reduce = coll_sig(Op::AllReduce), reduce_scatter = coll_sig(Op::ReduceScatter),
                 all_gather = coll_sig(Op::AllGather);
  s.procs.resize(nranks);
  for (int r = 0; r < nranks; ++r) {
    const int t = r % tp, p = (r / tp) % pp, d = r / (tp * pp);
    lockstep::SchedProcess& sp = s.procs[r];
    sp.info.global_rank = r;
    sp.info.path = "rank " + std::to_string(r);
    auto add_comm = [&](const std::string& hash, int n, int rank) {
      lockstep::Comm c;
      c.hash = c.name = hash;
      c.nranks = n;
      c.rank = rank;
      sp.info.comms.push_back(c);
      return static_cast<uint16_t>(sp.info.comms.size() - 1);
    };
    const uint16_t ct = add_comm("tp" + std::to_string(r / tp), tp, t);
    const uint16_t cp = add_comm("pp" + std::to_string(d * tp + t), pp, p);
    const uint16_t cd = add_comm("dp" + std::to_string(p * tp + t), dp, d);
    sp.threads = {1000 + r};
    sp.host_waits_loaded = true;
    const uint32_t exchange =
        sigs.intern({Op::SendRecv, f32, 8192, -1, -1, lockstep::vocab::RedOp::None,
                     {{Op::Send, f32, 4096, -1, (p + 1) % pp, lockstep::vocab::RedOp::None},
                      {Op::Recv, f32, 4096, -1, (p + pp - 1) % pp, lockstep::vocab::RedOp::None}},
                     {}});
    sp.ops.reserve(ops_per_rank);
    lockstep::ScheduleBuilder index(sp);
    int64_t call = 0;
    int64_t seq_t = 0, seq_p = 0, seq_d = 0;
    auto add = [&](uint32_t sig, uint16_t comm, uint64_t stream, int64_t& seq) {
      if (static_cast<int>(sp.ops.size()) < ops_per_rank) index.add_op({++call, ++seq, comm, sig, stream, -1, false});
    };
    while (static_cast<int>(sp.ops.size()) < ops_per_rank) {
      add(all_reduce, ct, 1, seq_t);
      if (pp > 1) add(exchange, cp, 2, seq_p);
      add(all_reduce, ct, 1, seq_t);
      add(reduce_scatter, cd, 3, seq_d);
      add(all_gather, cd, 3, seq_d);
    }
    sp.op_threads.assign(sp.ops.size(), 0);
  }
  if (broken) {
    // Halfway through, the last rank issues an all_reduce where its DP peers issue all_gather:
    // everything after it stalls, so the checker explains a stuck state of ~half the ops.
    auto& ops = s.procs[nranks - 1].ops;
    for (size_t i = ops.size() / 2; i < ops.size(); ++i) {
      if (ops[i].sig == all_gather) {
        ops[i].sig = all_reduce;
        break;
      }
    }
  }
  s.sigs = sigs.take();
  return s;
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
  const int ncomms = nranks / tp + nranks / pp + tp * pp;
  std::printf("ranks %d, ops/rank %d, comms %d: generate %.2f s, check %.2f s (%.0f ns/op), peak RSS %ld MiB\n",
              nranks, ops, ncomms, t1 - t0, t2 - t1, (t2 - t1) * 1e9 / (double(nranks) * ops), peak_rss_mb());
  std::printf("verdict: %s (%s model)%s%s\n", verdict_name(r.verdict), r.model.c_str(),
              r.summary.empty() ? "" : ": ", r.summary.c_str());
  return 0;
}
