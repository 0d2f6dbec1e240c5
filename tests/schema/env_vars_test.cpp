// schema/env_vars.h is the one declaration of the LOCKSTEP_* variables: docs/recorder.md's table
// must list each documented one with the declared default, and nothing the code does not declare.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "env_vars.h"

namespace {

// Rows "| `LOCKSTEP_X` | type | default | meaning |" of docs/recorder.md: name -> default column.
std::map<std::string, std::string> documented_rows() {
  std::ifstream in(LOCKSTEP_RECORDER_DOC);
  std::map<std::string, std::string> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `LOCKSTEP_", 0) != 0) continue;
    std::vector<std::string> cols;
    // Columns split at " | " (a '|' inside a cell is written "\|").
    size_t at = 2;
    while (at < line.size()) {
      size_t bar = line.find(" | ", at);
      while (bar != std::string::npos && bar > 0 && line[bar] == ' ' && line[bar - 1] == '\\') bar = line.find(" | ", bar + 1);
      if (bar == std::string::npos) bar = line.size();
      cols.push_back(line.substr(at, bar - at));
      at = bar + 3;
    }
    if (cols.size() < 3) continue;
    rows[cols[0].substr(1, cols[0].size() - 2)] = cols[2];
  }
  return rows;
}

}  // namespace

TEST(EnvVars, docs_table_shows_each_declared_default) {
  const auto rows = documented_rows();
  ASSERT_FALSE(rows.empty()) << "no LOCKSTEP_ rows in " << LOCKSTEP_RECORDER_DOC;
  for (const auto& v : lockstep::schema::env::kDocumented) {
    auto it = rows.find(v.name);
    ASSERT_NE(it, rows.end()) << v.name << " is declared but not in docs/recorder.md's table";
    EXPECT_EQ(it->second, v.default_text) << v.name << ": docs say " << it->second;
  }
}

TEST(EnvVars, declared_defaults_are_the_ones_the_code_uses) {
  namespace env = lockstep::schema::env;
  auto doc = [](const char* name) {
    for (const auto& v : env::kDocumented)
      if (std::string(v.name) == name) return std::string(v.default_text);
    return std::string();
  };
  EXPECT_EQ(doc(env::kMaxMb), "`" + std::to_string(env::kDefaultMaxMb) + "`");
  EXPECT_EQ(doc(env::kHangTimeout), "`" + std::to_string(int(env::kDefaultHangTimeoutS)) + "`");
  EXPECT_EQ(doc(env::kCompletionWindow), "`" + std::to_string(env::kDefaultCompletionWindow) + "`");
  EXPECT_EQ(doc(env::kCompletion), "`" + std::string(env::kDefaultCompletion) + "`");
  EXPECT_EQ(doc(env::kDir), "`./" + std::string(env::kDefaultDir) + "`");
  EXPECT_EQ(doc(env::kSigusr1), "`" + std::string(env::kSigusr1Default) + "`");
}

// Every LOCKSTEP_ row of the table is a declared variable (LOCKSTEP_RANK: schema/rank_env.h).
TEST(EnvVars, docs_table_lists_no_undeclared_variable) {
  for (const auto& [name, dflt] : documented_rows()) {
    if (name == "LOCKSTEP_RANK") continue;
    bool declared = false;
    for (const auto& v : lockstep::schema::env::kDocumented) declared |= name == v.name;
    EXPECT_TRUE(declared) << name << " is in docs/recorder.md's table but not in schema/env_vars.h";
  }
}
