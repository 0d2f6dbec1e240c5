// Hang explanation: per rank, the last completed op, the ops in flight and whom each blocking op
// waits for; wait-for cycles that span communicators; ranks in no collective; ranks whose trace
// stopped. Ranks that look the same are grouped so 256 ranks fit on a screen.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm_index.h"
#include "schedule.h"

namespace lockstep {

enum class RankStatus {
  kFinished,      // meta finished=1: clean exit
  kBlocked,       // ops in flight
  kNoCollective,  // alive, nothing in flight: in host code (or between ops)
  kDead,          // trace stopped: killed, or its writer stopped flushing long before its peers
  kEnded,         // trace ends without an exit record and it is not seen running: killed by
                  // SIGKILL/OOM/a lost node (or running on a host whose clock we cannot read);
                  // what it did after its last flush is unknown
};
const char* status_name(RankStatus s);  // finished blocked no_collective dead trace_ended

// What stopped a process's trace, typed (RankHang::why is the same for humans).
enum class StopCause : uint8_t {
  kNone,             // finished, or still writing
  kSignal,           // exit record of a fatal signal (SIGTERM, SIGKILL by the launcher, abort, ...)
  kStaleFlush,       // stopped flushing long before its neighbours on the same host (process died?)
  kRecorderStopped,  // meta recorder_stopped
  kNoExitRecord,     // trace ends without an exit record, not seen running
};
const char* stop_cause_name(StopCause c);  // none signal stale_flush recorder_stopped no_exit_record

struct WaitFor {
  int proc = -1;
  std::string reason;  // "has not issued it (its last op on the comm: seq 41)", ...
  // It issued something that can never match (another op, other all-to-all sizes): a wait that
  // no amount of time ends, unlike "has not issued it" (it may not have got there yet).
  bool mismatch = false;
  // What it issued there is unknown: its records stop being whole before it (dropped, or its
  // recorder stopped: ProcComm::exact_through). Never a proof of a hang.
  bool unknown = false;
};

struct BlockedOp {
  uint32_t op = 0;             // index into SchedProcess::ops: the oldest op in flight on a stream
  // The op the stream is stuck in is one of its in-flight ops op..last_candidate (issue order).
  // == op with a per-op completion signal; later with LOCKSTEP_COMPLETION=covering, where ops
  // after the last completed covering event read as in flight though some may be done.
  uint32_t last_candidate = 0;
  uint32_t covering_window = 0;  // covering completion: the trace's window; 0 = per-op signal
  size_t queued_behind_it = 0; // later ops in flight on the same stream
  std::vector<WaitFor> waits;  // empty: every peer issued it too (waits on something else)
  // Its own records stop being whole before it (a hole): which collective (or message) it is,
  // and so whom it waits for, is unknown; waits is empty. The first seq not whole; 0: none.
  int64_t own_hole_from_seq = 0;
};

struct RankHang {
  int proc = -1;
  RankStatus status = RankStatus::kNoCollective;
  StopCause cause = StopCause::kNone;
  std::string why;             // for dead: what shows it (prose for humans; decide on `cause`)
  int64_t last_completed = -1; // index into ops; -1 = none
  size_t in_flight = 0;
  std::vector<BlockedOp> blocked;
  // Its trace is still being written: not finished, no exit record, no recorder_stopped, on
  // this host, flushed within HangOptions::stale_ns of now. Its newest ops may not be issued yet.
  bool live = false;
  // Not finished and no exit record, not live: history after its last flush is unknown.
  bool history_lost = false;
  // Stopped (killed, or its trace ended) with ops in flight that had been in flight less than
  // HangOptions::stuck_ns when its trace ends: a job stopped mid-step, not a proven wait.
  bool stopped_in_flight = false;
  int64_t in_flight_for_ns = -1;  // the oldest blocked op's age at the trace's end; -1 unknown
  // Stopped by SIGTERM/SIGINT (the job's end: scancel, a time limit, the launcher) with nothing
  // in flight: it was in host code, so an op its peers issued after its last one it had not
  // issued yet; whether it would have is unknown.
  bool stopped_by_job = false;
  // Its exit record says SIGTERM or SIGINT: the job's end (scancel, a time limit, the launcher).
  bool ended_by_job = false;
};

struct WaitCycle {
  struct Hop {
    int proc;
    uint32_t op;  // the op it is blocked in
    int waits_for;
  };
  std::vector<Hop> hops;
  int comms = 0;  // distinct communicators along the cycle
};

struct RankGroup {
  std::vector<int> procs;
  std::string summary;  // the same for every process of the group
};

struct HangReport {
  bool hung = false;
  bool any_marker = false;  // a recorder hit its hang timeout
  std::vector<RankHang> ranks;  // one per process
  std::vector<WaitCycle> cycles;
  std::vector<RankGroup> groups;
};

struct HangOptions {
  // A process whose last flush is this far behind the freshest flush of another process on the
  // same host is dead (the recorder flushes at least every second while alive).
  int64_t stale_ns = 10'000'000'000;
  // Liveness (RankHang::live): the analyzer's CLOCK_MONOTONIC and host name; -1 / empty: read
  // them. Monotonic clocks compare only on one host, so ranks elsewhere are never live.
  int64_t now_mono_ns = -1;
  std::string this_host;
  // Whether a process of this host still exists; null: kill(pid, 0). A SIGKILLed rank's file
  // can be fresh, but its process is gone.
  std::function<bool(int64_t pid)> pid_alive;
  // A rank that stopped (killed, or its trace ended) while ops were in flight proves a hang only
  // if they had been in flight this long when its trace ends: a healthy job stopped mid-step (a
  // time limit, scancel, the OOM killer) has ops queued on its GPU for milliseconds. The
  // recorder's default hang timeout (LOCKSTEP_HANG_TIMEOUT), whose marker also proves one.
  int64_t stuck_ns = 60'000'000'000;
  // Issue time (CLOCK_MONOTONIC of its host) of a process's op by call_index; nullopt when
  // unknown, and then a stopped rank's wait counts as a hang, as it always did. analyze() reads
  // it from the trace files when this is not set.
  std::function<std::optional<int64_t>(int proc, int64_t call_index)> issue_mono_ns;
};

// How a process's trace ends: live (still being written, on this host: its process exists and
// its last flush is fresh) or its history lost (no exit record and not live, or its recorder
// stopped); neither: the trace holds the process's whole history. The one rule RankHang's live
// and history_lost and the commands that read headers only (timeline -o, stacks) apply. The
// second form reads the clock and the host name where `opt` leaves them unset.
struct TraceEnd {
  bool live = false;
  bool lost = false;
  // Its recorder stopped recording (meta recorder_stopped, then lost too): stop_reason says why
  // (the meta's value, as the file holds it: escape it before printing).
  bool stopped = false;
  std::string stop_reason;
};
// Why the process's recorder stopped recording (meta recorder_stopped, as the file holds it:
// escape it before printing); "" when it did not stop.
std::string recorder_stop_reason(const Process& info);
TraceEnd trace_end(const Process& info, const HangOptions& opt, int64_t now_mono_ns, const std::string& this_host);
TraceEnd trace_end(const Process& info, const HangOptions& opt = {});

HangReport explain_hang(const Schedule& s, const CommIndex& idx, const HangOptions& opt = {});

}  // namespace lockstep
