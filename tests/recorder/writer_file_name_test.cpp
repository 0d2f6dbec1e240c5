// The trace file's name (issue 29): the host name comes from the machine (a UTS namespace, a
// container's --hostname) and must not move the file out of the trace directory or put control
// bytes into its name. schema/file_name.h is the one definition every writer uses.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "file_name.h"
#include "process_info.h"
#include "trace_schema.h"
#include "trace_test_util.h"
#include "writer.h"

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
  for (const std::string host : {std::string("../../esc"), std::string("bad\nhost\x1b]0;x\x07")}) {
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
  for (const auto& e : fs::recursive_directory_iterator(tmp.path))
    if (e.is_regular_file()) EXPECT_EQ(fs::canonical(e.path().parent_path()), fs::canonical(dir)) << e.path();
}

}  // namespace
}  // namespace lockstep::rec
