#include "write_errno_vfs.h"

#include "fd_identity.h"

#include <errno.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cstring>

#include <atomic>
#include <mutex>

namespace lockstep::rec {
namespace {

thread_local int t_last_errno = 0;
std::atomic<uint64_t> g_io_returned{0};  // writes, truncates and syncs that returned
sqlite3_vfs* g_base = nullptr;
bool g_unix = false;  // the base is SQLite's unix VFS (its file's descriptor can be checked)
sqlite3_vfs g_vfs;

// The wrapped file; the base VFS's file follows it in the same allocation (szOsFile).
struct File {
  sqlite3_file base;
  sqlite3_file* real;
  // The descriptor the base file reads and writes (fd_identity.h). fd -1: not known (a base
  // VFS other than SQLite's unix VFS): not checked.
  FdIdentity id;
};
sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

// The first fields of SQLite's unixFile (os_unix.c, the same since 3.7): its descriptor follows
// the methods, the VFS and the inode pointers. Trusted only once fstat of it names the file
// just opened by name.
struct UnixFileHead {
  const sqlite3_io_methods* methods;
  sqlite3_vfs* vfs;
  void* inode;
  int h;
};

std::atomic<bool> g_descriptor_lost{false};

// Whether the file's descriptor still names the file opened (fstat: async-signal-safe).
bool ours(sqlite3_file* f) {
  const FdIdentity& id = reinterpret_cast<File*>(f)->id;
  if (id.fd < 0 || id.ours()) return true;
  g_descriptor_lost.store(true, std::memory_order_relaxed);
  return false;
}
// A call on a descriptor that is no longer ours fails as a write would on a closed descriptor.
int lost() {
  errno = EBADF;
  t_last_errno = EBADF;
  return SQLITE_IOERR;
}

int note(int rc) {
  g_io_returned.fetch_add(1, std::memory_order_relaxed);
  if (rc != SQLITE_OK && errno != 0) t_last_errno = errno;
  return rc;
}

// Closing a descriptor that is no longer ours would close the program's file: the base file is
// left as it is (its memory goes with SQLite's; the process keeps a few bytes).
int x_close(sqlite3_file* f) { return ours(f) ? real(f)->pMethods->xClose(real(f)) : SQLITE_OK; }
int x_read(sqlite3_file* f, void* b, int n, sqlite3_int64 o) {
  if (!ours(f)) return lost();
  return real(f)->pMethods->xRead(real(f), b, n, o);
}
int x_write(sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
  if (!ours(f)) return note(lost());
  errno = 0;
  return note(real(f)->pMethods->xWrite(real(f), b, n, o));
}
int x_truncate(sqlite3_file* f, sqlite3_int64 size) {
  if (!ours(f)) return note(lost());
  errno = 0;
  return note(real(f)->pMethods->xTruncate(real(f), size));
}
int x_sync(sqlite3_file* f, int flags) {
  if (!ours(f)) return note(lost());
  errno = 0;
  return note(real(f)->pMethods->xSync(real(f), flags));
}
int x_file_size(sqlite3_file* f, sqlite3_int64* s) {
  if (!ours(f)) return lost();
  return real(f)->pMethods->xFileSize(real(f), s);
}
// Locks are fcntl locks on the descriptor: on the program's file they would be the program's.
int x_lock(sqlite3_file* f, int l) { return ours(f) ? real(f)->pMethods->xLock(real(f), l) : SQLITE_IOERR_LOCK; }
int x_unlock(sqlite3_file* f, int l) { return ours(f) ? real(f)->pMethods->xUnlock(real(f), l) : SQLITE_OK; }
int x_check_reserved(sqlite3_file* f, int* out) {
  if (!ours(f)) return lost();
  return real(f)->pMethods->xCheckReservedLock(real(f), out);
}
int x_file_control(sqlite3_file* f, int op, void* arg) {
  if (!ours(f)) return SQLITE_NOTFOUND;  // a size hint would ftruncate/fallocate the program's file
  return real(f)->pMethods->xFileControl(real(f), op, arg);
}
int x_sector_size(sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); }
int x_device_characteristics(sqlite3_file* f) {
  return real(f)->pMethods->xDeviceCharacteristics(real(f));
}
// WAL and memory-mapped I/O: forwarded when the base file has them (the trace uses neither).
int x_shm_map(sqlite3_file* f, int pg, int sz, int extend, void volatile** pp) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  return m->iVersion >= 2 && m->xShmMap ? m->xShmMap(real(f), pg, sz, extend, pp) : SQLITE_IOERR;
}
int x_shm_lock(sqlite3_file* f, int off, int n, int flags) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  return m->iVersion >= 2 && m->xShmLock ? m->xShmLock(real(f), off, n, flags) : SQLITE_IOERR;
}
void x_shm_barrier(sqlite3_file* f) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  if (m->iVersion >= 2 && m->xShmBarrier) m->xShmBarrier(real(f));
}
int x_shm_unmap(sqlite3_file* f, int del) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  return m->iVersion >= 2 && m->xShmUnmap ? m->xShmUnmap(real(f), del) : SQLITE_OK;
}
int x_fetch(sqlite3_file* f, sqlite3_int64 o, int n, void** pp) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  if (m->iVersion >= 3 && m->xFetch) return m->xFetch(real(f), o, n, pp);
  *pp = nullptr;
  return SQLITE_OK;
}
int x_unfetch(sqlite3_file* f, sqlite3_int64 o, void* p) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  return m->iVersion >= 3 && m->xUnfetch ? m->xUnfetch(real(f), o, p) : SQLITE_OK;
}

const sqlite3_io_methods kMethods = {
    3,           x_close,     x_read,       x_write,       x_truncate,
    x_sync,      x_file_size, x_lock,       x_unlock,      x_check_reserved,
    x_file_control, x_sector_size, x_device_characteristics, x_shm_map, x_shm_lock,
    x_shm_barrier, x_shm_unmap, x_fetch,    x_unfetch,
};

int x_open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* file, int flags, int* out_flags) {
  auto* f = reinterpret_cast<File*>(file);
  f->base.pMethods = nullptr;
  f->real = reinterpret_cast<sqlite3_file*>(f + 1);
  f->real->pMethods = nullptr;
  f->id = FdIdentity{};
  errno = 0;
  int rc = note(g_base->xOpen(g_base, name, f->real, flags, out_flags));
  if (f->real->pMethods) f->base.pMethods = &kMethods;  // then SQLite closes it through us
  // Its descriptor, when the base is SQLite's unix VFS and the descriptor names the file opened.
  struct stat by_name;
  if (rc == SQLITE_OK && name && g_unix) {
    const FdIdentity id = FdIdentity::of(reinterpret_cast<const UnixFileHead*>(f->real)->h);
    if (id.fd >= 0 && stat(name, &by_name) == 0 && id.dev == by_name.st_dev && id.ino == by_name.st_ino) f->id = id;
  }
  return rc;
}
int x_delete(sqlite3_vfs*, const char* name, int sync_dir) {
  return g_base->xDelete(g_base, name, sync_dir);
}
int x_access(sqlite3_vfs*, const char* name, int flags, int* out) {
  return g_base->xAccess(g_base, name, flags, out);
}
int x_full_pathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return g_base->xFullPathname(g_base, name, n, out);
}

}  // namespace

uint64_t write_calls_returned() { return g_io_returned.load(std::memory_order_relaxed); }

bool trace_descriptor_lost() { return g_descriptor_lost.load(std::memory_order_relaxed); }

const char* write_errno_vfs_name() {
  static const char* name = [] () -> const char* {
    g_base = sqlite3_vfs_find(nullptr);
    if (!g_base) return nullptr;
    g_unix = std::strcmp(g_base->zName, "unix") == 0;
    g_vfs = *g_base;
    g_vfs.pNext = nullptr;
    g_vfs.zName = "lockstep-errno";
    g_vfs.szOsFile = int(sizeof(File)) + g_base->szOsFile;
    g_vfs.xOpen = x_open;
    g_vfs.xDelete = x_delete;
    g_vfs.xAccess = x_access;
    g_vfs.xFullPathname = x_full_pathname;
    return sqlite3_vfs_register(&g_vfs, 0) == SQLITE_OK ? g_vfs.zName : nullptr;
  }();
  return name;
}

int last_write_errno() { return t_last_errno; }
void clear_last_write_errno() { t_last_errno = 0; }

}  // namespace lockstep::rec
