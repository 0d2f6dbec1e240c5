// Node summaries (analyzer/node_summary.h): the codec gives back what the loader loaded, and
// bytes it did not write -- even behind a valid checksum -- are refused or caught by
// check_loaded_file, never a crash or an unbounded allocation.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "node_summary.h"
#include "summary_read.h"
#include "trace_builder.h"

using lockstep::FileIdentity;
using lockstep::LoadedFile;
using lockstep::SummaryEntry;
using lockstep::testing::OpSpec;
using lockstep::testing::TraceBuilder;

namespace {

// A file with what the codec carries: parts, groups, streams past the index's 254 buckets, ops
// in flight, a hang marker, a NOCOLOR-free split communicator.
std::string sample_file() {
  const std::string dir = lockstep::testing::fresh_dir("node_summary");
  TraceBuilder b(2);
  b.comm("00000000000000aa", {0, 1});
  b.comm("00000000000000bb", {0, 1}, "00000000000000aa", 1, "tp");
  b.all({0, 1}, "00000000000000aa", OpSpec{}, 20);
  for (int s = 0; s < 300; ++s) b.all({0, 1}, "00000000000000bb", OpSpec{.count = 8, .stream = uint64_t(1000 + s)});
  b.all({0, 1}, "00000000000000aa", OpSpec{.op = "all_to_all", .redop = "", .parts = {lockstep::testing::send_to(1, 5), lockstep::testing::recv_from(1, 5)}, .group = 3});
  b.all({0, 1}, "00000000000000aa", OpSpec{.completed = false});
  b.trace().processes[0].hangs.push_back({7, 8, 1, "hang!"});
  b.running(0);
  lockstep::testing::write_trace(b.trace(), dir);
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().string().find("rank-0") != std::string::npos || e.path().string().find("-0.") != std::string::npos)
      return e.path().string();
  return std::filesystem::directory_iterator(dir)->path().string();
}

void reseal(std::string& bytes) {  // the checksum of the mutated bytes, so the decoder gets past it
  const uint64_t h = lockstep::summary_hash(bytes.data(), bytes.size() - 8);
  for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<char>(h >> (8 * i));
}

}  // namespace

TEST(NodeSummary, gives_back_what_the_loader_loaded) {
  const std::string path = sample_file();
  std::vector<SummaryEntry> in(1);
  in[0].file = lockstep::load_file_summary_first(path);
  ASSERT_EQ(in[0].file.reason, "");
  std::string why;
  in[0].id = lockstep::file_identity(path, &why);
  ASSERT_EQ(why, "");
  const std::string bytes = lockstep::encode_node_summary("node0", in);
  std::string host;
  std::vector<SummaryEntry> out = lockstep::decode_node_summary(bytes, &host);
  EXPECT_EQ(host, "node0");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(lockstep::check_loaded_file(out[0].file), "");
  const lockstep::SchedProcess &a = in[0].file.proc, &b = out[0].file.proc;
  EXPECT_EQ(out[0].id, in[0].id);
  EXPECT_EQ(b.info.host, a.info.host);
  EXPECT_EQ(b.info.global_rank, a.info.global_rank);
  EXPECT_EQ(b.info.finished, a.info.finished);
  EXPECT_EQ(b.info.checkpoint_interval, a.info.checkpoint_interval);
  ASSERT_EQ(b.ops.size(), a.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_EQ(b.ops[i].call_index, a.ops[i].call_index);
    EXPECT_EQ(b.ops[i].sig, a.ops[i].sig);
    EXPECT_EQ(b.ops[i].seq, a.ops[i].seq);
    EXPECT_EQ(b.ops[i].flags, a.ops[i].flags);
    EXPECT_EQ(b.stream_of(i), a.stream_of(i));
    EXPECT_EQ(b.group_of(i), a.group_of(i));
  }
  EXPECT_FALSE(a.overflow_streams.empty());
  EXPECT_EQ(b.streams, a.streams);
  EXPECT_EQ(b.in_flight_issue, a.in_flight_issue);
  EXPECT_FALSE(a.in_flight_issue.empty());
  EXPECT_EQ(b.completion_known, a.completion_known);
  EXPECT_EQ(b.unsequenced_ops, a.unsequenced_ops);
  // Everything the codec carries, compared at once: the decoded entry encodes to the same bytes.
  EXPECT_EQ(lockstep::encode_node_summary("node0", out), bytes);
}

TEST(NodeSummary, refuses_what_it_did_not_write) {
  const std::string path = sample_file();
  std::vector<SummaryEntry> in(1);
  in[0].file = lockstep::load_file_summary_first(path);
  const std::string bytes = lockstep::encode_node_summary("node0", in);
  EXPECT_ANY_THROW(lockstep::decode_node_summary(""));
  EXPECT_ANY_THROW(lockstep::decode_node_summary(bytes.substr(0, bytes.size() - 1)));
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 1;
  EXPECT_ANY_THROW(lockstep::decode_node_summary(flipped));
  std::string trailing = bytes.substr(0, bytes.size() - 8) + "x" + bytes.substr(bytes.size() - 8);
  reseal(trailing);
  EXPECT_ANY_THROW(lockstep::decode_node_summary(trailing));
}

// Random damage behind a valid checksum: decoding throws, or what it gives passes or fails
// check_loaded_file; nothing crashes (the sanitizer build runs this too).
TEST(NodeSummary, damage_behind_a_valid_checksum_is_caught_without_a_crash) {
  const std::string path = sample_file();
  std::vector<SummaryEntry> in(1);
  in[0].file = lockstep::load_file_summary_first(path);
  const std::string bytes = lockstep::encode_node_summary("node0", in);
  std::mt19937_64 rng(33);
  int decoded = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string m = bytes;
    const size_t body = m.size() - 8;
    for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) {
      const size_t at = 22 + rng() % (body - 22);
      switch (rng() % 3) {
        case 0: m[at] = static_cast<char>(rng()); break;
        case 1: m[at] = static_cast<char>(0xff); break;  // a varint that goes on: huge values
        default: m.erase(at, 1 + rng() % 16); break;
      }
      if (m.size() < 40) break;
    }
    if (m.size() < 40) continue;
    reseal(m);
    try {
      std::vector<SummaryEntry> out = lockstep::decode_node_summary(m);
      for (SummaryEntry& e : out) lockstep::check_loaded_file(e.file).empty() ? ++decoded : ++refused;
    } catch (const std::exception&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);
}

// A count the bytes after it cannot hold (25 bytes an entry at least) is refused as it is read,
// before anything is allocated for it: 1,000,000 entries claimed over 1 MB (872 MB of entries).
TEST(NodeSummary, a_count_the_bytes_cannot_hold_is_refused_before_allocating) {
  const std::string empty = lockstep::encode_node_summary("node0", {});
  const size_t count_at = empty.size() - 8 - 1;  // the entry count, 0, before the checksum
  ASSERT_EQ(empty[count_at], 0);
  std::string m = empty.substr(0, count_at);
  for (uint64_t v = 1000000; ; v >>= 7) {  // the count as the format's varint
    if (v < 0x80) {
      m.push_back(static_cast<char>(v));
      break;
    }
    m.push_back(static_cast<char>((v & 0x7f) | 0x80));
  }
  m += std::string(1000000, '\x01');
  m += std::string(8, '\0');
  reseal(m);
  try {
    lockstep::decode_node_summary(m);
    FAIL() << "a summary of 1,000,000 entries in 1 MB was decoded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("a count beyond the file's end"), std::string::npos) << e.what();
  }
}

// Summaries ignored for one reason on every node (an older format, written before the job's
// end) are one line with the first few paths, not one line a node; other reasons keep theirs.
TEST(NodeSummaryText, summaries_ignored_for_one_reason_are_one_line) {
  lockstep::UnreadSummary u;
  for (int n = 0; n < 2048; ++n)
    u.summaries.ignored.push_back({"d/node" + std::to_string(n) + ".lockstep-summary", "checksum mismatch"});
  u.summaries.ignored.push_back({"d/x.lockstep-summary", "not a regular file"});
  const std::string text = lockstep::unread_text(u);
  EXPECT_EQ(text,
            "read: 2048 node summaries ignored, their files read: checksum mismatch: d/node0.lockstep-summary, "
            "d/node1.lockstep-summary, d/node2.lockstep-summary and 2045 more (--json lists every one)\n"
            "read: node summary ignored, its files read: d/x.lockstep-summary: not a regular file");
  // Many distinct reasons: the first eight, then a count.
  lockstep::UnreadSummary v;
  for (int n = 0; n < 20; ++n)
    v.summaries.ignored.push_back({"d/n" + std::to_string(n), "stale: rank-" + std::to_string(n) + " changed"});
  const std::string many = lockstep::unread_text(v);
  EXPECT_EQ(std::count(many.begin(), many.end(), '\n'), 8) << many;
  EXPECT_NE(many.find("read: and 12 more node summaries ignored"), std::string::npos) << many;
}

// A summary of another format version is refused for its version, before its checksum (another
// format's checksum is another hash): the reason says to summarize again.
TEST(NodeSummary, another_format_version_is_named_as_such) {
  std::string bytes = lockstep::encode_node_summary("node0", {});
  const size_t version_at = sizeof("lockstep-node-summary");  // the magic with its NUL
  ASSERT_GT(bytes.size(), version_at);
  bytes[version_at] = 1;  // format 1, whose checksum no longer matches either
  try {
    lockstep::decode_node_summary(bytes);
    FAIL() << "a format 1 summary was decoded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("format version 1, this lockstep reads"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("run lockstep summarize again"), std::string::npos) << e.what();
  }
}

namespace {

void set_mtime(const std::string& path, int64_t ns) {
  const timespec t[2] = {{ns / 1000000000, ns % 1000000000}, {ns / 1000000000, ns % 1000000000}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), t, 0), 0);
}

// What a live recorder's heartbeats commit over `seconds`: one a second, the last flush alone
// (the same number of digits), the file's mtime later by `seconds` (or by `mtime_seconds`: a
// wall clock stepped forward in between).
void heartbeat(const std::string& path, const FileIdentity& then, int seconds, int mtime_seconds = -1) {
  for (int i = 0; i < seconds; ++i)
    lockstep::testing::exec_sql(path, "UPDATE meta SET value = CAST(value AS INTEGER) + 1000000000 WHERE key = 'last_flush_mono_ns'");
  set_mtime(path, then.mtime_ns + int64_t(mtime_seconds < 0 ? seconds : mtime_seconds) * 1000000000);
}

// `path` summarized alone into its directory's node summary; its identity as summarized.
FileIdentity summarize_one(const std::string& path) {
  lockstep::Summarized s = lockstep::summarize_files({path}, {});
  EXPECT_EQ(s.entries.size(), 1u);
  if (s.entries.empty()) return {};
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  lockstep::write_node_summary((dir / "node0.lockstep-summary").string(), "node0", s.entries);
  return s.entries[0].id;
}

lockstep::SummaryCover cover_of(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::vector<std::string> files;
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().string().ends_with(".lockstep.sqlite")) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return lockstep::cover_from_summaries(dir.string(), files, 1);
}

int64_t covered_last_flush(lockstep::SummaryCover& c) {
  int64_t v = -1;
  c.each([&](size_t, LoadedFile& f) { v = f.proc.info.last_flush_mono_ns; });
  return v;
}

}  // namespace

// A live recorder's file (content generation in user_version, not finished) committed only its
// heartbeat since summarizing: the summary still stands for it, named refreshed, its last flush
// taken forward by the mtime's move. Any other commit moves the generation: stale.
TEST(NodeSummaryIdentity, a_live_recorders_heartbeat_keeps_the_summary_and_takes_its_last_flush_forward) {
  const std::string path = sample_file();
  lockstep::testing::exec_sql(path, "PRAGMA user_version = 5");
  const int64_t flushed = lockstep::load_file_summary_first(path).proc.info.last_flush_mono_ns;
  ASSERT_GT(flushed, 0);
  const FileIdentity then = summarize_one(path);
  EXPECT_NE(then.settled, 0u);

  // Only the mtime moved (a copy that does not keep it, `touch`): no commit, no heartbeat.
  set_mtime(path, then.mtime_ns + 2'000'000'000);
  lockstep::SummaryCover touched = cover_of(path);
  EXPECT_EQ(touched.use.used, 0);
  EXPECT_EQ(touched.use.ignored.size(), 1u);
  set_mtime(path, then.mtime_ns);

  heartbeat(path, then, 3);
  std::string why;
  const FileIdentity now = lockstep::file_identity(path, &why);
  EXPECT_FALSE(now == then) << "the commit changed the file's first page (its change counter)";
  EXPECT_TRUE(lockstep::only_heartbeats_since(then, now));
  lockstep::SummaryCover c = cover_of(path);
  EXPECT_EQ(c.use.used, 1);
  EXPECT_EQ(c.use.files, 1);
  EXPECT_EQ(c.use.refreshed, 1);
  EXPECT_TRUE(c.use.ignored.empty()) << c.use.ignored[0].reason;
  EXPECT_EQ(covered_last_flush(c), flushed + 3'000'000'000);

  // The wall clock stepped an hour forward between two heartbeats: the last flush moves by no
  // more than the heartbeats committed can span (5 commits since summarizing: 5 s), not an hour.
  heartbeat(path, now, 2, 3600);
  c = cover_of(path);
  EXPECT_EQ(c.use.refreshed, 1);
  EXPECT_EQ(covered_last_flush(c), flushed + 5'000'000'000);

  // A commit that wrote more moves the generation, whatever it wrote.
  lockstep::testing::exec_sql(path, "UPDATE meta SET value = value WHERE key = 'host'; PRAGMA user_version = 6");
  set_mtime(path, then.mtime_ns + 4'000'000'000);
  c = cover_of(path);
  EXPECT_EQ(c.use.used, 0);
  ASSERT_EQ(c.use.ignored.size(), 1u);
  EXPECT_NE(c.use.ignored[0].reason.find("stale"), std::string::npos) << c.use.ignored[0].reason;
}

// A file that says nothing of its generation (other writers, older recorders), or whose
// recorder had finished: unchanged, its summary stands for it; any change after summarizing is a change.
TEST(NodeSummaryIdentity, without_a_generation_or_once_finished_any_commit_is_a_change) {
  for (const bool finished : {false, true}) {
    const std::string path = sample_file();
    if (finished) lockstep::testing::exec_sql(path, "PRAGMA user_version = 5; INSERT OR REPLACE INTO meta(key, value) VALUES ('finished', '1')");
    const FileIdentity then = summarize_one(path);
    EXPECT_EQ(then.settled, 0u);
    lockstep::SummaryCover unchanged = cover_of(path);
    EXPECT_EQ(unchanged.use.used, 1) << "finished " << finished;
    EXPECT_TRUE(unchanged.use.ignored.empty()) << unchanged.use.ignored[0].reason;
    heartbeat(path, then, 3);
    lockstep::SummaryCover c = cover_of(path);
    EXPECT_EQ(c.use.used, 0) << "finished " << finished;
    ASSERT_EQ(c.use.ignored.size(), 1u);
    EXPECT_NE(c.use.ignored[0].reason.find("stale"), std::string::npos) << c.use.ignored[0].reason;
  }
}

// A recorder that wrote its last words (an exit reason, here SIGTERM's) never writes again: no
// heartbeat can follow, so any commit after summarizing is someone else's.
TEST(NodeSummaryIdentity, after_an_exit_reason_any_commit_is_a_change) {
  const std::string path = sample_file();
  lockstep::testing::exec_sql(path, "PRAGMA user_version = 5; INSERT OR REPLACE INTO meta(key, value) VALUES ('exit_reason', 'SIGTERM')");
  const FileIdentity then = summarize_one(path);
  EXPECT_EQ(then.settled, 0u);
  EXPECT_EQ(cover_of(path).use.used, 1) << "unchanged since summarizing";
  heartbeat(path, then, 3);
  lockstep::SummaryCover c = cover_of(path);
  EXPECT_EQ(c.use.used, 0);
  ASSERT_EQ(c.use.ignored.size(), 1u);
  EXPECT_NE(c.use.ignored[0].reason.find("stale"), std::string::npos) << c.use.ignored[0].reason;
}

// SQLite's side files: a file with a -wal or -shm, a -journal that holds anything, or one that
// is not a regular file is read directly (where the loader skips it, or rolls a hot journal back
// in a copy), never stood for by its summary. The recorder's empty journal between commits keeps it.
TEST(NodeSummaryIdentity, a_side_file_beside_a_covered_file_sends_it_to_the_direct_read) {
  namespace fs = std::filesystem;
  struct Case {
    const char* suffix;
    int kind;  // 0 empty file, 1 file with bytes, 2 directory, 3 symbolic link
    bool covered;
  };
  for (const Case c : {Case{"-journal", 0, true}, Case{"-journal", 1, false}, Case{"-journal", 2, false},
                       Case{"-journal", 3, false}, Case{"-shm", 0, false}, Case{"-shm", 2, false}, Case{"-wal", 0, false}}) {
    const std::string path = sample_file();
    summarize_one(path);
    const std::string side = path + c.suffix;
    fs::remove_all(side);
    if (c.kind == 0 || c.kind == 1) {
      std::ofstream(side) << (c.kind == 1 ? "x" : "");
    } else if (c.kind == 2) {
      fs::create_directory(side);
    } else {
      std::ofstream(path + ".other");
      fs::create_symlink(path + ".other", side);
    }
    lockstep::SummaryCover cover = cover_of(path);
    EXPECT_EQ(cover.use.used, c.covered ? 1 : 0) << c.suffix << " kind " << c.kind;
    if (!c.covered) {
      ASSERT_EQ(cover.use.ignored.size(), 1u);
      EXPECT_NE(cover.use.ignored[0].reason.find("read directly"), std::string::npos) << cover.use.ignored[0].reason;
    }
    fs::remove_all(side);
  }
}

// A summary that claims more entries than the directory has trace files is refused before its
// entries are decoded (each takes ~25 times its encoded size in memory).
TEST(NodeSummary, more_entries_than_trace_files_are_refused_undecoded) {
  const std::string path = sample_file();
  lockstep::Summarized s = lockstep::summarize_files({path, path, path}, {});
  ASSERT_EQ(s.entries.size(), 3u);
  const std::string bytes = lockstep::encode_node_summary("node0", s.entries);
  EXPECT_EQ(lockstep::decode_node_summary(bytes, nullptr, 3).size(), 3u);
  try {
    lockstep::decode_node_summary(bytes, nullptr, 2);
    ADD_FAILURE() << "three entries decoded where two files are";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("covers 3 files, more than the 2 trace files"), std::string::npos) << e.what();
  }
}

// Only heartbeats, but the file grew, or its mtime went back: not the same file's heartbeat.
TEST(NodeSummaryIdentity, a_file_that_grew_went_back_in_time_or_saw_no_commit_is_a_change) {
  FileIdentity then{"f", 100, 5'000, 1, 42, 7};
  FileIdentity now = then;
  now.content = 2, now.mtime_ns += 1, now.commits = 8;
  EXPECT_TRUE(lockstep::only_heartbeats_since(then, now));
  // The same bytes with a later mtime (a copy, `touch`, a rollback by another program): SQLite
  // committed nothing, so no heartbeat either.
  FileIdentity touched = then;
  touched.mtime_ns += 3'000'000'000;
  EXPECT_FALSE(lockstep::only_heartbeats_since(then, touched));
  FileIdentity grew = now;
  grew.size += 1024;
  EXPECT_FALSE(lockstep::only_heartbeats_since(then, grew));
  FileIdentity earlier = now;
  earlier.mtime_ns = then.mtime_ns - 1;
  EXPECT_FALSE(lockstep::only_heartbeats_since(then, earlier));
  FileIdentity regenerated = now;
  regenerated.settled = 43;
  EXPECT_FALSE(lockstep::only_heartbeats_since(then, regenerated));
  FileIdentity unknown = then;
  unknown.settled = 0;
  EXPECT_FALSE(lockstep::only_heartbeats_since(unknown, unknown));
}

// The format's hash is a fixed function of the bytes (summaries and file identities written by
// one lockstep are read by another): little-endian words, whatever the load it is computed with.
TEST(NodeSummary, the_hash_is_the_formats_on_every_length_and_seed) {
  auto reference = [](const unsigned char* p, size_t n, uint64_t seed) {
    constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
    auto rotl = [](uint64_t v, int r) { return (v << r) | (v >> (64 - r)); };
    auto word = [](const unsigned char* q) {
      uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(q[i]) << (8 * i);
      return v;
    };
    uint64_t lane[4] = {seed, seed ^ 1, seed ^ 2, seed ^ 3};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
      for (int l = 0; l < 4; ++l) lane[l] = rotl((lane[l] ^ word(p + i + 8 * l)) * kMul, 29);
    uint64_t h = seed ^ static_cast<uint64_t>(n);
    for (uint64_t v : lane) h = rotl((h ^ v) * kMul, 29);
    for (; i < n; ++i) h = (h ^ p[i]) * kMul;
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull, h ^= h >> 33;
    return h;
  };
  std::mt19937_64 rng(33);
  std::vector<unsigned char> bytes(4096 + 64);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  for (size_t at : {size_t(0), size_t(1), size_t(7)})
    for (size_t n : {size_t(0), size_t(5), size_t(31), size_t(32), size_t(33), size_t(100), size_t(4096)})
      for (uint64_t seed : {uint64_t(0), uint64_t(0x5e771ed), ~uint64_t(0)})
        EXPECT_EQ(lockstep::summary_hash(bytes.data() + at, n, seed), reference(bytes.data() + at, n, seed))
            << "at " << at << " n " << n << " seed " << seed;
  // Pinned: the value the format has always given (a change here is a new format version).
  const char* text = "lockstep node summary hash";
  EXPECT_EQ(lockstep::summary_hash(text, std::strlen(text)), reference(reinterpret_cast<const unsigned char*>(text), std::strlen(text), 0));
}

// check_loaded_file interns an entry's signatures: equal ones share an index and the ops follow
// (a summary written by summarize has distinct ones; one that is not is read the same way).
TEST(NodeSummary, an_entry_with_equal_signatures_is_interned_and_its_ops_remapped) {
  const std::string path = sample_file();
  LoadedFile distinct = lockstep::load_file_summary_first(path);
  ASSERT_EQ(distinct.reason, "");
  ASSERT_GE(distinct.sigs.size(), 2u);
  const std::vector<lockstep::SchedOp> ops = distinct.proc.ops;
  LoadedFile kept = distinct;
  ASSERT_EQ(lockstep::check_loaded_file(kept), "");
  ASSERT_EQ(kept.sigs.size(), distinct.sigs.size());  // distinct: every index its own
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(kept.proc.ops[i].sig, ops[i].sig);
  for (size_t k = 0; k < kept.sigs.size(); ++k) {
    EXPECT_TRUE(lockstep::same_signature(kept.sigs[k], distinct.sigs[k]));
    EXPECT_EQ(kept.sigs[k].cls, lockstep::classify_op(kept.sigs[k].op));
  }
  // The first signature again at the end, named by the ops that named the first: interned back.
  LoadedFile twice = distinct;
  twice.sigs.push_back(twice.sigs[0]);
  const uint32_t last = static_cast<uint32_t>(twice.sigs.size() - 1);
  size_t moved = 0;
  for (auto& o : twice.proc.ops)
    if (o.sig == 0 && moved++ % 2 == 0) o.sig = last;
  ASSERT_GT(moved, 1u);
  ASSERT_EQ(lockstep::check_loaded_file(twice), "");
  ASSERT_EQ(twice.sigs.size(), distinct.sigs.size());
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(twice.proc.ops[i].sig, ops[i].sig) << "op " << i;
  // An op naming no signature is refused either way.
  LoadedFile bad = distinct;
  bad.proc.ops[0].sig = static_cast<uint32_t>(bad.sigs.size());
  EXPECT_EQ(lockstep::check_loaded_file(bad), "an op names no signature or communicator");
  LoadedFile bad_twice = twice;
  bad_twice.sigs.push_back(bad_twice.sigs[0]);
  bad_twice.proc.ops[0].sig = static_cast<uint32_t>(bad_twice.sigs.size());
  EXPECT_EQ(lockstep::check_loaded_file(bad_twice), "an op names no signature or communicator");
}
