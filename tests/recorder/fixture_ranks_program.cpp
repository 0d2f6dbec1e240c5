// One rank of a multi-rank program run by lockstep-launch on the CPU NCCL fixture, under the
// recorder (recorder_fixture_test.cpp checks the traces). Uses the CUDA runtime for memory and
// streams, as PyTorch does, so the runtime hooks are exercised too.
//   recorder_fixture_program mixed|graph|nonblocking|diverge [N]|many [N]|streams [S N]|torch [N [clean|default|diverge|elsewhere|reuse]]|write_file BYTES DIR
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../examples/common/bootstrap.h"

using namespace lockstep_examples;

#define CHECK(call)                                                                      \
  do {                                                                                   \
    int rc_ = int(call);                                                                 \
    if (rc_ != 0) {                                                                      \
      fprintf(stderr, "rank program: %s failed: %d (line %d)\n", #call, rc_, __LINE__); \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)

namespace {
struct Rank {
  int rank = 0, nranks = 1;
  ncclComm_t world = nullptr;
  cudaStream_t stream = nullptr;
  float* buf = nullptr;  // device memory, big enough for every op here
};

Rank setup() {
  Rank r;
  WorldInfo w = world_from_env();
  r.rank = w.rank;
  r.nranks = w.world_size;
  CHECK(cudaSetDevice(0));
  CHECK(cudaStreamCreate(&r.stream));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&r.buf), 1 << 20));
  ncclUniqueId id = exchange_unique_id("world");
  CHECK(ncclCommInitRank(&r.world, r.nranks, id, r.rank));
  return r;
}
}  // namespace

extern "C" {
// Named call sites the tests look for in the recorded stacks.
__attribute__((noinline)) void train_step(Rank& r) {
  CHECK(ncclAllReduce(r.buf, r.buf, 64, ncclFloat32, ncclSum, r.world, r.stream));
}

__attribute__((noinline)) void exchange_all_to_all(Rank& r) {
  // Uneven splits: rank a sends 4+a+b elements to rank b (and receives 4+b+a from b).
  CHECK(ncclGroupStart());
  size_t off = 0;
  for (int p = 0; p < r.nranks; p++) {
    size_t n = size_t(4 + r.rank + p);
    CHECK(ncclSend(r.buf + off, n, ncclFloat32, p, r.world, r.stream));
    CHECK(ncclRecv(r.buf + 4096 + off, n, ncclFloat32, p, r.world, r.stream));
    off += n;
  }
  CHECK(ncclGroupEnd());
}

int scenario_mixed() {
  Rank r = setup();
  for (int i = 0; i < 3; i++) train_step(r);
  CHECK(ncclAllGather(r.buf, r.buf + 1024, 16, ncclFloat32, r.world, r.stream));
  CHECK(ncclReduceScatter(r.buf, r.buf + 1024, 16, ncclFloat32, ncclSum, r.world, r.stream));
  CHECK(ncclBroadcast(r.buf, r.buf, 32, ncclFloat32, 0, r.world, r.stream));
  exchange_all_to_all(r);
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(r.buf, r.buf, 8, ncclFloat32, ncclSum, r.world, r.stream));
  CHECK(ncclAllReduce(r.buf + 8, r.buf + 8, 16, ncclFloat32, ncclSum, r.world, r.stream));
  CHECK(ncclGroupEnd());
  ncclComm_t half = nullptr;
  CHECK(ncclCommSplit(r.world, r.rank % 2, r.rank, &half, nullptr));
  CHECK(ncclAllReduce(r.buf, r.buf, 4, ncclFloat32, ncclSum, half, r.stream));
  CHECK(cudaStreamSynchronize(r.stream));
  CHECK(ncclCommDestroy(half));
  CHECK(ncclCommDestroy(r.world));
  return 0;
}

int scenario_graph() {
  Rank r = setup();
  train_step(r);
  cudaStream_t cap = nullptr;
  CHECK(cudaStreamCreate(&cap));
  CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal));
  CHECK(ncclAllReduce(r.buf, r.buf, 32, ncclFloat32, ncclSum, r.world, cap));
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(cap, &graph));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(exec, r.stream));
  CHECK(cudaStreamSynchronize(r.stream));
  train_step(r);
  CHECK(cudaStreamSynchronize(r.stream));
  return 0;
}

// A nonblocking communicator (config.blocking = 0): init, ops and a group return
// ncclInProgress, and the caller polls ncclCommGetAsyncError until ncclSuccess, as NCCL's docs
// require before touching the stream.
void wait_enqueued(ncclComm_t c, int rc, int line) {
  if (rc != ncclSuccess && rc != ncclInProgress) {
    fprintf(stderr, "rank program: call failed: %d (line %d)\n", rc, line);
    exit(2);
  }
  ncclResult_t async = ncclInProgress;
  while (async == ncclInProgress) CHECK(ncclCommGetAsyncError(c, &async));
  CHECK(async);
}
int scenario_nonblocking() {
  WorldInfo w = world_from_env();
  CHECK(cudaSetDevice(0));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreate(&stream));
  float* buf = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&buf), 1 << 16));
  ncclUniqueId id = exchange_unique_id("nonblocking");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t c = nullptr;
  int rc = ncclCommInitRankConfig(&c, w.world_size, id, w.rank, &cfg);
  wait_enqueued(c, rc, __LINE__);
  for (int i = 0; i < 3; i++)
    wait_enqueued(c, ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, c, stream), __LINE__);
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, c, stream));
  CHECK(ncclAllReduce(buf + 8, buf + 8, 8, ncclFloat32, ncclSum, c, stream));
  wait_enqueued(c, ncclGroupEnd(), __LINE__);
  CHECK(cudaStreamSynchronize(stream));
  return 0;
}

// The seed's shape in small: both ranks run N matching all-reduces, then rank 0 issues a
// reduce_scatter where rank 1 issues an all_to_all; the fixture (like NCCL) waits forever.
__attribute__((noinline)) void fsdp_post_backward_reduce_scatter(Rank& r) {
  CHECK(ncclReduceScatter(r.buf, r.buf + 1024, 64, ncclBfloat16, ncclSum, r.world, r.stream));
}
__attribute__((noinline)) void ulysses_all_to_all(Rank& r) {
  CHECK(ncclAlltoAll(r.buf, r.buf + 1024, 64, ncclBfloat16, r.world, r.stream));
}
int scenario_diverge(int n) {
  Rank r = setup();
  for (int i = 0; i < n; i++) train_step(r);
  CHECK(cudaStreamSynchronize(r.stream));
  if (r.rank == 0) fsdp_post_backward_reduce_scatter(r);
  else ulysses_all_to_all(r);
  CHECK(cudaStreamSynchronize(r.stream));  // hangs here
  return 0;
}
}

// PyTorch's pattern (ProcessGroupNCCL): after each collective (or group) the issuing thread
// records the work's end event on the op's stream; events come from a small cache and are
// recorded again for later ops (some destroyed and recreated). Ops 51 and 351 record no end
// event (the recorder falls back to its own), every 7th is a group; every 11th end event is
// followed by a record of an event on another stream. With `diverge`, after n matching ops
// (no synchronize) rank 0 issues a reduce_scatter where rank 1 issues an all_to_all, each
// with its end event (`elsewhere`: after an event recorded on another stream); with `reuse`
// that end event is then recorded again on another stream before the op could complete, and
// an all-reduce follows; then the stream is synchronized (hangs). `default`: as `clean`, on the
// legacy default stream (handle 0: PyTorch's collectives with async_op=False, on the current
// stream, unless the program set one); every 17th op is first followed by an event recorded on
// handle 0 of another device (another context's default stream: not the op's signal).
int scenario_torch(int n, const std::string& how) {
  const bool reuse = how == "reuse", elsewhere = how == "elsewhere";
  const bool diverge = how == "diverge" || reuse || elsewhere;
  Rank r = setup();
  const bool on_default = how == "default";
  if (on_default) r.stream = nullptr;
  cudaStream_t other = nullptr;
  CHECK(cudaStreamCreate(&other));
  cudaEvent_t cache[4];
  for (auto& e : cache) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaEvent_t side = nullptr, other_device = nullptr;
  CHECK(cudaEventCreateWithFlags(&side, cudaEventDisableTiming));
  if (on_default) {
    CHECK(cudaSetDevice(1));
    CHECK(cudaEventCreateWithFlags(&other_device, cudaEventDisableTiming));
    CHECK(cudaSetDevice(0));
  }
  for (int i = 0; i < n; i++) {
    cudaEvent_t& end = cache[i % 4];
    if (i % 13 == 12) {  // the cache drops an event and makes a new one
      CHECK(cudaEventDestroy(end));
      CHECK(cudaEventCreateWithFlags(&end, cudaEventDisableTiming));
    }
    if (i % 7 == 6) exchange_all_to_all(r);
    else train_step(r);
    if (on_default && i % 17 == 16) {
      CHECK(cudaSetDevice(1));
      CHECK(cudaEventRecord(other_device, nullptr));
      CHECK(cudaSetDevice(0));
    }
    if (i % 300 != 50) CHECK(cudaEventRecord(end, r.stream));
    if (i % 11 == 10) CHECK(cudaEventRecord(side, other));
  }
  if (diverge) {
    if (r.rank == 0) fsdp_post_backward_reduce_scatter(r);
    else ulysses_all_to_all(r);
    if (elsewhere) CHECK(cudaEventRecord(side, other));  // not the op's stream: not its signal
    CHECK(cudaEventRecord(cache[0], r.stream));
    if (reuse) {
      CHECK(cudaEventRecord(cache[0], other));
      train_step(r);
    }
  }
  CHECK(cudaStreamSynchronize(r.stream));  // hangs after a divergence
  CHECK(cudaStreamSynchronize(other));
  for (auto& e : cache) CHECK(cudaEventDestroy(e));
  CHECK(ncclCommDestroy(r.world));
  printf("rank %d: %d ops done\n", r.rank, n);
  return 0;
}

// Many small ops: a trace that outgrows a small RLIMIT_FSIZE or a tiny filesystem.
int scenario_many(int n) {
  Rank r = setup();
  for (int i = 0; i < n; i++) {
    train_step(r);
    if (i % 256 == 255) CHECK(cudaStreamSynchronize(r.stream));
  }
  CHECK(cudaStreamSynchronize(r.stream));
  CHECK(ncclCommDestroy(r.world));
  printf("rank %d: %d all-reduces done\n", r.rank, n);
  return 0;
}

// One thread issuing round robin on `nstreams` streams (more than a thread's cached streams in
// covering mode), each stream synchronized at the end.
int scenario_streams(int nstreams, int n) {
  Rank r = setup();
  std::vector<cudaStream_t> streams(size_t(nstreams > 0 ? nstreams : 1));
  for (auto& s : streams) CHECK(cudaStreamCreate(&s));
  for (int i = 0; i < n; i++)
    CHECK(ncclAllReduce(r.buf, r.buf, 64, ncclFloat32, ncclSum, r.world, streams[size_t(i) % streams.size()]));
  for (auto& s : streams) CHECK(cudaStreamSynchronize(s));
  CHECK(ncclCommDestroy(r.world));
  printf("rank %d: %d all-reduces on %zu streams done\n", r.rank, n, streams.size());
  return 0;
}

// The program itself writes `bytes` to a file (after some ops): past RLIMIT_FSIZE it must get
// SIGXFSZ with or without the recorder.
int scenario_write_file(long bytes, const char* dir) {
  Rank r = setup();
  for (int i = 0; i < 8; i++) train_step(r);
  CHECK(cudaStreamSynchronize(r.stream));
  std::string path = std::string(dir) + "/rank-" + std::to_string(r.rank) + ".bin";
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) return 3;
  static char chunk[4096];
  for (long done = 0; done < bytes; done += long(sizeof chunk))
    if (fwrite(chunk, 1, sizeof chunk, f) != sizeof chunk || fflush(f) != 0) {
      printf("rank %d: write failed\n", r.rank);
      return 4;
    }
  fclose(f);
  printf("rank %d: wrote %ld bytes\n", r.rank, bytes);
  return 0;
}

int main(int argc, char** argv) {
  std::string s = argc > 1 ? argv[1] : "";
  try {
    if (s == "mixed") return scenario_mixed();
    if (s == "graph") return scenario_graph();
    if (s == "nonblocking") return scenario_nonblocking();
    if (s == "diverge") return scenario_diverge(argc > 2 ? atoi(argv[2]) : 20);
    if (s == "many") return scenario_many(argc > 2 ? atoi(argv[2]) : 1000);
    if (s == "torch")
      return scenario_torch(argc > 2 ? atoi(argv[2]) : 600, argc > 3 ? argv[3] : "clean");
    if (s == "streams") return scenario_streams(argc > 2 ? atoi(argv[2]) : 6, argc > 3 ? atoi(argv[3]) : 600);
    if (s == "write_file" && argc > 3) return scenario_write_file(atol(argv[2]), argv[3]);
  } catch (const std::exception& e) {
    fprintf(stderr, "rank program: %s\n", e.what());
    return 2;
  }
  fprintf(stderr, "usage: recorder_fixture_program mixed|graph|nonblocking|diverge [N]|many [N]|streams [S N]|torch [N [clean|default|diverge|elsewhere|reuse]]|write_file BYTES DIR\n");
  return 1;
}
