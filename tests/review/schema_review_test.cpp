// Review 2026-12-01 (docs/review-2026-12-01.md), finding 6: the FROM source over a file's op
// chunk tables (trace_file.cpp op_rows_source, used by every full read: `lockstep ops`, `stacks`,
// details) and the writer's view op_rows_all were one compound SELECT with a term per chunk.
// SQLite refuses more than 500 terms (SQLITE_MAX_COMPOUND_SELECT): a file with more chunk tables
// (a crafted one; the writer keeps ~130 live) made `lockstep ops` fail with a 25 KB query in its
// message, while `lockstep analyze` (one query per chunk) read it. Fixed in schema/trace_file.cpp.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>
#include <vector>

#include "trace_file.h"
#include "trace_schema.h"

namespace lockstep {
namespace {

int64_t num(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sqlite3_errmsg(db) << " (" << sql.substr(0, 200) << "...)";
    return -1;
  }
  int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  return v;
}

class ManyChunks : public ::testing::TestWithParam<int> {};

TEST_P(ManyChunks, every_row_of_every_chunk_table_is_read_in_call_order) {
  const int chunks = GetParam();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  std::string sql = "BEGIN;";
  for (int k = 0; k < chunks; ++k) {
    const std::string t = trace_file::op_chunk_table(k);
    sql += "CREATE TABLE " + t + schema::kOpRowsColumns + ";";
    sql += "INSERT INTO " + t + "(call_index,sig,t,wall,state) VALUES(" + std::to_string(2 * k + 1) + ",1,0,0,0),(" +
           std::to_string(2 * k + 2) + ",1,0,0,0);";
  }
  sql += "COMMIT;";
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  const std::vector<std::string> tables = trace_file::op_chunk_tables(db);
  ASSERT_EQ(tables.size(), size_t(chunks));
  const std::string src = trace_file::op_rows_source(tables);
  EXPECT_EQ(num(db, "SELECT count(*) FROM " + src), 2 * chunks);
  EXPECT_EQ(num(db, "SELECT max(call_index) FROM " + src), 2 * chunks);
  // Read without ORDER BY, the rows come chunk after chunk: in call_index order.
  EXPECT_EQ(num(db, "SELECT count(*) FROM (SELECT call_index, lag(call_index) OVER () AS prev FROM " + src +
                        ") WHERE prev IS NOT NULL AND call_index != prev + 1"),
            0);
  // The writer's views over the same chunks (as trace_file::create makes them), and the
  // completions trigger.
  ASSERT_EQ(sqlite3_exec(db, trace_file::views_sql(0, 0).c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  ASSERT_EQ(sqlite3_exec(db, trace_file::chunk_views_sql(tables).c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  EXPECT_EQ(num(db, std::string("SELECT count(*) FROM ") + schema::kOpRowsAllView), 2 * chunks);
  sqlite3_close(db);
}

INSTANTIATE_TEST_SUITE_P(ReviewSchema, ManyChunks, ::testing::Values(1, 2, 130, 501, 1200));

}  // namespace
}  // namespace lockstep
