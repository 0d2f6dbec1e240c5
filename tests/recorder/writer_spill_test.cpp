// The spill (LOCKSTEP_SPILL_MB, docs/recorder.md "Hot path and writer"): a record queue too small
// for a burst sends records to the spill instead of dropping them; only a full spill drops, and
// the drops are counted exactly, an op and its parts together. Records are pushed straight into
// rec::Writer (as the hot path does) by several threads, without waiting for the writer.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "process_info.h"
#include "trace_test_util.h"
#include "writer.h"
#include "writer_test_records.h"

namespace lockstep::rec {
namespace {

using test::TempDir;

constexpr int kThreads = 4;   // one communicator each (ids 1..kThreads)
constexpr int kParts = 3;     // every op is a group of 3 parts: 4 records

Writer* open_small_queue(const std::string& dir, int64_t spill_mb) {
  TraceHeader h;
  h.info = read_process_info();
  h.info.trace_dir = dir;
  h.max_mb = 0;
  h.queue_records = 64;
  h.spill_mb = spill_mb;
  std::string err;
  Writer* w = Writer::open(h, &err);
  EXPECT_NE(w, nullptr) << err;
  if (!w) return w;
  w->start();
  for (int64_t id = 1; id <= kThreads; ++id) w->push(test::comm_init_record(id, 0xc0ffee00 + uint64_t(id)));
  w->flush(60000);
  return w;
}

// Thread t issues ops call t, t + kThreads, ... on communicator t + 1 with seqs 1, 2, ...
void burst(Writer* w, int t, int64_t ops) {
  for (int64_t i = 0; i < ops; ++i) {
    const int64_t call = 1000 + i * kThreads + t;
    Record rs[1 + kParts];
    rs[0].kind = RecKind::Op;
    rs[0].op = {};
    OpRec& o = rs[0].op;
    o.call_index = call;
    o.comm_id = t + 1;
    o.seq = i + 1;
    o.count = 1024;
    o.group_id = call;
    o.issue_mono = 1'000'000'000 + call * 1000;
    o.issue_wall = o.issue_mono + 1'700'000'000'000'000'000;
    o.return_mono = o.issue_mono + 300;
    o.stream = 0x5000 + uint64_t(o.comm_id);
    o.origin_call = -1;
    o.tid = 4242 + t;
    o.root = o.peer = o.redop = -1;
    o.dtype = 7;
    o.op = OpKind::AllReduce;
    o.state = OpState::Enqueued;
    o.has_parts = true;
    for (int p = 0; p < kParts; ++p) {
      Record& r = rs[1 + p];
      r.kind = RecKind::Part;
      r.part = {};
      r.part.call_index = call;
      r.part.count = 1024 + p;
      r.part.part = p;
      r.part.root = r.part.peer = -1;
      r.part.redop = 0;
      r.part.dtype = 7;
      r.part.op = OpKind::AllReduce;
      r.part.nparts = kParts;
    }
    w->push_op(rs, 1 + kParts);
  }
}

struct Result {
  int64_t rows = 0, parts = 0, dropped = 0, drop_rows_records = 0, spilled = -1, peak = -1, late_parts = 0, digest_gaps = 0;
  bool seqs_in_order = true;
};

Result run_burst(int64_t spill_mb, int64_t ops_per_thread) {
  TempDir dir;
  Writer* w = open_small_queue(dir.path, spill_mb);
  Result res;
  if (!w) return res;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) ts.emplace_back(burst, w, t, ops_per_thread);
  for (auto& t : ts) t.join();
  w->stop("exit");
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(w->path().c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  auto num = [&](const char* sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db);
    int64_t v = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return v;
  };
  res.rows = num("SELECT count(*) FROM ops");
  res.parts = num("SELECT count(*) FROM op_parts");
  res.dropped = num("SELECT value FROM meta WHERE key='dropped_records'");
  res.drop_rows_records = num("SELECT coalesce(sum(records), 0) FROM drops");
  res.spilled = num("SELECT value FROM meta WHERE key='spilled_records'");
  res.peak = num("SELECT value FROM meta WHERE key='peak_spill_bytes'");
  res.late_parts = num("SELECT value FROM meta WHERE key='late_parts'");
  res.digest_gaps = num("SELECT value FROM meta WHERE key='digest_gaps'");
  // Each communicator's ops, in issue order, have increasing seqs (each as its thread pushed it).
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT comm_id, seq FROM ops ORDER BY call_index", -1, &st, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  std::map<int64_t, int64_t> last;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const int64_t c = sqlite3_column_int64(st, 0), s = sqlite3_column_int64(st, 1);
    if (s <= last[c]) res.seqs_in_order = false;
    last[c] = s;
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return res;
}

TEST(WriterSpill, a_burst_past_a_tiny_queue_loses_nothing) {
  const int64_t per_thread = 20000;
  Result r = run_burst(64, per_thread);
  EXPECT_EQ(r.rows, kThreads * per_thread);
  EXPECT_EQ(r.parts, kParts * r.rows);
  EXPECT_EQ(r.dropped, 0);
  EXPECT_GT(r.spilled, 0);
  EXPECT_GT(r.peak, 0);
  EXPECT_LE(r.peak, int64_t(64) << 20);
  EXPECT_TRUE(r.seqs_in_order);
  EXPECT_EQ(r.digest_gaps, -1);  // absent: every seq came, none given up on
  EXPECT_EQ(r.late_parts, -1);   // absent: no op written without its parts
}

TEST(WriterSpill, a_full_spill_drops_whole_ops_and_counts_them_exactly) {
  const int64_t per_thread = 50000;
  Result r = run_burst(1, per_thread);  // 1 MiB: one chunk of the spill
  const int64_t produced = kThreads * per_thread * (1 + kParts);
  EXPECT_GT(r.spilled, 0);
  EXPECT_GT(r.dropped, 0);
  EXPECT_LE(r.peak, int64_t(1) << 20);
  EXPECT_EQ(r.rows * (1 + kParts) + r.dropped, produced);
  EXPECT_EQ(r.dropped % (1 + kParts), 0);  // whole runs only
  EXPECT_EQ(r.drop_rows_records, r.dropped);
  EXPECT_EQ(r.parts, kParts * r.rows);     // every op written has all its parts
  EXPECT_EQ(r.late_parts, -1);
  EXPECT_TRUE(r.seqs_in_order);
}

}  // namespace
}  // namespace lockstep::rec
