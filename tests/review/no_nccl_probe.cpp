// Review 2026-12-02, finding L5: a program that does not link NCCL and asks the dynamic linker
// whether NCCL is there (optional support: a weak reference, or dlsym(RTLD_DEFAULT, ...)).
// Without the recorder it prints "absent" everywhere; its output must be the same under the recorder.
#include <dlfcn.h>

#include <cstdio>

extern "C" int ncclCommInitRank(void**, int, char[128], int) __attribute__((weak));

int main() {
  const bool weak_bound = ncclCommInitRank != nullptr;
  const bool found = dlsym(RTLD_DEFAULT, "ncclCommInitRank") != nullptr ||
                     dlsym(RTLD_DEFAULT, "ncclAllReduce") != nullptr;
  printf("weak reference: %s\n", weak_bound ? "nccl present" : "nccl absent");
  printf("dlsym(RTLD_DEFAULT): %s\n", found ? "nccl present" : "nccl absent");
  // The CUDA driver and runtime entry points liblockstep exports, likewise.
  const bool driver = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2") != nullptr ||
                      dlsym(RTLD_DEFAULT, "cuGraphLaunch") != nullptr;
  const bool runtime = dlsym(RTLD_DEFAULT, "cudaGraphLaunch") != nullptr ||
                       dlsym(RTLD_DEFAULT, "cudaStreamSynchronize") != nullptr;
  printf("dlsym(RTLD_DEFAULT): %s\n", driver ? "cuda driver present" : "cuda driver absent");
  printf("dlsym(RTLD_DEFAULT): %s\n", runtime ? "cuda runtime present" : "cuda runtime absent");
  return 0;
}
