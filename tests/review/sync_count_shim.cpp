// Review 2026-12-02, finding L12: counts fsync/fdatasync calls in the process (LD_PRELOAD after
// liblockstep) and prints the count at exit on stdout: "syncs N".
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace {
std::atomic<int> g_syncs{0};
struct Report {
  ~Report() { printf("syncs %d\n", g_syncs.load()); fflush(stdout); }
} g_report;
}  // namespace

extern "C" int fdatasync(int fd) {
  g_syncs++;
  static auto real = reinterpret_cast<int (*)(int)>(dlsym(RTLD_NEXT, "fdatasync"));
  return real ? real(fd) : 0;
}
extern "C" int fsync(int fd) {
  g_syncs++;
  static auto real = reinterpret_cast<int (*)(int)>(dlsym(RTLD_NEXT, "fsync"));
  return real ? real(fd) : 0;
}
