// The content generation (PRAGMA user_version, schema::kUserVersionOffset): the writer advances
// it with every commit that writes anything but the heartbeat, and leaves it with the heartbeat
// alone (meta last_flush_mono_ns, about once a second while idle), so that a node summary of a
// hung job's file stays valid across heartbeats (analyzer/node_summary.h). Records are pushed
// into rec::Writer by hand, as the hot path does.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "process_info.h"
#include "trace_test_util.h"
#include "writer.h"
#include "writer_test_records.h"

namespace lockstep::rec {
namespace {

int64_t read_int(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  int64_t v = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

int64_t generation(const std::string& path) { return read_int(path, "PRAGMA user_version"); }
int64_t last_flush(const std::string& path) {
  return read_int(path, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'last_flush_mono_ns'");
}

// Idle for more than one heartbeat: the last flush moved (a commit happened), the generation not.
void expect_heartbeats_only(const std::string& path, int64_t gen, const char* after) {
  const int64_t flushed = last_flush(path);
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  EXPECT_GT(last_flush(path), flushed) << "no heartbeat committed " << after;
  EXPECT_EQ(generation(path), gen) << "a heartbeat advanced the generation " << after;
}

Record op_record(int64_t call, int64_t seq) {
  Record r;
  r.kind = RecKind::Op;
  r.op = {};
  OpRec& o = r.op;
  o.call_index = call;
  o.comm_id = 1;
  o.seq = seq;
  o.count = 1024;
  o.group_id = -1;
  o.issue_mono = 1'000'000'000 + call * 1000;
  o.issue_wall = o.issue_mono + 1'700'000'000'000'000'000;
  o.return_mono = o.issue_mono + 300;
  o.stream = 0x5001;
  o.origin_call = -1;
  o.tid = 4242;
  o.root = o.peer = o.redop = -1;
  o.dtype = 7;
  o.op = OpKind::AllReduce;
  o.state = OpState::Enqueued;
  return r;
}

// A writer of this process's trace in `dir`, without a size cap.
Writer* open_uncapped(const std::string& dir, std::string* err) {
  TraceHeader h;
  h.info = read_process_info();
  h.info.trace_dir = dir;
  h.max_mb = 0;
  return Writer::open(h, err);
}

TEST(WriterGeneration, advances_with_every_content_commit_and_never_with_the_heartbeat) {
  test::TempDir dir;
  std::string err;
  Writer* w = open_uncapped(dir.path, &err);
  ASSERT_NE(w, nullptr) << err;
  const std::string path = w->path();
  // Random from the header on (a node summary tells this file from another of its name by it).
  const int64_t g0 = generation(path);
  EXPECT_GE(g0, 1) << "the header commit";
  EXPECT_LE(g0, 0x7fffffff) << "the header commit";
  w->start();
  w->push(test::comm_init_record(1, 0xc0ffee01));
  w->flush(60000);
  const int64_t g1 = generation(path);
  EXPECT_NE(g1, g0) << "a communicator row";
  expect_heartbeats_only(path, g1, "after the communicator");

  w->set_meta("generation_test", "a");  // a meta value the file does not hold
  w->flush(60000);
  const int64_t g2 = generation(path);
  EXPECT_NE(g2, g1) << "a new meta value";
  w->set_meta("generation_test", "a");  // the same value again: nothing changes but the last flush
  w->flush(60000);
  EXPECT_EQ(generation(path), g2) << "the same meta value written again";
  expect_heartbeats_only(path, g2, "after the meta value");

  w->push(op_record(10, 1));
  w->flush(60000);
  const int64_t g3 = generation(path);
  EXPECT_NE(g3, g2) << "an op";
  EXPECT_EQ(read_int(path, "SELECT count(*) FROM ops"), 1);
  expect_heartbeats_only(path, g3, "after the op");

  w->stop("exit");  // exit_reason and finished: content
  EXPECT_NE(generation(path), g3) << "the exit";
}

// Two files of one process start at different generations (a collision is 1 in 2^31 a pair).
TEST(WriterGeneration, starts_at_a_random_generation) {
  std::vector<int64_t> first;
  for (int i = 0; i < 3; ++i) {
    test::TempDir dir;
    std::string err;
    Writer* w = open_uncapped(dir.path, &err);
    ASSERT_NE(w, nullptr) << err;
    first.push_back(generation(w->path()));
    w->start();
    w->stop("exit");
  }
  EXPECT_FALSE(first[0] == first[1] && first[1] == first[2]) << first[0];
}

}  // namespace
}  // namespace lockstep::rec
