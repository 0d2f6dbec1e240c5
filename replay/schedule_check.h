// What replay accepts from a recorded schedule, checked before anything runs: a trace is
// untrusted input, and a value the worker cannot honour (a count whose buffer overflows, an op
// it cannot issue, a root outside the communicator) must become "replay could not run" with the
// reason, never a crash or a false "hang".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rank_schedule.h"

namespace lockstep::replay {

// Limits of what replay runs (far above any real job; they keep every size computation exact).
inline constexpr int kMaxReplayRanks = 1 << 16;           // members of one communicator
inline constexpr uint64_t kMaxReplayBufferBytes = 1ull << 40;  // one call's send or receive buffer

// Ops the worker issues as single NCCL calls (grouped rows are issued part by part).
bool replayable_call(vocab::Op op);
// Bytes of one element; Mixed (recorded as NULL): 1, the worker counts bytes.
size_t dtype_bytes(vocab::Dtype dtype);

// Send and receive buffer bytes of one call under NCCL's count conventions; false when the
// values are out of range (negative count, overflow, above kMaxReplayBufferBytes).
bool call_buffer_bytes(vocab::Op op, vocab::Dtype dtype, int64_t count, int nranks,
                       uint64_t* send, uint64_t* recv);

// Every reason this rank's schedule cannot be replayed as recorded (empty: it can). Each entry
// names the call and the value.
std::vector<std::string> schedule_problems(const RankSchedule& r);

}  // namespace lockstep::replay
