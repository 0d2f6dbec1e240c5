// LD_PRELOAD shim for the recorder's fault tests: makes writes to trace files
// (*.lockstep.sqlite and its journal) fail with a chosen errno, as a full disk (ENOSPC), a
// dying disk (EIO) or a filesystem remounted read-only (EROFS) would. Other files (the
// program's own output) are untouched.
//   LOCKSTEP_TEST_FAIL_ERRNO        errno to fail with (number)
//   LOCKSTEP_TEST_FAIL_AFTER_BYTES  bytes written to trace files before the first failure
//   LOCKSTEP_TEST_FAIL_COUNT        failing writes, then writes succeed again (0: fail forever)
//   LOCKSTEP_TEST_STALL_WRITER_S    the recorder's writer thread's writes to trace files first
//                                   sleep this long (a dead network file system)
//   LOCKSTEP_TEST_SLOW_WRITER_MS    ... each sleep this many milliseconds (a slow one)
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

long env_long(const char* name, long dflt) {
  const char* v = getenv(name);
  return v && *v ? strtol(v, nullptr, 10) : dflt;
}

std::atomic<long> g_written{0};
std::atomic<long> g_failed{0};

bool is_trace_fd(int fd) {
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  return strstr(path, ".lockstep.sqlite") != nullptr;
}

void maybe_stall(int fd) {
  static const long stall = env_long("LOCKSTEP_TEST_STALL_WRITER_S", 0);
  static const long slow_ms = env_long("LOCKSTEP_TEST_SLOW_WRITER_MS", 0);
  if ((stall <= 0 && slow_ms <= 0) || !is_trace_fd(fd)) return;
  char name[16] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) != 0 ||
      strcmp(name, "lockstep-writer") != 0)
    return;
  if (stall > 0) sleep(unsigned(stall));
  if (slow_ms > 0) usleep(useconds_t(slow_ms) * 1000);
}

// true: this write must fail (errno set).
bool should_fail(int fd, size_t count) {
  maybe_stall(fd);
  static const int err = int(env_long("LOCKSTEP_TEST_FAIL_ERRNO", 0));
  static const long after = env_long("LOCKSTEP_TEST_FAIL_AFTER_BYTES", 0);
  static const long limit = env_long("LOCKSTEP_TEST_FAIL_COUNT", 0);
  if (!err || !is_trace_fd(fd)) return false;
  if (g_written.load() < after) {
    g_written.fetch_add(long(count));
    return false;
  }
  if (limit > 0 && g_failed.load() >= limit) return false;
  g_failed.fetch_add(1);
  errno = err;
  return true;
}

template <typename F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {
ssize_t write(int fd, const void* buf, size_t count) {
  static auto real = next<ssize_t (*)(int, const void*, size_t)>("write");
  if (should_fail(fd, count)) return -1;
  return real(fd, buf, count);
}
ssize_t pwrite(int fd, const void* buf, size_t count, off_t off) {
  static auto real = next<ssize_t (*)(int, const void*, size_t, off_t)>("pwrite");
  if (should_fail(fd, count)) return -1;
  return real(fd, buf, count, off);
}
ssize_t pwrite64(int fd, const void* buf, size_t count, off64_t off) {
  static auto real = next<ssize_t (*)(int, const void*, size_t, off64_t)>("pwrite64");
  if (should_fail(fd, count)) return -1;
  return real(fd, buf, count, off);
}
}
