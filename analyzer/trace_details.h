// Details of the few ops a report names (full rows, neighbours, stacks), read on demand: from
// the trace files (read-only, one short query each; tests: from their in-memory builder).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "schedule.h"
#include "trace_model.h"

namespace lockstep {

class TraceDetails {
 public:
  virtual ~TraceDetails() = default;
  // `proc` indexes Schedule::procs.
  virtual std::optional<Op> op(int proc, int64_t call_index) = 0;
  // Sequenced ops with call_index in [from, to], at most `limit`, oldest first; `newest` keeps
  // the last `limit` instead of the first.
  virtual std::vector<Op> ops_between(int proc, int64_t from, int64_t to, int limit, bool newest) = 0;
  virtual std::vector<Frame> stack(int proc, int64_t stack_id) = 0;
  // Why stack(proc, stack_id) is empty or short: what made the file's frames unreadable (the
  // reader's error), "" when it read them whole. A corrupt page is not "no stack recorded".
  virtual std::string stack_error(int /*proc*/, int64_t /*stack_id*/) { return {}; }
  // The oldest sequenced op of communicator `comm` (index into Process::comms) with call_index
  // in [from, to]: its call_index and seq only.
  struct SeqAt {
    int64_t call_index = 0;
    int64_t seq = 0;
  };
  virtual std::optional<SeqAt> first_of_comm(int proc, int comm, int64_t from, int64_t to) = 0;
};

// The sequenced op of communicator `comm` with seq `seq` and call_index in [from, to], found by
// bisection on call_index (at most 64 questions of first_of_comm, each a short indexed scan): a
// communicator's seq grows with call_index in a file the recorder wrote. nullopt when the
// bisection finds no such op (none, or a file whose seqs do not grow): read every row instead.
std::optional<Op> find_op_by_seq(TraceDetails& details, int proc, int comm, int64_t seq, int64_t from, int64_t to);

std::unique_ptr<TraceDetails> details_from_files(const Schedule& s);

// The frames worth showing: Python frames first (innermost first), then native frames outside
// NCCL, lockstep, libc, the Python interpreter and torch's dispatch glue. At most max_frames.
std::vector<Frame> trim_stack(const std::vector<Frame>& frames, size_t max_frames = 8);
// "fsdp_post_backward (train.py:42)": the innermost kept frame, or "" when none.
std::string frame_origin(const std::vector<Frame>& trimmed);
std::string format_frame(const Frame& f);
// What a listing prints after the frames it shows of an op's stack (`shown`, trimmed or not):
// "" when they are the stack whole; else why there is nothing (more): no stack recorded
// (stack_id < 0), the stack unreadable in its file (the reader's error), or frames trimming hid.
std::string stack_note(TraceDetails& details, int proc, int64_t stack_id, const std::vector<Frame>& shown);

}  // namespace lockstep
