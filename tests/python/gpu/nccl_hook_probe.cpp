// Test-only LD_PRELOAD probe for the GPU machine: hooks a few NCCL collectives, captures the
// calling thread's Python frames exactly as the recorder does (inside the hook, GIL as torch
// left it), appends them to $PROBE_OUT.<pid>, and forwards to the real NCCL (found the way DESIGN.md
// says: the libnccl.so.2 torch loaded RTLD_LOCAL, via RTLD_NOLOAD). Not the recorder.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "python_frames.h"

namespace {

std::mutex g_mu;

void* real(const char* name) {
  void* h = dlopen("libnccl.so.2", RTLD_NOLOAD | RTLD_NOW);
  void* f = h ? dlsym(h, name) : nullptr;
  return f ? f : dlsym(RTLD_NEXT, name);
}

void report(const char* op) {
  lockstep::PyFrameRaw raw[64];
  const size_t n = lockstep::capture_python_frames(raw, 64);
  static auto gil_check = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_Check"));
  const int gil = gil_check ? gil_check() : -1;
  std::lock_guard<std::mutex> g(g_mu);
  // One file per process (torchrun runs several): $PROBE_OUT.<pid>
  char path[4096];
  const char* base = getenv("PROBE_OUT");
  if (base) snprintf(path, sizeof path, "%s.%d", base, static_cast<int>(getpid()));
  FILE* f = base ? fopen(path, "a") : stderr;
  if (!f) return;
  fprintf(f, "op %s gil=%d frames=%zu\n", op, gil, n);
  for (size_t i = 0; i < n; ++i) {
    const lockstep::PyFrameInfo fi = lockstep::resolve_python_frame(raw[i]);
    fprintf(f, "  %s\t%s\t%d\n", fi.function.c_str(), fi.file.c_str(), fi.line);
  }
  if (f != stderr) fclose(f);
}

using Coll = int (*)(const void*, void*, size_t, int, int, void*, void*);

}  // namespace

extern "C" __attribute__((visibility("default"))) int ncclAllReduce(const void* s, void* r,
                                                                      size_t n, int t, int op,
                                                                      void* comm, void* stream) {
  report("all_reduce");
  static Coll f = reinterpret_cast<Coll>(real("pncclAllReduce"));
  return f(s, r, n, t, op, comm, stream);
}

extern "C" __attribute__((visibility("default"))) int ncclReduceScatter(const void* s, void* r,
                                                                          size_t n, int t, int op,
                                                                          void* comm,
                                                                          void* stream) {
  report("reduce_scatter");
  static Coll f = reinterpret_cast<Coll>(real("pncclReduceScatter"));
  return f(s, r, n, t, op, comm, stream);
}
