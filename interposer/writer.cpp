#include "writer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "clock.h"
#include "lockstep_version.h"
#include "log.h"
#include "symbolize.h"
#include "write_errno_vfs.h"
#include "trace_schema.h"


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

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::DiskFull: return "disk_full";
    case StopReason::FileSizeLimit: return "file_size_limit";
    case StopReason::IoError: return "io_error";
    case StopReason::ReadOnly: return "read_only";
    case StopReason::Unwritable: return "unwritable";
    case StopReason::Internal: return "internal";
  }
  return "internal";
}

StopReason classify_write_error(int rc, int sys_errno) {
  switch (sys_errno) {
    case ENOSPC:
    case EDQUOT: return StopReason::DiskFull;
    case EFBIG: return StopReason::FileSizeLimit;
    case EROFS: return StopReason::ReadOnly;
    case EACCES:
    case EPERM: return StopReason::Unwritable;
    case EIO: return StopReason::IoError;
    default: break;
  }
  switch (rc & 0xff) {
    case SQLITE_FULL: return StopReason::DiskFull;
    case SQLITE_READONLY: return StopReason::ReadOnly;
    case SQLITE_PERM:
    case SQLITE_CANTOPEN: return StopReason::Unwritable;
    case SQLITE_IOERR: return StopReason::IoError;
    default: return StopReason::Internal;
  }
}

void block_sigxfsz_in_this_thread(sigset_t* previous) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &s, previous);
}

namespace {
bool sigxfsz_pending() {
  sigset_t p;
  sigemptyset(&p);
  return sigpending(&p) == 0 && sigismember(&p, SIGXFSZ) == 1;
}
}  // namespace

SigxfszBlocked::SigxfszBlocked() {
  block_sigxfsz_in_this_thread(&previous_);
  was_pending_ = sigxfsz_pending();
}

SigxfszBlocked::~SigxfszBlocked() {
  if (!was_pending_ && sigxfsz_pending()) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGXFSZ);
    timespec zero{0, 0};
    sigtimedwait(&s, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

struct Writer::Stmts {
  sqlite3_stmt *op = nullptr, *part = nullptr, *comm = nullptr, *comm_end = nullptr,
               *api = nullptr, *done = nullptr, *launch = nullptr, *wait = nullptr,
               *stack = nullptr, *frame = nullptr, *meta = nullptr, *hang = nullptr;
};

Writer::Writer() : queue_(kQueueRecords) {}

// One insert; a failure stops the recording with the cause SQLite saw (disk full, EFBIG, ...).
bool Writer::step(sqlite3_stmt* q, const char* what) {
  int rc = sqlite3_step(q);
  bool ok = rc == SQLITE_DONE || rc == SQLITE_CONSTRAINT;
  // Reset first: a statement left active keeps the pager in its error state, and then even the
  // recorder_stopped rows could not be written.
  sqlite3_reset(q);
  if (!ok) fail(what);
  return ok;
}

bool Writer::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) == SQLITE_OK) return true;
  if (err) sqlite3_free(err);
  return false;
}

Writer* Writer::open(const TraceHeader& h, std::string* error) {
  // The header is written in the calling (application) thread: SIGXFSZ blocked meanwhile.
  SigxfszBlocked blocked;
  return open_unguarded(h, error);
}

Writer* Writer::open_unguarded(const TraceHeader& h, std::string* error) {
  const ProcessInfo& info = h.info;
  if (!mkdir_p(info.trace_dir)) {
    *error = "cannot create trace directory " + info.trace_dir + ": " + strerror(errno);
    return nullptr;
  }
  auto* w = new Writer();
  w->path_ = info.trace_dir + "/" + info.host + "-" + std::to_string(info.pid) +
             schema::kFileSuffix;
  // A stale file of an earlier process with the same pid would mix two runs.
  unlink(w->path_.c_str());
  for (const char* ext : {"-journal", "-wal", "-shm"}) unlink((w->path_ + ext).c_str());

  auto fail_open = [&](const std::string& what) {
    *error = what + " (" + w->path_ + "): " + (w->db_ ? sqlite3_errmsg(w->db_) : "open failed");
    if (int e = last_write_errno() ? last_write_errno() : w->db_ ? sqlite3_system_errno(w->db_) : 0)
      *error += std::string(" (") + strerror(e) + ")";
    if (w->db_) sqlite3_close(w->db_);
    delete w;
    return nullptr;
  };
  clear_last_write_errno();
  if (sqlite3_open_v2(w->path_.c_str(), &w->db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      write_errno_vfs_name()) != SQLITE_OK)
    return fail_open("cannot create trace file");

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
  sqlite3_busy_timeout(w->db_, 2000);
  std::string pragmas = "PRAGMA application_id=" + std::to_string(schema::kApplicationId) +
                        ";PRAGMA journal_mode=" + w->journal_mode_ +
                        ";PRAGMA synchronous=" + (network ? "NORMAL" : "OFF") + ";";
  if (!w->exec(pragmas.c_str())) return fail_open("cannot configure trace file");
  if (!w->exec(schema::kCreateSql)) return fail_open("cannot create trace tables");

  auto prep = [&](const char* sql, sqlite3_stmt** s) {
    return sqlite3_prepare_v3(w->db_, sql, -1, SQLITE_PREPARE_PERSISTENT, s, nullptr) ==
           SQLITE_OK;
  };
  w->st_ = new Stmts();
  Stmts& s = *w->st_;
  bool ok =
      prep("INSERT INTO ops(call_index,comm_id,seq,op,dtype,count,root,peer,redop,stream,tid,"
           "thread_name,group_id,issue_mono_ns,issue_wall_ns,return_mono_ns,rc,state,capture_id,"
           "graph_id,origin_call,graph_exec,stack_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
           "?,?,?,?,?)",
           &s.op) &&
      prep("INSERT OR REPLACE INTO op_parts(call_index,part,op,dtype,count,root,peer,redop) "
           "VALUES(?,?,?,?,?,?,?,?)",
           &s.part) &&
      prep("INSERT OR REPLACE INTO comms(id,comm_hash,handle,nranks,rank,cuda_device,parent_id,"
           "split_color,split_key,name,init_call,init_mono_ns,init_rc,created_before_tracing) "
           "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
           &s.comm) &&
      prep("UPDATE comms SET end_kind=?,end_call=?,end_mono_ns=? WHERE id=?", &s.comm_end) &&
      prep("INSERT INTO api_calls(call_index,name,comm_id,rc,detail,mono_ns) VALUES(?,?,?,?,?,?)",
           &s.api) &&
      prep("INSERT OR REPLACE INTO completions(call_index,mono_ns) VALUES(?,?)", &s.done) &&
      prep("INSERT INTO graph_launches(call_index,graph_exec,graph_id,stream,mono_ns) "
           "VALUES(?,?,?,?,?)",
           &s.launch) &&
      prep("INSERT INTO waits(call_index,kind,stream,event,tid,begin_mono_ns,end_mono_ns) "
           "VALUES(?,?,?,?,?,?,?)",
           &s.wait) &&
      prep("INSERT INTO stacks(id,hash) VALUES(?,?)", &s.stack) &&
      prep("INSERT INTO frames(stack_id,depth,kind,function,module,offset,file,line) "
           "VALUES(?,?,?,?,?,?,?,?)",
           &s.frame) &&
      prep("INSERT OR REPLACE INTO meta(key,value) VALUES(?,?)", &s.meta) &&
      prep("INSERT INTO hangs(mono_ns,wall_ns,in_flight,message) VALUES(?,?,?,?)", &s.hang);
  if (!ok) return fail_open("cannot prepare trace statements");

  // Header rows, in the caller's thread: the file is complete and valid before any op.
  auto meta = [&](const char* k, const std::string& v) {
    sqlite3_bind_text(s.meta, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_text(s.meta, 2, v.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_step(s.meta);
    sqlite3_reset(s.meta);
  };
  w->exec("BEGIN");
  meta("schema_version", std::to_string(schema::kSchemaVersion));
  meta("lockstep_version", LOCKSTEP_VERSION);
  meta("host", info.host);
  meta("pid", std::to_string(info.pid));
  meta("global_rank", std::to_string(info.global_rank));
  meta("global_rank_source", info.global_rank_source);
  meta("cmdline", info.cmdline);
  meta("exe", info.exe);
  for (const auto& [key, value] : info.launcher) meta(key.c_str(), value);
  meta("nccl_version", std::to_string(h.nccl_version));
  meta("nccl_library", h.nccl_library);
  meta("stack_mode", h.stack_mode);
  meta("unwinder", h.unwinder);
  meta("start_wall_ns", std::to_string(wall_ns()));
  meta("start_mono_ns", std::to_string(mono_ns()));
  meta("journal_mode", w->journal_mode_);
  meta("finished", "0");
  meta("dropped_records", "0");
  meta("last_flush_mono_ns", std::to_string(mono_ns()));
  sqlite3_stmt* env = nullptr;
  prep("INSERT OR REPLACE INTO env(name,value) VALUES(?,?)", &env);
  for (const auto& [k, v] : info.env) {
    sqlite3_bind_text(env, 1, k.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(env, 2, v.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_step(env);
    sqlite3_reset(env);
  }
  sqlite3_finalize(env);
  if (!w->exec("COMMIT")) return fail_open("cannot write trace header");

  w->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->wake_fd_ < 0 || pipe2(w->ack_pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
    return fail_open("cannot create writer wake-up descriptors");
  return w;
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
      stop_recording(StopReason::Internal, std::string("writer thread: ") + e.what());
      run_failed_until_stop();
    } catch (...) {
      stop_recording(StopReason::Internal, "writer thread: unknown exception");
      run_failed_until_stop();
    }
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
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

void Writer::flush(int timeout_ms) {
  if (failed() || !thread_.joinable() || is_writer_thread()) return;
  std::unique_lock<std::mutex> lk(flush_mu_);
  uint64_t target = ++flush_requested_;
  flush_req_atomic_.store(target);
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof one);
  (void)ignored;
  flush_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                     [&] { return flush_done_ >= target || failed(); });
}

void Writer::signal_flush_begin(const char* exit_reason) {
  // Only async-signal-safe operations: an atomic store and write(2).
  char drain[64];
  while (read(ack_pipe_[0], drain, sizeof drain) > 0) {
  }
  signal_reason_.store(exit_reason);
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

bool Writer::signal_flush_wait(int timeout_ms) {
  pollfd p{ack_pipe_[0], POLLIN, 0};
  int64_t deadline = mono_ns() + int64_t(timeout_ms) * 1000000;
  for (;;) {
    int left = int((deadline - mono_ns()) / 1000000);
    if (left <= 0) return false;
    int r = poll(&p, 1, left);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void Writer::stop(const char* exit_reason) {
  if (!thread_.joinable() || is_writer_thread()) return;
  set_meta("exit_reason", exit_reason);
  set_meta("finished", "1");
  stop_.store(true);
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof one);
  (void)ignored;
  thread_.join();
}

void Writer::fail(const char* what) {
  if (failed_.load()) return;
  const int rc = sqlite3_extended_errcode(db_);
  // The errno of the failed write itself (write_errno_vfs.h); SQLite's own when it has none.
  int sys = last_write_errno();
  if (!sys) sys = sqlite3_system_errno(db_);
  std::string detail = std::string(what) + ": " + sqlite3_errmsg(db_);
  if (sys) detail += std::string(" (") + strerror(sys) + ")";
  if (sys == EFBIG) {
    rlimit lim{};
    if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
      detail += "; RLIMIT_FSIZE (ulimit -f) is " + std::to_string(lim.rlim_cur) + " bytes";
  }
  stop_recording(classify_write_error(rc, sys), detail);
}

void Writer::stop_recording(StopReason why, const std::string& detail) {
  if (failed_.exchange(true)) return;
  warn("recording stopped (%s: %s); the trace %s keeps what was committed before; the program "
       "continues untraced",
       stop_reason_name(why), detail.c_str(), path_.c_str());
  // Leave no open transaction (a hot journal) behind: readers keep every committed batch.
  if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  // Best effort: the disk may still be full, the file at its size limit. A failure here is
  // silent (one warning above is all the program's stderr gets).
  // After an I/O error SQLite may first have to roll a hot journal back: a few attempts, the
  // last ones without a rollback journal (the few meta rows may fit in the pages the file has).
  for (int attempt = 0; attempt < 4; attempt++) {
    if (attempt == 2) sqlite3_exec(db_, "PRAGMA journal_mode=MEMORY", nullptr, nullptr, nullptr);
    if (write_stop_meta(why, detail)) break;
    usleep(10000);
  }
}

bool Writer::write_stop_meta(StopReason why, const std::string& detail) {
  if (!st_ || !st_->meta) return false;
  if (sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return false;
  const std::pair<const char*, std::string> rows[] = {
      {"recorder_stopped", stop_reason_name(why)},
      {"recorder_stopped_detail", detail},
      {"recorder_stopped_mono_ns", std::to_string(mono_ns())},
      {"dropped_records", std::to_string(dropped_.load())},
  };
  bool ok = true;
  for (const auto& [k, v] : rows) {
    sqlite3_bind_text(st_->meta, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_text(st_->meta, 2, v.c_str(), -1, SQLITE_TRANSIENT);
    ok = ok && sqlite3_step(st_->meta) == SQLITE_DONE;
    sqlite3_reset(st_->meta);
  }
  if (ok && sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK) return true;
  if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  return false;
}

// After an internal error: keep answering flush and signal-flush requests (they find the
// recorder stopped) until stop(), so no caller waits for its timeout.
void Writer::run_failed_until_stop() {
  for (;;) {
    pollfd p{wake_fd_, POLLIN, 0};
    poll(&p, 1, kCommitIntervalMs);
    uint64_t drained;
    ssize_t ignored = read(wake_fd_, &drained, sizeof drained);
    (void)ignored;
    uint64_t flush_target = flush_req_atomic_.load();
    {
      std::lock_guard<std::mutex> g(flush_mu_);
      flush_done_ = flush_target;
    }
    flush_cv_.notify_all();
    if (signal_reason_.exchange(nullptr)) {
      char c = 1;
      ignored = write(ack_pipe_[1], &c, 1);
    }
    if (stop_.load()) return;
  }
}

void Writer::run() {
  for (;;) {
    pollfd p{wake_fd_, POLLIN, 0};
    poll(&p, 1, kCommitIntervalMs);
    uint64_t drained;
    ssize_t ignored = read(wake_fd_, &drained, sizeof drained);
    (void)ignored;

    uint64_t flush_target = flush_req_atomic_.load();
    const char* reason = signal_reason_.exchange(nullptr);
    if (reason) set_meta("exit_reason", reason);
    bool stopping = stop_.load();
    if (!failed()) commit_batch(stopping || reason != nullptr);
    {
      std::lock_guard<std::mutex> g(flush_mu_);
      flush_done_ = flush_target;
    }
    flush_cv_.notify_all();
    if (reason) {
      char c = 1;
      ignored = write(ack_pipe_[1], &c, 1);
    }
    if (stopping) break;
  }
}

void Writer::intern_pending_stacks() {
  std::vector<PendingStack> stacks;
  {
    std::lock_guard<std::mutex> g(side_mu_);
    stacks.swap(pending_stacks_);
  }
  Stmts& s = *st_;
  for (const PendingStack& ps : stacks) {
    if (stack_ids_.count(ps.hash)) continue;
    int64_t id = int64_t(stack_ids_.size()) + 1;
    stack_ids_[ps.hash] = id;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(ps.hash));
    sqlite3_bind_int64(s.stack, 1, id);
    sqlite3_bind_text(s.stack, 2, hex, -1, SQLITE_TRANSIENT);
    if (!step(s.stack, "insert stack")) return;
    for (size_t d = 0; d < ps.pcs.size(); d++) {
      NativeFrame f = symbolize(ps.pcs[d], d == 0);
      sqlite3_bind_int64(s.frame, 1, id);
      sqlite3_bind_int64(s.frame, 2, int64_t(d));
      sqlite3_bind_text(s.frame, 3, vocab::name(vocab::FrameKind::Native), -1, SQLITE_STATIC);
      if (f.function.empty()) sqlite3_bind_null(s.frame, 4);
      else sqlite3_bind_text(s.frame, 4, f.function.c_str(), -1, SQLITE_TRANSIENT);
      if (f.module.empty()) sqlite3_bind_null(s.frame, 5);
      else sqlite3_bind_text(s.frame, 5, f.module.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(s.frame, 6, int64_t(f.offset));
      sqlite3_bind_null(s.frame, 7);
      sqlite3_bind_null(s.frame, 8);
      if (!step(s.frame, "insert frame")) return;
    }
    // Python frames after the native ones, innermost first (schema: frames.depth).
    for (size_t i = 0; i < ps.py.size(); i++) {
      lockstep::PyFrameInfo fi = lockstep::resolve_python_frame(ps.py[i]);
      sqlite3_bind_int64(s.frame, 1, id);
      sqlite3_bind_int64(s.frame, 2, int64_t(ps.pcs.size() + i));
      sqlite3_bind_text(s.frame, 3, vocab::name(vocab::FrameKind::Python), -1, SQLITE_STATIC);
      sqlite3_bind_text(s.frame, 4, fi.function.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_null(s.frame, 5);
      sqlite3_bind_null(s.frame, 6);
      sqlite3_bind_text(s.frame, 7, fi.file.c_str(), -1, SQLITE_TRANSIENT);
      if (fi.line > 0) sqlite3_bind_int64(s.frame, 8, fi.line);
      else sqlite3_bind_null(s.frame, 8);
      if (!step(s.frame, "insert frame")) return;
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

namespace {
void bind_opt_int(sqlite3_stmt* s, int i, int64_t v, int64_t null_value = -1) {
  if (v == null_value) sqlite3_bind_null(s, i);
  else sqlite3_bind_int64(s, i, v);
}
void bind_opt_text(sqlite3_stmt* s, int i, const char* v) {
  if (!v || !*v) sqlite3_bind_null(s, i);
  else sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
}
}  // namespace

void Writer::insert(const Record& r) {
  Stmts& s = *st_;
  sqlite3_stmt* q = nullptr;
  switch (r.kind) {
    case RecKind::Op: {
      const OpRec& o = r.op;
      q = s.op;
      sqlite3_bind_int64(q, 1, o.call_index);
      sqlite3_bind_int64(q, 2, o.comm_id);
      bind_opt_int(q, 3, o.seq, 0);
      sqlite3_bind_text(q, 4, op_name(o.op), -1, SQLITE_STATIC);
      bind_opt_text(q, 5, dtype_name(o.dtype));
      sqlite3_bind_int64(q, 6, o.count);  // a size_t >= 2^63 reads back negative
      bind_opt_int(q, 7, o.root);
      bind_opt_int(q, 8, o.peer);
      bind_opt_text(q, 9, redop_name(o.redop));
      sqlite3_bind_int64(q, 10, int64_t(o.stream));
      sqlite3_bind_int64(q, 11, o.tid);
      sqlite3_bind_text(q, 12, thread_name(o.tid).c_str(), -1, SQLITE_STATIC);  // map-owned
      bind_opt_int(q, 13, o.group_id);
      sqlite3_bind_int64(q, 14, o.issue_mono);
      sqlite3_bind_int64(q, 15, o.issue_wall);
      bind_opt_int(q, 16, o.return_mono, 0);
      sqlite3_bind_int64(q, 17, o.rc);
      sqlite3_bind_text(q, 18, state_name(o.state), -1, SQLITE_STATIC);
      bind_opt_int(q, 19, int64_t(o.capture_id), 0);
      bind_opt_int(q, 20, int64_t(o.graph_id), 0);
      bind_opt_int(q, 21, o.origin_call);
      bind_opt_int(q, 22, int64_t(o.graph_exec), 0);
      bind_opt_int(q, 23, o.stack_hash ? stack_id_for(o.stack_hash) : -1);
      break;
    }
    case RecKind::Part: {
      const PartRec& p = r.part;
      q = s.part;
      sqlite3_bind_int64(q, 1, p.call_index);
      sqlite3_bind_int64(q, 2, p.part);
      sqlite3_bind_text(q, 3, op_name(p.op), -1, SQLITE_STATIC);
      bind_opt_text(q, 4, dtype_name(p.dtype));
      sqlite3_bind_int64(q, 5, p.count);
      bind_opt_int(q, 6, p.root);
      bind_opt_int(q, 7, p.peer);
      bind_opt_text(q, 8, redop_name(p.redop));
      break;
    }
    case RecKind::CommInit: {
      const CommInitRec& c = r.comm;
      q = s.comm;
      char hex[17];
      snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(c.hash));
      sqlite3_bind_int64(q, 1, c.id);
      sqlite3_bind_text(q, 2, hex, -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(q, 3, int64_t(c.handle));
      sqlite3_bind_int64(q, 4, c.nranks);
      sqlite3_bind_int64(q, 5, c.rank);
      bind_opt_int(q, 6, c.device);
      bind_opt_int(q, 7, c.parent_id);
      if (c.has_split) {
        sqlite3_bind_int64(q, 8, c.color);
        sqlite3_bind_int64(q, 9, c.key);
      } else {
        sqlite3_bind_null(q, 8);
        sqlite3_bind_null(q, 9);
      }
      if (c.name[0]) sqlite3_bind_text(q, 10, c.name, -1, SQLITE_TRANSIENT);
      else sqlite3_bind_null(q, 10);
      sqlite3_bind_int64(q, 11, c.init_call);
      sqlite3_bind_int64(q, 12, c.init_mono);
      sqlite3_bind_int64(q, 13, c.rc);
      sqlite3_bind_int64(q, 14, c.before_tracing ? 1 : 0);
      break;
    }
    case RecKind::CommEnd: {
      const CommEndRec& e = r.end;
      q = s.comm_end;
      sqlite3_bind_text(q, 1, comm_end_name(e.kind), -1, SQLITE_STATIC);
      sqlite3_bind_int64(q, 2, e.call_index);
      sqlite3_bind_int64(q, 3, e.mono);
      sqlite3_bind_int64(q, 4, e.id);
      break;
    }
    case RecKind::Api: {
      const ApiRec& a = r.api;
      q = s.api;
      sqlite3_bind_int64(q, 1, a.call_index);
      sqlite3_bind_text(q, 2, a.name, -1, SQLITE_STATIC);
      bind_opt_int(q, 3, a.comm_id);
      sqlite3_bind_int64(q, 4, a.rc);
      if (a.detail[0]) sqlite3_bind_text(q, 5, a.detail, -1, SQLITE_TRANSIENT);
      else sqlite3_bind_null(q, 5);
      sqlite3_bind_int64(q, 6, a.mono);
      break;
    }
    case RecKind::Completion:
      q = s.done;
      sqlite3_bind_int64(q, 1, r.done.call_index);
      sqlite3_bind_int64(q, 2, r.done.mono);
      break;
    case RecKind::GraphLaunch: {
      const GraphLaunchRec& g = r.launch;
      q = s.launch;
      sqlite3_bind_int64(q, 1, g.call_index);
      sqlite3_bind_int64(q, 2, int64_t(g.exec));
      bind_opt_int(q, 3, int64_t(g.graph), 0);
      sqlite3_bind_int64(q, 4, int64_t(g.stream));
      sqlite3_bind_int64(q, 5, g.mono);
      break;
    }
    case RecKind::Wait: {
      const WaitRec& w = r.wait;
      q = s.wait;
      sqlite3_bind_int64(q, 1, w.call_index);
      sqlite3_bind_text(q, 2, wait_name(w.kind), -1, SQLITE_STATIC);
      sqlite3_bind_int64(q, 3, int64_t(w.stream));
      bind_opt_int(q, 4, int64_t(w.event), 0);
      sqlite3_bind_int64(q, 5, w.tid);
      sqlite3_bind_int64(q, 6, w.begin_mono);
      bind_opt_int(q, 7, w.end_mono);
      break;
    }
  }
  step(q, "insert");  // every parameter is bound on every insert: no clear_bindings needed
}

void Writer::commit_batch(bool force_meta) {
  Record r;
  bool have = queue_.pop(r);
  if (!have) {
    // Nothing new: still commit side-channel rows, and refresh meta about once a second so a
    // reader can tell a live-but-idle process from a dead one.
    std::lock_guard<std::mutex> g(side_mu_);
    if (pending_stacks_.empty() && pending_meta_.empty() && pending_hangs_.empty() &&
        !force_meta && mono_ns() - last_meta_mono_ < 1000000000 &&
        dropped_.load() == last_dropped_)
      return;
  }
  if (!exec("BEGIN IMMEDIATE")) {
    fail("begin");
    return;
  }
  intern_pending_stacks();
  // Bounded batch: a writer that falls behind still commits regularly.
  for (size_t n = 0; have && n < 200000 && !failed(); n++) {
    insert(r);
    have = queue_.pop(r);
  }
  if (have && !failed()) insert(r);
  if (failed()) return;  // stop_recording() rolled the batch back

  std::vector<std::pair<std::string, std::string>> meta;
  std::vector<PendingHang> hangs;
  {
    std::lock_guard<std::mutex> g(side_mu_);
    meta.swap(pending_meta_);
    hangs.swap(pending_hangs_);
  }
  Stmts& s = *st_;
  for (const PendingHang& h : hangs) {
    sqlite3_bind_int64(s.hang, 1, h.mono);
    sqlite3_bind_int64(s.hang, 2, h.wall);
    sqlite3_bind_int64(s.hang, 3, h.in_flight);
    sqlite3_bind_text(s.hang, 4, h.message.c_str(), -1, SQLITE_TRANSIENT);
    if (!step(s.hang, "insert hang")) return;
  }
  last_dropped_ = dropped_.load();
  last_meta_mono_ = mono_ns();
  meta.emplace_back("dropped_records", std::to_string(last_dropped_));
  meta.emplace_back("last_flush_mono_ns", std::to_string(last_meta_mono_));
  for (const auto& [k, v] : meta) {
    sqlite3_bind_text(s.meta, 1, k.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s.meta, 2, v.c_str(), -1, SQLITE_TRANSIENT);
    if (!step(s.meta, "update meta")) return;
  }
  // A reader holding its shared lock past busy_timeout makes COMMIT return BUSY: the
  // transaction stays open and is retried, so nothing is lost.
  for (int attempt = 0;; attempt++) {
    int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) break;
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || attempt >= 4) {  // exit waits at most ~10 s
      fail("commit");
      return;
    }
  }
}

}  // namespace lockstep::rec
