// The trace file and the thread that fills it. The hot path only push()es fixed-size records
// into a bounded queue; the writer thread commits them in one transaction every ~50 ms
// (kCommitIntervalMs), interning stacks and symbolizing them on the way. Journal mode: see
// open_trace_db() in writer.cpp and docs/recorder.md.
#pragma once

#include <signal.h>
#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bench_knobs.h"
#include "bounded_join.h"
#include "fd_identity.h"
#include "bounded_queue.h"
#include "trace_file.h"
#include "process_info.h"
#include "python_frames.h"
#include "record.h"

namespace lockstep::rec {

using lockstep::PyFrameRaw;

inline constexpr int kCommitIntervalMs = 50;
inline constexpr size_t kDoneQueueRecords = 1 << 16;  // completion rows: 1.5 MiB

// The bytes of r a push copies: its tag and the union member the tag names.
inline size_t record_bytes(const Record& r) {
  switch (r.kind) {
    case RecKind::Op: return offsetof(Record, op) + sizeof r.op;
    case RecKind::Part: return offsetof(Record, part) + sizeof r.part;
    case RecKind::CommInit: return offsetof(Record, comm) + sizeof r.comm;
    case RecKind::CommEnd: return offsetof(Record, end) + sizeof r.end;
    case RecKind::Api: return offsetof(Record, api) + sizeof r.api;
    case RecKind::Completion: return offsetof(Record, done) + sizeof r.done;
    case RecKind::GraphLaunch: return offsetof(Record, launch) + sizeof r.launch;
    case RecKind::Wait: return offsetof(Record, wait) + sizeof r.wait;
  }
  return sizeof r;
}

// Why the recorder stopped recording: meta recorder_stopped (schema/trace_schema.h). The
// program is never affected: the recorder warns once, records what it still can, and goes quiet.
enum class StopReason { DiskFull, FileSizeLimit, IoError, ReadOnly, Unwritable, Internal };
const char* stop_reason_name(StopReason r);
// From a failed SQLite call's extended result code and the errno under it (sqlite3_system_errno).
StopReason classify_write_error(int sqlite_extended_rc, int sys_errno);

// SIGXFSZ is sent to the thread whose write(2) crosses RLIMIT_FSIZE; its default action kills
// the process. The recorder's own writes run with SIGXFSZ blocked in their thread (the writer
// thread for good; the starting thread around Writer::open), so a write past the limit fails
// with EFBIG instead. The application's threads keep their mask: its own oversized writes get
// SIGXFSZ as without the recorder.
void block_sigxfsz_in_this_thread(sigset_t* previous);
// Around recorder writes in an application thread: blocks SIGXFSZ, and on destruction discards
// a SIGXFSZ that became pending meanwhile (raised by those writes) before restoring the mask.
class SigxfszBlocked {
 public:
  SigxfszBlocked();
  ~SigxfszBlocked();
  SigxfszBlocked(const SigxfszBlocked&) = delete;
  SigxfszBlocked& operator=(const SigxfszBlocked&) = delete;

 private:
  sigset_t previous_;
  bool was_pending_ = false;
};

struct TraceHeader {
  ProcessInfo info;
  int nccl_version = 0;
  std::string nccl_library;
  const char* stack_mode = "none";
  const char* unwinder = "";
  int64_t max_mb = -1;               // the size cap; -1: config().max_mb (LOCKSTEP_MAX_MB)
  int64_t checkpoint_interval = 0;   // 0: op_digest.h kDefaultInterval
  int64_t queue_records = -1;        // the record queue; -1: config().queue_records (a power of two)
  int64_t spill_mb = -1;             // the spill; -1: config().spill_mb (LOCKSTEP_SPILL_MB)
};

// The size cap (docs/recorder.md): when the pages in use pass kRetireHighWater of it, the
// oldest op rows are retired in whole chunks until kRetireLowWater of it is in use.
inline constexpr double kRetireHighWater = 0.90;
inline constexpr double kRetireLowWater = 0.80;
inline constexpr int64_t kMaxRetirePerCommit = 1 << 18;  // rows: keeps one commit short
// Past this size the file is rewritten once with 4 KiB pages (Writer::grow_page_size).
inline constexpr int64_t kLargePagesAt = int64_t(4) << 20;

class Writer {
 public:
  // Creates <dir>/<host>-<pid>.lockstep.sqlite with its meta and env rows. On failure returns
  // nullptr with *error set (the caller warns once and stays untraced).
  static Writer* open(const TraceHeader& header, std::string* error);

  void start();  // the writer thread

  // Hot path: never blocks; the record queue holds config().queue_records (LOCKSTEP_QUEUE_RECORDS);
  // a refused record is counted in meta dropped_records. Completion
  // rows (pushed by the watchdog) have a queue of their own: sharing one with the issuing
  // threads made each op push ~50 ns dearer on the H200 (the tail and neighbouring cells
  // bouncing between two cores; docs/gpu-results.md, cost session 6).
  void push(const Record& r) {
    if (r.kind == RecKind::Completion) {
      if (!done_queue_.push(r.done)) note_drop(r, 1);
      return;
    }
    if (spilling_.load(std::memory_order_acquire) || !queue_.push(r, record_bytes(r))) spill(&r, 1);
  }
  // An op and its part records (rs[0] the op, then its parts): queued together or dropped
  // together, so a file never holds a grouped op without its parts.
  void push_op(const Record* rs, size_t n) {
    if (spilling_.load(std::memory_order_acquire) || !queue_.push_many(rs, n, record_bytes)) spill(rs, n);
  }

  // Rare events (a stack seen for the first time, meta updates, hang markers): mutex-guarded.
  bool submit_stack(uint64_t hash, const uintptr_t* pcs, int n, const PyFrameRaw* py = nullptr,
                    int npy = 0);
  void set_meta(const char* key, std::string value);
  void add_hang(int64_t mono, int64_t wall, int in_flight, std::string message);

  // Blocks until everything pushed before the call is committed (or timeout_ms passes).
  void flush(int timeout_ms);

  // The recorder's call_index counter: the order digest chains a collective only once no call
  // below it is still in progress (call_progress.h). Unset (tests that push records
  // themselves): every record pushed is final.
  void set_call_counter(const std::atomic<int64_t>* next_call) { call_counter_ = next_call; }

  // Async-signal-safe pair used by the signal handler: wake the writer asking for a commit that
  // records exit_reason ("" records none: the process may go on), then wait (poll on a pipe,
  // bounded) until it is done.
  void signal_flush_begin(const char* exit_reason);
  bool signal_flush_wait(int timeout_ms);

  // Final commit (meta finished=1, exit_reason), then the thread ends. Idempotent.
  void stop(const char* exit_reason);

  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  bool is_writer_thread() const;
  const std::string& path() const { return path_; }
  const std::string& journal_mode() const { return journal_mode_; }

 private:
  Writer(size_t queue_records, size_t spill_bytes);
  static Writer* open_unguarded(const TraceHeader& header, std::string* error);
  bool ok(int rc, const char* what);  // SQLITE_DONE/OK, or fail(what) and false
  void run();
  void run_failed_until_stop();
  void wait_for_wake();
  void round_done(uint64_t flush_target, bool signal_waits);
  void commit_batch(bool force_meta);
  bool commit();
  void insert(const Record& r);
  void complete(const CompletionRec& d, bool last_try);
  void write_ready_ops(bool force);
  void advance_order();
  struct PendingOp;
  void write_op(PendingOp& p);
  void digest_op(int64_t comm_id, int64_t seq, int64_t call_index, bool collective, uint64_t sig_hash);
  struct CommDigest;
  bool digest_step(int64_t comm_id, CommDigest& c, bool collective, uint64_t hash, int64_t call_index);
  void drain_waiting(int64_t comm_id, CommDigest& c, int64_t skip_gaps_through_call);
  void absorb_late_op(int64_t comm_id, int64_t seq, bool collective, uint64_t hash);
  void maybe_declare_boundary();
  void grow_page_size();
  void retire_if_over_cap(int64_t inserted);
  int64_t signature_id(const OpRec& o, const std::vector<PartRec>& parts, bool* collective, uint64_t* hash);
  void intern_pending_stacks();
  int64_t stack_id_for(uint64_t hash);
  const std::string& thread_name(int tid);
  void fail(const char* what);
  void stop_recording(StopReason why, const std::string& detail);
  // Meta recorder_stopped and its detail; with_stop_point: also one drops row per communicator
  // (schema::kDropRecorderStopped) at the first seq not committed.
  bool write_stop_meta(StopReason why, const std::string& detail, bool with_stop_point);
  bool exec(const char* sql);
  // Counts n refused records (first: the op, or the record) in dropped_records and, for an op
  // with a seq, in its communicator's range of dropped seqs (the drops table).
  void note_drop(const Record& first, size_t n);
  bool write_drops();
  // The queue refused rs[0..n) (or the spill is in use): append them all to the spill, or drop
  // them all (note_drop) when it has no room or an allocation fails. Never waits for the writer.
  void spill(const Record* rs, size_t n);
  // Writer thread: takes the queue and the spill in an order that keeps each thread's records
  // in order (see spill()'s comment in writer.cpp). Returns the records taken, in order.
  void take_spill(std::vector<Record>* out);

  std::string path_;
  std::string journal_mode_;
  trace_file::Db file_;
  sqlite3* db_ = nullptr;  // file_.get()
  trace_file::Tables tables_;
  bool tables_ready_ = false;
  int64_t max_bytes_ = 0;          // 0: no cap
  int64_t checkpoint_interval_ = 0;
  bool page_size_grown_ = false;

  BoundedQueue<Record> queue_;
  BoundedQueue<CompletionRec> done_queue_;
  std::atomic<uint64_t> dropped_{0};
  struct DropRun {
    int64_t comm_id, first_seq, last_seq, records;
  };
  std::mutex drop_mu_;              // only taken when the queue refuses a record
  std::vector<DropRun> drop_runs_;  // since the last commit; guarded by drop_mu_
  int64_t drops_without_seq_ = 0;   // guarded by drop_mu_
  // The spill (LOCKSTEP_SPILL_MB): chunks of records, appended under spill_mu_ (rare path).
  std::atomic<bool> spilling_{false};  // set by a producer the queue refused; cleared by the writer
  std::mutex spill_mu_;
  std::vector<std::vector<Record>> spill_chunks_;  // guarded by spill_mu_
  size_t spill_bytes_ = 0;                         // guarded by spill_mu_
  size_t spill_limit_bytes_ = 0;
  std::atomic<uint64_t> spilled_{0};
  std::atomic<uint64_t> peak_spill_bytes_{0};
  std::atomic<bool> failed_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rows_taken_{0};  // records inserted and ops written: the exit's progress
  // Only the writer thread counts (its drain); the exiting thread reads: no read-modify-write.
  void count_row_taken() {
    rows_taken_.store(rows_taken_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  std::thread thread_;
  ThreadExit thread_exit_;
  std::atomic<pid_t> writer_tid_{0};
  // The writer's wake-up pipe and the signal handler's acknowledgement pipe (fd_identity.h:
  // checked before every use); a lost wake pipe leaves rounds on the clock, a lost ack pipe
  // leaves the signal handler the acks_ count.
  FdIdentity wake_[2], ack_[2];
  void wake();  // async-signal-safe
  std::atomic<uint64_t> acks_{0};      // rounds acknowledged to a signal handler
  std::atomic<uint64_t> ack_base_{0};  // acks_ when the signal handler asked
  std::atomic<const char*> signal_reason_{nullptr};

  std::mutex side_mu_;
  struct PendingStack {
    uint64_t hash;
    std::vector<uintptr_t> pcs;
    std::vector<PyFrameRaw> py;
  };
  std::vector<PendingStack> pending_stacks_;
  std::vector<std::pair<std::string, std::string>> pending_meta_;
  struct PendingHang {
    int64_t mono, wall;
    int in_flight;
    std::string message;
  };
  std::vector<PendingHang> pending_hangs_;

  std::mutex flush_mu_;
  std::condition_variable flush_cv_;
  uint64_t flush_requested_ = 0;  // guarded by flush_mu_
  uint64_t flush_done_ = 0;
  std::atomic<uint64_t> flush_req_atomic_{0};

  // writer thread only
  struct SigState;                  // interned signatures, digests per communicator (writer.cpp)
  SigState* sig_ = nullptr;
  std::unordered_map<uint64_t, int64_t> stack_ids_;
  std::unordered_map<int, std::string> thread_names_;
  int64_t last_meta_mono_ = 0;
  int64_t last_round_start_ = 0;     // wait_for_wake: when the current round began
  size_t last_round_records_ = 0;    // records the last commit_batch took from the queues
  std::vector<CompletionRec> dones_;  // commit_batch: completion rows taken this round
  std::vector<CompletionRec> held_dones_;  // found no op last round: tried once more
  uint64_t last_dropped_ = 0;
  const std::atomic<int64_t>* call_counter_ = nullptr;
  // This batch's bound for the order digest: below the lowest call still in progress when it
  // began, once it took every record queued then (INT64_MIN: it did not).
  int64_t order_bound_ = INT64_MAX;
  // PRAGMA user_version is the file's content generation (schema::kUserVersionGeneration): random
  // from the header on (initial_generation), advanced by every commit that writes anything but the heartbeat (meta
  // last_flush_mono_ns, about once a second while idle), so that a reader can tell a file only
  // refreshed since it looked from one that changed (node summaries: analyzer/node_summary.h).
  uint32_t generation_ = 1;
  bool advance_generation();  // in the open transaction
  // Each meta value as commit_batch last wrote it: writing the same values again (and the last
  // flush) and nothing else is a heartbeat.
  std::unordered_map<std::string, std::string> written_meta_;
  // Per communicator id: the first seq not in the file at the last commit (CommDigest::next_seq
  // then). The stop point write_stop_meta records.
  std::unordered_map<int64_t, int64_t> committed_next_seq_;
};

}  // namespace lockstep::rec
