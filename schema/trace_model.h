// A trace's rows as plain data (no SQLite here): the one in-memory model of a trace's content.
// A process's header (meta, env, comms, hangs) and its op, wait and stack rows, as the recorder
// wrote them. Written by the one model writer (trace_file_model.h: shrink's reproducer, the
// Flight Recorder import, test builders); read back one process at a time by the loader's row
// view (analyzer/trace_loader.h load_process_file, trace_details.h). The analyses read an index
// of these rows, analyzer/schedule.h's Schedule, which keeps each process's header
// (SchedProcess::info, ops and stacks empty) and is never turned back into rows.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meta_keys.h"
#include "vocab.h"

namespace lockstep {

// One NCCL call inside a grouped logical op (ops_parts row).
struct OpPart {
  vocab::Op op = vocab::Op::AllReduce;
  vocab::Dtype dtype = vocab::Dtype::Mixed;  // Mixed: none / not known
  int64_t count = 0;
  int root = -1;       // -1 = none
  int peer = -1;       // -1 = none
  vocab::RedOp redop = vocab::RedOp::None;
};

struct Frame {
  vocab::FrameKind kind = vocab::FrameKind::Native;
  std::string function;
  std::string module;    // native
  uint64_t offset = 0;   // native
  std::string file;      // python
  int line = 0;          // python
};

struct Op {
  int64_t call_index = 0;   // process-wide order (causal order within a process)
  int comm = -1;            // index into Process::comms
  int64_t seq = 0;          // per-communicator logical sequence number; 0 = unsequenced
  vocab::Op op = vocab::Op::AllReduce;
  vocab::Dtype dtype = vocab::Dtype::Mixed;  // Mixed: none, or parts that differ
  int64_t count = 0;
  int root = -1;
  int peer = -1;
  vocab::RedOp redop = vocab::RedOp::None;
  uint64_t stream = 0;
  int64_t tid = 0;
  std::string thread_name;
  int64_t group_id = -1;
  int64_t issue_mono_ns = 0;
  int64_t issue_wall_ns = 0;
  int rc = 0;
  vocab::State state = vocab::State::Enqueued;
  bool completed = false;
  int64_t complete_mono_ns = 0;
  int64_t origin_call = -1; // graph_launched rows: the captured op
  uint64_t graph_exec = 0;
  int64_t stack_id = -1;    // key into Process::stacks
  std::vector<OpPart> parts;
};

// A row the analyses compare: it enqueued work and has its communicator's sequence number. The
// writer stores seq only for these (trace_schema.h: NULL when the op enqueued nothing), so a file
// and the rows it was written from index the same ops (schedule.h ScheduleBuilder).
inline bool sequenced(const Op& o) { return o.seq > 0 && vocab::enqueued_work(o.state); }

struct Comm {
  int local_id = 0;          // comms.id in the file
  std::string hash;          // identity shared by all members
  uint64_t handle = 0;
  int nranks = 0;
  int rank = 0;
  int cuda_device = -1;
  int parent = -1;           // index into Process::comms, -1 = none
  int split_color = 0;
  int split_key = 0;
  std::string name;
  // The recorder first saw it in a call, not at its creation (it existed before tracing began):
  // its identity is local to this process and cannot be matched with the other members.
  bool created_before_tracing = false;
  bool shrunk = false;       // created by ncclCommShrink (parent set, no split color)
  int64_t init_call = 0;
  int init_rc = 0;
  vocab::CommEnd end_kind = vocab::CommEnd::Alive;
  // Bounded traces (schema/trace_schema.h comms.retired_*, checkpoints): the size cap retired
  // this communicator's first `retired_collectives` collectives (and every op up to
  // `retired_through_seq`); `retired_digest` is the op_digest.h chain over them. The retained
  // collectives are ordinals retired_collectives+1, ... -- align members by ordinal, not by
  // position in the retained list.
  int64_t retired_collectives = 0;
  uint64_t retired_digest = 0;
  int64_t retired_through_seq = 0;
  struct Checkpoint {
    int64_t ordinal = 0;     // collective ordinal k (1-based)
    int64_t seq = 0;         // seq of the k-th collective
    uint64_t digest = 0;     // op_digest.h chain after k collectives
    // The process's order digest (op_digest.h order_step) after its order_count-th collective,
    // this one; order_count 0: none recorded.
    int64_t order_count = 0;
    uint64_t order_digest = 0;
  };
  std::vector<Checkpoint> checkpoints;  // by ordinal; kept even for retired history
};

// A host-side wait or event call (waits row): orders work across streams and communicators.
// The model checker (analyzer/model_check.h) needs them; the hang report does not.
struct Wait {
  int64_t call_index = 0;   // shares the process-wide counter with Op::call_index
  vocab::Wait kind = vocab::Wait::StreamSync;
  uint64_t stream = 0;
  uint64_t event = 0;
  int64_t tid = 0;
  int64_t begin_mono_ns = 0;
  int64_t end_mono_ns = -1; // -1: never returned
};

// An ncclCommSplit call with NCCL_SPLIT_NOCOLOR: it created no communicator (so it has no comms
// row; the recorder keeps it in api_calls), but it is the parent's k-th split call on every
// member, so communicator roles count it (analyzer/identity.h).
struct NoColorSplit {
  int64_t call_index = 0;
  int parent = -1;  // index into Process::comms
};

// Records the recorder dropped (drops table): ops of seqs first_seq..last_seq of one
// communicator are missing from the file. comm -1 / seqs 0: records without a seq.
struct DropRange {
  int comm = -1;             // index into Process::comms
  int64_t first_seq = 0;
  int64_t last_seq = 0;
  int64_t records = 0;
  std::string reason;
  // The recorder's stop point (reason recorder_stopped): every seq from first_seq on is missing
  // (last_seq INT64_MAX).
  bool stop_point = false;
};

struct HangMarker {
  int64_t mono_ns = 0;
  int64_t wall_ns = 0;
  int in_flight = 0;
  std::string message;
};

struct Process {
  std::string path;          // trace file
  std::string host;
  int64_t pid = 0;
  int global_rank = -1;
  std::string global_rank_source;  // meta global_rank_source, or "inferred:comm <hash>" (rank_identity.h)
  std::string rank_conflict;       // sources that disagree about the rank; empty when none
  bool finished = false;     // meta finished=1: clean exit
  std::string exit_reason;
  int64_t dropped_records = 0;
  // Where the dropped records were (drops table). drops_known: the file has the table, so the
  // op records it does not name were not dropped (older files say only dropped_records).
  std::vector<DropRange> drops;
  bool drops_known = false;
  int64_t checkpoint_interval = 0;  // meta checkpoint_interval; 0 = no checkpoints (schema 1)
  int64_t retired_ops = 0;          // meta retired_ops: ops rows the size cap dropped
  int64_t last_flush_mono_ns = 0;
  std::map<std::string, std::string> meta;
  std::map<std::string, std::string> env;
  std::vector<Comm> comms;
  std::vector<NoColorSplit> nocolor_splits;  // by call_index
  std::vector<Op> ops;       // sorted by call_index; sequenced and unsequenced
  std::map<int64_t, std::vector<Frame>> stacks;
  std::vector<Wait> waits;   // sorted by call_index; empty when the trace has none
  std::vector<HangMarker> hangs;

  // The file a user knows this process by: a Flight Recorder dump's own path (the analyzer reads
  // a converted copy of it in a temporary directory: `path`), else `path`.
  const std::string& shown_path() const {
    auto it = meta.find(schema::meta::kFrDumpFile);
    return it != meta.end() && !it->second.empty() ? it->second : path;
  }
};

// A file the loader did not use, and why (shown to the user, never silent).
struct SkippedFile {
  std::string path;
  std::string reason;
};

struct Trace {
  std::string dir;
  std::vector<Process> processes;  // sorted by global_rank, then host, pid
  std::vector<SkippedFile> skipped;
};

}  // namespace lockstep
