// Reaches NCCL only through an extension library loaded at run time, as Python reaches it
// through torch._C: this executable does not link libnccl.
//   probe_dlopen global|local EXTENSION.so
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: probe_dlopen global|local EXTENSION.so\n");
    return 1;
  }
  int flags = RTLD_NOW | (strcmp(argv[1], "global") == 0 ? RTLD_GLOBAL : RTLD_LOCAL);
  void* h = dlopen(argv[2], flags);
  if (!h) {
    fprintf(stderr, "probe_dlopen: %s\n", dlerror());
    return 6;
  }
  auto run = reinterpret_cast<int (*)()>(dlsym(h, "probe_ext_run"));
  return run ? run() : 7;
}
