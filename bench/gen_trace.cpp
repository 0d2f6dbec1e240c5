// gen_trace: writes a synthetic trace directory in the recorder's schema (schema/trace_schema.h)
// for benchmarks: N ranks x M ops over a world communicator and its tensor-/data-parallel splits,
// with stacks, grouped all-to-alls, completions, and a divergence near the end (one rank issues
// a broadcast where its tensor-parallel peers issue all_gather; the ops after it stay in flight).
//
//   gen_trace DIR --ranks 256 --ops 100000 [--tp 8] [--diverge-from-end 100] [--lag-host-ops 0] [--threads 2]
// --lag-host-ops K: the ranks of the last host (8 ranks a host) issue K ops fewer (a lagging
// host: never_issued on the world communicator).
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "trace_schema.h"

namespace {

struct Options {
  std::string dir;
  int ranks = 8;
  int64_t ops = 1000;
  int tp = 8;
  int64_t diverge_from_end = 100;  // 0: no divergence
  int64_t lag_host_ops = 0;        // ops the last host's ranks do not issue
  unsigned threads = 2;
};

void check(int rc, sqlite3* db, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    std::fprintf(stderr, "gen_trace: %s: %s\n", what, sqlite3_errmsg(db));
    std::exit(1);
  }
}

void exec(sqlite3* db, const std::string& sql) { check(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), db, sql.c_str()); }

// Comm hashes look random, as the recorder's do (their 8-digit prefixes must not collide).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

void write_rank(const Options& o, int rank) {
  std::string path = o.dir + "/rank-" + std::to_string(rank) + lockstep::schema::kFileSuffix;
  std::filesystem::remove(path);
  sqlite3* db = nullptr;
  check(sqlite3_open(path.c_str(), &db), db, "open");
  exec(db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA application_id=" +
               std::to_string(lockstep::schema::kApplicationId));
  exec(db, lockstep::schema::kCreateSql);
  exec(db, "BEGIN");
  int tp = std::min(o.tp, o.ranks);
  int groups = o.ranks / tp;
  auto meta = [&](const std::string& k, const std::string& v) {
    exec(db, "INSERT OR REPLACE INTO meta VALUES('" + k + "','" + v + "')");
  };
  meta("schema_version", std::to_string(lockstep::schema::kSchemaVersion));
  meta("host", "node" + std::to_string(rank / 8));
  meta("pid", std::to_string(10000 + rank));
  meta("global_rank", std::to_string(rank));
  meta("finished", "0");
  meta("last_flush_mono_ns", "1000000000000");
  meta("stack_mode", "python");
  // Communicators: world; tp split (color rank/tp); dp split (color rank%tp).
  uint64_t seed = 0x5eed;
  std::string world = hex16(mix(seed)), tph = hex16(mix(seed + 1 + rank / tp)), dph = hex16(mix(seed + 100000 + rank % tp));
  exec(db, "INSERT INTO comms(id, comm_hash, handle, nranks, rank, init_call, init_mono_ns, init_rc) VALUES(1,'" + world +
               "',4096," + std::to_string(o.ranks) + "," + std::to_string(rank) + ",1,1,0)");
  exec(db, "INSERT INTO comms(id, comm_hash, handle, nranks, rank, parent_id, split_color, init_call, init_mono_ns, init_rc) "
           "VALUES(2,'" + tph + "',4097," + std::to_string(tp) + "," + std::to_string(rank % tp) + ",1," +
               std::to_string(rank / tp) + ",2,2,0)");
  exec(db, "INSERT INTO comms(id, comm_hash, handle, nranks, rank, parent_id, split_color, init_call, init_mono_ns, init_rc) "
           "VALUES(3,'" + dph + "',4098," + std::to_string(groups) + "," + std::to_string(rank / tp) + ",1," +
               std::to_string(rank % tp) + ",3,3,0)");
  // Stacks: a few, each with Python and native frames.
  const char* fns[] = {"tp_all_gather", "tp_reduce_scatter", "dp_all_reduce", "moe_all_to_all"};
  for (int s = 1; s <= 4; ++s) {
    exec(db, "INSERT INTO stacks VALUES(" + std::to_string(s) + ",'" + hex16(s) + "')");
    exec(db, "INSERT INTO frames VALUES(" + std::to_string(s) + ",0,'python','" + fns[s - 1] + "',NULL,NULL,'model.py'," +
                 std::to_string(100 + s) + ")");
    exec(db, "INSERT INTO frames VALUES(" + std::to_string(s) + ",1,'native','ncclAllReduce','libnccl.so.2',4660,NULL,NULL)");
  }
  sqlite3_stmt *op = nullptr, *done = nullptr, *part = nullptr;
  check(sqlite3_prepare_v2(db,
                           "INSERT INTO ops(call_index, comm_id, seq, op, dtype, count, redop, stream, tid, thread_name, "
                           "group_id, issue_mono_ns, issue_wall_ns, return_mono_ns, rc, state, stack_id) "
                           "VALUES(?,?,?,?,'bfloat16',?,?,7,100,'MainThread',?,?,?,?,0,'enqueued',?)",
                           -1, &op, nullptr),
        db, "prepare ops");
  check(sqlite3_prepare_v2(db, "INSERT INTO completions VALUES(?,?)", -1, &done, nullptr), db, "prepare completions");
  check(sqlite3_prepare_v2(db, "INSERT INTO op_parts(call_index, part, op, dtype, count, peer) VALUES(?,?,?,'bfloat16',?,?)",
                           -1, &part, nullptr),
        db, "prepare parts");
  int64_t seq[4] = {0, 0, 0, 0};
  int64_t diverge_at = o.diverge_from_end > 0 ? o.ops - o.diverge_from_end : -1;
  bool odd_rank = rank == o.ranks - 1;
  int64_t ops = rank / 8 == (o.ranks - 1) / 8 ? std::max<int64_t>(1, o.ops - o.lag_host_ops) : o.ops;
  for (int64_t i = 0; i < ops; ++i) {
    int64_t ci = 10 + i;
    // Step of 8 ops: tp all_gather x3, tp reduce_scatter x2, dp all_reduce x2, world all_to_all.
    int k = static_cast<int>(i % 8);
    int comm = k < 5 ? 2 : k < 7 ? 3 : 1;
    const char* name = k < 3 ? "all_gather" : k < 5 ? "reduce_scatter" : k < 7 ? "all_reduce" : "all_to_all";
    int stack = k < 3 ? 1 : k < 5 ? 2 : k < 7 ? 3 : 4;
    if (odd_rank && i == diverge_at && comm == 2) name = "broadcast";
    if (odd_rank && i == diverge_at && comm != 2) diverge_at++;  // land on a tp op
    int64_t count = 1 << (12 + k % 4);
    sqlite3_bind_int64(op, 1, ci);
    sqlite3_bind_int(op, 2, comm);
    sqlite3_bind_int64(op, 3, ++seq[comm]);
    sqlite3_bind_text(op, 4, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(op, 5, count);
    if (k >= 3 && k < 7) sqlite3_bind_text(op, 6, "sum", -1, SQLITE_STATIC);
    else sqlite3_bind_null(op, 6);
    if (comm == 1) sqlite3_bind_int64(op, 7, i);  // the all-to-all is a group of sends/recvs
    else sqlite3_bind_null(op, 7);
    sqlite3_bind_int64(op, 8, ci * 1000);
    sqlite3_bind_int64(op, 9, ci * 1000);
    sqlite3_bind_int64(op, 10, ci * 1000 + 50);
    sqlite3_bind_int(op, 11, stack);
    check(sqlite3_step(op), db, "insert op");
    sqlite3_reset(op);
    sqlite3_clear_bindings(op);
    if (comm == 1 && o.ranks <= 16) {
      // Per-peer parts only for small worlds: 2 x ranks rows per all-to-all otherwise dominate.
      for (int peer = 0, p = 0; peer < o.ranks; ++peer)
        for (const char* dir : {"send", "recv"}) {
          sqlite3_bind_int64(part, 1, ci);
          sqlite3_bind_int(part, 2, p++);
          sqlite3_bind_text(part, 3, dir, -1, SQLITE_STATIC);
          sqlite3_bind_int64(part, 4, count / o.ranks);
          sqlite3_bind_int(part, 5, peer);
          check(sqlite3_step(part), db, "insert part");
          sqlite3_reset(part);
        }
    }
    bool in_flight = o.diverge_from_end > 0 && i >= o.ops - o.diverge_from_end;
    if (!in_flight) {
      sqlite3_bind_int64(done, 1, ci);
      sqlite3_bind_int64(done, 2, ci * 1000 + 900);
      check(sqlite3_step(done), db, "insert completion");
      sqlite3_reset(done);
    }
  }
  sqlite3_finalize(op);
  sqlite3_finalize(done);
  sqlite3_finalize(part);
  exec(db, "COMMIT");
  sqlite3_close(db);
}

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "gen_trace: %s\nusage: gen_trace DIR --ranks N --ops M [--tp T] [--diverge-from-end K] [--lag-host-ops K] [--threads T]\n", msg);
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
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::atoi(next()));
    else if (!a.empty() && a[0] != '-' && o.dir.empty()) o.dir = a;
    else usage(("unknown argument " + a).c_str());
  }
  if (o.dir.empty() || o.ranks < 2 || o.ops < 16 || o.tp < 1 || o.ranks % std::min(o.tp, o.ranks) != 0)
    usage("need DIR, --ranks >= 2 (a multiple of --tp), --ops >= 16");
  std::filesystem::create_directories(o.dir);
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, o.threads); ++t)
    pool.emplace_back([&] {
      for (int r; (r = next.fetch_add(1)) < o.ranks;) write_rank(o, r);
    });
  for (auto& t : pool) t.join();
  std::printf("gen_trace: wrote %d ranks x %lld ops to %s\n", o.ranks, static_cast<long long>(o.ops), o.dir.c_str());
  return 0;
}
