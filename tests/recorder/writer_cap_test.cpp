// The recorder's writer on disk (schema 2): bytes per op, the size cap (LOCKSTEP_MAX_MB), the
// digest checkpoints, and what a SIGKILL leaves. Records are pushed straight into rec::Writer
// (as the hot path does) and the file is read back with plain SQL and with the analyzer's loader.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "call_progress.h"
#include "checkpoints.h"
#include "comm_index.h"
#include "op_digest.h"
#include "process_info.h"
#include "trace_file.h"
#include "trace_loader.h"
#include "trace_test_util.h"
#include "vocab.h"
#include "writer.h"
#include "writer_test_records.h"

namespace lockstep::rec {
namespace {

using test::TempDir;

// What the test pushed, to recompute digests without the writer.
struct Pushed {
  int64_t call_index, comm, seq;
  OpKind op;
  int64_t count;
};

// A deterministic mix over two communicators: all_reduce / all_gather of varying sizes, a
// send now and then (p2p: sequenced, not digested), a failed call (unsequenced) now and then.
struct Workload {
  std::vector<Pushed> ops;
  std::map<int64_t, int64_t> next_seq{{1, 1}, {2, 1}};

  Record op(int64_t call) {
    Record r;
    r.kind = RecKind::Op;
    r.op = {};
    r.op.call_index = call;
    r.op.comm_id = 1 + call % 2;
    int k = int(call % 7);
    r.op.op = k == 3 ? OpKind::Send : k == 5 ? OpKind::AllGather : OpKind::AllReduce;
    r.op.count = 1024 << (call % 4);
    r.op.group_id = -1;
    r.op.issue_mono = 1'000'000'000 + call * 1000;
    r.op.issue_wall = r.op.issue_mono + 1'700'000'000'000'000'000;
    r.op.return_mono = r.op.issue_mono + 300;
    r.op.stream = 0x5000 + uint64_t(r.op.comm_id);
    r.op.origin_call = -1;
    r.op.tid = 4242;
    r.op.root = -1;
    r.op.peer = r.op.op == OpKind::Send ? 1 : -1;
    r.op.redop = r.op.op == OpKind::AllReduce ? 0 : -1;
    r.op.dtype = 7;
    r.op.rc = call % 101 == 0 ? 5 : 0;
    r.op.state = r.op.rc ? OpState::Failed : OpState::Enqueued;
    r.op.seq = r.op.rc ? 0 : next_seq[r.op.comm_id]++;
    ops.push_back({call, r.op.comm_id, r.op.seq, r.op.op, r.op.count});
    return r;
  }

  // The digest after the first `n` collectives of `comm`, from what was pushed (op_digest.h).
  uint64_t digest_after(int64_t comm, int64_t n) const {
    uint64_t d = digest::kEmpty;
    int64_t k = 0;
    for (const Pushed& p : ops) {
      if (p.comm != comm || p.seq == 0 || p.op == OpKind::Send) continue;
      if (k == n) break;
      d = digest::chain(d, hash(p));
      ++k;
    }
    return d;
  }
  static uint64_t hash(const Pushed& p) {
    vocab::Op op = vocab::Op(p.op);
    return digest::signature_hash(op, vocab::Dtype::Float32, p.count, -1, p.op == OpKind::Send ? 1 : -1,
                                  op == vocab::Op::AllReduce ? vocab::RedOp::Sum : vocab::RedOp::None, nullptr, 0);
  }
};

Writer* open_writer(const std::string& dir, int64_t max_mb, int64_t interval) {
  TraceHeader h;
  h.info = read_process_info();
  h.info.trace_dir = dir;
  h.max_mb = max_mb;
  h.checkpoint_interval = interval;
  std::string err;
  Writer* w = Writer::open(h, &err);
  EXPECT_NE(w, nullptr) << err;
  if (!w) return w;
  w->start();
  for (int64_t id : {1, 2})  // the two communicators of Workload
    w->push(test::comm_init_record(id, 0xc0ffee00 + uint64_t(id)));
  return w;
}

void push_ops(Writer* w, Workload& load, int64_t from, int64_t to) {
  for (int64_t call = from; call <= to; ++call) {
    Record r = load.op(call);
    w->push(r);
    if (r.op.state == OpState::Enqueued) {
      Record c;
      c.kind = RecKind::Completion;
      c.done = {call, r.op.issue_mono + 20'000};
      w->push(c);
    }
    if (call % 20000 == 0) w->flush(60000);  // within the queue's 65,536 records
  }
}

class Db {
 public:
  explicit Db(const std::string& path) { EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK); }
  ~Db() { sqlite3_close(db_); }
  sqlite3* get() const { return db_; }
  int64_t num(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db_);
    int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return v;
  }
  std::vector<std::vector<int64_t>> rows(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    std::vector<std::vector<int64_t>> out;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db_);
    while (sqlite3_step(st) == SQLITE_ROW) {
      out.emplace_back();
      for (int i = 0; i < sqlite3_column_count(st); ++i) out.back().push_back(sqlite3_column_int64(st, i));
    }
    sqlite3_finalize(st);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

int64_t file_size(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : -1;
}

TEST(WriterOnDisk, an_op_costs_at_most_40_bytes_at_full_detail) {
  TempDir dir;
  Writer* w = open_writer(dir.path, 0, 0);
  ASSERT_NE(w, nullptr);
  Workload load;
  const int64_t n = 200000;
  push_ops(w, load, 1, n);
  w->stop("exit");
  Db db(w->path());
  ASSERT_EQ(db.num("SELECT count(*) FROM ops"), n);
  ASSERT_EQ(db.num("SELECT value FROM meta WHERE key='dropped_records'"), 0) << "the queue overflowed: the test's own fault";
  EXPECT_EQ(db.num("SELECT count(*) FROM completions"), db.num("SELECT count(*) FROM ops WHERE state='enqueued'"));
  EXPECT_LE(double(file_size(w->path())) / double(n), 40.0) << file_size(w->path()) << " bytes for " << n << " ops";
  // Past 4 MiB the file was rewritten once with 4 KiB pages (writer.h kLargePagesAt); no cap: one chunk.
  EXPECT_EQ(db.num("PRAGMA page_size"), 4096);
  EXPECT_EQ(db.num("SELECT count(*) FROM sqlite_master WHERE name GLOB 'op_rows_[0-9]*'"), 0);
  // The view gives back what was pushed, with names.
  EXPECT_EQ(db.num("SELECT count(*) FROM ops WHERE op='send' AND peer=1 AND dtype='float32'"),
            db.num("SELECT count(*) FROM op_rows WHERE call_index % 7 = 3"));
  EXPECT_EQ(db.num("SELECT issue_wall_ns - issue_mono_ns FROM ops WHERE call_index = 777"), 1'700'000'000'000'000'000);
  EXPECT_EQ(db.num("SELECT c.mono_ns - o.issue_mono_ns FROM ops o JOIN completions c USING(call_index) "
                   "WHERE call_index = 778"),
            20'000);
}

// Completion rows come through a queue of their own (writer.h): one that arrives before its op
// record (an op record behind a push in progress) is kept for one more round, and one whose op
// never comes is counted once, in meta completions_without_op.
TEST(WriterOnDisk, a_completion_taken_before_its_op_record_still_completes_it) {
  TempDir dir;
  Writer* w = open_writer(dir.path, 0, 0);
  ASSERT_NE(w, nullptr);
  Workload load;
  auto done = [&](int64_t call, int64_t mono) {
    Record c;
    c.kind = RecKind::Completion;
    c.done = {call, mono};
    w->push(c);
  };
  done(1, 111);
  w->flush(60000);         // round: the completion finds no op yet: kept
  w->push(load.op(1));
  w->flush(60000);         // round: op 1 arrives, the kept completion marks it
  done(999, 5);            // an op that never comes
  w->flush(60000);
  w->flush(60000);         // its second round: counted
  w->push(load.op(2));
  done(2, 222);            // the usual order, same round
  w->stop("exit");
  Db db(w->path());
  EXPECT_EQ(db.num("SELECT count(*) FROM ops"), 2);
  EXPECT_EQ(db.num("SELECT mono_ns FROM completions WHERE call_index = 1"), 111);
  EXPECT_EQ(db.num("SELECT mono_ns FROM completions WHERE call_index = 2"), 222);
  EXPECT_EQ(db.num("SELECT count(*) FROM completions"), 2);
  EXPECT_EQ(db.num("SELECT value FROM meta WHERE key='completions_without_op'"), 1);
  EXPECT_EQ(db.num("SELECT value FROM meta WHERE key='dropped_records'"), 0);
}

TEST(WriterOnDisk, a_capped_trace_keeps_the_newest_ops_exact_stays_under_the_cap_and_stays_verifiable) {
  TempDir dir;
  const int64_t max_mb = 1, interval = 64;
  Writer* w = open_writer(dir.path, max_mb, interval);
  ASSERT_NE(w, nullptr);
  Workload load;
  const int64_t n = 120000;  // ~4 MiB uncapped
  int64_t largest = 0;
  for (int64_t from = 1; from <= n; from += 10000) {
    push_ops(w, load, from, from + 9999);
    w->flush(60000);
    largest = std::max(largest, file_size(w->path()));
  }
  w->stop("exit");
  largest = std::max(largest, file_size(w->path()));
  // The cap plus 10% slack: retirement starts at 90% of the pages in use and frees whole chunks.
  EXPECT_LE(largest, int64_t(max_mb * 1024 * 1024 * 1.10)) << "largest file seen";

  Db db(w->path());
  ASSERT_EQ(db.num("SELECT value FROM meta WHERE key='dropped_records'"), 0);
  const int64_t retired = db.num("SELECT value FROM meta WHERE key='retired_ops'");
  const int64_t kept = db.num("SELECT count(*) FROM op_rows_all");
  EXPECT_GT(retired, n / 2) << "the cap retired the oldest ops";
  EXPECT_EQ(retired + kept, n);
  // The newest ops, contiguous and exact: nothing missing after the oldest one kept.
  EXPECT_EQ(db.num("SELECT max(call_index) FROM op_rows_all"), n);
  EXPECT_EQ(db.num("SELECT min(call_index) FROM op_rows_all"), retired + 1);
  // Retired whole: the first chunk (op_rows) emptied, the next ones dropped; the kept rows in
  // later chunk tables, each a call_index range above the one before.
  EXPECT_EQ(db.num("SELECT count(*) FROM op_rows"), 0);
  EXPECT_EQ(db.num("SELECT count(*) FROM sqlite_master WHERE name = 'op_rows_1'"), 0);
  const auto chunks = lockstep::trace_file::op_chunk_tables(db.get());
  EXPECT_GT(chunks.size(), 2u);
  int64_t below = 0, in_chunks = 0;
  for (size_t i = 1; i < chunks.size(); ++i) {
    const int64_t lo = db.num("SELECT IFNULL(min(call_index), 0) FROM " + chunks[i]);
    if (lo) {
      EXPECT_GT(lo, below) << chunks[i];
    }
    below = std::max(below, db.num("SELECT IFNULL(max(call_index), 0) FROM " + chunks[i]));
    in_chunks += db.num("SELECT count(*) FROM " + chunks[i]);
  }
  EXPECT_EQ(in_chunks, kept);
  for (const Pushed& p : {load.ops[n - 1], load.ops[n - 1000], load.ops[size_t(retired)]}) {
    auto r = db.rows("SELECT comm_id, IFNULL(seq, 0), count FROM ops WHERE call_index = " + std::to_string(p.call_index));
    ASSERT_EQ(r.size(), 1u) << p.call_index;
    EXPECT_EQ(r[0], (std::vector<int64_t>{p.comm, p.seq, p.count})) << p.call_index;
  }

  for (int64_t comm : {1, 2}) {
    auto c = db.rows("SELECT retired_collectives, retired_digest, retired_through_seq FROM comms WHERE id = " +
                     std::to_string(comm));
    ASSERT_EQ(c.size(), 1u);
    const int64_t retired_colls = c[0][0], through = c[0][2];
    const uint64_t retired_digest = uint64_t(c[0][1]);
    // Recomputed from what was pushed, not from the writer's state.
    int64_t colls = 0, max_seq = 0;
    for (const Pushed& p : load.ops)
      if (p.call_index <= retired && p.comm == comm && p.seq) {
        max_seq = std::max(max_seq, p.seq);
        if (p.op != OpKind::Send) ++colls;
      }
    EXPECT_EQ(retired_colls, colls) << "comm " << comm;
    EXPECT_EQ(through, max_seq) << "comm " << comm;
    EXPECT_EQ(retired_digest, load.digest_after(comm, colls)) << "comm " << comm;
    EXPECT_EQ(db.num("SELECT min(o.seq) FROM ops o WHERE o.comm_id = " + std::to_string(comm)), through + 1);

    // Every checkpoint kept (none retired), each equal to the digest over what was pushed; the
    // retained rows, chained from retired_digest with hashes recomputed from their columns,
    // reach the same values.
    int64_t total_colls = 0;
    for (const Pushed& p : load.ops)
      if (p.comm == comm && p.seq && p.op != OpKind::Send) ++total_colls;
    auto cps = db.rows("SELECT ordinal, seq, digest FROM checkpoints WHERE comm_id = " + std::to_string(comm) +
                       " ORDER BY ordinal");
    ASSERT_EQ(int64_t(cps.size()), total_colls / interval) << "comm " << comm;
    std::map<int64_t, uint64_t> by_ordinal;
    for (auto& cp : cps) {
      EXPECT_EQ(uint64_t(cp[2]), load.digest_after(comm, cp[0])) << "comm " << comm << " ordinal " << cp[0];
      by_ordinal[cp[0]] = uint64_t(cp[2]);
    }
    uint64_t d = retired_digest;
    int64_t ordinal = retired_colls, matched = 0;
    for (auto& r : db.rows("SELECT o.count, o.op = 'send', o.op = 'all_gather' FROM ops o WHERE o.comm_id = " +
                           std::to_string(comm) + " AND o.seq IS NOT NULL ORDER BY o.seq")) {
      if (r[1]) continue;
      Pushed p{0, comm, 1, r[2] ? OpKind::AllGather : OpKind::AllReduce, r[0]};
      d = digest::chain(d, Workload::hash(p));
      auto it = by_ordinal.find(++ordinal);
      if (it != by_ordinal.end()) {
        EXPECT_EQ(d, it->second) << "comm " << comm << " ordinal " << ordinal;
        ++matched;
      }
    }
    EXPECT_EQ(ordinal, total_colls);
    EXPECT_GT(matched, 0);
  }

  // The loader fills the model's bounded-trace fields.
  Process p = load_process_file(w->path());
  EXPECT_EQ(p.retired_ops, retired);
  EXPECT_EQ(p.checkpoint_interval, interval);
  EXPECT_EQ(int64_t(p.ops.size()), kept);
  // The analysis load reads the chunk tables themselves, in order: every kept row once.
  Schedule sched = load_schedule(dir.path);
  ASSERT_EQ(sched.procs.size(), 1u);
  EXPECT_TRUE(sched.skipped.empty());
  EXPECT_EQ(int64_t(sched.procs[0].ops.size()) + sched.procs[0].unsequenced_ops, kept);
  for (size_t i = 1; i < sched.procs[0].ops.size(); ++i)
    ASSERT_LT(sched.procs[0].ops[i - 1].call_index, sched.procs[0].ops[i].call_index) << i;
  ASSERT_EQ(p.comms.size(), 2u);
  for (const Comm& c : p.comms) {
    EXPECT_GT(c.retired_collectives, 0);
    EXPECT_FALSE(c.checkpoints.empty());
    EXPECT_EQ(c.checkpoints.front().ordinal, interval);
  }
}

// The order digest (op_digest.h order_step) over what was pushed: (count, digest) after each
// collective, by call_index.
std::map<int64_t, std::pair<int64_t, uint64_t>> order_after(const std::vector<Pushed>& ops) {
  std::map<int64_t, std::pair<int64_t, uint64_t>> out;
  int64_t n = 0;
  uint64_t d = digest::kEmpty;
  std::vector<Pushed> by_call = ops;
  std::sort(by_call.begin(), by_call.end(), [](const Pushed& a, const Pushed& b) { return a.call_index < b.call_index; });
  for (const Pushed& p : by_call) {
    if (p.seq == 0 || p.op == OpKind::Send) continue;
    d = digest::order_step(d, p.comm);
    out[p.call_index] = {++n, d};
  }
  return out;
}

// Every checkpoint carries the process's order digest after its collective (the order across
// communicators a summary-first read proves with it), and the analyzer's full read recomputes
// the same from the rows. A collective still inside its hook on another thread (its call_index
// taken, its record pushed only when NCCL returns) holds the chain: the checkpoints of later
// collectives, written meanwhile, get their order digest once it arrives, never one that
// leaves it out (call_progress.h).
TEST(WriterOnDisk, order_digests_follow_call_order_and_wait_for_a_call_still_in_progress) {
  for (bool in_progress : {false, true}) {
    SCOPED_TRACE(in_progress ? "a call in progress on another thread" : "in order");
    TempDir dir;
    Writer* w = open_writer(dir.path, 0, 4);
    ASSERT_NE(w, nullptr);
    std::atomic<int64_t> next_call{1};  // the recorder's call_index counter
    w->set_call_counter(&next_call);
    Workload load;
    auto issue = [&](int64_t from, int64_t to) {
      next_call.store(to + 1);
      push_ops(w, load, from, to);
    };
    issue(1, 300);
    if (in_progress) {
      const Record held = load.op(301);  // its call_index taken; its record pushed when NCCL returns
      ASSERT_EQ(held.op.state, OpState::Enqueued);
      std::mutex mu;
      std::condition_variable cv;
      int stage = 0;
      std::thread t([&] {
        progress_begin(next_call);
        {
          std::unique_lock<std::mutex> l(mu);
          stage = 1;
          cv.notify_all();
          cv.wait(l, [&] { return stage == 2; });
        }
        w->push(held);
        progress_end();
      });
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return stage == 1; });
      }
      issue(302, 340);
      w->flush(60000);
      {
        Db db(w->path());
        EXPECT_EQ(db.num("SELECT count(*) FROM checkpoints c JOIN ops o ON o.comm_id = c.comm_id AND o.seq = c.seq "
                         "WHERE o.call_index > 301 AND c.order_count IS NOT NULL"),
                  0)
            << "an order digest that leaves out call 301, still in progress";
        EXPECT_GT(db.num("SELECT count(*) FROM checkpoints c JOIN ops o ON o.comm_id = c.comm_id AND o.seq = c.seq "
                         "WHERE o.call_index > 301"),
                  3);
      }
      {
        std::lock_guard<std::mutex> l(mu);
        stage = 2;
        cv.notify_all();
      }
      t.join();
      issue(341, 600);
    } else {
      issue(301, 600);
    }
    w->stop("exit");
    Db db(w->path());
    ASSERT_EQ(db.num("SELECT value FROM meta WHERE key='dropped_records'"), 0);
    const auto want = order_after(load.ops);
    int64_t with = 0;
    for (auto& r : db.rows("SELECT c.comm_id, c.ordinal, o.call_index, c.order_count IS NOT NULL, c.order_count, c.order_digest "
                           "FROM checkpoints c JOIN ops o ON o.comm_id = c.comm_id AND o.seq = c.seq ORDER BY o.call_index")) {
      const int64_t call = r[2];
      ASSERT_TRUE(r[3]) << "call " << call << ": no order digest";
      ++with;
      ASSERT_TRUE(want.count(call)) << call;
      EXPECT_EQ(r[4], want.at(call).first) << "call " << call;
      EXPECT_EQ(uint64_t(r[5]), want.at(call).second) << "call " << call;
    }
    EXPECT_GT(with, 50);
    // The full read finds the file's order digests consistent with its rows; one altered is not.
    Schedule s = load_schedule(dir.path);
    ASSERT_EQ(s.procs.size(), 1u);
    for (const EvidenceIssue& e : compare_checkpoints(s, build_comm_index(s)).evidence)
      ADD_FAILURE() << e.detail;
    for (Comm& c : s.procs[0].info.comms)
      for (Comm::Checkpoint& k : c.checkpoints)
        if (k.ordinal == 8) k.order_digest ^= 1;
    const auto evidence = compare_checkpoints(s, build_comm_index(s)).evidence;
    ASSERT_EQ(evidence.size(), 1u);
    EXPECT_EQ(evidence[0].kind, EvidenceKind::kDigestInconsistent);
    EXPECT_NE(evidence[0].detail.find("order digest at collective #8"), std::string::npos) << evidence[0].detail;
  }
}

// Two threads on one communicator can take seqs in the other order than call indices: the
// writer numbers a communicator's collectives in seq order, the order digest chains them in
// call order; the full read must check them the same way (no digest_inconsistent on an honest
// file), and the chain waits for the collective that a lower seq still waits for.
TEST(WriterOnDisk, order_digests_of_a_communicator_whose_seqs_are_not_in_call_order_are_consistent) {
  TempDir dir;
  Writer* w = open_writer(dir.path, 0, 4);
  ASSERT_NE(w, nullptr);
  Workload load;
  std::vector<Record> recs;
  for (int64_t call = 1; call <= 300; ++call) recs.push_back(load.op(call));
  // Calls 100 and 128: the same communicator, op and count (call % 2, % 7, % 4 alike), so each
  // communicator's own digest is the same in either seq order; their seqs swapped.
  Record& a = recs[99];
  Record& b = recs[127];
  ASSERT_EQ(a.op.comm_id, b.op.comm_id);
  ASSERT_EQ(a.op.state, OpState::Enqueued);
  ASSERT_EQ(b.op.state, OpState::Enqueued);
  std::swap(a.op.seq, b.op.seq);
  for (const Record& r : recs) {
    w->push(r);
    Record c;
    c.kind = RecKind::Completion;
    c.done = {r.op.call_index, r.op.issue_mono + 20'000};
    if (r.op.state == OpState::Enqueued) w->push(c);
  }
  w->stop("exit");
  Db db(w->path());
  EXPECT_GT(db.num("SELECT count(order_count) FROM checkpoints"), 20);
  Schedule s = load_schedule(dir.path);
  ASSERT_EQ(s.procs.size(), 1u);
  for (const EvidenceIssue& e : compare_checkpoints(s, build_comm_index(s)).evidence) ADD_FAILURE() << e.detail;
}

// Chunks hold increasing call_index ranges; a file that says otherwise (a crafted one) is
// skipped with its reason, not read out of order.
TEST(WriterOnDisk, a_file_whose_op_chunks_overlap_is_skipped_as_corrupt) {
  TempDir dir;
  Writer* w = open_writer(dir.path, 1, 64);
  ASSERT_NE(w, nullptr);
  Workload load;
  for (int64_t from = 1; from <= 60000; from += 10000) {
    push_ops(w, load, from, from + 9999);
    w->flush(60000);
  }
  w->stop("exit");
  EXPECT_TRUE(load_schedule(dir.path).skipped.empty());
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(w->path().c_str(), &db), SQLITE_OK);
    EXPECT_GT(lockstep::trace_file::op_chunk_tables(db).size(), 2u) << "the cap made chunks";
    // A row in the first chunk above the later chunks' range.
    EXPECT_EQ(sqlite3_exec(db, "INSERT INTO op_rows SELECT call_index + 1000000, sig, seq, t, ret, done, wall, state, "
                               "group_id FROM op_rows_all WHERE seq IS NOT NULL LIMIT 1",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  Schedule s = load_schedule(dir.path);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].reason.find("overlaps the one before it"), std::string::npos) << s.skipped[0].reason;
}

// Retirement reads nothing back: each communicator's retired digest is its state at a chunk
// bound, kept as it passed the bound, or its current state when it issued nothing past it. A
// communicator silent across several chunks, then active again, must come out exact too.
TEST(WriterOnDisk, a_capped_trace_retires_exactly_when_a_communicator_falls_silent_for_several_chunks) {
  TempDir dir;
  Writer* w = open_writer(dir.path, 1, 64);
  ASSERT_NE(w, nullptr);
  Workload load;
  const int64_t n = 120000;
  for (int64_t call = 1; call <= n; ++call) {
    Record r = load.op(call);
    // Comm 2 is silent for calls 30,001..90,000: its ops go to comm 1 instead.
    if (r.op.comm_id == 2 && call > 30000 && call <= 90000) {
      load.ops.back().comm = 1;
      r.op.comm_id = 1;
      if (r.op.seq) {
        --load.next_seq[2];
        r.op.seq = load.ops.back().seq = load.next_seq[1]++;
      }
    }
    w->push(r);
    if (call % 20000 == 0) w->flush(60000);
  }
  w->stop("exit");
  Db db(w->path());
  ASSERT_EQ(db.num("SELECT value FROM meta WHERE key='dropped_records'"), 0);
  const int64_t retired = db.num("SELECT value FROM meta WHERE key='retired_ops'");
  ASSERT_GT(retired, n / 2);
  for (int64_t comm : {1, 2}) {
    auto c = db.rows("SELECT retired_collectives, retired_digest, retired_through_seq FROM comms WHERE id = " +
                     std::to_string(comm));
    ASSERT_EQ(c.size(), 1u);
    int64_t colls = 0, max_seq = 0;
    for (const Pushed& p : load.ops)
      if (p.call_index <= retired && p.comm == comm && p.seq) {
        max_seq = std::max(max_seq, p.seq);
        if (p.op != OpKind::Send) ++colls;
      }
    EXPECT_EQ(c[0][0], colls) << "comm " << comm;
    EXPECT_EQ(c[0][2], max_seq) << "comm " << comm;
    EXPECT_EQ(uint64_t(c[0][1]), load.digest_after(comm, colls)) << "comm " << comm;
  }
}

TEST(WriterOnDisk, a_capped_trace_killed_mid_run_keeps_every_committed_op) {
  TempDir dir;
  int ack[2];
  ASSERT_EQ(pipe(ack), 0);
  pid_t child = fork();
  if (child == 0) {
    close(ack[0]);
    Writer* w = open_writer(dir.path, 1, 64);
    if (!w) _exit(1);
    Workload load;
    for (int64_t from = 1;; from += 5000) {
      push_ops(w, load, from, from + 4999);
      w->flush(60000);  // committed: everything up to from + 4999
      int64_t done = from + 4999;
      if (write(ack[1], &done, sizeof done) != sizeof done) _exit(1);
    }
  }
  close(ack[1]);
  int64_t committed = 0, v = 0;
  while (committed < 80000 && read(ack[0], &v, sizeof v) == sizeof v) committed = v;
  kill(child, SIGKILL);  // mid-batch: the next ops are being pushed and written
  int status = 0;
  waitpid(child, &status, 0);
  close(ack[0]);
  ASSERT_GE(committed, 80000);
  std::string path;
  for (auto& e : std::filesystem::directory_iterator(dir.path))
    if (e.path().string().ends_with(".lockstep.sqlite")) path = e.path().string();
  ASSERT_FALSE(path.empty());

  // The loader reads it (rolling a hot journal back on a private copy if there is one).
  Process p = load_process_file(path);
  ASSERT_FALSE(p.ops.empty());
  int64_t retired = p.retired_ops;
  EXPECT_GT(retired, 0) << "the run passed the cap";
  // Every committed op is there or was retired (counted), with no hole after the oldest kept.
  EXPECT_EQ(p.ops.front().call_index, retired + 1);
  EXPECT_GE(p.ops.back().call_index, committed);
  EXPECT_EQ(int64_t(p.ops.size()), p.ops.back().call_index - retired);
  for (const Comm& c : p.comms) EXPECT_FALSE(c.checkpoints.empty());
}

}  // namespace
}  // namespace lockstep::rec
