// The trace file's name (issue 29): the host name comes from the machine (a UTS namespace, a
// container's --hostname) and must not move the file out of the trace directory or put control
// bytes into its name. schema/file_name.h is the one definition every writer uses.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "file_name.h"
#include "process_info.h"
#include "trace_file.h"
#include "trace_schema.h"
#include "trace_test_util.h"
#include "writer.h"
#include "writer_test_records.h"

namespace lockstep::rec {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

TEST(SafeFileComponent, names_one_entry_inside_its_directory_whatever_the_bytes) {
  using schema::safe_file_component;
  EXPECT_EQ(safe_file_component("node-07.cluster_a"), "node-07.cluster_a");
  EXPECT_EQ(safe_file_component("../../esc"), "_._.._esc");
  EXPECT_EQ(safe_file_component(".."), "_.");
  EXPECT_EQ(safe_file_component("."), "_");
  EXPECT_EQ(safe_file_component(""), "_");
  EXPECT_EQ(safe_file_component("a/b"), "a_b");
  EXPECT_EQ(safe_file_component(std::string("h\0st\n\x1b[31m", 10)), "h_st___31m");
  EXPECT_EQ(safe_file_component("\xe2\x80\xae" "evil"), "___evil");  // U+202E, byte by byte
  EXPECT_EQ(safe_file_component(std::string(1000, 'x')).size(), schema::kMaxFileComponentBytes);
}

// The repro: host name "../../esc" under `lockstep run -o D/a/b/trace` wrote
// D/a/esc-<pid>.lockstep.sqlite.
TEST(WriterFileName, hostile_host_name_stays_inside_the_trace_directory) {
  TempDir tmp;
  const fs::path dir = fs::path(tmp.path) / "a" / "b" / "trace";
  for (const std::string& host : {std::string("../../esc"), std::string("bad\nhost\x1b]0;x\x07")}) {
    TraceHeader h;
    h.info = read_process_info();
    h.info.trace_dir = dir.string();
    h.info.host = host;
    std::string err;
    Writer* w = Writer::open(h, &err);
    ASSERT_NE(w, nullptr) << err;
    const fs::path path = w->path();
    w->start();
    w->stop("exit");
    EXPECT_EQ(fs::canonical(path.parent_path()), fs::canonical(dir)) << path;
    const std::string name = path.filename().string();
    for (unsigned char c : name) EXPECT_TRUE(c >= 0x20 && c < 0x7f && c != '/') << "byte " << int(c) << " in " << name;
    EXPECT_TRUE(fs::exists(path)) << path;
  }
  // Nothing was written above the trace directory.
  for (const auto& e : fs::recursive_directory_iterator(tmp.path)) {
    if (e.is_regular_file()) {
      EXPECT_EQ(fs::canonical(e.path().parent_path()), fs::canonical(dir)) << e.path();
    }
  }
}

// Every name this process may take is taken (1,001 of them): the recorder does not record,
// and replaces none of them. A symbolic link at a name is never followed.
TEST(WriterFileName, taken_names_are_never_replaced_and_links_never_followed) {
  TempDir tmp;
  const fs::path dir = fs::path(tmp.path) / "trace";
  fs::create_directories(dir);
  TraceHeader h;
  h.info = read_process_info();
  h.info.trace_dir = dir.string();
  h.info.host = "node0";
  const std::string stem = (dir / ("node0-" + std::to_string(h.info.pid))).string();
  // The first name: a dangling link to a file outside the directory.
  const fs::path outside = fs::path(tmp.path) / "outside";
  fs::create_symlink(outside, stem + schema::kFileSuffix);
  {
    std::string err;
    Writer* w = Writer::open(h, &err);
    ASSERT_NE(w, nullptr) << err;
    EXPECT_EQ(w->path(), stem + ".1" + schema::kFileSuffix);
    w->start();
    w->stop("exit");
    EXPECT_FALSE(fs::exists(outside)) << "the link was followed";
  }
  for (int n = 2; n <= 1000; ++n) std::ofstream(stem + "." + std::to_string(n) + schema::kFileSuffix) << "precious";
  std::string err;
  EXPECT_EQ(Writer::open(h, &err), nullptr) << "every name was taken";
  EXPECT_NE(err.find("cannot claim a trace file name"), std::string::npos) << err;
  std::ifstream last(stem + ".1000" + schema::kFileSuffix);
  std::string text;
  last >> text;
  EXPECT_EQ(text, "precious");
  EXPECT_FALSE(fs::exists(stem + ".1001" + schema::kFileSuffix));
}

int64_t count_rows(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  int64_t v = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

// A side file planted at a free name in a shared (sticky, world-writable) directory, which this
// process cannot remove (another user's; here a non-empty directory, which root cannot unlink
// either): the rank ran untraced ("cannot create trace tables") and left a 0-byte trace. The name
// is taken instead: the next one records, the first is not left as an empty file, and what was
// planted is untouched. A link planted as the next name's journal is removed, never written through.
TEST(WriterFileName, a_side_file_that_cannot_be_removed_makes_the_name_taken) {
  TempDir tmp;
  const fs::path dir = fs::path(tmp.path) / "trace";
  fs::create_directories(dir);
  TraceHeader h;
  h.info = read_process_info();
  h.info.trace_dir = dir.string();
  h.info.host = "node0";
  h.max_mb = 0;
  const std::string stem = (dir / ("node0-" + std::to_string(h.info.pid))).string();
  const std::string first = stem + schema::kFileSuffix, next = stem + ".1" + schema::kFileSuffix;
  fs::create_directory(first + "-journal");
  std::ofstream(first + "-journal/planted") << "theirs";
  const fs::path outside = fs::path(tmp.path) / "outside";
  std::ofstream(outside) << "precious";
  fs::create_symlink(outside, next + "-journal");

  std::string err;
  Writer* w = Writer::open(h, &err);
  ASSERT_NE(w, nullptr) << err;
  EXPECT_EQ(w->path(), next);
  w->start();
  w->push(test::comm_init_record(1, 0xc0ffee01));
  w->flush(60000);
  w->stop("exit");
  EXPECT_EQ(count_rows(next, "SELECT count(*) FROM comms"), 1) << "the trace under the next name has its records";
  EXPECT_EQ(count_rows(next, "SELECT count(*) FROM meta WHERE key = 'finished' AND value = '1'"), 1);
  EXPECT_FALSE(fs::exists(fs::symlink_status(first))) << "an empty file left at the name taken";
  std::string text;
  std::ifstream(first + "-journal/planted") >> text;
  EXPECT_EQ(text, "theirs") << "the planted directory was changed";
  std::ifstream(outside) >> text;
  EXPECT_EQ(text, "precious") << "the planted link was written through";
  EXPECT_FALSE(fs::is_symlink(next + "-journal"));
}

// A recorder reads its peers' files for the hang report (their global ranks): a FIFO named like a
// trace, or as a trace's journal, is not opened (opening one would block until a writer came).
TEST(WriterFileName, a_fifo_named_like_a_trace_is_not_opened_by_a_peer) {
  TempDir tmp;
  const std::string fifo = tmp.path + "/zz" + schema::kFileSuffix;
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(trace_file::read_global_rank(fifo, 200), -1);
  // A regular trace beside a FIFO journal.
  TraceHeader h;
  h.info = read_process_info();
  h.info.trace_dir = tmp.path;
  std::string err;
  Writer* w = Writer::open(h, &err);
  ASSERT_NE(w, nullptr) << err;
  const std::string path = w->path();
  w->start();
  w->stop("exit");
  fs::remove(path + "-journal");
  ASSERT_EQ(mkfifo((path + "-journal").c_str(), 0644), 0);
  EXPECT_EQ(trace_file::read_global_rank(path, 200), -1);
}

}  // namespace
}  // namespace lockstep::rec
