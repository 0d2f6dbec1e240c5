// Schedules the shrink tests start from, built in memory (tests/replay/model_builder.h).
#pragma once

#include <string>

#include "model_builder.h"

namespace lockstep::testing {

// The seed's shape: 2 ranks, one communicator, FSDP/Ulysses-like ops; ops 1..diverge-1 match,
// at op `diverge` rank 0 issues a reduce_scatter and rank 1 an all_to_all (a recorded hang: the
// schedules end there). A host stream_sync every 211 ops (one training step).
inline Trace seed_like(int diverge = 3750) {
  RowsBuilder b(2);
  b.comm_all("world", {0, 1});
  const char* kinds[] = {"all_gather", "all_to_all", "all_to_all", "reduce_scatter"};
  for (int k = 1; k < diverge; ++k) {
    for (int r = 0; r < 2; ++r) {
      b.op(r, "world", kinds[k % 4]);
      if (k % 211 == 0) b.wait(r, "stream_sync", 7);
    }
  }
  b.op(0, "world", "reduce_scatter");
  b.op(1, "world", "all_to_all");
  return b.trace;
}

// Hidden-style cross-communicator cycle: 8 ranks, FSDP over all of them, Ulysses groups of 4,
// one stream per rank. `steps` matching steps, then rank 1 issues its Ulysses all_to_all before
// the FSDP reduce_scatter that every other rank issues first.
inline Trace hidden_cycle(int steps = 50) {
  RowsBuilder b(8);
  b.comm_all("fsdp", {0, 1, 2, 3, 4, 5, 6, 7});
  b.comm_all("ulysses0", {0, 1, 2, 3});
  b.comm_all("ulysses1", {4, 5, 6, 7});
  for (int s = 0; s < steps; ++s)
    for (int r = 0; r < 8; ++r) {
      const std::string u = r < 4 ? "ulysses0" : "ulysses1";
      b.op(r, "fsdp", "all_gather");
      b.op(r, u, "all_to_all");
      b.op(r, u, "all_to_all");
      b.op(r, "fsdp", "reduce_scatter");
    }
  for (int r = 0; r < 8; ++r) {
    const std::string u = r < 4 ? "ulysses0" : "ulysses1";
    if (r == 1) {
      b.op(r, u, "all_to_all");
      b.op(r, "fsdp", "reduce_scatter");
    } else {
      b.op(r, "fsdp", "reduce_scatter");
      b.op(r, u, "all_to_all");
    }
  }
  return b.trace;
}

// 4,096 ranks: a world communicator and tensor-parallel groups of 8; per step a TP all_reduce and
// a world all_gather; at the last step rank 4095 issues an all_reduce on the world communicator
// where the other 4,095 issue an all_gather.
inline Trace wide_divergence(int nranks = 4096, int steps = 3) {
  RowsBuilder b(nranks);
  for (int r = 0; r < nranks; ++r) b.comm(r, "world", nranks, r);
  for (int r = 0; r < nranks; ++r) b.comm(r, "tp" + std::to_string(r / 8), 8, r % 8);
  for (int s = 0; s <= steps; ++s)
    for (int r = 0; r < nranks; ++r) {
      b.op(r, "tp" + std::to_string(r / 8), "all_reduce");
      b.op(r, "world", s == steps && r == nranks - 1 ? "all_reduce" : "all_gather");
    }
  return b.trace;
}

// A latent inversion in a run that completed: 2 ranks, communicators A and B on their own
// streams; at one step rank 1 issues B before A. Completes when the streams run concurrently,
// deadlocks when the GPU runs one kernel at a time ("may deadlock").
inline Trace latent_inversion(int steps = 40) {
  RowsBuilder b(2);
  b.comm_all("A", {0, 1});
  b.comm_all("B", {0, 1});
  for (int s = 0; s < steps; ++s)
    for (int r = 0; r < 2; ++r) {
      const bool swap = s == steps / 2 && r == 1;
      if (!swap) b.op(r, "A", "all_gather", 0x10);
      b.op(r, "B", "all_reduce", 0x20);
      if (swap) b.op(r, "A", "all_gather", 0x10);
    }
  return b.trace;
}

}  // namespace lockstep::testing
