// gen_trace: writes a synthetic trace directory in the recorder's schema (schema/trace_schema.h)
// for benchmarks: N ranks x M ops over a world communicator and its tensor-/data-parallel splits,
// with stacks, grouped all-to-alls, completions, and a divergence near the end (one rank issues
// a broadcast where its tensor-parallel peers issue all_gather; the ops after it stay in flight).
//
//   gen_trace DIR --ranks 256 --ops 100000 [--tp 8] [--diverge-from-end 100] [--lag-host-ops 0] [--threads 2]
//            [--from-rank R] [--ranks-per-host 8] [--rank-names] [--live] [--finished]
// Files are named as the recorder names them, <host>-<pid>.lockstep.sqlite, host "node<rank / N>"
// (--ranks-per-host N, default 8: 8 GPUs a node) and pid 10000 + rank; --rank-names names them
// rank-<rank>.lockstep.sqlite instead (tests that address one rank's file).
// --from-rank R: write only ranks R.. (finishing an interrupted generation of a large directory).
// --lag-host-ops K: the ranks of the last host issue K ops fewer (a lagging
// host: never_issued on the world communicator).
// --live: files as a live recorder leaves them (content generation 1 in PRAGMA user_version, no
// exit): node summaries of them survive heartbeats (bench/live_summary_bench.sh).
// --finished: every process exited cleanly (meta finished 1, exit_reason exit): with
// --diverge-from-end 0, a run `check` passes (and writes a baseline of).
// --all-to-all-everywhere: every collective an all_to_all without per-peer parts, of one count per
// communicator (tp 4096, dp 8192, world 32768): all-to-alls whose digest (op, dtype) is the same
// on every communicator and whose count is not.
// --invert-rank R --invert-at I: rank R issues ops I and I+1 the other way round (I % 8 == 7: the
// world all-to-all and the next step's first tensor-parallel all_gather): an order inversion,
// each communicator's own sequence (and digest) unchanged, its order digests as issued.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "file_name.h"
#include "op_digest.h"
#include "trace_file.h"
#include "trace_schema.h"
#include "vocab.h"

namespace {

struct Options {
  std::string dir;
  int ranks = 8;
  int64_t ops = 1000;
  int tp = 8;
  int64_t diverge_from_end = 100;  // 0: no divergence
  int64_t lag_host_ops = 0;        // ops the last host's ranks do not issue
  unsigned threads = 2;
  int from_rank = 0;
  int ranks_per_host = 8;          // a host (node) runs this many ranks, as 8 GPUs a node do
  bool rank_names = false;         // name files rank-N (tests that address a file by rank)
  bool finished = false;           // every process exited cleanly (an exit record)
  bool live = false;               // a live recorder's files: content generation 1 (schema::kUserVersionOffset)
  bool all_to_all_everywhere = false;
  int invert_rank = -1;
  int64_t invert_at = -1;
};

void check(int rc, const lockstep::trace_file::Db& db, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    std::fprintf(stderr, "gen_trace: %s: %s\n", what, db.errmsg().c_str());
    std::exit(1);
  }
}

// Comm hashes look random, as the recorder's do (their 8-digit prefixes must not collide).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void write_rank(const Options& o, int rank) {
  namespace tf = lockstep::trace_file;
  namespace vocab = lockstep::vocab;
  namespace digest = lockstep::digest;
  // As the recorder names its files (interposer/writer.cpp): <host>-<pid>.lockstep.sqlite, so
  // `lockstep summarize` on a node picks its host's files without --every-host.
  const std::string host = "node" + std::to_string(rank / o.ranks_per_host);
  const int pid = 10000 + rank;
  std::string path = o.dir + "/" +
                     (o.rank_names ? "rank-" + std::to_string(rank) : lockstep::schema::safe_file_component(host) + "-" + std::to_string(pid)) +
                     lockstep::schema::kFileSuffix;
  tf::Db db;
  tf::CreateOptions co;
  co.journal_mode = "OFF";
  co.synchronous = "OFF";
  const char* what = "";
  check(tf::create(db, path, co, &what), db, what);
  tf::Tables t;
  check(t.prepare(db.get(), 0, 0), db, "prepare");
  check(db.exec("BEGIN"), db, "begin");
  int tp = std::min(o.tp, o.ranks);
  int groups = o.ranks / tp;
  auto meta = [&](const char* k, const std::string& v) { check(t.meta(k, v), db, "meta"); };
  meta("host", host);
  meta("pid", std::to_string(pid));
  meta("global_rank", std::to_string(rank));
  meta("finished", o.finished ? "1" : "0");
  if (o.finished) meta("exit_reason", "exit");
  meta("last_flush_mono_ns", "1000000000000");
  meta("stack_mode", "python");
  meta("digest_version", std::to_string(digest::kDigestVersion));
  meta("checkpoint_interval", std::to_string(digest::kDefaultInterval));
  meta("max_mb", "0");
  meta("retired_ops", "0");
  // Communicators: world; tp split (color rank/tp); dp split (color rank%tp).
  uint64_t seed = 0x5eed;
  std::string world = tf::hex16(mix(seed)), tph = tf::hex16(mix(seed + 1 + rank / tp)),
              dph = tf::hex16(mix(seed + 100000 + rank % tp));
  {
    tf::CommRow c;
    c.id = 1, c.hash = world, c.handle = 4096, c.nranks = o.ranks, c.rank = rank, c.init_call = 1, c.init_mono_ns = 1;
    check(t.comm(c), db, "comm");
    c.id = 2, c.hash = tph, c.handle = 4097, c.nranks = tp, c.rank = rank % tp, c.parent_id = 1, c.has_split = true,
    c.split_color = rank / tp, c.init_call = 2, c.init_mono_ns = 2;
    check(t.comm(c), db, "comm");
    c.id = 3, c.hash = dph, c.handle = 4098, c.nranks = groups, c.rank = rank / tp, c.split_color = rank % tp,
    c.init_call = 3, c.init_mono_ns = 3;
    check(t.comm(c), db, "comm");
  }
  // Stacks: a few, each with Python and native frames.
  const char* fns[] = {"tp_all_gather", "tp_reduce_scatter", "dp_all_reduce", "moe_all_to_all"};
  for (int s = 1; s <= 4; ++s) {
    check(t.stack(s, tf::hex16(uint64_t(s))), db, "stack");
    tf::FrameRow f;
    f.stack_id = s, f.depth = 0, f.kind = vocab::FrameKind::Python, f.function = fns[s - 1], f.file = "model.py",
    f.line = 100 + s;
    check(t.frame(f), db, "frame");
    f = {};
    f.stack_id = s, f.depth = 1, f.kind = vocab::FrameKind::Native, f.function = "ncclAllReduce",
    f.module = "libnccl.so.2", f.offset = 4660;
    check(t.frame(f), db, "frame");
  }
  // Signatures: one per step position k (0..7), and the divergent broadcast (id 9).
  bool parts = o.ranks <= 16;  // per-peer parts only for small worlds: 2 x ranks rows per all-to-all
  uint64_t sig_hash[10] = {};
  for (int k = 0; k <= 8; ++k) {
    tf::SignatureRow s;
    s.id = k + 1;
    int kk = k == 8 ? 0 : k;
    s.comm_id = kk < 5 ? 2 : kk < 7 ? 3 : 1;
    s.op = k == 8 ? vocab::Op::Broadcast
           : kk < 3 ? vocab::Op::AllGather : kk < 5 ? vocab::Op::ReduceScatter : kk < 7 ? vocab::Op::AllReduce
                                                                                   : vocab::Op::AllToAll;
    s.dtype = vocab::Dtype::Bfloat16;
    s.count = int64_t(1) << (12 + kk % 4);
    s.redop = kk >= 3 && kk < 7 && k != 8 ? vocab::RedOp::Sum : vocab::RedOp::None;
    s.stream = 7;
    s.tid = 100;
    s.thread_name = "MainThread";
    s.stack_id = kk < 3 ? 1 : kk < 5 ? 2 : kk < 7 ? 3 : 4;
    std::vector<digest::Part> dp;
    if (s.op == vocab::Op::AllToAll && parts)
      for (int peer = 0, p = 0; peer < o.ranks; ++peer)
        for (vocab::Op dir : {vocab::Op::Send, vocab::Op::Recv}) {
          tf::PartRow r;
          r.sig_id = s.id, r.part = p++, r.op = dir, r.dtype = vocab::Dtype::Bfloat16, r.count = s.count / o.ranks,
          r.peer = peer;
          check(t.part(r), db, "part");
          dp.push_back({dir, r.dtype, r.count, -1, peer, vocab::RedOp::None});
        }
    if (o.all_to_all_everywhere && k != 8) {
      s.op = vocab::Op::AllToAll, s.redop = vocab::RedOp::None;
      s.count = s.comm_id == 2 ? 4096 : s.comm_id == 3 ? 8192 : 32768;
    }
    s.nparts = int32_t(dp.size());
    s.hash = sig_hash[s.id] = digest::signature_hash(s.op, s.dtype, s.count, s.root, s.peer, s.redop, dp.data(), dp.size());
    check(t.signature(s), db, "signature");
  }
  int64_t seq[4] = {0, 0, 0, 0}, ordinal[4] = {0, 0, 0, 0};
  uint64_t dig[4] = {0, 0, 0, 0};
  uint64_t order = digest::kEmpty;  // the process's order digest (op_digest.h order_step)
  int64_t diverge_at = o.diverge_from_end > 0 ? o.ops - o.diverge_from_end : -1;
  bool odd_rank = rank == o.ranks - 1;
  int64_t ops = rank / o.ranks_per_host == (o.ranks - 1) / o.ranks_per_host ? std::max<int64_t>(1, o.ops - o.lag_host_ops) : o.ops;
  for (int64_t j = 0; j < ops; ++j) {
    const bool inverted = rank == o.invert_rank && j + 1 < ops && (j == o.invert_at || j == o.invert_at + 1);
    const int64_t i = !inverted ? j : j == o.invert_at ? j + 1 : j - 1;  // the op issued j-th
    int64_t ci = 10 + j;
    // Step of 8 ops: tp all_gather x3, tp reduce_scatter x2, dp all_reduce x2, world all_to_all.
    int k = static_cast<int>(i % 8);
    int comm = k < 5 ? 2 : k < 7 ? 3 : 1;
    int sig = k + 1;
    if (odd_rank && i == diverge_at && comm == 2) sig = 9;
    if (odd_rank && i == diverge_at && comm != 2) diverge_at++;  // land on a tp op
    tf::OpRow r;
    r.call_index = ci;
    r.sig = sig;
    r.seq = ++seq[comm];
    r.issue_mono_ns = ci * 1000;
    r.issue_wall_ns = ci * 1000;
    r.return_mono_ns = ci * 1000 + 50;
    bool in_flight = o.diverge_from_end > 0 && i >= o.ops - o.diverge_from_end;
    r.completed = !in_flight;
    r.complete_mono_ns = ci * 1000 + 900;
    r.group_id = comm == 1 ? i : -1;  // the all-to-all is a group of sends/recvs
    check(t.op(r), db, "insert op");
    // The recorder's digest checkpoints (op_digest.h): every collective here is one.
    dig[comm] = digest::chain(dig[comm], sig_hash[sig]);
    order = digest::order_step(order, comm);
    if (digest::is_checkpoint(++ordinal[comm], digest::kDefaultInterval))
      check(t.checkpoint({comm, ordinal[comm], r.seq, dig[comm], j + 1, order}), db, "checkpoint");
  }
  if (o.live) check(db.exec("PRAGMA user_version=1"), db, "user_version");
  check(db.exec("COMMIT"), db, "commit");
}

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "gen_trace: %s\nusage: gen_trace DIR --ranks N --ops M [--tp T] [--diverge-from-end K] [--lag-host-ops K] [--threads T] [--from-rank R] [--ranks-per-host N] [--rank-names] [--live] [--finished] [--invert-rank R --invert-at I] [--all-to-all-everywhere]\n", msg);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--ranks") o.ranks = std::atoi(next());
    else if (a == "--ops") o.ops = std::atoll(next());
    else if (a == "--tp") o.tp = std::atoi(next());
    else if (a == "--diverge-from-end") o.diverge_from_end = std::atoll(next());
    else if (a == "--lag-host-ops") o.lag_host_ops = std::atoll(next());
    else if (a == "--invert-rank") o.invert_rank = std::atoi(next());
    else if (a == "--all-to-all-everywhere") o.all_to_all_everywhere = true;
    else if (a == "--invert-at") o.invert_at = std::atoll(next());
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::atoi(next()));
    else if (a == "--from-rank") o.from_rank = std::atoi(next());
    else if (a == "--ranks-per-host") o.ranks_per_host = std::atoi(next());
    else if (a == "--rank-names") o.rank_names = true;
    else if (a == "--live") o.live = true;
    else if (a == "--finished") o.finished = true;
    else if (!a.empty() && a[0] != '-' && o.dir.empty()) o.dir = a;
    else usage(("unknown argument " + a).c_str());
  }
  if (o.dir.empty() || o.ranks < 2 || o.ops < 16 || o.tp < 1 || o.ranks_per_host < 1 || o.ranks % std::min(o.tp, o.ranks) != 0)
    usage("need DIR, --ranks >= 2 (a multiple of --tp), --ops >= 16, --ranks-per-host >= 1");
  std::filesystem::create_directories(o.dir);
  std::atomic<int> next{std::max(0, o.from_rank)};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, o.threads); ++t)
    pool.emplace_back([&] {
      for (int r; (r = next.fetch_add(1)) < o.ranks;) write_rank(o, r);
    });
  for (auto& t : pool) t.join();
  std::printf("gen_trace: wrote %d ranks x %lld ops to %s\n", o.ranks, static_cast<long long>(o.ops), o.dir.c_str());
  return 0;
}
