#include "writer.h"
#include "call_progress.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <tuple>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "meta_keys.h"
#include "file_name.h"
#include "clock.h"
#include "lockstep_version.h"
#include "log.h"
#include "symbolize.h"
#include "write_errno_vfs.h"
#include "config.h"
#include "op_digest.h"
#include "trace_file.h"
#include "trace_schema.h"
#include "profiler_plugin.h"
#include "sqlite_section.h"
#include "profiler_schema.h"
#include "vocab.h"


namespace lockstep::rec {
namespace {

bool mkdir_p(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); i++) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST) return false;
    }
    if (i < dir.size()) cur += dir[i];
  }
  struct stat st {};
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Network and cluster filesystems: readers on other nodes see a commit only once it reached the
// server (synchronous=NORMAL there); see the journal-mode comment in Writer::open.
bool is_network_fs(const std::string& dir) {
  struct statfs sf {};
  if (statfs(dir.c_str(), &sf) != 0) return true;  // unknown: take the safe choice
  switch (static_cast<unsigned long>(sf.f_type)) {
    case 0x6969:      // NFS
    case 0x0BD00BD0:  // Lustre
    case 0x47504653:  // GPFS
    case 0xFF534D42:  // CIFS
    case 0xFE534D42:  // SMB2
    case 0x19830326:  // BeeGFS
    case 0x00C36400:  // Ceph
    case 0x01021997:  // 9p
    case 0x65735546:  // FUSE (may be a network mount)
      return true;
    default:
      return false;
  }
}

}  // namespace

// Writer-thread state of schema 2's compact rows: an op waiting for its parts (grouped ops) or
// the end of the batch, the interned signatures, and each communicator's running digest.
struct Writer::PendingOp {
  OpRec rec;
  std::vector<PartRec> parts;
  int32_t nparts = -1;     // -1: not known yet (no part seen)
  bool completed = false;
  int64_t complete_mono = 0;
  int waited = 0;          // batch ends seen while waiting for parts
  bool ready() const { return !rec.has_parts || rec.state == OpState::GraphLaunched || int32_t(parts.size()) == nparts; }
};

// The recorder's enums are the vocabulary's, value for value (the writer stores them as such).
static_assert(int(OpKind::Coalesced) == int(vocab::Op::Coalesced) && int(OpKind::AllToAll) == int(vocab::Op::AllToAll));
static_assert(int(OpState::GraphLaunched) == int(vocab::State::GraphLaunched));
static_assert(int(WaitKind::EventRecord) == int(vocab::Wait::EventRecord));
static_assert(int(CommEnd::Revoke) == int(vocab::CommEnd::Revoke));

namespace {
struct SigKey {
  int64_t comm_id;
  int64_t count;
  uint64_t stream;
  uint64_t stack_hash;
  int32_t tid, root, peer, redop;
  int8_t dtype;
  OpKind op;
  std::vector<PartRec> parts;  // compared by description and part index (not call_index)
  bool operator==(const SigKey& o) const {
    auto same = [](const PartRec& a, const PartRec& b) {
      return std::tie(a.count, a.part, a.root, a.peer, a.redop, a.dtype, a.op) ==
             std::tie(b.count, b.part, b.root, b.peer, b.redop, b.dtype, b.op);
    };
    if (std::tie(comm_id, count, stream, stack_hash, tid, root, peer, redop, dtype, op) !=
            std::tie(o.comm_id, o.count, o.stream, o.stack_hash, o.tid, o.root, o.peer, o.redop, o.dtype, o.op) ||
        parts.size() != o.parts.size())
      return false;
    for (size_t i = 0; i < parts.size(); ++i)
      if (!same(parts[i], o.parts[i])) return false;
    return true;
  }
};
struct SigKeyHash {
  size_t operator()(const SigKey& k) const {
    // Field by field: a moved key's padding is not zeroed.
    const int64_t f[] = {k.comm_id, k.count, int64_t(k.stream), int64_t(k.stack_hash), k.tid, k.root, k.peer, k.redop,
                         k.dtype, int64_t(k.op)};
    uint64_t h = XXH64(f, sizeof f, 0);
    for (const PartRec& p : k.parts) {
      const int64_t g[] = {p.count, p.part, p.root, p.peer, p.redop, p.dtype, int64_t(p.op)};
      h = XXH64(g, sizeof g, h);
    }
    return size_t(h);
  }
};
// The recorder's raw call (OpRec or PartRec: NCCL's dtype and redop values) as trace fields.
template <typename Rec>
trace_file::CallFields call_fields(const Rec& r) {
  return {vocab::Op(r.op), vocab::dtype_from_nccl(r.dtype), r.count, r.root, r.peer, vocab::redop_from_nccl(r.redop)};
}
}  // namespace

// A communicator's running digest (writer thread).
struct Writer::CommDigest {
  int64_t next_seq = 1;
  int64_t ordinal = 0;
  uint64_t digest = digest::kEmpty;
  // Sequenced ops that arrived ahead of a lower seq (several threads on one communicator).
  struct Waiting {
    bool collective;
    uint64_t hash;
    int64_t call_index;
  };
  std::map<int64_t, Waiting> waiting;  // by seq
  // Retired history (the size cap): collectives, digest, last seq.
  int64_t retired_collectives = 0;
  uint64_t retired_digest = digest::kEmpty;
  int64_t retired_through_seq = 0;
  // The digest state at retirement boundaries, taken on the way in (see Boundary): the state
  // before this communicator's first op past boundaries (previous mark's last_id, last_id].
  struct Mark {
    int64_t last_id;
    int64_t ordinal;
    uint64_t digest;
    int64_t through_seq;
  };
  std::deque<Mark> marks;
  int64_t crossed = 0;  // boundaries below this id are behind this communicator's digest
  // Ops whose record came after the cap retired their call_index (the call was still running
  // when a retirement passed it), by seq, until the retired range reaches them (absorb_late_op).
  std::map<int64_t, Waiting> late;
};

struct Writer::SigState {
  struct Sig {
    int64_t id;
    bool collective;
    uint64_t hash;
  };
  std::unordered_map<SigKey, Sig, SigKeyHash> ids;
  // The parts of captured grouped ops: their graph launches run the same parts.
  std::unordered_map<int64_t, std::vector<PartRec>> captured_parts;
  std::vector<PendingOp> pending;
  std::vector<PendingOp> pending_next;  // write_ready_ops's scratch (its buffer is reused)
  // Ops arrive almost in call_index order: while they do, a binary search finds one; after one
  // out of order, a hash index (built on the next lookup) does.
  bool pending_sorted = true;
  std::unordered_map<int64_t, size_t> pending_index;  // call_index -> slot, when !pending_sorted
  bool index_stale = true;
  PendingOp* find_pending(int64_t call_index) {
    if (pending_sorted) {
      auto it = std::lower_bound(pending.begin(), pending.end(), call_index,
                                 [](const PendingOp& p, int64_t c) { return p.rec.call_index < c; });
      return it != pending.end() && it->rec.call_index == call_index ? &*it : nullptr;
    }
    if (index_stale) {
      pending_index.clear();
      for (size_t i = 0; i < pending.size(); ++i) pending_index[pending[i].rec.call_index] = i;
      index_stale = false;
    }
    auto it = pending_index.find(call_index);
    return it == pending_index.end() ? nullptr : &pending[it->second];
  }
  void add_pending(const OpRec& o) {
    if (!pending.empty() && o.call_index <= pending.back().rec.call_index) pending_sorted = false;
    pending.push_back(PendingOp{o, {}, -1, false, 0, 0});
    if (!pending_sorted && !index_stale) pending_index[o.call_index] = pending.size() - 1;
  }
  std::unordered_map<int64_t, CommDigest> comms;
  // Capped traces: candidate bounds of a retirement chunk, declared as op rows are written. A
  // boundary's call_index is at least every call_index digested when it was declared, and
  // within a communicator seq order is call_index order, so each communicator's digest state
  // at the boundary is the state before its first op past it (CommDigest::marks), or its
  // current state when it has none: retiring `call_index <= bound` reads nothing back.
  struct Boundary {
    int64_t call_index;
    int64_t rows_written;  // op rows written when declared (rows at or below it, give or take late ones)
  };
  std::deque<Boundary> boundaries;
  int64_t first_boundary_id = 0;  // id of boundaries.front()
  int64_t rows_written = 0;       // op rows written, ever
  int64_t rows_at_boundary = 0;   // rows_written when the last boundary was declared
  int64_t max_written_call = 0;
  int64_t next_boundary_id() const { return first_boundary_id + int64_t(boundaries.size()); }
  int64_t digest_gaps = 0;
  // The process's order digest (op_digest.h order_step) over its collectives in call_index
  // order. They are digested per communicator as they are written, which is call_index order
  // but for ops held back (a grouped op waiting for its parts, a lower seq still to come, a call
  // another thread is still inside): collectives wait in order_held, checkpoints with them,
  // until nothing below them can still come (advance_order, order_bound_, call_progress.h). One
  // that comes after a later collective was chained all the same (a thread that found no
  // progress slot) breaks the chain for good: no later checkpoint carries an order digest.
  struct OrderHeld {
    int64_t call_index;
    int64_t comm_id;
    int64_t ordinal;  // > 0: the communicator's checkpoint at this ordinal is this collective
  };
  std::vector<OrderHeld> order_held;
  uint64_t order_digest = digest::kEmpty;
  int64_t order_count = 0;
  int64_t order_last_call = INT64_MIN;
  bool order_broken = false;
  int64_t rows_in_file = 0;                 // op rows written and not retired
  int64_t retired_ops = 0;
  int64_t late_parts = 0;
  int64_t orphan_completions = 0;
  int64_t late_unabsorbed = 0;  // late ops whose seq a retired range had already closed without them
  int64_t late_retired_ops() const {
    int64_t n = late_unabsorbed;
    for (const auto& [id, c] : comms) n += int64_t(c.late.size());
    return n;
  }
};

Writer::Writer(size_t queue_records, size_t spill_bytes)
    : queue_(queue_records), done_queue_(kDoneQueueRecords), spill_limit_bytes_(spill_bytes) {}

// A result code of the trace file: SQLITE_DONE/OK/ROW are success; SQLITE_CONSTRAINT too (a
// duplicate row is not worth stopping the recording for). Anything else stops the recording
// with the cause SQLite saw (disk full, EFBIG, ...).
bool Writer::ok(int rc, const char* what) {
  if (rc == SQLITE_DONE || rc == SQLITE_OK || rc == SQLITE_ROW || (rc & 0xff) == SQLITE_CONSTRAINT) return true;
  fail(what);
  return false;
}

bool Writer::exec(const char* sql) { return file_.exec(sql) == SQLITE_OK; }

static uint32_t initial_generation() {
  uint32_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    // No entropy yet (early boot) or no getrandom: the clock and the pid, mixed.
    uint64_t x = static_cast<uint64_t>(mono_ns()) ^ (static_cast<uint64_t>(getpid()) << 32);
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33;
    r = static_cast<uint32_t>(x);
  }
  r &= 0x7fffffffu;
  return r == 0 ? 1 : r;
}

bool Writer::advance_generation() {
  generation_ = generation_ >= 0x7fffffffu ? 1 : generation_ + 1;
  return exec(("PRAGMA user_version=" + std::to_string(generation_)).c_str());
}

namespace {
// <host>-<pid>.lockstep.sqlite, or <host>-<pid>.<n>.lockstep.sqlite when that name is taken: by
// this pid's image before an exec, or by a process of another pid namespace. An existing trace is
// never replaced; the claim is an O_EXCL create (which follows no link), and the file created is
// the one SQLite must open (trace_file::create checks its device and inode). Its side files are
// claimed with it (side_files_claimed): one left that cannot be removed makes the name taken too.
// `claimed` false: no name could be claimed (every one taken, or the directory refuses), `error`
// says why.
struct Claim {
  std::string path;
  bool claimed = false;
  uint64_t dev = 0, ino = 0;
  int error = 0;
};
// SQLite's side files beside a name just claimed are not ours (the name was free): a leftover, or
// a link or file another user planted in a shared (sticky) directory, which SQLite would open as
// our journal or fail every transaction on. Removed, then the journal created empty by us
// (O_EXCL: no link followed; the truncate mode keeps it, so SQLite writes only into ours).
// false: one could not be removed (another user's in a sticky directory, a directory) or the
// journal not created.
bool side_files_claimed(const std::string& path) {
  for (const char* ext : {"-journal", "-wal", "-shm"})
    if (unlink((path + ext).c_str()) != 0 && errno != ENOENT) return false;
  const int fd = open((path + "-journal").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  close(fd);
  return true;
}

Claim claim_trace_path(const std::string& dir, const std::string& host, int pid) {
  // The host name is the machine's to choose ("../../x", control bytes): made one safe component.
  const std::string stem = dir + "/" + schema::safe_file_component(host) + "-" + std::to_string(pid);
  Claim c;
  c.path = stem + schema::kFileSuffix;
  for (int n = 1;; ++n) {
    const int fd = open(c.path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) {
      struct stat st;
      c.claimed = fstat(fd, &st) == 0;
      c.error = c.claimed ? 0 : errno;
      c.dev = uint64_t(st.st_dev), c.ino = uint64_t(st.st_ino);
      close(fd);
      if (!c.claimed || side_files_claimed(c.path)) return c;
      // Taken by its side file: our empty file goes (no 0-byte trace left behind), the next name.
      c.claimed = false;
      if (lstat(c.path.c_str(), &st) == 0 && uint64_t(st.st_dev) == c.dev && uint64_t(st.st_ino) == c.ino)
        unlink(c.path.c_str());
      errno = EEXIST;
    }
    c.error = errno;
    if (errno != EEXIST || n > 1000) return c;  // the last name tried is named in the error
    c.path = stem + "." + std::to_string(n) + schema::kFileSuffix;
  }
}
}  // namespace

Writer* Writer::open(const TraceHeader& h, std::string* error) {
  // The header is written in the calling (application) thread: SIGXFSZ blocked meanwhile.
  SigxfszBlocked blocked;
  SqliteSection in_sqlite;
  return open_unguarded(h, error);
}

Writer* Writer::open_unguarded(const TraceHeader& h, std::string* error) {
  const ProcessInfo& info = h.info;
  if (!mkdir_p(info.trace_dir)) {
    *error = "cannot create trace directory " + info.trace_dir + ": " + strerror(errno);
    return nullptr;
  }
  auto* w = new Writer(size_t(h.queue_records > 0 ? h.queue_records : config().queue_records),
                       size_t(h.spill_mb >= 0 ? h.spill_mb : config().spill_mb) << 20);
  w->sig_ = new SigState();
  const Claim claim = claim_trace_path(info.trace_dir, info.host, info.pid);
  w->path_ = claim.path;

  auto fail_open = [&](const std::string& what) {
    *error = what + " (" + w->path_ + "): " + (w->file_ ? w->file_.errmsg() : "open failed");
    if (int e = last_write_errno() ? last_write_errno() : w->file_ ? sqlite3_system_errno(w->file_.get()) : 0)
      *error += std::string(" (") + strerror(e) + ")";
    delete w->sig_;
    delete w;  // closes the file and finalizes every statement
    return nullptr;
  };
  clear_last_write_errno();
  if (!claim.claimed)
    return fail_open(std::string("cannot claim a trace file name: ") + strerror(claim.error) +
                     (claim.error == EEXIST ? " (1,001 names of this process taken)" : ""));

  // Journal mode. A rollback journal, not WAL: WAL needs a shared-memory index that readers on
  // other nodes cannot share (NFS/Lustre), and a WAL reader must be able to write the -shm
  // file. With a rollback journal any process, anywhere, with read access sees every committed
  // batch. A reader's shared lock can delay a COMMIT: busy_timeout makes the writer wait (in
  // its own thread; the application never waits).
  // Synchronous: on a local filesystem OFF is enough for the guarantee we give — a committed
  // batch is in the kernel's page cache and survives the process being SIGKILLed (only a
  // kernel crash could lose it); on a network filesystem NORMAL makes every COMMIT reach the
  // server, so a reader on another node sees it.
  bool network = is_network_fs(info.trace_dir);
  w->journal_mode_ = network ? "delete" : "truncate";
  const int64_t start_mono = mono_ns(), start_wall = wall_ns();
  trace_file::CreateOptions co;
  co.vfs = write_errno_vfs_name();
  co.journal_mode = w->journal_mode_;
  co.synchronous = network ? "NORMAL" : "OFF";
  co.busy_timeout_ms = 2000;
  co.time_base_mono_ns = start_mono;
  // The hot path's own offset (clock.h wall_from_mono: wall at the midpoint of two monotonic
  // reads): an op row's wall column is then the clock's slew, 0 or 1 byte, not a clock read.
  co.wall_offset_ns = wall_from_mono(start_mono) - start_mono;
  co.claimed = true, co.claimed_dev = claim.dev, co.claimed_ino = claim.ino;
  const char* what = "";
  if (trace_file::create(w->file_, w->path_, co, &what) != SQLITE_OK) return fail_open(what);
  w->db_ = w->file_.get();
  if (w->tables_.prepare(w->db_, co.time_base_mono_ns, co.wall_offset_ns) != SQLITE_OK)
    return fail_open("cannot prepare trace statements");
  w->tables_ready_ = true;
  const int64_t max_mb = h.max_mb >= 0 ? h.max_mb : config().max_mb;
  w->max_bytes_ = max_mb * 1024 * 1024;
  w->checkpoint_interval_ = h.checkpoint_interval > 0 ? h.checkpoint_interval : digest::kDefaultInterval;

  // Header rows, in the caller's thread: the file is complete and valid before any op.
  trace_file::Tables& t = w->tables_;
  bool ok = w->exec("BEGIN");
  auto meta = [&](const char* k, const std::string& v) { ok = ok && t.meta(k, v) == SQLITE_DONE; };
  meta(schema::meta::kLockstepVersion, LOCKSTEP_VERSION);
  meta(schema::meta::kHost, info.host);
  meta(schema::meta::kPid, std::to_string(info.pid));
  meta(schema::meta::kGlobalRank, std::to_string(info.global_rank));
  meta(schema::meta::kGlobalRankSource, info.global_rank_source);
  meta(schema::meta::kCmdline, info.cmdline);
  meta(schema::meta::kExe, info.exe);
  for (const auto& [key, value] : info.launcher) meta(key.c_str(), value);
  meta(schema::meta::kNcclVersion, std::to_string(h.nccl_version));
  meta(schema::meta::kNcclLibrary, h.nccl_library);
  meta(schema::meta::kStackMode, h.stack_mode);
  meta(schema::meta::kUnwinder, h.unwinder);
  meta(schema::meta::kStartWallNs, std::to_string(start_wall));
  meta(schema::meta::kStartMonoNs, std::to_string(start_mono));
  meta(schema::meta::kJournalMode, w->journal_mode_);
  meta(schema::meta::kFinished, "0");
  meta(schema::meta::kDroppedRecords, "0");
  meta(schema::meta::kLastFlushMonoNs, std::to_string(mono_ns()));
  meta(schema::meta::kDigestVersion, std::to_string(digest::kDigestVersion));
  meta(schema::meta::kCheckpointInterval, std::to_string(w->checkpoint_interval_));
  meta(schema::meta::kMaxMb, std::to_string(max_mb));
  meta(schema::meta::kRetiredOps, "0");
  for (const auto& [k, v] : info.env) ok = ok && t.env(k, v) == SQLITE_DONE;
  ok = ok && w->exec(schema::kStopReserveSql);
  // The first generation is random (1..2^31-1), not 1: a node summary's identity of a live file
  // holds it (FileIdentity::settled), so another file under the same name (another job's, a
  // copy recreated in place) is not taken for this one refreshed by heartbeats.
  w->generation_ = initial_generation();
  ok = ok && w->exec(("PRAGMA user_version=" + std::to_string(w->generation_)).c_str());
  if (!ok || !w->exec("COMMIT")) return fail_open("cannot write trace header");

  int wake[2], ack[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0 || pipe2(ack, O_CLOEXEC | O_NONBLOCK) != 0)
    return fail_open("cannot create writer wake-up descriptors");
  for (int i = 0; i < 2; i++) w->wake_[i] = FdIdentity::of(wake[i]), w->ack_[i] = FdIdentity::of(ack[i]);
  return w;
}

void Writer::wake() {
  if (!wake_[1].ours()) return;
  char c = 1;
  ssize_t ignored = write(wake_[1].fd, &c, 1);
  (void)ignored;
}

void Writer::start() {
  thread_ = std::thread([this] {
    sigset_t ignored;
    block_sigxfsz_in_this_thread(&ignored);  // for the thread's whole life: writes get EFBIG
    writer_tid_.store(pid_t(syscall(SYS_gettid)));
    pthread_setname_np(pthread_self(), "lockstep-writer");
    try {
      run();
    } catch (const std::exception& e) {
      {
        SqliteSection in_sqlite;
        stop_recording(StopReason::Internal, std::string("writer thread: ") + e.what());
      }
      run_failed_until_stop();
    } catch (...) {
      {
        SqliteSection in_sqlite;
        stop_recording(StopReason::Internal, "writer thread: unknown exception");
      }
      run_failed_until_stop();
    }
    thread_exit_.mark();
  });
}

bool Writer::is_writer_thread() const { return writer_tid_.load() == pid_t(syscall(SYS_gettid)); }

bool Writer::submit_stack(uint64_t hash, const uintptr_t* pcs, int n, const PyFrameRaw* py,
                          int npy) {
  std::lock_guard<std::mutex> g(side_mu_);
  if (pending_stacks_.size() >= 4096) return false;  // writer far behind: the op gets no stack
  pending_stacks_.push_back({hash, std::vector<uintptr_t>(pcs, pcs + n),
                             std::vector<PyFrameRaw>(py, py + (py ? npy : 0))});
  return true;
}

void Writer::set_meta(const char* key, std::string value) {
  std::lock_guard<std::mutex> g(side_mu_);
  pending_meta_.emplace_back(key, std::move(value));
}

void Writer::add_hang(int64_t mono, int64_t wall, int in_flight, std::string message) {
  {
    std::lock_guard<std::mutex> g(side_mu_);
    pending_hangs_.push_back({mono, wall, in_flight, std::move(message)});
  }
  wake();
}

void Writer::flush(int timeout_ms) {
  if (failed() || !thread_.joinable() || is_writer_thread()) return;
  std::unique_lock<std::mutex> lk(flush_mu_);
  uint64_t target = ++flush_requested_;
  flush_req_atomic_.store(target);
  wake();
  flush_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                     [&] { return flush_done_ >= target || failed(); });
}

void Writer::signal_flush_begin(const char* exit_reason) {
  // Only async-signal-safe operations: atomics, fstat, read(2) and write(2).
  if (ack_[0].ours()) {
    char drain[64];
    while (read(ack_[0].fd, drain, sizeof drain) > 0) {
    }
  }
  ack_base_.store(acks_.load());
  signal_reason_.store(exit_reason);
  wake();
}

bool Writer::signal_flush_wait(int timeout_ms) {
  int64_t deadline = mono_ns() + int64_t(timeout_ms) * 1000000;
  const bool by_pipe = ack_[0].ours();
  pollfd p{ack_[0].fd, POLLIN, 0};
  for (;;) {
    if (acks_.load() > ack_base_.load()) return true;
    int left = int((deadline - mono_ns()) / 1000000);
    if (left <= 0) return false;
    // The pipe gone: the count, every millisecond.
    int r = poll(by_pipe ? &p : nullptr, by_pipe ? 1 : 0, by_pipe ? left : 1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void Writer::stop(const char* exit_reason) {
  if (!thread_.joinable() || is_writer_thread()) return;
  set_meta(schema::meta::kExitReason, exit_reason);
  set_meta(schema::meta::kFinished, "1");
  stop_.store(true);
  wake();
  // The final commit, within a bound: a write stuck on a dead file system does not hold the
  // program's exit (the trace then has no exit record: readers call it unfinished); a slow one
  // that still writes rows or returns from its writes is waited for, up to a total bound.
  const double idle_s = config().exit_wait_s;
  const int idle_ms = int(idle_s * 1000);
  const int max_ms = idle_ms * schema::env::kExitWaitTotalFactor;
  if (!thread_exit_.join_while_progressing(thread_, idle_ms, max_ms, [this] {
        return rows_taken_.load(std::memory_order_relaxed) + write_calls_returned();
      }))
    warn("the trace's final commit did not finish (%g s without progress, at most %g s in all: "
         "LOCKSTEP_EXIT_WAIT); the program exits without it",
         idle_s, idle_s * schema::env::kExitWaitTotalFactor);
}


// Sleeps until woken (eventfd) or the next round is due. Rounds start every kCommitIntervalMs, counted from the previous round's start, not its end:
// after a round that took most of the interval (a burst of records), the next one starts at
// once instead of one more interval later, while the queue still has room; and after a round
// that found the queue a quarter full, without waiting at all.
void Writer::wait_for_wake() {
  const int64_t due = last_round_start_ + int64_t(kCommitIntervalMs) * 1000000;
  const int64_t now = mono_ns();
  int timeout_ms = now >= due ? 0 : int((due - now + 999999) / 1000000);
  if (last_round_records_ >= queue_.capacity() / 4) timeout_ms = 0;
  last_round_records_ = 0;  // set again only by a round that takes records
  if (bench_off() & kOffEagerWriter) timeout_ms = kCommitIntervalMs;  // as before (benchmarking)
  if (wake_[0].ours()) {
    pollfd p{wake_[0].fd, POLLIN, 0};
    poll(&p, 1, timeout_ms);
    char drain[64];
    while (read(wake_[0].fd, drain, sizeof drain) == ssize_t(sizeof drain)) {
    }
  } else {
    poll(nullptr, 0, timeout_ms);  // the pipe is gone: rounds on the clock alone
  }
  last_round_start_ = mono_ns();
}

// A round is over: flush() callers up to flush_target return, a signal handler waiting for it
// is acknowledged.
void Writer::round_done(uint64_t flush_target, bool signal_waits) {
  {
    std::lock_guard<std::mutex> g(flush_mu_);
    flush_done_ = flush_target;
  }
  flush_cv_.notify_all();
  if (signal_waits) {
    acks_.fetch_add(1);
    if (ack_[1].ours()) {
      char c = 1;
      ssize_t ignored = write(ack_[1].fd, &c, 1);
      (void)ignored;
    }
  }
}

// After an internal error: keep answering flush and signal-flush requests (they find the
// recorder stopped) until stop(), so no caller waits for its timeout.
void Writer::run_failed_until_stop() {
  {  // nothing more is written: give the spill's memory back (spill() spills no more)
    std::vector<std::vector<Record>> chunks;
    std::unique_lock<std::mutex> g(spill_mu_, std::try_to_lock);
    if (g.owns_lock()) chunks.swap(spill_chunks_), spill_bytes_ = 0;
  }
  for (;;) {
    wait_for_wake();
    round_done(flush_req_atomic_.load(), signal_reason_.exchange(nullptr) != nullptr);
    if (stop_.load()) return;
  }
}

void Writer::run() {
  for (;;) {
    wait_for_wake();
    uint64_t flush_target = flush_req_atomic_.load();
    const char* reason = signal_reason_.exchange(nullptr);
    if (reason && *reason) set_meta(schema::meta::kExitReason, reason);  // "": a flush, not an end
    bool stopping = stop_.load();
    if (!failed()) {
      SqliteSection in_sqlite;
      commit_batch(stopping || reason != nullptr);
    }
    round_done(flush_target, reason != nullptr);
    if (stopping) break;
  }
}

void Writer::intern_pending_stacks() {
  std::vector<PendingStack> stacks;
  {
    std::lock_guard<std::mutex> g(side_mu_);
    stacks.swap(pending_stacks_);
  }
  trace_file::Tables& t = tables_;
  for (const PendingStack& ps : stacks) {
    SqliteSection::let_fork_in();
    if (stack_ids_.count(ps.hash)) continue;
    int64_t id = int64_t(stack_ids_.size()) + 1;
    stack_ids_[ps.hash] = id;
    if (!ok(t.stack(id, trace_file::hex16(ps.hash)), "insert stack")) return;
    for (size_t d = 0; d < ps.pcs.size(); d++) {
      NativeFrame f = symbolize(ps.pcs[d], d == 0);
      trace_file::FrameRow r;
      r.stack_id = id;
      r.depth = int32_t(d);
      r.kind = vocab::FrameKind::Native;
      r.function = f.function;
      r.module = f.module;
      r.offset = int64_t(f.offset);
      if (!ok(t.frame(r), "insert frame")) return;
    }
    // Python frames after the native ones, innermost first (schema: frames.depth).
    for (size_t i = 0; i < ps.py.size(); i++) {
      lockstep::PyFrameInfo fi = lockstep::resolve_python_frame(ps.py[i]);
      trace_file::FrameRow r;
      r.stack_id = id;
      r.depth = int32_t(ps.pcs.size() + i);
      r.kind = vocab::FrameKind::Python;
      r.function = fi.function;
      r.file = fi.file;
      r.line = fi.line > 0 ? fi.line : -1;
      if (!ok(t.frame(r), "insert frame")) return;
    }
  }
}

int64_t Writer::stack_id_for(uint64_t hash) {
  auto it = stack_ids_.find(hash);
  if (it != stack_ids_.end()) return it->second;
  intern_pending_stacks();  // submitted after this batch was swapped in
  it = stack_ids_.find(hash);
  return it == stack_ids_.end() ? -1 : it->second;
}

const std::string& Writer::thread_name(int tid) {
  auto it = thread_names_.find(tid);
  if (it != thread_names_.end()) return it->second;
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(f, name);
  return thread_names_[tid] = name;
}

// The signature of an op: interned once (a row in signatures, its parts in signature_parts).
int64_t Writer::signature_id(const OpRec& o, const std::vector<PartRec>& parts, bool* collective, uint64_t* hash) {
  // The parts as recorded: the key compares and hashes only their description.
  SigKey k{.comm_id = o.comm_id, .count = o.count, .stream = o.stream, .stack_hash = o.stack_hash, .tid = o.tid,
           .root = o.root, .peer = o.peer, .redop = o.redop, .dtype = o.dtype, .op = o.op, .parts = parts};
  auto it = sig_->ids.find(k);
  if (it != sig_->ids.end()) {
    *collective = it->second.collective;
    *hash = it->second.hash;
    return it->second.id;
  }
  trace_file::SignatureRow r;
  static_cast<trace_file::CallFields&>(r) = call_fields(o);
  std::vector<trace_file::CallFields> calls;
  calls.reserve(parts.size());
  for (const PartRec& p : parts) calls.push_back(call_fields(p));
  SigState::Sig sig;
  sig.id = int64_t(sig_->ids.size()) + 1;
  sig.collective = digest::in_collective_sequence(r.op);
  sig.hash = trace_file::signature_hash(r, calls.data(), calls.size());
  r.id = sig.id;
  r.comm_id = o.comm_id;
  r.stream = o.stream;
  r.tid = o.tid;
  r.thread_name = thread_name(o.tid);
  r.stack_id = o.stack_hash ? stack_id_for(o.stack_hash) : -1;
  r.nparts = int32_t(parts.size());
  r.hash = sig.hash;
  if (!ok(tables_.signature(r), "insert signature")) return -1;
  for (size_t i = 0; i < calls.size(); ++i)
    if (!ok(tables_.part(trace_file::PartRow(sig.id, int32_t(i), calls[i])), "insert signature part")) return -1;
  sig_->ids.emplace(std::move(k), sig);
  *collective = sig.collective;
  *hash = sig.hash;
  return sig.id;
}

// The running digest of a communicator's collectives in seq order (op_digest.h), and a
// checkpoint row every checkpoint_interval_ collectives.
void Writer::digest_op(int64_t comm_id, int64_t seq, int64_t call_index, bool collective, uint64_t sig_hash) {
  CommDigest& c = sig_->comms[comm_id];
  if (seq < c.next_seq) return;  // a duplicate
  if (seq == c.next_seq && c.waiting.empty()) {  // the common case: in order
    digest_step(comm_id, c, collective, sig_hash, call_index);
    return;
  }
  c.waiting.emplace(seq, CommDigest::Waiting{collective, sig_hash, call_index});
  // A seq that never comes (its record was dropped): give up waiting after a bound.
  if (c.waiting.size() > 4096 && c.waiting.begin()->first != c.next_seq) {
    sig_->digest_gaps += c.waiting.begin()->first - c.next_seq;
    c.next_seq = c.waiting.begin()->first;
  }
  drain_waiting(comm_id, c, INT64_MIN);
}

// Digests the waiting ops that are next in seq order; with a bound, first skips the gap before
// every waiting op at or below it (their missing predecessors were dropped: retirement is there).
void Writer::drain_waiting(int64_t comm_id, CommDigest& c, int64_t skip_gaps_through_call) {
  while (!c.waiting.empty()) {
    auto it = c.waiting.begin();
    if (it->first != c.next_seq) {
      if (it->second.call_index > skip_gaps_through_call) return;
      sig_->digest_gaps += it->first - c.next_seq;
      c.next_seq = it->first;
    }
    const CommDigest::Waiting w = it->second;
    c.waiting.erase(it);
    if (!digest_step(comm_id, c, w.collective, w.hash, w.call_index)) return;
  }
}

// One more op of the communicator in seq order. An op past declared retirement boundaries
// first leaves the state before it as the communicator's mark for them.
bool Writer::digest_step(int64_t comm_id, CommDigest& c, bool collective, uint64_t hash, int64_t call_index) {
  if (c.crossed < sig_->next_boundary_id()) {
    c.crossed = std::max(c.crossed, sig_->first_boundary_id);
    int64_t last = -1;
    for (int64_t id = c.crossed; id < sig_->next_boundary_id(); ++id) {
      if (sig_->boundaries[size_t(id - sig_->first_boundary_id)].call_index >= call_index) break;
      last = id;
    }
    if (last >= 0) {
      c.marks.push_back({last, c.ordinal, c.digest, c.next_seq - 1});
      c.crossed = last + 1;
    }
  }
  if (collective) {
    c.digest = digest::chain(c.digest, hash);
    ++c.ordinal;
    const bool checkpoint = digest::is_checkpoint(c.ordinal, checkpoint_interval_);
    if (checkpoint && !ok(tables_.checkpoint({comm_id, c.ordinal, c.next_seq, c.digest}), "insert checkpoint"))
      return false;
    if (!sig_->order_broken) sig_->order_held.push_back({call_index, comm_id, checkpoint ? c.ordinal : 0});
  }
  ++c.next_seq;
  return true;
}

// Chains the held collectives that no op still to be digested can precede (SigState::order_held)
// and writes the order digest into their checkpoints: below every op still pending or waiting
// for a lower seq, and below every call whose records were not taken yet (order_bound_). What
// stays held at the end is never chained: its checkpoints have no order digest.
void Writer::advance_order() {
  SigState& s = *sig_;
  if (s.order_broken || s.order_held.empty()) return;
  int64_t bound = order_bound_;  // the lowest call_index that may still be digested
  for (const PendingOp& p : s.pending) bound = std::min(bound, p.rec.call_index);
  for (const auto& [id, c] : s.comms)  // by seq: two threads on one communicator take seqs in either order
    for (const auto& [seq, w] : c.waiting) bound = std::min(bound, w.call_index);
  auto& held = s.order_held;
  std::sort(held.begin(), held.end(), [](const SigState::OrderHeld& a, const SigState::OrderHeld& b) {
    return a.call_index < b.call_index;
  });
  size_t n = 0;
  for (; n < held.size() && held[n].call_index < bound; ++n) {
    const SigState::OrderHeld& h = held[n];
    if (h.call_index <= s.order_last_call) {  // came after a later collective was chained
      s.order_broken = true;
      break;
    }
    s.order_last_call = h.call_index;
    s.order_digest = digest::order_step(s.order_digest, h.comm_id);
    ++s.order_count;
    if (h.ordinal > 0 && !ok(tables_.checkpoint_order(h.comm_id, h.ordinal, s.order_count, s.order_digest),
                             "insert order digest"))
      return;
  }
  if (s.order_broken) held.clear();
  else held.erase(held.begin(), held.begin() + static_cast<long>(n));
}

// Capped traces: a retirement boundary about every 1/128 of the rows in the file (at least
// every 1,024 rows), so that a chunk can end near where the cap wants it.
// Far below the cap no boundary is needed: at least max_bytes_/4096 rows apart (1/128 of the
// rows a full file holds at ~32 bytes a row), so a small trace keeps a single op_rows table.
// Each boundary ends a chunk of op rows (trace_file Tables::close_op_chunk): retiring up to it
// drops whole tables.
void Writer::maybe_declare_boundary() {
  SigState& s = *sig_;
  if (s.rows_written - s.rows_at_boundary < std::max<int64_t>({1024, s.rows_in_file / 128, max_bytes_ / 4096})) return;
  if (!s.boundaries.empty() && s.boundaries.back().call_index >= s.max_written_call) return;
  if (!ok(tables_.close_op_chunk(s.max_written_call), "end op chunk")) return;
  s.boundaries.push_back({s.max_written_call, s.rows_written});
  s.rows_at_boundary = s.rows_written;
}

void Writer::write_op(PendingOp& p) {
  count_row_taken();
  const OpRec& o = p.rec;
  const std::vector<PartRec>* parts = &p.parts;
  std::vector<PartRec> none;
  if (o.state == OpState::GraphLaunched) {
    auto it = sig_->captured_parts.find(o.origin_call);
    parts = it != sig_->captured_parts.end() ? &it->second : &none;
  } else if (o.state == OpState::Captured && !p.parts.empty()) {
    sig_->captured_parts[o.call_index] = p.parts;
  }
  bool collective = false;
  uint64_t hash = 0;
  int64_t sig = signature_id(o, *parts, &collective, &hash);
  if (sig < 0) return;
  const trace_file::OpRow r{.call_index = o.call_index, .sig = sig, .seq = o.seq, .issue_mono_ns = o.issue_mono,
                            .issue_wall_ns = o.issue_wall, .return_mono_ns = o.return_mono, .completed = p.completed,
                            .complete_mono_ns = p.complete_mono, .state = vocab::State(o.state), .rc = o.rc,
                            .group_id = o.group_id, .capture_id = o.capture_id, .graph_id = o.graph_id,
                            .graph_exec = o.graph_exec, .origin_call = o.origin_call};
  const bool late = o.call_index <= tables_.retired_through_call();
  if (late) {
    ++sig_->retired_ops;  // late: its chunk is already retired
  } else {
    if (!ok(tables_.op(r), "insert op")) return;
    ++sig_->rows_in_file;
  }
  ++sig_->rows_written;
  sig_->max_written_call = std::max(sig_->max_written_call, o.call_index);
  if (o.seq > 0 && (o.state == OpState::Enqueued || o.state == OpState::GraphLaunched)) {
    digest_op(o.comm_id, o.seq, o.call_index, collective, hash);
    if (late) absorb_late_op(o.comm_id, o.seq, collective, hash);
  }
}

// A late op (see CommDigest::late) extends its communicator's retired range when it is the next
// seq after it: the retired columns then count it, so no seq is in neither the retired range nor
// the rows. One whose seq the range already passed cannot be proven: meta late_retired_ops
// counts it (and those still waiting), and the analyzer reads it as unverified history.
void Writer::absorb_late_op(int64_t comm_id, int64_t seq, bool collective, uint64_t hash) {
  CommDigest& c = sig_->comms[comm_id];
  if (seq <= c.retired_through_seq) {
    ++sig_->late_unabsorbed;
    return;
  }
  c.late.emplace(seq, CommDigest::Waiting{collective, hash, 0});
  bool changed = false;
  while (!c.late.empty() && c.late.begin()->first == c.retired_through_seq + 1) {
    const CommDigest::Waiting w = c.late.begin()->second;
    c.late.erase(c.late.begin());
    if (w.collective) {
      c.retired_digest = digest::chain(c.retired_digest, w.hash);
      ++c.retired_collectives;
    }
    ++c.retired_through_seq;
    changed = true;
  }
  if (!changed) return;
  trace_file::Stmt upd(db_, "UPDATE comms SET retired_collectives=?, retired_digest=?, retired_through_seq=? WHERE id=?",
                       false);
  upd.i64(1, c.retired_collectives).i64(2, int64_t(c.retired_digest)).i64(3, c.retired_through_seq).i64(4, comm_id);
  ok(upd.run(), "retire: late op");
}

// Ops leave the pending list at the end of a batch, in arrival order, once their parts are in
// (force: at exit and signals, whatever they still wait for). A grouped op whose parts were
// dropped (queue full) goes after two batch ends without them.
void Writer::write_ready_ops(bool force) {
  std::vector<PendingOp>& pending = sig_->pending;
  // The two lists trade buffers every batch, each keeping its capacity: no regrowth per batch.
  std::vector<PendingOp>& waiting = sig_->pending_next;
  waiting.clear();
  for (PendingOp& p : pending) {
    if (failed()) return;
    if (force || p.ready() || p.waited >= 2) {
      write_op(p);
      if (max_bytes_ > 0) maybe_declare_boundary();
      SqliteSection::let_fork_in();
    } else {
      ++p.waited;
      waiting.push_back(std::move(p));
    }
  }
  pending.swap(waiting);
  waiting.clear();
  advance_order();
  sig_->pending_sorted = true;
  for (size_t i = 1; i < pending.size(); ++i)
    if (pending[i].rec.call_index <= pending[i - 1].rec.call_index) sig_->pending_sorted = false;
  sig_->index_stale = true;
}

void Writer::insert(const Record& r) {
  count_row_taken();
  trace_file::Tables& t = tables_;
  int rc = SQLITE_DONE;
  switch (r.kind) {
    case RecKind::Op:
      sig_->add_pending(r.op);
      return;
    case RecKind::Part: {
      PendingOp* p = sig_->find_pending(r.part.call_index);
      if (!p) {
        ++sig_->late_parts;  // its op was written without it (see write_ready_ops)
        return;
      }
      p->nparts = r.part.nparts;
      p->parts.push_back(r.part);
      return;
    }
    case RecKind::CommInit: {
      const CommInitRec& c = r.comm;
      const std::string hex = trace_file::hex16(c.hash);
      const trace_file::CommRow row{.id = c.id, .hash = hex, .handle = c.handle, .nranks = c.nranks, .rank = c.rank,
                                    .cuda_device = c.device, .parent_id = c.parent_id, .has_split = c.has_split,
                                    .split_color = c.color, .split_key = c.key,
                                    .name = std::string_view(c.name, strnlen(c.name, sizeof c.name)),
                                    .init_call = c.init_call, .init_mono_ns = c.init_mono, .init_rc = c.rc,
                                    .created_before_tracing = c.before_tracing};
      rc = t.comm(row);
      break;
    }
    case RecKind::CommEnd:
      rc = t.comm_end(r.end.id, vocab::CommEnd(r.end.kind), r.end.call_index, r.end.mono);
      break;
    case RecKind::Api: {
      const ApiRec& a = r.api;
      rc = t.api(a.call_index, a.name, a.comm_id, a.rc, std::string_view(a.detail, strnlen(a.detail, sizeof a.detail)),
                 a.mono);
      break;
    }
    case RecKind::Completion:  // (not through the record queue: Writer::push)
      complete(r.done, true);
      return;
    case RecKind::GraphLaunch: {
      const GraphLaunchRec& g = r.launch;
      rc = t.graph_launch(g.call_index, g.exec, g.graph, g.stream, g.mono);
      break;
    }
    case RecKind::Wait: {
      const WaitRec& w = r.wait;
      trace_file::WaitRow row;
      row.call_index = w.call_index;
      row.kind = vocab::Wait(w.kind);
      row.stream = w.stream;
      row.event = w.event;
      row.tid = w.tid;
      row.begin_mono_ns = w.begin_mono;
      row.end_mono_ns = w.end_mono;
      rc = t.wait(row);
      break;
    }
  }
  ok(rc, "insert");
}

// A completion row: marks its op while the op waits to be written, else updates its row. One
// that finds neither is tried again next round (last_try false: its op's record may still be in
// the record queue, behind a push in progress or past the round's bound), then counted: its op's
// record was dropped, or the size cap retired it.
void Writer::complete(const CompletionRec& d, bool last_try) {
  if (PendingOp* p = sig_->find_pending(d.call_index)) {
    p->completed = true;
    p->complete_mono = d.mono;
    return;
  }
  bool found = false;
  const int rc = tables_.complete(d.call_index, d.mono, &found);
  if (!ok(rc, "insert")) return;
  if (found) return;
  if (last_try) ++sig_->orphan_completions;
  else held_dones_.push_back(d);
}

// The size cap: when the pages in use pass the high-water mark, the oldest op rows go, in one
// chunk of whole rows (call_index <= a bound) per commit, with the waits, graph launches and
// API calls of the same calls. Never the comms, meta, signatures, stacks, hangs or checkpoints.
// Each communicator's retired_* columns and meta retired_ops change in the same transaction:
// a reader sees either the rows or their retirement, never neither. The freed pages are reused
// by the next inserts, so the file stays near the cap (no VACUUM).
// Called before a batch's op rows are written, with their number: room is made first, so the
// file never grows past the cap by a batch.
void Writer::retire_if_over_cap(int64_t incoming) {
  if (max_bytes_ <= 0 || sig_->rows_in_file < 2) return;
  const int64_t page = file_.scalar("PRAGMA page_size", 4096);
  const int64_t used = (file_.scalar("PRAGMA page_count") - file_.scalar("PRAGMA freelist_count")) * page;
  // Bytes per row in use (the fixed tables counted in: an overestimate, on the safe side).
  const double per_row = double(used) / double(sig_->rows_in_file);
  const double expected = double(used) + per_row * double(incoming);
  if (expected <= double(max_bytes_) * kRetireHighWater) return;
  // Rows to drop: enough to bring the expected use to the low-water mark, at most half the
  // rows in the file (the newest stay) and one bound per commit.
  int64_t n = int64_t((expected - double(max_bytes_) * kRetireLowWater) / per_row) + 1;
  n = std::min<int64_t>({n, sig_->rows_in_file / 2, kMaxRetirePerCommit});
  if (n <= 0) return;
  // The chunk ends at a declared boundary: the first that retires n rows, unless that is more
  // than a commit should take and an earlier one retires some.
  // Only below every op still pending: then an op at or below the bound that a communicator's
  // digest still waits for was dropped, not late, and drain_waiting may skip it.
  SigState& s = *sig_;
  int64_t below = INT64_MAX;
  for (const PendingOp& p : s.pending) below = std::min(below, p.rec.call_index);
  size_t usable = 0;
  while (usable < s.boundaries.size() && s.boundaries[usable].call_index < below) ++usable;
  if (usable == 0) return;
  size_t j = 0;
  while (j + 1 < usable && s.boundaries[j].rows_written - s.retired_ops < n) ++j;
  if (j > 0 && s.boundaries[j].rows_written - s.retired_ops > kMaxRetirePerCommit) --j;
  if (s.boundaries[j].rows_written - s.retired_ops <= 0) return;  // none yet
  const int64_t id = s.first_boundary_id + int64_t(j), hi = s.boundaries[j].call_index;
  // Each communicator's state at the boundary, from its marks: no row is read back.
  trace_file::Stmt upd(db_, "UPDATE comms SET retired_collectives=?, retired_digest=?, retired_through_seq=? WHERE id=?",
                       false);
  for (auto& [comm, c] : s.comms) {
    drain_waiting(comm, c, hi);
    if (failed()) return;
    while (!c.marks.empty() && c.marks.front().last_id < id) c.marks.pop_front();
    CommDigest::Mark at{id, c.ordinal, c.digest, c.next_seq - 1};
    if (!c.marks.empty()) at = c.marks.front();
    if (!c.marks.empty() && c.marks.front().last_id == id) c.marks.pop_front();
    if (at.ordinal == c.retired_collectives && at.through_seq == c.retired_through_seq) continue;
    c.retired_collectives = at.ordinal;
    c.retired_digest = at.digest;
    c.retired_through_seq = at.through_seq;
    // Late ops the new range covers are in its digest when they were digested in seq order
    // (marks come from the running digest); one that is not cannot be told apart here.
    while (!c.late.empty() && c.late.begin()->first <= c.retired_through_seq) c.late.erase(c.late.begin());
    upd.i64(1, c.retired_collectives).i64(2, int64_t(c.retired_digest)).i64(3, c.retired_through_seq).i64(4, comm);
    if (!ok(upd.run(), "retire: comms")) return;
  }
  s.boundaries.erase(s.boundaries.begin(), s.boundaries.begin() + int64_t(j) + 1);
  s.first_boundary_id = id + 1;
  for (const char* sql : {"DELETE FROM op_graph WHERE call_index <= ?", "DELETE FROM waits WHERE call_index <= ?",
                          "DELETE FROM graph_launches WHERE call_index <= ?", "DELETE FROM api_calls WHERE call_index <= ?"}) {
    trace_file::Stmt del(db_, sql, false);
    if (!ok(del.i64(1, hi).run(), "retire: delete")) return;
  }
  int64_t gone = 0;
  if (!ok(tables_.retire_op_chunks(hi, &gone), "retire: drop op chunks")) return;
  sig_->rows_in_file -= gone;
  sig_->retired_ops += gone;
  ok(tables_.meta(schema::meta::kRetiredOps, std::to_string(sig_->retired_ops)), "retire: meta");
}

void Writer::note_drop(const Record& first, size_t n) {
  std::lock_guard<std::mutex> g(drop_mu_);
  dropped_.fetch_add(n, std::memory_order_relaxed);
  if (first.kind != RecKind::Op || first.op.seq <= 0) {
    drops_without_seq_ += int64_t(n);
    return;
  }
  const OpRec& o = first.op;
  // Runs of consecutive seqs of one communicator, as the issuing threads dropped them.
  for (auto it = drop_runs_.rbegin(); it != drop_runs_.rend() && it - drop_runs_.rbegin() < 8; ++it)
    if (it->comm_id == o.comm_id && it->last_seq + 1 == o.seq) {
      it->last_seq = o.seq;
      it->records += int64_t(n);
      return;
    }
  drop_runs_.push_back({o.comm_id, o.seq, o.seq, int64_t(n)});
}

// The spill keeps each thread's records in order (the writer never writes a later record of a
// thread before an earlier one):
// - A producer goes to the spill when spilling_ is set or the queue refused it; it sets
//   spilling_ (under spill_mu_) only when it appends. Once a thread has appended, every later
//   record of it sees spilling_ set (its own store, or one it saw through spill_mu_), so it
//   spills too, until the writer clears the flag; the flag is cleared only under spill_mu_ with
//   the spill empty, after the writer took every spilled record.
// - A thread's queue records before its first spilled one were published before that append,
//   hence before the writer's swap (spill_mu_ orders them): take_spill drains the queue after
//   the swap, waiting out a push in progress (busy()), and only then appends the swapped spill.
// - Producers never wait for the writer: they hold spill_mu_ for one append (an allocation at
//   most); the writer holds it for a swap. Memory: at most spill_limit_bytes_ of chunks.
// - Completions: their own queue; one whose op is still in the spill is retried once (complete()).
// - fork: the child abandons the parent's Writer (reset_after_fork), spill_mu_ included.
void Writer::spill(const Record* rs, size_t n) {
  static constexpr size_t kChunkRecords = 4096;
  bool appended = false;
  if (spill_limit_bytes_ && !failed()) {  // a stopped recorder writes nothing more: no spill
    std::lock_guard<std::mutex> g(spill_mu_);
    try {
      if (spill_chunks_.empty() || spill_chunks_.back().capacity() - spill_chunks_.back().size() < n) {
        const size_t records = n > kChunkRecords ? n : kChunkRecords;
        const size_t bytes = records * sizeof(Record);
        if (spill_bytes_ + bytes <= spill_limit_bytes_) {
          std::vector<Record> chunk;
          chunk.reserve(records);
          spill_chunks_.push_back(std::move(chunk));
          spill_bytes_ += bytes;
          if (spill_bytes_ > peak_spill_bytes_.load(std::memory_order_relaxed))
            peak_spill_bytes_.store(spill_bytes_, std::memory_order_relaxed);
        }
      }
      if (!spill_chunks_.empty() && spill_chunks_.back().capacity() - spill_chunks_.back().size() >= n) {
        spill_chunks_.back().insert(spill_chunks_.back().end(), rs, rs + n);  // no reallocation: room checked
        spilling_.store(true, std::memory_order_release);
        appended = true;
      }
    } catch (...) {  // allocation failed: drop, as a full spill
    }
  }
  if (appended) spilled_.fetch_add(n, std::memory_order_relaxed);
  else note_drop(rs[0], n);
}

void Writer::take_spill(std::vector<Record>* out) {
  if (!spilling_.load(std::memory_order_acquire)) return;
  Record r;
  while (queue_.pop(r)) out->push_back(r);
  std::vector<std::vector<Record>> chunks;
  {
    // try_lock, bounded: a producer interrupted by a signal while it appends (its handler
    // waiting for this very flush) must not hold the writer; the spill then waits a round (the
    // queue records taken above precede every spilled record of their threads).
    std::unique_lock<std::mutex> g(spill_mu_, std::defer_lock);
    for (const int64_t by = mono_ns() + 10 * 1000000LL; !g.try_lock();) {
      if (mono_ns() > by) return;
      std::this_thread::yield();
    }
    chunks.swap(spill_chunks_);
    spill_bytes_ = 0;
  }
  // Records published before the swap; a push in progress is waited out (bounded: a producer
  // that never finishes its push cannot hold the writer; its record then comes later).
  const int64_t give_up = mono_ns() + 100 * 1000000LL;
  for (;;) {
    while (queue_.pop(r)) out->push_back(r);
    if (!queue_.busy() || mono_ns() > give_up) break;
    std::this_thread::yield();
  }
  for (const auto& c : chunks) out->insert(out->end(), c.begin(), c.end());
  std::unique_lock<std::mutex> g(spill_mu_, std::try_to_lock);
  if (g.owns_lock() && spill_chunks_.empty() && !queue_.busy()) spilling_.store(false, std::memory_order_release);
}

// The drops since the last commit, as drops rows, and their count in meta dropped_records
// (last_dropped_): both from one look under drop_mu_, so the rows account for the count.
bool Writer::write_drops() {
  std::vector<DropRun> runs;
  int64_t without_seq = 0;
  {
    std::lock_guard<std::mutex> g(drop_mu_);
    runs.swap(drop_runs_);
    std::swap(without_seq, drops_without_seq_);
    last_dropped_ = dropped_.load();
  }
  for (const DropRun& d : runs)
    if (!ok(tables_.drop(d.comm_id, d.first_seq, d.last_seq, d.records, schema::kDropQueueFull), "insert drops")) return false;
  if (without_seq && !ok(tables_.drop(-1, 0, 0, without_seq, schema::kDropQueueFull), "insert drops")) return false;
  return true;
}

void Writer::commit_batch(bool force_meta) {
  // Before any record is taken: the calls still in progress (call_progress.h).
  const int64_t in_progress = call_counter_ ? lowest_call_in_progress(*call_counter_) : INT64_MAX;
  // Completion rows first: each one's op record was pushed before it, so it is among the
  // records taken below or (see complete()) in a later round.
  dones_.clear();
  for (CompletionRec d; dones_.size() < 200000 && done_queue_.pop(d);) dones_.push_back(d);
  std::vector<Record> spilled;  // the queue and the spill in order, when the spill is in use
  take_spill(&spilled);
  Record r;
  bool have = queue_.pop(r);
  // Nothing taken: a heartbeat, unless what else the commit writes says otherwise (below).
  const bool nothing_new = !have && spilled.empty() && sig_->pending.empty() && dones_.empty() && held_dones_.empty();
  if (nothing_new) {
    // Nothing new: still commit side-channel rows, and refresh meta about once a second so a
    // reader can tell a live-but-idle process from a dead one.
    std::lock_guard<std::mutex> g(side_mu_);
    if (pending_stacks_.empty() && pending_meta_.empty() && pending_hangs_.empty() &&
        !force_meta && mono_ns() - last_meta_mono_ < schema::kHeartbeatMinIntervalNs &&
        dropped_.load() == last_dropped_)
      return;
  }
  if (!exec("BEGIN IMMEDIATE")) {
    fail("begin");
    return;
  }
  // Rows changed and the schema, to tell a heartbeat from a commit that wrote more.
  const int64_t changes_before = sqlite3_total_changes64(db_);
  const int64_t schema_before = nothing_new ? file_.scalar("PRAGMA schema_version") : 0;
  intern_pending_stacks();
  // Bounded batch: a writer that falls behind still commits regularly.
  for (const Record& s : spilled) {
    if (failed()) break;
    insert(s);
    SqliteSection::let_fork_in();
  }
  size_t n = spilled.size();
  for (; have && n < 200000 + spilled.size() && !failed(); n++) {
    insert(r);
    SqliteSection::let_fork_in();
    have = queue_.pop(r);
  }
  // The queue left non-empty: records pushed before in_progress was read may still be in it.
  order_bound_ = have ? INT64_MIN : in_progress;
  if (have && !failed()) insert(r);
  last_round_records_ = n + dones_.size();
  const bool last_round = force_meta || stop_.load();
  std::vector<CompletionRec> retry;
  retry.swap(held_dones_);
  for (const CompletionRec& d : retry)
    if (!failed()) complete(d, true), SqliteSection::let_fork_in();
  for (const CompletionRec& d : dones_)
    if (!failed()) complete(d, last_round), SqliteSection::let_fork_in();
  if (!failed()) retire_if_over_cap(int64_t(sig_->pending.size()));
  // At exit and on signals every op goes, parts or not: nothing stays behind in memory.
  if (!failed()) write_ready_ops(force_meta || stop_.load());
  if (failed()) return;  // stop_recording() rolled the batch back

  std::vector<std::pair<std::string, std::string>> meta;
  std::vector<PendingHang> hangs;
  {
    std::lock_guard<std::mutex> g(side_mu_);
    meta.swap(pending_meta_);
    hangs.swap(pending_hangs_);
  }
  for (const PendingHang& h : hangs)
    if (!ok(tables_.hang(h.mono, h.wall, h.in_flight, h.message), "insert hang")) return;
  if (!ok(tables_.sync_chunk_views(), "op chunk views")) return;
  if (!write_drops()) return;
  last_meta_mono_ = mono_ns();
  meta.emplace_back(schema::meta::kDroppedRecords, std::to_string(last_dropped_));
  if (uint64_t s = spilled_.load(std::memory_order_relaxed)) {
    meta.emplace_back(schema::meta::kSpilledRecords, std::to_string(s));
    meta.emplace_back(schema::meta::kPeakSpillBytes, std::to_string(peak_spill_bytes_.load(std::memory_order_relaxed)));
  }
  meta.emplace_back(schema::meta::kLastFlushMonoNs, std::to_string(last_meta_mono_));
  if (sig_->digest_gaps) meta.emplace_back(schema::meta::kDigestGaps, std::to_string(sig_->digest_gaps));
  meta.emplace_back("completions_without_op", std::to_string(sig_->orphan_completions));
  if (sig_->late_parts) meta.emplace_back("late_parts", std::to_string(sig_->late_parts));
  if (int64_t n = sig_->late_retired_ops()) meta.emplace_back("late_retired_ops", std::to_string(n));
  for (const auto& [k, v] : meta)
    if (!ok(tables_.meta(k, v), "update meta")) return;
  if (!profiler_commit_rows(db_)) {
    fail("insert profiler rows");
    return;
  }
  // A heartbeat: nothing taken, no hang, no meta value but the last flush other than the file
  // holds, one row changed per meta row and no table made or dropped. Anything else advances
  // the generation (more often than needed is safe; a content change without it is not).
  bool meta_moved = false;
  for (auto& [k, v] : meta) {
    if (k == schema::meta::kLastFlushMonoNs) continue;
    auto [it, added] = written_meta_.try_emplace(k, v);
    if (added || it->second != v) meta_moved = true, it->second = std::move(v);
  }
  const bool heartbeat = nothing_new && !last_round && hangs.empty() && !meta_moved &&
                         sqlite3_total_changes64(db_) - changes_before == int64_t(meta.size()) &&
                         file_.scalar("PRAGMA schema_version") == schema_before;
  if (!heartbeat && !advance_generation()) {
    fail("user_version");
    return;
  }
  if (!commit()) return;
  // The stop point, should a later batch fail (write_stop_meta).
  for (const auto& [comm, c] : sig_->comms) committed_next_seq_[comm] = c.next_seq;
  grow_page_size();
}

// 1 KiB pages keep a small trace small (its ~20 tables take a page each), but freeing a chunk's
// pages costs per page: past kLargePagesAt the file is rewritten once with 4 KiB pages (VACUUM,
// atomic under the rollback journal; a failure leaves the file as it was and is not retried).
void Writer::grow_page_size() {
  if (page_size_grown_ || file_.scalar("PRAGMA page_count") * file_.scalar("PRAGMA page_size", 4096) < kLargePagesAt)
    return;
  page_size_grown_ = true;
  if (file_.scalar("PRAGMA page_size", 4096) >= 4096) return;
  exec("PRAGMA page_size=4096");
  exec("VACUUM");
}

// A reader holding its shared lock past busy_timeout makes COMMIT return BUSY: the transaction
// stays open and is retried, so nothing is lost.
bool Writer::commit() {
  for (int attempt = 0;; attempt++) {
    int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return true;
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || attempt >= 4) {  // exit waits at most ~10 s
      fail("commit");
      return false;
    }
  }
}

}  // namespace lockstep::rec
