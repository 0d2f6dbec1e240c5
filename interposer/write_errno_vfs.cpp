#include "write_errno_vfs.h"

#include <errno.h>
#include <sqlite3.h>

#include <atomic>
#include <mutex>

namespace lockstep::rec {
namespace {

thread_local int t_last_errno = 0;
std::atomic<uint64_t> g_io_returned{0};  // writes, truncates and syncs that returned
sqlite3_vfs* g_base = nullptr;
sqlite3_vfs g_vfs;

// The wrapped file; the base VFS's file follows it in the same allocation (szOsFile).
struct File {
  sqlite3_file base;
  sqlite3_file* real;
};
sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

int note(int rc) {
  g_io_returned.fetch_add(1, std::memory_order_relaxed);
  if (rc != SQLITE_OK && errno != 0) t_last_errno = errno;
  return rc;
}

int x_close(sqlite3_file* f) { return real(f)->pMethods->xClose(real(f)); }
int x_read(sqlite3_file* f, void* b, int n, sqlite3_int64 o) {
  return real(f)->pMethods->xRead(real(f), b, n, o);
}
int x_write(sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
  errno = 0;
  return note(real(f)->pMethods->xWrite(real(f), b, n, o));
}
int x_truncate(sqlite3_file* f, sqlite3_int64 size) {
  errno = 0;
  return note(real(f)->pMethods->xTruncate(real(f), size));
}
int x_sync(sqlite3_file* f, int flags) {
  errno = 0;
  return note(real(f)->pMethods->xSync(real(f), flags));
}
int x_file_size(sqlite3_file* f, sqlite3_int64* s) { return real(f)->pMethods->xFileSize(real(f), s); }
int x_lock(sqlite3_file* f, int l) { return real(f)->pMethods->xLock(real(f), l); }
int x_unlock(sqlite3_file* f, int l) { return real(f)->pMethods->xUnlock(real(f), l); }
int x_check_reserved(sqlite3_file* f, int* out) {
  return real(f)->pMethods->xCheckReservedLock(real(f), out);
}
int x_file_control(sqlite3_file* f, int op, void* arg) {
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
  errno = 0;
  int rc = note(g_base->xOpen(g_base, name, f->real, flags, out_flags));
  if (f->real->pMethods) f->base.pMethods = &kMethods;  // then SQLite closes it through us
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

const char* write_errno_vfs_name() {
  static const char* name = [] () -> const char* {
    g_base = sqlite3_vfs_find(nullptr);
    if (!g_base) return nullptr;
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
