#include "node_summary.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "file_io.h"
#include "file_name.h"
#include "meta_keys.h"
#include "parallel_for.h"
#include "schedule.h"
#include "text_escape.h"
#include "trace_file.h"
#include "trace_schema.h"

namespace lockstep {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[] = "lockstep-node-summary";  // with its NUL: 22 bytes
constexpr uint64_t kVersion = 4;  // 4: order digests, unread all-to-alls; 3: FileIdentity::settled; 2: summary_hash (1: FNV-1a, a byte at a time)
constexpr int64_t kMaxSummaryBytes = int64_t(4) << 30;
constexpr size_t kIdentityBytes = 4096;

struct Corrupt : std::runtime_error {
  using std::runtime_error::runtime_error;
};


class Out {
 public:
  void u(uint64_t v) {
    while (v >= 0x80) b_.push_back(static_cast<char>((v & 0x7f) | 0x80)), v >>= 7;
    b_.push_back(static_cast<char>(v));
  }
  void s(int64_t v) { u((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void str(const std::string& v) {
    u(v.size());
    b_ += v;
  }
  void fixed(uint64_t v) {
    for (int i = 0; i < 8; ++i) b_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string& bytes() { return b_; }

 private:
  std::string b_;
};

class In {
 public:
  In(const char* p, const char* end) : p_(p), end_(end) {}
  uint64_t u() {
    // Most values are one byte (an op's call_index delta, communicator, signature, flags).
    if (p_ != end_ && !(static_cast<unsigned char>(*p_) & 0x80)) return static_cast<unsigned char>(*p_++);
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) throw Corrupt("truncated");
      const auto c = static_cast<unsigned char>(*p_++);
      if (shift == 63 && c > 1) throw Corrupt("an integer out of range");
      v |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    throw Corrupt("an integer out of range");
  }
  int64_t s() {
    const uint64_t v = u();
    return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
  }
  int64_t s(int64_t lo, int64_t hi) {
    const int64_t v = s();
    if (v < lo || v > hi) throw Corrupt("a value out of range (" + std::to_string(v) + ")");
    return v;
  }
  int i32() { return static_cast<int>(s(INT32_MIN, INT32_MAX)); }
  bool flag() {
    const uint64_t v = u();
    if (v > 1) throw Corrupt("a flag that is neither 0 nor 1");
    return v == 1;
  }
  // A count of elements of at least `min_bytes` bytes each: never more than the bytes left hold
  // (what the decoder reserves for a count is bounded by the summary's size).
  size_t count(size_t min_bytes = 1) {
    const uint64_t v = u();
    if (v > static_cast<uint64_t>(end_ - p_) / min_bytes) throw Corrupt("a count beyond the file's end");
    return static_cast<size_t>(v);
  }
  // Strings were made printable by the loader: one that is not was not written by summarize.
  std::string str() {
    const size_t n = count();
    std::string v(p_, n);
    p_ += n;
    if (!is_printable(v)) throw Corrupt("a string that is not printable");
    return v;
  }
  uint64_t fixed() {
    if (end_ - p_ < 8) throw Corrupt("truncated");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p_[i])) << (8 * i);
    p_ += 8;
    return v;
  }
  template <class E>
  E vocab_enum(int known, int none) {
    const uint64_t v = u();
    if (static_cast<int64_t>(v) != none && v >= static_cast<uint64_t>(known)) throw Corrupt("an unknown enumerator");
    return static_cast<E>(v);
  }
  bool done() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

template <class E>
uint64_t ev(E e) {
  return static_cast<uint64_t>(e);
}

void put_part(Out& o, const OpPart& p) {
  o.u(ev(p.op)), o.u(ev(p.dtype)), o.s(p.count), o.s(p.root), o.s(p.peer), o.u(ev(p.redop));
}
OpPart get_part(In& in) {
  OpPart p;
  p.op = in.vocab_enum<vocab::Op>(vocab::kNumOps, -1);
  p.dtype = in.vocab_enum<vocab::Dtype>(static_cast<int>(std::size(vocab::kDtypeNames)), 0xff);
  p.count = in.s();
  p.root = in.i32();
  p.peer = in.i32();
  p.redop = in.vocab_enum<vocab::RedOp>(static_cast<int>(std::size(vocab::kRedOpNames)), 0xff);
  return p;
}

void put_entry(Out& o, const SummaryEntry& e) {
  o.str(e.id.name), o.s(e.id.size), o.s(e.id.mtime_ns), o.fixed(e.id.content), o.fixed(e.id.settled), o.u(e.id.commits);
  const SchedProcess& sp = e.file.proc;
  const Process& p = sp.info;
  o.u(p.meta.size());
  for (auto& [k, v] : p.meta) o.str(k), o.str(v);
  o.u(p.env.size());
  for (auto& [k, v] : p.env) o.str(k), o.str(v);
  o.u(p.comms.size());
  for (const Comm& c : p.comms) {
    o.s(c.local_id), o.str(c.hash), o.u(c.handle), o.s(c.nranks), o.s(c.rank), o.s(c.cuda_device), o.s(c.parent);
    o.s(c.split_color), o.s(c.split_key), o.str(c.name), o.u(c.created_before_tracing), o.u(c.shrunk);
    o.s(c.init_call), o.s(c.init_rc), o.u(ev(c.end_kind));
    o.s(c.retired_collectives), o.u(c.retired_digest), o.s(c.retired_through_seq);
    o.u(c.checkpoints.size());
    for (const Comm::Checkpoint& k : c.checkpoints) o.s(k.ordinal), o.s(k.seq), o.u(k.digest), o.s(k.order_count), o.u(k.order_digest);
  }
  o.u(p.nocolor_splits.size());
  for (const NoColorSplit& x : p.nocolor_splits) o.s(x.call_index), o.s(x.parent);
  o.u(p.hangs.size());
  for (const HangMarker& h : p.hangs) o.s(h.mono_ns), o.s(h.wall_ns), o.s(h.in_flight), o.str(h.message);
  o.u(p.drops_known);
  o.u(p.drops.size());
  for (const DropRange& d : p.drops) o.s(d.comm), o.s(d.first_seq), o.s(d.last_seq), o.s(d.records), o.str(d.reason), o.u(d.stop_point);
  o.u(e.file.sigs.size());
  for (const Signature& s : e.file.sigs) {
    put_part(o, OpPart{s.op, s.dtype, s.count, s.root, s.peer, s.redop});
    o.u(s.parts.size());
    for (const OpPart& part : s.parts) put_part(o, part);
  }
  o.u(sp.completion_known), o.s(sp.unsequenced_ops), o.s(sp.unread_ops);
  o.u(sp.unread.size());
  for (const auto& u : sp.unread) o.s(u.collectives), o.u(u.digest), o.u(u.all_to_all), o.u(u.all_to_all_key);
  o.u(sp.in_flight_issue.size());
  for (auto& [ci, t] : sp.in_flight_issue) o.s(ci), o.s(t);
  // The rows as ScheduleBuilder takes them: decoding builds the same index (streams, groups).
  o.u(sp.ops.size());
  int64_t previous = 0;
  for (size_t i = 0; i < sp.ops.size(); ++i) {
    const SchedOp& op = sp.ops[i];
    const uint32_t g = sp.group_of(i);
    const int64_t group = !(op.flags & kOpGrouped) ? -1 : g == 0 ? int64_t(UINT32_MAX) : int64_t(g) - 1;
    o.s(op.call_index - previous), o.s(op.seq), o.s(op.comm), o.u(op.sig), o.u(sp.stream_of(i)), o.s(group), o.u(op.completed());
    previous = op.call_index;
  }
}

SummaryEntry get_entry(In& in) {
  SummaryEntry e;
  e.id.name = in.str();
  e.id.size = in.s(0, INT64_MAX);
  e.id.mtime_ns = in.s();
  e.id.content = in.fixed();
  e.id.settled = in.fixed();
  const uint64_t commits = in.u();
  if (commits > UINT32_MAX) throw Corrupt("a change counter out of range");
  e.id.commits = static_cast<uint32_t>(commits);
  SchedProcess& sp = e.file.proc;
  Process& p = sp.info;
  for (size_t n = in.count(); n-- > 0;) {
    std::string k = in.str();
    p.meta[k] = in.str();
  }
  for (size_t n = in.count(); n-- > 0;) {
    std::string k = in.str();
    p.env[k] = in.str();
  }
  const size_t n_comms = in.count(19);  // 19 fields of a byte at least
  if (n_comms > UINT16_MAX + size_t(1)) throw Corrupt("more communicators than an op can name");
  p.comms.reserve(n_comms);
  for (size_t n = n_comms; n-- > 0;) {
    Comm& c = p.comms.emplace_back();
    c.local_id = in.i32(), c.hash = in.str(), c.handle = in.u(), c.nranks = in.i32(), c.rank = in.i32();
    c.cuda_device = in.i32(), c.parent = in.i32(), c.split_color = in.i32(), c.split_key = in.i32();
    c.name = in.str(), c.created_before_tracing = in.flag(), c.shrunk = in.flag();
    c.init_call = in.s(), c.init_rc = in.i32();
    c.end_kind = in.vocab_enum<vocab::CommEnd>(static_cast<int>(std::size(vocab::kCommEndNames)), 0xff);
    c.retired_collectives = in.s(), c.retired_digest = in.u(), c.retired_through_seq = in.s();
    for (size_t k = in.count(); k-- > 0;) {
      Comm::Checkpoint& cp = c.checkpoints.emplace_back();
      cp.ordinal = in.s(), cp.seq = in.s(), cp.digest = in.u(), cp.order_count = in.s(), cp.order_digest = in.u();
    }
  }
  for (size_t n = in.count(); n-- > 0;) {
    NoColorSplit& x = p.nocolor_splits.emplace_back();
    x.call_index = in.s(), x.parent = in.i32();
  }
  for (size_t n = in.count(); n-- > 0;) {
    HangMarker& h = p.hangs.emplace_back();
    h.mono_ns = in.s(), h.wall_ns = in.s(), h.in_flight = in.i32(), h.message = in.str();
  }
  p.drops_known = in.flag();
  for (size_t n = in.count(); n-- > 0;) {
    DropRange& d = p.drops.emplace_back();
    d.comm = in.i32(), d.first_seq = in.s(), d.last_seq = in.s(), d.records = in.s(), d.reason = in.str(), d.stop_point = in.flag();
  }
  const size_t n_sigs = in.count(7);  // an op part and a count of parts
  if (n_sigs > kMaxSignatures) throw Corrupt("more signatures than the index holds");
  e.file.sigs.reserve(n_sigs);
  for (size_t n = n_sigs; n-- > 0;) {
    const OpPart head = get_part(in);
    Signature& s = e.file.sigs.emplace_back();
    s.op = head.op, s.dtype = head.dtype, s.count = head.count, s.root = head.root, s.peer = head.peer, s.redop = head.redop;
    s.cls = classify_op(s.op);
    for (size_t k = in.count(); k-- > 0;) s.parts.push_back(get_part(in));
  }
  sp.completion_known = in.flag(), sp.unsequenced_ops = in.s(), sp.unread_ops = in.s();
  for (size_t n = in.count(); n-- > 0;) {
    auto& u = sp.unread.emplace_back();
    u.collectives = in.s(), u.digest = in.u();
    const uint64_t a2a = in.u();
    if (a2a > SchedProcess::UnreadPrefix::kAllToAllOpen) throw Corrupt("an unknown all-to-all state");
    u.all_to_all = static_cast<uint8_t>(a2a), u.all_to_all_key = in.u();
  }
  const size_t n_in_flight = in.count(2);  // two integers
  sp.in_flight_issue.reserve(n_in_flight);
  for (size_t n = n_in_flight; n-- > 0;) {
    const int64_t ci = in.s();
    sp.in_flight_issue.emplace_back(ci, in.s());
  }
  const size_t n_ops = in.count(7);  // seven integers an op
  sp.ops.reserve(n_ops);
  ScheduleBuilder index(sp);
  int64_t previous = 0;
  const bool completion_known = sp.completion_known;
  for (size_t i = 0; i < n_ops; ++i) {
    ScheduleBuilder::Row r;
    const int64_t delta = in.s();
    if (__builtin_add_overflow(previous, delta, &r.call_index) || (i > 0 && delta <= 0))
      throw Corrupt("ops out of call_index order");
    previous = r.call_index;
    r.seq = in.s();
    r.comm = static_cast<int>(in.s(0, static_cast<int64_t>(p.comms.size()) - 1));
    const uint64_t sig = in.u();
    if (sig >= e.file.sigs.size()) throw Corrupt("an op names no signature");
    r.sig = static_cast<uint32_t>(sig);
    r.stream = in.u();
    r.group_id = in.s(-1, UINT32_MAX);
    r.completed = in.flag();
    try {
      index.add_op(r);
    } catch (const IndexError& x) {
      throw Corrupt(x.what());
    }
  }
  if (sp.completion_known != completion_known) throw Corrupt("completions that contradict completion_known");
  sp.groups.shrink_to_fit();
  return e;
}


// The file's bytes, in `buf`: one buffer per reading thread, grown and never shrunk, so that
// reading a summary neither zero-fills nor faults in fresh memory (a tenth of the loading at
// 131,072 ranks, 16,384 summaries).
std::string_view read_whole(const std::string& path, std::string& buf) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Corrupt(std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  std::string_view bytes;
  try {
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw Corrupt("not a regular file");
    if (st.st_size > kMaxSummaryBytes) throw Corrupt("larger than a summary can be");
    if (buf.size() < static_cast<size_t>(st.st_size)) buf.resize(static_cast<size_t>(st.st_size));
    bytes = std::string_view(buf.data(), static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = pread(fd, buf.data() + got, bytes.size() - got, static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw Corrupt(r < 0 ? std::string("cannot read: ") + std::strerror(errno) : "changed while read");
      got += static_cast<size_t>(r);
    }
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return bytes;
}

// A -wal holds pages newer than the database file, which its identity does not see. (A
// rollback -journal, which the recorder keeps between commits, holds only older pages: a reader
// that rolls a hot one back reads what the summarizer read, while the database is unchanged.)
bool has_side_file(const std::string& path) {
  struct stat st;
  return lstat((path + "-wal").c_str(), &st) == 0;
}

// A covered file refreshed since summarizing: its meta last_flush_mono_ns (what the analyzer's
// liveness checks read, analyzer/hang.cpp) moved by about `moved_ns`, the file's mtime difference.
// The meta value, so that the header derived from it (check_loaded_file) says it.
void take_heartbeat_forward(Process& p, int64_t moved_ns) {
  auto it = p.meta.find(schema::meta::kLastFlushMonoNs);
  if (it == p.meta.end()) return;
  const trace_file::TextInt v = trace_file::parse_int(it->second);
  int64_t later = 0;
  if (v.kind != trace_file::TextInt::kValue || v.value <= 0 || __builtin_add_overflow(v.value, moved_ns, &later)) return;
  it->second = std::to_string(later);
}

// SQLite's database header (its first 100 bytes): the two counters every commit moves.
constexpr size_t kChangeCounterAt = 24, kVersionValidForAt = 92;

uint32_t be32(const unsigned char* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// FileIdentity::settled of a file's first `n` bytes (read from offset 0).
uint64_t settled_hash(unsigned char* head, size_t n) {
  constexpr size_t kHeader = 100;
  if (n < kHeader || std::memcmp(head, "SQLite format 3", 16) != 0) return 0;
  if (be32(head + schema::kUserVersionOffset) == 0) return 0;  // says nothing of its generation
  const uint32_t field = uint32_t(head[16]) << 8 | head[17];  // page size; 1 means 65,536
  const size_t page = field == 1 ? 65536 : field;
  if (page < 512 || (page & (page - 1)) != 0) return 0;
  n = std::min(n, page);
  unsigned char saved[8];
  std::memcpy(saved, head + kChangeCounterAt, 4), std::memcpy(saved + 4, head + kVersionValidForAt, 4);
  std::memset(head + kChangeCounterAt, 0, 4), std::memset(head + kVersionValidForAt, 0, 4);
  const uint64_t h = summary_hash(head, n, 0x5e771ed);
  std::memcpy(head + kChangeCounterAt, saved, 4), std::memcpy(head + kVersionValidForAt, saved + 4, 4);
  return h == 0 ? 1 : h;
}

}  // namespace

FileIdentity file_identity(const std::string& path, std::string* why) {
  FileIdentity id;
  id.name = fs::path(path).filename().string();
  why->clear();
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    // ELOOP: O_NOFOLLOW met a symbolic link (dangling or not): a summary covers regular files
    // only, and the analyzer reads a link itself (it says what the link points to).
    *why = errno == ENOENT ? "missing"
           : errno == ELOOP ? "a symbolic link (not summarized: the analyzer reads it itself)"
                            : std::string("cannot open: ") + std::strerror(errno);
    return id;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = "not a regular file";
  } else {
    id.size = st.st_size;
    id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    unsigned char buf[kIdentityBytes];
    uint64_t h = 0;
    const off_t size = st.st_size;
    const size_t head = static_cast<size_t>(std::min<off_t>(size, kIdentityBytes));
    const off_t tail_at = std::max<off_t>(0, size - static_cast<off_t>(kIdentityBytes));
    bool first = true;
    for (auto [at, n] : {std::pair<off_t, size_t>(0, head), std::pair<off_t, size_t>(tail_at, static_cast<size_t>(size - tail_at))}) {
      const ssize_t r = pread(fd, buf, n, at);
      if (r != static_cast<ssize_t>(n)) {
        *why = "cannot read";
        break;
      }
      h = summary_hash(buf, n, h);
      if (first) {
        id.settled = settled_hash(buf, n);
        if (n >= kChangeCounterAt + 4) id.commits = be32(buf + kChangeCounterAt);
      }
      first = false;
    }
    id.content = h;
  }
  close(fd);
  return id;
}

bool only_heartbeats_since(const FileIdentity& then, const FileIdentity& now) {
  return then.settled != 0 && now.settled == then.settled && now.size == then.size && now.name == then.name &&
         now.commits != then.commits && now.mtime_ns >= then.mtime_ns;
}

uint64_t summary_hash(const void* data, size_t n, uint64_t seed) {
  // Four lanes of 8-byte words, then the bytes left and a finalizer (MurmurHash3's fmix64): the
  // analyzer hashes 8 KiB of every covered file and every summary byte, and FNV-1a's one multiply
  // per byte was a tenth of its CPU time at 16,384 ranks.
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
  auto rotl = [](uint64_t v, int r) { return (v << r) | (v >> (64 - r)); };
  // A little-endian word: one load where the machine is little-endian (GCC at -O2 left the
  // byte loop a loop: most of the hash's time, 8 KiB of every covered file).
  auto word = [](const unsigned char* q) {
    uint64_t v = 0;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&v, q, 8);
    } else {
      for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(q[i]) << (8 * i);
    }
    return v;
  };
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lane[4] = {seed, seed ^ 1, seed ^ 2, seed ^ 3};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; ++l) lane[l] = rotl((lane[l] ^ word(p + i + 8 * l)) * kMul, 29);
  uint64_t h = seed ^ static_cast<uint64_t>(n);
  for (uint64_t v : lane) h = rotl((h ^ v) * kMul, 29);
  for (; i < n; ++i) h = (h ^ p[i]) * kMul;
  h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull, h ^= h >> 33;
  return h;
}

std::string summary_file_name(const std::string& host) {
  std::string name = schema::safe_file_component(host.empty() ? "unknown-host" : host);
  return name + kSummarySuffix;
}

std::string encode_node_summary(const std::string& host, const std::vector<SummaryEntry>& entries) {
  Out o;
  o.bytes().append(kMagic, sizeof kMagic);
  o.u(kVersion);
  o.str(host);
  o.u(entries.size());
  for (const SummaryEntry& e : entries) put_entry(o, e);
  const uint64_t sum = summary_hash(o.bytes().data(), o.bytes().size());
  o.fixed(sum);
  return std::move(o.bytes());
}

std::vector<SummaryEntry> decode_node_summary(std::string_view bytes, std::string* host, size_t max_entries) {
  if (bytes.size() < sizeof kMagic + 8 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw Corrupt("not a lockstep node summary");
  const size_t body = bytes.size() - 8;
  In in(bytes.data() + sizeof kMagic, bytes.data() + body);
  // The version before the checksum: another format's checksum is another hash (format 1's was
  // FNV-1a), and "written by another lockstep" says what to do where "checksum mismatch" does not.
  const uint64_t version = in.u();
  if (version != kVersion)
    throw Corrupt("format version " + std::to_string(version) + ", this lockstep reads " + std::to_string(kVersion) +
                  " (written by another lockstep version: run lockstep summarize again)");
  In tail(bytes.data() + body, bytes.data() + bytes.size());
  if (tail.fixed() != summary_hash(bytes.data(), body)) throw Corrupt("checksum mismatch (truncated or altered)");
  std::string h = in.str();
  if (host) *host = h;
  // 34 bytes an entry at least (its identity's two 8-byte hashes and 18 integers); entries are decoded
  // into place, reserved only up to a few thousand (an entry is 872 bytes in memory: a crafted
  // count is not an allocation).
  const size_t n = in.count(34);
  // An entry takes ~25 times its encoded size in memory: a count beyond the files it could cover
  // is refused before anything is decoded.
  if (n > max_entries)
    throw Corrupt("covers " + std::to_string(n) + " files, more than the " + std::to_string(max_entries) +
                  " trace files of the directory");
  std::vector<SummaryEntry> entries;
  entries.reserve(std::min<size_t>(n, 4096));
  for (size_t k = 0; k < n; ++k) entries.push_back(get_entry(in));
  if (!in.done()) throw Corrupt("trailing bytes");
  return entries;
}

Summarized summarize_files(const std::vector<std::string>& files, const LoadOptions& options) {
  std::vector<SummaryEntry> entries(files.size());
  std::vector<std::string> why(files.size());
  parallel_for(files.size(), options.threads, [&](size_t i) {
    std::string w;
    FileIdentity before = file_identity(files[i], &w);
    if (!w.empty()) return void(why[i] = w);
    if (has_side_file(files[i])) return void(why[i] = "a -wal file beside it");
    LoadOptions lo = options;
    lo.summary_first = true;
    entries[i].file = load_file_summary_first(files[i], lo);
    if (!entries[i].file.reason.empty()) return void(why[i] = "unusable: " + entries[i].file.reason);
    FileIdentity& after = entries[i].id;
    after = file_identity(files[i], &w);
    // A live recorder's heartbeat between the two looks is no change (the read transaction saw
    // one state; its rows are the file's rows either way): the summary keeps the later identity,
    // so a last flush taken forward from it reads at most one heartbeat early, never late.
    if (!w.empty() || !(after == before || only_heartbeats_since(before, after)) || has_side_file(files[i]))
      why[i] = "changed while read";
    // A finished recorder, or one that wrote its last words (an exit reason other than the
    // SIGUSR1 flush), never writes again: any later change is someone else's.
    const Process& info = entries[i].file.proc.info;
    if (info.finished || (!info.exit_reason.empty() && info.exit_reason != "SIGUSR1")) after.settled = 0;
  });
  Summarized r;
  for (size_t i = 0; i < files.size(); ++i) {
    if (why[i].empty())
      r.entries.push_back(std::move(entries[i]));
    else
      r.not_covered.push_back({files[i], why[i]});
  }
  return r;
}

void write_node_summary(const std::string& out, const std::string& host, const std::vector<SummaryEntry>& entries) {
  try {
    schema::write_file_replacing(out, encode_node_summary(host, entries), /*sync=*/true);
  } catch (const std::runtime_error& e) {
    throw LoadError(e.what());
  }
}

SummaryCover cover_from_summaries(const std::string& dir, const std::vector<std::string>& files, unsigned threads,
                                  bool headers_only) {
  SummaryCover cover;
  std::vector<std::string> summaries;
  // SQLite's side files of the directory, from the same listing (one lstat per covered file was
  // a tenth of the analysis at 16,384 ranks): a -wal or -shm, a -journal that holds anything (a
  // transaction in progress, or a crashed writer's hot journal) or that is not a regular file.
  // Such a file is read directly, where the loader's own rules for them apply
  // (trace_loader.cpp read_file), not stood for by its summary. The recorder's journal between
  // commits is an empty regular file (journal_mode truncate).
  std::unordered_set<std::string> wal;
  {
    std::error_code ec;
    const std::string suffix = kSummarySuffix;
    auto ends_with = [](const std::string& name, const std::string& end) {
      return name.size() > end.size() && name.compare(name.size() - end.size(), end.size(), end) == 0;
    };
    for (auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (ends_with(name, suffix)) summaries.push_back(e.path().string());
      else if (ends_with(name, "-wal") || ends_with(name, "-shm")) wal.insert(name);
      else if (ends_with(name, "-journal")) {
        std::error_code fe;
        if (e.is_symlink(fe) || !e.is_regular_file(fe) || e.file_size(fe) != 0 || fe) wal.insert(name);
      }
    }
    if (ec || summaries.empty()) return cover;
  }
  std::sort(summaries.begin(), summaries.end());
  // Only the directory's own trace files can be covered (not Flight Recorder conversions).
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < files.size(); ++i) {
    const fs::path f(files[i]);
    if ((fs::path(dir) / f.filename()).string() == files[i]) by_name.emplace(f.filename().string(), i);
  }
  struct Result {
    std::string why;
    SummaryCover::Block block;
    int64_t refreshed = 0;
  };
  std::vector<Result> results(summaries.size());
  parallel_for(summaries.size(), threads, [&](size_t k) {
    Result& r = results[k];
    // The files this summary covered so far, marked (one array per thread, cleared after).
    thread_local std::vector<char> seen;
    seen.resize(files.size());
    try {
      thread_local std::string buf;
      r.block.entries = decode_node_summary(read_whole(summaries[k], buf), nullptr, by_name.size());
      r.block.file.reserve(r.block.entries.size());
      for (SummaryEntry& e : r.block.entries) {
        auto it = by_name.find(e.id.name);
        if (it == by_name.end()) throw Corrupt("covers " + e.id.name + ", which is not a trace file of the directory (missing?)");
        if (seen[it->second]) throw Corrupt("covers " + e.id.name + " twice");
        seen[it->second] = 1;
        const std::string& path = files[it->second];
        std::string w;
        const FileIdentity now = file_identity(path, &w);
        if (!w.empty()) throw Corrupt(e.id.name + ": " + w);
        // A finished file was summarized with settled 0 (no heartbeat may follow): compare the
        // rest, or every recorder's file (settled is non-zero for it now) would look changed.
        FileIdentity seen = now;
        if (e.id.settled == 0) seen.settled = 0;
        const bool same = seen == e.id;
        if (wal.count(e.id.name + "-wal") || wal.count(e.id.name + "-journal") || wal.count(e.id.name + "-shm"))
          throw Corrupt("stale: " + e.id.name + " has a -wal or -shm file, or a -journal that is not empty, beside it (read directly)");
        if (!(same || only_heartbeats_since(e.id, now)))
          throw Corrupt("stale: " + e.id.name + " changed after it was summarized (size, mtime or content)");
        if (!same) {  // the recorder's heartbeat only: its last flush is later by the mtime's move
          ++r.refreshed;
          int64_t moved = 0;  // the summary's mtime is untrusted: no overflow
          if (!__builtin_sub_overflow(now.mtime_ns, e.id.mtime_ns, &moved)) {
            // The mtime follows the wall clock, which may have been stepped forward: no more than
            // the heartbeats committed since can span (a flush taken too far forward would make
            // this rank look live, or its neighbours look stopped before it).
            const int64_t heartbeats = static_cast<uint32_t>(now.commits - e.id.commits);
            take_heartbeat_forward(e.file.proc.info, std::min(moved, heartbeats * schema::kHeartbeatMinIntervalNs));
          }
        }
        if (std::string bad = check_loaded_file(e.file); !bad.empty()) throw Corrupt("corrupt entry for " + e.id.name + ": " + bad);
        r.block.file.push_back(it->second);
        // Checked whole, kept as asked: the rows of 131,072 files are gigabytes.
        if (headers_only) {
          LoadedFile header;
          header.proc.info = std::move(e.file.proc.info);
          e.file = std::move(header);
        }
      }
    } catch (const std::exception& x) {  // Corrupt, and allocation failures of a hostile summary
      r.why = x.what();
    }
    for (SummaryEntry& e : r.block.entries)
      if (auto it = by_name.find(e.id.name); it != by_name.end()) seen[it->second] = 0;
    if (!r.why.empty()) r.block = {};
  });
  std::vector<int64_t> claimed(files.size(), -1);  // file index -> the summary that covers it
  for (size_t k = 0; k < summaries.size(); ++k) {
    Result& r = results[k];
    if (r.why.empty())
      for (size_t i : r.block.file)
        if (claimed[i] >= 0) {
          r.why = "covers " + fs::path(files[i]).filename().string() + ", which " + summaries[static_cast<size_t>(claimed[i])] +
                  " covers too";
          break;
        }
    if (!r.why.empty()) {
      cover.use.ignored.push_back({summaries[k], printable(r.why)});
      continue;
    }
    ++cover.use.used;
    cover.use.files += static_cast<int64_t>(r.block.file.size());
    cover.use.refreshed += r.refreshed;
    for (size_t i : r.block.file) claimed[i] = static_cast<int64_t>(k);
    cover.blocks.push_back(std::move(r.block));
  }
  return cover;
}

}  // namespace lockstep
