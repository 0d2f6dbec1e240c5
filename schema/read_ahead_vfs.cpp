#include "read_ahead_vfs.h"

#include <sqlite3.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

namespace lockstep::trace_file {
namespace {

constexpr sqlite3_int64 kWindow = 256 * 1024;

struct File {
  sqlite3_file base;           // pMethods = &methods
  sqlite3_file* real;          // the unix VFS's file, allocated right after this struct
  unsigned char* window;       // kWindow bytes once used
  sqlite3_int64 window_offset;
  sqlite3_int64 window_bytes;  // valid bytes from window_offset; 0: none
  bool read_ahead;             // main database, read-only, not WAL
  int lock;                    // the lock level held (SQLITE_LOCK_*)
};

sqlite3_vfs* real_vfs = nullptr;
sqlite3_vfs vfs;
sqlite3_io_methods methods;

File* file(sqlite3_file* f) { return reinterpret_cast<File*>(f); }
sqlite3_file* real(sqlite3_file* f) { return file(f)->real; }

int x_close(sqlite3_file* f) {
  int rc = real(f)->pMethods->xClose(real(f));
  sqlite3_free(file(f)->window);
  file(f)->window = nullptr;
  return rc;
}

int x_read(sqlite3_file* f, void* out, int amt, sqlite3_int64 offset) {
  File& ra = *file(f);
  // Only under a shared lock: SQLite reads the header without one when it opens a file, and a
  // window filled then could be a writer's older version of every page.
  if (ra.read_ahead && ra.lock >= SQLITE_LOCK_SHARED && amt > 0 && amt <= kWindow) {
    auto covered = [&] { return offset >= ra.window_offset && offset + amt <= ra.window_offset + ra.window_bytes; };
    if (!covered()) {
      ra.window_bytes = 0;
      sqlite3_int64 size = 0;
      if (!ra.window) ra.window = static_cast<unsigned char*>(sqlite3_malloc64(kWindow));
      const sqlite3_int64 at = offset - offset % kWindow;
      if (ra.window && real(f)->pMethods->xFileSize(real(f), &size) == SQLITE_OK && size > at) {
        const sqlite3_int64 n = size - at < kWindow ? size - at : kWindow;
        if (real(f)->pMethods->xRead(real(f), ra.window, static_cast<int>(n), at) == SQLITE_OK) {
          ra.window_offset = at, ra.window_bytes = n;
          // The file format's write and read versions (header bytes 18, 19): 2 is WAL mode.
          if (at == 0 && n >= 20 && (ra.window[18] == 2 || ra.window[19] == 2)) ra.read_ahead = false, ra.window_bytes = 0;
        }
      }
    }
    if (ra.read_ahead && covered()) {
      std::memcpy(out, ra.window + (offset - ra.window_offset), static_cast<size_t>(amt));
      return SQLITE_OK;
    }
  }
  // Past the end of the file (a short read, zero-filled), a window that could not be read, WAL.
  return real(f)->pMethods->xRead(real(f), out, amt, offset);
}

int x_write(sqlite3_file* f, const void* data, int amt, sqlite3_int64 offset) {
  file(f)->window_bytes = 0;
  return real(f)->pMethods->xWrite(real(f), data, amt, offset);
}
int x_truncate(sqlite3_file* f, sqlite3_int64 size) {
  file(f)->window_bytes = 0;
  return real(f)->pMethods->xTruncate(real(f), size);
}
int x_sync(sqlite3_file* f, int flags) { return real(f)->pMethods->xSync(real(f), flags); }
int x_file_size(sqlite3_file* f, sqlite3_int64* size) { return real(f)->pMethods->xFileSize(real(f), size); }
int x_lock(sqlite3_file* f, int level) {
  int rc = real(f)->pMethods->xLock(real(f), level);
  if (rc == SQLITE_OK && level > file(f)->lock) {
    if (file(f)->lock == SQLITE_LOCK_NONE) file(f)->window_bytes = 0;  // read under this lock only
    file(f)->lock = level;
  }
  return rc;
}
int x_unlock(sqlite3_file* f, int level) {
  // Without a shared lock a writer may change the file: what the window holds is not read again.
  if (level == SQLITE_LOCK_NONE) file(f)->window_bytes = 0;
  int rc = real(f)->pMethods->xUnlock(real(f), level);
  if (level < file(f)->lock) file(f)->lock = level;
  return rc;
}
int x_check_reserved(sqlite3_file* f, int* out) { return real(f)->pMethods->xCheckReservedLock(real(f), out); }
int x_file_control(sqlite3_file* f, int op, void* arg) { return real(f)->pMethods->xFileControl(real(f), op, arg); }
int x_sector_size(sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); }
int x_device(sqlite3_file* f) { return real(f)->pMethods->xDeviceCharacteristics(real(f)); }
int x_shm_map(sqlite3_file* f, int region, int size, int extend, void volatile** out) {
  return real(f)->pMethods->xShmMap(real(f), region, size, extend, out);
}
int x_shm_lock(sqlite3_file* f, int offset, int n, int flags) { return real(f)->pMethods->xShmLock(real(f), offset, n, flags); }
void x_shm_barrier(sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); }
int x_shm_unmap(sqlite3_file* f, int del) { return real(f)->pMethods->xShmUnmap(real(f), del); }
int x_fetch(sqlite3_file* f, sqlite3_int64 offset, int amt, void** out) {
  if (real(f)->pMethods->iVersion < 3) {
    *out = nullptr;
    return SQLITE_OK;
  }
  return real(f)->pMethods->xFetch(real(f), offset, amt, out);
}
int x_unfetch(sqlite3_file* f, sqlite3_int64 offset, void* p) {
  return real(f)->pMethods->iVersion < 3 ? SQLITE_OK : real(f)->pMethods->xUnfetch(real(f), offset, p);
}

int x_open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out_flags) {
  File& ra = *file(f);
  std::memset(&ra, 0, sizeof ra);
  ra.real = reinterpret_cast<sqlite3_file*>(&ra + 1);
  int rc = real_vfs->xOpen(real_vfs, name, ra.real, flags, out_flags);
  // SQLite calls xClose only when pMethods is set: the real file's, then ours.
  if (!ra.real->pMethods) return rc;
  // The shm methods are used only for a WAL file, which the unix VFS's methods (version 3) have.
  if (ra.real->pMethods->iVersion < 2) {
    ra.real->pMethods->xClose(ra.real);
    ra.real->pMethods = nullptr;
    return SQLITE_CANTOPEN;
  }
  ra.read_ahead = (flags & SQLITE_OPEN_MAIN_DB) && (flags & SQLITE_OPEN_READONLY);
  ra.base.pMethods = &methods;
  return rc;
}

// The unix VFS resolves every component of a path with lstat (symbolic links), one metadata call
// per directory level for every file opened: a round trip each on a shared file system, for each
// of 100,000 files. The name is used to find the file's -journal and -wal beside it, which an
// absolute path through linked directories names as well (the same directory). Only a file that
// is itself a link needs resolving (SQLite opens the name O_NOFOLLOW, and its journal is beside
// the target): one lstat tells, and the unix VFS resolves that one.
int x_full_pathname(sqlite3_vfs*, const char* name, int n_out, char* out) {
  struct stat st;
  if (lstat(name, &st) != 0 || S_ISLNK(st.st_mode)) return real_vfs->xFullPathname(real_vfs, name, n_out, out);
  const size_t len = std::strlen(name);
  size_t at = 0;
  if (name[0] != '/') {
    if (!getcwd(out, static_cast<size_t>(n_out))) return SQLITE_CANTOPEN;
    at = std::strlen(out);
    if (at + 1 < static_cast<size_t>(n_out) && (at == 0 || out[at - 1] != '/')) out[at++] = '/';
  }
  if (at + len + 1 > static_cast<size_t>(n_out)) return SQLITE_CANTOPEN;
  std::memcpy(out + at, name, len + 1);
  return SQLITE_OK;
}

}  // namespace

const char* read_ahead_vfs() {
  static std::once_flag once;
  static const char* name = nullptr;
  std::call_once(once, [] {
    real_vfs = sqlite3_vfs_find(nullptr);
    if (!real_vfs || real_vfs->iVersion < 1) return;
    methods = sqlite3_io_methods{3,         x_close,         x_read,         x_write,       x_truncate,     x_sync,
                                 x_file_size, x_lock,        x_unlock,       x_check_reserved, x_file_control, x_sector_size,
                                 x_device,  x_shm_map,       x_shm_lock,     x_shm_barrier, x_shm_unmap,    x_fetch,
                                 x_unfetch};
    vfs = *real_vfs;  // every other method the unix VFS's, with its own pAppData
    vfs.pNext = nullptr;
    vfs.zName = "lockstep-read-ahead";
    vfs.szOsFile = static_cast<int>(sizeof(File)) + real_vfs->szOsFile;
    vfs.xOpen = x_open;
    vfs.xFullPathname = x_full_pathname;
    if (sqlite3_vfs_register(&vfs, 0) == SQLITE_OK) name = vfs.zName;
  });
  return name;
}

}  // namespace lockstep::trace_file
