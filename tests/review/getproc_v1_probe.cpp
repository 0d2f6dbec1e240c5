// Review 2026-12-02, finding L11: how a CUDA 11 runtime (static cudart 11.3-11.8, XLA) gets the
// driver's graph entry points: dlopen(libcuda), dlsym("cuGetProcAddress"), then that function.
// Prints which library the cuGraphLaunch handed out lives in, for the v1 and the v2 path.
//   review_getproc_v1_probe FAKE_DRIVER_PATH
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace {
const char* owner(void* p) {
  Dl_info info{};
  if (!p || !dladdr(p, &info) || !info.dli_fname) return "nothing";
  return strstr(info.dli_fname, "liblockstep") ? "liblockstep" : "the driver";
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 3;
  }
  using V1 = int (*)(const char*, void**, int, unsigned long long);
  using V2 = int (*)(const char*, void**, int, unsigned long long, int*);
  auto v1 = reinterpret_cast<V1>(dlsym(h, "cuGetProcAddress"));
  auto v2 = reinterpret_cast<V2>(dlsym(h, "cuGetProcAddress_v2"));
  if (!v1 || !v2) return 4;
  void* p1 = nullptr;
  void* p2 = nullptr;
  int status = 0;
  if (v2("cuGraphLaunch", &p2, 12000, 0, &status) != 0) return 5;
  if (v1("cuGraphLaunch", &p1, 11080, 0) != 0) return 5;
  printf("v2 cuGraphLaunch from %s\n", owner(p2));
  printf("v1 cuGraphLaunch from %s\n", owner(p1));
  return 0;
}
