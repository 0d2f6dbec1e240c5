// Calls between taking their call_index and pushing their records, per thread. A call's record
// reaches the writer only after NCCL returns, while other threads may issue, push and have
// written later calls: the writer's order digest (writer.cpp advance_order) chains a collective
// only once no call with a lower call_index is still inside a hook, else a checkpoint's order
// digest would leave out a collective issued before it.
//
// Each thread publishes, before it takes a call_index, a lower bound of it (the counter's value)
// in a slot of its own and clears the slot after pushing the call's records. The writer reads
// every slot before it takes records from its queues: a call still in progress bounds what it
// may chain; one that cleared its slot pushed its records before, so they are in that batch.
#pragma once

#include <atomic>
#include <cstdint>

namespace lockstep::rec {

inline constexpr int kProgressSlots = 512;

// Before a call takes call indices from next_call (with acq_rel fetch_adds), and after it pushed
// their records. Nested pairs on one thread keep the outermost bound. A thread claims a slot on
// first use; once every slot is taken, lowest_call_in_progress reports the order unknown for good.
void progress_begin(const std::atomic<int64_t>& next_call) noexcept;
void progress_end() noexcept;
// Frees the thread's slot (at its exit).
void progress_release() noexcept;

// The lowest call_index that a call may hold whose records are not pushed yet: read next_call
// first (every call below it published before taking its index), then every slot. INT64_MIN
// when a thread could not publish (more threads than slots).
int64_t lowest_call_in_progress(const std::atomic<int64_t>& next_call) noexcept;

}  // namespace lockstep::rec
