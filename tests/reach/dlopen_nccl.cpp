// Reaches NCCL only through dlopen + dlsym on its handle, as a framework's private loader does:
//   dlopen_nccl local|deepbind|global LIBNCCL
// One rank: three all_reduces and one ncclBcast (NCCL calls its own ncclBroadcast inside, so a
// recorder must record one op, not two), on a stream of the fake driver. Also checks that the
// preloaded dlsym keeps RTLD_NEXT relative to the caller. Exit 0 when every call succeeded.
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>

#include "../harness/driver_stream.h"

#define NEED(x)                                                   \
  do {                                                            \
    if (!(x)) {                                                   \
      fprintf(stderr, "dlopen_nccl: failed: %s (line %d)\n", #x, __LINE__); \
      return 1;                                                   \
    }                                                             \
  } while (0)

template <class F>
F sym(void* h, const char* name) {
  return reinterpret_cast<F>(dlsym(h, name));
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: dlopen_nccl local|deepbind|global LIBNCCL\n");
    return 2;
  }
  int mode = RTLD_NOW | RTLD_LOCAL;
  if (strcmp(argv[1], "deepbind") == 0) mode |= RTLD_DEEPBIND;
  if (strcmp(argv[1], "global") == 0) mode = RTLD_NOW | RTLD_GLOBAL;
  void* h = dlopen(argv[2], mode);
  NEED(h);

  // RTLD_NEXT from this executable: the next definition after it in the global scope. The
  // preloaded dlsym must not change the answer (it is the same as RTLD_DEFAULT's here, since
  // the executable defines neither).
  NEED(dlsym(RTLD_NEXT, "ncclAllReduce") == dlsym(RTLD_DEFAULT, "ncclAllReduce"));
  NEED(dlsym(h, "noSuchNcclSymbol") == nullptr);

  auto get_id = sym<decltype(&ncclGetUniqueId)>(h, "ncclGetUniqueId");
  auto init = sym<decltype(&ncclCommInitRank)>(h, "ncclCommInitRank");
  auto all_reduce = sym<decltype(&ncclAllReduce)>(h, "ncclAllReduce");
  auto bcast = sym<decltype(&ncclBcast)>(h, "pncclBcast");  // the profiling name is hooked too
  auto destroy = sym<decltype(&ncclCommDestroy)>(h, "ncclCommDestroy");
  NEED(get_id && init && all_reduce && bcast && destroy);

  CUstream stream;
  NEED(lockstep_test::driver_stream(&stream));

  ncclUniqueId id;
  ncclComm_t comm;
  NEED(get_id(&id) == ncclSuccess);
  NEED(init(&comm, 1, id, 0) == ncclSuccess);
  float buf[16] = {1};
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
  for (int i = 0; i < 3; i++)
    NEED(all_reduce(buf, buf, 16, ncclFloat32, ncclSum, comm, st) == ncclSuccess);
  NEED(bcast(buf, 8, ncclFloat32, 0, comm, st) == ncclSuccess);
  NEED(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  NEED(destroy(comm) == ncclSuccess);
  printf("dlopen_nccl: ok\n");
  return 0;
}
