// The second seed scenario: a packed Ulysses all-to-all (q, k, v in one exchange, as grouped
// ncclSend/ncclRecv to every peer) captured into a CUDA graph and replayed, next to a
// tensor-parallel all_reduce on a second communicator. Uses the CUDA *runtime* API for streams
// and graphs, as PyTorch does, and NCCL; builds for the CPU fixture and for a GPU box.
//
//   graph_alltoall [--replays R] [--elems E] [--invert-at K]
//     --replays R    graph replays (default 5), each followed by the TP all_reduce
//     --elems E      elements per peer per q/k/v (default 256)
//     --invert-at K  at replay K (1-based) the last rank issues the TP all_reduce *before* the
//                    replay: a cross-communicator order inversion on one stream, which hangs
// Every replay's output is checked against the expected exchange; exit status 1 on a mismatch.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/bootstrap.h"
#include "common/check.h"

namespace {

// q, k and v packed per peer: [peer][qkv][elem]
float value(int src, int dst, int qkv, int i, int replay) { return float(src * 1000 + dst * 100 + qkv * 10 + i % 7 + replay); }

__attribute__((noinline)) void ulysses_packed_qkv_all_to_all(float* send, float* recv, size_t per_peer, int P,
                                                            ncclComm_t sp, cudaStream_t s) {
  NCCL_CHECK(ncclGroupStart());
  for (int p = 0; p < P; ++p) {
    NCCL_CHECK(ncclSend(send + p * per_peer, per_peer, ncclFloat32, p, sp, s));
    NCCL_CHECK(ncclRecv(recv + p * per_peer, per_peer, ncclFloat32, p, sp, s));
  }
  NCCL_CHECK(ncclGroupEnd());
}

__attribute__((noinline)) void tensor_parallel_all_reduce(float* x, size_t n, ncclComm_t tp, cudaStream_t s) {
  NCCL_CHECK(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, tp, s));
}

int int_arg(int& i, int argc, char** argv) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s needs a value\n", argv[i]);
    std::exit(2);
  }
  char* end = nullptr;
  long v = std::strtol(argv[++i], &end, 10);
  if (*end || v < 1) {
    std::fprintf(stderr, "invalid value for %s: %s\n", argv[i - 1], argv[i]);
    std::exit(2);
  }
  return int(v);
}

}  // namespace

int main(int argc, char** argv) {
  int replays = 5, elems = 256, invert_at = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--replays") replays = int_arg(i, argc, argv);
    else if (a == "--elems") elems = int_arg(i, argc, argv);
    else if (a == "--invert-at") invert_at = int_arg(i, argc, argv);
    else {
      std::fprintf(stderr, "usage: graph_alltoall [--replays R] [--elems E] [--invert-at K]\n");
      return 2;
    }
  }
  lockstep_examples::WorldInfo w;
  ncclUniqueId id;
  try {
    w = lockstep_examples::world_from_env();
    int ndev = 0;
    CUDART_CHECK(cudaGetDeviceCount(&ndev));
    CUDART_CHECK(cudaSetDevice(w.local_rank % ndev));
    id = lockstep_examples::exchange_unique_id("graph_alltoall");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graph_alltoall: %s\n", e.what());
    return 2;
  }
  const int P = w.world_size, me = w.rank;
  const size_t per_peer = size_t(3) * elems;
  ncclComm_t sp, tp;
  NCCL_CHECK(ncclCommInitRank(&sp, P, id, me));
  NCCL_CHECK(ncclCommSplit(sp, 0, me, &tp, nullptr));  // the TP group (all ranks here)

  cudaStream_t s;
  CUDART_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *send, *recv, *act;
  CUDART_CHECK(cudaMalloc(reinterpret_cast<void**>(&send), per_peer * P * sizeof(float)));
  CUDART_CHECK(cudaMalloc(reinterpret_cast<void**>(&recv), per_peer * P * sizeof(float)));
  CUDART_CHECK(cudaMalloc(reinterpret_cast<void**>(&act), sizeof(float)));

  // Capture once (the NCCL calls happen here, on the host), replay many times.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDART_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  ulysses_packed_qkv_all_to_all(send, recv, per_peer, P, sp, s);
  CUDART_CHECK(cudaStreamEndCapture(s, &graph));
  CUDART_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  std::vector<float> h(per_peer * P);
  int bad = 0;
  for (int r = 1; r <= replays; ++r) {
    for (int p = 0; p < P; ++p)
      for (int q = 0; q < 3; ++q)
        for (int i = 0; i < elems; ++i) h[p * per_peer + q * elems + i] = value(me, p, q, i, r);
    CUDART_CHECK(cudaMemcpy(send, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    float one = 1;
    CUDART_CHECK(cudaMemcpy(act, &one, sizeof one, cudaMemcpyHostToDevice));
    bool invert = r == invert_at && me == P - 1;
    if (invert) {
      std::printf("rank %d: replay %d: issuing the TP all_reduce before the graph replay\n", me, r);
      std::fflush(stdout);
      tensor_parallel_all_reduce(act, 1, tp, s);
    }
    CUDART_CHECK(cudaGraphLaunch(exec, s));
    if (!invert) tensor_parallel_all_reduce(act, 1, tp, s);
    CUDART_CHECK(cudaStreamSynchronize(s));
    CUDART_CHECK(cudaMemcpy(h.data(), recv, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int p = 0; p < P && bad < 5; ++p)
      for (int q = 0; q < 3; ++q)
        for (int i = 0; i < elems; ++i) {
          float want = value(p, me, q, i, r), got = h[p * per_peer + q * elems + i];
          if (got != want && bad++ < 5)
            std::fprintf(stderr, "rank %d replay %d: from rank %d qkv %d elem %d: expected %g, got %g\n", me, r, p, q, i,
                         want, got);
        }
    float sum = 0;
    CUDART_CHECK(cudaMemcpy(&sum, act, sizeof sum, cudaMemcpyDeviceToHost));
    if (sum != float(P) && bad++ < 5)
      std::fprintf(stderr, "rank %d replay %d: TP all_reduce: expected %d, got %g\n", me, r, P, sum);
  }
  std::printf("rank %d: %d graph replays %s\n", me, replays, bad ? "had WRONG results" : "exchanged the right data");
  CUDART_CHECK(cudaGraphExecDestroy(exec));
  CUDART_CHECK(cudaGraphDestroy(graph));
  NCCL_CHECK(ncclCommDestroy(tp));
  NCCL_CHECK(ncclCommDestroy(sp));
  return bad ? 1 : 0;
}
