// One NCCL program per divergence kind, hang kind and correct pattern, for the end-to-end tests
// of `lockstep analyze` / `check` (tests/cli/e2e_test.cpp). Written against nccl.h and the CUDA
// driver API like a real job; runs on the CPU fixture in CI. Ranks come from the launcher and
// exchange the ncclUniqueId through examples/common/bootstrap.h.
//
//   scenarios MODE      (see kModes below; "hang" modes never finish: the launcher kills them)
#include <cuda.h>
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/bootstrap.h"
#include "common/check.h"
#include "common/device.h"


namespace {

constexpr const char* kModes =
    "clean pipeline inversion | count dtype root redop optype a2a-split p2p-unmatched p2p-count p2p-interleave never "
    "dead cycle killed steady";

struct Job {
  int rank = 0, n = 0;
  ncclComm_t world = nullptr;
  CUstream s0 = nullptr, s1 = nullptr;
  CUdeviceptr a = 0, b = 0;
  static constexpr size_t kElems = 1 << 16;

  void all_reduce(ncclComm_t c, size_t count, CUstream s, ncclDataType_t t = ncclFloat32, ncclRedOp_t op = ncclSum) {
    NCCL_CHECK(ncclAllReduce(reinterpret_cast<void*>(a), reinterpret_cast<void*>(b), count, t, op, c, s));
  }
  void sync(CUstream s) { CU_CHECK(cuStreamSynchronize(s)); }
  // A few ops every member agrees on, completed: the prefix before each divergence.
  void agree(ncclComm_t c, int times = 3) {
    for (int i = 0; i < times; ++i) all_reduce(c, 256, s0);
    sync(s0);
  }
  ncclComm_t split(int color, int key) {
    ncclComm_t out = nullptr;
    NCCL_CHECK(ncclCommSplit(world, color, key, &out, nullptr));
    return out;
  }
  // Grouped sends/receives to every peer: rank i sends (i + j + 1) * 4 elements to rank j, so
  // the splits are uneven yet pair up. `skew` makes rank 1 expect the wrong amount from rank 0.
  void uneven_all_to_all(ncclComm_t c, int n_in_comm, int me, int skew = 0) {
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < n_in_comm; ++j) {
      size_t send = size_t(me + j + 1) * 4, recv = size_t(j + me + 1) * 4;
      if (me == 1 && j == 0) recv += skew;
      NCCL_CHECK(ncclSend(reinterpret_cast<void*>(a), send, ncclFloat32, j, c, s0));
      NCCL_CHECK(ncclRecv(reinterpret_cast<void*>(b + j * 4096), recv, ncclFloat32, j, c, s0));
    }
    NCCL_CHECK(ncclGroupEnd());
  }
  void send(int peer, size_t count, ncclComm_t c) {
    NCCL_CHECK(ncclSend(reinterpret_cast<void*>(a), count, ncclFloat32, peer, c, s0));
  }
  void recv(int peer, size_t count, ncclComm_t c) {
    NCCL_CHECK(ncclRecv(reinterpret_cast<void*>(b), count, ncclFloat32, peer, c, s0));
  }
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "scenarios: %s\nusage: scenarios MODE   (modes: %s)\n", msg.c_str(), kModes);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) usage("one MODE expected");
  std::string mode = argv[1];
  lockstep_examples::WorldInfo w;
  try {
    w = lockstep_examples::world_from_env();
  } catch (const std::exception& e) {
    usage(e.what());
  }
  Job j;
  j.rank = w.rank;
  j.n = w.world_size;
  lockstep_examples::use_local_device(w.local_rank);
  CU_CHECK(cuStreamCreate(&j.s0, CU_STREAM_NON_BLOCKING));
  CU_CHECK(cuStreamCreate(&j.s1, CU_STREAM_NON_BLOCKING));
  CU_CHECK(cuMemAlloc(&j.a, Job::kElems * 8));
  CU_CHECK(cuMemAlloc(&j.b, Job::kElems * 8));
  CU_CHECK(cuMemsetD8(j.a, 0, Job::kElems * 8));
  ncclUniqueId id = lockstep_examples::exchange_unique_id(("scenarios-" + mode).c_str());
  NCCL_CHECK(ncclCommInitRank(&j.world, j.n, id, j.rank));
  const bool r1 = j.rank == 1;

  if (mode == "clean") {
    // Many communicators, splits, cross-comm groups, uneven all-to-alls and point-to-point:
    // every rank agrees, in the same order.
    if (j.n != 4) usage("clean needs 4 ranks");
    ncclComm_t tp = j.split(j.rank / 2, j.rank), dp = j.split(j.rank % 2, j.rank);
    for (int step = 0; step < 4; ++step) {
      NCCL_CHECK(ncclAllGather(reinterpret_cast<void*>(j.a), reinterpret_cast<void*>(j.b), 128, ncclFloat32, tp, j.s0));
      NCCL_CHECK(ncclGroupStart());
      NCCL_CHECK(ncclReduceScatter(reinterpret_cast<void*>(j.a), reinterpret_cast<void*>(j.b), 64, ncclFloat32, ncclSum,
                                   dp, j.s0));
      j.all_reduce(tp, 32, j.s0);
      NCCL_CHECK(ncclGroupEnd());
      j.uneven_all_to_all(j.world, j.n, j.rank);
      // Pipeline neighbours: 0 -> 1 sends 3 messages, 2 -> 3 one, of other sizes.
      if (j.rank % 2 == 0)
        for (int m = 0; m < (j.rank == 0 ? 3 : 1); ++m) j.send(j.rank + 1, 100 + j.rank, j.world);
      else
        for (int m = 0; m < (j.rank == 1 ? 3 : 1); ++m) j.recv(j.rank - 1, 100 + j.rank - 1, j.world);
      NCCL_CHECK(ncclBroadcast(reinterpret_cast<void*>(j.a), reinterpret_cast<void*>(j.b), 16, ncclFloat32, step % j.n,
                               j.world, j.s0));
      j.sync(j.s0);
    }
  } else if (mode == "pipeline") {
    // Point-to-point between neighbour pairs only: 0 <-> 1 and 2 <-> 3, different amounts.
    if (j.n != 4) usage("pipeline needs 4 ranks");
    j.agree(j.world, 1);
    int peer = j.rank ^ 1;
    size_t count = j.rank < 2 ? 1000 : 10;
    for (int mb = 0; mb < (j.rank < 2 ? 4 : 2); ++mb) {
      if (j.rank % 2 == 0) j.send(peer, count, j.world), j.recv(peer, count, j.world);
      else j.recv(peer, count, j.world), j.send(peer, count, j.world);
      j.sync(j.s0);
    }
    j.agree(j.world, 1);
  } else if (mode == "inversion" || mode == "cycle") {
    // Two communicators. Rank 0 issues A then B, rank 1 B then A, no host sync in between.
    // "inversion": each comm on its own stream, so this run completes (a latent deadlock);
    // "cycle": both on one stream, so each rank's second op waits behind its first: deadlock.
    ncclComm_t b = j.split(0, j.rank);
    j.agree(j.world);
    j.agree(b);
    CUstream sb = mode == "inversion" ? j.s1 : j.s0;
    if (!r1) {
      j.all_reduce(j.world, 512, j.s0);
      NCCL_CHECK(ncclAllGather(reinterpret_cast<void*>(j.a), reinterpret_cast<void*>(j.b), 64, ncclFloat32, b, sb));
    } else {
      NCCL_CHECK(ncclAllGather(reinterpret_cast<void*>(j.a), reinterpret_cast<void*>(j.b), 64, ncclFloat32, b, sb));
      j.all_reduce(j.world, 512, j.s0);
    }
    j.sync(j.s0);
    j.sync(sb);
  } else if (mode == "count") {
    j.agree(j.world);
    j.all_reduce(j.world, r1 ? 300 : 256, j.s0);
    j.sync(j.s0);
  } else if (mode == "dtype") {
    j.agree(j.world);
    j.all_reduce(j.world, 256, j.s0, r1 ? ncclFloat16 : ncclFloat32);
    j.sync(j.s0);
  } else if (mode == "redop") {
    j.agree(j.world);
    j.all_reduce(j.world, 256, j.s0, ncclFloat32, r1 ? ncclMax : ncclSum);
    j.sync(j.s0);
  } else if (mode == "root") {
    j.agree(j.world);
    NCCL_CHECK(ncclBroadcast(reinterpret_cast<void*>(j.a), reinterpret_cast<void*>(j.b), 256, ncclFloat32, r1 ? 1 : 0,
                             j.world, j.s0));
    j.sync(j.s0);
  } else if (mode == "optype") {
    j.agree(j.world);
    if (r1)
      NCCL_CHECK(ncclAllGather(reinterpret_cast<void*>(j.a), reinterpret_cast<void*>(j.b), 128, ncclFloat32, j.world, j.s0));
    else
      NCCL_CHECK(ncclReduceScatter(reinterpret_cast<void*>(j.a), reinterpret_cast<void*>(j.b), 128, ncclFloat32, ncclSum,
                                   j.world, j.s0));
    j.sync(j.s0);
  } else if (mode == "a2a-split") {
    j.agree(j.world);
    j.uneven_all_to_all(j.world, j.n, j.rank, /*skew=*/8);
    j.sync(j.s0);
  } else if (mode == "p2p-unmatched") {
    j.agree(j.world);
    if (!r1) j.send(1, 64, j.world), j.send(1, 64, j.world);
    else j.recv(0, 64, j.world);
    j.sync(j.s0);
  } else if (mode == "p2p-count") {
    j.agree(j.world);
    if (!r1) j.send(1, 64, j.world);
    else j.recv(0, 32, j.world);
    j.sync(j.s0);
  } else if (mode == "p2p-interleave") {
    // Rank 0 sends before the all_reduce, rank 1 receives after it: the comm serializes both.
    j.agree(j.world);
    if (!r1) j.send(1, 64, j.world), j.all_reduce(j.world, 256, j.s0);
    else j.all_reduce(j.world, 256, j.s0), j.recv(0, 64, j.world);
    j.sync(j.s0);
  } else if (mode == "never") {
    // The last rank stays in host code (a data loader that never returns) before op 4.
    j.agree(j.world);
    if (j.rank == j.n - 1) pause();
    j.all_reduce(j.world, 256, j.s0);
    j.sync(j.s0);
  } else if (mode == "steady") {
    // A healthy job that runs for a while (analysed live by the tests), then exits cleanly.
    for (int i = 0; i < 20000; ++i) j.all_reduce(j.world, 16, j.s0), j.sync(j.s0);
  } else if (mode == "killed") {
    // Rank 1 is SIGKILLed (no exit record; what its recorder had not flushed is lost) after
    // many completed all_reduces; rank 0 then blocks in one more, alone.
    for (int i = 0; i < 2000; ++i) j.all_reduce(j.world, 16, j.s0), j.sync(j.s0);
    if (r1) kill(getpid(), SIGKILL);
    j.all_reduce(j.world, 16, j.s0);
    j.sync(j.s0);
  } else if (mode == "dead") {
    // Rank 1 dies before op 4 (abort: the recorder flushes with exit_reason SIGABRT).
    j.agree(j.world);
    if (r1) std::abort();
    j.all_reduce(j.world, 256, j.s0);
    j.sync(j.s0);
  } else {
    usage("unknown mode " + mode);
  }
  NCCL_CHECK(ncclCommDestroy(j.world));
  std::printf("rank %d: %s done\n", j.rank, mode.c_str());
  return 0;
}
