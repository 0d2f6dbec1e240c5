#include "sql_mutator.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace lockstep::fuzz {
namespace {

constexpr char kHeader[] = "SQLite format 3";  // + its terminating NUL: 16 bytes
constexpr size_t kHeaderLen = 16;

struct Db {
  sqlite3* db = nullptr;
  ~Db() { sqlite3_close(db); }
};

std::vector<std::string> column_strings(sqlite3* db, const std::string& sql, int col = 0) {
  std::vector<std::string> out;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char* t = sqlite3_column_text(st, col);
    out.emplace_back(t ? reinterpret_cast<const char*>(t) : "");
  }
  sqlite3_finalize(st);
  return out;
}

int64_t scalar(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  int64_t v = 0;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

std::string quote_ident(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// A value that breaks assumptions, as an SQL literal.
std::string hostile_value(std::mt19937_64& rng) {
  static const char* const kValues[] = {
      "NULL", "0", "-1", "1", "2", "9223372036854775807", "-9223372036854775808", "2147483647", "2147483648",
      "4294967295", "4294967296", "-2147483649", "1e308", "-1e308", "0.5", "''", "'x'", "' '",
      "x'ff'", "x'c3'", "x'80808080'", "x'ed9fbf'", "x'eda080'", "x'f4908080'", "x'00'", "x'610062'",
      "'bad' || char(27) || ']0;pwned' || char(7)", "'a' || char(13) || 'lockstep: clean'",
      "char(10) || 'rank 0: ok'", "char(27) || '[2J'", "'%s%n%x'", "'../../etc/passwd'", "'NaN'", "'-0'",
      "'12abc'", "'0x7fffffff'", "'9999999999999999999999'", "'SIGKILL'", "'SIGTERM'", "'disk_full'",
      "'all_to_all'", "'send'", "'recv'", "'graph_launched'", "'captured'", "'python'", "'native'",
      "'0000000000000000'", "'ffffffffffffffff'", "randomblob(64)", "zeroblob(3)",
      // Just inside and outside the loader's limits (kMaxRanks, kMaxSeq, kMaxCallIndex, 2^62).
      "16777215", "16777216", "4294967294", "549755813887", "549755813888", "4611686018427387904",
  };
  constexpr size_t n = sizeof(kValues) / sizeof(kValues[0]);
  switch (rng() % 8) {
    case 0: return "printf('%.*c', " + std::to_string(1 + rng() % 200000) + ", 'A')";  // huge string
    case 1: return std::to_string(static_cast<int64_t>(rng()));
    case 2: return std::to_string(static_cast<int64_t>(rng() % 64) - 8);
    default: return kValues[rng() % n];
  }
}

bool exec(sqlite3* db, const std::string& sql, std::vector<std::string>* log) {
  bool ok = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
  if (ok && log) log->push_back(sql);
  return ok;
}

void one_mutation(sqlite3* db, std::mt19937_64& rng, std::vector<std::string>* log) {
  auto tables = column_strings(db, "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'");
  if (tables.empty()) return;
  // Most bugs hide in ops, comms, meta and op_parts: pick them more often.
  std::string t = tables[rng() % tables.size()];
  for (const char* pref : {"ops", "comms", "meta", "op_parts"})
    if (rng() % 6 == 0 && std::find(tables.begin(), tables.end(), pref) != tables.end()) t = pref;
  std::string qt = quote_ident(t);
  int64_t rows = scalar(db, "SELECT count(*) FROM " + qt);
  std::string lit = "'";
  for (char c : t) lit += c == '\'' ? std::string("''") : std::string(1, c);
  auto cols = column_strings(db, "SELECT name FROM pragma_table_info(" + lit + "')");
  std::string row = rows > 0 ? "(SELECT rowid FROM " + qt + " LIMIT 1 OFFSET " + std::to_string(rng() % rows) + ")" : "0";
  switch (rng() % 12) {
    case 0: case 1: case 2: case 3: {  // one value
      if (cols.empty()) return;
      std::string c = quote_ident(cols[rng() % cols.size()]);
      exec(db, "UPDATE OR IGNORE " + qt + " SET " + c + " = " + hostile_value(rng) + " WHERE rowid = " + row, log);
      return;
    }
    case 4: {  // one column of every row
      if (cols.empty()) return;
      std::string c = quote_ident(cols[rng() % cols.size()]);
      exec(db, "UPDATE OR IGNORE " + qt + " SET " + c + " = " + hostile_value(rng), log);
      return;
    }
    case 5:  // a value copied from another row (plausible but inconsistent)
      if (cols.empty() || rows < 2) return;
      {
        std::string c = quote_ident(cols[rng() % cols.size()]);
        exec(db, "UPDATE OR IGNORE " + qt + " SET " + c + " = (SELECT " + c + " FROM " + qt + " LIMIT 1 OFFSET " +
                     std::to_string(rng() % rows) + ") WHERE rowid = " + row, log);
      }
      return;
    case 6:  // delete rows
      exec(db, "DELETE FROM " + qt + (rng() % 4 ? " WHERE rowid = " + row : std::string()), log);
      return;
    case 7: {  // duplicate a row under a fresh rowid / primary key
      if (cols.empty() || rows == 0) return;
      std::string list, sel;
      for (size_t i = 0; i < cols.size(); ++i) {
        std::string c = quote_ident(cols[i]);
        list += (i ? "," : "") + c;
        sel += (i ? "," : "") + (i == 0 ? "(SELECT max(" + c + ") FROM " + qt + ") + 1 + abs(random() % 3)" : c);
      }
      if (rng() % 2) sel = list;  // exact duplicate (fails on a unique key: then nothing)
      exec(db, "INSERT OR IGNORE INTO " + qt + "(" + list + ") SELECT " + sel + " FROM " + qt + " WHERE rowid = " + row, log);
      return;
    }
    case 8:  // the value of a meta key
      exec(db, "UPDATE meta SET value = " + hostile_value(rng) +
                   " WHERE rowid = (SELECT rowid FROM meta LIMIT 1 OFFSET " + std::to_string(rng() % 32) + ")", log);
      return;
    case 9:
      if (rng() % 8 == 0) exec(db, "DROP TABLE " + qt, log);
      else exec(db, "UPDATE OR IGNORE " + qt + " SET rowid = rowid + " + std::to_string(1 + rng() % 3) + " WHERE rowid = " + row, log);
      return;
    case 10: {  // the table replaced by a view of its columns: endless, huge, or a plain copy
      if (cols.empty()) return;
      std::string list;
      for (size_t i = 0; i < cols.size(); ++i) list += (i ? ", " : "") + std::string(rng() % 3 == 0 ? "randomblob(100000000)" : "x") + " AS " + quote_ident(cols[i]);
      const std::string body = rng() % 2 ? "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT " + list + " FROM c WHERE x<0"
                                         : "SELECT " + list + " FROM (SELECT 1 AS x UNION ALL SELECT 2)";
      exec(db, "DROP TABLE " + qt + "; CREATE VIEW " + qt + " AS " + body, log);
      return;
    }
    case 11:  // a trigger on the table, or its columns' declared types changed (every value text)
      if (rng() % 2) {
        exec(db, "CREATE TRIGGER IF NOT EXISTS fuzz_trigger AFTER INSERT ON " + qt + " BEGIN SELECT 1; END", log);
      } else if (!cols.empty()) {
        std::string decl, sel;
        for (size_t i = 0; i < cols.size(); ++i) {
          decl += (i ? ", " : "") + quote_ident(cols[i]) + " TEXT";
          sel += (i ? ", " : "") + std::string("CAST(") + quote_ident(cols[i]) + " AS TEXT)";
        }
        exec(db, "CREATE TABLE fuzz_copy(" + decl + "); INSERT INTO fuzz_copy SELECT " + sel + " FROM " + qt + "; DROP TABLE " +
                     qt + "; ALTER TABLE fuzz_copy RENAME TO " + qt, log);
      }
      return;
  }
}

}  // namespace

std::vector<std::string> split_files(const uint8_t* data, size_t size) {
  std::vector<std::string> files;
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::string_view header(kHeader, kHeaderLen), marker(kFileMarker, kFileMarkerLen);
  size_t start = 0;
  while (start < all.size()) {
    size_t next = std::min(all.find(header, start + 1), all.find(marker, start + 1));
    if (next == std::string_view::npos) next = all.size();
    files.emplace_back(all.substr(start, next - start));
    start = next;
  }
  return files;
}

std::string_view file_bytes(std::string_view part) {
  return part.substr(0, kFileMarkerLen) == std::string_view(kFileMarker, kFileMarkerLen) ? part.substr(kFileMarkerLen) : part;
}

std::string join_files(const std::vector<std::string>& files) {
  std::string out;
  for (auto& f : files) out += f;
  return out;
}

bool mutate_sqlite(std::string& file, std::mt19937_64& rng, int n, std::vector<std::string>* log) {
  if (file.size() < 512 || file.compare(0, kHeaderLen, std::string(kHeader, kHeaderLen)) != 0) return false;
  // The in-memory VFS cannot open a WAL-mode image: mark it rollback-journal while mutating.
  unsigned char wal_w = static_cast<unsigned char>(file[18]), wal_r = static_cast<unsigned char>(file[19]);
  Db d;
  if (sqlite3_open_v2(":memory:", &d.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) return false;
  auto* buf = static_cast<unsigned char*>(sqlite3_malloc64(file.size()));
  if (!buf) return false;
  std::memcpy(buf, file.data(), file.size());
  buf[18] = buf[19] = 1;
  if (sqlite3_deserialize(d.db, "main", buf, file.size(), file.size(),
                          SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE) != SQLITE_OK)
    return false;
  if (scalar(d.db, "SELECT count(*) FROM sqlite_master") <= 0) return false;
  for (int i = 0; i < n; ++i) one_mutation(d.db, rng, log);
  sqlite3_int64 size = 0;
  unsigned char* out = sqlite3_serialize(d.db, "main", &size, 0);
  if (!out || size < 100) {
    sqlite3_free(out);
    return false;
  }
  file.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(size));
  sqlite3_free(out);
  file[18] = static_cast<char>(wal_w);
  file[19] = static_cast<char>(wal_r);
  return true;
}

}  // namespace lockstep::fuzz
