// One rank of the profiler-plugin tests (tests/plugin/test_plugin.py), run twice with RANK /
// WORLD_SIZE / LOCKSTEP_RENDEZVOUS_DIR set. Built twice: plugin_ranks links the fixture's
// libnccl.so.2 (the interposer can hook it), plugin_ranks_static links a static copy of the same
// NCCL into the executable (a "private" NCCL no LD_PRELOAD can reach, as a statically linked
// NCCL in conda PyTorch). The schedule: 3 all_reduce, all_gather, broadcast, reduce_scatter, a
// grouped send+recv with the peer (an all_to_all), a grouped pair of all_reduces (coalesced).
// With --diverge, rank 1 gives its third all_reduce another datatype of the same size (the
// fixture fails the pair with LOCKSTEP_FIXTURE_MISMATCH=error; the analyzer must name it), then
// exits.
// Exit 0 when every call succeeded and the results are right.
#include <cuda.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../../examples/common/bootstrap.h"
#include "../harness/driver_stream.h"

#define NEED(x)                                                                  \
  do {                                                                           \
    if (!(x)) {                                                                  \
      fprintf(stderr, "plugin_ranks: failed: %s (line %d)\n", #x, __LINE__);     \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

int main(int argc, char** argv) {
  bool diverge = argc > 1 && strcmp(argv[1], "--diverge") == 0;
  lockstep_examples::WorldInfo w;
  ncclUniqueId id;
  try {
    w = lockstep_examples::world_from_env();
    id = lockstep_examples::exchange_unique_id("plugin_ranks");
  } catch (const std::exception& e) {
    fprintf(stderr, "plugin_ranks: %s\n", e.what());
    return 1;
  }
  CUstream stream;
  NEED(lockstep_test::driver_stream(&stream));
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);

  ncclComm_t comm;
  NEED(ncclCommInitRank(&comm, w.world_size, id, w.rank) == ncclSuccess);
  const int P = w.world_size, peer = (w.rank + 1) % P;
  std::vector<float> a(1024, 1.0f), g(256 * P), rs(128), sendb(64, float(w.rank)), recvb(64);
  std::vector<int32_t> b(64, w.rank == 0 ? 7 : 0);
  for (int i = 0; i < 3; i++) {
    ncclDataType_t t = diverge && w.rank == 1 && i == 2 ? ncclInt32 : ncclFloat32;
    NEED(ncclAllReduce(a.data(), a.data(), a.size(), t, ncclSum, comm, st) == ncclSuccess);
  }
  if (diverge) {  // the fixture fails the mismatched pair (LOCKSTEP_FIXTURE_MISMATCH=error): stop here
    cuStreamSynchronize(stream);
    printf("plugin_ranks: rank %d diverged\n", w.rank);
    return 0;
  }
  NEED(ncclAllGather(a.data(), g.data(), 256, ncclFloat32, comm, st) == ncclSuccess);
  NEED(ncclBroadcast(b.data(), b.data(), b.size(), ncclInt32, 0, comm, st) == ncclSuccess);
  NEED(ncclReduceScatter(a.data(), rs.data(), rs.size(), ncclFloat32, ncclMax, comm, st) == ncclSuccess);
  NEED(ncclGroupStart() == ncclSuccess);
  NEED(ncclSend(sendb.data(), sendb.size(), ncclFloat32, peer, comm, st) == ncclSuccess);
  NEED(ncclRecv(recvb.data(), recvb.size(), ncclFloat32, (w.rank + P - 1) % P, comm, st) == ncclSuccess);
  NEED(ncclGroupEnd() == ncclSuccess);
  NEED(ncclGroupStart() == ncclSuccess);
  NEED(ncclAllReduce(rs.data(), rs.data(), rs.size(), ncclFloat32, ncclSum, comm, st) == ncclSuccess);
  NEED(ncclAllReduce(sendb.data(), sendb.data(), sendb.size(), ncclFloat32, ncclSum, comm, st) == ncclSuccess);
  NEED(ncclGroupEnd() == ncclSuccess);
  NEED(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  NEED(b[0] == 7);
  NEED(recvb[0] == float((w.rank + P - 1) % P) * 1.0f);
  NEED(ncclCommDestroy(comm) == ncclSuccess);
  printf("plugin_ranks: rank %d ok\n", w.rank);
  return 0;
}
