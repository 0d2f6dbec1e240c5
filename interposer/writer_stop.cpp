// Stop handling: why a write failed (StopReason), SIGXFSZ kept off the application, and the
// stop that follows a failure, recorded in the file's meta (writer.h).
#include "writer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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

void Writer::fail(const char* what) {
  if (failed_.load()) return;
  const int rc = sqlite3_extended_errcode(db_);
  // The errno of the failed write itself (write_errno_vfs.h); SQLite's own when it has none.
  int sys = last_write_errno();
  if (!sys) sys = sqlite3_system_errno(db_);
  std::string detail = std::string(what) + ": " + sqlite3_errmsg(db_);
  if (sys) detail += std::string(" (") + strerror(sys) + ")";
  if (trace_descriptor_lost())
    detail += "; the program closed the trace's descriptor and opened another file under its number, which was "
              "left untouched";
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
  // The stop point goes with the reason when both fit; the reason alone when not (readers then
  // place the stop after the last seq the file holds).
  for (int attempt = 0; attempt < 4; attempt++) {
    if (attempt == 2) sqlite3_exec(db_, "PRAGMA journal_mode=MEMORY", nullptr, nullptr, nullptr);
    if (write_stop_meta(why, detail, true) || write_stop_meta(why, detail, false)) break;
    usleep(10000);
  }
}

bool Writer::write_stop_meta(StopReason why, const std::string& detail, bool with_stop_point) {
  if (!tables_ready_) return false;
  if (sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return false;
  // Free the reserved pages first: the rows below take them instead of growing the file.
  sqlite3_exec(db_, schema::kReleaseStopReserveSql, nullptr, nullptr, nullptr);
  const std::pair<const char*, std::string> rows[] = {
      {schema::meta::kRecorderStopped, stop_reason_name(why)},
      {schema::meta::kRecorderStoppedDetail, detail},
      {schema::meta::kRecorderStoppedMonoNs, std::to_string(mono_ns())},
      {schema::meta::kDroppedRecords, std::to_string(dropped_.load())},
  };
  bool ok = true;
  for (const auto& [k, v] : rows) ok = ok && tables_.meta(k, v) == SQLITE_DONE;
  ok = ok && advance_generation();
  // Where each communicator's committed records end: every seq from there on is missing.
  int n = 0;
  if (with_stop_point)
    for (const auto& [comm, next_seq] : committed_next_seq_)
      if (ok && n++ < schema::kMaxStopPointRows)
        ok = tables_.drop(comm, next_seq, 0, 0, schema::kDropRecorderStopped) == SQLITE_DONE;
  if (ok && sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK) return true;
  if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  return false;
}

}  // namespace lockstep::rec
