// An intermediate shared library linked against libnccl.so.2, as torch._C / libtorch_cuda.so
// are: the probe loads it with dlopen (RTLD_GLOBAL or RTLD_LOCAL) and calls probe_ext_run.
#include <nccl.h>

#include <cstring>

extern "C" __attribute__((visibility("default"), noinline)) int probe_ext_run() {
  ncclUniqueId id;
  memset(&id, 4, sizeof id);
  ncclComm_t c = nullptr;
  static float buf[8];
  if (ncclCommInitRank(&c, 2, id, 0) != ncclSuccess) return 10;
  for (int i = 0; i < 3; i++)
    if (ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, c, nullptr) != ncclSuccess) return 11;
  return ncclCommDestroy(c) == ncclSuccess ? 0 : 12;
}
