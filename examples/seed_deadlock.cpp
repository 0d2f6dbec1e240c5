// The seed deadlock (FSDP x Ulysses x torch.compile), as a C++ program against the CUDA driver
// API and NCCL. Builds for the CPU fixture (default) and, unchanged, for a GPU box
// (-DLOCKSTEP_NCCL_FROM_SYSTEM=ON).
//
// Two ranks run training steps whose collectives are shaped like FSDP + Ulysses: per layer in
// forward an FSDP all_gather (unshard) and two Ulysses all_to_alls (seq->head, head->seq); in
// backward the Ulysses all_to_alls of each layer, the FSDP all_gather prefetch of the next layer
// and the FSDP reduce_scatter of the layer's gradients (post_backward); one all_reduce per step
// (grad norm). Ops 1..3749 match. At op 3750 of the communicator rank 0 issues the
// reduce_scatter of layer 12 (the eager post_backward hook) while rank 1, whose compiled backward
// already runs layer 11, issues its Ulysses all_to_all: the ranks wait for each other forever.
//
//   seed_deadlock [--fixed] [--layers L] [--steps S] [--diverge-at N] [--elems E] [--two-comms]
//     --fixed       same order on both ranks: every step completes
//     --layers L    transformer layers (default 30: 7L+1 = 211 ops per step)
//     --steps S     training steps (default: up to and including the divergence)
//     --diverge-at N  the op number (1-based, per communicator) where rank 1 swaps the order;
//                   must be a reduce_scatter directly followed by an all_to_all (default 3750)
//     --elems E     elements per rank per op (default 1024 floats)
//     --two-comms   Ulysses all_to_alls on their own communicator (split from the world), on the
//                   same stream: the divergence becomes a cross-communicator order inversion
// Rank and world size come from the launcher (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS, see
// common/bootstrap.h). Two ranks as above; with more, every rank but rank 1 plays rank 0's part.
#include <cuda.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/bootstrap.h"
#include "common/check.h"
#include "common/device.h"

namespace {

enum class Kind { AllGather, AllToAllSeqToHead, AllToAllHeadToSeq, AllToAllBackward, ReduceScatter, AllReduce };

struct Step {
  Kind kind;
  int layer;
  int step;
  const char* phase;
};

struct Model {
  int rank = 0;
  ncclComm_t fsdp = nullptr;     // FSDP (and the default group)
  ncclComm_t ulysses = nullptr;  // the Ulysses sequence-parallel group (== fsdp unless --two-comms)
  CUstream stream = nullptr;
  size_t elems = 1024;
  CUdeviceptr shard = 0, full = 0, seq = 0, heads = 0, grad = 0, norm = 0;
};

// One function per call site, kept out of line so native stacks name them (as the seed's
// Python frames did: "FSDP post_backward" vs "dist_nn.functional backward").
__attribute__((noinline)) void fsdp_unshard_all_gather(Model& m, int layer) {
  NCCL_CHECK(ncclAllGather(reinterpret_cast<void*>(m.shard), reinterpret_cast<void*>(m.full), m.elems, ncclFloat32,
                           m.fsdp, m.stream));
}

__attribute__((noinline)) void ulysses_all_to_all_seq_to_head(Model& m, int layer) {
  NCCL_CHECK(ncclAlltoAll(reinterpret_cast<void*>(m.seq), reinterpret_cast<void*>(m.heads), m.elems, ncclFloat32,
                          m.ulysses, m.stream));
}

__attribute__((noinline)) void ulysses_all_to_all_head_to_seq(Model& m, int layer) {
  NCCL_CHECK(ncclAlltoAll(reinterpret_cast<void*>(m.heads), reinterpret_cast<void*>(m.seq), m.elems, ncclFloat32,
                          m.ulysses, m.stream));
}

__attribute__((noinline)) void ulysses_all_to_all_backward(Model& m, int layer) {
  NCCL_CHECK(ncclAlltoAll(reinterpret_cast<void*>(m.seq), reinterpret_cast<void*>(m.heads), m.elems, ncclFloat32,
                          m.ulysses, m.stream));
}

__attribute__((noinline)) void fsdp_post_backward_reduce_scatter(Model& m, int layer) {
  NCCL_CHECK(ncclReduceScatter(reinterpret_cast<void*>(m.full), reinterpret_cast<void*>(m.grad), m.elems, ncclFloat32,
                               ncclAvg, m.fsdp, m.stream));
}

__attribute__((noinline)) void grad_norm_all_reduce(Model& m) {
  NCCL_CHECK(ncclAllReduce(reinterpret_cast<void*>(m.norm), reinterpret_cast<void*>(m.norm), 1, ncclFloat32, ncclSum,
                           m.fsdp, m.stream));
}

void issue(Model& m, const Step& s) {
  switch (s.kind) {
    case Kind::AllGather: fsdp_unshard_all_gather(m, s.layer); break;
    case Kind::AllToAllSeqToHead: ulysses_all_to_all_seq_to_head(m, s.layer); break;
    case Kind::AllToAllHeadToSeq: ulysses_all_to_all_head_to_seq(m, s.layer); break;
    case Kind::AllToAllBackward: ulysses_all_to_all_backward(m, s.layer); break;
    case Kind::ReduceScatter: fsdp_post_backward_reduce_scatter(m, s.layer); break;
    case Kind::AllReduce: grad_norm_all_reduce(m); break;
  }
}

const char* name(const Step& s) {
  switch (s.kind) {
    case Kind::AllGather: return "fsdp_unshard_all_gather (all_gather)";
    case Kind::AllToAllSeqToHead: return "ulysses_all_to_all_seq_to_head (all_to_all)";
    case Kind::AllToAllHeadToSeq: return "ulysses_all_to_all_head_to_seq (all_to_all)";
    case Kind::AllToAllBackward: return "ulysses_all_to_all_backward (all_to_all)";
    case Kind::ReduceScatter: return "fsdp_post_backward_reduce_scatter (reduce_scatter)";
    case Kind::AllReduce: return "grad_norm_all_reduce (all_reduce)";
  }
  return "?";
}

// The collectives of one training step, in the order a correct run issues them.
void append_step(std::vector<Step>& out, int layers, int step) {
  for (int i = 0; i < layers; ++i) {
    out.push_back({Kind::AllGather, i, step, "forward"});
    out.push_back({Kind::AllToAllSeqToHead, i, step, "forward"});
    out.push_back({Kind::AllToAllHeadToSeq, i, step, "forward"});
  }
  out.push_back({Kind::AllGather, layers - 1, step, "backward"});
  for (int i = layers - 1; i >= 0; --i) {
    out.push_back({Kind::AllToAllBackward, i, step, "backward"});
    out.push_back({Kind::AllToAllBackward, i, step, "backward"});
    if (i > 0) out.push_back({Kind::AllGather, i - 1, step, "backward prefetch"});
    out.push_back({Kind::ReduceScatter, i, step, "backward"});
  }
  out.push_back({Kind::AllReduce, -1, step, "optimizer"});
}

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "seed_deadlock: %s\nusage: seed_deadlock [--fixed] [--layers L] [--steps S] [--diverge-at N] "
               "[--elems E] [--two-comms]\n", msg.c_str());
  std::exit(2);
}

int int_arg(int& i, int argc, char** argv) {
  if (i + 1 >= argc) usage(std::string(argv[i]) + " needs a value");
  char* end = nullptr;
  long v = std::strtol(argv[++i], &end, 10);
  if (*end || v < 1) usage(std::string("invalid value for ") + argv[i - 1] + ": " + argv[i]);
  return int(v);
}

}  // namespace

int main(int argc, char** argv) {
  bool fixed = false, two_comms = false;
  int layers = 30, steps = 0, diverge_at = 3750, elems = 1024;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--fixed") fixed = true;
    else if (a == "--two-comms") two_comms = true;
    else if (a == "--layers") layers = int_arg(i, argc, argv);
    else if (a == "--steps") steps = int_arg(i, argc, argv);
    else if (a == "--diverge-at") diverge_at = int_arg(i, argc, argv);
    else if (a == "--elems") elems = int_arg(i, argc, argv);
    else usage("unknown argument " + a);
  }
  lockstep_examples::WorldInfo w;
  try {
    w = lockstep_examples::world_from_env();
  } catch (const std::exception& e) {
    usage(e.what());
  }
  if (w.world_size < 2) usage("needs at least 2 ranks, WORLD_SIZE is " + std::to_string(w.world_size));

  const int per_step = 7 * layers + 1;
  if (steps == 0) steps = (diverge_at + per_step - 1) / per_step;
  std::vector<Step> schedule;
  for (int s = 0; s < steps; ++s) append_step(schedule, layers, s);
  if (!fixed) {
    // Rank 1 swaps ops N and N+1 (1-based): it runs the next layer's all_to_all before the
    // reduce_scatter that rank 0 issues.
    if (diverge_at + 1 > int(schedule.size()))
      usage("--diverge-at " + std::to_string(diverge_at) + " is beyond the schedule (" +
            std::to_string(schedule.size()) + " ops); raise --steps");
    const Step& a = schedule[diverge_at - 1];
    const Step& b = schedule[diverge_at];
    if (a.kind != Kind::ReduceScatter || b.kind != Kind::AllToAllBackward) {
      std::string near;
      for (int k = std::max(1, diverge_at - per_step); k < int(schedule.size()) && k <= diverge_at + per_step; ++k)
        if (schedule[k - 1].kind == Kind::ReduceScatter && schedule[k].kind == Kind::AllToAllBackward)
          near += " " + std::to_string(k);
      usage("op " + std::to_string(diverge_at) + " with " + std::to_string(layers) +
            " layers is not a reduce_scatter followed by an all_to_all; candidates:" + near);
    }
    if (w.rank == 1) std::swap(schedule[diverge_at - 1], schedule[diverge_at]);
    schedule.resize(diverge_at);  // nothing after the divergence is ever reached
  }

  Model m;
  m.rank = w.rank;
  m.elems = size_t(elems);
  lockstep_examples::use_local_device(w.local_rank);
  CU_CHECK(cuStreamCreate(&m.stream, CU_STREAM_NON_BLOCKING));
  size_t bytes = m.elems * sizeof(float);
  for (CUdeviceptr* p : {&m.shard, &m.seq, &m.grad, &m.norm}) {
    CU_CHECK(cuMemAlloc(p, bytes * w.world_size));
    CU_CHECK(cuMemsetD8(*p, 0, bytes * w.world_size));
  }
  for (CUdeviceptr* p : {&m.full, &m.heads}) {
    CU_CHECK(cuMemAlloc(p, bytes * w.world_size));
    CU_CHECK(cuMemsetD8(*p, 0, bytes * w.world_size));
  }

  ncclUniqueId id;
  try {
    id = lockstep_examples::exchange_unique_id("seed_deadlock");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", w.rank, e.what());
    return 1;
  }
  NCCL_CHECK(ncclCommInitRank(&m.fsdp, w.world_size, id, w.rank));
  m.ulysses = m.fsdp;
  if (two_comms) NCCL_CHECK(ncclCommSplit(m.fsdp, 0, w.rank, &m.ulysses, nullptr));
  std::printf("rank %d: %d layers, %d ops per step, %zu ops to issue%s%s\n", w.rank, layers, per_step, schedule.size(),
              fixed ? " (fixed order)" : "", two_comms ? ", Ulysses on its own communicator" : "");
  std::fflush(stdout);

  auto t0 = std::chrono::steady_clock::now();
  int cur_step = 0;
  for (size_t k = 0; k < schedule.size(); ++k) {
    const Step& s = schedule[k];
    if (s.step != cur_step) {  // loss.item(): the host waits for the previous step
      CU_CHECK(cuStreamSynchronize(m.stream));
      cur_step = s.step;
    }
    bool last = !fixed && k + 1 == schedule.size();
    if (last) {
      // Steps counted from 1, as lockstep analyze counts them ("seq 3750 = step 18").
      std::printf("rank %d: op #%zu (step %d, %s, layer %d): %s -- then waiting for it\n", w.rank, k + 1, s.step + 1,
                  s.phase, s.layer, name(s));
      std::fflush(stdout);
    }
    issue(m, s);
  }
  CU_CHECK(cuStreamSynchronize(m.stream));  // the divergent run never returns from here
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank %d: %zu ops completed in %.2f s (%.1f us/op)\n", w.rank, schedule.size(), secs,
              1e6 * secs / double(schedule.size()));
  if (two_comms) NCCL_CHECK(ncclCommDestroy(m.ulysses));
  NCCL_CHECK(ncclCommDestroy(m.fsdp));
  return 0;
}
